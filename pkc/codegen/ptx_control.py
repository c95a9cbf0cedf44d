"""The ``ptx`` dialect's kernel structure (see :mod:`pkc.codegen.ptx`): the kernel entry,
the structured control flow (``ptx.for``, ``ptx.if`` and their ``ptx.yield``) that the
printer turns into labels and branches, and the ``//`` comment op.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import ArrayAttr, IntAttr, StringAttr
from xdsl.ir import Block, Region, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    attr_def,
    irdl_op_definition,
    operand_def,
    opt_attr_def,
    opt_region_def,
    region_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.traits import IsTerminator
from xdsl.utils.exceptions import VerifyException

from pkc.codegen.ptx_core import Inst, Names, RegType, kind_of_type, reg_kind



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
    of ``type``, s32 or s64). Printed as a head test, the body and a back branch.
    ``next_iv``: a loop whose next iv the body computes (a while loop: cluster launch
    control's tile loop); the body's yield starts with it, ``step`` is unused."""

    name = "ptx.for"
    lb = operand_def(RegType)
    ub = operand_def(RegType)
    step = operand_def(RegType)
    inits = var_operand_def(RegType)
    type = attr_def(StringAttr)
    at_least_once = opt_attr_def(IntAttr)   # the caller knows lb < ub: test at the bottom
    next_iv = opt_attr_def(IntAttr)         # the yield's first value is the next iv
    res = var_result_def(RegType)
    body = region_def("single_block")

    def __init__(self, lb: SSAValue, ub: SSAValue, step: SSAValue, inits: Sequence[SSAValue],
                 type: str = "s64", at_least_once: bool = False, next_iv: bool = False):
        iv_kind = reg_kind(lb)
        block = Block(arg_types=[RegType(iv_kind), *[v.type for v in inits]])
        attrs = {"type": StringAttr(type)}
        if at_least_once:
            attrs["at_least_once"] = IntAttr(1)
        if next_iv:
            attrs["next_iv"] = IntAttr(1)
        super().__init__(operands=[lb, ub, step, list(inits)],
                         result_types=[[v.type for v in inits]],
                         regions=[Region(block)], attributes=attrs)

    @property
    def block(self) -> Block:
        return self.body.blocks[0]

    def verify_(self) -> None:
        term = self.block.last_op
        extra = 1 if self.next_iv is not None else 0
        if not isinstance(term, YieldOp) or len(term.values) != len(self.inits) + extra:
            raise VerifyException("'ptx.for' body must end in a ptx.yield of its carried values"
                                  + (" after the next iv" if extra else ""))


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
