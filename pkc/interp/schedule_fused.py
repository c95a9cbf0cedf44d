"""Interpreter rules of the fused GEMM + collective ops (:mod:`pkc.dialects.schedule_fused`):
peer tensor maps, the chunked persistent tile loop, TMA store-or-reduce-add into a rank's
copy of a symmetric output, the async-proxy global fence and counted signals.

A TMA write to global memory (``pks.tma_store_or_add``) is recorded under the warpgroup's
bulk key (:mod:`pkc.interp.schedule_world`): it is ordered before another rank's access
only once a ``pks.bulk_wait`` completed it, a ``pks.fence_async_global`` followed and a
release signal published the clock. A reduce-add into words no store wrote, or not
ordered after the owner's store, is an error naming the op, rank, CTA and role.
"""

from __future__ import annotations

from collections.abc import Generator

import torch

from pkc.dialects import schedule_fused as f
from pkc.interp.schedule_comm import signal_add
from pkc.interp.schedule_ops import Tmap, grouped_tile
from pkc.interp.schedule_rules import blocking, kernel_level, simple
from pkc.interp.schedule_state import Actor, Read, Smem
from pkc.interp.schedule_world import uniform
from pkc.interp.values import InterpError


class PeerTmap(Tmap):
    """A tensor map over rank ``peer``'s copy of a symmetric kernel buffer."""

    def __init__(self, op: f.PeerTmapOp):
        super().__init__(op, op.buffer.type)
        self.peer = op.peer.data


@kernel_level(f.PeerTmapOp)
def _peer_tmap(R, op: f.PeerTmapOp, env) -> None:
    if op.peer.data >= R.world:
        raise InterpError(f"{op.name} of rank {op.peer.data} in a world of {R.world} ranks")
    env[op.result] = PeerTmap(op)


@simple(f.TmapSelectOp)
def _tmap_select(R, a: Actor, op: f.TmapSelectOp, env) -> bool:
    i = uniform(a, op, env[op.index], "the map index")
    if not 0 <= i < len(op.tmaps):
        raise InterpError(f"{a.at(op)}: map index {i} outside 0..{len(op.tmaps) - 1}")
    env[op.result] = env[op.tmaps[i]]
    return False


@blocking(f.ChunkTileLoopOp)
def _chunk_tile_loop(R, a: Actor, op: f.ChunkTileLoopOp, env) -> Generator:
    """Tile t of this CTA (cta, cta + grid, ...): slot t / tiles, chunk (first + slot) mod
    chunks, grouped order inside the chunk (ChunkTileLoopOp's doc)."""
    bm, bn, gm, chunks = op.bm.data, op.bn.data, op.group_m.data, op.chunks.data
    if R.cluster != 1:
        raise InterpError(f"{a.at(op)}: a chunked tile loop in clusters of {R.cluster}")
    num_m, num_n = -(-env[op.m] // bm), -(-env[op.n] // bn)
    tiles = num_m * num_n
    first = uniform(a, op, env[op.first], "the first chunk")
    carried = [env[v] for v in op.inits]
    for t in range(a.cta, chunks * tiles, R.ctas):
        chunk = (first + t // tiles) % chunks
        mb, nb = grouped_tile(t % tiles, num_m, num_n, gm)
        R._count()
        carried = yield from R.run_block(a, op.block, env, [mb * bm, nb * bn, chunk, *carried])
    for res, v in zip(op.res, carried):
        env[res] = v


class _BulkDone:
    """A marker in the warpgroup's bulk group: ``pks.bulk_wait`` completing the group
    (it sets ``epoch``) completes the global write ``seq``."""

    def __init__(self, a: Actor, seq: int):
        self.a, self.seq = a, seq

    @property
    def epoch(self):
        return None

    @epoch.setter
    def epoch(self, _value) -> None:
        self.a.bulk_done = max(self.a.bulk_done, self.seq)


@simple(f.TmaStoreOrAddOp)
def _tma_store_or_add(R, a: Actor, op: f.TmaStoreOrAddOp, env) -> bool:
    tm: Tmap = env[op.tmap]
    src: Smem = env[op.src]
    slot, at = env[op.slot], a.at(op)
    add = bool(uniform(a, op, env[op.add], "the add flag"))
    coords = [uniform(a, op, env[x], "a coordinate") for x in op.coords]
    src.check_range(at, slot, 0, tm.box_bytes)
    src.check_read(a, at, slot, 0, tm.box_bytes, async_proxy=True)
    box = src.bytes(slot, 0, tm.box_bytes).view(tm.dtype).view(tm.box)
    rank = getattr(tm, "peer", a.rank)
    dst = R.data[tm.buffer][rank]
    bs, ts = tm.window(coords, dst.shape)
    elems = torch.arange(dst.numel()).view(dst.shape)[bs].reshape(-1)
    if elems.numel():
        g = R.gbuf(tm.buffer, rank)
        words = torch.unique(elems * dst.element_size() // 4)
        a.bulk_issued += 1
        key = R.memory.kid(("bulk", a.aid), f"the TMA writes of {a.describe()}")
        if add:
            g.note_add(a, at, words, key, a.bulk_issued)
            dst[bs] = (dst[bs].float() + box[ts].float()).to(dst.dtype)
        else:
            g.write(a, at, words, g.words[words].clone(), key, a.bulk_issued)
            dst[bs] = box[ts]
        a.bulk_open.append(_BulkDone(a, a.bulk_issued))
        R.version += 1
    rec = Read(0, tm.box_bytes, op, at, a.aid, "TMA store")
    src.add_read(slot, rec)
    a.bulk_open.append(rec)
    return True


@simple(f.FenceAsyncGlobalOp)
def _fence_async_global(R, a: Actor, op, env) -> bool:
    """Completed bulk writes are ordered before this thread's later operations."""
    a.clock[("bulk", a.aid)] = a.bulk_done
    return False


@simple(f.SignalAddOp)
def _signal_add(R, a: Actor, op: f.SignalAddOp, env) -> bool:
    return signal_add(R, a, op, env[op.pad], env[op.slot], env[op.value], op.sem.data)


__all__ = ["PeerTmap"]
