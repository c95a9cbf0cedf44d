"""Ops of the schedule level (dialect ``pks``) for the MoE kernel: all-to-all dispatch +
grouped GEMM + all-to-all combine in one persistent kernel whose tokens per (expert,
source rank) are known only at run time.

The kernel is the scheduled GEMM of :mod:`pkc.passes.gemm_schedule` whose tile loop walks
the experts' row blocks (``schedule-moe``, :mod:`pkc.passes.moe_schedule`). Beyond the
GEMM's, the collectives' (:mod:`pkc.dialects.schedule_comm`) and the fused kernels' ops
(:mod:`pkc.dialects.schedule_fused`) it needs:

* ``pks.grouped_tile_loop``: the persistent tile loop over ``experts x sources`` row
  blocks of at most ``capacity`` rows each, the block's row count read from memory when
  the loop reaches it (a count written by the source rank during this launch). Block slot
  ``j * experts + e`` is expert ``e``'s rows from source ``(first + j) mod sources``: with
  ``first`` = the rank, every CTA starts on the rank's own tokens (nothing to wait for)
  and reaches a peer's tokens last. A block has ``ceil(count / bm) x ceil(n / bn)``
  tiles, rows fastest (consecutive CTAs share the expert's B tile in L2); the CTAs take
  the concatenation of the blocks' tiles round-robin (``cta, cta + grid, ...``). The body
  gets the tile's first row inside its block, its first column, the expert and the source.
* ``pks.word_load`` / ``pks.word_store``: one u32 of a buffer (a count), by index; the
  load is a relaxed GPU-scope load (coherent with what peers wrote and a barrier
  published), the store a plain store that a ``pks.fence_sys`` orders before a signal.

This module imports nothing from :mod:`pkc.dialects.schedule` (which imports it to build
the dialect); types are checked by name in the verifiers.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import IntAttr, i32
from xdsl.ir import Block, Region, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    attr_def,
    irdl_op_definition,
    operand_def,
    region_def,
    result_def,
    var_operand_def,
    var_result_def,
)
from xdsl.utils.exceptions import VerifyException

from pkc.dialects.schedule_comm import MAX_WORLD, PtrType

MAX_BLOCKS = 4096           # experts x sources row blocks of one kernel


def _fail(op: str, msg: str) -> None:
    raise VerifyException(f"'{op}' {msg}")


@irdl_op_definition
class GroupedTileLoopOp(IRDLOperation):
    """The persistent tile loop over the ``experts x sources`` row blocks whose row counts
    are ``counts[e * sources + s]`` (u32 at ``counts``, clipped to ``capacity``; read when
    the loop reaches the block). See the module doc for the order. The body gets the
    tile's first row inside its block, its first column, the expert, the source and the
    loop-carried values."""

    name = "pks.grouped_tile_loop"
    counts = operand_def(PtrType)
    n = operand_def(i32)
    first = operand_def(i32)
    inits = var_operand_def()
    bm = attr_def(IntAttr)
    bn = attr_def(IntAttr)
    experts = attr_def(IntAttr)
    sources = attr_def(IntAttr)
    capacity = attr_def(IntAttr)
    res = var_result_def()
    body = region_def("single_block")
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, counts: SSAValue, n: SSAValue, first: SSAValue, inits: Sequence[SSAValue],
                 bm: int, bn: int, experts: int, sources: int, capacity: int):
        block = Block(arg_types=[i32, i32, i32, i32, *[v.type for v in inits]])
        super().__init__(operands=[counts, n, first, list(inits)],
                         result_types=[[v.type for v in inits]], regions=[Region(block)],
                         attributes={"bm": IntAttr(bm), "bn": IntAttr(bn),
                                     "experts": IntAttr(experts), "sources": IntAttr(sources),
                                     "capacity": IntAttr(capacity)})

    @property
    def block(self) -> Block:
        return self.body.blocks[0]

    def verify_(self) -> None:
        bm, bn = self.bm.data, self.bn.data
        if bm % 64 or bm <= 0 or bn % 8 or bn <= 0:
            _fail(self.name, f"tile {bm}x{bn}: bm a positive multiple of 64, bn of 8")
        E, S, C = self.experts.data, self.sources.data, self.capacity.data
        if not 1 <= S <= MAX_WORLD:
            _fail(self.name, f"sources = {S}: 1..{MAX_WORLD} (the ranks)")
        if E < 1 or E * S > MAX_BLOCKS:
            _fail(self.name, f"experts = {E} x sources = {S}: 1..{MAX_BLOCKS} row blocks")
        if C < 1:
            _fail(self.name, f"capacity = {C}: at least one row per block")
        args = self.block.args
        if len(args) != 4 + len(self.inits) or any(a.type != i32 for a in args[:4]):
            _fail(self.name, "body takes (row, column, expert, source: i32) and the carried values")
        term = self.block.last_op
        if term is None or term.name != "pks.yield" or len(term.operands) != len(self.inits):
            _fail(self.name, "body must end in a pks.yield of its carried values")


@irdl_op_definition
class WordLoadOp(IRDLOperation):
    """u32 ``index`` of the buffer at ``ptr``: a relaxed GPU-scope load (sees what a
    peer wrote once a signal wait and a CTA barrier ordered it; never a stale L1 line)."""

    name = "pks.word_load"
    ptr = operand_def(PtrType)
    index = operand_def(i32)
    result = result_def(i32)

    def __init__(self, ptr: SSAValue, index: SSAValue):
        super().__init__(operands=[ptr, index], result_types=[i32])


@irdl_op_definition
class WordStoreOp(IRDLOperation):
    """Store ``value`` at u32 ``index`` of the buffer at ``ptr`` (usually a peer's): a
    plain store; ``pks.fence_sys`` orders it before the signal that announces it."""

    name = "pks.word_store"
    ptr = operand_def(PtrType)
    index = operand_def(i32)
    value = operand_def(i32)

    def __init__(self, ptr: SSAValue, index: SSAValue, value: SSAValue):
        super().__init__(operands=[ptr, index, value])


MOE_OPS = [GroupedTileLoopOp, WordLoadOp, WordStoreOp]

__all__ = ["MOE_OPS", "MAX_BLOCKS", *[c.__name__ for c in MOE_OPS]]
