"""The ``ptx`` dialect's register ops (see :mod:`pkc.codegen.ptx`): moves, immediates,
special registers and the shared-memory base, then arithmetic, comparisons, predicates,
selects and conversions, each one PTX instruction.
"""

from __future__ import annotations

from xdsl.dialects.builtin import StringAttr
from xdsl.ir import SSAValue
from xdsl.irdl import (
    attr_def,
    irdl_op_definition,
    operand_def,
    opt_attr_def,
    result_def,
)

from pkc.codegen.ptx_core import (
    B32,
    PRED,
    Inst,
    Names,
    RegType,
    _dots,
    _s,
    kind_of_type,
    reg_kind,
)

# ----------------------------------------------------------------------------------------
# Moves, constants, special registers.


@irdl_op_definition
class SregOp(Inst):
    """``mov.u32 %r, %tid.x`` (or another special register; 64-bit ones like
    ``%globaltimer`` give a b64)."""

    name = "ptx.sreg"
    reg = attr_def(StringAttr)
    result = result_def(RegType)

    def __init__(self, reg: str):
        kind = "b64" if reg in ("%globaltimer", "%clock64") else "b32"
        super().__init__(result_types=[RegType(kind)], attributes={"reg": StringAttr(reg)})

    def render(self, n: Names) -> list[str]:
        t = "u64" if reg_kind(self.result) == "b64" else "u32"
        return [f"mov.{t} {n(self.result)}, {self.reg.data};"]


@irdl_op_definition
class SmemBaseOp(Inst):
    """The shared-memory address (32-bit, ``.shared`` window) of the kernel's dynamic
    shared-memory arena ``pk_smem``."""

    name = "ptx.smem_base"
    result = result_def(RegType)

    def __init__(self):
        super().__init__(result_types=[B32])

    def render(self, n: Names) -> list[str]:
        return [f"mov.u32 {n(self.result)}, pk_smem;"]


@irdl_op_definition
class ImmOp(Inst):
    """``mov.<type> %r, <immediate>``; ``value`` is the literal as PTX spells it
    (``42``, ``0f3F800000``, ``0d...``)."""

    name = "ptx.imm"
    value = attr_def(StringAttr)
    type = attr_def(StringAttr)
    result = result_def(RegType)

    def __init__(self, value: str, type: str):
        super().__init__(result_types=[RegType(kind_of_type(type))],
                         attributes={"value": StringAttr(value), "type": StringAttr(type)})

    def render(self, n: Names) -> list[str]:
        t = self.type.data
        if t in ("u8", "s8"):
            t = "u16" if t == "u8" else "s16"
        return [f"mov.{t} {n(self.result)}, {self.value.data};"]


@irdl_op_definition
class MovOp(Inst):
    """``mov.<type> %d, %s`` (also between register kinds of one width, e.g. b32 <-> f32)."""

    name = "ptx.mov"
    src = operand_def(RegType)
    type = attr_def(StringAttr)
    result = result_def(RegType)

    def __init__(self, src: SSAValue, type: str, result_kind: str | None = None):
        super().__init__(operands=[src], result_types=[RegType(result_kind or kind_of_type(type))],
                         attributes={"type": StringAttr(type)})

    def render(self, n: Names) -> list[str]:
        return [f"mov.{self.type.data} {n(self.result)}, {n(self.src)};"]


@irdl_op_definition
class PackOp(Inst):
    """``mov.b32 %r, {%lo, %hi}``: two 16-bit halves into one 32-bit register (the lower
    index in the low half, as mma.sync fragments want); ``wide``: ``mov.b64 %rd, {%lo,
    %hi}``, two 32-bit halves into one 64-bit register (a wgmma descriptor from its start
    address word and its fixed high word, so that a per-use offset is one 32-bit add)."""

    name = "ptx.pack"
    lo = operand_def(RegType)
    hi = operand_def(RegType)
    wide = opt_attr_def(StringAttr)
    result = result_def(RegType)

    def __init__(self, lo: SSAValue, hi: SSAValue, wide: bool = False):
        super().__init__(operands=[lo, hi], result_types=[RegType("b64") if wide else B32],
                         attributes={"wide": StringAttr("b64")} if wide else {})

    def render(self, n: Names) -> list[str]:
        w = "b64" if self.wide is not None else "b32"
        return [f"mov.{w} {n(self.result)}, {{{n(self.lo)}, {n(self.hi)}}};"]


# ----------------------------------------------------------------------------------------
# Arithmetic.


@irdl_op_definition
class BinaryOp(Inst):
    """``<opcode>.<type> %d, %a, %b``: add, sub, mul.lo, mul.wide, div, div.rn, rem, min,
    max, max.NaN, and, or, xor, shl, shr, ..."""

    name = "ptx.binary"
    opcode = attr_def(StringAttr)
    type = attr_def(StringAttr)
    lhs = operand_def(RegType)
    rhs = operand_def(RegType)
    result = result_def(RegType)

    def __init__(self, opcode: str, type: str, lhs: SSAValue, rhs: SSAValue,
                 result_kind: str | None = None):
        super().__init__(operands=[lhs, rhs],
                         result_types=[RegType(result_kind or kind_of_type(type))],
                         attributes={"opcode": StringAttr(opcode), "type": StringAttr(type)})

    def render(self, n: Names) -> list[str]:
        return [f"{self.opcode.data}.{self.type.data} {n(self.result)}, {n(self.lhs)}, {n(self.rhs)};"]


