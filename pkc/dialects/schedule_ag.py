"""Ops of the schedule level (dialect ``pks``) for kernels with a side role by CTA index,
first used by the fused all-gather + GEMM (``schedule-fused``, pattern ``all_gather_mm``).

The GEMM of :mod:`pkc.passes.gemm_schedule` splits its CTA's threads into warp roles; an
all-gather + GEMM also splits the grid: the last CTAs copy this rank's shard of A to the
peers (bulk copies through shared memory) while the other CTAs run the GEMM. These are
the ops that needs:

* ``pks.cta_partition``: CTAs ``[0, grid - side)`` run region ``main`` (its tile loops
  spread tiles over those CTAs only), the last ``side`` CTAs run region ``side`` (its
  argument: the CTA's index among them, ``0 .. side - 1``). Every thread of a CTA runs
  its region; the ops after the partition run on every CTA again.
* ``pks.smem_overlay``: shared-memory slots laid over the arena from the first slot of a
  ``pks.smem_alloc`` on (its memory and that of the allocations after it): a side CTA,
  which never runs the GEMM, reuses the GEMM's stage memory for its own ring.
* ``pks.tmap_view``: a TMA tensor map of a kernel buffer seen as a row-major array of
  other dimensions (the same elements), e.g. the gathered ``[W * Mc, K]`` operand as
  ``[W, Mc, K]``, so that a box never crosses from one shard into the next (rows past a
  shard read zeros, stores past it are clipped).
* ``pks.bulk_load``: one thread announces ``bytes`` on an mbarrier and starts the bulk copy
  (``cp.async.bulk``, no tensor map) of ``[src + offset, + bytes)`` into a shared slot; the
  mbarrier's phase completes when the bytes landed.
* ``pks.bulk_store``: one thread starts the bulk copy of a shared slot to ``[dst + offset,
  + bytes)`` (a peer's buffer through a peer pointer) in its bulk group (``pks.bulk_commit``
  / ``pks.bulk_wait`` of :mod:`pkc.dialects.schedule` close and wait for it).

This module imports nothing from :mod:`pkc.dialects.schedule` (which imports it to build
the dialect); types are checked by name in the verifiers.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import ArrayAttr, IntAttr, i32
from xdsl.ir import Attribute, Block, Region, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    attr_def,
    irdl_op_definition,
    operand_def,
    region_def,
    result_def,
    traits_def,
)
from xdsl.traits import NoTerminator
from xdsl.utils.exceptions import VerifyException

from pkc.dialects.schedule_comm import PtrType
from pkc.dialects.types import BufferType

MAX_SIDE_CTAS = 64
BULK_ALIGN = 16        # cp.async.bulk: addresses and sizes in 16-byte units


def _fail(op: str, msg: str) -> None:
    raise VerifyException(f"'{op}' {msg}")


def _is(t: Attribute, name: str) -> bool:
    return getattr(t, "name", None) == name


@irdl_op_definition
class CtaPartitionOp(IRDLOperation):
    """The grid split in two roles by CTA index: ``main`` on CTAs ``[0, grid - side)``
    (tile loops inside it stride over those CTAs), ``side`` on the last ``side`` CTAs
    (argument: the CTA's index among them). The launch's grid rule gives the side its
    ``side`` CTAs beyond the main ones (``FusedLaunch.side_ctas``)."""

    name = "pks.cta_partition"
    side = attr_def(IntAttr)
    main_body = region_def("single_block")
    side_body = region_def("single_block")
    traits = traits_def(NoTerminator())

    def __init__(self, side: int):
        super().__init__(regions=[Region(Block()), Region(Block(arg_types=[i32]))],
                         attributes={"side": IntAttr(side)})

    @property
    def main(self) -> Block:
        return self.main_body.blocks[0]

    @property
    def side_block(self) -> Block:
        return self.side_body.blocks[0]

    def verify_(self) -> None:
        n = self.side.data
        if not 1 <= n <= MAX_SIDE_CTAS:
            _fail(self.name, f"side = {n}: 1..{MAX_SIDE_CTAS} CTAs")
        args = self.side_block.args
        if len(args) != 1 or args[0].type != i32:
            _fail(self.name, f"the side region takes the CTA's index (one i32), has "
                  f"{[str(a.type) for a in args]}")
        if self.main.args:
            _fail(self.name, "the main region takes no arguments")


def _arena_from(base: SSAValue) -> int | None:
    """Bytes of the arena from ``base``'s first slot on: its allocation and every
    ``pks.smem_alloc`` after it in the same block (None: base is no pks.smem_alloc)."""
    op = base.owner
    if getattr(op, "name", None) != "pks.smem_alloc" or op.parent is None:
        return None
    total, seen = 0, False
    for o in op.parent.ops:
        seen = seen or o is op
        if seen and o.name == "pks.smem_alloc":
            t = o.results[0].type
            total += t.count.data * t.bytes.data
    return total


@irdl_op_definition
class SmemOverlayOp(IRDLOperation):
    """``count`` slots of ``bytes`` over the arena from ``base``'s first slot on (the same
    memory: for CTAs that never use ``base`` and what follows it as such)."""

    name = "pks.smem_overlay"
    base = operand_def()
    count = attr_def(IntAttr)
    bytes = attr_def(IntAttr)
    result = result_def()

    def __init__(self, base: SSAValue, count: int, nbytes: int, t: Attribute):
        super().__init__(operands=[base], result_types=[t],
                         attributes={"count": IntAttr(count), "bytes": IntAttr(nbytes)})

    def verify_(self) -> None:
        t = self.result.type
        if not _is(t, "pks.smem") or (t.count.data, t.bytes.data) != (self.count.data,
                                                                       self.bytes.data):
            _fail(self.name, f"result must be !pks.smem<{self.count.data} x "
                  f"{self.bytes.data}>, got {t}")
        if self.bytes.data <= 0 or self.bytes.data % 1024:
            _fail(self.name, f"slots of {self.bytes.data} bytes: a positive multiple of 1024")
        arena = _arena_from(self.base)
        if arena is None:
            _fail(self.name, "base must be a pks.smem_alloc (the arena's layout is theirs)")
        need = self.count.data * self.bytes.data
        if need > arena:
            _fail(self.name, f"{self.count.data} x {self.bytes.data} bytes do not fit the "
                  f"{arena} bytes of the arena from its base on")


@irdl_op_definition
class TmapViewOp(IRDLOperation):
    """A TMA tensor map of kernel buffer ``buffer`` seen as a row-major array of ``dims``
    (outermost first; the same number of elements), encoded by the runtime."""

    name = "pks.tmap_view"
    buffer = operand_def(BufferType)
    dims = attr_def(ArrayAttr[IntAttr])  # typed, so the generic `[4 : i64]` reads back
    result = result_def()

    def __init__(self, buffer: SSAValue, dims: Sequence[int], t: Attribute):
        super().__init__(operands=[buffer], result_types=[t],
                         attributes={"dims": ArrayAttr([IntAttr(d) for d in dims])})

    @property
    def dim_list(self) -> list[int]:
        return [d.data for d in self.dims.data]

    def verify_(self) -> None:
        t = self.result.type
        if not _is(t, "pks.tmap"):
            _fail(self.name, f"result must be a !pks.tmap, got {t}")
        dims = self.dim_list
        if len(dims) != len(t.box_dims):
            _fail(self.name, f"{len(dims)} dimensions for a rank-{len(t.box_dims)} box")
        n, m = 1, 1
        for d in dims:
            n *= d
        for d in self.buffer.type.get_shape():
            m *= d
        # a row-major view: the same elements, rows of the buffer split into whole rows of
        # the view (the innermost dimension divides the buffer's: G [M, W*Kc] as
        # [M, W, Kc], pkc/passes/ag_k_schedule.py), so its row strides stay the buffer's
        # row stride's divisors
        inner = self.buffer.type.get_shape()[-1]
        if n != m or inner % dims[-1]:
            _fail(self.name, f"dims {dims} are not a view of {self.buffer.type} (same elements, "
                  "an innermost dimension that divides the buffer's)")


def _check_bulk(op, smem: SSAValue) -> None:
    if not _is(smem.type, "pks.smem"):
        _fail(op.name, f"copies through a !pks.smem slot, got {smem.type}")


@irdl_op_definition
class BulkLoadOp(IRDLOperation):
    """This thread: ``bytes`` announced on mbarrier ``bars[bar]`` (arrive + expect_tx),
    then the bulk copy of ``[src + offset, + bytes)`` into slot ``slot`` of ``dst``;
    offset and bytes multiples of 16, bytes at most a slot."""

    name = "pks.bulk_load"
    src = operand_def(PtrType)
    offset = operand_def(i32)
    nbytes = operand_def(i32)
    dst = operand_def()
    slot = operand_def(i32)
    bars = operand_def()
    bar = operand_def(i32)

    def __init__(self, src: SSAValue, offset: SSAValue, nbytes: SSAValue, dst: SSAValue,
                 slot: SSAValue, bars: SSAValue, bar: SSAValue):
        super().__init__(operands=[src, offset, nbytes, dst, slot, bars, bar])

    def verify_(self) -> None:
        _check_bulk(self, self.dst)
        if not _is(self.bars.type, "pks.mbarriers"):
            _fail(self.name, f"completes on !pks.mbarriers, got {self.bars.type}")


@irdl_op_definition
class BulkStoreOp(IRDLOperation):
    """This thread: the bulk copy of ``bytes`` of slot ``slot`` of ``src`` to ``[dst +
    offset, + bytes)``, in its bulk group."""

    name = "pks.bulk_store"
    dst = operand_def(PtrType)
    offset = operand_def(i32)
    nbytes = operand_def(i32)
    src = operand_def()
    slot = operand_def(i32)

    def __init__(self, dst: SSAValue, offset: SSAValue, nbytes: SSAValue, src: SSAValue,
                 slot: SSAValue):
        super().__init__(operands=[dst, offset, nbytes, src, slot])

    def verify_(self) -> None:
        _check_bulk(self, self.src)


AG_OPS = [CtaPartitionOp, SmemOverlayOp, TmapViewOp, BulkLoadOp, BulkStoreOp]

__all__ = ["AG_OPS", "MAX_SIDE_CTAS", *[c.__name__ for c in AG_OPS]]
