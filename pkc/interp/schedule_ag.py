"""Interpreter rules of the side-role ops (:mod:`pkc.dialects.schedule_ag`, first used by
the fused all-gather + GEMM): the grid split by CTA index, shared-memory overlays, tensor
maps over a view of a buffer, and bulk (``cp.async.bulk``) copies between global and
shared memory.

* ``pks.cta_partition``: the last ``side`` CTAs of the grid run the side region (with
  their index among them), the others the main region, whose tile loops stride over the
  main CTAs only. The interpreter's grid is the GEMM's plus ``side``.
* ``pks.smem_overlay``: slots of their own for the CTA (the overlay's memory is the
  GEMM's stages, which a side CTA never uses: the aliasing itself is not modelled).
* ``pks.bulk_load``: an arrival with expect-tx on the mbarrier, then a copy the copy engine
  completes later (as a TMA load); the global bytes must be ordered before it (a peer's
  shard read before its signal is an error).
* ``pks.bulk_store``: reads the slot until ``pks.bulk_wait`` completes the group; the
  global write is a bulk write (ordered for other ranks after the wait, a
  ``pks.fence_async_global`` and a release).
"""

from __future__ import annotations

from collections.abc import Generator

import torch

from pkc.dialects import schedule_ag as ag
from pkc.interp.schedule_ops import BulkDone, Tmap
from pkc.interp.schedule_rules import blocking, kernel_level, simple
from pkc.interp.schedule_state import Actor, Read, Smem, TmaLoad, Write
from pkc.interp.schedule_world import Ptr, uniform
from pkc.interp.values import InterpError


@blocking(ag.CtaPartitionOp)
def _cta_partition(R, a: Actor, op: ag.CtaPartitionOp, env) -> Generator:
    main = R.ctas - op.side.data
    if main < 1:
        raise InterpError(f"{a.at(op)}: {op.side.data} side CTAs leave no main CTA in a grid "
                          f"of {R.ctas}")
    if a.cta >= main:
        yield from R.run_block(a, op.side_block, env, [a.cta - main])
        return
    saved = a.loop_ctas
    a.loop_ctas = main
    try:
        yield from R.run_block(a, op.main, env)
    finally:
        a.loop_ctas = saved


@simple(ag.SmemOverlayOp)
def _smem_overlay(R, a: Actor, op: ag.SmemOverlayOp, env) -> bool:
    objs = R.cta_objs[a.rank, a.cta]
    sm = objs.get(op.result)
    if sm is None:
        hint = op.result.name_hint
        sm = objs[op.result] = Smem(f"{'%' + hint if hint else 'the overlay'} {op.result.type} "
                                    f"of CTA {a.cta}", op.count.data, op.bytes.data)
    env[op.result] = sm
    return False


@kernel_level(ag.TmapViewOp)
def _tmap_view(R, op: ag.TmapViewOp, env) -> None:
    env[op.result] = Tmap(op, op.buffer.type, op.dim_list)


def _bulk_range(R, a: Actor, op, ptr: Ptr, offset, nbytes, smem: Smem, slot: int):
    """(global buffer, its words, byte count) of one bulk copy, checked."""
    off = uniform(a, op, ptr.off, "the address") + uniform(a, op, offset, "the offset")
    n = uniform(a, op, nbytes, "the size")
    if off % 16 or n % 16 or n <= 0:
        raise InterpError(f"{a.at(op)}: {n} bytes at byte {off}: bulk copies move whole "
                          "16-byte units at 16-byte aligned addresses")
    smem.check_range(a.at(op), slot, 0, n)
    g = R.gbuf(ptr.buf, ptr.rank)
    return g, g.word_index(a, op, torch.tensor([off]), n)[0], n


@simple(ag.BulkLoadOp)
def _bulk_load(R, a: Actor, op: ag.BulkLoadOp, env) -> bool:
    at = a.at(op)
    dst: Smem = env[op.dst]
    slot = uniform(a, op, env[op.slot], "the slot")
    g, words, n = _bulk_range(R, a, op, env[op.src], env[op.offset], env[op.nbytes], dst, slot)
    g.check_read(a, at, words)
    dst.check_write(a, at, slot, 0, n)
    bar = R._bar(a, op, env, op.bars, op.bar)
    bar.arrive(a, op, n)
    a.clock[a.aid] += 1
    rec = Write(0, n, op, at, pending=True)
    dst.begin_write(slot, rec)
    data = g.words

    def box() -> torch.Tensor:
        return data[words].clone()

    R.loads.append(TmaLoad(op, at, box, [(dst, slot, rec, bar)]))
    R.version += 1
    return True


@simple(ag.BulkStoreOp)
def _bulk_store(R, a: Actor, op: ag.BulkStoreOp, env) -> bool:
    at = a.at(op)
    src: Smem = env[op.src]
    slot = uniform(a, op, env[op.slot], "the slot")
    g, words, n = _bulk_range(R, a, op, env[op.dst], env[op.offset], env[op.nbytes], src, slot)
    src.check_read(a, at, slot, 0, n, async_proxy=True)
    a.bulk_issued += 1
    key = R.memory.kid(("bulk", a.aid), f"the TMA writes of {a.describe()}")
    g.write(a, at, words, src.bytes(slot, 0, n).view(torch.int32), key, a.bulk_issued)
    a.bulk_open.append(BulkDone(a, a.bulk_issued))
    rec = Read(0, n, op, at, a.aid, "TMA store")
    src.add_read(slot, rec)
    a.bulk_open.append(rec)
    R.version += 1
    return True


__all__: list[str] = []
