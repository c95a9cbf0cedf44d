"""Communication ops of the schedule level (dialect ``pks``): what a collective kernel over
symmetric memory is made of.

A scheduled collective is a ``pk.kernel`` whose ``pks.schedule`` body is written with these
ops (by ``schedule-collectives``), the same way a scheduled GEMM is written with the ring,
TMA and MMA ops of :mod:`pkc.dialects.schedule`: fine-grained, so that a pass can move a
signal, change an unroll, drop the own slot's store or swap a push for a pull without a new
kernel kind. The ops join the ``pks`` dialect (:data:`pkc.dialects.schedule.PKS`).

The model (one thread's view; every CTA of every rank runs the same body):

* Memory: ``!pks.ptr`` is a 64-bit global address. ``pks.ptr %buf`` is a local buffer's
  address or, for a symmetric buffer (``pk.alloc`` / an output ``!pk.buffer<..,
  symmetric>``), this rank's copy; ``pks.ptr %buf, %peer`` is rank ``peer``'s copy (a peer
  pointer: stores through it are NVLink writes). Data moves in 16-byte vectors
  (``!pks.vec``: 4 words held by one thread): ``pks.vec_load`` / ``pks.vec_store`` take a
  vector index (+ an offset) and a bound (vectors at or past it are skipped);
  ``pks.vec_loop`` visits ``[lo, hi)`` with the CTA's threads (``unroll`` vectors per thread
  per trip); ``pks.vec_sum`` adds W vectors in f32 in operand (rank) order and rounds once.
* Epochs: signal pads are monotonic u32 counters, zeroed once at allocation. Every launch
  reads its epoch from the rank's device-side control word (``pks.epoch``: the stored
  value + 1, read before the CTA's first barrier) and ``pks.epoch_publish`` lets the last
  CTA store it for the next launch: kernel parameters are the same on every launch, so a
  CUDA graph replays correctly. A wait is satisfied once ``(s32)(pad - epoch) >= 0``.
* Signals: ``pks.fence_sys`` orders this thread's earlier stores before a ``pks.signal``
  (one relaxed system-scope add of 1 to a pad slot, usually a peer's); ``pks.signal_wait``
  spins (acquire) on a slot of the own pad. Every wait is bounded by the launch's timeout:
  on expiry it writes the rank's error record (site, rank, peer, seen, wanted, CTA,
  epoch) and stops waiting, so a missing peer is a host error, not a hang.
* LL packets (flags in the data): ``pks.ll_store`` writes a vector as two 16-byte halves,
  each 4-byte word paired with the epoch; ``pks.ll_wait`` polls W packets until every flag
  is the epoch (bounded), so a reader needs no signal and no fence. ``pks.ll_addr`` places
  packet ``line`` of a buffer (lines grouped by 32 so that a warp's halves are contiguous).
* Scalars: ``pks.launch_param`` (the rank; the vectors of a CTA's slice, from the launch's
  grid rule; the vectors of the tensor and of a chunk), ``pks.grid_value`` (thread index, CTA index, CTA count); ``pks.when`` runs
  its region where a condition holds. Arithmetic is ``arith`` on i32, as in the rest of
  the schedule level.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

from xdsl.dialects.builtin import IntAttr, StringAttr, i1, i32
from xdsl.ir import Block, ParametrizedAttribute, Region, SSAValue, TypeAttribute
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
from xdsl.traits import NoTerminator
from xdsl.utils.exceptions import VerifyException

from pkc.dialects.types import BufferType

VEC_BYTES = 16
SUM_DTYPES = ("bf16", "f16", "f32")
MAX_WORLD = 72          # the largest NVLink domain of a target (nvl72: 72 GPUs)
LL_GROUP = 32          # LL lines per group (one warp's): first halves, then second halves
LL_HALF = 512          # bytes from a group's first halves to its second halves


class CommParam(Enum):
    """Scalars a scheduled collective gets at launch (u32 parameters)."""

    RANK = "rank"      # this rank
    SLICE = "slice"    # vectors of a chunk per CTA (the launch's grid rule)
    # the sizes (16-byte vectors of the tensor, of a chunk): known when compiling, passed at
    # launch all the same: ptxas keeps values derived from parameters in uniform registers
    # (one per warp), and with the sizes as immediates it put the peer-pointer selection
    # and the slice bounds in per-thread registers (reduce-scatter W = 4: 528 instructions,
    # 50 LDC, no uniform compares; 544 / 22 / 16 with parameters, and 10% faster on the H200)
    VECS = "vecs"
    CHUNK = "chunk"


class GridValue(Enum):
    TID = "tid"        # thread index in the CTA
    CTA = "cta"        # CTA index in the grid
    CTAS = "ctas"      # CTAs in the grid


class CacheHint(Enum):
    NC = "nc"          # read-only (the local input)
    CG = "cg"          # L2 only: data peers wrote (L1 could hold a line of an earlier launch)


class WaitSite(Enum):
    """What a bounded wait waited for (the ``kind`` word of the error record)."""

    ARRIVAL = 1        # the peer's CTA arrived (its data is ready / its kernel started)
    EXIT = 2           # the peer's results were written into this rank
    GROUP = 3          # this rank's CTA of the previous group finished its exchange


def _fail(op: str, msg: str) -> None:
    raise VerifyException(f"'{op}' {msg}")


@irdl_attr_definition
class PtrType(ParametrizedAttribute, TypeAttribute):
    """A 64-bit global address (a buffer's, or a peer's copy of a symmetric buffer)."""

    name = "pks.ptr"


@irdl_attr_definition
class VecType(ParametrizedAttribute, TypeAttribute):
    """16 bytes held by one thread (4 x 32-bit words: 8 bf16 / f16 or 4 f32)."""

    name = "pks.vec"


PTR, VEC = PtrType(), VecType()


def _check_not_mc(op: str, ptr: SSAValue) -> None:
    """A multicast address (``pks.mc_ptr``) is only for the ``pks.mc_*`` ops."""
    if isinstance(ptr.owner, McPtrOp):    # (defined below; looked up when verifying)
        _fail(op, "of a multicast address (pks.mc_ptr): a plain access of one is undefined "
              "(PTX ISA, multimem); use pks.mc_ld_reduce / mc_store / mc_signal")


def _enum(op: str, cls, value: str) -> None:
    try:
        cls(value)
    except ValueError:
        _fail(op, f"{value!r} is not one of {[e.value for e in cls]}")


# ---- scalars and structure ----------------------------------------------------------------


@irdl_op_definition
class LaunchParamOp(IRDLOperation):
    """A u32 the launch passes (:class:`CommParam`): the rank, or the slice size."""

    name = "pks.launch_param"
    param = attr_def(StringAttr)
    result = result_def(i32)

    def __init__(self, param: CommParam):
        super().__init__(result_types=[i32], attributes={"param": StringAttr(param.value)})

    def verify_(self) -> None:
        _enum(self.name, CommParam, self.param.data)


@irdl_op_definition
class GridValueOp(IRDLOperation):
    """The thread's index in its CTA, the CTA's index, or the grid's CTA count."""

    name = "pks.grid_value"
    what = attr_def(StringAttr)
    result = result_def(i32)

    def __init__(self, what: GridValue):
        super().__init__(result_types=[i32], attributes={"what": StringAttr(what.value)})

    def verify_(self) -> None:
        _enum(self.name, GridValue, self.what.data)


