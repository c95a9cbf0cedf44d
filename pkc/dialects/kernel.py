"""Kernel-level pk ops: one fused kernel per ``pk.kernel``, launched on every rank at once.

A ``pk.kernel`` takes per-rank tensors and returns per-rank tensors. Its body sees them as
buffers (block arguments: one local buffer per input, then one buffer per output, which may
be symmetric), allocates symmetric scratch buffers and signal arrays, and holds workers.
All workers of a kernel run concurrently on each rank, each on its own group of SMs. A
worker's body is sequential code over tiles: loads, MMAs, maps, stores, puts to peers,
signals and waits; ``pk.foreach`` spreads independent iterations over the worker's SMs;
``scf.for`` (with ``arith`` index math) is a sequential loop.

Memory model (what the interpreter checks and what codegen must preserve):
* ``pk.put`` writes a tile into a peer's symmetric buffer asynchronously. The data is
  guaranteed visible to another worker only after the putting worker's next ``pk.signal``
  (release) and the reader's matching ``pk.wait`` (acquire), or after the kernel ends.
* ``pk.signal`` atomically adds ``value`` to one counter of a peer's signal array;
  ``pk.wait`` blocks until one of the worker's own rank's counters reaches a threshold.
  Counters are zero at kernel entry.
* Loads and stores outside a buffer's bounds read zeros and are dropped (TMA's rules), so
  tiles need not divide shapes.
"""

from __future__ import annotations

from collections.abc import Sequence

import sys
from typing import TYPE_CHECKING

