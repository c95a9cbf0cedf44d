"""The CTA program of the schedule-level dialect ``pks`` (:mod:`pkc.dialects.schedule`):
``pks.schedule`` and its warp roles, the thread's warpgroup index and cluster rank, the
persistent tile loop, and the resources allocated once per CTA (tensor maps, shared-memory
slots, mbarriers).
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import IntAttr, StringAttr, i32
from xdsl.ir import Block, Region, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    attr_def,
    irdl_op_definition,
    operand_def,
    opt_attr_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.traits import IsTerminator, NoTerminator

from pkc.dialects.schedule_types import (
    MAX_SMEM,
    MbarriersType,
    RoleKind,
    SmemType,
    TmapType,
    _fail,
)

# ----------------------------------------------------------------------------------------
# Structure


@irdl_op_definition
class YieldOp(IRDLOperation):
    name = "pks.yield"
    values = var_operand_def()
    traits = traits_def(IsTerminator())

    def __init__(self, values: Sequence[SSAValue] = ()):
        super().__init__(operands=[list(values)])


@irdl_op_definition
class ScheduleOp(IRDLOperation):
    """The CTA program of a ``pk.kernel``: ``threads`` per CTA, CTAs per ``cluster``, a
    persistent grid (one CTA per SM), bounded mbarrier waits (``timeout_ns``; 0: none).
    Every thread runs the body; ``pks.role`` regions split it."""

    name = "pks.schedule"
    threads = attr_def(IntAttr)
    cluster = attr_def(IntAttr)
    timeout_ns = attr_def(IntAttr)
    body = region_def("single_block")
    traits = traits_def(NoTerminator())

    def __init__(self, threads: int, cluster: int = 1, timeout_ns: int = 0):
        super().__init__(regions=[Region(Block())],
                         attributes={"threads": IntAttr(threads), "cluster": IntAttr(cluster),
                                     "timeout_ns": IntAttr(timeout_ns)})

    @property
    def block(self) -> Block:
        return self.body.blocks[0]

    def verify_(self) -> None:
        t, c = self.threads.data, self.cluster.data
        if t % 128 or not 128 <= t <= 1024:
            _fail(self.name, f"threads = {t}: must be whole warpgroups (128) up to 1024")
        if c not in (1, 2, 4):
            _fail(self.name, f"cluster = {c}: must be 1, 2 or 4")
        smem = 0
        for op in self.block.ops:
            if isinstance(op, SmemAllocOp):
                smem += op.result.type.count.data * op.result.type.bytes.data
        if smem > MAX_SMEM - 1024:
            _fail(self.name, f"needs {smem} bytes of shared memory (limit {MAX_SMEM - 1024} with "
                  "the 1 KiB of alignment slack)")
        wgs = t // 128
        for op in self.block.ops:
            if isinstance(op, RoleOp):
                last = op.first.data + op.warpgroups.data
                if last > wgs:
                    _fail(op.name, f"uses warpgroups {op.first.data}..{last - 1} of a "
                          f"{wgs}-warpgroup CTA")


@irdl_op_definition
class RoleOp(IRDLOperation):
    """Warpgroups ``first .. first + warpgroups - 1`` run the body (the others skip it);
    ``regs``: their per-thread register budget (setmaxnreg; 0 keeps the launch's);
    ``single_thread``: only the role's first thread runs it (a TMA producer)."""

    name = "pks.role"
    kind = attr_def(StringAttr)
    first = attr_def(IntAttr)
    warpgroups = attr_def(IntAttr)
    regs = attr_def(IntAttr)
    single_thread = opt_attr_def(IntAttr)
    body = region_def("single_block")

    def __init__(self, kind: RoleKind, first: int, warpgroups: int, regs: int,
                 single_thread: bool = False):
        attrs = {"kind": StringAttr(kind.value), "first": IntAttr(first),
                 "warpgroups": IntAttr(warpgroups), "regs": IntAttr(regs)}
        if single_thread:
            attrs["single_thread"] = IntAttr(1)
        super().__init__(regions=[Region(Block())], attributes=attrs)

    @property
    def block(self) -> Block:
        return self.body.blocks[0]

    @property
    def role(self) -> RoleKind:
        return RoleKind(self.kind.data)

    def verify_(self) -> None:
        try:
            RoleKind(self.kind.data)
        except ValueError:
            _fail(self.name, f"kind {self.kind.data!r} not in {[k.value for k in RoleKind]}")
        r = self.regs.data
        if r and (r % 8 or not 24 <= r <= 256):
            _fail(self.name, f"regs = {r}: a register budget is a multiple of 8 in 24..256")
        if self.warpgroups.data < 1:
            _fail(self.name, "needs at least one warpgroup")


@irdl_op_definition
class WarpgroupIndexOp(IRDLOperation):
    """Which of its role's warpgroups this thread belongs to (0-based)."""

    name = "pks.warpgroup_index"
    result = result_def(i32)

    def __init__(self):
        super().__init__(result_types=[i32])


@irdl_op_definition
class ClusterRankOp(IRDLOperation):
    """This CTA's rank in its cluster (0 without clusters)."""

    name = "pks.cluster_rank"
    result = result_def(i32)

    def __init__(self):
        super().__init__(result_types=[i32])


@irdl_op_definition
class TileLoopOp(IRDLOperation):
    """The persistent tile loop: this CTA (cluster) visits tiles ``id, id + grid, ...`` of
    the ``ceil(M / bm) x ceil(N / bn)`` output tiles in grouped order (``group_m`` row
    blocks share a column sweep, for L2 reuse; with clusters a cluster takes ``cluster``
    vertically adjacent tiles, or with ``cluster_n`` = c a block of ``cluster / c`` row
    blocks by c column blocks: cluster rank r takes row ``r % (cluster / c)`` and column
    ``r / (cluster / c)`` of it, so CTAs whose ranks differ by ``cluster / c`` share their
    rows of A). The body gets the tile's first row and column and the loop-carried values."""

    name = "pks.tile_loop"
    m = operand_def(i32)
    n = operand_def(i32)
    inits = var_operand_def()
    bm = attr_def(IntAttr)
    bn = attr_def(IntAttr)
    group_m = attr_def(IntAttr)
    cluster_n = opt_attr_def(IntAttr)
    res = var_result_def()
    body = region_def("single_block")

    def __init__(self, m: SSAValue, n: SSAValue, inits: Sequence[SSAValue], bm: int, bn: int,
                 group_m: int, cluster_n: int = 1):
        block = Block(arg_types=[i32, i32, *[v.type for v in inits]])
        attrs = {"bm": IntAttr(bm), "bn": IntAttr(bn), "group_m": IntAttr(group_m)}
        if cluster_n > 1:
            attrs["cluster_n"] = IntAttr(cluster_n)
        super().__init__(operands=[m, n, list(inits)], result_types=[[v.type for v in inits]],
                         regions=[Region(block)], attributes=attrs)

    @property
    def block(self) -> Block:
        return self.body.blocks[0]

    def verify_(self) -> None:
        check_tile_loop(self)


def check_tile_loop(op) -> None:
    """A persistent tile loop's checks (pks.tile_loop and its chunked form): the tile
    and raster group, and a body ending in a pks.yield of the carried values."""
    if op.bm.data % 64 or op.bn.data % 8 or op.group_m.data < 1:
        _fail(op.name, f"tile {op.bm.data}x{op.bn.data} group_m {op.group_m.data}: "
              "bm a multiple of 64, bn of 8, group_m >= 1")
    term = op.block.last_op
    if not isinstance(term, YieldOp) or len(term.values) != len(op.inits):
        _fail(op.name, "body must end in a pks.yield of its carried values")
    cn = getattr(op, "cluster_n", None)
    if cn is not None:
        sched = op.parent_op()
        while sched is not None and not isinstance(sched, ScheduleOp):
            sched = sched.parent_op()
        cl = sched.cluster.data if sched is not None else 1
        if cn.data < 1 or cl % cn.data:
            _fail(op.name, f"cluster_n = {cn.data} does not divide the cluster of {cl} CTAs")


def cluster_shape(op) -> tuple[int, int]:
    """(row blocks, column blocks) of a tile loop's cluster (``cluster_n``'s doc)."""
    sched = op.parent_op()
    while sched is not None and not isinstance(sched, ScheduleOp):
        sched = sched.parent_op()
    cl = sched.cluster.data if sched is not None else 1
    cn = op.cluster_n.data if getattr(op, "cluster_n", None) is not None else 1
    return cl // cn, cn


# ----------------------------------------------------------------------------------------
# Resources


@irdl_op_definition
class TmapOp(IRDLOperation):
    """A TMA tensor map of kernel buffer ``buffer`` (a ``pk.kernel`` block argument); the
    runtime encodes it on the host and passes it by value."""

    name = "pks.tmap"
    buffer = operand_def()
    result = result_def(TmapType)

    def __init__(self, buffer: SSAValue, t: TmapType):
        super().__init__(operands=[buffer], result_types=[t])


@irdl_op_definition
class SmemAllocOp(IRDLOperation):
    """Shared-memory slots (1024-byte aligned, the 128-byte swizzle's atom)."""

    name = "pks.smem_alloc"
    result = result_def(SmemType)

    def __init__(self, count: int, nbytes: int):
        super().__init__(result_types=[SmemType(count, nbytes)])


@irdl_op_definition
class MbarrierAllocOp(IRDLOperation):
    """mbarriers, initialized once per CTA before any role starts."""

    name = "pks.mbarrier_alloc"
    result = result_def(MbarriersType)

    def __init__(self, count: int, arrivals: int):
        super().__init__(result_types=[MbarriersType(count, arrivals)])
