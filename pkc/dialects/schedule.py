"""The schedule level of pk (dialect ``pks``): what a fast kernel is made of on a modern GPU.

Why a dialect of its own (and not more ops at the kernel level): kernel-level pk says *what*
moves and is computed per tile, with sequential meaning per worker; the schedule level says
*how* one CTA does it - warp roles with register budgets, a ring of shared-memory stages
guarded by mbarriers with explicit phases, TMA copies through typed tensor maps, an
asynchronous MMA with commit and wait, a persistent tile loop. Its ops are concurrent
(roles run at once and synchronize only through mbarriers), so they need their own
verifiers and interpreter semantics; mixing them with kernel-level ops in one dialect would
blur which rules hold where. A schedule-level kernel is a ``pk.kernel`` whose body holds
``pks`` ops (written by a scheduling pass, e.g. ``schedule-matmul``), so that the graph
around it and the buffers it gets stay the kernel level's.

The ops are fine-grained on purpose (as Gluon writes Triton kernels): a pass can add a
stage, move a wait, change a role's register budget or the epilogue's piece width, and the
lowering (``pkc.codegen.lower_schedule``) maps each op to a few PTX instructions per target.
Scalars are ``i32`` values computed with ``arith``; loops are ``scf.for`` over ``i32``.

Types: ``!pks.tmap<bf16, 64x128, swizzle 128>`` (a TMA tensor map: element, box innermost
first, swizzle bytes), ``!pks.smem<4 x 16384>`` (shared-memory slots: count x bytes, 1024-B
aligned), ``!pks.mbarriers<4, 1>`` (count x expected arrivals per phase),
``!pks.acc<128x256>`` (a warpgroup's f32 accumulator: rows x columns).
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

from xdsl.dialects.builtin import (
    ArrayAttr,
    IntAttr,
    StringAttr,
    i1,
    i32,
)
from xdsl.ir import Attribute, Block, Dialect, ParametrizedAttribute, Region, SSAValue, TypeAttribute
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    attr_def,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    opt_attr_def,
    opt_operand_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.traits import IsTerminator, NoTerminator
from xdsl.utils.exceptions import VerifyException

ELEMENT_BYTES = {"bf16": 2, "f16": 2, "f32": 4}
SWIZZLES = (0, 32, 64, 128)
MAX_SMEM = 232448            # dynamic shared memory per CTA on sm_90 / sm_100 (227 KiB)


class RoleKind(Enum):
    PRODUCER = "producer"
    CONSUMER = "consumer"
    MMA = "mma"              # issues the MMAs of an accumulator the epilogue role reads
    EPILOGUE = "epilogue"    # reads a shared (tensor-memory) accumulator and stores it


class BMajor(Enum):
    """How the B operand's stage is laid out: K contiguous (``[N, K]`` given) or N."""

    K = "k"
    N = "n"


def _fail(op: str, msg: str) -> None:
    raise VerifyException(f"'{op}' {msg}")


# ----------------------------------------------------------------------------------------
# Types