@irdl_op_definition
class WhenOp(IRDLOperation):
    """Runs its region where ``cond`` holds (per thread)."""

    name = "pks.when"
    cond = operand_def(i1)
    body = region_def("single_block")
    traits = traits_def(NoTerminator())

    def __init__(self, cond: SSAValue):
        super().__init__(operands=[cond], regions=[Region(Block())])

    @property
    def block(self) -> Block:
        return self.body.blocks[0]


@irdl_op_definition
class VecLoopOp(IRDLOperation):
    """For the vectors ``[lo, hi)``, the CTA's threads in turn: a thread starts at ``lo +
    tid`` and takes ``unroll`` vectors per trip, ``stride`` apart (the CTA's threads); the
    next trip starts ``unroll * stride`` later. The region gets the ``unroll`` vector
    indices of a trip (some may be >= ``hi``: loads and stores take ``hi`` as their bound)."""

    name = "pks.vec_loop"
    lo = operand_def(i32)
    hi = operand_def(i32)
    unroll = attr_def(IntAttr)
    stride = attr_def(IntAttr)
    body = region_def("single_block")
    traits = traits_def(NoTerminator())

    def __init__(self, lo: SSAValue, hi: SSAValue, unroll: int, stride: int):
        super().__init__(operands=[lo, hi], regions=[Region(Block(arg_types=[i32] * unroll))],
                         attributes={"unroll": IntAttr(unroll), "stride": IntAttr(stride)})

    @property
    def block(self) -> Block:
        return self.body.blocks[0]

    def verify_(self) -> None:
        u, s = self.unroll.data, self.stride.data
        if not 1 <= u <= 8:
            _fail(self.name, f"unroll = {u}: 1..8 vectors per thread per trip")
        if s % 32 or not 32 <= s <= 1024:
            _fail(self.name, f"stride = {s}: whole warps, at most 1024 threads")
        if len(self.block.args) != u or any(a.type != i32 for a in self.block.args):
            _fail(self.name, f"region takes {u} i32 vector indices, has {len(self.block.args)}")


