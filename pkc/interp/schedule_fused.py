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
from pkc.interp.schedule_ops import Tmap, acc_value, bulk_write, grouped_tile
from pkc.interp.schedule_rules import blocking, kernel_level, simple
from pkc.interp.schedule_state import Actor, Read, Smem, Write
from pkc.interp.schedule_world import uniform
from pkc.interp.values import InterpError, where


@kernel_level(f.PeerTmapOp, f.RowsTmapOp)
def _peer_tmap(R, op, env) -> None:
    """A map over rank ``peer``'s copy (-1: this rank's) of a buffer, or (rows_tmap) over
    its rows ``first .. first + rows``: coordinates start at ``first``, boxes are clipped
    at its last row."""
    shape = op.buffer.type.get_shape()
    if op.peer.data >= R.world:
        raise InterpError(f"{where(op)} of rank {op.peer.data} in a world of {R.world} ranks")
    dims = getattr(op, "dim_list", None)      # pks.peer_tmap's row-major view
    tm = Tmap(op, op.buffer.type, dims) if dims else Tmap(op, op.buffer.type)
    tm.peer = op.peer.data
    if isinstance(op, f.RowsTmapOp):
        a, n = op.first.data, op.rows.data
        if a < 0 or a + n > shape[0]:
            raise InterpError(f"{where(op)}: rows {a}..{a + n} outside {op.buffer.type}")
        tm.rows = slice(a, a + n)
    env[op.result] = tm


@simple(f.AccAddSmemOp)
def _acc_add_smem(R, a: Actor, op: f.AccAddSmemOp, env) -> bool:
    """The 64 x width piece in the slot += the accumulator's piece, in f32, rounded once."""
    acc = env[op.acc]
    sl, col, w = op.slice.data, op.col.data, op.width.data
    dt = {"bf16": torch.bfloat16, "f16": torch.float16}[op.dtype.data]
    dst: Smem = env[op.dst]
    slot, at = env[op.slot], a.at(op)
    n = 64 * w * dt.itemsize
    dst.check_range(at, slot, 0, n)
    dst.check_read(a, at, slot, 0, n, async_proxy=False)
    dst.check_write(a, at, slot, 0, n)
    old = dst.bytes(slot, 0, n).view(dt).view(64, w).float()
    piece = acc_value(a, op, acc)[64 * sl:64 * (sl + 1), col:col + w]
    payload = (old + piece).to(dt).contiguous().view(-1).view(torch.uint8)
    rec = Write(0, n, op, at, actor=a.aid, epoch=a.epoch, fenced=False)
    dst.finish_write(slot, rec, payload)
    a.unfenced.append(rec)
    return True


@simple(f.TmapSelectOp)
def _tmap_select(R, a: Actor, op: f.TmapSelectOp, env) -> bool:
    i = uniform(a, op, env[op.index], "the map index")
    if not 0 <= i < len(op.tmaps):
        raise InterpError(f"{a.at(op)}: map index {i} outside 0..{len(op.tmaps) - 1}")
    env[op.result] = env[op.tmaps[i]]
    return False


@simple(f.ScaleSelectOp)
def _scale_select(R, a: Actor, op: f.ScaleSelectOp, env) -> bool:
    """The selected kernel buffer itself (its SSA value: readers look it up in R.data)."""
    i = uniform(a, op, env[op.index], "the scale index")
    if not 0 <= i < len(op.scales):
        raise InterpError(f"{a.at(op)}: scale index {i} outside 0..{len(op.scales) - 1}")
    env[op.result] = op.scales[i]
    return False


@blocking(f.ChunkTileLoopOp)
def _chunk_tile_loop(R, a: Actor, op: f.ChunkTileLoopOp, env) -> Generator:
    """Tile t of this CTA (cluster: cta / cluster, += clusters): slot t / tiles, chunk
    (first + slot) mod chunks, grouped order inside the chunk, a cluster's CTAs on
    vertically adjacent tiles (ChunkTileLoopOp's doc, pks.tile_loop's clusters)."""
    bm, bn, gm, chunks = op.bm.data, op.bn.data, op.group_m.data, op.chunks.data
    cl = R.cluster
    num_m, num_n = f.chunk_tiles(env[op.m], env[op.n], bm, bn, cl)
    num_mc = num_m // cl            # the grouped order is over the clusters' rows
    tiles = num_mc * num_n
    first = uniform(a, op, env[op.first], "the first chunk")
    carried = [env[v] for v in op.inits]
    for t in range(a.cta // cl, chunks * tiles, (a.loop_ctas or R.ctas) // cl):
        chunk = (first + t // tiles) % chunks
        mc, nb = grouped_tile(t % tiles, num_mc, num_n, gm)
        mb = mc * cl + a.cta % cl
        R._count()
        carried = yield from R.run_block(a, op.block, env, [mb * bm, nb * bn, chunk, *carried])
    for res, v in zip(op.res, carried):
        env[res] = v


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
    bulk_write(R, a, at, tm, coords, box, add)
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


__all__: list[str] = []
