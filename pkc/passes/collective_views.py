"""collective-views: moves pk.reshape across collectives so that matmuls meet collectives.

Matches (W = the collective's world):
  all_reduce(reshape(x))              -> reshape(all_reduce(x))             always
  reduce_scatter(reshape(x), dim 0)   -> reshape(reduce_scatter(x, dim 0))  if x.shape[0] % W == 0
  reshape(all_gather(x, dim 0))       -> all_gather(reshape(x), dim 0)      if out.shape[0] % W == 0
                                         (equal reshapes of one gather share one new gather)
  a gather along dim d whose leading dims are all 1 (``[1, S/W, H]`` along dim 1: DTensor
  ``Shard(1)`` with one sequence) counts as one along dim 0: every shard is one
  contiguous block of the gathered tensor, as in a dim-0 gather

Why: torch's 3-d nn.Linear imports as matmul on a 2-d view followed by a reshape back, so
the collective that consumes the linear sees a reshape, not the matmul, and overlap finds
nothing to fuse. The rewrites are exact: an all-reduce is elementwise, and a dim-0
scatter or gather moves W contiguous blocks of numel/W elements, which a row-major reshape
keeps contiguous and in order as long as both shapes split dim 0 into W equal parts.
"""

from dataclasses import dataclass

from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
)

from pkc.dialects import graph as g
from pkc.dialects.rank_groups import rank_groups
from pkc.passes.registry import register_pass


def _reshape_input(op: g.AllReduceOp | g.ReduceScatterOp) -> g.ReshapeOp | None:
    owner = op.input.owner
    return owner if isinstance(owner, g.ReshapeOp) else None


class _ReshapeAfterAllReduce(RewritePattern):
    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        if not isinstance(op, g.AllReduceOp) or (view := _reshape_input(op)) is None:
            return
        reduced = g.AllReduceOp(view.input, op.world_size, op.reduce.data, rank_groups(op))
        back = g.ReshapeOp(reduced.result, op.result.type)
        _keep_location(op, reduced, back)
        rewriter.replace_op(op, [reduced, back])


class _ReshapeAfterReduceScatter(RewritePattern):
    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        if not isinstance(op, g.ReduceScatterOp) or op.dim.value.data != 0:
            return
        view = _reshape_input(op)
        if view is None or view.input.type.get_shape()[0] % op.world_size:
            return
        scattered = g.ReduceScatterOp(view.input, 0, op.world_size, op.reduce.data, rank_groups(op))
        back = g.ReshapeOp(scattered.result, op.result.type)
        _keep_location(op, scattered, back)
        rewriter.replace_op(op, [scattered, back])


class _ReshapeBeforeAllGather(RewritePattern):
    """Several equal reshapes of one gather (the 2-d views of a 3-d activation that feeds
    several linear layers) become ONE gather of the reshaped shard: the first rewrite's
    gather is reused by the later ones, so that overlap sees one gather with several
    matmuls (gathered once) instead of one gather per matmul."""

    def __init__(self) -> None:
        self.made: dict[tuple[int, TensorType], g.AllGatherOp] = {}

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        if not isinstance(op, g.ReshapeOp) or not isinstance(op.input.owner, g.AllGatherOp):
            return
        gather = op.input.owner
        out = op.result.type
        w = gather.world_size
        lead = gather.input.type.get_shape()[:gather.dim.value.data]
        if any(d != 1 for d in lead) or out.get_shape()[0] % w:
            return      # (dims before the gathered one all 1: contiguous shards, as dim 0)
        earlier = self.made.get((id(gather), out))
        if earlier is not None and _before(earlier, op):
            rewriter.replace_op(op, [], [earlier.result])
            return
        shard = TensorType(out.element_type, (out.get_shape()[0] // w, *out.get_shape()[1:]))
        view = g.ReshapeOp(gather.input, shard)
        gathered = g.AllGatherOp(view.result, 0, w, rank_groups(gather))
        _keep_location(gather, view, gathered)
        rewriter.replace_op(op, [view, gathered])
        self.made[(id(gather), out)] = gathered


def _before(a, b) -> bool:
    """``a`` is still in ``b``'s block and comes before it (so its result dominates b)."""
    block = b.parent
    return a.parent is block and block is not None and \
        block.get_operation_index(a) < block.get_operation_index(b)


def _keep_location(old, *new) -> None:
    for op in new:
        op.location = old.location


@register_pass
@dataclass(frozen=True)
class CollectiveViews(ModulePass):
    """Move pk.reshape across collectives so that matmuls meet collectives (exact)."""

    name = "collective-views"

    def apply(self, ctx, op: ModuleOp) -> None:
        patterns = [_ReshapeAfterAllReduce(), _ReshapeAfterReduceScatter(), _ReshapeBeforeAllGather()]
        PatternRewriteWalker(GreedyRewritePatternApplier(patterns)).rewrite_module(op)
