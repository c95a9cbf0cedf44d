"""lower-collectives: graph-level collectives -> ``pk.kernel`` of puts and signals.

Matches every ``pk.all_reduce``, ``pk.all_gather``, ``pk.reduce_scatter`` and
``pk.all_to_all`` still in the program (overlap has fused the ones it wanted) and replaces
it with one ``pk.kernel`` holding one ``"communicate"`` worker that moves tiles with
``pk.put`` into symmetric buffers and synchronizes with ``pk.signal`` / ``pk.wait``.

Layout. Every buffer of a lowered collective is a 3-d view ``rows x slots x cols`` of the
per-rank tensor: the middle axis indexes the W chunks (or the W ranks a slot came from) and
is 1 where a tensor is not chunked. The views are pure row-major reshapes placed around the
kernel at graph level (``pk.reshape``, free): for a collective along dim d of a shape S,
rows = prod(S[:d]) and a chunk's cols = prod(S[d:]) (/ W where S[d] is split), so "chunk c"
is ``buf[:, c, :]`` for any rank and any dim (all_reduce, elementwise, splits its shape
where the trailing dims fill one tile's width). Keeping the chunk axis separate means a tile
never straddles two chunks, so shapes need not divide the tile: tiles ``tr x 1 x tc``
overhang the buffer's end, loads read zeros there and stores / puts drop it (TMA's rules).
The one case that is not a reshape is an all_to_all whose split_dim differs from its
concat_dim: it is moved through a ``pk.transpose`` (chunk axis first) before the kernel and
one after it (chunk axis to concat_dim), with the kernel on a ``1 x W x chunk`` view; those
transposes are copies when run (a strided-TMA lowering could avoid them later).

Tiles: ``tc = min(cols, 8192)`` elements, ``tr = min(rows, 128, max(1, 8192 // tc))``
(options ``tile_rows`` / ``tile_cols`` override), about 16 KiB of bf16 per tile: one
``cp.async.bulk`` each, small enough that many are in flight. Independent tiles are spread
over the worker's SMs with ``pk.foreach``; peers and ring steps are ``scf.for`` loops; peers
are visited in rank-rotated order (rank r visits r, r + 1, ..., r + W - 1 mod W, itself
first) so that ranks do not all hit one peer at once.

Algorithms (chosen from the cost model, pkc.target, by message size unless forced):

* all_reduce one_shot: every rank puts its whole tensor into slot r of every peer's
  ``staging`` (W x tensor), signals each peer once; waits for W arrivals; sums the W slots.
* all_reduce two_shot: tile t belongs to rank c when c*T/W <= t < (c+1)*T/W (T tiles).
  Reduce-scatter phase: every rank puts the tiles of chunk c into slot r of rank c's
  ``staging`` and signals c (also when c owns no tile, so counts always reach W); rank c
  waits for W arrivals and sums its tiles. All-gather
  phase: rank c puts each summed tile into every peer's (symmetric) output, signals each
  peer; everyone waits for W arrivals.
* all_gather direct: every rank puts its shard into slot r of every peer's output.
  all_gather ring: W-1 steps; at step s rank r forwards shard r - s (its own at step 0,
  stored locally too) to rank r + 1 and signals it; it waits for step s's arrival first.
* reduce_scatter direct: rank r puts chunk p into slot r of peer p's ``staging``; after W
  arrivals each rank sums its W slots. Staging slots then a local sum, not ``put ... add``
  into an accumulator: atomic adds land in arrival order, so their float sum would not be
  reproducible. reduce_scatter ring: W-1 steps of partial sums (in the accumulation type,
  f32 for 16-bit floats) forwarded to rank r + 1, one slot per step.
* all_to_all direct: rank r puts chunk p into slot r of peer p's output.

Reductions are exact: the direct and two-shot sums take the slots in rank order 0..W-1,
convert to f32 (f64 for f64, integers as they are), and round once, which is what the
graph-level op (and the interpreter) does, so results are bitwise equal. The ring
reduce-scatter sums chunk c in ring order c+1, ..., W-1, 0, ..., c (in f32, rounded once):
deterministic and reproducible, but equal to the graph-level op only up to f32
reassociation, so it is compared with a tolerance.

Every kernel records its decision: ``pk.plan`` (collective, algorithm, predicted times of
every alternative in seconds, message and link bytes, tile shape) and two remarks, e.g.
``all_reduce 256 KiB over 8 ranks: two-shot 10.3 us (one-shot 12.2 us)``. Symmetric
scratch buffers are fresh per kernel (pk.alloc), so no entry barrier is emitted; a runtime
that reuses them across calls must fence between calls. sm-partition sets the worker's SMs.

The code: this module holds the pass, its rewrite pattern (the choice of algorithm by the
cost model) and the decision records; the views around the kernel are in
collective_layout.py and the kernel with its algorithms in collective_kernels.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
)

from pkc.dialects import graph as g
from pkc.dialects import kernel as k
from pkc.dialects.rank_groups import copy_groups, group_remark
from pkc.ir import diagnostic_at, op_position
from pkc.passes.collective_kernels import build_kernel
from pkc.passes.collective_layout import (
    TILE_ELEMENTS,
    TILE_MAX_ROWS,
    Layout,
    accumulation_type,
    element_bytes_of,
    layout_of,
)
from pkc.passes.registry import register_pass
from pkc.passes.remarks import add_remark, remarks_of, set_plan
from pkc.target import cost
from pkc.target.collectives import Algorithm, Collective
from pkc.target.targets import get_target

# Importable from here, as before the split (tests, gather_many.py).
__all__ = ["ALGORITHMS", "TILE_ELEMENTS", "TILE_MAX_ROWS", "Layout", "LowerCollectives",
           "layout_of"]

ALGORITHMS = {
    Collective.ALL_REDUCE: (Algorithm.ONE_SHOT, Algorithm.TWO_SHOT),
    Collective.ALL_GATHER: (Algorithm.DIRECT, Algorithm.RING),
    Collective.REDUCE_SCATTER: (Algorithm.DIRECT, Algorithm.RING),
    Collective.ALL_TO_ALL: (Algorithm.DIRECT,),
}
# the collectives with an option forcing their algorithm (all_to_all has one algorithm)
_FORCEABLE = (Collective.ALL_REDUCE, Collective.ALL_GATHER, Collective.REDUCE_SCATTER)


# ----------------------------------------------------------------------------------------
# The pass


@register_pass
@dataclass(frozen=True)
class LowerCollectives(ModulePass):
    """Lower graph-level collectives to pk.kernel puts and signals over symmetric buffers."""

    name = "lower-collectives"
    target: str = "h200"
    all_reduce: str = "auto"
    all_gather: str = "auto"
    reduce_scatter: str = "auto"
    tile_rows: int = 0
    tile_cols: int = 0
    # A collective over one rank is the identity: it is removed (with a remark) unless
    # this is set (tests of the kernels themselves lower W = 1 too).
    keep_single_rank: bool = False

    def __post_init__(self):
        get_target(self.target)  # ValueError naming the known targets
        for coll in _FORCEABLE:
            algo = _normalize(getattr(self, coll))
            if algo != "auto" and algo not in ALGORITHMS[coll]:
                known = ", ".join(("auto", *ALGORITHMS[coll]))
                raise ValueError(f"{coll}={getattr(self, coll)!r} is not one of {known}")
        if self.tile_rows < 0 or self.tile_cols < 0:
            raise ValueError("tile_rows and tile_cols must be >= 0 (0 = choose)")

    def forced(self, collective: Collective) -> Algorithm | None:
        """The algorithm the options force for ``collective`` (None: chosen by cost)."""
        algo = _normalize(getattr(self, collective, "auto"))
        return None if algo == "auto" else Algorithm(algo)

    def apply(self, ctx, op: ModuleOp) -> None:
        taken = {kop.kernel_name.data for kop in op.walk() if isinstance(kop, k.KernelOp)}
        pattern = _LowerPattern(self, taken)
        PatternRewriteWalker(GreedyRewritePatternApplier([pattern]),
                             apply_recursively=False).rewrite_module(op)


def _remove_single_rank(op: Operation, rewriter: PatternRewriter) -> None:
    """Over one rank every collective returns its input (the verifier makes the types
    equal), so no kernel is launched for it. The remark goes to the op that defined the
    input (or the function, for an argument), naming the removed collective's line."""
    holder = op.input.owner if isinstance(op.input.owner, Operation) else op.parent_op()
    file, line, col = op_position(op)
    where = f" at {file}:{line}:{col}" if line is not None else ""
    if holder is not None:
        for text in remarks_of(op):  # earlier passes' word on it survives
            add_remark(holder, f"{op.name}{where}: {text}")
        add_remark(holder, f"removed {op.name}{where}: over 1 rank it is the identity "
                           "(no kernel launched)")
    rewriter.replace(op, [], [op.input])


