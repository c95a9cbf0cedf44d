"""The ``ptx`` dialect's Hopper (sm_90a) instructions: warpgroup MMA, TMA tensor copies,
cluster-scope mbarriers, register reallocation, cluster barriers.

They join the ops of :mod:`pkc.codegen.ptx` in one ``ptx`` dialect
(:data:`pkc.codegen.ptx.PTX`). As there, each op is one PTX instruction or a small fixed
group, and ``render`` gives its lines; the schedule-level lowering
(:mod:`pkc.codegen.lower_schedule`) builds them and the printer prints them.

Warpgroup accumulators are not SSA values: a ``wgmma`` reads and writes up to 128 f32
registers of each thread *asynchronously*, and a copy of them between issue and wait would
make ptxas serialize the MMAs. So an accumulator is a named block of registers
(``!ptx.frag<128>``, declared ``.reg .f32 %acc0_<128>``) that ``ptx.wgmma`` updates in
place and ``ptx.frag_get`` reads one element of (no instruction: the element's register is
used directly).
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import IntAttr, StringAttr
from xdsl.ir import Attribute, ParametrizedAttribute, SSAValue, TypeAttribute
from xdsl.irdl import (
    AttrSizedOperandSegments,
    irdl_attr_definition,
    irdl_op_definition,
    opt_attr_def,
    attr_def,
    operand_def,
    opt_operand_def,
    result_def,
    var_operand_def,
)
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from pkc.codegen.ptx import B32, B64, F32, Inst, Names, RegType, _guard, reg_kind

WGMMA_N = tuple(range(8, 257, 8))   # PTX ISA 9.7.15.5.1: n is a multiple of 8 up to 256
MMA_DTYPES = ("bf16", "f16")
FP8_DTYPES = ("e4m3", "e5m2")        # wgmma's 8-bit float operands (k32, both K-major)


@irdl_attr_definition
class FragType(ParametrizedAttribute, TypeAttribute):
    """A block of ``size`` f32 registers per thread (a warpgroup MMA accumulator)."""

    name = "ptx.frag"
    size: IntAttr

    def __init__(self, size: int):
        super().__init__(IntAttr(size))

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> list[Attribute]:
        with parser.in_angle_brackets():
            n = parser.parse_integer()
        return [IntAttr(n)]

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<{self.size.data}>")

    def verify(self) -> None:
        if not 1 <= self.size.data <= 128:
            raise VerifyException(f"!ptx.frag size must be 1..128, got {self.size.data}")


def _frag_name(n: Names, frag: SSAValue) -> str:
    return n.frag(frag)


@irdl_op_definition
class FragAllocOp(Inst):
    """Declares an accumulator register block (no instruction)."""

    name = "ptx.frag_alloc"
    result = result_def(FragType)

    def __init__(self, size: int):
        super().__init__(result_types=[FragType(size)])

    def render(self, n: Names) -> list[str]:
        n.frag(self.result)
        return []


@irdl_op_definition
class FragGetOp(Inst):
    """Element ``index`` of an accumulator block, as an f32 register (no instruction: the
    printer names the result after the element)."""

    name = "ptx.frag_get"
    frag = operand_def(FragType)
    index = attr_def(IntAttr)
    result = result_def(RegType)

    def __init__(self, frag: SSAValue, index: int):
        super().__init__(operands=[frag], result_types=[F32], attributes={"index": IntAttr(index)})

    def verify_(self) -> None:
        size = self.frag.type.size.data
        if not 0 <= self.index.data < size:
            raise VerifyException(f"'ptx.frag_get' index {self.index.data} outside !ptx.frag<{size}>")

    def result_name(self, n: Names) -> str:
        return f"{n.frag(self.frag)}{self.index.data}"

    def render(self, n: Names) -> list[str]:
        return []


@irdl_op_definition
class WgmmaOp(Inst):
    """``wgmma.mma_async.sync.aligned.m64n<N>k16.f32.<t>.<t> {acc}, descA, descB, scale_d,
    1, 1, 0, tnspB`` (PTX ISA 9.7.15.5.2): A and B from shared-memory descriptors, the
    accumulator block updated in place; ``scale_d`` (a predicate) false means d = a*b.
    fp8 (``dtype`` e4m3 / e5m2, ``b_dtype`` B's where it differs): ``m64n<N>k32.f32.<a>.<b>
    {acc}, descA, descB, scale_d, 1, 1`` (both operands K-major: no transpose operands)."""

    name = "ptx.wgmma"
    acc = operand_def(FragType)
    desc_a = operand_def(RegType)
    desc_b = operand_def(RegType)
    scale_d = opt_operand_def(RegType)
    n = attr_def(IntAttr)
    dtype = attr_def(StringAttr)
    trans_b = attr_def(IntAttr)
    first = attr_def(IntAttr)      # the slice's first register in the block
    b_dtype = opt_attr_def(StringAttr)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, acc: SSAValue, desc_a: SSAValue, desc_b: SSAValue, n: int, dtype: str,
                 trans_b: int = 0, scale_d: SSAValue | None = None, first: int = 0,
                 b_dtype: str = ""):
        attrs = {"n": IntAttr(n), "dtype": StringAttr(dtype), "trans_b": IntAttr(trans_b),
                 "first": IntAttr(first)}
        if b_dtype and b_dtype != dtype:
            attrs["b_dtype"] = StringAttr(b_dtype)
        super().__init__(operands=[acc, desc_a, desc_b, [scale_d] if scale_d else []],
                         attributes=attrs)

    @property
    def types(self) -> tuple[str, str]:
        a = self.dtype.data
        return a, (self.b_dtype.data if self.b_dtype is not None else a)

    @property
    def k(self) -> int:
        """K of one instruction: 16 (16-bit types) or 32 (fp8): 32 bytes of each row."""
        return 32 if self.dtype.data in FP8_DTYPES else 16

    def verify_(self) -> None:
        n, first, size = self.n.data, self.first.data, self.acc.type.size.data
        if n not in WGMMA_N:
            raise VerifyException(f"'ptx.wgmma' n = {n}: must be a multiple of 8 in 8..256")
        if first < 0 or first + n // 2 > size:
            raise VerifyException(f"'ptx.wgmma' m64n{n} at register {first} needs {n // 2} "
                                  f"registers of !ptx.frag<{size}>")
        ta, tb = self.types
        if not ((ta in MMA_DTYPES and tb == ta) or (ta in FP8_DTYPES and tb in FP8_DTYPES)):
            raise VerifyException(f"'ptx.wgmma' types {ta} x {tb}: one of {MMA_DTYPES} for "
                                  f"both, or two of {FP8_DTYPES}")
        if ta in FP8_DTYPES and self.trans_b.data:
            raise VerifyException("'ptx.wgmma' fp8 operands are K-major (no transposed B)")

    def render(self, n: Names) -> list[str]:
        N = self.n.data
        ta, tb = self.types
        base = n.frag(self.acc)
        f = self.first.data
        accs = ", ".join(f"{base}{i}" for i in range(f, f + N // 2))
        scale = n(self.scale_d) if self.scale_d is not None else "1"
        tail = "" if ta in FP8_DTYPES else f", 0, {self.trans_b.data}"
        return [f"wgmma.mma_async.sync.aligned.m64n{N}k{self.k}.f32.{ta}.{tb} {{{accs}}}, "
                f"{n(self.desc_a)}, {n(self.desc_b)}, {scale}, 1, 1{tail};"]


@irdl_op_definition
class FragSetOp(Inst):
    """Element ``index`` of an accumulator block := ``value`` (an f32 register):
    ``mov.f32`` (an epilogue that rewrites the accumulator in place, e.g. its scales)."""

    name = "ptx.frag_set"
    frag = operand_def(FragType)
    value = operand_def(RegType)
    index = attr_def(IntAttr)

    def __init__(self, frag: SSAValue, index: int, value: SSAValue):
        super().__init__(operands=[frag, value], attributes={"index": IntAttr(index)})

    def verify_(self) -> None:
        size = self.frag.type.size.data
        if not 0 <= self.index.data < size:
            raise VerifyException(f"'ptx.frag_set' index {self.index.data} outside !ptx.frag<{size}>")

    def render(self, n: Names) -> list[str]:
        return [f"mov.f32 {n.frag(self.frag)}{self.index.data}, {n(self.value)};"]


@irdl_op_definition
class WgmmaSyncOp(Inst):
    """``wgmma.fence`` / ``wgmma.commit_group`` / ``wgmma.wait_group N`` (PTX ISA
    9.7.15.6-8): order register accesses before the first MMA, close a group, wait until
    at most ``pending`` groups are in flight."""

    name = "ptx.wgmma_sync"
    kind = attr_def(StringAttr)      # fence | commit | wait
    pending = opt_attr_def(IntAttr)

    def __init__(self, kind: str, pending: int | None = None):
        attrs = {"kind": StringAttr(kind)}
        if pending is not None:
            attrs["pending"] = IntAttr(pending)
        super().__init__(attributes=attrs)

    def verify_(self) -> None:
        if self.kind.data not in ("fence", "commit", "wait"):
            raise VerifyException(f"'ptx.wgmma_sync' kind {self.kind.data!r}")
        if (self.kind.data == "wait") != (self.pending is not None):
            raise VerifyException("'ptx.wgmma_sync' wait (and only wait) takes 'pending'")

    def render(self, n: Names) -> list[str]:
        k = self.kind.data
        if k == "fence":
            return ["wgmma.fence.sync.aligned;"]
        if k == "commit":
            return ["wgmma.commit_group.sync.aligned;"]
        return [f"wgmma.wait_group.sync.aligned {self.pending.data};"]


@irdl_op_definition
class SetmaxnregOp(Inst):
    """``setmaxnreg.{inc,dec}.sync.aligned.u32 N`` (PTX ISA 9.7.17.1): a warpgroup gives
    registers back or takes them; N a multiple of 8 in 24..256."""

    name = "ptx.setmaxnreg"
    action = attr_def(StringAttr)
    count = attr_def(IntAttr)

    def __init__(self, action: str, count: int):
        super().__init__(attributes={"action": StringAttr(action), "count": IntAttr(count)})

    def verify_(self) -> None:
        c = self.count.data
        if self.action.data not in ("inc", "dec"):
            raise VerifyException(f"'ptx.setmaxnreg' action {self.action.data!r} not inc/dec")
        if c % 8 or not 24 <= c <= 256:
            raise VerifyException(f"'ptx.setmaxnreg' count {c}: must be a multiple of 8 in 24..256")

    def render(self, n: Names) -> list[str]:
        return [f"setmaxnreg.{self.action.data}.sync.aligned.u32 {self.count.data};"]


@irdl_op_definition
class TmaLoadOp(Inst):
    """``cp.async.bulk.tensor.<r>d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
    {.multicast::cluster} [dst], [tmap, {c0, ..}], [mbar]{, mask}`` (PTX ISA 9.7.9.25.5.1).
    Coordinates innermost first."""

    name = "ptx.tma_load"
    dst = operand_def(RegType)
    tmap = operand_def(RegType)
    coords = var_operand_def(RegType)
    mbar = operand_def(RegType)
    mask = opt_operand_def(RegType)
    guard = opt_operand_def(RegType)
    # sm_100a ``.cta_group::2``: the mbarrier may be the peer CTA's of a CTA pair (a
    # shared::cluster address); the bytes are counted there (PTX ISA 9.7.9.25.5.1)
    cta_group = opt_attr_def(IntAttr)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, dst: SSAValue, tmap: SSAValue, coords: Sequence[SSAValue], mbar: SSAValue,
                 mask: SSAValue | None = None, guard: SSAValue | None = None, cta_group: int = 1):
        super().__init__(operands=[dst, tmap, list(coords), mbar, [mask] if mask else [],
                                   [guard] if guard else []],
                         attributes={"cta_group": IntAttr(2)} if cta_group == 2 else {})

    def verify_(self) -> None:
        if not 1 <= len(self.coords) <= 5:
            raise VerifyException(f"'ptx.tma_load' takes 1..5 coordinates, got {len(self.coords)}")
        if self.cta_group is not None and self.cta_group.data != 2:
            raise VerifyException(f"'ptx.tma_load' cta_group {self.cta_group.data}: only 2 is "
                                  "written out")

    def render(self, n: Names) -> list[str]:
        mc = ".multicast::cluster" if self.mask is not None else ""
        tail = f", {n(self.mask)}" if self.mask is not None else ""
        cs = ", ".join(n(c) for c in self.coords)
        cg = ".cta_group::2" if self.cta_group is not None else ""
        return [f"{_guard(n, self.guard)}cp.async.bulk.tensor.{len(self.coords)}d{cg}.shared::cluster"
                f".global.tile.mbarrier::complete_tx::bytes{mc} [{n(self.dst)}], "
                f"[{n(self.tmap)}, {{{cs}}}], [{n(self.mbar)}]{tail};"]


@irdl_op_definition
class TmaStoreOp(Inst):
    """``cp{.reduce}.async.bulk.tensor.<r>d.global.shared::cta{.add}.tile.bulk_group
    [tmap, {c0, ..}], [src]`` (PTX ISA 9.7.9.25.5.2-3): a box of shared memory to global,
    or added to it (``reduce`` = "add")."""

    name = "ptx.tma_store"
    tmap = operand_def(RegType)
    coords = var_operand_def(RegType)
    src = operand_def(RegType)
    guard = opt_operand_def(RegType)
    reduce = opt_attr_def(StringAttr)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, tmap: SSAValue, coords: Sequence[SSAValue], src: SSAValue,
                 guard: SSAValue | None = None, reduce: str | None = None):
        super().__init__(operands=[tmap, list(coords), src, [guard] if guard else []],
                         attributes={"reduce": StringAttr(reduce)} if reduce else {})

    def render(self, n: Names) -> list[str]:
        cs = ", ".join(n(c) for c in self.coords)
        op = "cp.reduce.async.bulk.tensor" if self.reduce is not None else "cp.async.bulk.tensor"
        red = f".{self.reduce.data}" if self.reduce is not None else ""
        return [f"{_guard(n, self.guard)}{op}.{len(self.coords)}d.global.shared::cta{red}.tile"
                f".bulk_group [{n(self.tmap)}, {{{cs}}}], [{n(self.src)}];"]


@irdl_op_definition
class PrefetchTensormapOp(Inst):
    """``prefetch.tensormap [tmap]`` (PTX ISA 9.7.9.15)."""

    name = "ptx.prefetch_tensormap"
    tmap = operand_def(RegType)

    def __init__(self, tmap: SSAValue):
        super().__init__(operands=[tmap])

    def render(self, n: Names) -> list[str]:
        return [f"prefetch.tensormap [{n(self.tmap)}];"]


@irdl_op_definition
class MbarrierArriveOp(Inst):
    """One arrival on an mbarrier, the state discarded (PTX ISA 9.7.13.15.13):
    ``mbarrier.arrive{.expect_tx}{.release.cta}.shared::cta.b64 _, [a]{, tx}`` or, with
    ``remote``, ``mbarrier.arrive.shared::cluster.b64 _, [a]`` on a ``mapa`` address."""

    name = "ptx.mbarrier_arrive"
    addr = operand_def(RegType)
    tx_bytes = opt_operand_def(RegType)
    guard = opt_operand_def(RegType)
    remote = opt_attr_def(IntAttr)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, addr: SSAValue, tx_bytes: SSAValue | None = None,
                 guard: SSAValue | None = None, remote: bool = False):
        super().__init__(operands=[addr, [tx_bytes] if tx_bytes else [], [guard] if guard else []],
                         attributes={"remote": IntAttr(1)} if remote else {})

    def verify_(self) -> None:
        if self.remote is not None and self.tx_bytes is not None:
            raise VerifyException("'ptx.mbarrier_arrive' remote arrivals carry no tx bytes")

    def render(self, n: Names) -> list[str]:
        g, a = _guard(n, self.guard), n(self.addr)
        if self.remote is not None:
            return [f"{g}mbarrier.arrive.shared::cluster.b64 _, [{a}];"]
        if self.tx_bytes is not None:
            return [f"{g}mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [{a}], "
                    f"{n(self.tx_bytes)};"]
        return [f"{g}mbarrier.arrive.release.cta.shared::cta.b64 _, [{a}];"]


@irdl_op_definition
class MbarrierWaitParityOp(Inst):
    """Fixed group (PTX ISA 9.7.13.15.16): spin on ``mbarrier.try_wait.parity`` until the
    phase with ``parity`` completed; with a ``deadline`` (a %globaltimer value, b64),
    ``trap`` once it passed, so that a protocol bug ends the kernel instead of hanging."""

    name = "ptx.mbarrier_wait_parity"
    addr = operand_def(RegType)
    parity = operand_def(RegType)
    deadline = opt_operand_def(RegType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, addr: SSAValue, parity: SSAValue, deadline: SSAValue | None = None):
        super().__init__(operands=[addr, parity, [deadline] if deadline else []])

    def render(self, n: Names) -> list[str]:
        ok = n.fresh("pred")
        top, done = n.label("wait"), n.label("wait_ok")
        lines = [f"{top}:",
                 f"mbarrier.try_wait.parity.shared::cta.b64 {ok}, [{n(self.addr)}], "
                 f"{n(self.parity)};",
                 f"@{ok} bra {done};"]
        if self.deadline is not None:
            now, late = n.fresh("b64"), n.fresh("pred")
            lines += [f"mov.u64 {now}, %globaltimer;",
                      f"setp.gt.u64 {late}, {now}, {n(self.deadline)};",
                      f"@{late} trap;"]
        return lines + [f"bra {top};", f"{done}:"]


@irdl_op_definition
class MapaOp(Inst):
    """``mapa.shared::cluster.u32 d, a, rank`` (PTX ISA 9.7.9.17): the address of the same
    shared-memory location in CTA ``rank`` of the cluster."""

    name = "ptx.mapa"
    addr = operand_def(RegType)
    rank = operand_def(RegType)
    result = result_def(RegType)

    def __init__(self, addr: SSAValue, rank: SSAValue):
        super().__init__(operands=[addr, rank], result_types=[B32])

    def render(self, n: Names) -> list[str]:
        return [f"mapa.shared::cluster.u32 {n(self.result)}, {n(self.addr)}, {n(self.rank)};"]


@irdl_op_definition
class ClusterBarrierOp(Inst):
    """``barrier.cluster.arrive.release`` + ``barrier.cluster.wait.acquire`` (PTX ISA
    9.7.13.3): every thread of every CTA of the cluster."""

    name = "ptx.cluster_barrier"

    def __init__(self):
        super().__init__()

    def render(self, n: Names) -> list[str]:
        return ["barrier.cluster.arrive.release;", "barrier.cluster.wait.acquire;"]


@irdl_op_definition
class NamedBarrierOp(Inst):
    """``bar.sync id, count`` (PTX ISA 9.7.13.1): the ``count`` threads (a multiple of 32)
    that use barrier ``id`` (a register) wait for each other."""

    name = "ptx.named_barrier"
    id = operand_def(RegType)
    count = attr_def(IntAttr)

    def __init__(self, id: SSAValue, count: int):
        super().__init__(operands=[id], attributes={"count": IntAttr(count)})

    def verify_(self) -> None:
        if self.count.data % 32 or self.count.data <= 0:
            raise VerifyException(f"'ptx.named_barrier' count {self.count.data}: not a multiple of 32")

    def render(self, n: Names) -> list[str]:
        return [f"bar.sync {n(self.id)}, {self.count.data};"]


@irdl_op_definition
class CvtPackOp(Inst):
    """``cvt.rn.{bf16x2,f16x2}.f32 d, hi, lo`` (PTX ISA 9.7.9.21): two f32 rounded into
    one 32-bit register, ``lo`` in the low half."""

    name = "ptx.cvt_pack"
    dtype = attr_def(StringAttr)
    lo = operand_def(RegType)
    hi = operand_def(RegType)
    result = result_def(RegType)

    def __init__(self, dtype: str, lo: SSAValue, hi: SSAValue):
        super().__init__(operands=[lo, hi], result_types=[B32], attributes={"dtype": StringAttr(dtype)})

    def verify_(self) -> None:
        if self.dtype.data not in MMA_DTYPES:
            raise VerifyException(f"'ptx.cvt_pack' dtype {self.dtype.data!r} not in {MMA_DTYPES}")

    def render(self, n: Names) -> list[str]:
        return [f"cvt.rn.{self.dtype.data}x2.f32 {n(self.result)}, {n(self.hi)}, {n(self.lo)};"]


@irdl_op_definition
class TrapOp(Inst):
    """``trap``: abort the kernel (a launch error the host sees)."""

    name = "ptx.trap"
    guard = opt_operand_def(RegType)

    def __init__(self, guard: SSAValue | None = None):
        super().__init__(operands=[[guard] if guard else []])

    def render(self, n: Names) -> list[str]:
        return [f"{_guard(n, self.guard)}trap;"]


SM90_OPS = [
    FragAllocOp, FragGetOp, FragSetOp, WgmmaOp, WgmmaSyncOp, SetmaxnregOp, TmaLoadOp, TmaStoreOp,
    PrefetchTensormapOp, MbarrierArriveOp, MbarrierWaitParityOp, MapaOp, ClusterBarrierOp,
    NamedBarrierOp, CvtPackOp, TrapOp,
]
SM90_TYPES = [FragType]

__all__ = ["SM90_OPS", "SM90_TYPES", "FragType", "reg_kind", "B64"]