@irdl_attr_definition
class TmapType(ParametrizedAttribute, TypeAttribute):
    """A TMA tensor map of a kernel buffer: element type, box (innermost dimension first),
    swizzle in bytes (0, 32, 64, 128). Out-of-bounds loads fill zeros; stores clip."""

    name = "pks.tmap"
    element: StringAttr
    box: ArrayAttr[IntAttr]
    swizzle: IntAttr

    def __init__(self, element: str, box: Sequence[int], swizzle: int):
        super().__init__(StringAttr(element), ArrayAttr([IntAttr(b) for b in box]), IntAttr(swizzle))

    @property
    def box_dims(self) -> list[int]:
        return [b.data for b in self.box.data]

    @property
    def box_bytes(self) -> int:
        n = ELEMENT_BYTES[self.element.data]
        for b in self.box_dims:
            n *= b
        return n

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> list[Attribute]:
        with parser.in_angle_brackets():
            el = parser.parse_identifier()
            parser.parse_punctuation(",")
            dims = parser.parse_dimension_list()
            parser.parse_punctuation(",")
            parser.parse_keyword("swizzle")
            sw = parser.parse_integer()
        return [StringAttr(el), ArrayAttr([IntAttr(d) for d in dims]), IntAttr(sw)]

    def print_parameters(self, printer: Printer) -> None:
        dims = "x".join(str(d) for d in self.box_dims)
        printer.print_string(f"<{self.element.data}, {dims}, swizzle {self.swizzle.data}>")

    def verify(self) -> None:
        el, box, sw = self.element.data, self.box_dims, self.swizzle.data
        if el not in ELEMENT_BYTES:
            raise VerifyException(f"!pks.tmap element {el!r} not in {sorted(ELEMENT_BYTES)}")
        if not 2 <= len(box) <= 3:
            raise VerifyException(f"!pks.tmap box has rank {len(box)}; pkc uses rank 2-3")
        if any(not 1 <= b <= 256 for b in box):
            raise VerifyException(f"!pks.tmap box {box}: each dimension must be 1..256 (TMA)")
        inner = box[0] * ELEMENT_BYTES[el]
        if inner % 16:
            raise VerifyException(f"!pks.tmap box inner dimension is {inner} bytes, not a multiple of 16")
        if sw not in SWIZZLES:
            raise VerifyException(f"!pks.tmap swizzle {sw} not in {SWIZZLES}")
        if sw and inner > sw:
            raise VerifyException(f"!pks.tmap box inner dimension is {inner} bytes, more than "
                                  f"its {sw}-byte swizzle span")


@irdl_attr_definition
class SmemType(ParametrizedAttribute, TypeAttribute):
    """``count`` shared-memory slots of ``bytes`` each (a ring's stages, epilogue buffers)."""

    name = "pks.smem"
    count: IntAttr
    bytes: IntAttr

    def __init__(self, count: int, nbytes: int):
        super().__init__(IntAttr(count), IntAttr(nbytes))

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> list[Attribute]:
        with parser.in_angle_brackets():
            c = parser.parse_integer()
            parser.parse_keyword("x")
            b = parser.parse_integer()
        return [IntAttr(c), IntAttr(b)]

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<{self.count.data} x {self.bytes.data}>")

    def verify(self) -> None:
        if self.count.data < 1 or self.bytes.data < 16 or self.bytes.data % 16:
            raise VerifyException(f"!pks.smem<{self.count.data} x {self.bytes.data}>: needs >= 1 "
                                  "slot of a positive multiple of 16 bytes")


@irdl_attr_definition
class MbarriersType(ParametrizedAttribute, TypeAttribute):
    """``count`` mbarriers, each completing a phase after ``arrivals`` arrivals (and the
    transaction bytes announced with them)."""

    name = "pks.mbarriers"
    count: IntAttr
    arrivals: IntAttr

    def __init__(self, count: int, arrivals: int):
        super().__init__(IntAttr(count), IntAttr(arrivals))

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> list[Attribute]:
        with parser.in_angle_brackets():
            c = parser.parse_integer()
            parser.parse_punctuation(",")
            a = parser.parse_integer()
        return [IntAttr(c), IntAttr(a)]

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<{self.count.data}, {self.arrivals.data}>")

    def verify(self) -> None:
        if self.count.data < 1 or self.arrivals.data < 1:
            raise VerifyException(f"!pks.mbarriers<{self.count.data}, {self.arrivals.data}>: "
                                  "count and arrivals must be >= 1")


