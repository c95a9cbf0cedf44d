"""The ``overlap`` matcher of an all-gather along a middle dim feeding matmuls through the
rows view (DTensor sequence parallelism, ``Shard(1)``, with B > 1 sequences):

    x_r [B, S/W, H] -all_gather(dim 1)-> G [B, S, H] -reshape-> [B*S, H] -matmul(s)-> [B*S, N_i]

(any leading dims before the gather dim multiply into B, any dims between it and the last
into the block's rows). Every rank's shard is then B separate blocks of the matmul's rows:
block b of rank r is rows ``b*S + r*S/W ..`` of the gathered operand. The kernel is
overlap's ``all_gather_matmul`` with ``pk.fusion.batches = B`` on the 2-D views: the shard
X ``[B*S/W, H]`` (a free view of x_r), each weight, each result ``[B*S, N_i]``, and, when
the gathered tensor has users besides these matmuls, G ``[B*S, H]`` in its own layout
(overlap reshapes it back to ``[B, S, H]``). See patterns_gemm.build_all_gather_mm for the
kernel-level form and ag_blocks_schedule.py for the scheduled one.

Matched: 16-bit / f32 ``pk.matmul`` consumers, or fp8 ``pk.scaled_matmul`` ones (torch's
``_scaled_mm`` on the rows view) that share A's scale: tensor-wise, or row-wise as the
``[B*S, 1]`` rows view of the same gather of the shard's ``[B, Sc, 1]`` scale (torch's
async-TP gathers ``A_scale`` along A's dim), whose rows the kernel gathers with A's into
the same block layout (the kernel's SX is the shard's scale viewed ``[B*Sc, 1]``; the
scale's gather and view go). Each consumer's weight (and scales) is defined before the
first of them (the kernel is placed there; DTensor graphs
transpose the weight between the gather's view and the matmul), or, where the gathered
tensor has another user before that matmul, before the gathered tensor's first use (as
:func:`pkc.passes.overlap_match._match_all_gather` does). B = 1 (``[1, S/W, H]``) is a row
gather that collective-views rewrites into a dim-0 one before overlap runs; a gather
along the last dim (the contraction) is another matcher's.
"""

from __future__ import annotations

import math

from xdsl.dialects.builtin import TensorType
from xdsl.ir import Operation, SSAValue

from pkc.dialects import graph as g
from pkc.dialects.graph_scaled import ScaledMatmulOp
from pkc.dialects.rank_groups import same_groups
from pkc.passes.overlap_match import Match, _operand_problem, shape_of
from pkc.target.cost import BLOCK_TILE, Pattern, as_shapes, block_tile_rows


def _layout(ag: g.AllGatherOp) -> tuple[int, int, int] | None:
    """(B, Sc, H) of a gather along a middle dim with B > 1 blocks, else None."""
    if not isinstance(ag, g.AllGatherOp):
        return None
    shape, d = shape_of(ag.input), ag.dim.value.data
    if len(shape) < 3 or not 0 < d < len(shape) - 1:
        return None
    B = math.prod(shape[:d])
    if B <= 1:
        return None
    return B, math.prod(shape[d:-1]), shape[-1]


def _row_views(ag: g.AllGatherOp, rows: int, H: int) -> list[g.ReshapeOp]:
    """The reshapes of the gathered tensor into its 2-D rows view [B*S, H]."""
    return [u.operation for u in ag.result.uses if isinstance(u.operation, g.ReshapeOp)
            and shape_of(u.operation.result) == (rows, H)]


def match_gather_blocks(ag: Operation) -> Match | None:
    """The :class:`Match` of the module doc, None if ``ag`` is not such a gather or no
    matmul qualifies (:func:`blocks_near_miss` then says why)."""
    lay = _layout(ag)
    if lay is None:
        return None
    B, Sc, H = lay
    W = ag.world_size
    rows = B * W * Sc
    block = ag.parent
    views = _row_views(ag, rows, H)
    users = list(dict.fromkeys(u.operation for u in ag.result.uses))
    if block is None or not views or any(u.parent is not block for u in users):
        return None
    view_values = {v.result for v in views}
    candidates = list(dict.fromkeys(
        u.operation for v in views for u in v.result.uses
        if isinstance(u.operation, (g.MatmulOp, ScaledMatmulOp)) and u.operation.parent is block
        and u.operation.lhs in view_values and u.operation.rhs not in view_values))
    pos = block.get_operation_index
    candidates.sort(key=pos)
    # fp8: the scaled matmuls whose A scale is the first one's (tensor-wise, or the rows
    # view of the same gather of the shard's scale); unscaled ones stay as they are then
    scaled = [mm for mm in candidates if isinstance(mm, ScaledMatmulOp)]
    scale = _lhs_scale(ag, scaled[0], B, Sc) if scaled else None
    if scaled:
        mine = [(mm, _lhs_scale(ag, mm, B, Sc)) for mm in scaled] if scale else []
        candidates = [mm for mm, sx in mine if sx is not None and sx[0] is scale[0]]
    if not candidates:
        return None
    # the kernel goes before the first matmul (a DTensor graph transposes the weight
    # between the gather's view and the matmul), or, where the gathered tensor has another
    # user before that matmul, before the gather's first user
    for first in (candidates[0], min(users, key=pos)):
        limit = pos(first)
        consumers = [mm for mm in candidates if all(
            _before(v, block, limit) for v in _late_operands(mm, scale))]
        dead_views = [v for v in views if all(u.operation in consumers for u in v.result.uses)]
        others = [u.operation for u in ag.result.uses if u.operation not in dead_views]
        if consumers and all(pos(o) >= limit for o in others):
            break
    else:
        return None
    # any other use of the gathered tensor (another op, a view used elsewhere, the
    # return) needs G as a result
    gathered = bool(others)
    dt = ag.input.type.element_type
    replaced = [mm.result for mm in consumers] + ([ag.result] if gathered else [])
    types = [mm.result.type for mm in consumers] + \
        ([TensorType(dt, [rows, H])] if gathered else [])
    inputs = [ag.input, *[mm.rhs for mm in consumers]]
    views_ = [TensorType(dt, [B * Sc, H])] + [None] * len(consumers)
    dead = [*consumers, *dead_views, ag]
    if scaled:      # X, SX, B.., SB.. (patterns_scaled); SX: the shard's rows [B*Sc, 1]
        src, chain = scale
        inputs[1:1] = [src]
        views_[1:1] = [None if chain is None else TensorType(src.type.element_type,
                                                             [B * Sc, 1])]
        inputs += [mm.scale_rhs for mm in consumers]
        views_ += [None] * len(consumers)
        for op in chain or ():      # the scale's view, then its gather: gone where only
            if all(u.operation in dead for u in op.result.uses):    # the kernel read them
                dead.append(op)
    m = Match(Pattern.ALL_GATHER_MM, ag, W, inputs, views_, replaced, types,
              (rows, tuple(shape_of(mm.rhs)[1] for mm in consumers), H, 1, B),
              dead=dead, insert_before=first, gathered=gathered, batches=B,
              scaled=bool(scaled))
    m.problem = _operand_problem(*consumers)
    return m


