"""Lowers the scheduled MoE kernel (``pk.plan.schedule = "moe"``, built by
``schedule-moe``) to a ``ptx.entry`` for sm_90a or sm_100a (the GEMM's MMA path is the
target's; the ops below are the same instructions on both).

The entry is the scheduled GEMM's (tensor maps by value, one pointer per kernel buffer;
:func:`~pkc.codegen.lower_schedule.lower_tma_kernel`) plus the parameters of a
:class:`~pkc.codegen.abi.FusedLaunch` of kind ``moe``: the W peer pointers of each
symmetric ``pk.alloc`` (signal pad, count array), those of the expert operand (a
symmetric output the dispatch stores into: ``peer_outputs``), the allocs' own pointers,
the epoch control word, rank, error record, timeout, mailbox, trap; bound to the
registers the collectives' lowering reads (:class:`CommState`), so that ``pks.ptr``,
``pks.vec_*``, ``pks.signal*`` and ``pks.epoch`` lower as in a collective. Nothing is
decided here.

* ``pks.grouped_tile_loop``: an outer loop over the block slots (the count read with a
  relaxed GPU-scope load, clipped to the capacity; the slot's tiles ``[base, base +
  tiles)``) around an inner loop over this CTA's tiles of the slot (the first ``t >= base``
  with ``t = cta (mod grid)``, step grid): each CTA reads every count once per loop, and
  the carried values of the body pass through both loops.
* ``pks.word_load``: ``ld.relaxed.gpu.global.u32``; ``pks.word_store``: ``st.global.u32``.
"""

from __future__ import annotations

from pkc.codegen import ptx
from pkc.codegen.abi import FusedLaunchKind, ScheduledKernelMeta
from pkc.codegen.errors import CodegenError
from pkc.codegen.lower_schedule import (EXTRA_LOWERINGS, KERNEL_LOWERINGS, Lowering, _block,
                                        lower_tma_kernel)
from pkc.codegen.lower_schedule_fused import (FusedExtend, check_fused_target, const_int,
                                              plan_schedule)
from pkc.dialects import schedule_moe as m
from pkc.dialects.kernel import KernelOp
from pkc.dialects.plan import ScheduleKind


def is_moe_kernel(kop: KernelOp) -> bool:
    return kop.schedule() is not None and plan_schedule(kop) is ScheduleKind.MOE


class _MoeExtend(FusedExtend):
    """The MoE kernel's additions: the expert operand's peer pointers (a symmetric output
    peers store into; the result is written through peer tensor maps only) and the grid
    rule's tile count from the grouped tile loop."""

    kind = FusedLaunchKind.MOE

    def __init__(self, kop: KernelOp):
        n_in, args = len(kop.inputs), list(kop.block.args)
        super().__init__(kop, peer_out=[i for i in range(n_in, len(args))
                                        if args[i].type.symmetric and i != n_in])
        loops = [op for op in kop.walk() if isinstance(op, m.GroupedTileLoopOp)]
        if not loops:
            raise CodegenError(f"kernel @{kop.kernel_name.data}: an MoE kernel without a "
                               "pks.grouped_tile_loop")
        self.loop = loops[0]

    def tiles(self) -> int:
        op = self.loop
        n = const_int(op.n)
        if n is None:
            raise CodegenError(f"kernel @{self.kop.kernel_name.data}: the grouped tile loop's N "
                               "must be a constant (the grid rule counts its tiles)")
        # the most tiles there can be (every block full): the grid's bound
        return (op.experts.data * op.sources.data * -(-op.capacity.data // op.bm.data)
                * -(-n // op.bn.data))


def lower_moe_kernel(kop: KernelOp, target: str, entry_name: str
                     ) -> tuple[ptx.EntryOp, ScheduledKernelMeta]:
    """The ``ptx.entry`` and launch metadata of a scheduled MoE kernel."""
    check_fused_target(kop, target)
    return lower_tma_kernel(kop, target, entry_name, _MoeExtend(kop))


def _grouped_tile_loop(L: Lowering, op: m.GroupedTileLoopOp) -> None:
    b = L.b
    bm, bn = op.bm.data, op.bn.data
    E, S, C = op.experts.data, op.sources.data, op.capacity.data
    cta, ctas = b.sreg("%ctaid.x"), b.sreg("%nctaid.x")
    num_n = b.bin("div", "u32", b.add32(L.v(op.n), bn - 1), bn)
    counts, first = L.v(op.counts), L.v(op.first)
    outer, ob = b.for_carried(0, E * S, 1, [b.u32(0), *[L.v(x) for x in op.inits]], "u32")
    slot, base, *carried = ob.args
    with b.at(ob):
        j = b.bin("div", "u32", slot, E)
        e = b.bin("sub", "u32", slot, b.mul32(j, E))
        src = b.add32(first, j)
        src = b.selp("b32", b.bin("sub", "u32", src, S), src, b.setp("ge", "u32", src, S))
        idx = b.add32(b.mul32(e, S), src)
        addr = b.add64(b.bin("mul.wide", "u32", idx, 4, result_kind="b64"), counts)
        cnt = b.bin("min", "u32", b.ld("global", "u32", addr, sem="relaxed", scope="gpu"), C)
        mt = b.bin("div", "u32", b.add32(cnt, bm - 1), bm)
        end = b.add32(base, b.mul32(mt, num_n))
        # this CTA's first tile of the slot: the least t >= base with t = cta (mod grid)
        lag = b.bin("rem", "u32", b.bin("sub", "u32", b.add32(cta, ctas),
                                         b.bin("rem", "u32", base, ctas)), ctas)
        inner, ib = b.for_carried(b.add32(base, lag), end, ctas, carried, "u32")
        t, *ic = ib.args
        with b.at(ib):
            local = b.bin("sub", "u32", t, base)
            mi = b.bin("rem", "u32", local, mt)
            ni = b.bin("div", "u32", local, mt)
            m0, n0, ev, sv, *args = op.block.args
            L.vals[m0] = b.mul32(mi, bm)
            L.vals[n0] = b.mul32(ni, bn)
            L.vals[ev] = e
            L.vals[sv] = src
            for a, c in zip(args, ic):
                L.vals[a] = c
            _block(L, op.block)
        b.add(ptx.YieldOp([end, *inner.res]))
    for res, val in zip(op.res, list(outer.res)[1:]):
        L.vals[res] = val


def _word_load(L: Lowering, op: m.WordLoadOp) -> None:
    b = L.b
    addr = b.add64(b.bin("mul.wide", "u32", L.v(op.index), 4, result_kind="b64"), L.v(op.ptr))
    L.vals[op.result] = b.ld("global", "u32", addr, sem="relaxed", scope="gpu")


def _word_store(L: Lowering, op: m.WordStoreOp) -> None:
    b = L.b
    addr = b.add64(b.bin("mul.wide", "u32", L.v(op.index), 4, result_kind="b64"), L.v(op.ptr))
    b.st("global", "u32", addr, L.v(op.value))


EXTRA_LOWERINGS.update({
    m.GroupedTileLoopOp: _grouped_tile_loop, m.WordLoadOp: _word_load,
    m.WordStoreOp: _word_store,
})
KERNEL_LOWERINGS.insert(0, (is_moe_kernel, lower_moe_kernel))
