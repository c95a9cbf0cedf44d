"""The GEMM parts that put a schedule's tile loops under cluster launch control (sm_100a):
every role's ``pks.tile_loop`` becomes a ``pks.clc_tile_loop`` over one shared ring of
responses (:mod:`pkc.dialects.schedule_clc`), the producer role issuing the requests.

Used by :func:`pkc.passes.gemm_schedule_tmem.build_gemm_tmem` when the tile config says
``clc`` (:mod:`pkc.target.gemm_tuning_sm100`): the launch then has one CTA per tile
(``ScheduledKernelMeta.clc``) and a running CTA takes the tiles of CTAs that have not
started, instead of the static ``tile += grid`` split.
"""

from __future__ import annotations

from xdsl.ir import SSAValue

from pkc.dialects import schedule as s
from pkc.dialects.schedule_clc import RESPONSE_BYTES, RING, ClcTileLoopOp
from pkc.passes.gemm_schedule import GemmParts, _Ops


class ClcParts(GemmParts):
    """``tile_loop`` under cluster launch control for ``roles`` roles (each role's loop
    reads every response once); the ring's shared memory and mbarriers are placed before
    the first role that asks for a loop."""

    cluster_pairs_problem = "sm_100a's CTA pairs are its own arrangement"

    pingpong_problem = (
        "tiles under cluster launch control come one response per role, not in a sequence")

    def __init__(self, roles: int = 3):
        self.roles = roles
        self.ring: tuple[SSAValue, SSAValue, SSAValue] | None = None

    def tile_loop(self, r: _Ops, M: SSAValue, N: SSAValue, inits: list[SSAValue], cfg):
        role = r.block.parent_op()
        if not isinstance(role, s.RoleOp):
            raise ValueError("ClcParts.tile_loop: the loop of a pks.role")
        if self.ring is None:
            sched = role.parent_op()
            ops = [s.SmemAllocOp(RING, RESPONSE_BYTES), s.MbarrierAllocOp(RING, 1),
                   s.MbarrierAllocOp(RING, self.roles)]
            for op in ops:
                sched.block.insert_op_before(op, role)
            self.ring = tuple(op.result for op in ops)
        issuer = s.RoleKind(role.kind.data) is s.RoleKind.PRODUCER
        loop = r.add(ClcTileLoopOp(M, N, *self.ring, inits, cfg.bm, cfg.bn, cfg.group_m, issuer))
        m0, n0, *carried = loop.block.args
        return loop, [m0, n0], carried


__all__ = ["ClcParts"]
