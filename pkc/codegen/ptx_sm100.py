"""The ``ptx`` dialect's Blackwell (sm_100a) instructions: the fifth-generation tensor core
(``tcgen05``) with its accumulators in tensor memory, and the descriptors it reads.

Tensor memory (PTX ISA 9.7.16.2) is 128 lanes x 512 columns of 32-bit cells per CTA. An
address is a 32-bit value, lane in bits 31-16 and column in bits 15-0. A warp allocates
columns (``tcgen05.alloc``, a power of two from 32 to 512) and writes the base address to
shared memory; the same warp (or one of the same CTA) frees them (``tcgen05.dealloc``)
before the CTA exits. ``tcgen05.mma`` is issued by one thread and runs asynchronously;
``tcgen05.commit`` makes an mbarrier arrive once the MMAs that thread issued completed.
Warp ``w`` reads lanes ``32 (w % 4) ..`` with ``tcgen05.ld``, whose registers are valid
only after ``tcgen05.wait::ld``.

The descriptor builders are the encoders of the PTX ISA's tables; the emulator
(:mod:`pkc.emu.ops_sm100`) decodes them with its own code from the same tables, so that a
wrong field shows as a wrong product there.
"""

from __future__ import annotations

from xdsl.dialects.builtin import IntAttr, StringAttr
from xdsl.ir import SSAValue
from xdsl.irdl import (AttrSizedOperandSegments, attr_def, irdl_op_definition, operand_def,
                       opt_attr_def, opt_operand_def, var_result_def)
from xdsl.utils.exceptions import VerifyException

from pkc.codegen.ptx import F32, Inst, Names, RegType
from pkc.kinds import Kind

TMEM_LANES = 128
TMEM_COLUMNS = 512
LD_32X32B_NUM = (1, 2, 4, 8, 16, 32, 64, 128)      # PTX ISA 9.7.16.8.3: .num of .32x32b

# Instruction descriptor fields, .kind::f16 (PTX ISA 9.7.16.4.2, table "Instruction
# descriptor format for .kind::tf32, .kind::f16, ..."): D type in bits 4-5 (F32 = 1),
# A type 7-9 and B type 10-12 (F16 = 0, BF16 = 1), transpose A bit 15 / B bit 16 (1 =
# MN-major), N >> 3 in 17-22, M >> 4 in 24-28.
_AB_TYPE = {"f16": 0, "bf16": 1}


def instr_desc_f16(dtype: str, m: int, n: int, a_mn_major: bool = False,
                   b_mn_major: bool = False, cta_group: int = 1) -> int:
    """The 32-bit instruction descriptor of a dense ``tcgen05.mma .kind::f16`` with an f32
    accumulator, ``dtype`` (bf16 / f16) operands and shape ``m x n x 16`` (``m`` of the
    whole MMA: 256 for a CTA pair's ``cta_group::2``)."""
    if dtype not in _AB_TYPE:
        raise ValueError(f"tcgen05 kind::f16 operands are f16 or bf16, not {dtype}")
    check_mma_shape(m, n, cta_group)
    t = _AB_TYPE[dtype]
    return ((1 << 4) | (t << 7) | (t << 10) | (int(a_mn_major) << 15) | (int(b_mn_major) << 16)
            | ((n >> 3) << 17) | ((m >> 4) << 24))


class MmaKind(Kind):
    """The ``.kind`` of a dense ``tcgen05.mma`` that pkc emits (PTX ISA 9.7.16.10.9): 16-bit
    floats (K = 16 per instruction) or 8-bit floats (``f8f6f4`` with e4m3 / e5m2 operands,
    K = 32 per instruction; the 6- and 4-bit formats of the kind are not used)."""

    F16 = "f16"
    F8F6F4 = "f8f6f4"

    @property
    def k(self) -> int:
        """K of one instruction: 32 bytes of each operand row either way."""
        return 32 if self is MmaKind.F8F6F4 else 16


