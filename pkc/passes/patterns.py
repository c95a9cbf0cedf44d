"""Kernel builders shared by the ``overlap`` and ``buffer-elision`` passes.

Not a pass: the two passes import it. It holds

* :class:`Fusion`, the parameters of one fused kernel (pattern, overlap style, tile sizes,
  MoE expert count and capacity, whether an all-gather's result is also an output). The
  ``overlap`` pass writes it on the kernel as the ``pk.fusion`` dictionary attribute, and
  ``buffer-elision`` reads it back to recognise the kernels it may rewrite.
* :class:`KernelBuilder` / :class:`Code`, a small emitter of kernel-level IR (allocs,
  index constants, workers, ``scf.for`` and ``pk.foreach`` loops, tile ops), with index
  arithmetic folded when both sides are Python ints.
* :func:`build_kernel`, which builds the ``pk.kernel`` of a :class:`Fusion` in its
  *staged* form (``elide=False``: produced tiles go through ``pk.alloc {staging}`` buffers
  and are copied out of them, as NCCL does) or its *elided* form (``elide=True``: producers
  write straight into the destination; see buffer_elision.py).

Conventions of every generated kernel (W ranks, ``r`` = ``pk.rank``):

* Chunks are visited rank-rotated: at step i rank r works on chunk ``(r + i) mod W``, and
  pushes its own data to rank ``(r - i) mod W``, which is exactly the rank that needs it
  at step i; so ranks start at different peers and the local chunk comes first.
* Tiles are ``tile_m x tile_n`` (output) with a ``tile_k`` contraction step, capped by the
  shape. Along N and K tiles may overhang the buffer's end (loads read zeros, stores drop).
  Along rows that belong to different chunks (rows of one rank's reduce-scatter output, of
  one all-gather shard, of one MoE (expert, source) block) a tile must not cross into the
  next chunk, so such rows are split into full ``tile_m`` blocks plus one remainder block
  with its own, smaller tile type (as CUTLASS handles residues), never padded.
* MMAs accumulate in f32 tiles; the result is cast once to the output element type.
* Every put is followed by a ``pk.signal`` to the reader, every read of remote data by a
  ``pk.wait``: the interpreter's race detector checks it.
* Inter-SM overlap: a ``"compute"`` worker (GEMM tiles) and a ``"communicate"`` worker
  (puts). The compute worker hands each finished tile to the communicate worker through a
  local buffer (``send``; on a GPU the tile in shared/global memory that the TMA store of
  the communicate SMs reads) and a per-tile ``ready`` signal.
* Intra-SM overlap is ONE ``"compute"`` worker that puts every tile itself right after
  producing it (on a GPU: a producer warp beside the MMA warpgroups of the same SM; puts
  are asynchronous, so program order does not serialize them). ``pk.plan`` says
  ``overlap = "intra"``; there is no communicate worker to give SMs to.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import (
    DictionaryAttr,
    Float32Type,
    IndexType,
    IntegerAttr,
    StringAttr,
    TensorType,
    UnitAttr,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue

from pkc.dialects import kernel as k
from pkc.dialects.types import BufferType, TileType
from pkc.target.cost import OverlapStyle, Pattern

INDEX = IndexType()
F32 = Float32Type()
FUSION = "pk.fusion"
STAGING = "staging"

Ix = int | SSAValue  # an index: folded Python int, or an SSA value


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


# ----------------------------------------------------------------------------------------
# The parameters of one fused kernel.


@dataclass(frozen=True)
class Fusion:
    """What a fused kernel is; enough to rebuild it from its operands and result types."""

    pattern: Pattern
    overlap: OverlapStyle  # INTRA | INTER
    tile_m: int
    tile_n: int
    tile_k: int
    experts: int = 1  # MoE: experts per rank
    capacity: int = 0  # MoE: token rows per (expert, source rank)
    gathered: bool = False  # AG+GEMM: the gathered tensor is also a result of the kernel
    # GEMM+RS: which chunks of the 2-d product [R, N] each rank owns.
    # scatter_dim 0: rows; the R rows are `batches` blocks (the leading dims of a 3-d
    #   result scattered along a middle dim) and rank p owns rows p*S/W.. of every block;
    # scatter_dim 1: columns p*N/W .. (dim -1 of a 2-d or 3-d result).
    scatter_dim: int = 0
    batches: int = 1

    def to_attr(self, stage: str) -> DictionaryAttr:
        entries: dict[str, Attribute] = {"stage": StringAttr(stage)}
        for key, v in asdict(self).items():
            if key in _ADDED_LATER and v == Fusion.__dataclass_fields__[key].default:
                continue  # the usual case reads as it always did
            if isinstance(v, bool):
                entries[key] = IntegerAttr(int(v), 1)
            elif isinstance(v, int):
                entries[key] = IntegerAttr(v, i64)
            else:
                entries[key] = StringAttr(str(v))
        return DictionaryAttr(entries)

    @staticmethod
    def from_attr(attr: Attribute) -> tuple["Fusion", str] | None:
        """(fusion, stage) from a ``pk.fusion`` attribute, None if it is not one."""
        if not isinstance(attr, DictionaryAttr):
            return None
        d = attr.data
        try:
            values = {}
            for f in fields(Fusion):
                if f.name not in d and f.name in _ADDED_LATER:
                    continue  # written before the field existed: its default
                v = d[f.name]
                values[f.name] = v.data if isinstance(v, StringAttr) else v.value.data
            values["gathered"] = bool(values["gathered"])
            stage = d["stage"].data
        except (KeyError, AttributeError, TypeError):
            return None
        if values["pattern"] not in KERNEL_NAMES or \
                values["overlap"] not in (OverlapStyle.INTRA, OverlapStyle.INTER):
            return None
        values["pattern"] = Pattern(values["pattern"])
        values["overlap"] = OverlapStyle(values["overlap"])
        return Fusion(**values), stage


_ADDED_LATER = ("scatter_dim", "batches")

KERNEL_NAMES = {
    Pattern.MM_REDUCE_SCATTER: "matmul_reduce_scatter",
    Pattern.MM_ALL_REDUCE: "matmul_all_reduce",
    Pattern.ALL_GATHER_MM: "all_gather_matmul",
    Pattern.MOE: "all_to_all_matmul_all_to_all",
}


# ----------------------------------------------------------------------------------------
# Emitting kernel-level IR.


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


# ----------------------------------------------------------------------------------------
# The kernels. Each builder takes the fusion, the kernel's operands (graph-level values)
# and result types, and whether staging buffers are elided.


def build_kernel(f: Fusion, world: int, inputs: Sequence[SSAValue],
                 output_types: Sequence[TensorType], elide: bool) -> k.KernelOp:
    """The ``pk.kernel`` of fusion ``f`` (staged, or with staging elided), with the
    ``pk.fusion`` attribute that describes it."""
    builder = _BUILDERS[f.pattern]
    kb = KernelBuilder(KERNEL_NAMES[f.pattern], world, inputs, output_types,
                       symmetric_outputs=elide, arg_names=_ARG_NAMES[f.pattern](len(inputs),
                                                                                len(output_types)))
    builder(kb, f, world, elide)
    return kb.build({FUSION: f.to_attr("elided" if elide else "staged")})


def _names_mm(n_in: int, n_out: int) -> list[str]:
    return ["A", "B", "O"]


def _names_ag(n_in: int, n_out: int) -> list[str]:
    bs = [f"B{j}" for j in range(n_in - 1)]
    ys = [f"Y{j}" for j in range(n_in - 1)]
    return ["X", *bs, *ys, *(["G"] if n_out > len(ys) else [])]


def _names_moe(n_in: int, n_out: int) -> list[str]:
    return ["X", "Wt", "O"]


_ARG_NAMES = {
    Pattern.MM_REDUCE_SCATTER: _names_mm,
    Pattern.MM_ALL_REDUCE: _names_mm,
    Pattern.ALL_GATHER_MM: _names_ag,
    Pattern.MOE: _names_moe,
}


# -- matmul -> reduce_scatter ------------------------------------------------------------


def _build_mm_reduce_scatter(kb: KernelBuilder, f: Fusion, W: int, elide: bool) -> None:
    """Staged: tile (p, m, n) of chunk p -> [send ->] recv slot r of rank p {staging};
    rank p sums its W slots (rank order, f32) and stores its output.
    Elided: put-add into rank p's zeroed f32 accumulator (or, for an f32 result, straight
    into its symmetric output, zeroed in the kernel behind a `zeroed` barrier).

    Chunks (``f.scatter_dim``, ``f.batches``; the output O is [Ro, Nc]): rows, rank p's
    output row (b, m) being product row b*S + p*Sc + m of batch block b (S = R/batches
    rows, Sc = S/W); or columns, output (m, n) being product (m, p*Nc + n). Buffers that
    hold one chunk (send's chunk p, recv's slots, the accumulator) are exactly Nc wide:
    a column tile overhanging a chunk's end is dropped there, so column chunks need no
    residue tiles; row tiles must not cross into the next chunk's rows (residue blocks)."""
    A, B, O = kb.args
    (M, K), N = shape_of(A), shape_of(B)[1]
    (Ro, Nc), odt = shape_of(O), O.type.element_type
    cols, Bt = f.scatter_dim == 1, f.batches
    S, Sc = M // Bt, Ro // Bt   # product rows per batch block; output rows per block
    bm, bn, bk = min(f.tile_m, Sc), min(f.tile_n, Nc), min(f.tile_k, K)
    nrb, TN = ceil_div(Sc, bm), ceil_div(Nc, bn)
    T = Bt * nrb * TN  # output tiles of one chunk
    inter, direct = f.overlap is OverlapStyle.INTER, elide and odt == F32
    send = kb.alloc("send", [W * Ro, Nc], F32) if inter else None
    if not elide:
        dest = kb.alloc("recv", [W * Ro, Nc], F32, symmetric=True, staging=True)
    else:
        dest = O if direct else kb.alloc("accum", [Ro, Nc], F32, symmetric=True, zero=True)
    ready = kb.signals("ready", W * T) if inter else None
    arrived = kb.signals("arrived", T)
    zeroed = kb.signals("zeroed", W) if direct else None

    def chunk_tiles(c: Code, body: Callable, parallel: bool = False) -> None:
        """``body(code, t, b, m0, rows, n0)`` for every output tile of one chunk: tile
        index t, batch block b, row m0 in the block's Sc rows, column n0."""
        def block(c: Code, b: Ix) -> None:
            def tile(c: Code, rb: Ix, m0: Ix, rows: int, ni: Ix) -> None:
                t = c.add(c.mul(c.add(c.mul(b, nrb), rb), TN), ni)
                body(c, t, b, m0, rows, c.mul(ni, bn))
            row_blocks(c, Sc, bm, tile, TN, parallel=parallel)
        c.loop(0, Bt, 1, block, name="b")

    def product_tile(c: Code, p: Ix, b: Ix, m0: Ix, rows: int, n0: Ix) -> SSAValue:
        """f32 tile of chunk p at its output (b, m0, n0): its rows of A, columns of B."""
        if cols:
            return gemm_tile(c, A, c.add(c.mul(b, S), m0), B, 0, c.add(c.mul(p, Nc), n0),
                             rows, bn, K, bk)
        a_row = c.add(c.add(c.mul(b, S), c.mul(p, Sc)), m0)
        return gemm_tile(c, A, a_row, B, 0, n0, rows, bn, K, bk)

    def deliver(c: Code, tile: SSAValue, p: Ix, row: Ix, n0: Ix, t: Ix) -> None:
        if elide:
            c.put(tile, dest, [row, n0], p, add=True)
        else:
            c.put(tile, dest, [c.add(c.mul(c.rank(), Ro), row), n0], p)
        c.signal(arrived, t, p)

    def compute_step(c: Code, i: Ix) -> None:
        p = c.rotate(i, W)
        if direct and not inter:
            c.wait(zeroed, p, 1)

        def tile(c: Code, t: Ix, b: Ix, m0: Ix, rows: int, n0: Ix) -> None:
            acc = product_tile(c, p, b, m0, rows, n0)
            row = c.add(c.mul(b, Sc), m0)
            if inter:
                c.store(acc, send, [c.add(c.mul(p, Ro), row), n0])
                c.signal(ready, c.add(c.mul(p, T), t), c.rank())
            else:
                deliver(c, acc, p, row, n0, t)

        chunk_tiles(c, tile, parallel=True)

    def comm_step(c: Code, i: Ix) -> None:
        p = c.rotate(i, W)
        if direct:
            c.wait(zeroed, p, 1)

        def tile(c: Code, t: Ix, b: Ix, m0: Ix, rows: int, n0: Ix) -> None:
            row = c.add(c.mul(b, Sc), m0)
            c.wait(ready, c.add(c.mul(p, T), t), 1)
            x = c.load(send, [c.add(c.mul(p, Ro), row), n0], [rows, bn])
            deliver(c, x, p, row, n0, t)

        chunk_tiles(c, tile)

    def finish(c: Code) -> None:
        def tile(c: Code, t: Ix, b: Ix, m0: Ix, rows: int, n0: Ix) -> None:
            row = c.add(c.mul(b, Sc), m0)
            c.wait(arrived, t, W)
            if direct:
                return
            if elide:
                total = c.load(dest, [row, n0], [rows, bn], "total")
            else:
                total = _sum_slots(c, dest, W, Ro, row, n0, rows, bn)
            c.store(c.cast(total, odt), O, [row, n0])

        chunk_tiles(c, tile, parallel=True)

    def zero_output(c: Code) -> None:
        chunk_tiles(c, lambda c, t, b, m0, rows, n0: c.store(
            c.fill([rows, bn], F32), O, [c.add(c.mul(b, Sc), m0), n0]), parallel=True)
        c.loop(0, W, 1, lambda c, q: c.signal(zeroed, c.rank(), q), name="q")

    def compute(c: Code) -> None:
        c.rank()
        if direct:
            zero_output(c)
        c.loop(0, W, 1, compute_step)
        finish(c)

    def comm(c: Code) -> None:
        c.rank()
        c.loop(0, W, 1, comm_step)

    kb.worker(k.WorkerRole.COMPUTE, compute)
    if inter:
        kb.worker(k.WorkerRole.COMMUNICATE, comm)


