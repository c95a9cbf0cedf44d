"""An all-gather feeding several matmuls, as ``schedule-fused`` schedules it: one gather
kernel, then the matmuls. With ``pk.fusion.batches`` = B > 1 (a gather along a middle
dim, overlap_gather_blocks.py) the gather is the ``[B, Sc, H]`` shard's along dim 1, between
two free 2-D views, so the matmuls read the gathered tensor in its own layout.

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

from xdsl.dialects.builtin import TensorType
from xdsl.pattern_rewriter import PatternRewriter
from xdsl.rewriter import Rewriter

from pkc.dialects import graph as g
from pkc.dialects import kernel as k
from pkc.dialects.rank_groups import copy_groups
from pkc.passes.ag_blocks_schedule import batches_of
from pkc.passes.remarks import add_remark, remarks_of
from pkc.target.cost import Pattern


def is_gather_many(kop: k.KernelOp, pattern: Pattern | None) -> bool:
    return pattern is Pattern.ALL_GATHER_MM and len(kop.inputs) > 2


def split_gather_many(kop: k.KernelOp, target: str) -> None:
    """Replace ``kop`` by the gather kernel and one matmul per weight (see the module doc)."""
    from pkc.passes.lower_collectives import LowerCollectives, _LowerPattern

    W = kop.world_size
    x, *weights = kop.inputs
    views = []
    blocks = batches_of(kop)
    if blocks > 1:      # B blocks of rows per shard: a gather along dim 1 of [B, Sc, H]
        (mc, h), et = x.type.get_shape(), x.type.element_type
        views.append(g.ReshapeOp(x, TensorType(et, [blocks, mc // blocks, h])))
        x = views[0].result
    gather = g.AllGatherOp(x, 1 if blocks > 1 else 0, W)
    copy_groups(kop, gather)
    rows = gather.result
    if blocks > 1:
        views.append(g.ReshapeOp(rows, TensorType(et, [W * mc, h])))
        rows = views[-1].result
    mms = []
    for b, y in zip(weights, kop.outputs):
        mm = g.MatmulOp(rows, b, y.type)
        mms.append(mm)
    for op in [gather, *views, *mms]:
        op.location = kop.location
    Rewriter.insert_op([*views[:1], gather, *views[1:], *mms], _before(kop))
    outs = [mm.result for mm in mms]
    if len(kop.outputs) > len(weights):         # the gathered tensor is asked for too
        outs.append(rows)
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
