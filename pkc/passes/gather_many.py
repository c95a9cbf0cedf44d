"""An all-gather feeding several matmuls, as ``schedule-fused`` schedules it: one gather
kernel, then the matmuls.

Matches a fused ``pk.kernel`` of pattern ``all_gather_mm`` with more than one matmul
(``overlap`` fuses every matmul that reads the gathered tensor into one kernel: inputs
``[x, B0, B1, ...]``, results ``[Y0, Y1, ..., (the gathered x)]``). The fused GEMM of the
schedule level (:mod:`pkc.passes.ag_gemm_schedule`) drives one weight; for several, the
kernel is replaced by a graph-level ``pk.all_gather`` lowered at once into a collective
kernel (:class:`~pkc.passes.lower_collectives.LowerCollectives`' rewrite, so that
``schedule-collectives`` schedules it next) and one graph-level ``pk.matmul`` per weight
(cuBLAS at run time, or ``schedule-matmul`` when a pipeline asks for it).

Why: gathering once and running each GEMM on the whole gathered operand was the fastest
of the measured options for this pattern on H200s (the hand fast path did the same); a
fused kernel over several weights, gathering once, is issue 20's.
"""

from __future__ import annotations

from xdsl.pattern_rewriter import PatternRewriter
from xdsl.rewriter import Rewriter

from pkc.dialects import graph as g
from pkc.dialects import kernel as k
from pkc.dialects.rank_groups import copy_groups
from pkc.passes.remarks import add_remark, remarks_of
from pkc.target.cost import Pattern


def is_gather_many(kop: k.KernelOp, pattern: Pattern | None) -> bool:
    return pattern is Pattern.ALL_GATHER_MM and len(kop.inputs) > 2


def split_gather_many(kop: k.KernelOp, target: str) -> None:
    """Replace ``kop`` by the gather kernel and one matmul per weight (see the module doc)."""
    from pkc.passes.lower_collectives import LowerCollectives, _LowerPattern

    W = kop.world_size
    x, *weights = kop.inputs
    gather = g.AllGatherOp(x, 0, W)
    copy_groups(kop, gather)
    gather.location = kop.location
    mms = []
    for b, y in zip(weights, kop.outputs):
        mm = g.MatmulOp(gather.result, b, y.type)
        mm.location = kop.location
        mms.append(mm)
    Rewriter.insert_op([gather, *mms], _before(kop))
    outs = [mm.result for mm in mms]
    if len(kop.outputs) > len(weights):         # the gathered tensor is asked for too
        outs.append(gather.result)
    for line in remarks_of(kop):
        add_remark(gather, line)
    add_remark(gather, f"all_gather + {len(weights)} matmuls over {W} ranks: one gather kernel, "
                       "then one GEMM per weight on the gathered operand (the fused GEMM "
                       "drives one weight)")
    for old, new in zip(kop.outputs, outs):
        old.replace_all_uses_with(new)
    kop.detach()
    kop.erase()
    module = gather
    while module.parent_op() is not None:
        module = module.parent_op()
    taken = {o.kernel_name.data for o in module.walk() if isinstance(o, k.KernelOp)}
    _LowerPattern(LowerCollectives(target=target), taken).match_and_rewrite(
        gather, PatternRewriter(gather))


def _before(op):
    from xdsl.rewriter import InsertPoint

    return InsertPoint.before(op)


__all__ = ["is_gather_many", "split_gather_many"]