# ---- memory -------------------------------------------------------------------------------


@irdl_op_definition
class BufferPtrOp(IRDLOperation):
    """The address of buffer ``buffer`` (a ``pk.kernel`` argument or ``pk.alloc``): a
    local buffer's, the own copy of a symmetric one, or with ``peer`` rank ``peer``'s copy
    of a symmetric one (a peer pointer)."""

    name = "pks.ptr"
    buffer = operand_def(BufferType)
    peer = opt_operand_def(i32)
    result = result_def(PtrType)

    def __init__(self, buffer: SSAValue, peer: SSAValue | None = None):
        super().__init__(operands=[buffer, [peer] if peer is not None else []], result_types=[PTR])

    def verify_(self) -> None:
        if self.peer is not None and not self.buffer.type.symmetric:
            _fail(self.name, f"a peer's copy of {self.buffer.type}: only symmetric buffers "
                  "have copies on the peers")


@irdl_op_definition
class VecLoadOp(IRDLOperation):
    """Vector ``index + offset`` of ``ptr``, loaded where ``index < bound`` (if given) and
    ``pred`` holds (if given); elsewhere ``other`` (if given; else undefined). ``cache``: nc
    for the local input, cg for what peers wrote."""

    name = "pks.vec_load"
    ptr = operand_def(PtrType)
    index = operand_def(i32)
    bound = opt_operand_def(i32)
    offset = opt_operand_def(i32)
    pred = opt_operand_def(i1)
    other = opt_operand_def(VecType)
    cache = attr_def(StringAttr)
    result = result_def(VecType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, ptr: SSAValue, index: SSAValue, bound: SSAValue | None, cache: CacheHint,
                 offset: SSAValue | None = None, pred: SSAValue | None = None,
                 other: SSAValue | None = None):
        opt = [[x] if x is not None else [] for x in (bound, offset, pred, other)]
        super().__init__(operands=[ptr, index, *opt], result_types=[VEC],
                         attributes={"cache": StringAttr(cache.value)})

    def verify_(self) -> None:
        _enum(self.name, CacheHint, self.cache.data)
        _check_not_mc(self.name, self.ptr)
        if self.other is not None and self.pred is None:
            _fail(self.name, "'other' is the value where 'pred' fails: give both")


@irdl_op_definition
class VecStoreOp(IRDLOperation):
    """Store ``value`` at vector ``index + offset`` of ``ptr`` where ``index < bound`` (if
    given) and ``pred`` holds (if given)."""

    name = "pks.vec_store"
    ptr = operand_def(PtrType)
    index = operand_def(i32)
    value = operand_def(VecType)
    bound = opt_operand_def(i32)
    offset = opt_operand_def(i32)
    pred = opt_operand_def(i1)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, ptr: SSAValue, index: SSAValue, bound: SSAValue | None, value: SSAValue,
                 offset: SSAValue | None = None, pred: SSAValue | None = None):
        opt = [[x] if x is not None else [] for x in (bound, offset, pred)]
        super().__init__(operands=[ptr, index, value, *opt])

    def verify_(self) -> None:
        _check_not_mc(self.name, self.ptr)


