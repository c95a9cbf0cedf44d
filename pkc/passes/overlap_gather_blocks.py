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

Matched: 16-bit / f32 ``pk.matmul`` consumers (not fp8 ``pk.scaled_matmul``: their
row-wise scales would need the same block layout; left unfused with a remark) whose
weight is defined before the first of them (the kernel is placed there; DTensor graphs
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
        if isinstance(u.operation, g.MatmulOp) and u.operation.parent is block
        and u.operation.lhs in view_values and u.operation.rhs not in view_values))
    if not candidates:
        return None
    pos = block.get_operation_index
    candidates.sort(key=pos)
    # the kernel goes before the first matmul (a DTensor graph transposes the weight
    # between the gather's view and the matmul), or, where the gathered tensor has another
    # user before that matmul, before the gather's first user
    for first in (candidates[0], min(users, key=pos)):
        limit = pos(first)
        consumers = [mm for mm in candidates if _before(mm.rhs, block, limit)]
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
    m = Match(Pattern.ALL_GATHER_MM, ag, W, inputs,
              [TensorType(dt, [B * Sc, H])] + [None] * len(consumers), replaced, types,
              (rows, tuple(shape_of(mm.rhs)[1] for mm in consumers), H, 1, B),
              dead=[*consumers, *dead_views, ag], insert_before=first, gathered=gathered,
              batches=B)
    m.problem = _operand_problem(*consumers)
    return m


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
            if isinstance(mm, ScaledMatmulOp):
                return (f"{what} into an fp8 scaled matmul: the fused fp8 kernel gathers "
                        "contiguous shards only (row-wise scales in the block layout are "
                        "not built)")
            if isinstance(mm, g.MatmulOp):
                if shape_of(view.result) != (B * ag.world_size * Sc, H):
                    return (f"{what}: the view {list(shape_of(view.result))} is not the "
                            f"[{B * ag.world_size * Sc}, {H}] rows of the gathered tensor")
                return (f"{what}: the matmul's weight is computed after the gathered "
                        "tensor's first use or after another matmul of it (the fused kernel "
                        "would run before it)")
    return None


__all__ = ["blocks_near_miss", "blocks_remark", "match_gather_blocks"]