@irdl_attr_definition
class AccType(ParametrizedAttribute, TypeAttribute):
    """A warpgroup's f32 accumulator tile: ``rows`` (a multiple of 64: one MMA row slice
    each) x ``cols`` (a multiple of 8 up to 256)."""

    name = "pks.acc"
    rows: IntAttr
    cols: IntAttr

    def __init__(self, rows: int, cols: int):
        super().__init__(IntAttr(rows), IntAttr(cols))

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> list[Attribute]:
        with parser.in_angle_brackets():
            dims = parser.parse_dimension_list()
        if len(dims) != 2:
            parser.raise_error("!pks.acc takes rows x cols")
        return [IntAttr(dims[0]), IntAttr(dims[1])]

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<{self.rows.data}x{self.cols.data}>")

    def verify(self) -> None:
        r, c = self.rows.data, self.cols.data
        if r % 64 or not 64 <= r <= 128:
            raise VerifyException(f"!pks.acc<{r}x{c}>: rows must be 64 or 128 per warpgroup")
        if c % 8 or not 8 <= c <= 256:
            raise VerifyException(f"!pks.acc<{r}x{c}>: cols must be a multiple of 8 in 8..256")

    def check_registers(self) -> None:
        """A warpgroup's accumulator in registers (an ``acc_alloc`` inside a role) holds
        ``rows / 64 * cols / 2`` f32 registers per thread: at most 128."""
        r, c = self.rows.data, self.cols.data
        if r // 64 * c // 2 > 128:
            raise VerifyException(f"!pks.acc<{r}x{c}>: {r // 64 * c // 2} f32 registers per "
                                  "thread (at most 128)")


# ----------------------------------------------------------------------------------------
# Structure


@irdl_op_definition
class YieldOp(IRDLOperation):
    name = "pks.yield"
    values = var_operand_def()
    traits = traits_def(IsTerminator())

    def __init__(self, values: Sequence[SSAValue] = ()):
        super().__init__(operands=[list(values)])


@irdl_op_definition
class ScheduleOp(IRDLOperation):
    """The CTA program of a ``pk.kernel``: ``threads`` per CTA, CTAs per ``cluster``, a
    persistent grid (one CTA per SM), bounded mbarrier waits (``timeout_ns``; 0: none).
    Every thread runs the body; ``pks.role`` regions split it."""

    name = "pks.schedule"
    threads = attr_def(IntAttr)
    cluster = attr_def(IntAttr)
    timeout_ns = attr_def(IntAttr)
    body = region_def("single_block")
    traits = traits_def(NoTerminator())

    def __init__(self, threads: int, cluster: int = 1, timeout_ns: int = 0):
        super().__init__(regions=[Region(Block())],
                         attributes={"threads": IntAttr(threads), "cluster": IntAttr(cluster),
                                     "timeout_ns": IntAttr(timeout_ns)})

    @property
    def block(self) -> Block:
        return self.body.blocks[0]

    def verify_(self) -> None:
        t, c = self.threads.data, self.cluster.data
        if t % 128 or not 128 <= t <= 1024:
            _fail(self.name, f"threads = {t}: must be whole warpgroups (128) up to 1024")
        if c not in (1, 2, 4):
            _fail(self.name, f"cluster = {c}: must be 1, 2 or 4")
        smem = 0
        for op in self.block.ops:
            if isinstance(op, SmemAllocOp):
                smem += op.result.type.count.data * op.result.type.bytes.data
        if smem > MAX_SMEM - 1024:
            _fail(self.name, f"needs {smem} bytes of shared memory (limit {MAX_SMEM - 1024} with "
                  "the 1 KiB of alignment slack)")
        wgs = t // 128
        for op in self.block.ops:
            if isinstance(op, RoleOp):
                last = op.first.data + op.warpgroups.data
                if last > wgs:
                    _fail(op.name, f"uses warpgroups {op.first.data}..{last - 1} of a "
                          f"{wgs}-warpgroup CTA")


@irdl_op_definition
class RoleOp(IRDLOperation):
    """Warpgroups ``first .. first + warpgroups - 1`` run the body (the others skip it);
    ``regs``: their per-thread register budget (setmaxnreg; 0 keeps the launch's);
    ``single_thread``: only the role's first thread runs it (a TMA producer)."""

    name = "pks.role"
    kind = attr_def(StringAttr)
    first = attr_def(IntAttr)
    warpgroups = attr_def(IntAttr)
    regs = attr_def(IntAttr)
    single_thread = opt_attr_def(IntAttr)
    body = region_def("single_block")

    def __init__(self, kind: RoleKind, first: int, warpgroups: int, regs: int,
                 single_thread: bool = False):
        attrs = {"kind": StringAttr(kind.value), "first": IntAttr(first),
                 "warpgroups": IntAttr(warpgroups), "regs": IntAttr(regs)}
        if single_thread:
            attrs["single_thread"] = IntAttr(1)
        super().__init__(regions=[Region(Block())], attributes=attrs)

    @property
    def block(self) -> Block:
        return self.body.blocks[0]

    @property
    def role(self) -> RoleKind:
        return RoleKind(self.kind.data)

    def verify_(self) -> None:
        try:
            RoleKind(self.kind.data)
        except ValueError:
            _fail(self.name, f"kind {self.kind.data!r} not in {[k.value for k in RoleKind]}")
        r = self.regs.data
        if r and (r % 8 or not 24 <= r <= 256):
            _fail(self.name, f"regs = {r}: a register budget is a multiple of 8 in 24..256")
        if self.warpgroups.data < 1:
            _fail(self.name, "needs at least one warpgroup")