@irdl_op_definition
class VecSumOp(IRDLOperation):
    """The element-wise sum of the operands in their order, in f32, rounded once to
    ``dtype`` (the rank-order reduction of the graph-level op: bitwise equal to it)."""

    name = "pks.vec_sum"
    values = var_operand_def(VecType)
    dtype = attr_def(StringAttr)
    result = result_def(VecType)

    def __init__(self, values: Sequence[SSAValue], dtype: str):
        super().__init__(operands=[list(values)], result_types=[VEC],
                         attributes={"dtype": StringAttr(dtype)})

    def verify_(self) -> None:
        if self.dtype.data not in SUM_DTYPES:
            _fail(self.name, f"dtype {self.dtype.data!r} not in {SUM_DTYPES}")
        if not 1 <= len(self.values) <= MAX_WORLD:
            _fail(self.name, f"sums 1..{MAX_WORLD} vectors, got {len(self.values)}")


# ---- epochs and signals -------------------------------------------------------------------


def _check_ctl(op: str, ctl: SSAValue) -> None:
    t = ctl.type
    if t.symmetric or t.get_shape() != (2,) or str(t.element_type) != "i32":
        _fail(op, f"the control buffer is a local !pk.buffer<2xi32> ([epoch, ctas_done]), got {t}")


@irdl_op_definition
class EpochOp(IRDLOperation):
    """This launch's epoch: word 0 of the rank's control buffer ``ctl`` (``[epoch,
    ctas_done]`` u32, zeroed once, kept across launches) + 1. Read before the CTA's first
    barrier (the publishing CTA passed that barrier before it stores the next one): at the
    top of a ``pks.schedule`` the lowering reads it ahead of the setup barrier (the mbarrier
    init's), so the load overlaps the setup; a kernel with no setup barrier (a collective's)
    puts a barrier after it."""

    name = "pks.epoch"
    ctl = operand_def(BufferType)
    result = result_def(i32)

    def __init__(self, ctl: SSAValue):
        super().__init__(operands=[ctl], result_types=[i32])

    def verify_(self) -> None:
        _check_ctl(self.name, self.ctl)


@irdl_op_definition
class EpochPublishOp(IRDLOperation):
    """Thread 0 of each CTA (where ``pred`` holds, if given: once per CTA) counts the CTA
    done in ``ctl``; the last of the grid stores ``epoch`` into the control word for the
    next launch and resets the count."""

    name = "pks.epoch_publish"
    ctl = operand_def(BufferType)
    epoch = operand_def(i32)
    pred = opt_operand_def(i1)

    def __init__(self, ctl: SSAValue, epoch: SSAValue, pred: SSAValue | None = None):
        super().__init__(operands=[ctl, epoch, [pred] if pred is not None else []])

    def verify_(self) -> None:
        _check_ctl(self.name, self.ctl)


@irdl_op_definition
class FenceSysOp(IRDLOperation):
    """``fence.acq_rel.sys``: this thread's earlier stores (and, after a CTA barrier, the
    CTA's) are visible to every rank before its later signals."""

    name = "pks.fence_sys"

    def __init__(self):
        super().__init__()


@irdl_op_definition
class SignalOp(IRDLOperation):
    """Add 1 to u32 slot ``slot`` of the pad at ``pad`` (usually a peer's): relaxed (order
    the data before it with ``pks.fence_sys``) or a release, at system or GPU scope."""

    name = "pks.signal"
    pad = operand_def(PtrType)
    slot = operand_def(i32)
    scope = attr_def(StringAttr)
    sem = attr_def(StringAttr)

    def __init__(self, pad: SSAValue, slot: SSAValue, scope: str = "sys", sem: str = "relaxed"):
        super().__init__(operands=[pad, slot], attributes={"scope": StringAttr(scope),
                                                           "sem": StringAttr(sem)})

    def verify_(self) -> None:
        _check_not_mc(self.name, self.pad)
        if self.scope.data not in ("sys", "gpu"):
            _fail(self.name, f"scope {self.scope.data!r}: sys (peers) or gpu (this rank)")
        if self.sem.data not in ("relaxed", "release"):
            _fail(self.name, f"sem {self.sem.data!r}: relaxed (after a pks.fence_sys) or release")


