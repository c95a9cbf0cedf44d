"""The ``pk.kernel`` of a lowered collective: its IR builder and one builder per algorithm.

:func:`build_kernel` makes the kernel with one ``"communicate"`` worker for a
(collective, algorithm) pair on a :class:`~pkc.passes.collective_layout.Layout`;
``_Builder`` / ``_Kernel`` emit the worker's body (index constants hoisted, tiles over the
``rows x slots x cols`` views, rank-rotated peers, signals), and ``_ALGORITHMS`` holds the
one-shot / two-shot all-reduce, direct / ring all-gather and reduce-scatter, and direct
all-to-all bodies that lower_collectives.py's docstring describes. Separate from the pass
because it is given its decisions (algorithm, tiles) and only writes IR: the pass chooses
and records, this module builds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IndexType, TensorType
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue

from pkc.dialects import kernel as k
from pkc.dialects.types import SYMMETRIC, LOCAL, BufferType, TileType
from pkc.passes.collective_layout import Layout, accumulation_type
from pkc.target.collectives import Algorithm, Collective

COMBINE = {"sum": "add", "max": "maximum", "min": "minimum"}

Index = SSAValue | int


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
        acc_t = accumulation_type(self.lay.element)
        first = self.cast(self.load(buf, row, 0, col), acc_t)

        def step(src, acc):
            return [self.combine_tiles(acc, self.cast(self.load(buf, row, src, col), acc_t))]

        total = self.b.loop(1, self.W, step, [first], iv="src")[0] if self.W > 1 else first
        return _named(self.cast(total, self.lay.element), "sum")


def build_kernel(name: str, op: Operation, lay: Layout, algo: Algorithm, tiles: tuple[int, int],
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
    acc_t = accumulation_type(lay.element)
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