@irdl_op_definition
class WarpgroupIndexOp(IRDLOperation):
    """Which of its role's warpgroups this thread belongs to (0-based)."""

    name = "pks.warpgroup_index"
    result = result_def(i32)

    def __init__(self):
        super().__init__(result_types=[i32])


@irdl_op_definition
class ClusterRankOp(IRDLOperation):
    """This CTA's rank in its cluster (0 without clusters)."""

    name = "pks.cluster_rank"
    result = result_def(i32)

    def __init__(self):
        super().__init__(result_types=[i32])


@irdl_op_definition
class TileLoopOp(IRDLOperation):
    """The persistent tile loop: this CTA (cluster) visits tiles ``id, id + grid, ...`` of
    the ``ceil(M / bm) x ceil(N / bn)`` output tiles in grouped order (``group_m`` row
    blocks share a column sweep, for L2 reuse; with clusters a cluster takes ``cluster``
    vertically adjacent tiles). The body gets the tile's first row and column and the
    loop-carried values."""

    name = "pks.tile_loop"
    m = operand_def(i32)
    n = operand_def(i32)
    inits = var_operand_def()
    bm = attr_def(IntAttr)
    bn = attr_def(IntAttr)
    group_m = attr_def(IntAttr)
    res = var_result_def()
    body = region_def("single_block")

    def __init__(self, m: SSAValue, n: SSAValue, inits: Sequence[SSAValue], bm: int, bn: int,
                 group_m: int):
        block = Block(arg_types=[i32, i32, *[v.type for v in inits]])
        super().__init__(operands=[m, n, list(inits)], result_types=[[v.type for v in inits]],
                         regions=[Region(block)],
                         attributes={"bm": IntAttr(bm), "bn": IntAttr(bn), "group_m": IntAttr(group_m)})

    @property
    def block(self) -> Block:
        return self.body.blocks[0]

    def verify_(self) -> None:
        if self.bm.data % 64 or self.bn.data % 8 or self.group_m.data < 1:
            _fail(self.name, f"tile {self.bm.data}x{self.bn.data} group_m {self.group_m.data}: "
                  "bm a multiple of 64, bn of 8, group_m >= 1")
        term = self.block.last_op
        if not isinstance(term, YieldOp) or len(term.values) != len(self.inits):
            _fail(self.name, "body must end in a pks.yield of its carried values")


# ----------------------------------------------------------------------------------------
# Resources


@irdl_op_definition
class TmapOp(IRDLOperation):
    """A TMA tensor map of kernel buffer ``buffer`` (a ``pk.kernel`` block argument); the
    runtime encodes it on the host and passes it by value."""

    name = "pks.tmap"
    buffer = operand_def()
    result = result_def(TmapType)

    def __init__(self, buffer: SSAValue, t: TmapType):
        super().__init__(operands=[buffer], result_types=[t])


@irdl_op_definition
class SmemAllocOp(IRDLOperation):
    """Shared-memory slots (1024-byte aligned, the 128-byte swizzle's atom)."""

    name = "pks.smem_alloc"
    result = result_def(SmemType)

    def __init__(self, count: int, nbytes: int):
        super().__init__(result_types=[SmemType(count, nbytes)])


@irdl_op_definition
class MbarrierAllocOp(IRDLOperation):
    """mbarriers, initialized once per CTA before any role starts."""

    name = "pks.mbarrier_alloc"
    result = result_def(MbarriersType)

    def __init__(self, count: int, arrivals: int):
        super().__init__(result_types=[MbarriersType(count, arrivals)])


