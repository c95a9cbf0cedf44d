"""The ``ptx`` dialect's memory ops (see :mod:`pkc.codegen.ptx`): loads and stores
(guarded ones for bounds checks), atomics with and without a result, fences, the CTA
barrier and ``exit``.
"""

from __future__ import annotations

from xdsl.dialects.builtin import IntAttr, StringAttr
from xdsl.ir import SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    attr_def,
    irdl_op_definition,
    operand_def,
    opt_attr_def,
    opt_operand_def,
    result_def,
)

from pkc.codegen.ptx_core import Inst, Names, RegType, _dots, _guard, _s, kind_of_type

# ----------------------------------------------------------------------------------------
# Memory.


def _strings(**values: str | None) -> dict[str, StringAttr]:
    """The ops' string attributes, in the order given; a None or empty one (an optional
    qualifier such as ``.sem``) is left out."""
    return {k: StringAttr(v) for k, v in values.items() if v}


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
        attrs = _strings(space=space, type=type, sem=sem, scope=scope, cache=cache)
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
        attrs = _strings(space=space, type=type, sem=sem, scope=scope)
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
        attrs = _strings(space=space, op=op, type=type, sem=sem, scope=scope)
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
        attrs = _strings(space=space, op=op, type=type, sem=sem, scope=scope)
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