def _lhs_scale(ag: g.AllGatherOp, mm: ScaledMatmulOp, B: int, Sc: int):
    """(the kernel's SX, the ops from it to A's scale or None) of a scaled consumer: a
    tensor-wise scale as it is; a row-wise one must be the rows view ``[B*S, 1]`` of the
    gather (same dim, ranks and groups) of the shard's ``[.., Sc.., 1]`` scale, whose
    rows the kernel gathers with A's (None: not so)."""
    s = mm.scale_lhs
    if len(shape_of(s)) == 1:
        return s, None
    view = s.owner
    sg = view.input.owner if isinstance(view, g.ReshapeOp) else None
    if not isinstance(sg, g.AllGatherOp) or sg.dim.value.data != ag.dim.value.data or \
            sg.world_size != ag.world_size or not same_groups(sg, ag) or \
            _layout(sg) != (B, Sc, 1):
        return None
    return sg.input, (view, sg)


def _late_operands(mm, scale) -> list[SSAValue]:
    """What the kernel needs of consumer ``mm`` where it runs: the weight, and a scaled
    one's scales (A's gathered one: the shard's scale it is gathered from)."""
    if not isinstance(mm, ScaledMatmulOp):
        return [mm.rhs]
    return [mm.rhs, mm.scale_rhs, scale[0]]


def blocks_remark(m: Match) -> str:
    """The fused kernel's remark on its layout and what the per-block tiling costs (the
    plan's fused time includes it: :func:`pkc.target.cost.block_tile_rows`)."""
    sh = as_shapes(m.pattern, m.shapes)
    padded = block_tile_rows(sh, m.world).M
    sc = sh.M // (m.world * sh.blocks)
    return (f"gather along a middle dim: each rank's shard is {sh.blocks} blocks of {sc} rows "
            f"(block b of rank r is rows b*{m.world * sc} + r*{sc} of the operand); each block "
            f"is tiled on its own ({BLOCK_TILE}-row tiles never span two), so the GEMM covers "
            f"{padded} rows for {sh.M} ({padded / sh.M - 1:+.1%}, in the plan's fused time)")


def _before(v: SSAValue, block, limit: int) -> bool:
    """Whether ``v`` is defined before op ``limit`` of ``block`` (or is an argument)."""
    owner = v.owner
    return not isinstance(owner, Operation) or (
        owner.parent is block and block.get_operation_index(owner) < limit)


def blocks_near_miss(ag: Operation) -> str | None:
    """Why a gather of B > 1 blocks per shard whose rows view reaches a matmul's lhs was
    not fused (None where :func:`match_gather_blocks` matched or no such matmul exists)."""
    lay = _layout(ag)
    if lay is None:
        return None
    B, Sc, H = lay
    what = f"gather along dim {ag.dim.value.data} of {list(shape_of(ag.input))} ({B} blocks " \
           "of rows per shard)"
    for u in ag.result.uses:
        view = u.operation
        if not isinstance(view, g.ReshapeOp):
            continue
        for w in view.result.uses:
            mm = w.operation
            if w.index != 0:
                continue
            if isinstance(mm, ScaledMatmulOp) and _lhs_scale(ag, mm, B, Sc) is None:
                return (f"{what} into an fp8 scaled matmul whose row-wise A scale is not the "
                        f"[{B * ag.world_size * Sc}, 1] rows view of the same gather of the "
                        f"shard's [.., {Sc}, 1] scale (the fused kernel gathers each rank's "
                        "scale rows with its rows of A)")
            if isinstance(mm, ScaledMatmulOp) and shape_of(view.result) == (
                    B * ag.world_size * Sc, H):
                return (f"{what}: the scaled matmul's weight or scales are computed after "
                        "the gathered tensor's first use (the fused kernel would run before "
                        "them)")
            if isinstance(mm, (g.MatmulOp, ScaledMatmulOp)):
                if shape_of(view.result) != (B * ag.world_size * Sc, H):
                    return (f"{what}: the view {list(shape_of(view.result))} is not the "
                            f"[{B * ag.world_size * Sc}, {H}] rows of the gathered tensor")
                return (f"{what}: the matmul's weight is computed after the gathered "
                        "tensor's first use or after another matmul of it (the fused kernel "
                        "would run before it)")
    return None


__all__ = ["blocks_near_miss", "blocks_remark", "match_gather_blocks"]
