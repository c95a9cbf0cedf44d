"""The core of the ``ptx`` dialect (:mod:`pkc.codegen.ptx`): the register type
``!ptx.reg<kind>`` and its kinds, the :class:`Inst` base of every op that prints as fixed
PTX lines, and the small spelling helpers the ops' ``render`` share.

The op groups (:mod:`pkc.codegen.ptx_control`, :mod:`pkc.codegen.ptx_arith`,
:mod:`pkc.codegen.ptx_memory`, :mod:`pkc.codegen.ptx_bulk`) and the target ones
(:mod:`pkc.codegen.ptx_sm90`, ...) build on this module; :mod:`pkc.codegen.ptx` re-exports
all of it and assembles the dialect.
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.dialects.builtin import StringAttr
from xdsl.ir import Attribute, ParametrizedAttribute, SSAValue, TypeAttribute
from xdsl.irdl import IRDLOperation, irdl_attr_definition
from xdsl.parser import AttrParser
from xdsl.printer import Printer
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