# .kind::f8f6f4 A / B type codes (the same table, column .kind::f8f6f4: E4M3 = 0, E5M2 = 1,
# E2M3 = 3, E3M2 = 4, E2M1 = 5), keyed by pkc's element names: the schedule level's (PTX's
# .e4m3 / .e5m2) and the tensor level's (MLIR's).
F8_TYPE_CODE = {"e4m3": 0, "e5m2": 1, "f8E4M3FN": 0, "f8E5M2": 1}


def instr_desc_f8f6f4(atype: str, btype: str, m: int, n: int, cta_group: int = 1) -> int:
    """The 32-bit instruction descriptor of a dense ``tcgen05.mma .kind::f8f6f4`` with an
    f32 accumulator, K-major A (``atype``) and B (``btype``), each e4m3 or e5m2, and
    shape ``m x n x 32`` (``m`` of the whole MMA: 256 for a CTA pair's ``cta_group::2``).
    MN-major 8-bit operands are not built (torch's fp8 GEMM takes B as [N, K] K-major)."""
    for what, t in (("A", atype), ("B", btype)):
        if t not in F8_TYPE_CODE:
            raise ValueError(f"tcgen05 kind::f8f6f4 {what} is e4m3 or e5m2 (f8E4M3FN / "
                             f"f8E5M2), not {t}")
    check_mma_shape(m, n, cta_group, MmaKind.F8F6F4)
    return ((1 << 4) | (F8_TYPE_CODE[atype] << 7) | (F8_TYPE_CODE[btype] << 10)
            | ((n >> 3) << 17) | ((m >> 4) << 24))


def check_mma_shape(m: int, n: int, cta_group: int = 1, kind: MmaKind = MmaKind.F16) -> None:
    """Shapes of dense ``tcgen05.mma`` of ``.kind::f16`` and ``.kind::f8f6f4`` (PTX ISA
    9.7.16.10.1, "Valid shapes"; the same M and N for both, K = 16 or 32):
    cta_group::1: M = 64 with N a multiple of 8, or M = 128 with N a multiple of 16;
    cta_group::2 (a CTA pair): M = 128 or 256 with N a multiple of 16; N up to 256."""
    k, kind = MmaKind(kind).k, MmaKind(kind)
    if cta_group == 2:
        if m not in (128, 256) or n % 16 or not 16 <= n <= 256:
            raise ValueError(f"tcgen05.mma kind::{kind} cta_group::2: no shape m{m}n{n}k{k} (M = "
                             "128 or 256, N a multiple of 16 up to 256)")
        return
    step = 8 if m == 64 else 16
    if m not in (64, 128) or n % step or not step <= n <= 256:
        raise ValueError(f"tcgen05.mma kind::{kind} cta_group::1: no shape m{m}n{n}k{k} (M = 64 "
                         "with N a multiple of 8, or 128 with N a multiple of 16, N <= 256)")


def cta_group_of(op) -> int:
    """The ``.cta_group`` of a tcgen05 op (its optional ``cta_group`` attribute; 1 when
    absent). PTX ISA 9.7.16.6.1: every tcgen05 instruction of a kernel names the same one."""
    a = op.cta_group
    return 1 if a is None else a.data


def _check_group(op) -> None:
    if cta_group_of(op) not in (1, 2):
        raise VerifyException(f"'{op.name}' cta_group {cta_group_of(op)}: 1 or 2")


def _group_attr(cta_group: int) -> dict:
    return {} if cta_group == 1 else {"cta_group": IntAttr(cta_group)}


# Shared-memory descriptor (PTX ISA 9.7.16.4.1): start address >> 4 in bits 0-13, leading
# dimension byte offset >> 4 in 16-29, stride dimension byte offset >> 4 in 32-45, the
# fixed constant 0b001 in 46-48, matrix base offset 49-51 (0: atoms 1024-byte aligned),
# leading-dimension mode bit 52 (0: relative offsets), swizzle mode in 61-63 (0 none,
# 2 128-byte, 4 64-byte, 6 32-byte).
_SWIZZLE_MODE = {0: 0, 128: 2, 64: 4, 32: 6}


