"""The ``ptx`` dialect: PTX instructions (or small fixed groups of them) as xDSL ops.

Why a dialect and not strings: codegen is IR-to-IR (pk kernel level -> ptx), so a lowering
can be inspected, printed in MLIR's generic form and tested op by op; the last step,
:mod:`pkc.codegen.printer`, only prints. Register allocation and scheduling are ptxas's.

Registers are SSA values of type ``!ptx.reg<kind>``, kind one of ``pred b16 b32 b64 f32
f64``; the printer gives each value its own virtual register (``%r7``, ``%rd3`` ...).
Instruction types (``.s64``, ``.bf16``, ``.f32`` ...) are attributes of the ops, so one
``b32`` register may be read as ``.u32`` by one op and ``.s32`` by the next, as in PTX.

Control flow is structured (``ptx.for``, ``ptx.if``, the bounded ``ptx.spin_wait``) so
that values stay SSA; the printer turns it into labels, ``setp`` and ``bra``, and turns
loop-carried values into ``mov``s. Each op's ``render`` gives its PTX lines.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from xdsl.dialects.builtin import ArrayAttr, IntAttr, StringAttr
from xdsl.ir import (
    Attribute,
    Block,
    Dialect,
    ParametrizedAttribute,
    Region,
    SSAValue,
    TypeAttribute,
)
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    attr_def,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    opt_attr_def,
    opt_operand_def,
    opt_region_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.traits import IsTerminator
from xdsl.utils.exceptions import VerifyException

REG_KINDS = ("pred", "b16", "b32", "b64", "f32", "f64")
# Register-name prefix of each kind, as nvcc writes them.
REG_PREFIX = {"pred": "p", "b16": "h", "b32": "r", "b64": "rd", "f32": "f", "f64": "fd"}


@irdl_attr_definition
class RegType(ParametrizedAttribute, TypeAttribute):
    """A PTX virtual register: ``!ptx.reg<b32>``."""

    name = "ptx.reg"
    kind: StringAttr

    def __init__(self, kind: str):
        super().__init__(StringAttr(kind))

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> list[Attribute]:
        with parser.in_angle_brackets():
            kind = parser.parse_identifier()
        return [StringAttr(kind)]

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<{self.kind.data}>")

    def verify(self) -> None:
        if self.kind.data not in REG_KINDS:
            raise VerifyException(f"!ptx.reg kind must be one of {REG_KINDS}, got {self.kind.data}")


PRED, B16, B32, B64, F32, F64 = (RegType(k) for k in REG_KINDS)


def reg_kind(v: SSAValue) -> str:
    t = v.type
    assert isinstance(t, RegType), f"not a register: {v}"
    return t.kind.data


def kind_of_type(ptx_type: str) -> str:
    """Register kind that holds a value of PTX type ``ptx_type`` (``u64`` -> ``b64``)."""
    if ptx_type in ("pred",):
        return "pred"
    if ptx_type == "tmap":  # a CUtensorMap passed by value; the register holds its address
        return "b64"
    if ptx_type == "f32":
        return "f32"
    if ptx_type == "f64":
        return "f64"
    bits = int(ptx_type[1:])
    return {8: "b16", 16: "b16", 32: "b32", 64: "b64"}[bits]


# A function from an SSA value to its register name, given to every ``render``.
Names = Callable[[SSAValue], str]


class Inst(IRDLOperation):
    """An op that prints as a fixed list of PTX lines."""

    def render(self, n: Names) -> list[str]:  # pragma: no cover - every op overrides
        raise NotImplementedError


def _guard(n: Names, guard: SSAValue | None, negate: bool = False) -> str:
    if guard is None:
        return ""
    return f"@{'!' if negate else ''}{n(guard)} "


def _s(attr: StringAttr | None) -> str:
    return "" if attr is None else attr.data


def _dots(*parts: str) -> str:
    return "".join("." + p for p in parts if p)


# ----------------------------------------------------------------------------------------
# Kernel structure.


@irdl_op_definition
class EntryOp(IRDLOperation):
    """A ``.visible .entry``; its block arguments are the kernel parameters (``ld.param``
    at entry). ``smem_bytes`` is the dynamic shared memory it needs; ``maxntid`` the block
    size it is compiled for."""

    name = "ptx.entry"
    sym_name = attr_def(StringAttr)
    param_names = attr_def(ArrayAttr)
    param_types = attr_def(ArrayAttr)  # PTX param types: u64 / u32
    maxntid = attr_def(IntAttr)
    smem_bytes = attr_def(IntAttr)
    cluster = opt_attr_def(IntAttr)        # .reqnctapercluster N, 1, 1
    minnctapersm = opt_attr_def(IntAttr)
    smem_align = opt_attr_def(IntAttr)     # alignment of the dynamic shared memory (>= 128)
    body = region_def("single_block")

    def __init__(self, sym_name: str, params: Sequence[tuple[str, str]], maxntid: int,
                 smem_bytes: int = 0, *, cluster: int | None = None,
                 minnctapersm: int | None = None, smem_align: int | None = None):
        kinds = [kind_of_type(t) for _, t in params]
        block = Block(arg_types=[RegType(k) for k in kinds])
        attrs = {
            "sym_name": StringAttr(sym_name),
            "param_names": ArrayAttr([StringAttr(p) for p, _ in params]),
            "param_types": ArrayAttr([StringAttr(t) for _, t in params]),
            "maxntid": IntAttr(maxntid),
            "smem_bytes": IntAttr(smem_bytes),
        }
        for key, val in (("cluster", cluster), ("minnctapersm", minnctapersm),
                         ("smem_align", smem_align)):
            if val is not None:
                attrs[key] = IntAttr(val)
        super().__init__(regions=[Region(block)], attributes=attrs)

    @property
    def block(self) -> Block:
        return self.body.blocks[0]

    def params(self) -> list[tuple[str, str]]:
        return [(a.data, b.data) for a, b in zip(self.param_names.data, self.param_types.data)]


@irdl_op_definition
class YieldOp(IRDLOperation):
    """Ends a ``ptx.for`` / ``ptx.if`` / ``ptx.entry`` body; a for's operands are the
    values carried to the next iteration."""

    name = "ptx.yield"
    values = var_operand_def()
    traits = traits_def(IsTerminator())

    def __init__(self, values: Sequence[SSAValue] = ()):
        super().__init__(operands=[list(values)])


@irdl_op_definition
class ForOp(IRDLOperation):
    """``for (iv = lb; iv < ub; iv += step)`` with loop-carried registers (signed compare
    of ``type``, s32 or s64). Printed as a head test, the body and a back branch."""

    name = "ptx.for"
    lb = operand_def(RegType)
    ub = operand_def(RegType)
    step = operand_def(RegType)
    inits = var_operand_def(RegType)
    type = attr_def(StringAttr)
    at_least_once = opt_attr_def(IntAttr)   # the caller knows lb < ub: test at the bottom
    res = var_result_def(RegType)
    body = region_def("single_block")

    def __init__(self, lb: SSAValue, ub: SSAValue, step: SSAValue, inits: Sequence[SSAValue],
                 type: str = "s64", at_least_once: bool = False):
        iv_kind = reg_kind(lb)
        block = Block(arg_types=[RegType(iv_kind), *[v.type for v in inits]])
        attrs = {"type": StringAttr(type)}
        if at_least_once:
            attrs["at_least_once"] = IntAttr(1)
        super().__init__(operands=[lb, ub, step, list(inits)],
                         result_types=[[v.type for v in inits]],
                         regions=[Region(block)], attributes=attrs)

    @property
    def block(self) -> Block:
        return self.body.blocks[0]

    def verify_(self) -> None:
        term = self.block.last_op
        if not isinstance(term, YieldOp) or len(term.values) != len(self.inits):
            raise VerifyException("'ptx.for' body must end in a ptx.yield of its carried values")


@irdl_op_definition
class IfOp(IRDLOperation):
    """Runs its body when ``cond`` holds (or fails, with ``negate``), else its optional
    ``else`` body; no results. With an else body the two paths are disjoint in the CFG
    (ptxas sees that warps of one never reach the other: warp roles rely on it)."""

    name = "ptx.if"
    cond = operand_def(RegType)
    negate = opt_attr_def(IntAttr)
    body = region_def("single_block")
    else_body = opt_region_def("single_block")

    def __init__(self, cond: SSAValue, negate: bool = False, with_else: bool = False):
        attrs = {"negate": IntAttr(1)} if negate else {}
        regions = [Region(Block()), [Region(Block())] if with_else else []]
        super().__init__(operands=[cond], regions=regions, attributes=attrs)

    @property
    def block(self) -> Block:
        return self.body.blocks[0]

    @property
    def else_block(self) -> Block | None:
        return self.else_body.blocks[0] if self.else_body is not None else None


@irdl_op_definition
class CommentOp(Inst):
    """A ``//`` comment line: which pk op the following instructions implement."""

    name = "ptx.comment"
    text = attr_def(StringAttr)

    def __init__(self, text: str):
        super().__init__(attributes={"text": StringAttr(text.replace("\n", " "))})

    def render(self, n: Names) -> list[str]:
        return [f"// {self.text.data}"]


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
    index in the low half, as mma.sync fragments want)."""

    name = "ptx.pack"
    lo = operand_def(RegType)
    hi = operand_def(RegType)
    result = result_def(RegType)

    def __init__(self, lo: SSAValue, hi: SSAValue):
        super().__init__(operands=[lo, hi], result_types=[B32])

    def render(self, n: Names) -> list[str]:
        return [f"mov.b32 {n(self.result)}, {{{n(self.lo)}, {n(self.hi)}}};"]


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


# ----------------------------------------------------------------------------------------
# Memory.


@irdl_op_definition
class LdOp(Inst):
    """``ld{.sem}{.scope}.<space>{.cache}.<type> %d, [%a]``. With ``guard``, the load runs
    only where the guard holds and ``other`` is the value elsewhere (bounds checks)."""

    name = "ptx.ld"
    space = attr_def(StringAttr)
    type = attr_def(StringAttr)
    sem = opt_attr_def(StringAttr)
    scope = opt_attr_def(StringAttr)
    cache = opt_attr_def(StringAttr)
    addr = operand_def(RegType)
    guard = opt_operand_def(RegType)
    other = opt_operand_def(RegType)
    result = result_def(RegType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, space: str, type: str, addr: SSAValue, *, sem: str | None = None,
                 scope: str | None = None, cache: str | None = None,
                 guard: SSAValue | None = None, other: SSAValue | None = None):
        attrs = {"space": StringAttr(space), "type": StringAttr(type)}
        for k, v in (("sem", sem), ("scope", scope), ("cache", cache)):
            if v:
                attrs[k] = StringAttr(v)
        assert (guard is None) == (other is None), "a guarded load needs a default value"
        super().__init__(operands=[addr, [guard] if guard else [], [other] if other else []],
                         result_types=[RegType(kind_of_type(type))], attributes=attrs)

    def render(self, n: Names) -> list[str]:
        t = self.type.data
        head = f"ld{_dots(_s(self.sem), _s(self.scope))}.{self.space.data}{_dots(_s(self.cache))}.{t}"
        line = f"{head} {n(self.result)}, [{n(self.addr)}];"
        if self.guard is None:
            return [line]
        return [f"mov.b{_bits(t)} {n(self.result)}, {n(self.other)};",
                _guard(n, self.guard) + line]


def _bits(t: str) -> int:
    if t == "pred":
        return 1
    b = int(t[-2:]) if t[-2:].isdigit() else int(t[-1])
    return 16 if b == 8 else b


@irdl_op_definition
class StOp(Inst):
    """``{@guard} st{.sem}{.scope}.<space>.<type> [%a], %v``."""

    name = "ptx.st"
    space = attr_def(StringAttr)
    type = attr_def(StringAttr)
    sem = opt_attr_def(StringAttr)
    scope = opt_attr_def(StringAttr)
    addr = operand_def(RegType)
    value = operand_def(RegType)
    guard = opt_operand_def(RegType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, space: str, type: str, addr: SSAValue, value: SSAValue, *,
                 sem: str | None = None, scope: str | None = None,
                 guard: SSAValue | None = None):
        attrs = {"space": StringAttr(space), "type": StringAttr(type)}
        for k, v in (("sem", sem), ("scope", scope)):
            if v:
                attrs[k] = StringAttr(v)
        super().__init__(operands=[addr, value, [guard] if guard else []], attributes=attrs)

    def render(self, n: Names) -> list[str]:
        return [f"{_guard(n, self.guard)}st{_dots(_s(self.sem), _s(self.scope))}.{self.space.data}"
                f".{self.type.data} [{n(self.addr)}], {n(self.value)};"]


@irdl_op_definition
class RedOp(Inst):
    """``{@guard} red{.sem}{.scope}.<space>.<op>.<type> [%a], %v``: an atomic update
    without a result (``red.release.sys.global.add.u32`` signals a peer;
    ``red.relaxed.sys.global.add.f32`` is an element of a put-add)."""

    name = "ptx.red"
    space = attr_def(StringAttr)
    op = attr_def(StringAttr)
    type = attr_def(StringAttr)
    sem = opt_attr_def(StringAttr)
    scope = opt_attr_def(StringAttr)
    addr = operand_def(RegType)
    value = operand_def(RegType)
    guard = opt_operand_def(RegType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, op: str, type: str, addr: SSAValue, value: SSAValue, *,
                 space: str = "global", sem: str | None = None, scope: str | None = None,
                 guard: SSAValue | None = None):
        attrs = {"space": StringAttr(space), "op": StringAttr(op), "type": StringAttr(type)}
        for k, v in (("sem", sem), ("scope", scope)):
            if v:
                attrs[k] = StringAttr(v)
        super().__init__(operands=[addr, value, [guard] if guard else []], attributes=attrs)

    def render(self, n: Names) -> list[str]:
        return [f"{_guard(n, self.guard)}red{_dots(_s(self.sem), _s(self.scope))}.{self.space.data}"
                f".{self.op.data}.{self.type.data} [{n(self.addr)}], {n(self.value)};"]


@irdl_op_definition
class AtomOp(Inst):
    """``atom{.sem}{.scope}.<space>.<op>.<type> %d, [%a], %b{, %c}`` (``cas`` takes c)."""

    name = "ptx.atom"
    space = attr_def(StringAttr)
    op = attr_def(StringAttr)
    type = attr_def(StringAttr)
    sem = opt_attr_def(StringAttr)
    scope = opt_attr_def(StringAttr)
    addr = operand_def(RegType)
    b = operand_def(RegType)
    c = opt_operand_def(RegType)
    result = result_def(RegType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, op: str, type: str, addr: SSAValue, b: SSAValue, c: SSAValue | None = None,
                 *, space: str = "global", sem: str | None = None, scope: str | None = None):
        attrs = {"space": StringAttr(space), "op": StringAttr(op), "type": StringAttr(type)}
        for k, v in (("sem", sem), ("scope", scope)):
            if v:
                attrs[k] = StringAttr(v)
        super().__init__(operands=[addr, b, [c] if c else []],
                         result_types=[RegType(kind_of_type(type))], attributes=attrs)

    def render(self, n: Names) -> list[str]:
        tail = f", {n(self.c)}" if self.c is not None else ""
        return [f"atom{_dots(_s(self.sem), _s(self.scope))}.{self.space.data}.{self.op.data}"
                f".{self.type.data} {n(self.result)}, [{n(self.addr)}], {n(self.b)}{tail};"]


@irdl_op_definition
class FenceOp(Inst):
    """``fence.<kind>`` (``acq_rel.sys``, ``proxy.async.shared::cta``, ...) or, with
    ``kind`` = ``membar.sys`` etc., the membar spelling."""

    name = "ptx.fence"
    kind = attr_def(StringAttr)

    def __init__(self, kind: str):
        super().__init__(attributes={"kind": StringAttr(kind)})

    def render(self, n: Names) -> list[str]:
        k = self.kind.data
        return [f"{k};" if k.startswith("membar") else f"fence.{k};"]


@irdl_op_definition
class BarSyncOp(Inst):
    """``bar.sync 0``: every thread of the CTA (CTA-cooperative tile ops sync with it)."""

    name = "ptx.bar_sync"
    barrier = attr_def(IntAttr)

    def __init__(self, barrier: int = 0):
        super().__init__(attributes={"barrier": IntAttr(barrier)})

    def render(self, n: Names) -> list[str]:
        return [f"bar.sync {self.barrier.data};"]


@irdl_op_definition
class ExitOp(Inst):
    """``exit``: the thread ends (used, uniformly per CTA, after a recorded timeout)."""

    name = "ptx.exit"

    def __init__(self):
        super().__init__()

    def render(self, n: Names) -> list[str]:
        return ["exit;"]


# ----------------------------------------------------------------------------------------
# Tensor cores.


@irdl_op_definition
class MmaSyncOp(Inst):
    """``mma.sync.aligned.<shape>.row.col.<d>.<a>.<b>.<c>``: one warp-wide MMA. For
    m16n8k16 bf16/f16: a is 4 b32, b is 2 b32, c and d are 4 f32."""

    name = "ptx.mma_sync"
    shape = attr_def(StringAttr)
    types = attr_def(StringAttr)  # e.g. "f32.bf16.bf16.f32"
    a = var_operand_def(RegType)
    b = var_operand_def(RegType)
    c = var_operand_def(RegType)
    d = var_result_def(RegType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, shape: str, types: str, a: Sequence[SSAValue], b: Sequence[SSAValue],
                 c: Sequence[SSAValue]):
        super().__init__(operands=[list(a), list(b), list(c)], result_types=[[F32] * len(c)],
                         attributes={"shape": StringAttr(shape), "types": StringAttr(types)})

    def render(self, n: Names) -> list[str]:
        def vec(vs):
            return "{" + ", ".join(n(v) for v in vs) + "}"
        return [f"mma.sync.aligned.{self.shape.data}.row.col.{self.types.data} {vec(self.d)}, "
                f"{vec(self.a)}, {vec(self.b)}, {vec(self.c)};"]


# ----------------------------------------------------------------------------------------
# Bulk copies (sm_90+): shared <-> global through the copy engine, and mbarriers.


@irdl_op_definition
class CpAsyncBulkStoreOp(Inst):
    """``cp.async.bulk.global.shared::cta.bulk_group [%g], [%s], %n`` or, with ``reduce``
    (``add.f32``, ``add.noftz.bf16`` ...), ``cp.reduce.async.bulk`` of the same form."""

    name = "ptx.cp_async_bulk_store"
    reduce = opt_attr_def(StringAttr)
    dst = operand_def(RegType)
    src = operand_def(RegType)
    size = operand_def(RegType)
    guard = opt_operand_def(RegType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, dst: SSAValue, src: SSAValue, size: SSAValue, reduce: str | None = None,
                 guard: SSAValue | None = None):
        attrs = {"reduce": StringAttr(reduce)} if reduce else {}
        super().__init__(operands=[dst, src, size, [guard] if guard else []], attributes=attrs)

    def render(self, n: Names) -> list[str]:
        op = "cp.reduce.async.bulk" if self.reduce is not None else "cp.async.bulk"
        tail = f".{self.reduce.data}" if self.reduce is not None else ""
        return [f"{_guard(n, self.guard)}{op}.global.shared::cta.bulk_group{tail} "
                f"[{n(self.dst)}], [{n(self.src)}], {n(self.size)};"]


@irdl_op_definition
class CpAsyncBulkLoadOp(Inst):
    """``cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%s], [%g], %n,
    [%mbar]``: completion is counted in bytes on the mbarrier."""

    name = "ptx.cp_async_bulk_load"
    dst = operand_def(RegType)
    src = operand_def(RegType)
    size = operand_def(RegType)
    mbar = operand_def(RegType)
    guard = opt_operand_def(RegType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, dst: SSAValue, src: SSAValue, size: SSAValue, mbar: SSAValue,
                 guard: SSAValue | None = None):
        super().__init__(operands=[dst, src, size, mbar, [guard] if guard else []])

    def render(self, n: Names) -> list[str]:
        return [f"{_guard(n, self.guard)}cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes "
                f"[{n(self.dst)}], [{n(self.src)}], {n(self.size)}, [{n(self.mbar)}];"]


@irdl_op_definition
class BulkGroupOp(Inst):
    """``cp.async.bulk.commit_group`` (``wait`` absent) or ``cp.async.bulk.wait_group{.read}
    <wait>`` (PTX ISA 9.7.9.25.4): without ``read`` the writes complete, with it only the
    reads of shared memory (the buffer may be reused)."""

    name = "ptx.bulk_group"
    wait = opt_attr_def(IntAttr)
    read = opt_attr_def(IntAttr)
    guard = opt_operand_def(RegType)

    def __init__(self, wait: int | None = None, read: bool = False,
                 guard: SSAValue | None = None):
        attrs = {} if wait is None else {"wait": IntAttr(wait)}
        if read:
            attrs["read"] = IntAttr(1)
        super().__init__(operands=[[guard] if guard else []], attributes=attrs)

    def render(self, n: Names) -> list[str]:
        g = _guard(n, self.guard)
        if self.wait is None:
            return [f"{g}cp.async.bulk.commit_group;"]
        rd = ".read" if self.read is not None else ""
        return [f"{g}cp.async.bulk.wait_group{rd} {self.wait.data};"]


@irdl_op_definition
class MbarrierOp(Inst):
    """Single-instruction mbarrier ops on a shared address: ``init`` (b = count),
    ``expect_tx`` (b = bytes), ``arrive`` (result = state token)."""

    name = "ptx.mbarrier"
    op = attr_def(StringAttr)
    addr = operand_def(RegType)
    b = opt_operand_def(RegType)
    result = var_result_def(RegType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, op: str, addr: SSAValue, b: SSAValue | None = None):
        results = [B64] if op.startswith("arrive") else []
        super().__init__(operands=[addr, [b] if b else []], result_types=[results],
                         attributes={"op": StringAttr(op)})

    def render(self, n: Names) -> list[str]:
        a = n(self.addr)
        op = self.op.data
        if op == "init":
            return [f"mbarrier.init.shared::cta.b64 [{a}], {n(self.b)};"]
        if op == "expect_tx":
            return [f"mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [{a}], {n(self.b)};"]
        if op == "arrive":
            return [f"mbarrier.arrive.shared::cta.b64 {n(self.result[0])}, [{a}];"]
        if op == "arrive_expect_tx":
            return [f"mbarrier.arrive.expect_tx.shared::cta.b64 {n(self.result[0])}, [{a}], {n(self.b)};"]
        raise ValueError(op)


@irdl_op_definition
class MbarrierWaitOp(Inst):
    """Fixed group: ``mbarrier.try_wait`` in a loop until the phase of ``state`` is done,
    or ``timeout_ns`` passed (result: true on timeout), so that a byte count that never
    arrives cannot hang the GPU."""

    name = "ptx.mbarrier_wait"
    addr = operand_def(RegType)
    state = operand_def(RegType)
    timeout_ns = operand_def(RegType)
    timed_out = result_def(RegType)

    def __init__(self, addr: SSAValue, state: SSAValue, timeout_ns: SSAValue):
        super().__init__(operands=[addr, state, timeout_ns], result_types=[PRED])

    def render(self, n) -> list[str]:
        ok, start, now = n.fresh("pred"), n.fresh("b64"), n.fresh("b64")
        to = n(self.timed_out)
        loop, done = n.label("mbar_wait"), n.label("mbar_done")
        return [f"mov.u64 {start}, %globaltimer;",
                f"{loop}:",
                f"mbarrier.try_wait.shared::cta.b64 {ok}, [{n(self.addr)}], {n(self.state)};",
                f"mov.u64 {now}, %globaltimer;",
                f"sub.u64 {now}, {now}, {start};",
                f"setp.gt.u64 {to}, {now}, {n(self.timeout_ns)};",
                f"@{ok} setp.ne.u32 {to}, 0, 0;",
                f"@{ok} bra {done};",
                f"@!{to} bra {loop};",
                f"{done}:"]


@irdl_op_definition
class SpinWaitOp(Inst):
    """Fixed group, the bounded wait on a signal counter::

        start = %globaltimer
        loop: ld.acquire.sys.global.u32 seen, [addr]
              if seen >= expected: done
              if %globaltimer - start > timeout_ns: timed out
              nanosleep; bra loop

    Results: the last value seen and a predicate that is true on timeout. The caller
    records the timeout and ends the CTA, so a protocol bug raises a host error instead of
    hanging the GPU."""

    name = "ptx.spin_wait"
    addr = operand_def(RegType)
    expected = operand_def(RegType)
    timeout_ns = operand_def(RegType)
    scope = attr_def(StringAttr)
    seen = result_def(RegType)
    timed_out = result_def(RegType)

    def __init__(self, addr: SSAValue, expected: SSAValue, timeout_ns: SSAValue, scope: str = "sys"):
        super().__init__(operands=[addr, expected, timeout_ns], result_types=[B32, PRED],
                         attributes={"scope": StringAttr(scope)})

    def render(self, n) -> list[str]:
        start, now, ok = n.fresh("b64"), n.fresh("b64"), n.fresh("pred")
        seen, to = n(self.seen), n(self.timed_out)
        loop, done = n.label("spin"), n.label("spin_done")
        return [
            "// bounded spin: ld.acquire until >= expected, or give up after timeout_ns",
            f"mov.u64 {start}, %globaltimer;",
            f"{loop}:",
            f"ld.acquire.{self.scope.data}.global.u32 {seen}, [{n(self.addr)}];",
            f"setp.ge.u32 {ok}, {seen}, {n(self.expected)};",
            f"mov.u64 {now}, %globaltimer;",
            f"sub.u64 {now}, {now}, {start};",
            f"setp.gt.u64 {to}, {now}, {n(self.timeout_ns)};",
            f"@{ok} setp.ne.u32 {to}, {seen}, {seen};",  # satisfied: not a timeout
            f"@{ok} bra {done};",
            f"@{to} bra {done};",
            "nanosleep.u32 32;",
            f"bra {loop};",
            f"{done}:",
        ]


@irdl_op_definition
class AtomicAddCas16Op(Inst):
    """Fixed group: an atomic add of an f32 value into a bf16/f16 element in global
    memory through a 32-bit CAS loop (for targets without ``red.add.noftz.bf16``)."""

    name = "ptx.atomic_add_cas16"
    type = attr_def(StringAttr)  # bf16 | f16
    scope = attr_def(StringAttr)
    addr = operand_def(RegType)
    value = operand_def(RegType)  # f32
    guard = opt_operand_def(RegType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, type: str, addr: SSAValue, value: SSAValue, scope: str = "sys",
                 guard: SSAValue | None = None):
        super().__init__(operands=[addr, value, [guard] if guard else []],
                         attributes={"type": StringAttr(type), "scope": StringAttr(scope)})

    def render(self, n) -> list[str]:
        f = n.fresh
        word, sh64, sh, old, half, wide, fv, nh, nw, mask, new, prev = (
            f("b64"), f("b64"), f("b32"), f("b32"), f("b16"), f("b32"), f("f32"), f("b16"),
            f("b32"), f("b32"), f("b32"), f("b32"))
        p = f("pred")
        loop, skip = n.label("cas"), n.label("cas_skip")
        a, v, sc = n(self.addr), n(self.value), self.scope.data
        lines = [f"@!{n(self.guard)} bra {skip};"] if self.guard is not None else []
        if self.type.data == "bf16":
            widen = [f"cvt.u32.u16 {wide}, {half};", f"shl.b32 {wide}, {wide}, 16;",
                     f"mov.b32 {fv}, {wide};"]
        else:
            widen = [f"cvt.f32.f16 {fv}, {half};"]
        lines += [
            f"and.b64 {word}, {a}, -4;",
            f"and.b64 {sh64}, {a}, 2;",
            f"cvt.u32.u64 {sh}, {sh64};",
            f"shl.b32 {sh}, {sh}, 3;",
            f"ld.relaxed.{sc}.global.u32 {old}, [{word}];",
            f"{loop}:",
            f"shr.u32 {wide}, {old}, {sh};",
            f"cvt.u16.u32 {half}, {wide};",
            *widen,
            f"add.rn.f32 {fv}, {fv}, {v};",
            f"cvt.rn.{self.type.data}.f32 {nh}, {fv};",
            f"cvt.u32.u16 {nw}, {nh};",
            f"shl.b32 {nw}, {nw}, {sh};",
            f"shl.b32 {mask}, 65535, {sh};",
            f"not.b32 {mask}, {mask};",
            f"and.b32 {new}, {old}, {mask};",
            f"or.b32 {new}, {new}, {nw};",
            f"atom.relaxed.{sc}.global.cas.b32 {prev}, [{word}], {old}, {new};",
            f"setp.ne.u32 {p}, {prev}, {old};",
            f"mov.b32 {old}, {prev};",
            f"@{p} bra {loop};",
        ]
        if self.guard is not None:
            lines.append(f"{skip}:")
        return lines


PTX_OPS = [
    EntryOp, YieldOp, ForOp, IfOp, CommentOp, SregOp, SmemBaseOp, ImmOp, MovOp, PackOp,
    BinaryOp, UnaryOp, FmaOp, SetpOp, PredOp, SelpOp, CvtOp, LdOp, StOp, RedOp, AtomOp,
    FenceOp, BarSyncOp, ExitOp, MmaSyncOp, CpAsyncBulkStoreOp, CpAsyncBulkLoadOp,
    BulkGroupOp, MbarrierOp, MbarrierWaitOp, SpinWaitOp, AtomicAddCas16Op,
]

def __getattr__(name: str):
    # The dialect also holds the sm_90 / sm_100 / communication ops of pkc.codegen.ptx_sm90 /
    # ptx_sm100 / ptx_comm, which import this
    # module; assembling it on first use keeps either import order working.
    if name == "PTX":
        from pkc.codegen.ptx_sm90 import SM90_OPS, SM90_TYPES
        from pkc.codegen.ptx_comm import COMM_PTX_OPS
        from pkc.codegen.ptx_sm100 import SM100_OPS
        # Every ptx op, the communication ones included: the IR that --dump-kernels writes
        # parses back (through mlir-opt too) only with all of them registered.
        dialect = Dialect("ptx", [*PTX_OPS, *SM90_OPS, *SM100_OPS, *COMM_PTX_OPS],
                          [RegType, *SM90_TYPES])
        globals()["PTX"] = dialect
        return dialect
    raise AttributeError(name)
