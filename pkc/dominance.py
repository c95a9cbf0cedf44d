"""SSA dominance: every operand of an op must be defined before the op can use it.

xDSL's verifier does not check this (MLIR's does), so a use before its definition, or a
use of a value defined inside another op's region, parsed and even lowered to PTX. The
rules checked here are MLIR's, for the single-block regions pk IR is made of:

* a block argument can be used by the ops of that block and of the regions nested in it;
* an op result can be used after the op in its block, and inside the regions of the ops
  that follow it; never inside the op's own regions, never before the op;
* nothing defined outside an ``IsolatedFromAbove`` op (``func.func``) is visible in it;
* the body of ``builtin.module`` is a graph region: order does not matter there, and
  between different blocks of one multi-block region the CFG would decide (pk IR has
  none; they are accepted rather than guessed at).
"""

from __future__ import annotations

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, BlockArgument, Operation, OpResult, SSAValue
from xdsl.traits import IsolatedFromAbove
from xdsl.utils.exceptions import VerifyException

__all__ = ["DominanceChecker"]


def _value_name(value: SSAValue) -> str:
    return f"%{value.name_hint}" if value.name_hint else "a value"


def _line_of(op: Operation) -> int | None:
    line = getattr(op.location, "line", None)
    return getattr(line, "data", None)


class DominanceChecker:
    """Checks the operands of one op at a time; keeps each block's op order it computed."""

    def __init__(self) -> None:
        self._order: dict[Block, dict[Operation, int]] = {}

    def _position(self, block: Block, op: Operation) -> int:
        order = self._order.get(block)
        if order is None:
            order = {o: i for i, o in enumerate(block.ops)}
            self._order[block] = order
        return order[op]

    def check(self, op: Operation) -> None:
        """Raises a VerifyException naming the first operand of ``op`` that is not visible."""
        for index, value in enumerate(op.operands):
            problem = self._problem(op, value)
            if problem is not None:
                raise VerifyException(f"operand #{index} ({_value_name(value)}) {problem}")

    def _problem(self, use: Operation, value: SSAValue) -> str | None:
        if isinstance(value, BlockArgument):
            def_block, def_op = value.block, None
        elif isinstance(value, OpResult):
            def_op = value.op
            def_block = def_op.parent
            if def_block is None:
                return "is the result of an op that is not in the IR"
        else:
            return None
        # Walk up from the use to the op that sits directly in the defining block.
        current = use
        while True:
            block = current.parent
            if block is None:
                return "is not defined in any region that encloses this use"
            if block is def_block:
                break
            if block.parent is not None and block.parent is def_block.parent:
                return None  # another block of the same region: the CFG decides (see above)
            owner = block.parent_op()
            if owner is None:
                return "is not defined in any region that encloses this use"
            if owner.has_trait(IsolatedFromAbove):
                return f"is defined outside the '{owner.name}' that uses it (it is isolated from above)"
            current = owner
        if def_op is None or isinstance(def_block.parent_op(), ModuleOp):
            return None
        if current is def_op:
            return f"is used inside a region of the '{def_op.name}' that defines it"
        if self._position(def_block, def_op) > self._position(def_block, current):
            line = _line_of(def_op)
            where = f" (on line {line})" if line is not None else ""
            return f"is used before it is defined{where}"
        return None