# ----------------------------------------------------------------------------------------
# Synchronization


@irdl_op_definition
class MbarrierWaitOp(IRDLOperation):
    """Wait until the phase of ``bars[index]`` with ``parity`` (0 or 1) has completed."""

    name = "pks.mbarrier_wait"
    bars = operand_def(MbarriersType)
    index = operand_def(i32)
    parity = operand_def(i32)

    def __init__(self, bars: SSAValue, index: SSAValue, parity: SSAValue):
        super().__init__(operands=[bars, index, parity])


@irdl_op_definition
class MbarrierArriveOp(IRDLOperation):
    """One arrival on ``bars[index]`` (from one thread; where ``pred`` holds, if given).
    ``tx_bytes``: the arrival also announces that many bytes of TMA traffic. ``all_ctas``:
    arrive on the barrier of that index in every CTA of the cluster (a stage shared
    through multicast is released everywhere)."""

    name = "pks.mbarrier_arrive"
    bars = operand_def(MbarriersType)
    index = operand_def(i32)
    pred = opt_operand_def(i1)
    tx_bytes = opt_attr_def(IntAttr)
    all_ctas = opt_attr_def(IntAttr)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, bars: SSAValue, index: SSAValue, pred: SSAValue | None = None,
                 tx_bytes: int | None = None, all_ctas: bool = False):
        attrs = {}
        if tx_bytes is not None:
            attrs["tx_bytes"] = IntAttr(tx_bytes)
        if all_ctas:
            attrs["all_ctas"] = IntAttr(1)
        super().__init__(operands=[bars, index, [pred] if pred else []], attributes=attrs)

    def verify_(self) -> None:
        if self.tx_bytes is not None and self.all_ctas is not None:
            _fail(self.name, "an arrival that announces tx bytes is local to its CTA")


@irdl_op_definition
class WarpgroupBarrierOp(IRDLOperation):
    """The 128 threads of this warpgroup wait for each other (a named barrier per
    warpgroup)."""

    name = "pks.warpgroup_barrier"

    def __init__(self):
        super().__init__()


@irdl_op_definition
class FenceAsyncSharedOp(IRDLOperation):
    """Order this thread's shared-memory writes before later async-proxy (TMA) reads."""

    name = "pks.fence_async_shared"

    def __init__(self):
        super().__init__()


@irdl_op_definition
class ClusterSyncOp(IRDLOperation):
    """Every thread of every CTA of the cluster meets here (release / acquire)."""

    name = "pks.cluster_sync"

    def __init__(self):
        super().__init__()


# ----------------------------------------------------------------------------------------
# Data movement


@irdl_op_definition
class TmaLoadOp(IRDLOperation):
    """A TMA load of ``tmap``'s box at ``coords`` (innermost first) into slot ``slot`` of
    ``dst`` at ``offset`` bytes; completion counted on ``bars[bar]``. ``multicast`` = the
    cluster size: the box lands in every CTA of the cluster (each signalled on its own
    barrier of that index)."""

    name = "pks.tma_load"
    tmap = operand_def(TmapType)
    coords = var_operand_def(i32)
    dst = operand_def(SmemType)
    slot = operand_def(i32)
    offset = operand_def(i32)
    bars = operand_def(MbarriersType)
    bar = operand_def(i32)
    multicast = opt_attr_def(IntAttr)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, tmap: SSAValue, coords: Sequence[SSAValue], dst: SSAValue, slot: SSAValue,
                 offset: SSAValue, bars: SSAValue, bar: SSAValue, multicast: int = 0):
        super().__init__(operands=[tmap, list(coords), dst, slot, offset, bars, bar],
                         attributes={"multicast": IntAttr(multicast)} if multicast else {})

    def verify_(self) -> None:
        t = self.tmap.type
        if len(self.coords) != len(t.box_dims):
            _fail(self.name, f"{len(self.coords)} coordinates for a rank-{len(t.box_dims)} map")
        if t.box_bytes > self.dst.type.bytes.data:
            _fail(self.name, f"box of {t.box_bytes} bytes does not fit a "
                  f"{self.dst.type.bytes.data}-byte slot")


