"""``pks.vec_sum_slots``: the rank-order sum of a vector's W slots, for large worlds.

A scheduled reduce-scatter / all-reduce sums, per 16-byte vector, the W slots its peers
wrote into this rank's symmetric buffer (``slot q`` at vector ``index + offset + q *
stride``). Up to a few ranks the builder writes that as W ``pks.vec_load`` and one
``pks.vec_sum`` (all loads in flight at once). With many ranks that form needs W x 4
registers per vector: ptxas issues the W independent loads first and, under the
bandwidth kinds' 64-register cap, spilled from W = 64 on (the reduce-scatter at W = 72:
1348 bytes, ptxas -arch=sm_90a). This op says the same sum without naming W values: its
lowering loops over the slots (a few loads per trip, the partial sums in f32 registers),
so the registers do not grow with W. The result is bitwise that of the W loads and one
``pks.vec_sum``: the same f32 additions in the same (rank) order, rounded once.
"""

from __future__ import annotations

from xdsl.dialects.builtin import IntAttr, StringAttr, i32
from xdsl.ir import SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    attr_def,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    result_def,
)

from pkc.dialects.common import MAX_WORLD
from pkc.dialects.schedule_comm import SUM_DTYPES, VEC, CacheHint, PtrType, VecType, _enum, _fail


@irdl_op_definition
class VecSumSlotsOp(IRDLOperation):
    """The element-wise sum over ``q = 0 .. count-1`` of vector ``index + offset + q *
    stride`` of ``ptr``, in f32 in q order, rounded once to ``dtype``; loaded where
    ``index < bound`` (if given; elsewhere the result is undefined). ``cache`` as
    ``pks.vec_load`` (cg for what peers wrote)."""

    name = "pks.vec_sum_slots"
    ptr = operand_def(PtrType)
    index = operand_def(i32)
    offset = operand_def(i32)
    stride = operand_def(i32)
    bound = opt_operand_def(i32)
    count = attr_def(IntAttr)
    dtype = attr_def(StringAttr)
    cache = attr_def(StringAttr)
    result = result_def(VecType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, ptr: SSAValue, index: SSAValue, offset: SSAValue, stride: SSAValue,
                 bound: SSAValue | None, count: int, dtype: str,
                 cache: CacheHint = CacheHint.CG):
        super().__init__(operands=[ptr, index, offset, stride, [bound] if bound else []],
                         result_types=[VEC],
                         attributes={"count": IntAttr(count), "dtype": StringAttr(dtype),
                                     "cache": StringAttr(cache.value)})

    def verify_(self) -> None:
        if self.dtype.data not in SUM_DTYPES:
            _fail(self.name, f"dtype {self.dtype.data!r} not in {SUM_DTYPES}")
        if not 1 <= self.count.data <= MAX_WORLD:
            _fail(self.name, f"sums 1..{MAX_WORLD} slots, got {self.count.data}")
        _enum(self.name, CacheHint, self.cache.data)


SUM_OPS = [VecSumSlotsOp]

__all__ = ["SUM_OPS", "VecSumSlotsOp"]