def _sum_slots(c: Code, buf: SSAValue, W: int, slot_rows: int, m0: Ix, n0: Ix, rows: int,
               bn: int) -> SSAValue:
    """Sum over s = 0..W-1 (rank order, f32) of the tile at row s*slot_rows + m0."""
    def add(c: Code, s: Ix, acc: SSAValue) -> list[SSAValue]:
        part = c.load(buf, [c.add(c.mul(s, slot_rows), m0), n0], [rows, bn], "part")
        return [c.add_tiles(acc, part)]

    (total,) = c.loop(0, W, 1, add, [c.fill([rows, bn], F32)], "s")
    return total


# -- matmul -> all_reduce ----------------------------------------------------------------


def _build_mm_all_reduce(kb: KernelBuilder, f: Fusion, W: int, elide: bool) -> None:
    """Output tile t (T of them) belongs to rank t mod W. Phase 1: every rank sends its
    partial of tile t to the owner (staged: slot r of the owner's recv {staging}; elided:
    put-add into the owner's zeroed f32 accumulator). Phase 2: the owner waits for W
    partials, sums / loads them, casts, and puts the tile into every rank's bcast
    {staging} (staged; each rank then copies bcast -> output) or output (elided)."""
    A, B, O = kb.args
    (M, K), N = shape_of(A), shape_of(B)[1]
    odt = O.type.element_type
    bm, bn, bk = min(f.tile_m, M), min(f.tile_n, N), min(f.tile_k, K)
    TM, TN = ceil_div(M, bm), ceil_div(N, bn)
    T, Mp = TM * TN, TM * bm  # tiles; rows of a recv slot (padded to whole tiles)
    inter = f.overlap is OverlapStyle.INTER
    send = kb.alloc("send", [M, N], F32) if inter else None
    if elide:
        accum = kb.alloc("accum", [M, N], F32, symmetric=True, zero=True)
        bcast = O
    else:
        accum = kb.alloc("recv", [W * Mp, N], F32, symmetric=True, staging=True)
        bcast = kb.alloc("bcast", [M, N], odt, symmetric=True, staging=True)
    ready = kb.signals("ready", T) if inter else None
    arrived = kb.signals("arrived", T)
    done = kb.signals("done", 1)

    def at(c: Code, t: Ix) -> tuple[Ix, Ix]:
        return c.mul(c.div(t, TN), bm), c.mul(c.rem(t, TN), bn)

    def deliver(c: Code, tile: SSAValue, p: Ix, t: Ix) -> None:
        m0, n0 = at(c, t)
        if elide:
            c.put(tile, accum, [m0, n0], p, add=True)
        else:
            c.put(tile, accum, [c.add(c.mul(c.rank(), Mp), m0), n0], p)
        c.signal(arrived, t, p)

    def compute_step(c: Code, i: Ix) -> None:
        p = c.rotate(i, W)  # the owner of tiles p, p + W, ...

        def tile(c: Code, t: Ix) -> None:
            m0, n0 = at(c, t)
            acc = gemm_tile(c, A, m0, B, 0, n0, bm, bn, K, bk)
            if inter:
                c.store(acc, send, [m0, n0])
                c.signal(ready, t, c.rank())
            else:
                deliver(c, acc, p, t)

        c.loop(p, T, W, tile, name="t")

    def comm_step(c: Code, i: Ix) -> None:
        p = c.rotate(i, W)

        def tile(c: Code, t: Ix) -> None:
            c.wait(ready, t, 1)
            m0, n0 = at(c, t)
            deliver(c, c.load(send, [m0, n0], [bm, bn]), p, t)

        c.loop(p, T, W, tile, name="t")

    def reduce_and_broadcast(c: Code) -> None:
        def tile(c: Code, t: Ix) -> None:
            m0, n0 = at(c, t)
            c.wait(arrived, t, W)
            if elide:
                total = c.load(accum, [m0, n0], [bm, bn], "total")
            else:
                total = _sum_slots(c, accum, W, Mp, m0, n0, bm, bn)
            out = c.cast(total, odt)

            def to(c: Code, j: Ix) -> None:
                q = c.rotate(j, W)
                c.put(out, bcast, [m0, n0], q)
                c.signal(done, 0, q)

            c.loop(0, W, 1, to, name="j")

        c.loop(c.rank(), T, W, tile, name="t")

    def finish(c: Code) -> None:
        c.wait(done, 0, T)
        if not elide:
            copy_tiles(c, bcast, O, M, N, bm, bn)

    def compute(c: Code) -> None:
        c.rank()
        c.loop(0, W, 1, compute_step)
        if not inter:
            reduce_and_broadcast(c)
        finish(c)

    def comm(c: Code) -> None:
        c.rank()
        c.loop(0, W, 1, comm_step)
        reduce_and_broadcast(c)

    kb.worker(k.WorkerRole.COMPUTE, compute)
    if inter:
        kb.worker(k.WorkerRole.COMMUNICATE, comm)


