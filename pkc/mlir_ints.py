"""Plain integers at pkc's generic-form boundary: ``IntAttr`` <-> ``IntegerAttr`` (i64).

pkc's schedule-level ops (``pks``, pkc/dialects/schedule*.py) hold their plain integer
attributes (``tx_bytes``, ``pending``, ``regs``, tile sizes, ...) as xDSL's ``IntAttr``,
whose only textual form is ``#builtin.int<N>``. Upstream MLIR has no such attribute:
``mlir-opt --allow-unregistered-dialect`` rejects it ("dialect 'builtin' provides no
attribute parsing hook"), so the generic form of scheduled IR did not round-trip through
mlir-opt as the design promises (DESIGN.md, "Levels of IR").

Why a conversion at the boundary rather than ``IntegerAttr`` in the op definitions: about
100 op attributes of the ``pks`` dialect are ``IntAttr`` and every lowering, interpreter
and emulator reads them as ``attr.data``; retyping them changes all those readers and
pkc's printed IR (the lit tests check it). The boundary is two functions in one file:

- :class:`GenericPrinter` prints every ``IntAttr`` of an op's attribute or property
  dictionary (also inside an ``ArrayAttr`` / ``DictionaryAttr`` value) as MLIR's
  ``N : i64`` in the generic form only. pkc's custom form is unchanged (it still prints
  ``#builtin.int<N>``, which pkc reads back). Integers inside pkc's own types
  (``!pks.mbarriers<6, 1>``) are printed by the types' own syntax and never converted.
- :func:`retype_integer_attributes` runs after every parse: where an op's definition
  requires an ``IntAttr`` (or an array of them) and the text held an integer
  ``IntegerAttr`` of the same value (what mlir-opt prints back), the value becomes the
  ``IntAttr`` the definition asks for. It is directed by the op's definition, so an
  attribute that really is an ``IntegerAttr`` (``arith.constant``'s value, an
  unregistered op's attribute) is never touched, and it only ever turns IR that would
  fail its verifier into IR that passes. One consequence: pkc also accepts
  ``{pending = 0 : i64}`` in hand-written IR, as the same op as ``#builtin.int<0>``.

The value is exact both ways: an ``IntAttr`` outside the i64 range cannot be printed
generically and is reported (``ValueError`` naming the op and attribute) instead of being
silently wrapped.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    IndexType,
    IntAttr,
    IntegerAttr,
    IntegerType,
    i64,
)
from xdsl.ir import Attribute, Operation
from xdsl.irdl import VerificationContext, IRDLOperation
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

__all__ = ["GenericPrinter", "retype_integer_attributes", "to_mlir_integers"]

_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


def to_mlir_integers(attr: Attribute, where: str = "attribute") -> Attribute:
    """``attr`` with every ``IntAttr`` (at its top or in arrays / dictionaries) as an i64
    ``IntegerAttr``; the same object when there is none."""
    if isinstance(attr, IntAttr):
        if not _I64_MIN <= attr.data <= _I64_MAX:
            raise ValueError(f"{where}: {attr.data} does not fit the i64 of MLIR's generic form")
        return IntegerAttr(attr.data, i64)
    if isinstance(attr, ArrayAttr):
        items = [to_mlir_integers(a, where) for a in attr.data]
        return attr if all(a is b for a, b in zip(items, attr.data)) else ArrayAttr(items)
    if isinstance(attr, DictionaryAttr):
        entries = {k: to_mlir_integers(v, where) for k, v in attr.data.items()}
        same = all(entries[k] is v for k, v in attr.data.items())
        return attr if same else DictionaryAttr(entries)
    return attr


def _to_int_attrs(attr: Attribute) -> Attribute:
    """The inverse of :func:`to_mlir_integers`: integer ``IntegerAttr`` -> ``IntAttr``."""
    if isinstance(attr, IntegerAttr) and isinstance(attr.type, IntegerType | IndexType):
        return IntAttr(attr.value.data)
    if isinstance(attr, ArrayAttr):
        return ArrayAttr([_to_int_attrs(a) for a in attr.data])
    if isinstance(attr, DictionaryAttr):
        return DictionaryAttr({k: _to_int_attrs(v) for k, v in attr.data.items()})
    return attr


class GenericPrinter(Printer):
    """xDSL's printer; in the generic form, op attributes and properties print their
    ``IntAttr`` values as MLIR integers (see the module docstring)."""

    _op_name = "op"

    def print_op_with_default_format(self, op: Operation) -> None:
        # The name for error messages; restored after, since the op's attributes print
        # after its regions (whose ops set their own names).
        outer, self._op_name = self._op_name, op.name
        try:
            super().print_op_with_default_format(op)
        finally:
            self._op_name = outer

    def _converted(self, attrs: Mapping[str, Attribute]) -> dict[str, Attribute]:
        return {k: to_mlir_integers(v, f"'{self._op_name}' attribute '{k}'")
                for k, v in attrs.items()}

    def _print_op_properties(self, properties: dict[str, Attribute]) -> None:
        if self.print_generic_format:
            properties = self._converted(properties)
        super()._print_op_properties(properties)

    def print_op_attributes(self, attributes: Mapping[str, Attribute], **kwargs: Any) -> bool:
        if self.print_generic_format:
            attributes = self._converted(attributes)
        return super().print_op_attributes(attributes, **kwargs)


def _holds_integer_attr(attr: Attribute) -> bool:
    if isinstance(attr, IntegerAttr):
        return True
    if isinstance(attr, ArrayAttr | DictionaryAttr):
        values = attr.data.values() if isinstance(attr, DictionaryAttr) else attr.data
        return any(_holds_integer_attr(a) for a in values)
    return False


def _retyped(constr, attr: Attribute) -> Attribute | None:
    """``attr`` with its integers as ``IntAttr`` if the definition's constraint rejects it
    as written and accepts it so; else ``None`` (leave the attribute alone)."""
    if not _holds_integer_attr(attr):
        return None
    try:
        constr.verify(attr, VerificationContext())
        return None  # already what the definition wants
    except VerifyException:
        pass
    candidate = _to_int_attrs(attr)
    try:
        constr.verify(candidate, VerificationContext())
    except VerifyException:
        return None  # wrong either way: the verifier reports it as written
    return candidate


def _ops(root: Operation) -> Iterator[Operation]:
    stack = [root]
    while stack:
        op = stack.pop()
        yield op
        for region in op.regions:
            for block in region.blocks:
                stack.extend(block.ops)


def retype_integer_attributes(root: Operation) -> int:
    """Turn the i64 integers mlir-opt prints back into the ``IntAttr`` values pkc's op
    definitions require (see the module docstring); returns how many were changed."""
    changed = 0
    for op in _ops(root):
        if not isinstance(op, IRDLOperation) or not (op.attributes or op.properties):
            continue
        definition = type(op).get_irdl_definition()
        for store, defs in ((op.attributes, definition.attributes),
                            (op.properties, definition.properties)):
            for name, value in list(store.items()):
                attr_def = defs.get(name)
                if attr_def is None:
                    continue
                new = _retyped(attr_def.constr, value)
                if new is not None:
                    store[name] = new
                    changed += 1
    return changed