@irdl_op_definition
class SignalWaitOp(IRDLOperation):
    """Spin (acquire) until ``(s32)(pad[slot] - epoch) >= 0``, sleeping ``sleep_ns``
    between polls; bounded by the launch's timeout, after which the error record names
    ``site`` (:class:`WaitSite`), this rank, ``peer``, the value seen, the CTA and epoch."""

    name = "pks.signal_wait"
    pad = operand_def(PtrType)
    slot = operand_def(i32)
    epoch = operand_def(i32)
    peer = operand_def(i32)
    site = attr_def(IntAttr)
    scope = attr_def(StringAttr)
    sleep_ns = attr_def(IntAttr)

    def __init__(self, pad: SSAValue, slot: SSAValue, epoch: SSAValue, peer: SSAValue,
                 site: WaitSite, scope: str = "sys", sleep_ns: int = 32):
        super().__init__(operands=[pad, slot, epoch, peer],
                         attributes={"site": IntAttr(site.value), "scope": StringAttr(scope),
                                     "sleep_ns": IntAttr(sleep_ns)})

    def verify_(self) -> None:
        try:
            WaitSite(self.site.data)
        except ValueError:
            _fail(self.name, f"site {self.site.data} is not one of {[s.value for s in WaitSite]}")
        if self.scope.data not in ("sys", "gpu"):
            _fail(self.name, f"scope {self.scope.data!r}: sys (peers) or gpu (this rank)")
        if not 0 <= self.sleep_ns.data <= 1_000_000:
            _fail(self.name, f"sleep_ns = {self.sleep_ns.data}: 0..1000000")


# ---- LL packets ---------------------------------------------------------------------------


@irdl_op_definition
class LlAddrOp(IRDLOperation):
    """The address of LL line ``line`` of the buffer at ``base`` (32 bytes per line: a
    vector's 4 words, each with its flag; lines grouped by :data:`LL_GROUP`)."""

    name = "pks.ll_addr"
    base = operand_def(PtrType)
    line = operand_def(i32)
    result = result_def(PtrType)

    def __init__(self, base: SSAValue, line: SSAValue):
        super().__init__(operands=[base, line], result_types=[PTR])


@irdl_op_definition
class LlStoreOp(IRDLOperation):
    """Write ``value`` as an LL line at ``addr`` (a ``pks.ll_addr``), every word flagged
    with ``epoch`` (volatile stores: no fence, no signal), where ``pred`` holds."""

    name = "pks.ll_store"
    addr = operand_def(PtrType)
    value = operand_def(VecType)
    epoch = operand_def(i32)
    pred = opt_operand_def(i1)

    def __init__(self, addr: SSAValue, value: SSAValue, epoch: SSAValue,
                 pred: SSAValue | None = None):
        super().__init__(operands=[addr, value, epoch, [pred] if pred is not None else []])


@irdl_op_definition
class LlWaitOp(IRDLOperation):
    """Poll the LL lines at ``addrs`` (one per slot) until every word's flag is ``epoch``
    and return their vectors. All slots' loads are issued before any flag is checked (one
    latency, not W). With ``own`` and ``own_slot``: slot ``own_slot`` is ``own`` (not
    loaded). Bounded by the launch's timeout (the record names the first slot short)."""

    name = "pks.ll_wait"
    addrs = var_operand_def(PtrType)
    epoch = operand_def(i32)
    own = opt_operand_def(VecType)
    own_slot = opt_operand_def(i32)
    results_ = var_result_def(VecType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, addrs: Sequence[SSAValue], epoch: SSAValue, own: SSAValue | None = None,
                 own_slot: SSAValue | None = None):
        super().__init__(operands=[list(addrs), epoch, [own] if own is not None else [],
                                   [own_slot] if own_slot is not None else []],
                         result_types=[[VEC] * len(addrs)])

    def verify_(self) -> None:
        if not 1 <= len(self.addrs) <= MAX_WORLD:
            _fail(self.name, f"polls 1..{MAX_WORLD} slots, got {len(self.addrs)}")
        if (self.own is None) != (self.own_slot is None):
            _fail(self.name, "'own' and 'own_slot' go together")


# ---- NVLS (multimem on a multicast object) ------------------------------------------------


