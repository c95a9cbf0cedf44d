"""The one builder of kernel-level IR (``pk.kernel``): every pass that writes a kernel uses it.

Its users: the fused-kernel builders of ``overlap`` / ``buffer-elision`` (patterns_gemm.py,
patterns_moe.py, with the tiling loops of patterns_tiles.py) and the collective kernels of
``lower-collectives`` (collective_kernels.py). One builder so that every kernel follows
the same conventions, which are:

* :class:`KernelBuilder` collects one ``pk.kernel``: its buffer arguments (inputs local,
  outputs local or symmetric), ``pk.alloc`` / ``pk.alloc_signals`` at its top, then the
  ``index`` constants, then the workers. Constants are made once per kernel (one
  ``%c4`` for every use, in any worker) and live at kernel level, in the order first asked
  for.
* :class:`Code` appends ops to one block of a worker; a ``scf.for`` / ``pk.foreach``
  body gets a child :class:`Code` (the callbacks take it as their first argument).
* Index arithmetic (``add``, ``sub``, ``mul``, ``div``, ``rem``) is folded when both
  sides are Python ints and simplified around 0 and 1 (``x + 0``, ``x * 1``, ``x mod 1``);
  what remains is emitted once: an identical ``arith`` op (same kind, same operands)
  already emitted in this block or an enclosing one is reused (CSE), so ``(rank + i) mod
  W`` asked for twice in a loop body is one ``arith.addi`` and one ``arith.remui``.
* Loops whose trip count is known are not emitted when there is nothing to repeat: a loop
  of no trips returns its initial values, a loop of one trip (and a ``pk.foreach`` over a
  one-point grid) is inlined, its body called with the Python int of the one index. So
  bodies must accept an int index as well as an SSA value (index arithmetic does).
* ``pk.rank`` is emitted once per worker, first in its block, when :meth:`Code.rank` is
  first called.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import Float32Type, IndexType, TensorType, UnitAttr
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue

from pkc.dialects import kernel as k
from pkc.dialects.types import LOCAL, SYMMETRIC, BufferType, TileType

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
        space = SYMMETRIC if symmetric_outputs else LOCAL
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
        """``pk.alloc``; ``staging`` marks a buffer that buffer-elision may remove."""
        op = k.AllocOp(BufferType(shape, elem, SYMMETRIC if symmetric else LOCAL), zero=zero)
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
        code = Code(self, block, {"worker": block})
        body(code)
        code.emit(k.YieldOp())
        self._workers.append(k.WorkerOp(role, Region(block)))

    def build(self, attributes: dict[str, Attribute] | None = None) -> k.KernelOp:
        for op in [*self._head, *self._const_ops, *self._workers, k.YieldOp()]:
            self.block.add_op(op)
        return k.KernelOp(self.name, self.world, self.inputs, self.output_types,
                          Region(self.block), attributes)


def _buffer(t: Attribute, space: str = LOCAL) -> BufferType:
    assert isinstance(t, TensorType)
    return BufferType(tuple(t.get_shape()), t.element_type, space)


class Code:
    """Appends ops to one block of a worker; loops get child emitters."""

    def __init__(self, kb: KernelBuilder, block: Block, shared: dict,
                 parent: "Code | None" = None):
        self.kb, self.block, self._shared, self._parent = kb, block, shared, parent
        self._memo: dict[tuple, SSAValue] = {}  # index arithmetic emitted in this block

    def _arith(self, kind: type, a: Ix, b: Ix) -> SSAValue:
        """``kind(a, b)``, reusing an identical one from this block or an enclosing one
        (emitted before the op that holds this block, so it dominates every use here)."""
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
        """``pk.rank``, emitted once per worker, at the top of the worker's block (so that
        it dominates every use, wherever it is first asked for)."""
        if "rank" not in self._shared:
            op = k.RankOp()
            op.result.name_hint = "rank"
            top = self._shared["worker"]
            if top.first_op is None:
                top.add_op(op)
            else:
                top.insert_op_before(op, top.first_op)
            self._shared["rank"] = op.result
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

    def sub(self, a: Ix, b: Ix) -> Ix:
        if isinstance(a, int) and isinstance(b, int):
            return a - b
        if b == 0 and isinstance(b, int):
            return a
        return self._arith(arith.SubiOp, a, b)

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
        """``(rank + i) mod W``, or ``(rank - i) mod W`` with ``back`` (``i`` < W, as
        ``remui`` is unsigned: the sum stays non-negative)."""
        r = self.rank()
        if back:
            return self.rem(self.add(r, self.sub(world, i)), world)
        return self.rem(self.add(r, i), world)

    # -- structure -----------------------------------------------------------------

    def child(self, block: Block) -> "Code":
        return Code(self.kb, block, self._shared, self)

    def loop(self, lb: Ix, ub: Ix, step: int, body: Callable, init: Sequence[SSAValue] = (),
             name: str = "i") -> list[SSAValue]:
        """``scf.for`` from lb to ub; ``body(code, iv, *carried)`` returns the new carried
        values. A loop known to run no trips returns ``init``; one known to run once is
        inlined (``iv`` is then the int ``lb``)."""
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
        ``body(code, *indices)``. A grid of one point is inlined (indices the int 0)."""
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

    def combine(self, a: SSAValue, b: SSAValue, fn: str = "add", name: str = "sum") -> SSAValue:
        """Elementwise ``fn(a, b)`` of two tiles of one type (``add``, ``maximum``, ...)."""
        return self.emit(k.TileMapOp(fn, [a, b], a.type), name)

    def cast(self, tile: SSAValue, elem: Attribute, name: str = "out") -> SSAValue:
        """``tile`` converted to ``elem`` (itself when it already is)."""
        if tile.type.element_type == elem:
            return tile
        return self.emit(k.TileMapOp("cast", [tile], TileType(tile.type.get_shape(), elem)),
                         name)


def shape_of(v: SSAValue) -> tuple[int, ...]:
    return tuple(v.type.get_shape())
