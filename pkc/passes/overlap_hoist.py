"""Before ``overlap`` matches an all-gather: move the independent ops that compute a later
consumer's operands ahead of the gathered tensor's first use, so that every matmul of the
gather joins the one fused kernel (which runs where the first use was).

What it matches: a ``pk.all_gather`` whose result - directly or through one ``pk.reshape``
(a linear layer's rows view, a gather along K or along a middle dim) - is the lhs of a
``pk.matmul`` / ``pk.scaled_matmul`` that comes after the gathered tensor's first user,
while that matmul's other operands (the weight, the scales) are computed after that first
user, e.g. ``y1 = g @ w1; w2t = w2.t(); y2 = g @ w2t``.

What it produces: the same function with those operands' producers - the ops of their
backward slice that sit after the first user - moved, in program order, to just before it.
Nothing moves unless every op of the slice is a pure graph-level computation (matmul,
elementwise map, constant, reduction, view, concat) that does not read the gathered tensor,
directly or through other ops: a collective or a kernel never moves, so every rank issues
its collectives in the same order as before, and an opaque torch op (which may have effects)
never moves.

Why: torch programs often compute the second weight (a transpose, a cast, a scale) between
the two matmuls; the matchers fuse only consumers whose operands exist where the kernel is
placed, so without this only the first matmul fused and the second re-read the gathered
tensor from memory. Graph-level ops are pure, so computing them earlier keeps the meaning
(the interpreter checks it: tests/unit/test_overlap_hoist.py).
"""

from __future__ import annotations

from xdsl.ir import Block, Operation, SSAValue

from pkc.dialects import graph as g
from pkc.dialects.graph_scaled import ScaledMatmulOp

_PURE = (g.MatmulOp, ScaledMatmulOp, g.MapOp, g.ConstantOp, g.ReduceOp, g.ReshapeOp,
         g.TransposeOp, g.BroadcastOp, g.SliceOp, g.ConcatOp)
_MATMULS = (g.MatmulOp, ScaledMatmulOp)


def hoist_gather_operands(ag: g.AllGatherOp) -> int:
    """Moves the producers of later consumers' operands before ``ag``'s first use (see
    the module doc); returns how many ops moved."""
    block = ag.parent
    gathered = ag.result
    users = [u.operation for u in gathered.uses]
    if block is None or not users or any(u.parent is not block for u in users):
        return 0
    first = min(users, key=block.get_operation_index)
    consumers = set()
    for u in users:
        if isinstance(u, g.ReshapeOp):
            consumers.update(w.operation for w in u.result.uses)
        else:
            consumers.add(u)
    consumers = sorted((c for c in consumers if c.parent is block),
                       key=block.get_operation_index)
    moved = 0
    for mm in consumers:
        limit = block.get_operation_index(first)
        if not _reads_gathered_lhs(mm, gathered) or block.get_operation_index(mm) <= limit:
            continue
        late = _late_slice(mm.operands[1:], block, limit, gathered)
        for op in sorted(late or (), key=block.get_operation_index):
            op.detach()
            block.insert_op_before(op, first)
            moved += 1
    return moved


def _reads_gathered_lhs(op: Operation, gathered: SSAValue) -> bool:
    if not isinstance(op, _MATMULS):
        return False
    lhs = op.lhs
    return lhs == gathered or (isinstance(lhs.owner, g.ReshapeOp) and lhs.owner.input == gathered)


def _late_slice(values, block: Block, limit: int, gathered: SSAValue) -> set[Operation] | None:
    """The ops after index ``limit`` of ``block`` that compute ``values`` (transitively);
    None when one of them cannot move (reads the gathered tensor, is not pure, or lies
    outside the block)."""
    out: set[Operation] = set()
    stack = list(values)
    while stack:
        v = stack.pop()
        if v == gathered:
            return None
        op = v.owner
        if not isinstance(op, Operation) or op in out:
            continue                      # a block argument, or seen
        if op.parent is not block:
            return None
        if block.get_operation_index(op) < limit:
            continue
        if not isinstance(op, _PURE):
            return None
        out.add(op)
        stack.extend(op.operands)
    return out


__all__ = ["hoist_gather_operands"]