from xdsl.dialects.builtin import (
    ArrayAttr,
    FloatAttr,
    IndexType,
    IntegerAttr,
    StringAttr,
    TensorType,
    UnitAttr,
    f32,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    attr_def,
    irdl_op_definition,
    lazy_traits_def,
    operand_def,
    opt_attr_def,
    opt_operand_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.traits import HasAncestor, HasParent, IsTerminator, Pure
from xdsl.utils.exceptions import VerifyException

from pkc.dialects.common import (
    MAX_SMS,
    int_array,
    int_list,
    reduced_shape,
    scalar_attr,
    verify_map,
    verify_reduce,
    verify_scalar,
    verify_world,
)
from pkc.dialects.rank_groups import verify_groups
from pkc.dialects.types import (BufferType, SignalsType, TileType, is_float, mma_operands_problem,
                                shape_str)
from pkc.kinds import Kind

if TYPE_CHECKING:
    from pkc.dialects.schedule_structure import ScheduleOp

Value = SSAValue | Operation


def _classes_if_loaded(module: str, *names: str) -> tuple[type, ...]:
    """The classes ``names`` of ``module`` if that module was imported, else none.

    The arith and pks ops a kernel may hold are looked up this way instead of importing
    their modules here: an op whose module was never imported cannot be in the IR, and
    importing arith and the whole pks dialect with pk would cost every pkc-opt run on
    graph-level IR start-up time (pkc.ir loads each dialect on first use)."""
    loaded = sys.modules.get(module)
    return tuple(getattr(loaded, n) for n in names) if loaded is not None else ()


class WorkerRole(Kind):
    """What a ``pk.worker`` does (its ``role`` attribute)."""

    COMPUTE = "compute"            # computes tiles (and, with intra-SM overlap, puts them)
    COMMUNICATE = "communicate"    # moves tiles between ranks


WORKER_ROLES = tuple(WorkerRole)


def enclosing_kernel(op: Operation) -> "KernelOp | None":
    p = op.parent_op()
    while p is not None and not isinstance(p, KernelOp):
        p = p.parent_op()
    return p


def constant_index(v: SSAValue) -> int | None:
    """The value of an index defined by ``arith.constant``, else None."""
    owner = v.owner
    constant = _classes_if_loaded("xdsl.dialects.arith", "ConstantOp")
    if isinstance(owner, constant) and isinstance(owner.value, IntegerAttr):
        return owner.value.value.data
    return None


def _check_peer(op: Operation, peer: SSAValue | None) -> None:
    """Rejects a constant peer index outside [0, world)."""
    if peer is None:
        return
    p = constant_index(peer)
    kernel = enclosing_kernel(op)
    if p is None or kernel is None:
        return
    w = kernel.world_size
    if not 0 <= p < w:
        raise VerifyException(f"'{op.name}' peer {p} is outside the world of {w} ranks (0..{w - 1})")


def _check_indices(op: Operation, buf: BufferType, indices: Sequence[SSAValue]) -> None:
    if len(indices) != buf.rank:
        raise VerifyException(
            f"'{op.name}' needs {buf.rank} indices for {buf}, got {len(indices)}"
        )
    for i, v in enumerate(indices):
        c = constant_index(v)
        if c is not None and not 0 <= c < buf.get_shape()[i]:
            raise VerifyException(
                f"'{op.name}' offset {c} in dimension {i} is outside {buf} (size {buf.get_shape()[i]})"
            )


def _check_tile_fits(op: Operation, tile: TileType, buf: BufferType) -> None:
    if tile.rank != buf.rank:
        raise VerifyException(f"'{op.name}' tile {tile} and buffer {buf} differ in rank")
    if tile.element_type != buf.element_type:
        raise VerifyException(
            f"'{op.name}' tile element type {tile.element_type} differs from buffer {buf}"
        )


def _sig(t: Attribute, op: str) -> tuple[tuple[int, ...], Attribute]:
    if not isinstance(t, TileType):
        raise VerifyException(f"'{op}' expects tiles, got {t}")
    return t.get_shape(), t.element_type


# ----------------------------------------------------------------------------------------
# Structure: kernel, workers, loops, terminator.


@irdl_op_definition
class YieldOp(IRDLOperation):
    """Ends the body of a pk.kernel, pk.worker or pk.foreach."""

    name = "pk.yield"
    traits = lazy_traits_def(lambda: (IsTerminator(), HasParent(KernelOp, WorkerOp, ForeachOp)))
    assembly_format = "attr-dict"

    def __init__(self):
        super().__init__()


@irdl_op_definition
class KernelOp(IRDLOperation):
    """One fused kernel launched on all ``world`` ranks; see the module docstring."""

    name = "pk.kernel"
    kernel_name = attr_def(StringAttr)
    world = attr_def(IntegerAttr)
    # Sub-groups: the kernel runs once per listed group, ``world`` being one group's size,
    # ranks and peers numbered inside the group (pkc/dialects/rank_groups.py).
    group_ranks = opt_attr_def(ArrayAttr)
    inputs = var_operand_def(TensorType)
    outputs = var_result_def(TensorType)
    body = region_def("single_block")
    assembly_format = (
        "$kernel_name `(` $inputs `)` attr-dict `:` functional-type($inputs, $outputs) $body"
    )

    def __init__(self, kernel_name: str, world: int, inputs: Sequence[Value],
                 output_types: Sequence[Attribute], body: Region,
                 attributes: dict[str, Attribute] | None = None):
        attrs = {"kernel_name": StringAttr(kernel_name), "world": IntegerAttr(world, i64)}
        attrs.update(attributes or {})
        super().__init__(operands=[list(inputs)], result_types=[list(output_types)],
                         regions=[body], attributes=attrs)

    @property
    def world_size(self) -> int:
        return self.world.value.data

    @property
    def block(self) -> Block:
        return self.body.blocks[0]

    def schedule(self) -> ScheduleOp | None:
        """The schedule-level program, once a scheduling pass wrote one."""
        schedule_op = _classes_if_loaded("pkc.dialects.schedule_structure", "ScheduleOp")
        for op in self.block.ops:
            if isinstance(op, schedule_op):
                return op
        return None

    def workers(self) -> list["WorkerOp"]:
        return [op for op in self.block.ops if isinstance(op, WorkerOp)]

    def verify_(self) -> None:
        verify_world(self.name, self.world_size)
        verify_groups(self, self.world_size)
        args = self.block.args
        n_in, n_out = len(self.inputs), len(self.outputs)
        if len(args) != n_in + n_out:
            raise VerifyException(
                f"'pk.kernel' @{self.kernel_name.data} body needs {n_in + n_out} buffer arguments "
                f"({n_in} inputs + {n_out} outputs), got {len(args)}"
            )
        for i, (v, a) in enumerate(zip(self.inputs, args[:n_in])):
            _check_buffer_matches(self, f"input {i}", v.type, a.type,
                                  allow_symmetric=_symmetric_result(v))
        for i, (r, a) in enumerate(zip(self.outputs, args[n_in:])):
            _check_buffer_matches(self, f"output {i}", r.type, a.type, allow_symmetric=True)
        allowed = (AllocOp, AllocSignalsOp, WorkerOp, YieldOp,
                   *_classes_if_loaded("xdsl.dialects.arith", "ConstantOp"),
                   *_classes_if_loaded("pkc.dialects.schedule_structure", "TmapOp", "ScheduleOp"),
                   *_classes_if_loaded("pkc.dialects.schedule_fused", "PeerTmapOp", "RowsTmapOp"),
                   *_classes_if_loaded("pkc.dialects.schedule_ag", "TmapViewOp"))
        for op in self.block.ops:
            if not isinstance(op, allowed):
                raise VerifyException(
                    f"'pk.kernel' body holds only pk.alloc, pk.alloc_signals, pk.worker, "
                    f"arith.constant and (scheduled) pks.tmap / pks.schedule; found '{op.name}' "
                    "(put it inside a pk.worker)"
                )
        if self.schedule() is not None:
            if self.workers():
                raise VerifyException(f"'pk.kernel' @{self.kernel_name.data} has both a "
                                      "pks.schedule and pk.worker ops")
            return
        if not self.workers():
            raise VerifyException(f"'pk.kernel' @{self.kernel_name.data} has no pk.worker")


def _symmetric_result(v: SSAValue) -> bool:
    """Whether ``v`` is (a ``pk.reshape`` view of) a ``pk.kernel`` result that lives in
    symmetric memory: only such a value may be a symmetric input (a kernel that reads the
    peers' copies, e.g. the pull all-gather after a fused GEMM + reduce-scatter)."""
    while isinstance(v.owner, Operation) and v.owner.name == "pk.reshape":
        v = v.owner.operands[0]
    kop = v.owner
    if not isinstance(kop, KernelOp):
        return False
    i = len(kop.inputs) + list(kop.results).index(v)
    args = kop.body.blocks[0].args if kop.body.blocks else ()
    # a malformed producer (its own verifier names it) is not a symmetric source
    return i < len(args) and isinstance(args[i].type, BufferType) and args[i].type.symmetric


def _check_buffer_matches(op, what, tensor: Attribute, buf: Attribute, allow_symmetric: bool):
    if not isinstance(buf, BufferType) or not isinstance(tensor, TensorType):
        raise VerifyException(f"'pk.kernel' {what}: block argument must be a !pk.buffer, got {buf}")
    if buf.get_shape() != tuple(tensor.get_shape()) or buf.element_type != tensor.element_type:
        raise VerifyException(f"'pk.kernel' {what}: buffer {buf} does not match tensor {tensor}")
    if buf.symmetric and not allow_symmetric:
        raise VerifyException(f"'pk.kernel' {what}: input buffers are local unless the value is "
                              f"a pk.kernel's symmetric output, got {buf}")


@irdl_op_definition
class AllocOp(IRDLOperation):
    """A scratch buffer for the kernel's lifetime; with ``zero`` it starts at 0, otherwise
    its contents are undefined (the interpreter fills them with NaN/poison)."""

    name = "pk.alloc"
    zero = opt_attr_def(UnitAttr)
    result = result_def(BufferType)
    traits = lazy_traits_def(lambda: (HasParent(KernelOp),))
    assembly_format = "attr-dict `:` type($result)"

    def __init__(self, buffer_type: BufferType, zero: bool = False):
        super().__init__(result_types=[buffer_type], attributes={"zero": UnitAttr()} if zero else {})


@irdl_op_definition
class AllocSignalsOp(IRDLOperation):
    """A symmetric array of signal counters, zero at kernel entry."""

    name = "pk.alloc_signals"
    result = result_def(SignalsType)
    traits = lazy_traits_def(lambda: (HasParent(KernelOp),))
    assembly_format = "attr-dict `:` type($result)"

    def __init__(self, count: int):
        super().__init__(result_types=[SignalsType(count)])


@irdl_op_definition
class WorkerOp(IRDLOperation):
    """A group of SMs with one role, running its body concurrently with the other workers.

    ``sms`` is the number of SMs given to it; absent until sm-partition decides.
    """

    name = "pk.worker"
    role = attr_def(StringAttr)
    sms = opt_attr_def(IntegerAttr)
    body = region_def("single_block")
    traits = traits_def(HasParent(KernelOp))
    assembly_format = "$role attr-dict-with-keyword $body"

    def __init__(self, role: WorkerRole | str, body: Region, sms: int | None = None):
        attrs: dict[str, Attribute] = {"role": StringAttr(str(role))}   # verify_ checks it
        if sms is not None:
            attrs["sms"] = IntegerAttr(sms, i64)
        super().__init__(regions=[body], attributes=attrs)

    @property
    def sm_count(self) -> int | None:
        return None if self.sms is None else self.sms.value.data

    @property
    def role_kind(self) -> WorkerRole:
        """The ``role`` (the verifier checked it is one)."""
        return WorkerRole.parse(self.role.data, "'pk.worker' role")

    def verify_(self) -> None:
        if self.role.data not in WORKER_ROLES:
            raise VerifyException(
                f"'pk.worker' role \"{self.role.data}\" is not one of {', '.join(WORKER_ROLES)}"
            )
        if self.sm_count is not None and self.sm_count < 1:
            raise VerifyException(f"'pk.worker' needs at least one SM, got sms = {self.sm_count}")
        if self.sm_count is not None and self.sm_count > MAX_SMS:
            raise VerifyException(
                f"'pk.worker' sms = {self.sm_count} is more than any GPU has (limit {MAX_SMS})"
            )
        if self.body.blocks[0].args:
            raise VerifyException("'pk.worker' body takes no block arguments")


@irdl_op_definition
class ForeachOp(IRDLOperation):
    """Runs its body for every point of the grid ``bounds`` (index block arguments).

    Iterations are independent and are spread over the worker's SMs in no fixed order.
    """

    name = "pk.foreach"
    bounds = attr_def()
    body = region_def("single_block")
    traits = traits_def(HasAncestor(WorkerOp))
    assembly_format = "attr-dict-with-keyword $body"

    def __init__(self, bounds: Sequence[int], body: Region):
        super().__init__(regions=[body], attributes={"bounds": int_array(bounds)})

    def grid(self) -> list[int]:
        return int_list(self.bounds)

    def verify_(self) -> None:
        grid = self.grid()
        if not grid or any(b < 1 for b in grid):
            raise VerifyException(f"'pk.foreach' bounds must be positive, got {grid}")
        args = self.body.blocks[0].args
        if len(args) != len(grid) or any(not isinstance(a.type, IndexType) for a in args):
            raise VerifyException(
                f"'pk.foreach' over a {len(grid)}-d grid needs {len(grid)} index block arguments"
            )


@irdl_op_definition
class RankOp(IRDLOperation):
    """The index of the rank executing this op (0 .. world-1); in a kernel over
    sub-groups (``group_ranks``), its index inside its group."""

    name = "pk.rank"
    result = result_def(IndexType)
    traits = traits_def(Pure(), HasAncestor(KernelOp))
    assembly_format = "attr-dict"

    def __init__(self):
        super().__init__(result_types=[IndexType()])


# ----------------------------------------------------------------------------------------
# Data movement.


@irdl_op_definition
class LoadOp(IRDLOperation):
    """Loads a tile at element offsets ``indices`` of a buffer: the executing rank's own,
    or peer ``peer``'s copy of a symmetric buffer. Out-of-bounds elements read 0."""

    name = "pk.load"
    buffer = operand_def(BufferType)
    indices = var_operand_def(IndexType)
    peer = opt_operand_def(IndexType)
    result = result_def(TileType)
    irdl_options = (AttrSizedOperandSegments(as_property=False),)
    traits = traits_def(HasAncestor(WorkerOp))
    assembly_format = (
        "$buffer `[` $indices `]` (`from` $peer^)? attr-dict `:` type($buffer) `->` type($result)"
    )

    def __init__(self, buffer: Value, indices: Sequence[Value], tile_type: TileType,
                 peer: Value | None = None):
        super().__init__(operands=[buffer, list(indices), [peer] if peer is not None else []],
                         result_types=[tile_type])

    def verify_(self) -> None:
        buf, tile = self.buffer.type, self.result.type
        _check_tile_fits(self, tile, buf)
        _check_indices(self, buf, self.indices)
        if self.peer is not None and not buf.symmetric:
            raise VerifyException(f"'pk.load' from a peer needs a symmetric buffer, got {buf}")
        _check_peer(self, self.peer)


@irdl_op_definition
class StoreOp(IRDLOperation):
    """Stores a tile into the executing rank's buffer; out-of-bounds elements are dropped."""

    name = "pk.store"
    tile = operand_def(TileType)
    buffer = operand_def(BufferType)
    indices = var_operand_def(IndexType)
    traits = traits_def(HasAncestor(WorkerOp))
    assembly_format = "$tile `,` $buffer `[` $indices `]` attr-dict `:` type($tile) `,` type($buffer)"

    def __init__(self, tile: Value, buffer: Value, indices: Sequence[Value]):
        super().__init__(operands=[tile, buffer, list(indices)])

    def verify_(self) -> None:
        _check_tile_fits(self, self.tile.type, self.buffer.type)
        _check_indices(self, self.buffer.type, self.indices)


@irdl_op_definition
class PutOp(IRDLOperation):
    """Writes a tile into peer ``peer``'s copy of a symmetric buffer (asynchronously; see
    the memory model). With ``add`` the tile is added to what is there (atomic)."""

    name = "pk.put"
    tile = operand_def(TileType)
    buffer = operand_def(BufferType)
    indices = var_operand_def(IndexType)
    peer = operand_def(IndexType)
    add = opt_attr_def(UnitAttr)
    traits = traits_def(HasAncestor(WorkerOp))
    assembly_format = (
        "$tile `,` $buffer `[` $indices `]` `to` $peer (`add` $add^)? attr-dict "
        "`:` type($tile) `,` type($buffer)"
    )

    def __init__(self, tile: Value, buffer: Value, indices: Sequence[Value], peer: Value,
                 add: bool = False):
        super().__init__(operands=[tile, buffer, list(indices), peer],
                         attributes={"add": UnitAttr()} if add else {})

    def verify_(self) -> None:
        buf = self.buffer.type
        _check_tile_fits(self, self.tile.type, buf)
        _check_indices(self, buf, self.indices)
        if not buf.symmetric:
            raise VerifyException(f"'pk.put' needs a symmetric destination buffer, got {buf}")
        if self.add is not None and not is_float(buf.element_type):
            raise VerifyException(f"'pk.put' with add needs float elements, got {buf.element_type}")
        _check_peer(self, self.peer)


def _check_slot(op: Operation, sigs: SignalsType, slot: SSAValue) -> None:
    c = constant_index(slot)
    if c is not None and not 0 <= c < sigs.count.data:
        raise VerifyException(f"'{op.name}' slot {c} is outside {sigs}")


@irdl_op_definition
class SignalOp(IRDLOperation):
    """Atomically adds ``value`` (default 1) to counter ``slot`` of peer ``peer``'s signal
    array, after all of this worker's earlier puts (release)."""

    name = "pk.signal"
    signals = operand_def(SignalsType)
    slot = operand_def(IndexType)
    peer = operand_def(IndexType)
    value = opt_attr_def(IntegerAttr)
    traits = traits_def(HasAncestor(WorkerOp))
    assembly_format = "$signals `[` $slot `]` `to` $peer attr-dict `:` type($signals)"

    def __init__(self, signals: Value, slot: Value, peer: Value, value: int = 1):
        attrs = {} if value == 1 else {"value": IntegerAttr(value, i64)}
        super().__init__(operands=[signals, slot, peer], attributes=attrs)

    @property
    def increment(self) -> int:
        return 1 if self.value is None else self.value.value.data

    def verify_(self) -> None:
        _check_slot(self, self.signals.type, self.slot)
        _check_peer(self, self.peer)
        if self.increment < 1:
            raise VerifyException(f"'pk.signal' value must be >= 1, got {self.increment}")


@irdl_op_definition
class WaitOp(IRDLOperation):
    """``pk.wait %s[%slot] until %n``: blocks until counter ``slot`` of the executing rank's signal array is >= ``expected``
    (acquire). Bounded: a wait that can never be satisfied is an error, not a hang."""

    name = "pk.wait"
    signals = operand_def(SignalsType)
    slot = operand_def(IndexType)
    expected = operand_def(IndexType)
    traits = traits_def(HasAncestor(WorkerOp))
    assembly_format = "$signals `[` $slot `]` `until` $expected attr-dict `:` type($signals)"

    def __init__(self, signals: Value, slot: Value, expected: Value):
        super().__init__(operands=[signals, slot, expected])

    def verify_(self) -> None:
        _check_slot(self, self.signals.type, self.slot)
        c = constant_index(self.expected)
        if c is not None and c < 1:
            raise VerifyException(f"'pk.wait' threshold must be >= 1, got {c}")


# ----------------------------------------------------------------------------------------
# Compute on tiles.


@irdl_op_definition
class MmaOp(IRDLOperation):
    """``acc + a @ b`` on tiles: a is MxK, b is KxN (same float type), acc and result MxN f32."""

    name = "pk.mma"
    a = operand_def(TileType)
    b = operand_def(TileType)
    acc = operand_def(TileType)
    result = result_def(TileType)
    traits = traits_def(Pure())
    assembly_format = (
        "$a `,` $b `,` $acc attr-dict `:` type($a) `,` type($b) `,` type($acc) `->` type($result)"
    )

    def __init__(self, a: Value, b: Value, acc: Value):
        super().__init__(operands=[a, b, acc], result_types=[SSAValue.get(acc).type])

    def verify_(self) -> None:
        a, b, c, r = self.a.type, self.b.type, self.acc.type, self.result.type
        if a.rank != 2 or b.rank != 2 or c.rank != 2:
            raise VerifyException(f"'pk.mma' needs 2-d tiles, got {a}, {b}, {c}")
        (m, k), (k2, n) = a.get_shape(), b.get_shape()
        if k != k2:
            raise VerifyException(f"'pk.mma' contraction dims differ: a {a} has K={k}, b {b} has K={k2}")
        if c.get_shape() != (m, n):
            raise VerifyException(f"'pk.mma' accumulator {c} should be {m}x{n}")
        if (why := mma_operands_problem(a.element_type, b.element_type)) is not None:
            raise VerifyException(f"'pk.mma' {why}")
        if c.element_type != f32:
            raise VerifyException(f"'pk.mma' accumulates in f32, got {c.element_type}")
        if r != c:
            raise VerifyException(f"'pk.mma' result {r} must equal the accumulator type {c}")


@irdl_op_definition
class TileMapOp(IRDLOperation):
    """Elementwise ``fn`` on tiles, with the same functions and rules as ``pk.map``."""

    name = "pk.tile_map"
    fn = attr_def(StringAttr)
    inputs = var_operand_def(TileType)
    result = result_def(TileType)
    traits = traits_def(Pure())
    assembly_format = "$fn $inputs attr-dict `:` functional-type($inputs, $result)"

    def __init__(self, fn: str, inputs: Sequence[Value], result_type: TileType):
        super().__init__(operands=[list(inputs)], result_types=[result_type],
                         attributes={"fn": StringAttr(fn)})

    def verify_(self) -> None:
        verify_map(self.name, self.fn.data, [_sig(v.type, self.name) for v in self.inputs],
                   _sig(self.result.type, self.name))


@irdl_op_definition
class TileReduceOp(IRDLOperation):
    """Reduces a tile over ``dims``, with the rules of ``pk.reduce``."""

    name = "pk.tile_reduce"
    fn = attr_def(StringAttr)
    dims = attr_def()
    keepdim = opt_attr_def(UnitAttr)
    input = operand_def(TileType)
    result = result_def(TileType)
    traits = traits_def(Pure())
    assembly_format = "$fn $input attr-dict `:` type($input) `->` type($result)"

    def __init__(self, fn: str, input: Value, dims: Sequence[int], keepdim: bool = True):
        t = SSAValue.get(input).type
        attrs: dict[str, Attribute] = {"fn": StringAttr(fn), "dims": int_array(dims)}
        if keepdim:
            attrs["keepdim"] = UnitAttr()
        rt = TileType(reduced_shape(t.get_shape(), dims, keepdim), t.element_type)
        super().__init__(operands=[input], result_types=[rt], attributes=attrs)

    def verify_(self) -> None:
        verify_reduce(self.name, self.fn.data, int_list(self.dims), self.keepdim is not None,
                      _sig(self.input.type, self.name), _sig(self.result.type, self.name))


@irdl_op_definition
class TileFillOp(IRDLOperation):
    """A tile whose every element is ``value``."""

    name = "pk.tile_fill"
    value = attr_def(FloatAttr | IntegerAttr)
    result = result_def(TileType)
    traits = traits_def(Pure())
    assembly_format = "attr-dict `:` type($result)"

    def __init__(self, value: float | int, tile_type: TileType):
        super().__init__(result_types=[tile_type],
                         attributes={"value": scalar_attr(value, tile_type.element_type)})

    def verify_(self) -> None:
        verify_scalar(self.name, self.value, self.result.type.element_type)


KERNEL_OPS = [
    KernelOp, YieldOp, AllocOp, AllocSignalsOp, WorkerOp, ForeachOp, RankOp,
    LoadOp, StoreOp, PutOp, SignalOp, WaitOp, MmaOp, TileMapOp, TileReduceOp, TileFillOp,
]

__all__ = [c.__name__ for c in KERNEL_OPS] + ["enclosing_kernel", "constant_index", "shape_str"]