@irdl_op_definition
class UnaryOp(Inst):
    """``<opcode>.<type> %d, %a``: neg, abs, not, sqrt.rn, rcp.rn, ex2.approx.ftz,
    lg2.approx.ftz, rsqrt.approx, tanh.approx, ..."""

    name = "ptx.unary"
    opcode = attr_def(StringAttr)
    type = attr_def(StringAttr)
    src = operand_def(RegType)
    result = result_def(RegType)

    def __init__(self, opcode: str, type: str, src: SSAValue):
        super().__init__(operands=[src], result_types=[RegType(kind_of_type(type))],
                         attributes={"opcode": StringAttr(opcode), "type": StringAttr(type)})

    def render(self, n: Names) -> list[str]:
        return [f"{self.opcode.data}.{self.type.data} {n(self.result)}, {n(self.src)};"]


@irdl_op_definition
class FmaOp(Inst):
    """``fma.rn.<type> %d, %a, %b, %c`` (or ``mad.lo`` for integers via ``opcode``)."""

    name = "ptx.fma"
    opcode = attr_def(StringAttr)
    type = attr_def(StringAttr)
    a = operand_def(RegType)
    b = operand_def(RegType)
    c = operand_def(RegType)
    result = result_def(RegType)

    def __init__(self, a: SSAValue, b: SSAValue, c: SSAValue, type: str = "f32",
                 opcode: str = "fma.rn"):
        super().__init__(operands=[a, b, c], result_types=[RegType(kind_of_type(type))],
                         attributes={"opcode": StringAttr(opcode), "type": StringAttr(type)})

    def render(self, n: Names) -> list[str]:
        return [f"{self.opcode.data}.{self.type.data} {n(self.result)}, {n(self.a)}, "
                f"{n(self.b)}, {n(self.c)};"]


@irdl_op_definition
class SetpOp(Inst):
    """``setp.<cmp>.<type> %p, %a, %b``."""

    name = "ptx.setp"
    cmp = attr_def(StringAttr)
    type = attr_def(StringAttr)
    lhs = operand_def(RegType)
    rhs = operand_def(RegType)
    result = result_def(RegType)

    def __init__(self, cmp: str, type: str, lhs: SSAValue, rhs: SSAValue):
        super().__init__(operands=[lhs, rhs], result_types=[PRED],
                         attributes={"cmp": StringAttr(cmp), "type": StringAttr(type)})

    def render(self, n: Names) -> list[str]:
        return [f"setp.{self.cmp.data}.{self.type.data} {n(self.result)}, {n(self.lhs)}, {n(self.rhs)};"]


@irdl_op_definition
class PredOp(Inst):
    """``and.pred`` / ``or.pred`` / ``xor.pred`` of two predicates."""

    name = "ptx.pred"
    opcode = attr_def(StringAttr)
    lhs = operand_def(RegType)
    rhs = operand_def(RegType)
    result = result_def(RegType)

    def __init__(self, opcode: str, lhs: SSAValue, rhs: SSAValue):
        super().__init__(operands=[lhs, rhs], result_types=[PRED],
                         attributes={"opcode": StringAttr(opcode)})

    def render(self, n: Names) -> list[str]:
        return [f"{self.opcode.data}.pred {n(self.result)}, {n(self.lhs)}, {n(self.rhs)};"]


@irdl_op_definition
class SelpOp(Inst):
    """``selp.<type> %d, %a, %b, %p``: ``p ? a : b``."""

    name = "ptx.selp"
    type = attr_def(StringAttr)
    a = operand_def(RegType)
    b = operand_def(RegType)
    cond = operand_def(RegType)
    result = result_def(RegType)

    def __init__(self, type: str, a: SSAValue, b: SSAValue, cond: SSAValue):
        super().__init__(operands=[a, b, cond], result_types=[a.type],
                         attributes={"type": StringAttr(type)})

    def render(self, n: Names) -> list[str]:
        return [f"selp.{self.type.data} {n(self.result)}, {n(self.a)}, {n(self.b)}, {n(self.cond)};"]


@irdl_op_definition
class CvtOp(Inst):
    """``cvt{.rnd}.<dst>.<src> %d, %s``."""

    name = "ptx.cvt"
    rnd = opt_attr_def(StringAttr)
    dst_type = attr_def(StringAttr)
    src_type = attr_def(StringAttr)
    src = operand_def(RegType)
    result = result_def(RegType)

    def __init__(self, dst_type: str, src_type: str, src: SSAValue, rnd: str | None = None):
        attrs = {"dst_type": StringAttr(dst_type), "src_type": StringAttr(src_type)}
        if rnd:
            attrs["rnd"] = StringAttr(rnd)
        kind = "b16" if dst_type == "bf16" else kind_of_type(dst_type)
        super().__init__(operands=[src], result_types=[RegType(kind)], attributes=attrs)

    def render(self, n: Names) -> list[str]:
        return [f"cvt{_dots(_s(self.rnd))}.{self.dst_type.data}.{self.src_type.data} "
                f"{n(self.result)}, {n(self.src)};"]


@irdl_op_definition
class ShflIdxOp(Inst):
    """``shfl.sync.idx.b32 %d, %a, %lane, 31, -1``: every lane of the (whole, converged)
    warp reads ``a`` of lane ``lane & 31`` (PTX ISA 9.7.8.6; clamp 31: one 32-lane
    segment). Why: a scaled GEMM's epilogue takes its column scales from the registers of
    the lane that loaded them before the main loop (:mod:`pkc.codegen.lower_scale_loads`)."""

    name = "ptx.shfl_idx"
    src = operand_def(RegType)
    lane = operand_def(RegType)
    result = result_def(RegType)

    def __init__(self, src: SSAValue, lane: SSAValue):
        super().__init__(operands=[src, lane], result_types=[src.type])

    def render(self, n: Names) -> list[str]:
        return [f"shfl.sync.idx.b32 {n(self.result)}, {n(self.src)}, {n(self.lane)}, 31, -1;"]