@irdl_op_definition
class TmaPrefetchOp(IRDLOperation):
    """Bring ``tmap``'s descriptor into the cache before its first copy."""

    name = "pks.tma_prefetch"
    tmap = operand_def(TmapType)

    def __init__(self, tmap: SSAValue):
        super().__init__(operands=[tmap])


@irdl_op_definition
class TmaStoreOp(IRDLOperation):
    """A TMA store (``reduce`` = "add": reduce-add) of slot ``slot`` of ``src`` to
    ``tmap``'s box at ``coords``, issued by the warpgroup's first thread into its bulk
    group."""

    name = "pks.tma_store"
    src = operand_def(SmemType)
    slot = operand_def(i32)
    tmap = operand_def(TmapType)
    coords = var_operand_def(i32)
    reduce = opt_attr_def(StringAttr)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, src: SSAValue, slot: SSAValue, tmap: SSAValue, coords: Sequence[SSAValue],
                 reduce: str | None = None):
        super().__init__(operands=[src, slot, tmap, list(coords)],
                         attributes={"reduce": StringAttr(reduce)} if reduce else {})

    def verify_(self) -> None:
        t = self.tmap.type
        if len(self.coords) != len(t.box_dims):
            _fail(self.name, f"{len(self.coords)} coordinates for a rank-{len(t.box_dims)} map")
        if self.reduce is not None and self.reduce.data != "add":
            _fail(self.name, f"reduce {self.reduce.data!r}: only 'add'")


@irdl_op_definition
class BulkCommitOp(IRDLOperation):
    """Close the warpgroup's current bulk group (its first thread's TMA stores)."""

    name = "pks.bulk_commit"

    def __init__(self):
        super().__init__()


@irdl_op_definition
class BulkWaitOp(IRDLOperation):
    """Wait until at most ``pending`` bulk groups are in flight (``read``: only their reads
    of shared memory must be done)."""

    name = "pks.bulk_wait"
    pending = attr_def(IntAttr)
    read = opt_attr_def(IntAttr)

    def __init__(self, pending: int, read: bool = False):
        attrs = {"pending": IntAttr(pending)}
        if read:
            attrs["read"] = IntAttr(1)
        super().__init__(attributes=attrs)


# ----------------------------------------------------------------------------------------
# Compute


TMEM_COLUMNS = 512          # tensor memory per CTA on sm_100: 128 lanes x 512 32-bit columns


@irdl_op_definition
class AccAllocOp(IRDLOperation):
    """An accumulator; contents undefined until an MMA writes. Inside a ``pks.role``: the
    warpgroup's own (registers, wgmma on sm_90a). At the top of a ``pks.schedule``: one
    accumulator of the CTA, which one role's MMAs write and another role reads (tensor
    memory on sm_100a: ``rows`` lanes x ``cols`` 32-bit columns, allocated before the roles
    start and freed after they end); all of them together at most 512 columns."""

    name = "pks.acc_alloc"
    result = result_def(AccType)

    def __init__(self, rows: int, cols: int):
        super().__init__(result_types=[AccType(rows, cols)])

    def verify_(self) -> None:
        parent = self.parent_op()
        if isinstance(parent, ScheduleOp):
            if self.result.type.rows.data != 128:
                _fail(self.name, f"a CTA accumulator has 128 rows (tensor-memory lanes), got "
                      f"{self.result.type.rows.data}")
            cols = sum(o.result.type.cols.data for o in parent.block.ops
                       if isinstance(o, AccAllocOp))
            if cols > TMEM_COLUMNS:
                _fail(self.name, f"the CTA accumulators take {cols} columns of tensor memory "
                      f"(at most {TMEM_COLUMNS})")
        else:
            try:
                self.result.type.check_registers()
            except VerifyException as e:
                _fail(self.name, str(e))


