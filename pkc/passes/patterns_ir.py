"""The emitter of kernel-level IR that the fused-kernel builders of patterns.py use.

:class:`KernelBuilder` collects the allocs, index constants and workers of one
``pk.kernel``; :class:`Code` appends ops to one block of a worker (``scf.for`` and
``pk.foreach`` loops get child emitters), folding index arithmetic when both sides are
Python ints and reusing an identical ``arith`` op of an enclosing block; the tiling helpers
(:func:`gemm_tile`, :func:`row_blocks`, :func:`all_tiles`, :func:`copy_tiles`) are the loops
every pattern shares. Separate from patterns.py because it knows nothing of any pattern or
of :class:`~pkc.passes.patterns_fusion.Fusion`: the pattern builders
(patterns_gemm.py, patterns_moe.py) are written on top of it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import Float32Type, IndexType, TensorType, UnitAttr
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue

from pkc.dialects import kernel as k
from pkc.dialects.types import BufferType, TileType

INDEX = IndexType()
F32 = Float32Type()
STAGING = "staging"

Ix = int | SSAValue  # an index: folded Python int, or an SSA value


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class KernelBuilder:
    """Collects the allocs, index constants and workers of one ``pk.kernel``."""

    def __init__(self, name: str, world: int, inputs: Sequence[SSAValue],
                 output_types: Sequence[TensorType], symmetric_outputs: bool,
                 arg_names: Sequence[str] = ()):
        self.name, self.world = name, world
        self.inputs, self.output_types = list(inputs), list(output_types)
        space = "symmetric" if symmetric_outputs else "local"
        types = [_buffer(v.type) for v in inputs] + [_buffer(t, space) for t in output_types]
        self.block = Block(arg_types=types)
        for arg, name_hint in zip(self.block.args, arg_names):
            arg.name_hint = name_hint
        self._consts: dict[int, SSAValue] = {}
        self._head: list[Operation] = []
        self._const_ops: list[Operation] = []
        self._workers: list[Operation] = []

    @property
    def args(self) -> tuple[SSAValue, ...]:
        return tuple(self.block.args)

    def const(self, v: int) -> SSAValue:
        if v not in self._consts:
            op = arith.ConstantOp.from_int_and_width(v, INDEX)
            op.result.name_hint = f"c{v}"
            self._const_ops.append(op)
            self._consts[v] = op.result
        return self._consts[v]

    def alloc(self, name: str, shape: Sequence[int], elem: Attribute, symmetric: bool = False,
              zero: bool = False, staging: bool = False) -> SSAValue:
        op = k.AllocOp(BufferType(shape, elem, "symmetric" if symmetric else "local"), zero=zero)
        if staging:
            op.attributes[STAGING] = UnitAttr()
        op.result.name_hint = name
        self._head.append(op)
        return op.result

    def signals(self, name: str, count: int) -> SSAValue:
        op = k.AllocSignalsOp(max(1, count))
        op.result.name_hint = name
        self._head.append(op)
        return op.result

    def worker(self, role: k.WorkerRole, body: Callable[["Code"], None]) -> None:
        block = Block()
        code = Code(self, block, {})
        body(code)
        code.emit(k.YieldOp())
        self._workers.append(k.WorkerOp(role, Region(block)))

    def build(self, attributes: dict[str, Attribute]) -> k.KernelOp:
        for op in [*self._head, *self._const_ops, *self._workers, k.YieldOp()]:
            self.block.add_op(op)
        return k.KernelOp(self.name, self.world, self.inputs, self.output_types,
                          Region(self.block), attributes)


def _buffer(t: Attribute, space: str = "local") -> BufferType:
    assert isinstance(t, TensorType)
    return BufferType(tuple(t.get_shape()), t.element_type, space)


class Code:
    """Appends ops to one block of a worker; loops get child emitters."""

    def __init__(self, kb: KernelBuilder, block: Block, shared: dict,
                 parent: "Code | None" = None):
        self.kb, self.block, self._shared, self._parent = kb, block, shared, parent
        self._memo: dict[tuple, SSAValue] = {}  # index arithmetic emitted in this block

    def _arith(self, kind: type, a: Ix, b: Ix) -> SSAValue:
        """``kind(a, b)``, reusing an identical one from this block or an enclosing one."""
        key = (kind, self.idx(a), self.idx(b))
        code: Code | None = self
        while code is not None:
            if key in code._memo:
                return code._memo[key]
            code = code._parent
        self._memo[key] = self.emit(kind(key[1], key[2]))
        return self._memo[key]

    def emit(self, op: Operation, name: str | None = None) -> SSAValue | None:
        self.block.add_op(op)
        if not op.results:
            return None
        if name:
            op.results[0].name_hint = name
        return op.results[0]

    def idx(self, v: Ix) -> SSAValue:
        return self.kb.const(v) if isinstance(v, int) else v

    def rank(self) -> SSAValue:
        """``pk.rank``, emitted once per worker (call it first, in the worker's block)."""
        if "rank" not in self._shared:
            self._shared["rank"] = self.emit(k.RankOp(), "rank")
        return self._shared["rank"]

    # -- index arithmetic (folded on ints) -------------------------------------------

    def add(self, a: Ix, b: Ix) -> Ix:
        if isinstance(a, int) and isinstance(b, int):
            return a + b
        if b == 0 and isinstance(b, int):
            return a
        if a == 0 and isinstance(a, int):
            return b
        return self._arith(arith.AddiOp, a, b)

    def mul(self, a: Ix, b: Ix) -> Ix:
        if isinstance(a, int) and isinstance(b, int):
            return a * b
        for x, y in ((a, b), (b, a)):
            if isinstance(y, int) and y == 1:
                return x
            if isinstance(y, int) and y == 0:
                return 0
        return self._arith(arith.MuliOp, a, b)

    def rem(self, a: Ix, b: int) -> Ix:
        if isinstance(a, int):
            return a % b
        if b == 1:
            return 0
        return self._arith(arith.RemUIOp, a, b)

    def div(self, a: Ix, b: int) -> Ix:
        if isinstance(a, int):
            return a // b
        if b == 1:
            return a
        return self._arith(arith.DivUIOp, a, b)

    def rotate(self, i: Ix, world: int, back: bool = False) -> Ix:
        """``(rank + i) mod W``, or ``(rank - i) mod W`` with ``back``."""
        r = self.rank()
        if back:
            return self.rem(self.add(r, self.sub_const(world, i)), world)
        return self.rem(self.add(r, i), world)

    def sub_const(self, c: int, i: Ix) -> Ix:
        """``c - i`` for an index i (arith.subi)."""
        if isinstance(i, int):
            return c - i
        return self._arith(arith.SubiOp, c, i)

    # -- structure -----------------------------------------------------------------

    def child(self, block: Block) -> "Code":
        return Code(self.kb, block, self._shared, self)

    def loop(self, lb: Ix, ub: Ix, step: int, body: Callable, init: Sequence[SSAValue] = (),
             name: str = "i") -> list[SSAValue]:
        """``scf.for`` from lb to ub; ``body(code, iv, *carried)`` returns the new carried
        values. A loop known to run once is inlined."""
        if isinstance(lb, int) and isinstance(ub, int):
            if ub <= lb:
                return list(init)
            if lb + step >= ub:
                return list(body(self, lb, *init) or [])
        block = Block(arg_types=[INDEX, *[v.type for v in init]])
        block.args[0].name_hint = name
        inner = self.child(block)
        out = body(inner, block.args[0], *block.args[1:]) or []
        inner.emit(scf.YieldOp(*out))
        op = scf.ForOp(self.idx(lb), self.idx(ub), self.idx(step), list(init), Region(block))
        self.emit(op)
        return list(op.results)

    def foreach(self, bounds: Sequence[int], body: Callable, names: Sequence[str]) -> None:
        """``pk.foreach`` over a static grid (independent iterations, spread over SMs);
        a grid of one point is inlined."""
        if math.prod(bounds) == 1:
            body(self, *[0] * len(bounds))
            return
        block = Block(arg_types=[INDEX] * len(bounds))
        for a, n in zip(block.args, names):
            a.name_hint = n
        inner = self.child(block)
        body(inner, *block.args)
        inner.emit(k.YieldOp())
        self.emit(k.ForeachOp(list(bounds), Region(block)))

    # -- tiles -----------------------------------------------------------------------

    def load(self, buf: SSAValue, at: Sequence[Ix], shape: Sequence[int], name: str = "tile",
             peer: Ix | None = None) -> SSAValue:
        t = TileType(shape, buf.type.element_type)
        p = None if peer is None else self.idx(peer)
        return self.emit(k.LoadOp(buf, [self.idx(i) for i in at], t, p), name)

    def store(self, tile: SSAValue, buf: SSAValue, at: Sequence[Ix]) -> None:
        self.emit(k.StoreOp(tile, buf, [self.idx(i) for i in at]))

    def put(self, tile: SSAValue, buf: SSAValue, at: Sequence[Ix], peer: Ix,
            add: bool = False) -> None:
        self.emit(k.PutOp(tile, buf, [self.idx(i) for i in at], self.idx(peer), add))

    def signal(self, sigs: SSAValue, slot: Ix, peer: Ix) -> None:
        self.emit(k.SignalOp(sigs, self.idx(slot), self.idx(peer)))

    def wait(self, sigs: SSAValue, slot: Ix, until: Ix) -> None:
        self.emit(k.WaitOp(sigs, self.idx(slot), self.idx(until)))

    def fill(self, shape: Sequence[int], elem: Attribute, value: float = 0.0,
             name: str = "zero") -> SSAValue:
        return self.emit(k.TileFillOp(value, TileType(shape, elem)), name)

    def mma(self, a: SSAValue, b: SSAValue, acc: SSAValue) -> SSAValue:
        return self.emit(k.MmaOp(a, b, acc), "acc")

    def add_tiles(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.emit(k.TileMapOp("add", [a, b], a.type), "sum")

    def cast(self, tile: SSAValue, elem: Attribute) -> SSAValue:
        if tile.type.element_type == elem:
            return tile
        return self.emit(k.TileMapOp("cast", [tile], TileType(tile.type.get_shape(), elem)), "out")


# ----------------------------------------------------------------------------------------
# Tiling helpers.


def gemm_tile(c: Code, a: SSAValue, a_row: Ix, b: SSAValue, b_row: Ix, n0: Ix, rows: int,
              bn: int, K: int, bk: int, exact_k: bool = False) -> SSAValue:
    """f32 ``a[a_row : a_row+rows, 0:K] @ b[b_row : b_row+K, n0 : n0+bn]``, K in steps of
    bk. Overhanging K reads zeros from both operands when they end at K; with ``exact_k``
    (b holds more rows after K, as a stack of experts' weights does) the last step uses a
    narrower tile instead."""
    acc = c.fill([rows, bn], F32)

    def step(c: Code, k0: Ix, acc: SSAValue, width: int) -> list[SSAValue]:
        ta = c.load(a, [a_row, k0], [rows, width], "a")
        tb = c.load(b, [c.add(b_row, k0), n0], [width, bn], "b")
        return [c.mma(ta, tb, acc)]

    full = K // bk if exact_k else ceil_div(K, bk)
    (acc,) = c.loop(0, full * bk, bk, lambda c, k0, acc: step(c, k0, acc, bk), [acc], "k")
    if exact_k and K % bk:
        (acc,) = step(c, full * bk, acc, K % bk)
    return acc


def row_blocks(c: Code, rows: int, bm: int, body: Callable, cols: int = 1,
               parallel: bool = False) -> None:
    """Calls ``body(code, rb, m0, tile_rows, ni)`` for the row blocks of a chunk of
    ``rows`` rows (full blocks of bm, then the remainder block with a smaller tile) times
    ``cols`` column tiles; ``parallel`` spreads them with pk.foreach, else scf.for."""
    full, rem = divmod(rows, bm)

    def run(c: Code, rb: Ix, ni: Ix, tile_rows: int) -> None:
        body(c, rb, c.mul(rb, bm), tile_rows, ni)

    if full == 1 and parallel:
        c.foreach([cols], lambda c, ni: run(c, 0, ni, bm), ["ni"])
    elif full and parallel:
        c.foreach([full, cols], lambda c, rb, ni: run(c, rb, ni, bm), ["rb", "ni"])
    elif full:
        def row(c: Code, rb: Ix) -> None:
            c.loop(0, cols, 1, lambda c, ni: run(c, rb, ni, bm), name="ni")

        c.loop(0, full, 1, row, name="rb")
    if rem and parallel:
        c.foreach([cols], lambda c, ni: run(c, full, ni, rem), ["ni"])
    elif rem:
        c.loop(0, cols, 1, lambda c, ni: run(c, full, ni, rem), name="ni")


def all_tiles(c: Code, rows: int, cols: int, bm: int, bn: int, body: Callable) -> None:
    """``body(code, m0, n0)`` for every tile of a rows x cols buffer (pk.foreach; tiles
    overhang the end)."""
    c.foreach([ceil_div(rows, bm), ceil_div(cols, bn)],
              lambda c, mi, ni: body(c, c.mul(mi, bm), c.mul(ni, bn)), ["mi", "ni"])


def copy_tiles(c: Code, src: SSAValue, dst: SSAValue, rows: int, cols: int, bm: int,
               bn: int) -> None:
    """Copies a whole rows x cols buffer tile by tile."""
    def body(c: Code, m0: Ix, n0: Ix) -> None:
        c.store(c.load(src, [m0, n0], [bm, bn]), dst, [m0, n0])

    all_tiles(c, rows, cols, bm, bn, body)


def shape_of(v: SSAValue) -> tuple[int, ...]:
    return tuple(v.type.get_shape())