def smem_desc_hi(lbo: int, sbo: int, swizzle: int = 128) -> int:
    """The descriptor of an operand at address 0 (add ``address >> 4`` per use): byte
    offsets ``lbo`` (between core-matrix groups along the leading dimension; unused by a
    swizzled K-major operand) and ``sbo`` (between 8-row groups)."""
    return ((_SWIZZLE_MODE[swizzle] << 61) | (1 << 46) | (((sbo >> 4) & 0x3FFF) << 32)
            | (((lbo >> 4) & 0x3FFF) << 16))


# K-major, 128-byte swizzle: rows of 128 bytes, 8-row groups 1024 bytes apart.
DESC_KMAJOR = smem_desc_hi(16, 1024)
# MN-major B (given [K, N]), 128-byte swizzle: 64-column blocks of 64 K-rows 8192 bytes
# apart (LBO), 8-row K groups 1024 bytes apart (SBO); the same canonical layout as wgmma's.
DESC_MNMAJOR = smem_desc_hi(8192, 1024)


def _check_cols(op: str, ncols: int) -> None:
    if ncols < 32 or ncols > TMEM_COLUMNS or ncols & (ncols - 1):
        raise VerifyException(f"'{op}' {ncols} columns: a power of two in 32..{TMEM_COLUMNS}")


@irdl_op_definition
class Tcgen05AllocOp(Inst):
    """``tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [dst], ncols`` (PTX ISA
    9.7.16.7.1): the warp allocates ``ncols`` columns of tensor memory (all 128 lanes) and
    writes their address to shared memory at ``dst``; blocks until the columns are free."""

    name = "ptx.tcgen05_alloc"
    dst = operand_def(RegType)
    ncols = attr_def(IntAttr)
    cta_group = opt_attr_def(IntAttr)

    def __init__(self, dst: SSAValue, ncols: int, cta_group: int = 1):
        super().__init__(operands=[dst], attributes={"ncols": IntAttr(ncols),
                                                     **_group_attr(cta_group)})

    def verify_(self) -> None:
        _check_cols(self.name, self.ncols.data)
        _check_group(self)

    def render(self, n: Names) -> list[str]:
        return [f"tcgen05.alloc.cta_group::{cta_group_of(self)}.sync.aligned.shared::cta.b32 "
                f"[{n(self.dst)}], {self.ncols.data};"]


@irdl_op_definition
class Tcgen05DeallocOp(Inst):
    """``tcgen05.dealloc.cta_group::1.sync.aligned.b32 taddr, ncols`` (PTX ISA 9.7.16.7.1):
    the warp frees columns it (or its CTA) allocated; every allocation must be freed
    before the CTA exits."""

    name = "ptx.tcgen05_dealloc"
    taddr = operand_def(RegType)
    ncols = attr_def(IntAttr)
    cta_group = opt_attr_def(IntAttr)

    def __init__(self, taddr: SSAValue, ncols: int, cta_group: int = 1):
        super().__init__(operands=[taddr], attributes={"ncols": IntAttr(ncols),
                                                       **_group_attr(cta_group)})

    def verify_(self) -> None:
        _check_cols(self.name, self.ncols.data)
        _check_group(self)

    def render(self, n: Names) -> list[str]:
        return [f"tcgen05.dealloc.cta_group::{cta_group_of(self)}.sync.aligned.b32 "
                f"{n(self.taddr)}, {self.ncols.data};"]


@irdl_op_definition
class Tcgen05RelinquishOp(Inst):
    """``tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned`` (PTX ISA 9.7.16.7.1):
    the CTA will allocate no more, so a CTA waiting to allocate on the same SM may."""

    name = "ptx.tcgen05_relinquish"
    cta_group = opt_attr_def(IntAttr)

    def __init__(self, cta_group: int = 1):
        super().__init__(attributes=_group_attr(cta_group))

    def verify_(self) -> None:
        _check_group(self)

    def render(self, n: Names) -> list[str]:
        return [f"tcgen05.relinquish_alloc_permit.cta_group::{cta_group_of(self)}.sync.aligned;"]


