"""More of the ``ptx`` dialect's Blackwell (sm_100a) instructions: tensor-memory stores
(``tcgen05.st``), shared-to-tensor-memory copies (``tcgen05.cp``), the row shift
(``tcgen05.shift``) and cluster launch control (``clusterlaunchcontrol``), with which a
persistent kernel takes the work of clusters that have not started yet.

Split from :mod:`pkc.codegen.ptx_sm100` (which appends :data:`EXT_OPS` to its op list);
this module imports only the dialect's core so that the two do not import each other.
"""

from __future__ import annotations

from xdsl.dialects.builtin import IntAttr, StringAttr
from xdsl.ir import SSAValue
from xdsl.irdl import (attr_def, irdl_op_definition, operand_def, opt_attr_def, result_def,
                       var_operand_def)
from xdsl.utils.exceptions import VerifyException

from pkc.codegen.ptx import B32, PRED, Inst, Names, RegType

ST_32X32B_NUM = (1, 2, 4, 8, 16, 32, 64, 128)       # PTX ISA 9.7.16.8.4: .num of .32x32b
# tcgen05.cp shapes without a .multicast or decompression qualifier (PTX ISA 9.7.16.9.2):
# rows (tensor-memory lanes) x bits per row
CP_SHAPES = {"128x256b": (128, 256), "128x128b": (128, 128), "4x256b": (4, 256)}
CLC_RESPONSE_BYTES = 16


def _group(op) -> int:
    return 1 if op.cta_group is None else op.cta_group.data


def _check_group(op) -> None:
    if _group(op) not in (1, 2):
        raise VerifyException(f"'{op.name}' cta_group {_group(op)}: 1 or 2")


def _group_attr(cta_group: int) -> dict:
    return {} if cta_group == 1 else {"cta_group": IntAttr(cta_group)}


def _kinds(op, want: list[str], what: str) -> None:
    kinds = [o.type.kind.data for o in op.operands]
    if kinds != want:
        raise VerifyException(f"'{op.name}' operands are ({what}), got {kinds}")


@irdl_op_definition
class Tcgen05StOp(Inst):
    """``tcgen05.st.sync.aligned.32x32b.x<num>.b32 [taddr], {r..}`` (PTX ISA 9.7.16.8.4,
    layout 9.7.16.2.3.1.1): lane ``i`` of the warp writes tensor-memory lane
    ``lane(taddr) + i``, columns ``col(taddr) .. + num``; a warp reaches lanes
    ``32 (warp % 4) ..`` only. Asynchronous: the cells are written once
    ``tcgen05.wait::st`` returns (the registers may be reused at once)."""

    name = "ptx.tcgen05_st"
    taddr = operand_def(RegType)
    vals = var_operand_def(RegType)
    num = attr_def(IntAttr)

    def __init__(self, taddr: SSAValue, vals: list[SSAValue]):
        super().__init__(operands=[taddr, list(vals)], attributes={"num": IntAttr(len(vals))})

    def verify_(self) -> None:
        if self.num.data not in ST_32X32B_NUM or len(self.vals) != self.num.data:
            raise VerifyException(f"'ptx.tcgen05_st' .32x32b.x{self.num.data} with {len(self.vals)} "
                                  f"registers: x in {ST_32X32B_NUM}, one register per column")
        kinds = {v.type.kind.data for v in self.vals} | {self.taddr.type.kind.data}
        if not kinds <= {"b32", "f32"}:
            raise VerifyException(f"'ptx.tcgen05_st' takes a b32 address and 32-bit registers, "
                                  f"got {sorted(kinds)}")

    def render(self, n: Names) -> list[str]:
        regs = ", ".join(n(r) for r in self.vals)
        return [f"tcgen05.st.sync.aligned.32x32b.x{self.num.data}.b32 [{n(self.taddr)}], "
                f"{{{regs}}};"]


@irdl_op_definition
class Tcgen05CpOp(Inst):
    """``tcgen05.cp.cta_group::N.<shape> [taddr], s-desc`` (PTX ISA 9.7.16.9.2): one
    thread starts an asynchronous copy of a matrix in shared memory (matrix descriptor
    ``sdesc``, 9.7.16.4.1) into tensor memory at ``taddr`` (with cta_group::2 into the
    same address of both CTAs of the pair). Completes in order with the thread's later
    tcgen05.mma and through ``tcgen05.commit``. Shapes without multicast or
    decompression: ``128x256b``, ``128x128b``, ``4x256b``."""

    name = "ptx.tcgen05_cp"
    taddr = operand_def(RegType)
    sdesc = operand_def(RegType)
    shape = attr_def(StringAttr)
    cta_group = opt_attr_def(IntAttr)

    def __init__(self, taddr: SSAValue, sdesc: SSAValue, shape: str = "128x256b",
                 cta_group: int = 1):
        super().__init__(operands=[taddr, sdesc], attributes={"shape": StringAttr(shape),
                                                              **_group_attr(cta_group)})

    def verify_(self) -> None:
        if self.shape.data not in CP_SHAPES:
            raise VerifyException(f"'ptx.tcgen05_cp' shape .{self.shape.data}: one of "
                                  f"{sorted(CP_SHAPES)} (the multicast and decompressing "
                                  "forms are not in the dialect)")
        _kinds(self, ["b32", "b64"], "b32 taddr, b64 sdesc")
        _check_group(self)

    def render(self, n: Names) -> list[str]:
        return [f"tcgen05.cp.cta_group::{_group(self)}.{self.shape.data} [{n(self.taddr)}], "
                f"{n(self.sdesc)};"]


