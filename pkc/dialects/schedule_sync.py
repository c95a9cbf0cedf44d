"""The synchronization ops of the schedule-level dialect ``pks``
(:mod:`pkc.dialects.schedule`): mbarrier waits (with an explicit phase parity) and
arrivals, the warpgroup and cluster barriers, and the shared-memory fence before TMA reads.
"""

from __future__ import annotations

from xdsl.dialects.builtin import IntAttr, UnitAttr, i1, i32
from xdsl.ir import SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    opt_attr_def,
    opt_operand_def,
)

from pkc.dialects.schedule_types import MbarriersType, _fail

# ----------------------------------------------------------------------------------------
# Synchronization


@irdl_op_definition
class MbarrierWaitOp(IRDLOperation):
    """Wait until the phase of ``bars[index]`` with ``parity`` (0 or 1) has completed.
    ``turns``: the barrier's phases are waited on in turns by several warpgroups (each
    skips the others' phases; their order is kept by other barriers: the ping-pong GEMM's
    consumers, pkc/passes/gemm_schedule_pingpong.py), so the wait means the phase of that
    parity at the barrier's current one, as the hardware's parity wait does; without it
    a warpgroup is expected to wait on every phase in turn (the interpreter checks)."""

    name = "pks.mbarrier_wait"
    bars = operand_def(MbarriersType)
    index = operand_def(i32)
    parity = operand_def(i32)
    turns = opt_attr_def(UnitAttr)

    def __init__(self, bars: SSAValue, index: SSAValue, parity: SSAValue, turns: bool = False):
        super().__init__(operands=[bars, index, parity],
                         attributes={"turns": UnitAttr()} if turns else {})


@irdl_op_definition
class MbarrierArriveOp(IRDLOperation):
    """One arrival on ``bars[index]`` (from one thread; where ``pred`` holds, if given).
    ``tx_bytes``: the arrival also announces that many bytes of TMA traffic. ``all_ctas``:
    arrive on the barrier of that index in every CTA of the cluster (a stage shared
    through multicast is released everywhere); in a schedule of CTA pairs (sm_100a, CTA
    accumulators), in both CTAs of the arriving CTA's pair (the accumulator's MMA spans
    the pair, not the cluster)."""

    name = "pks.mbarrier_arrive"
    bars = operand_def(MbarriersType)
    index = operand_def(i32)
    pred = opt_operand_def(i1)
    tx_bytes = opt_attr_def(IntAttr)
    all_ctas = opt_attr_def(IntAttr)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, bars: SSAValue, index: SSAValue, pred: SSAValue | None = None,
                 tx_bytes: int | None = None, all_ctas: bool = False):
        attrs = {}
        if tx_bytes is not None:
            attrs["tx_bytes"] = IntAttr(tx_bytes)
        if all_ctas:
            attrs["all_ctas"] = IntAttr(1)
        super().__init__(operands=[bars, index, [pred] if pred else []], attributes=attrs)

    def verify_(self) -> None:
        if self.tx_bytes is not None and self.all_ctas is not None:
            _fail(self.name, "an arrival that announces tx bytes is local to its CTA")


@irdl_op_definition
class WarpgroupBarrierOp(IRDLOperation):
    """The 128 threads of this warpgroup wait for each other (a named barrier per
    warpgroup)."""

    name = "pks.warpgroup_barrier"

    def __init__(self):
        super().__init__()


@irdl_op_definition
class FenceAsyncSharedOp(IRDLOperation):
    """Order this thread's shared-memory writes before later async-proxy (TMA) reads."""

    name = "pks.fence_async_shared"

    def __init__(self):
        super().__init__()


@irdl_op_definition
class ClusterSyncOp(IRDLOperation):
    """Every thread of every CTA of the cluster meets here (release / acquire)."""

    name = "pks.cluster_sync"

    def __init__(self):
        super().__init__()
