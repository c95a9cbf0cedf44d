"""The ``ptx`` dialect's NVLS instructions (PTX ISA 9.7.9.16, "multimem": sm_90+): loads,
stores and reductions through a multicast address, which stands for every rank's copy of
a symmetric buffer (a CUDA multicast object bound to each rank's memory; NVSwitch does
the fan-out and, for ``ld_reduce``, the sum).

* ``multimem.ld_reduce.relaxed.sys.global.add{.acc::f32}.v4.{bf16x2,f16x2,f32}``: the sum
  over the ranks of 16 bytes (16-bit types accumulate in f32, rounded once);
* ``multimem.st.relaxed.sys.global.v4.f32``: 16 bytes into every rank's copy (the bits
  are stored as they are: the type only sets the access size);
* ``multimem.red.relaxed.sys.global.add.u32``: add to a u32 of every rank's copy (the
  signal of a barrier: one instruction for the W ranks).

pkc emits them only for targets with NVLS (``pkc.target.targets.Target.nvls``: b200,
nvl72); ptxas assembles them for sm_90a and sm_100a (SASS: ``LDGMC`` for the ld_reduce,
``STG``/``REDG`` on the multicast address for the others); the emulator
(:mod:`pkc.emu.ops_multimem`) runs them. No GPU here has run them: the lent machines keep
NVLink multicast off.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import IntAttr, StringAttr
from xdsl.ir import SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    attr_def,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    var_operand_def,
    var_result_def,
)
from xdsl.utils.exceptions import VerifyException

from pkc.codegen.ptx import B32, Inst, Names, RegType, _guard

# the element type of a 16-byte vector -> the instruction's type (and accumulation)
LD_REDUCE_TYPES = {"bf16": ".acc::f32.v4.bf16x2", "f16": ".acc::f32.v4.f16x2", "f32": ".v4.f32"}


def _vec(n: Names, regs: Sequence[SSAValue]) -> str:
    return "{" + ", ".join(n(r) for r in regs) + "}"


@irdl_op_definition
class MultimemLdReduceOp(Inst):
    """``{@g} multimem.ld_reduce.relaxed.sys.global.add{.acc::f32}.v4.<t> {a, b, c, d},
    [addr]``: element-wise sum over every rank's copy (``dtype``: bf16, f16 or f32)."""

    name = "ptx.multimem_ld_reduce"
    addr = operand_def(RegType)
    guard = opt_operand_def(RegType)
    dtype = attr_def(StringAttr)
    res = var_result_def(RegType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, addr: SSAValue, dtype: str, *, guard: SSAValue | None = None):
        super().__init__(operands=[addr, [guard] if guard else []], result_types=[[B32] * 4],
                         attributes={"dtype": StringAttr(dtype)})

    def verify_(self) -> None:
        if self.dtype.data not in LD_REDUCE_TYPES:
            raise VerifyException(f"'{self.name}' dtype {self.dtype.data!r}: one of "
                                  f"{sorted(LD_REDUCE_TYPES)}")

    def render(self, n: Names) -> list[str]:
        t = LD_REDUCE_TYPES[self.dtype.data]
        return [f"{_guard(n, self.guard)}multimem.ld_reduce.relaxed.sys.global.add{t} "
                f"{_vec(n, self.res)}, [{n(self.addr)}];"]


@irdl_op_definition
class MultimemStOp(Inst):
    """``{@g} multimem.st.relaxed.sys.global.v4.f32 [addr+offset], {a, b, c, d}``: the 16
    bytes into every rank's copy."""

    name = "ptx.multimem_st"
    addr = operand_def(RegType)
    values = var_operand_def(RegType)
    guard = opt_operand_def(RegType)
    offset = attr_def(IntAttr)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, addr: SSAValue, values: Sequence[SSAValue], *, guard: SSAValue | None = None,
                 offset: int = 0):
        super().__init__(operands=[addr, list(values), [guard] if guard else []],
                         attributes={"offset": IntAttr(offset)})

    def verify_(self) -> None:
        if len(self.values) != 4:
            raise VerifyException(f"'{self.name}' stores 4 registers, got {len(self.values)}")

    def render(self, n: Names) -> list[str]:
        off = f"+{self.offset.data}" if self.offset.data else ""
        return [f"{_guard(n, self.guard)}multimem.st.relaxed.sys.global.v4.f32 "
                f"[{n(self.addr)}{off}], {_vec(n, self.values)};"]


@irdl_op_definition
class MultimemRedOp(Inst):
    """``{@g} multimem.red.relaxed.sys.global.add.u32 [addr], value``: add to the u32 of
    every rank's copy (order earlier stores with a ``fence`` first)."""

    name = "ptx.multimem_red"
    addr = operand_def(RegType)
    value = operand_def(RegType)
    guard = opt_operand_def(RegType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, addr: SSAValue, value: SSAValue, *, guard: SSAValue | None = None):
        super().__init__(operands=[addr, value, [guard] if guard else []])

    def render(self, n: Names) -> list[str]:
        return [f"{_guard(n, self.guard)}multimem.red.relaxed.sys.global.add.u32 "
                f"[{n(self.addr)}], {n(self.value)};"]


MULTIMEM_PTX_OPS = [MultimemLdReduceOp, MultimemStOp, MultimemRedOp]