@irdl_op_definition
class McPtrOp(IRDLOperation):
    """The multicast address of symmetric buffer ``buffer``: one address for every rank's
    copy (a CUDA multicast object bound to them). Only the ``pks.mc_*`` ops take it: a
    plain load or store of a multicast address is undefined (PTX ISA, multimem). Emitted
    only for targets with NVLS (never run on the lent machines)."""

    name = "pks.mc_ptr"
    buffer = operand_def(BufferType)
    result = result_def(PtrType)

    def __init__(self, buffer: SSAValue):
        super().__init__(operands=[buffer], result_types=[PTR])

    def verify_(self) -> None:
        if not self.buffer.type.symmetric:
            _fail(self.name, f"{self.buffer.type}: only a symmetric buffer has a multicast "
                  "object (one copy per rank)")


def _check_mc(op: str, ptr: SSAValue) -> None:
    if not isinstance(ptr.owner, McPtrOp):
        _fail(op, "takes a multicast address (pks.mc_ptr)")


@irdl_op_definition
class McLoadReduceOp(IRDLOperation):
    """The element-wise sum over every rank's copy of vector ``index + offset`` at the
    multicast address ``ptr`` (the switch reduces: ``multimem.ld_reduce``), in f32, rounded
    once to ``dtype``; where ``index < bound`` (if given)."""

    name = "pks.mc_ld_reduce"
    ptr = operand_def(PtrType)
    index = operand_def(i32)
    bound = opt_operand_def(i32)
    offset = opt_operand_def(i32)
    dtype = attr_def(StringAttr)
    result = result_def(VecType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, ptr: SSAValue, index: SSAValue, bound: SSAValue | None, dtype: str,
                 offset: SSAValue | None = None):
        opt = [[x] if x is not None else [] for x in (bound, offset)]
        super().__init__(operands=[ptr, index, *opt], result_types=[VEC],
                         attributes={"dtype": StringAttr(dtype)})

    def verify_(self) -> None:
        _check_mc(self.name, self.ptr)
        if self.dtype.data not in SUM_DTYPES:
            _fail(self.name, f"dtype {self.dtype.data!r} not in {SUM_DTYPES}")


@irdl_op_definition
class McStoreOp(IRDLOperation):
    """Store ``value`` at vector ``index + offset`` of every rank's copy through the
    multicast address ``ptr`` (``multimem.st``), where ``index < bound`` (if given)."""

    name = "pks.mc_store"
    ptr = operand_def(PtrType)
    index = operand_def(i32)
    value = operand_def(VecType)
    bound = opt_operand_def(i32)
    offset = opt_operand_def(i32)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, ptr: SSAValue, index: SSAValue, bound: SSAValue | None, value: SSAValue,
                 offset: SSAValue | None = None):
        opt = [[x] if x is not None else [] for x in (bound, offset)]
        super().__init__(operands=[ptr, index, value, *opt])

    def verify_(self) -> None:
        _check_mc(self.name, self.ptr)


@irdl_op_definition
class McSignalOp(IRDLOperation):
    """Add 1 to u32 slot ``slot`` of every rank's pad through the multicast address ``pad``
    (``multimem.red``: one instruction signals the W ranks); relaxed, after a
    ``pks.fence_sys``, as ``pks.signal``."""

    name = "pks.mc_signal"
    pad = operand_def(PtrType)
    slot = operand_def(i32)

    def __init__(self, pad: SSAValue, slot: SSAValue):
        super().__init__(operands=[pad, slot])

    def verify_(self) -> None:
        _check_mc(self.name, self.pad)


COMM_OPS = [
    LaunchParamOp, GridValueOp, WhenOp, VecLoopOp, BufferPtrOp, VecLoadOp, VecStoreOp, VecSumOp,
    EpochOp, EpochPublishOp, FenceSysOp, SignalOp, SignalWaitOp, LlAddrOp, LlStoreOp, LlWaitOp,
    McPtrOp, McLoadReduceOp, McStoreOp, McSignalOp,
]
COMM_TYPES = [PtrType, VecType]

__all__ = ["COMM_OPS", "COMM_TYPES", "CommParam", "GridValue", "CacheHint", "WaitSite",
           *[c.__name__ for c in COMM_OPS + COMM_TYPES]]