@irdl_op_definition
class Tcgen05MmaOp(Inst):
    """``tcgen05.mma.cta_group::1.kind::f16 [d], adesc, bdesc, idesc, enable_input_d``
    (PTX ISA 9.7.16.10.9): D (tensor memory at ``d``) = A x B (+ D where
    ``enable_input_d``), A and B in shared memory by descriptor (9.7.16.4.1), the shape and
    types in the instruction descriptor ``idesc`` (9.7.16.4.2). One thread issues it; it
    completes asynchronously (``tcgen05.commit``). ``kind`` (:class:`MmaKind`) ``f8f6f4``:
    8-bit float operands (e4m3 / e5m2 in the descriptor), K = 32 per instruction."""

    name = "ptx.tcgen05_mma"
    d = operand_def(RegType)
    adesc = operand_def(RegType)
    bdesc = operand_def(RegType)
    idesc = operand_def(RegType)
    enable_d = operand_def(RegType)
    cta_group = opt_attr_def(IntAttr)
    kind = opt_attr_def(StringAttr)       # MmaKind; absent: f16

    def __init__(self, d: SSAValue, adesc: SSAValue, bdesc: SSAValue, idesc: SSAValue,
                 enable_d: SSAValue, cta_group: int = 1, kind: MmaKind = MmaKind.F16):
        kind = MmaKind(kind)
        super().__init__(operands=[d, adesc, bdesc, idesc, enable_d],
                         attributes={**_group_attr(cta_group),
                                     **({} if kind is MmaKind.F16 else
                                        {"kind": StringAttr(kind.value)})})

    def mma_kind(self) -> MmaKind:
        """The instruction's ``.kind`` (its optional ``kind`` attribute; f16 when absent)."""
        return MmaKind.F16 if self.kind is None else MmaKind(self.kind.data)

    def verify_(self) -> None:
        kinds = [o.type.kind.data for o in self.operands]
        if kinds != ["b32", "b64", "b64", "b32", "pred"]:
            raise VerifyException(f"'ptx.tcgen05_mma' operands are (b32 taddr, b64 adesc, b64 "
                                  f"bdesc, b32 idesc, pred), got {kinds}")
        _check_group(self)
        if self.kind is not None:
            try:
                MmaKind.parse(self.kind.data, "'ptx.tcgen05_mma' kind")
            except ValueError as e:
                raise VerifyException(str(e)) from None

    def render(self, n: Names) -> list[str]:
        return [f"tcgen05.mma.cta_group::{cta_group_of(self)}.kind::{self.mma_kind().value} "
                f"[{n(self.d)}], {n(self.adesc)}, {n(self.bdesc)}, {n(self.idesc)}, "
                f"{n(self.enable_d)};"]


@irdl_op_definition
class Tcgen05CommitOp(Inst):
    """``tcgen05.commit.cta_group::N.mbarrier::arrive::one.shared::cluster{.multicast::cluster}
    .b64 [mbar]{, ctaMask}`` (PTX ISA 9.7.16.11.1): one arrival on the mbarrier once every
    tcgen05 operation the thread issued before has completed; with ``mask`` (a b16 CTA
    mask), on the mbarrier at the same offset in each CTA of the cluster the mask names."""

    name = "ptx.tcgen05_commit"
    mbar = operand_def(RegType)
    mask = opt_operand_def(RegType)
    cta_group = opt_attr_def(IntAttr)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, mbar: SSAValue, mask: SSAValue | None = None, cta_group: int = 1):
        super().__init__(operands=[mbar, [mask] if mask is not None else []],
                         attributes=_group_attr(cta_group))

    def verify_(self) -> None:
        _check_group(self)
        if self.mask is not None and self.mask.type.kind.data != "b16":
            raise VerifyException(f"'ptx.tcgen05_commit' ctaMask is a b16 register, not "
                                  f"{self.mask.type.kind.data}")

    def render(self, n: Names) -> list[str]:
        mc = ".multicast::cluster" if self.mask is not None else ""
        tail = f", {n(self.mask)}" if self.mask is not None else ""
        return [f"tcgen05.commit.cta_group::{cta_group_of(self)}.mbarrier::arrive::one"
                f".shared::cluster{mc}.b64 [{n(self.mbar)}]{tail};"]


