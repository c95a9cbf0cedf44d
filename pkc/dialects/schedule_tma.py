"""The data-movement ops of the schedule-level dialect ``pks``
(:mod:`pkc.dialects.schedule`): TMA loads (multicast across a cluster), descriptor
prefetch, TMA stores (plain or reduce-add) and the bulk groups that track the stores.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import IntAttr, StringAttr, i32
from xdsl.ir import SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    attr_def,
    irdl_op_definition,
    operand_def,
    opt_attr_def,
    var_operand_def,
)

from pkc.dialects.schedule_types import MbarriersType, SmemType, TmapType, _fail

# ----------------------------------------------------------------------------------------
# Data movement


@irdl_op_definition
class TmaLoadOp(IRDLOperation):
    """A TMA load of ``tmap``'s box at ``coords`` (innermost first) into slot ``slot`` of
    ``dst`` at ``offset`` bytes; completion counted on ``bars[bar]``. ``multicast`` = the
    cluster size: the box lands in every CTA of the cluster (each signalled on its own
    barrier of that index). ``pair_multicast`` (a cluster of CTA pairs, sm_100a): a mask
    over the cluster's pairs (bit p: CTAs 2p and 2p + 1); the box lands in the CTA at this
    CTA's place in each such pair, its bytes counted where that pair counts its loads."""

    name = "pks.tma_load"
    tmap = operand_def(TmapType)
    coords = var_operand_def(i32)
    dst = operand_def(SmemType)
    slot = operand_def(i32)
    offset = operand_def(i32)
    bars = operand_def(MbarriersType)
    bar = operand_def(i32)
    multicast = opt_attr_def(IntAttr)
    pair_multicast = opt_attr_def(IntAttr)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, tmap: SSAValue, coords: Sequence[SSAValue], dst: SSAValue, slot: SSAValue,
                 offset: SSAValue, bars: SSAValue, bar: SSAValue, multicast: int = 0,
                 pair_multicast: int = 0):
        attrs = {"multicast": IntAttr(multicast)} if multicast else {}
        if pair_multicast:
            attrs["pair_multicast"] = IntAttr(pair_multicast)
        super().__init__(operands=[tmap, list(coords), dst, slot, offset, bars, bar],
                         attributes=attrs)

    def verify_(self) -> None:
        if self.pair_multicast is not None:
            check_pair_multicast(self, self.pair_multicast.data)
            if self.multicast is not None:
                _fail(self.name, "multicast and pair_multicast together")
        t = self.tmap.type
        if len(self.coords) != len(t.box_dims):
            _fail(self.name, f"{len(self.coords)} coordinates for a rank-{len(t.box_dims)} map")
        if t.box_bytes > self.dst.type.bytes.data:
            _fail(self.name, f"box of {t.box_bytes} bytes does not fit a "
                  f"{self.dst.type.bytes.data}-byte slot")


def check_pair_multicast(op, mask: int) -> None:
    """A pair multicast mask (``pks.tma_load`` / ``pks.mma_commit_arrive``): inside a
    ``pks.schedule`` of CTA pairs (a cluster of 2 or 4 with CTA accumulators), at least
    one pair, only pairs of the cluster."""
    sched = op.parent_op()
    while sched is not None and sched.name != "pks.schedule":
        sched = sched.parent_op()
    if sched is None:
        return                  # a detached op: checked again once in its schedule
    cl = sched.cluster.data
    pairs = any(o.name == "pks.acc_alloc" for o in sched.block.ops) and cl % 2 == 0
    if not pairs:
        _fail(op.name, f"pair_multicast = {mask:#b} outside a schedule of CTA pairs (this one: "
              f"cluster {cl}; pairs need an even cluster and CTA accumulators)")
    if mask < 1 or mask >> (cl // 2):
        _fail(op.name, f"pair_multicast = {mask:#b} names pairs outside the cluster's "
              f"{cl // 2} pair(s) (CTAs 2p, 2p + 1 are pair p)")


@irdl_op_definition
class TmaPrefetchOp(IRDLOperation):
    """Bring ``tmap``'s descriptor into the cache before its first copy."""

    name = "pks.tma_prefetch"
    tmap = operand_def(TmapType)

    def __init__(self, tmap: SSAValue):
        super().__init__(operands=[tmap])


@irdl_op_definition
class TmaStoreOp(IRDLOperation):
    """A TMA store (``reduce`` = "add": reduce-add) of slot ``slot`` of ``src`` to
    ``tmap``'s box at ``coords``, issued by the warpgroup's first thread into its bulk
    group."""

    name = "pks.tma_store"
    src = operand_def(SmemType)
    slot = operand_def(i32)
    tmap = operand_def(TmapType)
    coords = var_operand_def(i32)
    reduce = opt_attr_def(StringAttr)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, src: SSAValue, slot: SSAValue, tmap: SSAValue, coords: Sequence[SSAValue],
                 reduce: str | None = None):
        super().__init__(operands=[src, slot, tmap, list(coords)],
                         attributes={"reduce": StringAttr(reduce)} if reduce else {})

    def verify_(self) -> None:
        t = self.tmap.type
        if len(self.coords) != len(t.box_dims):
            _fail(self.name, f"{len(self.coords)} coordinates for a rank-{len(t.box_dims)} map")
        if self.reduce is not None and self.reduce.data != "add":
            _fail(self.name, f"reduce {self.reduce.data!r}: only 'add'")


@irdl_op_definition
class BulkCommitOp(IRDLOperation):
    """Close the warpgroup's current bulk group (its first thread's TMA stores)."""

    name = "pks.bulk_commit"

    def __init__(self):
        super().__init__()


@irdl_op_definition
class BulkWaitOp(IRDLOperation):
    """Wait until at most ``pending`` bulk groups are in flight (``read``: only their reads
    of shared memory must be done)."""

    name = "pks.bulk_wait"
    pending = attr_def(IntAttr)
    read = opt_attr_def(IntAttr)

    def __init__(self, pending: int, read: bool = False):
        attrs = {"pending": IntAttr(pending)}
        if read:
            attrs["read"] = IntAttr(1)
        super().__init__(attributes=attrs)
