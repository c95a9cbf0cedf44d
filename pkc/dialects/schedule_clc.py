"""The schedule level's persistent tile loop under cluster launch control (sm_100a).

``pks.clc_tile_loop`` visits the same output tiles as ``pks.tile_loop`` (grouped order),
but the grid has one CTA per tile and the tiles a running CTA takes after its first are
those of CTAs that had not started yet, which it cancels (PTX ISA 9.7.13.17,
``clusterlaunchcontrol.try_cancel``): a CTA that starts late, or an SM taken by another
kernel, no longer leaves its share of a static ``tile += grid`` split to be done last.

The roles of a CTA share one sequence of tiles through a ring of two 16-byte responses
(``resp``, a ``!pks.smem<2 x 16>``) and two pairs of mbarriers:

* trip i uses slot ``i % 2`` and phase ``(i / 2) % 2``;
* the issuer role (``issuer`` = 1, one thread) starts trip i by waiting until every role
  read the response two trips ago (``empty[slot]``), announcing 16 bytes on
  ``full[slot]`` and asking for a tile into ``resp[slot]``;
* every role, after its trip's body, waits on ``full[slot]``, reads the response and
  arrives on ``empty[slot]`` (once per role: ``empty`` expects as many arrivals as roles
  use the loop); the next tile is the cancelled CTA's, or the loop ends when a request
  failed (no CTA was left to cancel).

The body gets the tile's first row and column and the loop-carried values, as
``pks.tile_loop``'s does.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import IntAttr, i32
from xdsl.ir import Block, Region, SSAValue
from xdsl.irdl import (IRDLOperation, attr_def, irdl_op_definition, operand_def, opt_attr_def,
                       region_def, var_operand_def, var_result_def)

from pkc.dialects.schedule_structure import check_tile_loop
from pkc.dialects.schedule_types import MbarriersType, SmemType, _fail

RESPONSE_BYTES = 16
RING = 2


@irdl_op_definition
class ClcTileLoopOp(IRDLOperation):
    """The persistent tile loop of a cluster-launch-control grid (module docstring)."""

    name = "pks.clc_tile_loop"
    m = operand_def(i32)
    n = operand_def(i32)
    resp = operand_def(SmemType)
    full = operand_def(MbarriersType)
    empty = operand_def(MbarriersType)
    inits = var_operand_def()
    bm = attr_def(IntAttr)
    bn = attr_def(IntAttr)
    group_m = attr_def(IntAttr)
    issuer = attr_def(IntAttr)
    cluster_n = opt_attr_def(IntAttr)      # as pks.tile_loop's: the cluster's column blocks
    res = var_result_def()
    body = region_def("single_block")

    def __init__(self, m: SSAValue, n: SSAValue, resp: SSAValue, full: SSAValue, empty: SSAValue,
                 inits: Sequence[SSAValue], bm: int, bn: int, group_m: int, issuer: bool,
                 cluster_n: int = 1):
        block = Block(arg_types=[i32, i32, *[v.type for v in inits]])
        attrs = {"bm": IntAttr(bm), "bn": IntAttr(bn), "group_m": IntAttr(group_m),
                 "issuer": IntAttr(int(issuer))}
        if cluster_n > 1:
            attrs["cluster_n"] = IntAttr(cluster_n)
        super().__init__(operands=[m, n, resp, full, empty, list(inits)],
                         result_types=[[v.type for v in inits]], regions=[Region(block)],
                         attributes=attrs)

    @property
    def block(self) -> Block:
        return self.body.blocks[0]

    def verify_(self) -> None:
        check_tile_loop(self)
        r, f, e = self.resp.type, self.full.type, self.empty.type
        if r.count.data != RING or r.bytes.data < RESPONSE_BYTES:
            _fail(self.name, f"responses {r}: {RING} slots of at least {RESPONSE_BYTES} bytes")
        if f.count.data != RING or f.arrivals.data != 1:
            _fail(self.name, f"full {f}: {RING} mbarriers of 1 arrival (the issuer's)")
        if e.count.data != RING:
            _fail(self.name, f"empty {e}: {RING} mbarriers (one arrival per role of the loop)")
        if self.issuer.data not in (0, 1):
            _fail(self.name, f"issuer {self.issuer.data}: 0 or 1")


CLC_OPS = [ClcTileLoopOp]

__all__ = ["ClcTileLoopOp", "CLC_OPS", "RESPONSE_BYTES", "RING"]