@irdl_op_definition
class Tcgen05LdOp(Inst):
    """``tcgen05.ld.sync.aligned.32x32b.x<num>.b32 {r..}, [taddr]`` (PTX ISA 9.7.16.8.3,
    layout 9.7.16.8.1 "Matrix fragments for .32x32b"): lane ``i`` of the warp gets
    tensor-memory lane ``lane(taddr) + i``, columns ``col(taddr) .. + num``. A warp may
    only reach lanes ``32 (warp % 4) .. + 31``. Results undefined until ``tcgen05.wait::ld``."""

    name = "ptx.tcgen05_ld"
    taddr = operand_def(RegType)
    num = attr_def(IntAttr)
    shape = attr_def(StringAttr)
    res = var_result_def(RegType)

    def __init__(self, taddr: SSAValue, num: int, shape: str = "32x32b"):
        super().__init__(operands=[taddr], result_types=[[F32] * num],
                         attributes={"num": IntAttr(num), "shape": StringAttr(shape)})

    def verify_(self) -> None:
        if self.shape.data != "32x32b" or self.num.data not in LD_32X32B_NUM:
            raise VerifyException(f"'ptx.tcgen05_ld' .{self.shape.data}.x{self.num.data}: only "
                                  f".32x32b with x in {LD_32X32B_NUM}")
        if len(self.res) != self.num.data:
            raise VerifyException(f"'ptx.tcgen05_ld' .x{self.num.data} gives {self.num.data} "
                                  f"registers, not {len(self.res)}")

    def render(self, n: Names) -> list[str]:
        regs = ", ".join(n(r) for r in self.res)
        return [f"tcgen05.ld.sync.aligned.{self.shape.data}.x{self.num.data}.b32 {{{regs}}}, "
                f"[{n(self.taddr)}];"]


@irdl_op_definition
class Tcgen05WaitOp(Inst):
    """``tcgen05.wait::ld.sync.aligned`` / ``::st`` (PTX ISA 9.7.16.8.5): the thread's
    earlier ``tcgen05.ld`` (``st``) have completed; their registers may be read."""

    name = "ptx.tcgen05_wait"
    kind = attr_def(StringAttr)

    def __init__(self, kind: str = "ld"):
        super().__init__(attributes={"kind": StringAttr(kind)})

    def verify_(self) -> None:
        if self.kind.data not in ("ld", "st"):
            raise VerifyException(f"'ptx.tcgen05_wait' kind {self.kind.data!r}: ld or st")

    def render(self, n: Names) -> list[str]:
        return [f"tcgen05.wait::{self.kind.data}.sync.aligned;"]


@irdl_op_definition
class Tcgen05FenceOp(Inst):
    """``tcgen05.fence::before_thread_sync`` / ``::after_thread_sync`` (PTX ISA 9.7.16.6.4):
    orders the thread's tcgen05 operations before (after) a thread synchronization (a
    barrier, an mbarrier arrival or wait)."""

    name = "ptx.tcgen05_fence"
    kind = attr_def(StringAttr)

    def __init__(self, kind: str):
        super().__init__(attributes={"kind": StringAttr(kind)})

    def verify_(self) -> None:
        if self.kind.data not in ("before", "after"):
            raise VerifyException(f"'ptx.tcgen05_fence' kind {self.kind.data!r}: before or after")

    def render(self, n: Names) -> list[str]:
        return [f"tcgen05.fence::{self.kind.data}_thread_sync;"]


from pkc.codegen.ptx_sm100_ext import EXT_OPS  # noqa: E402  (st / cp / shift / CLC)

SM100_OPS = [Tcgen05AllocOp, Tcgen05DeallocOp, Tcgen05RelinquishOp, Tcgen05MmaOp, Tcgen05CommitOp,
             Tcgen05LdOp, Tcgen05WaitOp, Tcgen05FenceOp, *EXT_OPS]

__all__ = ["SM100_OPS", "instr_desc_f16", "instr_desc_f8f6f4", "MmaKind", "F8_TYPE_CODE",
           "smem_desc_hi", "check_mma_shape", "cta_group_of",
           "DESC_KMAJOR", "DESC_MNMAJOR", *[c.__name__ for c in SM100_OPS]]