# -- all_gather -> matmul(s) -------------------------------------------------------------


def _build_all_gather_mm(kb: KernelBuilder, f: Fusion, W: int, elide: bool) -> None:
    """Rank r pushes its shard, row block by row block, to rank (r - i) mod W at step i
    (staged: into that rank's stage {staging}, which the receiver copies into the GEMM
    operand G; elided: straight into the receiver's symmetric G) and signals it. The
    consumers first multiply the local shard (read from the input, no wait), then the
    shard of rank (r + i) mod W once its row block has arrived. G is the kernel's last
    result when the gathered tensor has other users."""
    n_mm = len(kb.inputs) - 1
    args = kb.args
    X, Bs, Ys = args[0], args[1:1 + n_mm], args[1 + n_mm:1 + 2 * n_mm]
    Ms, K = shape_of(X)
    M, dt = W * Ms, X.type.element_type
    bm, bk = min(f.tile_m, Ms), min(f.tile_k, K)
    nrb = ceil_div(Ms, bm)
    inter = f.overlap is OverlapStyle.INTER
    if f.gathered:
        G = args[-1]
    else:
        G = kb.alloc("gathered", [M, K], dt, symmetric=elide)
    stage = None if elide else kb.alloc("stage", [M, K], dt, symmetric=True, staging=True)
    ready = kb.signals("ready", W * nrb)
    arrived = None if elide else kb.signals("arrived", W * nrb)

    def k_tiles(c: Code, body: Callable) -> None:
        c.loop(0, ceil_div(K, bk) * bk, bk, lambda c, k0: body(c, k0), name="k")

    def push(c: Code, i: Ix) -> None:
        q = c.rotate(i, W, back=True)
        r = c.rank()

        def block(c: Code, rb: Ix, m0: Ix, rows: int, _ni: Ix) -> None:
            def move(c: Code, k0: Ix) -> None:
                x = c.load(X, [m0, k0], [rows, bk], "shard")
                c.put(x, stage if stage is not None else G, [c.add(c.mul(r, Ms), m0), k0], q)

            k_tiles(c, move)
            c.signal(arrived if arrived is not None else ready, c.add(c.mul(r, nrb), rb), q)

        row_blocks(c, Ms, bm, block)

    def copy_own(c: Code) -> None:
        def block(c: Code, rb: Ix, m0: Ix, rows: int, _ni: Ix) -> None:
            k_tiles(c, lambda c, k0: c.store(c.load(X, [m0, k0], [rows, bk], "shard"), G,
                                             [c.add(c.mul(c.rank(), Ms), m0), k0]))

        row_blocks(c, Ms, bm, block)

    def copy_in(c: Code, s: Ix, rb: Ix, m0: Ix, rows: int) -> None:
        """Staged: wait for row block rb of shard s in stage, copy it into G."""
        row = c.add(c.mul(s, Ms), m0)
        c.wait(arrived, c.add(c.mul(s, nrb), rb), 1)
        k_tiles(c, lambda c, k0: c.store(c.load(stage, [row, k0], [rows, bk], "shard"), G,
                                         [row, k0]))

    def consume(c: Code, src: SSAValue, src_row: Ix, out_row: Ix, rows: int) -> None:
        for B, Y in zip(Bs, Ys):
            N = shape_of(B)[1]
            bn = min(f.tile_n, N)

            def tile(c: Code, ni: Ix, B=B, Y=Y, N=N, bn=bn) -> None:
                n0 = c.mul(ni, bn)
                acc = gemm_tile(c, src, src_row, B, 0, n0, rows, bn, K, bk)
                c.store(c.cast(acc, Y.type.element_type), Y, [out_row, n0])

            c.foreach([ceil_div(N, bn)], tile, ["ni"])

    def local(c: Code) -> None:
        row_blocks(c, Ms, bm, lambda c, rb, m0, rows, _ni: consume(
            c, X, m0, c.add(c.mul(c.rank(), Ms), m0), rows))

    def remote_step(c: Code, i: Ix) -> None:
        s = c.rotate(i, W)

        def block(c: Code, rb: Ix, m0: Ix, rows: int, _ni: Ix) -> None:
            row = c.add(c.mul(s, Ms), m0)
            if inter or elide:
                c.wait(ready, c.add(c.mul(s, nrb), rb), 1)
            else:
                copy_in(c, s, rb, m0, rows)
            consume(c, G, row, row, rows)

        row_blocks(c, Ms, bm, block)

    def comm_step(c: Code, i: Ix) -> None:
        push(c, i)
        if not elide:
            s = c.rotate(i, W)

            def block(c: Code, rb: Ix, m0: Ix, rows: int, _ni: Ix) -> None:
                copy_in(c, s, rb, m0, rows)
                c.signal(ready, c.add(c.mul(s, nrb), rb), c.rank())

            row_blocks(c, Ms, bm, block)

    def comm(c: Code) -> None:
        c.rank()
        if f.gathered:
            copy_own(c)
        c.loop(1, W, 1, comm_step)

    def compute(c: Code) -> None:
        c.rank()
        if not inter:
            if f.gathered:
                copy_own(c)
            c.loop(1, W, 1, push)
        local(c)
        c.loop(1, W, 1, remote_step)

    kb.worker(k.WorkerRole.COMPUTE, compute)
    if inter:
        kb.worker(k.WorkerRole.COMMUNICATE, comm)