@irdl_op_definition
class Tcgen05ShiftOp(Inst):
    """``tcgen05.shift.cta_group::N.down [taddr]`` (PTX ISA 9.7.16.9.3): one thread starts
    shifting the 32-byte elements (8 columns) at ``taddr`` down by one row, across every
    row but the last; the lane of ``taddr`` is a multiple of 32. Asynchronous like
    tcgen05.mma (complete through ``tcgen05.commit``)."""

    name = "ptx.tcgen05_shift"
    taddr = operand_def(RegType)
    cta_group = opt_attr_def(IntAttr)

    def __init__(self, taddr: SSAValue, cta_group: int = 1):
        super().__init__(operands=[taddr], attributes=_group_attr(cta_group))

    def verify_(self) -> None:
        _kinds(self, ["b32"], "b32 taddr")
        _check_group(self)

    def render(self, n: Names) -> list[str]:
        return [f"tcgen05.shift.cta_group::{_group(self)}.down [{n(self.taddr)}];"]


@irdl_op_definition
class ClcTryCancelOp(Inst):
    """``clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes
    {.multicast::cluster::all}.b128 [addr], [mbar]`` (PTX ISA 9.7.13.17): asks to cancel
    the launch of a cluster that has not started; the 16-byte response (whether it was
    cancelled, and its first CTA's id) is written asynchronously to ``addr`` (with
    ``multicast``, to ``addr`` of every CTA of the cluster) and counted as 16 transaction
    bytes on ``mbar`` (of each such CTA). The response may be read only after a wait on
    that mbarrier; after a response said "not cancelled", another request is undefined."""

    name = "ptx.clc_try_cancel"
    addr = operand_def(RegType)
    mbar = operand_def(RegType)
    multicast = opt_attr_def(IntAttr)

    def __init__(self, addr: SSAValue, mbar: SSAValue, multicast: bool = False):
        super().__init__(operands=[addr, mbar],
                         attributes={"multicast": IntAttr(1)} if multicast else {})

    def verify_(self) -> None:
        _kinds(self, ["b32", "b32"], "b32 shared addr, b32 shared mbar")

    def render(self, n: Names) -> list[str]:
        mc = ".multicast::cluster::all" if self.multicast is not None else ""
        return [f"clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes"
                f"{mc}.b128 [{n(self.addr)}], [{n(self.mbar)}];"]


@irdl_op_definition
class ClcQueryOp(Inst):
    """Reads a ``clusterlaunchcontrol.try_cancel`` response from shared memory and decodes
    it (PTX ISA 9.7.13.18, ``clusterlaunchcontrol.query_cancel``): ``canceled`` (pred) and
    the x id of the cancelled cluster's first CTA (b32; meaningless when not cancelled).
    pkc's registers have no 128-bit kind, so the load into a ``.b128`` register and the
    two queries print as one scope of their own."""

    name = "ptx.clc_query"
    addr = operand_def(RegType)
    canceled = result_def(RegType)
    ctaid_x = result_def(RegType)

    def __init__(self, addr: SSAValue):
        super().__init__(operands=[addr], result_types=[PRED, B32])

    def verify_(self) -> None:
        _kinds(self, ["b32"], "b32 shared addr")

    def render(self, n: Names) -> list[str]:
        return ["{",
                "  .reg .b128 %clc_resp;",
                f"  ld.shared.b128 %clc_resp, [{n(self.addr)}];",
                f"  clusterlaunchcontrol.query_cancel.is_canceled.pred.b128 {n(self.canceled)}, "
                "%clc_resp;",
                f"  clusterlaunchcontrol.query_cancel.get_first_ctaid::x.b32.b128 {n(self.ctaid_x)}, "
                "%clc_resp;",
                "}"]


EXT_OPS = [Tcgen05StOp, Tcgen05CpOp, Tcgen05ShiftOp, ClcTryCancelOp, ClcQueryOp]

__all__ = ["EXT_OPS", "ST_32X32B_NUM", "CP_SHAPES", "CLC_RESPONSE_BYTES",
           *[c.__name__ for c in EXT_OPS]]
