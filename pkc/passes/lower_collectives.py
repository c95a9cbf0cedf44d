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
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    Float64Type,
    IndexType,
    IntegerType,
    ModuleOp,
    TensorType,
    f32,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
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
from pkc.dialects.types import SYMMETRIC, LOCAL, BufferType, TileType
from pkc.ir import diagnostic_at, op_position
from pkc.passes.registry import register_pass
from pkc.passes.remarks import add_remark, remarks_of, set_plan
from pkc.target import cost
from pkc.target.collectives import Algorithm, Collective
from pkc.target.targets import get_target

TILE_ELEMENTS = 8192  # elements per tile at most (16 KiB of bf16)
TILE_MAX_ROWS = 128
ALGORITHMS = {
    Collective.ALL_REDUCE: (Algorithm.ONE_SHOT, Algorithm.TWO_SHOT),
    Collective.ALL_GATHER: (Algorithm.DIRECT, Algorithm.RING),
    Collective.REDUCE_SCATTER: (Algorithm.DIRECT, Algorithm.RING),
    Collective.ALL_TO_ALL: (Algorithm.DIRECT,),
}
# the collectives with an option forcing their algorithm (all_to_all has one algorithm)
_FORCEABLE = (Collective.ALL_REDUCE, Collective.ALL_GATHER, Collective.REDUCE_SCATTER)
COMBINE = {"sum": "add", "max": "maximum", "min": "minimum"}

