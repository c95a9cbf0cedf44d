"""The ``pk.kernel`` of a lowered collective: one builder per algorithm.

:func:`build_kernel` makes the kernel with one ``"communicate"`` worker for a
(collective, algorithm) pair on a :class:`~pkc.passes.collective_layout.Layout`, on the
kernel builder that the overlap patterns use too (:mod:`pkc.passes.kernel_builder`: index
constants at kernel level, index arithmetic folded and CSE'd, loops of one trip inlined).
``_Kernel`` adds what the algorithms share (tiles over the ``rows x slots x cols`` views,
rank-rotated peers, the rank-order reduction of slots), and ``_ALGORITHMS`` holds the
one-shot / two-shot all-reduce, direct / ring all-gather and reduce-scatter, and direct
all-to-all bodies that lower_collectives.py's docstring describes. Separate from the pass
because it is given its decisions (algorithm, tiles) and only writes IR: the pass chooses
and records, this module builds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from xdsl.dialects.builtin import TensorType
from xdsl.ir import Operation, SSAValue

from pkc.dialects import kernel as k
from pkc.passes.collective_layout import Layout, accumulation_type
from pkc.passes.kernel_builder import Code, Ix, KernelBuilder, ceil_div
from pkc.target.collectives import Algorithm, Collective

COMBINE = {"sum": "add", "max": "maximum", "min": "minimum"}


def _named(v: Ix, hint: str) -> Ix:
    if isinstance(v, SSAValue) and v.name_hint is None:
        v.name_hint = hint
    return v


@dataclass
class _Kernel:
    """What an algorithm needs while it writes the worker's body. Every helper takes the
    :class:`Code` of the block it emits into (the worker's, or a loop body's)."""

    kb: KernelBuilder
    lay: Layout
    tr: int
    tc: int
    inp: SSAValue
    out: SSAValue
    rank: SSAValue | None = None  # the worker's pk.rank, emitted first
    signals: SSAValue | None = None
    combine: str = "add"

    @property
    def W(self) -> int:
        return self.lay.world

    @property
    def grid(self) -> tuple[int, int]:
        return (ceil_div(self.lay.rows, self.tr), ceil_div(self.lay.cols, self.tc))

    def staging(self, shape: tuple[int, int, int] | None = None, element=None,
                name: str = "staging") -> SSAValue:
        """A symmetric buffer peers put into (rows x W x cols of the element by default)."""
        shape = shape or (self.lay.rows, self.W, self.lay.cols)
        return self.kb.alloc(name, shape, element or self.lay.element, symmetric=True)

    def with_signals(self, count: int) -> SSAValue:
        self.signals = self.kb.signals("arrived", count)
        return self.signals

    def each_tile(self, c: Code, body: Callable[[Code, Ix, Ix], None]) -> None:
        """body(code, row, col) for every tile of a chunk, as a pk.foreach."""
        nr, nc = self.grid

        def at(c: Code, i: Ix, j: Ix) -> None:
            # a grid dimension of one tile is at 0: no index arithmetic for it
            body(c, _named(c.mul(i, self.tr) if nr > 1 else 0, "row"),
                 _named(c.mul(j, self.tc) if nc > 1 else 0, "col"))

        c.foreach(self.grid, at, ["i", "j"])

    def tile_at(self, c: Code, t: Ix) -> tuple[Ix, Ix]:
        """(row, col) of the t-th tile of a chunk, row-major over the tile grid."""
        nr, nc = self.grid
        i = c.div(t, nc) if nr > 1 else 0  # t < nc when there is one row of tiles
        j = (c.rem(t, nc) if nr > 1 else t) if nc > 1 else 0
        return _named(c.mul(i, self.tr), "row"), _named(c.mul(j, self.tc), "col")

    def each_peer(self, c: Code, body: Callable[[Code, Ix], None]) -> None:
        """body(code, peer) for peer = rank, rank+1, ... (mod W): rank-rotated order."""
        c.loop(0, self.W, 1, lambda c, i: body(c, _named(c.rotate(i, self.W), "peer")),
               name="p")

    def ring(self, c: Code, ahead: int) -> Ix:
        """(rank + ahead) mod W."""
        return _named(c.rotate(ahead % self.W, self.W), "next")

    def load(self, c: Code, buf: SSAValue, row: Ix, slot: Ix, col: Ix,
             peer: Ix | None = None) -> SSAValue:
        """The tr x 1 x tc tile of `buf` at (row, slot, col) (of rank `peer`'s buffer)."""
        return c.load(buf, [row, slot, col], (self.tr, 1, self.tc), "tile", peer)

    def reduce_slots(self, c: Code, buf: SSAValue, row: Ix, col: Ix) -> SSAValue:
        """Slots 0..W-1 of `buf` at (row, col) combined in rank order, in the accumulation
        type, rounded once to the element type."""
        acc_t = accumulation_type(self.lay.element)
        first = c.cast(self.load(c, buf, row, 0, col), acc_t, "wide")

        def step(c: Code, src: Ix, acc: SSAValue) -> list[SSAValue]:
            part = c.cast(self.load(c, buf, row, src, col), acc_t, "wide")
            return [c.combine(acc, part, self.combine, "acc")]

        (total,) = c.loop(1, self.W, 1, step, [first], "src")
        return _named(c.cast(total, self.lay.element, "sum"), "sum")


def build_kernel(name: str, op: Operation, lay: Layout, algo: Algorithm, tiles: tuple[int, int],
                 x: SSAValue) -> k.KernelOp:
    """pk.kernel @name(x) with one communicate worker running `algo`; `x` is the input
    viewed as ``lay.in_view``."""
    symmetric_out = (lay.collective, algo) in _SYMMETRIC_OUTPUT
    out_type = TensorType(lay.element, list(lay.out_view))
    kb = KernelBuilder(name, lay.world, [x], [out_type], symmetric_out, ["in", "out"])
    reduce = getattr(op, "reduce", None)
    kern = _Kernel(kb, lay, *tiles, *kb.args, combine=COMBINE.get(reduce and reduce.data, "add"))

    def worker(c: Code) -> None:
        kern.rank = c.rank()
        _ALGORITHMS[(lay.collective, algo)](kern, c)

    kb.worker(k.WorkerRole.COMMUNICATE, worker)
    return kb.build()


# ----------------------------------------------------------------------------------------
# The algorithms. Each writes the worker's body (`c`) and allocates its buffers on kern.kb.


def _all_reduce_one_shot(kern: _Kernel, c: Code) -> None:
    staging = kern.staging()
    sig = kern.with_signals(1)

    def send(c: Code, row: Ix, col: Ix) -> None:
        x = kern.load(c, kern.inp, row, 0, col)
        kern.each_peer(c, lambda c, peer: c.put(x, staging, [row, kern.rank, col], peer))

    kern.each_tile(c, send)
    kern.each_peer(c, lambda c, peer: c.signal(sig, 0, peer))
    c.wait(sig, 0, kern.W)
    kern.each_tile(c, lambda c, row, col: c.store(
        kern.reduce_slots(c, staging, row, col), kern.out, [row, 0, col]))


def _all_reduce_two_shot(kern: _Kernel, c: Code) -> None:
    W = kern.W
    staging = kern.staging()
    sig = kern.with_signals(2)
    T = kern.grid[0] * kern.grid[1]

    def bounds(c: Code, owner: Ix) -> tuple[Ix, Ix]:
        return (_named(c.div(c.mul(owner, T), W), "first"),
                _named(c.div(c.mul(c.add(owner, 1), T), W), "end"))

    def scatter(c: Code, peer: Ix) -> None:
        def put_tile(c: Code, t: Ix) -> None:
            row, col = kern.tile_at(c, t)
            c.put(kern.load(c, kern.inp, row, 0, col), staging, [row, kern.rank, col], peer)
        c.loop(*bounds(c, peer), 1, put_tile, name="t")
        c.signal(sig, 0, peer)

    def reduce_and_gather(c: Code, t: Ix) -> None:
        row, col = kern.tile_at(c, t)
        total = kern.reduce_slots(c, staging, row, col)
        kern.each_peer(c, lambda c, peer: c.put(total, kern.out, [row, 0, col], peer))

    kern.each_peer(c, scatter)
    c.wait(sig, 0, W)
    c.loop(*bounds(c, kern.rank), 1, reduce_and_gather, name="t")
    kern.each_peer(c, lambda c, peer: c.signal(sig, 1, peer))
    c.wait(sig, 1, W)


def _all_gather_direct(kern: _Kernel, c: Code) -> None:
    sig = kern.with_signals(1)

    def send(c: Code, row: Ix, col: Ix) -> None:
        x = kern.load(c, kern.inp, row, 0, col)
        kern.each_peer(c, lambda c, peer: c.put(x, kern.out, [row, kern.rank, col], peer))

    kern.each_tile(c, send)
    kern.each_peer(c, lambda c, peer: c.signal(sig, 0, peer))
    c.wait(sig, 0, kern.W)


def _all_gather_ring(kern: _Kernel, c: Code) -> None:
    W = kern.W
    sig = kern.with_signals(1)
    nxt = kern.ring(c, 1)

    def first(c: Code, row: Ix, col: Ix) -> None:
        x = kern.load(c, kern.inp, row, 0, col)
        c.store(x, kern.out, [row, kern.rank, col])
        if W > 1:
            c.put(x, kern.out, [row, kern.rank, col], nxt)

    def forward(c: Code, s: Ix) -> None:
        """Step s: pass on shard (rank - s) mod W, received from the previous rank."""
        c.wait(sig, 0, s)
        shard = _named(c.rotate(s, W, back=True), "shard")
        kern.each_tile(c, lambda c, row, col: c.put(
            kern.load(c, kern.out, row, shard, col), kern.out, [row, shard, col], nxt))
        c.signal(sig, 0, nxt)

    kern.each_tile(c, first)
    if W > 1:
        c.signal(sig, 0, nxt)
        c.loop(1, W - 1, 1, forward, name="s")
        c.wait(sig, 0, W - 1)


def _reduce_scatter_direct(kern: _Kernel, c: Code) -> None:
    staging = kern.staging()
    sig = kern.with_signals(1)

    def scatter(c: Code, peer: Ix) -> None:
        kern.each_tile(c, lambda c, row, col: c.put(
            kern.load(c, kern.inp, row, peer, col), staging, [row, kern.rank, col], peer))
        c.signal(sig, 0, peer)

    kern.each_peer(c, scatter)
    c.wait(sig, 0, kern.W)
    kern.each_tile(c, lambda c, row, col: c.store(
        kern.reduce_slots(c, staging, row, col), kern.out, [row, 0, col]))


def _reduce_scatter_ring(kern: _Kernel, c: Code) -> None:
    """Step s: rank r sends partial(chunk r-s-1) = received(s-1) + own to rank r+1."""
    W, lay = kern.W, kern.lay
    acc_t = accumulation_type(lay.element)
    ring = kern.staging((lay.rows, max(1, W - 1), lay.cols), acc_t, "partials")
    sig = kern.with_signals(1)
    nxt = kern.ring(c, 1)

    def own(c: Code, row: Ix, chunk: Ix, col: Ix) -> SSAValue:
        return c.cast(kern.load(c, kern.inp, row, chunk, col), acc_t, "wide")

    def partial(c: Code, row: Ix, prev: Ix | None, chunk: Ix, col: Ix) -> SSAValue:
        """Own data of `chunk`, plus the partial received in slot `prev` (None: none)."""
        if prev is None:
            return own(c, row, chunk, col)
        return c.combine(kern.load(c, ring, row, prev, col), own(c, row, chunk, col),
                         kern.combine, "partial")

    def step(c: Code, s: Ix) -> None:
        first = isinstance(s, int) and s == 0
        if not first:
            c.wait(sig, 0, s)
        prev = None if first else _named(c.sub(s, 1), "prev")
        # (rank - 1 - s) mod W, kept non-negative for remui: rank + (W - 1 - s)
        chunk = _named(c.rem(c.add(kern.rank, c.sub(W - 1, s)), W), "chunk")
        kern.each_tile(c, lambda c, row, col: c.put(
            partial(c, row, prev, chunk, col), ring, [row, s, col], nxt))
        c.signal(sig, 0, nxt)

    if W > 1:
        step(c, 0)
        c.loop(1, W - 1, 1, step, name="s")
        c.wait(sig, 0, W - 1)
    last = W - 2 if W > 1 else None
    kern.each_tile(c, lambda c, row, col: c.store(
        c.cast(partial(c, row, last, kern.rank, col), lay.element, "sum"), kern.out,
        [row, 0, col]))


def _all_to_all_direct(kern: _Kernel, c: Code) -> None:
    sig = kern.with_signals(1)

    def send(c: Code, peer: Ix) -> None:
        kern.each_tile(c, lambda c, row, col: c.put(
            kern.load(c, kern.inp, row, peer, col), kern.out, [row, kern.rank, col], peer))
        c.signal(sig, 0, peer)

    kern.each_peer(c, send)
    c.wait(sig, 0, kern.W)


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