@irdl_op_definition
class AccSelectOp(IRDLOperation):
    """Accumulator ``index`` of ``accs`` (CTA accumulators of one type: a ring the MMA role
    fills while the epilogue role drains another)."""

    name = "pks.acc_select"
    index = operand_def(i32)
    accs = var_operand_def(AccType)
    result = result_def(AccType)

    def __init__(self, index: SSAValue, accs: Sequence[SSAValue]):
        super().__init__(operands=[index, list(accs)], result_types=[accs[0].type])

    def verify_(self) -> None:
        if not self.accs:
            _fail(self.name, "needs at least one accumulator")
        for a in self.accs:
            if a.type != self.result.type:
                _fail(self.name, f"accumulators of different types ({a.type} vs {self.result.type})")
            if not isinstance(a.owner, AccAllocOp) or not isinstance(a.owner.parent_op(), ScheduleOp):
                _fail(self.name, "selects among CTA accumulators (pks.acc_alloc at the top of "
                      "the pks.schedule)")


@irdl_op_definition
class MmaAsyncOp(IRDLOperation):
    """Issue acc (+)= A @ B for one 64-deep k-block, asynchronously: A is rows ``a_row`` ..
    ``a_row + acc.rows`` of slot ``a_slot`` of ``a`` (K-major, 128-byte rows, 128-byte
    swizzle), B is slot ``b_slot`` of ``b`` (``b_major``: K- or N-major); ``accumulate``
    false overwrites. Completes at a later ``pks.mma_wait``; lowered to wgmma (sm_90a) or
    tcgen05 (sm_100a)."""

    name = "pks.mma_async"
    acc = operand_def(AccType)
    a = operand_def(SmemType)
    a_slot = operand_def(i32)
    a_row = operand_def(i32)
    b = operand_def(SmemType)
    b_slot = operand_def(i32)
    accumulate = operand_def(i1)
    dtype = attr_def(StringAttr)
    b_major = attr_def(StringAttr)

    def __init__(self, acc: SSAValue, a: SSAValue, a_slot: SSAValue, a_row: SSAValue, b: SSAValue,
                 b_slot: SSAValue, accumulate: SSAValue, dtype: str, b_major: BMajor):
        super().__init__(operands=[acc, a, a_slot, a_row, b, b_slot, accumulate],
                         attributes={"dtype": StringAttr(dtype), "b_major": StringAttr(b_major.value)})

    def verify_(self) -> None:
        if self.dtype.data not in ("bf16", "f16"):
            _fail(self.name, f"dtype {self.dtype.data!r}: bf16 or f16")
        try:
            major = BMajor(self.b_major.data)
        except ValueError:
            _fail(self.name, f"b_major {self.b_major.data!r} not k / n")
        cols = self.acc.type.cols.data
        need_b = cols * 128
        if self.b.type.bytes.data < need_b:
            _fail(self.name, f"B slot of {self.b.type.bytes.data} bytes < {need_b} for {cols} columns")
        if major is BMajor.N and cols % 64:
            _fail(self.name, f"N-major B needs acc columns a multiple of 64, got {cols}")


@irdl_op_definition
class MmaCommitOp(IRDLOperation):
    """Close the group of MMAs issued since the last commit."""

    name = "pks.mma_commit"

    def __init__(self):
        super().__init__()


@irdl_op_definition
class MmaCommitArriveOp(IRDLOperation):
    """Close the group of MMAs this thread issued since the last commit and arrive once on
    mbarrier ``index`` of ``bars`` when all of them have completed (their shared-memory
    operands may then be overwritten, their accumulator read). Lowered to
    ``tcgen05.commit`` (sm_100a)."""

    name = "pks.mma_commit_arrive"
    bars = operand_def(MbarriersType)
    index = operand_def(i32)

    def __init__(self, bars: SSAValue, index: SSAValue):
        super().__init__(operands=[bars, index])


@irdl_op_definition
class MmaWaitOp(IRDLOperation):
    """Wait until at most ``pending`` MMA groups are in flight."""

    name = "pks.mma_wait"
    pending = attr_def(IntAttr)

    def __init__(self, pending: int):
        super().__init__(attributes={"pending": IntAttr(pending)})