# -- all_to_all -> grouped matmul -> all_to_all (MoE) ------------------------------------


def _build_moe(kb: KernelBuilder, f: Fusion, W: int, elide: bool) -> None:
    """Row layout (2-d views, see overlap.py): X has W*E*C token rows, block (q, e) of C
    rows goes to expert e of rank q; Wt stacks the E local experts' K x N weights; the
    received activations D hold block (e, s) at rows (e*W + s)*C; the result row block of
    (e, s) returns to rank s at rows (r*E + e)*C of its output.
    Dispatch: rank r pushes block (q, e) to rank q = (r - i) mod W at step i (staged: into
    q's dstage {staging}, copied into D by q; elided: into q's symmetric D). Grouped GEMM:
    the local blocks (from X, no wait) first, then source (r + i) mod W's as they arrive.
    Combine: each result tile goes back to its source rank (staged: into its cstage
    {staging}, copied into the output at the end; elided: into its symmetric output)."""
    X, Wt, O = kb.args
    R, K = shape_of(X)
    N, odt, dt = shape_of(Wt)[1], O.type.element_type, X.type.element_type
    E, C = f.experts, f.capacity
    bm, bn, bk = min(f.tile_m, C), min(f.tile_n, N), min(f.tile_k, K)
    nrb, TN = ceil_div(C, bm), ceil_div(N, bn)
    blocks = W * E * nrb
    inter, exact_k = f.overlap is OverlapStyle.INTER, E > 1
    if elide:
        D, dstage, combine_to = kb.alloc("recv", [E * W * C, K], dt, symmetric=True), None, O
    else:
        dstage = kb.alloc("dstage", [E * W * C, K], dt, symmetric=True, staging=True)
        D = kb.alloc("recv", [E * W * C, K], dt)
        combine_to = kb.alloc("cstage", [R, N], odt, symmetric=True, staging=True)
    ysend = kb.alloc("send", [E * W * C, N], odt) if inter else None
    ready = kb.signals("ready", blocks)
    disp = None if elide else kb.signals("dispatched", blocks)
    yready = kb.signals("computed", blocks) if inter else None
    combined = kb.signals("combined", 1)

    def slot(c: Code, e: Ix, s: Ix, rb: Ix) -> Ix:
        return c.add(c.mul(c.add(c.mul(s, E), e), nrb), rb)

    def d_row(c: Code, e: Ix, s: Ix, m0: Ix) -> Ix:
        return c.add(c.mul(c.add(c.mul(e, W), s), C), m0)

    def out_row(c: Code, e: Ix, m0: Ix) -> Ix:  # row in the source's output
        return c.add(c.mul(c.add(c.mul(c.rank(), E), e), C), m0)

    def blocks_of(c: Code, body: Callable) -> None:
        """body(code, e, rb, m0, rows) for every (expert, row block) of one source."""
        c.loop(0, E, 1, lambda c, e: row_blocks(
            c, C, bm, lambda c, rb, m0, rows, _ni: body(c, e, rb, m0, rows)), name="e")

    def k_tiles(c: Code, body: Callable) -> None:
        c.loop(0, ceil_div(K, bk) * bk, bk, lambda c, k0: body(c, k0), name="k")

    def dispatch(c: Code, i: Ix) -> None:
        q = c.rotate(i, W, back=True)

        def block(c: Code, e: Ix, rb: Ix, m0: Ix, rows: int) -> None:
            src = c.add(c.mul(c.add(c.mul(q, E), e), C), m0)
            dst = d_row(c, e, c.rank(), m0)
            k_tiles(c, lambda c, k0: c.put(c.load(X, [src, k0], [rows, bk], "tokens"),
                                           dstage if dstage is not None else D, [dst, k0], q))
            c.signal(disp if disp is not None else ready, slot(c, e, c.rank(), rb), q)

        blocks_of(c, block)

    def copy_in(c: Code, s: Ix, e: Ix, rb: Ix, m0: Ix, rows: int) -> None:
        row = d_row(c, e, s, m0)
        c.wait(disp, slot(c, e, s, rb), 1)
        k_tiles(c, lambda c, k0: c.store(c.load(dstage, [row, k0], [rows, bk], "tokens"), D,
                                         [row, k0]))

    def expert_block(c: Code, src: SSAValue, src_row: Ix, s: Ix, e: Ix, rb: Ix, m0: Ix,
                     rows: int) -> None:
        def tile(c: Code, ni: Ix) -> None:
            n0 = c.mul(ni, bn)
            acc = gemm_tile(c, src, src_row, Wt, c.mul(e, K), n0, rows, bn, K, bk, exact_k)
            y = c.cast(acc, odt)
            if inter:
                c.store(y, ysend, [d_row(c, e, s, m0), n0])
            else:
                c.put(y, combine_to, [out_row(c, e, m0), n0], s)

        c.foreach([TN], tile, ["ni"])
        if inter:
            c.signal(yready, slot(c, e, s, rb), c.rank())
        else:
            c.signal(combined, 0, s)

    def local(c: Code) -> None:
        r = c.rank()
        blocks_of(c, lambda c, e, rb, m0, rows: expert_block(
            c, X, c.add(c.mul(c.add(c.mul(r, E), e), C), m0), r, e, rb, m0, rows))

    def remote_step(c: Code, i: Ix) -> None:
        s = c.rotate(i, W)

        def block(c: Code, e: Ix, rb: Ix, m0: Ix, rows: int) -> None:
            if inter or elide:
                c.wait(ready, slot(c, e, s, rb), 1)
            else:
                copy_in(c, s, e, rb, m0, rows)
            expert_block(c, D, d_row(c, e, s, m0), s, e, rb, m0, rows)

        blocks_of(c, block)

    def combine_step(c: Code, i: Ix) -> None:
        s = c.rotate(i, W)

        def block(c: Code, e: Ix, rb: Ix, m0: Ix, rows: int) -> None:
            c.wait(yready, slot(c, e, s, rb), 1)
            c.loop(0, TN, 1, lambda c, ni: c.put(
                c.load(ysend, [d_row(c, e, s, m0), c.mul(ni, bn)], [rows, bn], "result"),
                combine_to, [out_row(c, e, m0), c.mul(ni, bn)], s), name="ni")
            c.signal(combined, 0, s)

        blocks_of(c, block)

    def receive_step(c: Code, i: Ix) -> None:
        s = c.rotate(i, W)

        def block(c: Code, e: Ix, rb: Ix, m0: Ix, rows: int) -> None:
            copy_in(c, s, e, rb, m0, rows)
            c.signal(ready, slot(c, e, s, rb), c.rank())

        blocks_of(c, block)

    def finish(c: Code) -> None:
        c.wait(combined, 0, blocks)
        if not elide:
            copy_tiles(c, combine_to, O, R, N, min(f.tile_m, R), bn)

    def compute(c: Code) -> None:
        c.rank()
        if not inter:
            c.loop(1, W, 1, dispatch)
        local(c)
        c.loop(1, W, 1, remote_step)
        finish(c)

    def comm(c: Code) -> None:
        c.rank()
        c.loop(1, W, 1, dispatch)
        if not elide:
            c.loop(1, W, 1, receive_step)
        c.loop(0, W, 1, combine_step)

    kb.worker(k.WorkerRole.COMPUTE, compute)
    if inter:
        kb.worker(k.WorkerRole.COMMUNICATE, comm)


_BUILDERS = {
    Pattern.MM_REDUCE_SCATTER: _build_mm_reduce_scatter,
    Pattern.MM_ALL_REDUCE: _build_mm_all_reduce,
    Pattern.ALL_GATHER_MM: _build_all_gather_mm,
    Pattern.MOE: _build_moe,
}