def _normalize(name: str) -> str:
    return name.strip().lower().replace("-", "_")


class _LowerPattern(RewritePattern):
    """Rewrites one collective: graph-level views, the kernel, the decision records."""

    def __init__(self, options: LowerCollectives, taken: set[str]):
        self.options, self.taken = options, taken

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, g.COLLECTIVE_OPS):
            return
        if op.world_size == 1 and not self.options.keep_single_rank:
            _remove_single_rank(op, rewriter)
            return
        lay = layout_of(op)
        choice = self._choose(op, lay)
        glue: list[Operation] = []
        x = lay.pre(glue, op.input)
        _name_new(glue, "view")
        tiles = self._tiles(lay)
        kernel = build_kernel(self._name(lay.collective, choice.kind), op, lay, choice.kind,
                               tiles, x)
        copy_groups(op, kernel)  # over sub-groups: the same kernel, launched per group
        glue.append(kernel)
        kernel.outputs[0].name_hint = "lowered"
        n = len(glue)
        result = lay.post(glue, kernel.outputs[0], op.result.type)
        _name_new(glue[n:], "unview")
        result.name_hint = op.result.name_hint
        for line in remarks_of(op):  # earlier passes' word on this collective survives
            add_remark(kernel, line)
        _record(kernel, op, lay, choice, tiles, self.options)
        if (note := group_remark(kernel)) is not None:
            add_remark(kernel, note)
        for new in glue:  # diagnostics and remarks point at the user's collective
            new.location = op.location
        rewriter.replace(op, glue, [result])

    def _choose(self, op, lay: "Layout") -> cost.Choice:
        t = get_target(self.options.target)
        if not 1 <= lay.world <= t.max_gpus:
            raise diagnostic_at(op, f"lower-collectives: world {lay.world} is outside the "
                                    f"NVLink domain of {t.name} (1..{t.max_gpus} GPUs)")
        times = _model_times(t, lay)
        forced = self.options.forced(lay.collective)
        if forced is not None:
            return cost.Choice(forced, times[forced], times)
        best = min(times.values())
        kind = next(a for a, v in times.items() if v <= best * (1 + 1e-9))
        return cost.Choice(kind, times[kind], times)

    def _tiles(self, lay: "Layout") -> tuple[int, int]:
        tc = min(lay.cols, self.options.tile_cols or TILE_ELEMENTS)
        default_rows = min(TILE_MAX_ROWS, max(1, TILE_ELEMENTS // tc))
        tr = min(lay.rows, self.options.tile_rows or default_rows)
        return tr, tc

    def _name(self, collective: Collective, algo: Algorithm) -> str:
        base, n = f"{collective}_{algo}", 0
        name = base
        while name in self.taken:
            n += 1
            name = f"{base}_{n}"
        self.taken.add(name)
        return name


def _name_new(ops: Sequence[Operation], hint: str) -> None:
    for op in ops:
        if op.results and op.results[0].name_hint is None:
            op.results[0].name_hint = hint


_CHOOSERS = {
    Collective.ALL_REDUCE: cost.choose_all_reduce,
    Collective.ALL_GATHER: cost.choose_all_gather,
    Collective.REDUCE_SCATTER: cost.choose_reduce_scatter,
    Collective.ALL_TO_ALL: cost.choose_all_to_all,
}


def _model_times(t, lay: "Layout") -> dict[Algorithm, float]:
    """Predicted time of each algorithm this pass can emit (the cost model also rates a
    ring all-reduce, which is not lowered: at W = 2 it is two-shot in two steps)."""
    alternatives = _CHOOSERS[lay.collective](t, lay.message_bytes, lay.world).alternatives
    return {a: alternatives[a] for a in ALGORITHMS[lay.collective]}


# ----------------------------------------------------------------------------------------
# Decision records


def _link_bytes(lay: Layout, algo: Algorithm) -> int:
    """Bytes one rank puts to other ranks (its NVLink traffic, one direction)."""
    W, n = lay.world, lay.message_bytes
    if algo is Algorithm.ONE_SHOT:
        return (W - 1) * n
    if algo is Algorithm.TWO_SHOT:
        return 2 * (W - 1) * n // W
    if lay.collective is Collective.REDUCE_SCATTER and algo is Algorithm.RING:
        acc = element_bytes_of(accumulation_type(lay.element))
        return (W - 1) * n // W * acc // lay.element_bytes
    return (W - 1) * n // W


def _record(kernel: k.KernelOp, op: Operation, lay: Layout, choice: cost.Choice,
            tiles: tuple[int, int], options: LowerCollectives) -> None:
    forced = options.forced(lay.collective) is not None
    tr, tc = tiles
    grid = (-(-lay.rows // tr), -(-lay.cols // tc))
    set_plan(kernel, collective=lay.collective, algorithm=choice.kind, forced=forced,
             target=options.target, predicted_time=choice.time,
             **{f"time_{a}": v for a, v in choice.alternatives.items()},
             message_bytes=lay.message_bytes, link_bytes=_link_bytes(lay, choice.kind),
             tile_rows=tr, tile_cols=tc, tiles=grid[0] * grid[1],
             tile_bytes=tr * tc * lay.element_bytes)
    add_remark(kernel, _decision_remark(lay, choice, forced))
    add_remark(kernel, f"{op.input.type} as {lay.in_view[0]}x{lay.in_view[1]}x{lay.in_view[2]} "
                       f"view; tiles {tr}x1x{tc}, {grid[0]}x{grid[1]} per chunk")


def _decision_remark(lay: Layout, choice: cost.Choice, forced: bool) -> str:
    def label(a: Algorithm) -> str:
        return a.replace("_", "-")

    others = ", ".join(f"{label(a)} {_us(v)}" for a, v in choice.alternatives.items()
                       if a != choice.kind)
    text = (f"{lay.collective} {_size(lay.message_bytes)} over {lay.world} ranks: "
            f"{label(choice.kind)} {_us(choice.time)}")
    if forced:
        text += ", forced"
    return text + (f" ({others})" if others else "")


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.3g} us"


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.4g} {unit}"
    return f"{nbytes} B"
