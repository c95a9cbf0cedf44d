"""The schedule level of pk (dialect ``pks``): what a fast kernel is made of on a modern GPU.

Why a dialect of its own (and not more ops at the kernel level): kernel-level pk says *what*
moves and is computed per tile, with sequential meaning per worker; the schedule level says
*how* one CTA does it - warp roles with register budgets, a ring of shared-memory stages
guarded by mbarriers with explicit phases, TMA copies through typed tensor maps, an
asynchronous MMA with commit and wait, a persistent tile loop. Its ops are concurrent
(roles run at once and synchronize only through mbarriers), so they need their own
verifiers and interpreter semantics; mixing them with kernel-level ops in one dialect would
blur which rules hold where. A schedule-level kernel is a ``pk.kernel`` whose body holds
``pks`` ops (written by a scheduling pass, e.g. ``schedule-matmul``), so that the graph
around it and the buffers it gets stay the kernel level's.

The ops are fine-grained on purpose (as Gluon writes Triton kernels): a pass can add a
stage, move a wait, change a role's register budget or the epilogue's piece width, and the
lowering (``pkc.codegen.lower_schedule``) maps each op to a few PTX instructions per target.
Scalars are ``i32`` values computed with ``arith``; loops are ``scf.for`` over ``i32``.

Types: ``!pks.tmap<bf16, 64x128, swizzle 128>`` (a TMA tensor map: element, box innermost
first, swizzle bytes), ``!pks.smem<4 x 16384>`` (shared-memory slots: count x bytes, 1024-B
aligned), ``!pks.mbarriers<4, 1>`` (count x expected arrivals per phase),
``!pks.acc<128x256>`` (a warpgroup's f32 accumulator: rows x columns).
"""

# The types and ops live in modules by group and are re-exported here, where the dialect is
# assembled: types, enums and limits in schedule_types; the CTA program (schedule, roles,
# tile loop, allocations) in schedule_structure; mbarriers and barriers in schedule_sync;
# TMA copies and bulk groups in schedule_tma; accumulators, MMAs and their stores in
# schedule_mma.

from __future__ import annotations

from xdsl.ir import Dialect

from pkc.dialects.schedule_mma import (
    TMEM_COLUMNS,
    AccAllocOp,
    AccScaleOp,
    AccSelectOp,
    AccStoreGlobalOp,
    AccStoreSmemOp,
    MmaAsyncOp,
    MmaCommitArriveOp,
    MmaCommitOp,
    MmaWaitOp,
    ScalePrefetchOp,
)
from pkc.dialects.schedule_structure import (
    ClusterRankOp,
    MbarrierAllocOp,
    RoleOp,
    ScheduleOp,
    SmemAllocOp,
    TileLoopOp,
    TmapOp,
    WarpgroupIndexOp,
    YieldOp,
)
from pkc.dialects.schedule_sync import (
    ClusterSyncOp,
    FenceAsyncSharedOp,
    MbarrierArriveOp,
    MbarrierWaitOp,
    WarpgroupBarrierOp,
)
from pkc.dialects.schedule_tma import (
    BulkCommitOp,
    BulkWaitOp,
    TmaLoadOp,
    TmaPrefetchOp,
    TmaStoreOp,
)
from pkc.dialects.schedule_types import (
    ELEMENT_BYTES,
    FP8_ELEMENTS,
    MAX_SMEM,
    SWIZZLES,
    AccType,
    BMajor,
    MbarriersType,
    RoleKind,
    ScalesType,
    SmemType,
    TmapType,
    _fail,
)

SCHEDULE_OPS = [
    YieldOp, ScheduleOp, RoleOp, WarpgroupIndexOp, ClusterRankOp, TileLoopOp, TmapOp, SmemAllocOp,
    MbarrierAllocOp, MbarrierWaitOp, MbarrierArriveOp, WarpgroupBarrierOp, FenceAsyncSharedOp,
    ClusterSyncOp, TmaLoadOp, TmaPrefetchOp, TmaStoreOp, BulkCommitOp, BulkWaitOp, AccAllocOp, MmaAsyncOp,
    MmaCommitOp, MmaWaitOp, AccStoreSmemOp, AccStoreGlobalOp, AccSelectOp, MmaCommitArriveOp,
    AccScaleOp, ScalePrefetchOp,
]
SCHEDULE_TYPES = [TmapType, SmemType, MbarriersType, AccType, ScalesType]

# the communication ops of the same dialect (peer pointers, epochs, signals, LL packets,
# vector copies); that module imports nothing from this one
from pkc.dialects.schedule_comm import COMM_OPS, COMM_TYPES  # noqa: E402
# (and the slot sum that large worlds use instead of W loads and a pks.vec_sum)
from pkc.dialects.schedule_comm_sum import SUM_OPS  # noqa: E402
# and the fused GEMM + collective ops (peer tensor maps, the chunked tile loop, store-or-add)
from pkc.dialects.schedule_fused import FUSED_OPS  # noqa: E402
from pkc.dialects.schedule_ag import AG_OPS  # noqa: E402

# and the MoE kernel's (the grouped tile loop over run-time row counts, count words)
from pkc.dialects.schedule_moe import MOE_OPS  # noqa: E402

# and the tile loop under cluster launch control (sm_100a)
from pkc.dialects.schedule_clc import CLC_OPS  # noqa: E402
# (and its chunked form for the fused kernels, work indices from a ticket counter)
from pkc.dialects.schedule_clc_chunk import CLC_CHUNK_OPS  # noqa: E402

PKS = Dialect("pks", SCHEDULE_OPS + COMM_OPS + SUM_OPS + FUSED_OPS + AG_OPS + MOE_OPS + CLC_OPS
              + CLC_CHUNK_OPS, SCHEDULE_TYPES + COMM_TYPES)

__all__ = ["PKS", "RoleKind", "BMajor", *[c.__name__ for c in SCHEDULE_OPS + SCHEDULE_TYPES]]
# the shared limits and helpers, importable from here as before the split
__all__ += ["ELEMENT_BYTES", "FP8_ELEMENTS", "SWIZZLES", "MAX_SMEM", "TMEM_COLUMNS", "_fail"]
