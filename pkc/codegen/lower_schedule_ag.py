"""Lowers the schedule-level ops of :mod:`pkc.dialects.schedule_ag` (a side role by CTA
index, shared-memory overlays, tensor-map views, plain bulk copies) for sm_90a and sm_100a
(the same instructions; the GEMM's MMA path is the target's), and the
entry of a scheduled all-gather + GEMM (``pk.plan.fused_kind = "ag"``).

* ``pks.cta_partition``: ``if (ctaid >= nctaid - side) {side} else {main}``; inside
  ``main`` the tile loops stride over ``nctaid - side`` CTAs (``Lowering.tile_ctas``);
  the side region's argument is ``ctaid - (nctaid - side)``.
* ``pks.smem_overlay``: the base's arena offset (no code).
* ``pks.tmap_view``: a by-value tensor map parameter whose ``TmapArg.dims`` is the view.
* ``pks.bulk_load``: ``mbarrier.arrive.expect_tx`` + ``cp.async.bulk.shared::cluster.global``;
  ``pks.bulk_store``: ``cp.async.bulk.global.shared::cta.bulk_group`` (the u32 byte offset
  widened and added to the 64-bit pointer).

The entry is the fused GEMM's (:func:`pkc.codegen.lower_schedule_fused.lower_fused_kernel`)
with two more things in its :class:`~pkc.codegen.abi.FusedLaunch`: ``side_ctas`` (the
grid rule: the partition's side CTAs after the GEMM's) and ``peer_outputs`` (the gathered
operand, a symmetric output the peers put into: its W peer pointers). Nothing is decided
here.
"""

from __future__ import annotations

from pkc.codegen import ptx, ptx_sm90
from pkc.codegen.abi import FusedLaunchKind, ScheduledKernelMeta, TmapArg
from pkc.codegen.errors import CodegenError
from pkc.codegen.lower_schedule import (EXTRA_LOWERINGS, KERNEL_LOWERINGS, TMAP_ARGS, Lowering,
                                        _block, lower_tma_kernel)
from pkc.codegen.lower_schedule_fused import FusedExtend, check_fused_target, is_fused_kernel
from pkc.dialects import schedule_ag as ag
from pkc.dialects.kernel import KernelOp
from pkc.target.fused_tuning import FusedKind


def is_ag_kernel(kop: KernelOp) -> bool:
    if not is_fused_kernel(kop):
        return False
    kind = kop.attributes["pk.plan"].data.get("fused_kind")
    if kind is None:
        return False
    try:
        return FusedKind.parse(kind.data, f"kernel @{kop.kernel_name.data}: pk.plan.fused_kind") \
            is FusedKind.AG
    except ValueError as e:
        raise CodegenError(str(e)) from None


class _AgExtend(FusedExtend):
    """The fused kernel's parameters, plus the gathered operand's peer pointers (its
    symmetric outputs) and the side CTAs of the grid rule."""

    kind = FusedLaunchKind.AG

    def __init__(self, kop: KernelOp):
        args = list(kop.block.args)
        super().__init__(kop, peer_out=[i for i, a in enumerate(args) if a.type.symmetric])
        parts = [op for op in kop.walk() if isinstance(op, ag.CtaPartitionOp)]
        self.side = parts[0].side.data if parts else 0

    def meta(self, meta: ScheduledKernelMeta) -> None:
        super().meta(meta)
        meta.fused.side_ctas = self.side


def lower_ag_kernel(kop: KernelOp, target: str, entry_name: str):
    check_fused_target(kop, target)
    return lower_tma_kernel(kop, target, entry_name, _AgExtend(kop))


def _cta_partition(L: Lowering, op: ag.CtaPartitionOp) -> None:
    b = L.b
    cta, ctas = b.sreg("%ctaid.x"), b.sreg("%nctaid.x")
    main_ctas = b.bin("sub", "u32", ctas, op.side.data)
    then, other = b.if_else(b.setp("ge", "u32", cta, main_ctas))
    with b.at(then):
        L.vals[op.side_block.args[0]] = b.bin("sub", "u32", cta, main_ctas)
        _block(L, op.side_block)
        b.add(ptx.YieldOp())
    with b.at(other):
        outer = getattr(L, "tile_ctas", None)
        L.tile_ctas = main_ctas
        _block(L, op.main)
        L.tile_ctas = outer
        b.add(ptx.YieldOp())


def _smem_overlay(L: Lowering, op: ag.SmemOverlayOp) -> None:
    L.smem_offset[op.result] = L.smem_offset[op.base]
    L.smem_base[op.result] = L.smem_base[op.base]


def _global_addr(L: Lowering, ptr, offset) -> object:
    b = L.b
    return b.add64(b.u32_to_u64(L.v(offset)), L.v(ptr))


def _bulk_load(L: Lowering, op: ag.BulkLoadOp) -> None:
    b = L.b
    bar = L.bar_addr(op.bars, op.bar)
    n = L.v(op.nbytes)
    b.add(ptx_sm90.MbarrierArriveOp(bar, tx_bytes=n))
    b.add(ptx.CpAsyncBulkLoadOp(L.slot_addr(op.dst, op.slot), _global_addr(L, op.src, op.offset),
                                n, bar))


def _bulk_store(L: Lowering, op: ag.BulkStoreOp) -> None:
    L.b.add(ptx.CpAsyncBulkStoreOp(_global_addr(L, op.dst, op.offset),
                                   L.slot_addr(op.src, op.slot), L.v(op.nbytes)))


def _tmap_view_arg(op: ag.TmapViewOp, args) -> TmapArg:
    t = op.result.type
    return TmapArg(args.index(op.buffer), t.element.data, t.box_dims, t.swizzle.data,
                   dims=op.dim_list)


TMAP_ARGS[ag.TmapViewOp] = _tmap_view_arg
EXTRA_LOWERINGS.update({
    ag.TmapViewOp: lambda L, op: None,      # a parameter (bound with the tensor maps)
    ag.CtaPartitionOp: _cta_partition, ag.SmemOverlayOp: _smem_overlay,
    ag.BulkLoadOp: _bulk_load, ag.BulkStoreOp: _bulk_store,
})
# before the fused GEMM + collective's entry (an all-gather + GEMM is one, with more)
KERNEL_LOWERINGS.insert(0, (is_ag_kernel, lower_ag_kernel))
