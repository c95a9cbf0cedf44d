"""The importer's clean-up of an imported block: collectives along other dims made one
collective (torch's all_gather -> split -> cat and split -> cat -> reduce_scatter), then
dead pure ops dropped."""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import func
from xdsl.ir import Block, SSAValue

from pkc.dialects import graph as g
from pkc.dialects.rank_groups import rank_groups


# ====================================================================================
# Clean-up after import


def _slice_of(v: SSAValue) -> tuple[SSAValue, int, int, int] | None:
    op = v.owner
    if isinstance(op, g.SliceOp) and op.step.value.data == 1:
        return op.input, op.dim.value.data, op.start.value.data, op.end.value.data
    return None


def _equal_chunks(parts: Sequence[SSAValue], world: int) -> tuple[SSAValue, int] | None:
    """(source, dim) if ``parts`` are the W equal chunks of one value, in order."""
    if len(parts) != world:
        return None
    first = _slice_of(parts[0])
    if first is None:
        return None
    src, dim, _, _ = first
    size = tuple(src.type.get_shape())[dim]  # type: ignore[attr-defined]
    if size % world:
        return None
    n = size // world
    for i, p in enumerate(parts):
        s = _slice_of(p)
        if s is None or s[0] is not src or s[1] != dim or (s[2], s[3]) != (i * n, (i + 1) * n):
            return None
    return src, dim


def simplify_collectives(block: Block) -> None:
    """Canonicalize collectives along other dims, then drop dead ops.

    torch expresses a gather/scatter along dim d as ``all_gather(dim 0) -> split(dim 0) ->
    cat(dim d)`` and ``split(dim d) -> cat(dim 0) -> reduce_scatter(dim 0)`` (DTensor's
    sequence parallelism does); pk has these as one collective with ``dim = d``.
    """
    for op in list(block.ops):
        if isinstance(op, g.ConcatOp):
            parts = list(op.inputs)
            first = _slice_of(parts[0]) if parts else None
            if first is None or not isinstance(first[0].owner, g.AllGatherOp):
                continue
            ag = first[0].owner
            world = ag.world_size
            chunks = _equal_chunks(parts, world)
            if chunks is None or chunks[1] != 0 or ag.dim.value.data != 0:
                continue
            dim = op.dim.value.data
            new = g.AllGatherOp(ag.input, dim, world, rank_groups(ag))
            if new.result.type != op.result.type:
                continue
            new.location = ag.location
            block.insert_op_before(new, op)
            op.result.replace_all_uses_with(new.result)
        elif isinstance(op, g.ReduceScatterOp) and op.dim.value.data == 0:
            cat = op.input.owner
            if not isinstance(cat, g.ConcatOp) or cat.dim.value.data != 0:
                continue
            chunks = _equal_chunks(list(cat.inputs), op.world_size)
            if chunks is None:
                continue
            src, dim = chunks
            new = g.ReduceScatterOp(src, dim, op.world_size, op.reduce.data, rank_groups(op))
            if new.result.type != op.result.type:
                continue
            new.location = op.location
            block.insert_op_before(new, op)
            op.result.replace_all_uses_with(new.result)
    # Dead code: pure graph ops (collectives included: they are functional) without uses.
    for op in reversed(list(block.ops)):
        if isinstance(op, (func.ReturnOp, g.OpaqueOp)):
            continue
        if all(not r.uses for r in op.results):
            op.detach()
            op.erase()