Index = SSAValue | int


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
        kernel = _build_kernel(self._name(lay.collective, choice.kind), op, lay, choice.kind,
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
# Graph-level layout: the 3-d views around the kernel


@dataclass
class Layout:
    """How one collective is viewed: chunks of rows x cols, W or 1 of them per buffer."""

    collective: Collective
    world: int
    element: Attribute
    rows: int          # rows of one chunk
    cols: int          # columns of one chunk
    in_slots: int      # middle axis of the input view (1 or W)
    out_slots: int     # middle axis of the output view
    in_perm: Sequence[int] | None = None    # all_to_all across dims: the transposes
    in_split: Sequence[int] | None = None
    out_chunk: Sequence[int] | None = None
    out_perm: Sequence[int] | None = None

    @property
    def in_view(self) -> tuple[int, int, int]:
        return (self.rows, self.in_slots, self.cols)

    @property
    def out_view(self) -> tuple[int, int, int]:
        return (self.rows, self.out_slots, self.cols)

    @property
    def element_bytes(self) -> int:
        return _element_bytes(self.element)

    @property
    def message_bytes(self) -> int:
        """The size the cost model is given: the tensor on each rank (all_reduce), the full
        gathered / scattered tensor (all_gather / reduce_scatter), all a rank sends
        (all_to_all)."""
        slots = max(self.in_slots, self.out_slots)
        return self.rows * slots * self.cols * self.element_bytes

    def pre(self, glue: list[Operation], x: SSAValue) -> SSAValue:
        if self.in_perm is not None:
            x = _reshape(glue, x, self.in_split)
            x = _transpose(glue, x, self.in_perm)
        return _reshape(glue, x, self.in_view)

    def post(self, glue: list[Operation], y: SSAValue, result_type: TensorType) -> SSAValue:
        if self.out_perm is not None:
            y = _reshape(glue, y, (self.world, *self.out_chunk))
            y = _transpose(glue, y, self.out_perm)
        return _reshape(glue, y, result_type.get_shape())


def layout_of(op: Operation) -> "Layout":
    """The 3-d views (rows x slots x cols) a collective is lowered on; see the module doc."""
    S = list(op.input.type.get_shape())
    W, elem = op.world_size, op.input.type.element_type
    if isinstance(op, g.AllReduceOp):
        d = _widest_rows(S)
        return Layout(Collective.ALL_REDUCE, W, elem, _prod(S[:d]), _prod(S[d:]), 1, 1)
    if isinstance(op, g.AllGatherOp):
        d = op.dim.value.data
        return Layout(Collective.ALL_GATHER, W, elem, _prod(S[:d]), _prod(S[d:]), 1, W)
    if isinstance(op, g.ReduceScatterOp):
        d = op.dim.value.data
        return Layout(Collective.REDUCE_SCATTER, W, elem, _prod(S[:d]), _prod(S[d:]) // W, W, 1)
    sd, cd = op.split_dim.value.data, op.concat_dim.value.data
    if sd == cd:
        return Layout(Collective.ALL_TO_ALL, W, elem, _prod(S[:sd]), _prod(S[sd:]) // W, W, W)
    return _all_to_all_across_dims(W, elem, S, sd, cd)


def _widest_rows(S: Sequence[int]) -> int:
    """An elementwise collective may split its shape anywhere: rows of the trailing dims
    whose product fits one tile's width (at least the last dim), so tiles are large."""
    d = len(S) - 1
    while d > 0 and _prod(S[d - 1:]) <= TILE_ELEMENTS:
        d -= 1
    return d


def _all_to_all_across_dims(W: int, elem, S: list[int], sd: int, cd: int) -> Layout:
    """Chunk axis to the front (x as S[:sd] + (W, S[sd]/W) + S[sd+1:], transposed), the
    kernel on 1 x W x chunk, then the source axis moved in front of concat_dim."""
    chunk = [*S[:sd], S[sd] // W, *S[sd + 1:]]
    split = [*S[:sd], W, S[sd] // W, *S[sd + 1:]]
    in_perm = [sd, *[i for i in range(len(split)) if i != sd]]
    out_perm = [*range(1, cd + 1), 0, *range(cd + 1, len(chunk) + 1)]
    def moved(perm):  # None when the transpose would not move anything
        return None if perm == sorted(perm) else perm

    return Layout(Collective.ALL_TO_ALL, W, elem, 1, _prod(chunk), W, W,
                  in_perm=moved(in_perm), in_split=split, out_chunk=chunk,
                  out_perm=moved(out_perm))


def _prod(xs: Sequence[int]) -> int:
    return math.prod(xs) if xs else 1


def _reshape(glue: list[Operation], v: SSAValue, shape: Sequence[int]) -> SSAValue:
    t = v.type
    if tuple(t.get_shape()) == tuple(shape):
        return v
    op = g.ReshapeOp(v, TensorType(t.element_type, list(shape)))
    glue.append(op)
    return op.result


def _transpose(glue: list[Operation], v: SSAValue, perm: Sequence[int]) -> SSAValue:
    if list(perm) == sorted(perm):
        return v
    op = g.TransposeOp(v, list(perm))
    glue.append(op)
    return op.result


def _element_bytes(t: Attribute) -> int:
    if isinstance(t, (BFloat16Type, Float16Type)):
        return 2
    if isinstance(t, Float32Type):
        return 4
    if isinstance(t, Float64Type):
        return 8
    assert isinstance(t, IntegerType)
    return max(1, t.width.data // 8)


def _accumulation_type(t: Attribute) -> Attribute:
    """Where sums happen: f32 for 16/32-bit floats, f64 for f64, integers as they are."""
    return f32 if isinstance(t, (BFloat16Type, Float16Type)) else t


# ----------------------------------------------------------------------------------------
# Kernel-level IR building


class _Builder:
    """Appends ops to the current block; index constants are hoisted to the worker's top."""

    def __init__(self, block: Block):
        self.blocks = [block]
        self.constants: dict[int, arith.ConstantOp] = {}

    def emit(self, op: Operation) -> Operation:
        self.blocks[-1].add_op(op)
        return op

    def c(self, v: Index) -> SSAValue:
        if isinstance(v, SSAValue):
            return v
        if v not in self.constants:
            self.constants[v] = arith.ConstantOp.from_int_and_width(v, IndexType())
            self.constants[v].result.name_hint = f"c{v}"
        return self.constants[v].result

    def hoist_constants(self, block: Block) -> None:
        ops = [self.constants[v] for v in sorted(self.constants)]
        if block.first_op is None:
            block.add_ops(ops)
        else:
            block.insert_ops_before(ops, block.first_op)

    # index math, folded where both sides are known
    def add(self, a: Index, b: Index) -> Index:
        if isinstance(a, int) and isinstance(b, int):
            return a + b
        if b == 0 or a == 0:
            return a if b == 0 else b
        return self.emit(arith.AddiOp(self.c(a), self.c(b))).result

    def sub(self, a: Index, b: Index) -> Index:
        if isinstance(a, int) and isinstance(b, int):
            return a - b
        return a if b == 0 else self.emit(arith.SubiOp(self.c(a), self.c(b))).result

    def mul(self, a: Index, b: Index) -> Index:
        if isinstance(a, int) and isinstance(b, int):
            return a * b
        if a == 1 or b == 1:
            return a if b == 1 else b
        return self.emit(arith.MuliOp(self.c(a), self.c(b))).result

    def div(self, a: Index, b: Index) -> Index:
        if isinstance(a, int) and isinstance(b, int):
            return a // b
        return a if b == 1 else self.emit(arith.DivUIOp(self.c(a), self.c(b))).result

    def rem(self, a: Index, b: Index) -> Index:
        if isinstance(a, int) and isinstance(b, int):
            return a % b
        return 0 if b == 1 else self.emit(arith.RemUIOp(self.c(a), self.c(b))).result

    @contextmanager
    def into(self, block: Block):
        self.blocks.append(block)
        try:
            yield
        finally:
            self.blocks.pop()

    def loop(self, lb: Index, ub: Index, body: Callable, init: Sequence[SSAValue] = (),
             step: Index = 1, iv: str | None = None) -> Sequence[SSAValue]:
        """scf.for lb..ub; body(iv, *carried) returns the values carried to the next trip.
        A loop that never runs (both bounds known) is not emitted."""
        if isinstance(lb, int) and isinstance(ub, int) and lb >= ub:
            return list(init)
        block = Block(arg_types=[IndexType(), *[v.type for v in init]])
        block.args[0].name_hint = iv
        with self.into(block):
            carried = body(block.args[0], *block.args[1:]) or []
            self.emit(scf.YieldOp(*carried))
        op = scf.ForOp(self.c(lb), self.c(ub), self.c(step), list(init), Region(block))
        return self.emit(op).results

    def foreach(self, grid: Sequence[int], body: Callable) -> None:
        """pk.foreach over `grid`: independent iterations spread over the worker's SMs."""
        block = Block(arg_types=[IndexType()] * len(grid))
        with self.into(block):
            body(*block.args)
            self.emit(k.YieldOp())
        self.emit(k.ForeachOp(list(grid), Region(block)))


def _named(v: Index, hint: str) -> Index:
    if isinstance(v, SSAValue) and v.name_hint is None:
        v.name_hint = hint
    return v


@dataclass
class _Kernel:
    """What an algorithm needs while it writes the worker's body."""

    b: _Builder
    lay: Layout
    tr: int
    tc: int
    inp: SSAValue
    out: SSAValue
    rank: SSAValue
    signals: SSAValue | None = None
    combine: str = "add"

    @property
    def W(self) -> int:
        return self.lay.world

    @property
    def grid(self) -> tuple[int, int]:
        return (-(-self.lay.rows // self.tr), -(-self.lay.cols // self.tc))

    def tile(self, element: Attribute | None = None) -> TileType:
        return TileType((self.tr, 1, self.tc), element or self.lay.element)

    def each_tile(self, body: Callable[[Index, Index], None]) -> None:
        """body(row, col) for every tile of a chunk, as a pk.foreach."""
        nr, nc = self.grid

        def at(i, j):
            i.name_hint, j.name_hint = "i", "j"
            body(_named(self.b.mul(i, self.tr) if nr > 1 else 0, "row"),
                 _named(self.b.mul(j, self.tc) if nc > 1 else 0, "col"))

        self.b.foreach(self.grid, at)

    def tile_at(self, t: Index) -> tuple[Index, Index]:
        """(row, col) of the t-th tile of a chunk, row-major over the tile grid."""
        nr, nc = self.grid
        i = self.b.div(t, nc) if nr > 1 else 0  # t < nc when there is one row of tiles
        j = (self.b.rem(t, nc) if nr > 1 else t) if nc > 1 else 0
        row, col = self.b.mul(i, self.tr), self.b.mul(j, self.tc)
        return _named(row, "row"), _named(col, "col")

    def each_peer(self, body: Callable[[Index], None]) -> None:
        """body(peer) for peer = rank, rank+1, ... (mod W): rank-rotated order."""
        self.b.loop(0, self.W, lambda i: body(_named(self.b.rem(self.b.add(self.rank, i), self.W),
                                                     "peer")), iv="p")

    def ring(self, ahead: int) -> Index:
        """(rank + ahead) mod W."""
        return _named(self.b.rem(self.b.add(self.rank, ahead % self.W), self.W), "next")

    # tile ops
    def load(self, buf: SSAValue, row: Index, slot: Index, col: Index, peer=None,
             element: Attribute | None = None) -> SSAValue:
        t = self.tile(element or buf.type.element_type)
        idx = [self.b.c(row), self.b.c(slot), self.b.c(col)]
        op = k.LoadOp(buf, idx, t, self.b.c(peer) if peer is not None else None)
        return _named(self.b.emit(op).result, "tile")

    def store(self, tile: SSAValue, buf: SSAValue, row: Index, slot: Index, col: Index) -> None:
        self.b.emit(k.StoreOp(tile, buf, [self.b.c(row), self.b.c(slot), self.b.c(col)]))

    def put(self, tile: SSAValue, buf: SSAValue, row: Index, slot: Index, col: Index,
            peer: Index) -> None:
        idx = [self.b.c(row), self.b.c(slot), self.b.c(col)]
        self.b.emit(k.PutOp(tile, buf, idx, self.b.c(peer)))

    def signal(self, slot: int, peer: Index) -> None:
        self.b.emit(k.SignalOp(self.signals, self.b.c(slot), self.b.c(peer)))

    def wait(self, slot: int, count: Index) -> None:
        self.b.emit(k.WaitOp(self.signals, self.b.c(slot), self.b.c(count)))

    def cast(self, tile: SSAValue, element: Attribute) -> SSAValue:
        if tile.type.element_type == element:
            return tile
        return self.b.emit(k.TileMapOp("cast", [tile], self.tile(element))).result

    def combine_tiles(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.b.emit(k.TileMapOp(self.combine, [a, b], a.type)).result

    def reduce_slots(self, buf: SSAValue, row: Index, col: Index) -> SSAValue:
        """Slots 0..W-1 of `buf` at (row, col) combined in rank order, in the accumulation
        type, rounded once to the element type."""
        acc_t = _accumulation_type(self.lay.element)
        first = self.cast(self.load(buf, row, 0, col), acc_t)

        def step(src, acc):
            return [self.combine_tiles(acc, self.cast(self.load(buf, row, src, col), acc_t))]

        total = self.b.loop(1, self.W, step, [first], iv="src")[0] if self.W > 1 else first
        return _named(self.cast(total, self.lay.element), "sum")


def _build_kernel(name: str, op: Operation, lay: Layout, algo: Algorithm, tiles: tuple[int, int],
                  x: SSAValue) -> k.KernelOp:
    """pk.kernel @name(x) with one communicate worker running `algo`."""
    symmetric_out = (lay.collective, algo) in _SYMMETRIC_OUTPUT
    in_buf = BufferType(lay.in_view, lay.element)
    out_buf = BufferType(lay.out_view, lay.element, SYMMETRIC if symmetric_out else LOCAL)
    body = Block(arg_types=[in_buf, out_buf])
    body.args[0].name_hint, body.args[1].name_hint = "in", "out"
    worker = Block()
    b = _Builder(worker)
    rank = _named(b.emit(k.RankOp()).result, "rank")
    kern = _Kernel(b, lay, *tiles, body.args[0], body.args[1], rank,
                   combine=COMBINE.get(getattr(op, "reduce", None) and op.reduce.data, "add"))
    allocs = _ALGORITHMS[(lay.collective, algo)](kern)
    b.emit(k.YieldOp())
    b.hoist_constants(worker)
    body.add_ops([*allocs, k.WorkerOp(k.WorkerRole.COMMUNICATE, Region(worker)), k.YieldOp()])
    out_type = TensorType(lay.element, list(lay.out_view))
    return k.KernelOp(name, lay.world, [x], [out_type], Region(body))


def _alloc(shape: Sequence[int], element: Attribute, hint: str = "staging") -> k.AllocOp:
    op = k.AllocOp(BufferType(shape, element, SYMMETRIC))
    op.result.name_hint = hint
    return op


def _with_signals(kern: _Kernel, count: int) -> k.AllocSignalsOp:
    op = k.AllocSignalsOp(count)
    op.result.name_hint = "arrived"
    kern.signals = op.result
    return op


# ----------------------------------------------------------------------------------------
# The algorithms. Each writes the worker's body and returns the kernel-level allocations.


def _all_reduce_one_shot(kern: _Kernel) -> list[Operation]:
    staging = _alloc((kern.lay.rows, kern.W, kern.lay.cols), kern.lay.element)
    sig = _with_signals(kern, 1)

    def send(row, col):
        x = kern.load(kern.inp, row, 0, col)
        kern.each_peer(lambda peer: kern.put(x, staging.result, row, kern.rank, col, peer))

    kern.each_tile(send)
    kern.each_peer(lambda peer: kern.signal(0, peer))
    kern.wait(0, kern.W)
    kern.each_tile(lambda row, col: kern.store(
        kern.reduce_slots(staging.result, row, col), kern.out, row, 0, col))
    return [staging, sig]


def _all_reduce_two_shot(kern: _Kernel) -> list[Operation]:
    b, W = kern.b, kern.W
    staging = _alloc((kern.lay.rows, W, kern.lay.cols), kern.lay.element)
    sig = _with_signals(kern, 2)
    T = kern.grid[0] * kern.grid[1]

    def bounds(owner: Index) -> tuple[Index, Index]:
        return (_named(b.div(b.mul(owner, T), W), "first"),
                _named(b.div(b.mul(b.add(owner, 1), T), W), "end"))

    def scatter(peer):
        def put_tile(t):
            row, col = kern.tile_at(t)
            kern.put(kern.load(kern.inp, row, 0, col), staging.result, row, kern.rank, col, peer)
        b.loop(*bounds(peer), put_tile, iv="t")
        kern.signal(0, peer)

    def reduce_and_gather(t):
        row, col = kern.tile_at(t)
        total = kern.reduce_slots(staging.result, row, col)
        kern.each_peer(lambda peer: kern.put(total, kern.out, row, 0, col, peer))

    kern.each_peer(scatter)
    kern.wait(0, W)
    b.loop(*bounds(kern.rank), reduce_and_gather, iv="t")
    kern.each_peer(lambda peer: kern.signal(1, peer))
    kern.wait(1, W)
    return [staging, sig]


def _all_gather_direct(kern: _Kernel) -> list[Operation]:
    sig = _with_signals(kern, 1)

    def send(row, col):
        x = kern.load(kern.inp, row, 0, col)
        kern.each_peer(lambda peer: kern.put(x, kern.out, row, kern.rank, col, peer))

    kern.each_tile(send)
    kern.each_peer(lambda peer: kern.signal(0, peer))
    kern.wait(0, kern.W)
    return [sig]


def _all_gather_ring(kern: _Kernel) -> list[Operation]:
    b, W = kern.b, kern.W
    sig = _with_signals(kern, 1)
    nxt = kern.ring(1)

    def first(row, col):
        x = kern.load(kern.inp, row, 0, col)
        kern.store(x, kern.out, row, kern.rank, col)
        if W > 1:
            kern.put(x, kern.out, row, kern.rank, col, nxt)

    def forward(s):
        kern.wait(0, s)
        shard = _named(b.rem(b.sub(b.add(kern.rank, W), s), W), "shard")
        kern.each_tile(lambda row, col: kern.put(
            kern.load(kern.out, row, shard, col), kern.out, row, shard, col, nxt))
        kern.signal(0, nxt)

    kern.each_tile(first)
    if W > 1:
        kern.signal(0, nxt)
        b.loop(1, W - 1, forward, iv="s")
        kern.wait(0, W - 1)
    return [sig]


def _reduce_scatter_direct(kern: _Kernel) -> list[Operation]:
    staging = _alloc((kern.lay.rows, kern.W, kern.lay.cols), kern.lay.element)
    sig = _with_signals(kern, 1)

    def scatter(peer):
        kern.each_tile(lambda row, col: kern.put(
            kern.load(kern.inp, row, peer, col), staging.result, row, kern.rank, col, peer))
        kern.signal(0, peer)

    kern.each_peer(scatter)
    kern.wait(0, kern.W)
    kern.each_tile(lambda row, col: kern.store(
        kern.reduce_slots(staging.result, row, col), kern.out, row, 0, col))
    return [staging, sig]


def _reduce_scatter_ring(kern: _Kernel) -> list[Operation]:
    """Step s: rank r sends partial(chunk r-s-1) = received(s-1) + own to rank r+1."""
    b, W, lay = kern.b, kern.W, kern.lay
    acc_t = _accumulation_type(lay.element)
    ring = _alloc((lay.rows, max(1, W - 1), lay.cols), acc_t, "partials")
    sig = _with_signals(kern, 1)
    nxt = kern.ring(1)

    def own(row, chunk, col):
        return kern.cast(kern.load(kern.inp, row, chunk, col), acc_t)

    def partial(row, prev, chunk, col):
        """Own data of `chunk`, plus the partial received in slot `prev` (None: none)."""
        if prev is None:
            return own(row, chunk, col)
        return kern.combine_tiles(kern.load(ring.result, row, prev, col), own(row, chunk, col))

    def step(s):
        first = isinstance(s, int) and s == 0
        if not first:
            kern.wait(0, s)
        prev = None if first else _named(b.sub(s, 1), "prev")
        chunk = _named(b.rem(b.sub(b.add(kern.rank, W - 1), s), W), "chunk")
        kern.each_tile(lambda row, col: kern.put(
            partial(row, prev, chunk, col), ring.result, row, s, col, nxt))
        kern.signal(0, nxt)

    if W > 1:
        step(0)
        b.loop(1, W - 1, step, iv="s")
        kern.wait(0, W - 1)
    last = W - 2 if W > 1 else None
    kern.each_tile(lambda row, col: kern.store(
        kern.cast(partial(row, last, kern.rank, col), lay.element), kern.out, row, 0, col))
    return [ring, sig]


def _all_to_all_direct(kern: _Kernel) -> list[Operation]:
    sig = _with_signals(kern, 1)

    def send(peer):
        kern.each_tile(lambda row, col: kern.put(
            kern.load(kern.inp, row, peer, col), kern.out, row, kern.rank, col, peer))
        kern.signal(0, peer)

    kern.each_peer(send)
    kern.wait(0, kern.W)
    return [sig]


_ALGORITHMS = {
    (Collective.ALL_REDUCE, Algorithm.ONE_SHOT): _all_reduce_one_shot,
    (Collective.ALL_REDUCE, Algorithm.TWO_SHOT): _all_reduce_two_shot,
    (Collective.ALL_GATHER, Algorithm.DIRECT): _all_gather_direct,
    (Collective.ALL_GATHER, Algorithm.RING): _all_gather_ring,
    (Collective.REDUCE_SCATTER, Algorithm.DIRECT): _reduce_scatter_direct,
    (Collective.REDUCE_SCATTER, Algorithm.RING): _reduce_scatter_ring,
    (Collective.ALL_TO_ALL, Algorithm.DIRECT): _all_to_all_direct,
}
# Outputs that peers put into must be symmetric.
_SYMMETRIC_OUTPUT = {(Collective.ALL_REDUCE, Algorithm.TWO_SHOT),
                     (Collective.ALL_GATHER, Algorithm.DIRECT),
                     (Collective.ALL_GATHER, Algorithm.RING),
                     (Collective.ALL_TO_ALL, Algorithm.DIRECT)}


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
        acc = _element_bytes(_accumulation_type(lay.element))
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