@irdl_op_definition
class AccStoreSmemOp(IRDLOperation):
    """Round ``acc``'s columns ``col .. col + width`` of row slice ``slice`` (64 rows) to
    ``dtype`` and write them to slot ``slot`` of ``dst`` as a 64 x ``width`` row-major box,
    swizzled for a TMA store (row bytes = swizzle span)."""

    name = "pks.acc_store_smem"
    acc = operand_def(AccType)
    dst = operand_def(SmemType)
    slot = operand_def(i32)
    slice = attr_def(IntAttr)
    col = attr_def(IntAttr)
    width = attr_def(IntAttr)
    dtype = attr_def(StringAttr)

    def __init__(self, acc: SSAValue, dst: SSAValue, slot: SSAValue, slice: int, col: int,
                 width: int, dtype: str):
        super().__init__(operands=[acc, dst, slot],
                         attributes={"slice": IntAttr(slice), "col": IntAttr(col),
                                     "width": IntAttr(width), "dtype": StringAttr(dtype)})

    def verify_(self) -> None:
        a = self.acc.type
        w, c = self.width.data, self.col.data
        if w not in (16, 32, 64):
            _fail(self.name, f"width {w}: 16, 32 or 64 columns (one swizzle span)")
        if c % w or c + w > a.cols.data or self.slice.data >= a.rows.data // 64:
            _fail(self.name, f"slice {self.slice.data} columns {c}..{c + w} outside !pks.acc<"
                  f"{a.rows.data}x{a.cols.data}>")
        if 64 * w * 2 > self.dst.type.bytes.data:
            _fail(self.name, f"a 64x{w} piece does not fit a {self.dst.type.bytes.data}-byte slot")


@irdl_op_definition
class AccStoreGlobalOp(IRDLOperation):
    """Round ``acc`` to ``dtype`` and store it to the row-major ``rows x cols`` matrix at
    ``ptr`` (a buffer argument) from row ``row`` and column ``col``, each thread writing its
    fragments straight from registers; rows >= ``rows`` / columns >= ``cols`` are skipped."""

    name = "pks.acc_store_global"
    acc = operand_def(AccType)
    buffer = operand_def()
    row = operand_def(i32)
    col = operand_def(i32)
    rows = operand_def(i32)
    cols = operand_def(i32)
    dtype = attr_def(StringAttr)

    def __init__(self, acc: SSAValue, buffer: SSAValue, row: SSAValue, col: SSAValue,
                 rows: SSAValue, cols: SSAValue, dtype: str):
        super().__init__(operands=[acc, buffer, row, col, rows, cols],
                         attributes={"dtype": StringAttr(dtype)})


SCHEDULE_OPS = [
    YieldOp, ScheduleOp, RoleOp, WarpgroupIndexOp, ClusterRankOp, TileLoopOp, TmapOp, SmemAllocOp,
    MbarrierAllocOp, MbarrierWaitOp, MbarrierArriveOp, WarpgroupBarrierOp, FenceAsyncSharedOp,
    ClusterSyncOp, TmaLoadOp, TmaPrefetchOp, TmaStoreOp, BulkCommitOp, BulkWaitOp, AccAllocOp, MmaAsyncOp,
    MmaCommitOp, MmaWaitOp, AccStoreSmemOp, AccStoreGlobalOp, AccSelectOp, MmaCommitArriveOp,
]
SCHEDULE_TYPES = [TmapType, SmemType, MbarriersType, AccType]

# the communication ops of the same dialect (peer pointers, epochs, signals, LL packets,
# vector copies); that module imports nothing from this one
from pkc.dialects.schedule_comm import COMM_OPS, COMM_TYPES  # noqa: E402
# and the fused GEMM + collective ops (peer tensor maps, the chunked tile loop, store-or-add)
from pkc.dialects.schedule_fused import FUSED_OPS  # noqa: E402
from pkc.dialects.schedule_ag import AG_OPS  # noqa: E402

# and the MoE kernel's (the grouped tile loop over run-time row counts, count words)
from pkc.dialects.schedule_moe import MOE_OPS  # noqa: E402

PKS = Dialect("pks", SCHEDULE_OPS + COMM_OPS + FUSED_OPS + AG_OPS + MOE_OPS,
              SCHEDULE_TYPES + COMM_TYPES)

__all__ = ["PKS", "RoleKind", "BMajor", *[c.__name__ for c in SCHEDULE_OPS + SCHEDULE_TYPES]]
