"""Lowers a scheduled ``pk.kernel`` (its body a ``pks.schedule``) to a ``ptx.entry``.

Each schedule-level op becomes a few ptx-dialect instructions; the op-to-instruction
choices that depend on the target (the MMA) live in :mod:`pkc.codegen.lower_schedule_mma`.
Nothing here decides anything: tiles, stages, roles and budgets are the schedule's.

* Shared memory: the ``pks.smem_alloc`` slots in order from the dynamic arena's base,
  rounded up to 1024 bytes at run time (the 128-byte swizzle atom), then every mbarrier
  (8 bytes each). The launch asks for their sum + 1024 bytes of slack.
* Roles: ``pks.role`` becomes ``if (warpgroup in range)``; its register budget a
  ``setmaxnreg`` (dec below the launch's allocation, inc above); ``single_thread`` a second
  ``if`` on the role's first thread.
* mbarriers: initialized by thread 0 (count = the type's arrivals), made visible to the
  async proxy and the cluster, then a CTA (or cluster) barrier before any role starts.
  Waits spin on ``try_wait.parity`` and trap past the kernel's deadline (``timeout_ns``).
* ``pks.tile_loop``: tile = ctaid (clusterid), += grid; grouped rasterization as in the
  docstring of :class:`pkc.dialects.schedule.TileLoopOp`.
* ``arith`` on i32 / i1 and ``scf.for`` / ``scf.yield`` over i32 become the matching
  integer instructions and a ``ptx.for``.

ABI (:class:`pkc.codegen.abi.ScheduledKernelMeta`): one by-value CUtensorMap per
``pks.tmap`` in order, then one u64 pointer per kernel buffer (inputs, then outputs).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xdsl.dialects import arith, scf
from xdsl.ir import Block, Operation, SSAValue

from pkc.codegen import ptx, ptx_sm90
from pkc.codegen.abi import ScheduledKernelMeta, TmapArg, _ident
from pkc.codegen.builder import Builder
from pkc.codegen.errors import CodegenError
from pkc.codegen.lower_schedule_mma import (lower_acc_scale, lower_acc_store_global,
                                             lower_acc_store_smem, lower_mma, thread_geometry)
from pkc.codegen.lower_scale_loads import lower_scale_prefetch
from pkc.dialects import schedule as s
from pkc.dialects.schedule_clc import ClcTileLoopOp
from pkc.dialects.schedule_structure import cluster_shape
from pkc.dialects.kernel import KernelOp

SMEM_ALIGN = 1024
MAX_REGS = 65536            # registers per SM (sm_90 / sm_100)


@dataclass
class Lowering:
    """State of one kernel's lowering: the values each schedule value became."""

    b: Builder
    sched: s.ScheduleOp
    vals: dict[SSAValue, SSAValue] = field(default_factory=dict)
    smem_offset: dict[SSAValue, int] = field(default_factory=dict)
    bar_offset: dict[SSAValue, int] = field(default_factory=dict)
    tmaps: dict[SSAValue, SSAValue] = field(default_factory=dict)
    buffers: dict[SSAValue, SSAValue] = field(default_factory=dict)
    sbase: SSAValue | None = None
    deadline: SSAValue | None = None
    tid: SSAValue | None = None
    role: s.RoleOp | None = None
    # computed once in the entry block (dominating every use): the slot arrays' and
    # mbarrier arrays' base addresses, and the thread's position
    smem_base: dict[SSAValue, SSAValue] = field(default_factory=dict)
    bar_base: dict[SSAValue, SSAValue] = field(default_factory=dict)
    geo: dict[str, SSAValue] = field(default_factory=dict)
    roles_seen: int = 0         # warpgroups taken by the roles lowered so far (in order)
    hoisted: set = field(default_factory=set)   # ops _setup lowered ahead of their place
    target: str = "sm_90a"

    def v(self, x: SSAValue) -> SSAValue:
        try:
            return self.vals[x]
        except KeyError:
            raise CodegenError(f"lower-schedule: value {x} has no lowering (defined outside "
                               "the pks.schedule?)") from None

    def slot_addr(self, smem: SSAValue, slot: SSAValue, extra: SSAValue | int = 0) -> SSAValue:
        """Shared address of ``slot`` of ``smem`` (+ ``extra`` bytes)."""
        b = self.b
        t = smem.type
        base = self.smem_base[smem]
        addr = b.r(ptx.FmaOp(self.v(slot), b.u32(t.bytes.data), base, "u32", "mad.lo"))
        if isinstance(extra, int):
            return b.add32(addr, extra) if extra else addr
        return b.add32(addr, extra)

    def bar_addr(self, bars: SSAValue, index: SSAValue) -> SSAValue:
        b = self.b
        return b.r(ptx.FmaOp(self.v(index), b.u32(8), self.bar_base[bars], "u32", "mad.lo"))

    def warpgroup(self) -> SSAValue:
        return self.geo["warpgroup"]

    def lane_in_wg(self) -> SSAValue:
        return self.geo["lane_in_wg"]

    def lead(self) -> SSAValue:
        """True on the first thread of each warpgroup."""
        return self.geo["lead"]


# Lowerings that other modules register (pkc.codegen.lower_schedule_comm, imported at the
# end): {op class: fn(L, op)} for their schedule-level ops, and (matches(kop), lower(kop,
# target, entry_name)) for kernels with an entry of their own (a collective's parameters)
EXTRA_LOWERINGS: dict = {}
KERNEL_LOWERINGS: list = []
# Top-level ops of a pks.schedule whose contract puts them ahead of the CTA's first barrier
# (pks.epoch: every thread reads the epoch before the setup barrier, which the publishing
# CTA passes before it stores the next one). _setup lowers them before the mbarrier init,
# so the load overlaps the init and no barrier of its own waits for it.
BEFORE_SETUP_BARRIER: set = set()


# Per-target lowerings (pkc.codegen.lower_schedule_tcgen05 registers "sm_100a"): an object
# with ``ops`` ({op class: fn(L, op)}, consulted before the common table), ``check(sched)``
# (refuses a schedule the target cannot run), ``setup(L, smem_bytes) -> smem_bytes`` (after
# the mbarriers are initialized) and ``finish(L)`` (after the roles)
TARGET_LOWERINGS: dict = {}


# Top-level ops that make a by-value tensor map parameter: {op class: fn(op, kernel block
# arguments) -> TmapArg} (pkc.codegen.lower_schedule_fused adds the peers' maps)
TMAP_ARGS: dict = {
    s.TmapOp: lambda t, args: TmapArg(args.index(t.buffer), t.result.type.element.data,
                                      t.result.type.box_dims, t.result.type.swizzle.data),
}


def lower_scheduled_kernel(kop: KernelOp, target: str, entry_name: str
                           ) -> tuple[ptx.EntryOp, ScheduledKernelMeta]:
    """The ``ptx.entry`` and launch metadata of a scheduled ``pk.kernel``."""
    for matches, lower in KERNEL_LOWERINGS:
        if matches(kop):
            return lower(kop, target, entry_name)
    return lower_tma_kernel(kop, target, entry_name)


def lower_tma_kernel(kop: KernelOp, target: str, entry_name: str, extend=None
                     ) -> tuple[ptx.EntryOp, ScheduledKernelMeta]:
    """A kernel of tensor maps, buffers and a ``pks.schedule`` (the GEMM's shape of entry).
    ``extend`` (a fused kernel's): ``extend.meta(meta)`` adds to the metadata before the
    entry is made, ``extend.bind(L, params)`` takes the parameters after the buffers."""
    hooks = TARGET_LOWERINGS.get(target)
    if target != "sm_90a" and hooks is None:
        raise CodegenError(f"kernel @{kop.kernel_name.data}: the schedule level lowers to sm_90a "
                           f"and sm_100a (asked for {target})")
    sched = kop.schedule()
    assert sched is not None
    if hooks is not None:
        hooks.check(kop, sched)
    else:
        _check_sm90(kop, sched)
    args = list(kop.block.args)
    tmap_ops = [op for op in kop.block.ops if type(op) in TMAP_ARGS]
    meta = ScheduledKernelMeta(
        name=entry_name, target=target, threads=sched.threads.data, cluster=sched.cluster.data,
        smem_bytes=0, buffers=[_ident(f"buf{i}") for i in range(len(args))],
        tmaps=[TMAP_ARGS[type(t)](t, args) for t in tmap_ops], tiles=_tiles(sched),
        clc=any(isinstance(o, ClcTileLoopOp) for o in sched.walk()))
    if extend is not None:
        extend.meta(meta)
    entry = ptx.EntryOp(entry_name, meta.params(), sched.threads.data, 0,
                        cluster=sched.cluster.data if sched.cluster.data > 1 else None,
                        minnctapersm=1, smem_align=SMEM_ALIGN)
    params = list(entry.block.args)
    L = Lowering(Builder(entry.block), sched, target=target)
    for t, reg in zip(tmap_ops, params[:len(tmap_ops)]):
        L.tmaps[t.result] = reg
        L.vals[t.result] = reg
    for a, reg in zip(args, params[len(tmap_ops):]):
        L.buffers[a] = reg
        L.vals[a] = reg
    if extend is not None:
        extend.bind(L, params[len(tmap_ops) + len(args):])
    meta.smem_bytes = _setup(L)
    if hooks is not None:
        meta.smem_bytes = hooks.setup(L, meta.smem_bytes)
    entry.attributes["smem_bytes"] = entry.smem_bytes.__class__(meta.smem_bytes)
    _block(L, sched.block)
    if hooks is not None:
        hooks.finish(L)
    if sched.cluster.data > 1:
        # peers may still arrive on our barriers / multicast into our smem: leave together
        L.b.add(ptx_sm90.ClusterBarrierOp())
    entry.block.add_op(ptx.YieldOp())
    return entry, meta


def _check_sm90(kop: KernelOp, sched: s.ScheduleOp) -> None:
    """wgmma accumulates in each warpgroup's registers: no CTA accumulator."""
    for op in sched.block.ops:
        if isinstance(op, s.AccAllocOp):
            raise CodegenError(f"kernel @{kop.kernel_name.data}: a CTA accumulator (pks.acc_alloc "
                               "at the top of the schedule: tensor memory) needs sm_100a; sm_90a's "
                               "wgmma accumulates in a role's registers (schedule-matmul with an "
                               "sm_90a target builds that form)")


def _tiles(sched: s.ScheduleOp) -> int:
    """Tiles (CTAs worth of work) of the schedule's first tile loop: the grid's bound."""
    for op in sched.walk():
        if isinstance(op, (s.TileLoopOp, ClcTileLoopOp)):
            m, n = (_const(v) for v in (op.m, op.n))
            if m is not None and n is not None:
                num_m, num_n = -(-m // op.bm.data), -(-n // op.bn.data)
                cm, cn = cluster_shape(op)
                if isinstance(op, ClcTileLoopOp) or cn > 1:   # one cluster per cluster tile
                    return -(-num_m // cm) * -(-num_n // cn) * cm * cn
                return num_m * num_n
    return 1 << 30


def select_b64(L: Lowering, values: list[SSAValue], index: SSAValue, what: str) -> SSAValue:
    """``values[index]`` for a rank / map index: the value itself when ``index`` is a
    constant (an error naming ``what`` when out of range), else a chain of ``selp``."""
    k = _const(index)
    if k is not None:
        if not 0 <= k < len(values):
            raise CodegenError(f"{what}: index {k} of {len(values)}")
        return values[k]
    b, i = L.b, L.v(index)
    sel = values[0]
    for j in range(1, len(values)):
        sel = b.selp("b64", values[j], sel, b.setp("eq", "u32", i, j))
    return sel


def _const(v: SSAValue) -> int | None:
    op = v.owner
    if isinstance(op, arith.ConstantOp):
        return op.value.value.data
    return None


def _setup(L: Lowering) -> int:
    """Arena layout, deadline, mbarrier init; returns the dynamic shared memory to ask for."""
    b, sched = L.b, L.sched
    off = 0
    for op in sched.block.ops:
        if isinstance(op, s.SmemAllocOp):
            L.smem_offset[op.result] = off
            off += op.result.type.count.data * op.result.type.bytes.data
    bars = [op for op in sched.block.ops if isinstance(op, s.MbarrierAllocOp)]
    for op in bars:
        L.bar_offset[op.result] = off
        off += 8 * op.result.type.count.data
    L.tid = b.sreg("%tid.x")
    base = b.r(ptx.SmemBaseOp())
    base = b.add32(base, SMEM_ALIGN - 1)
    L.sbase = b.bin("and", "b32", base, b.imm(-SMEM_ALIGN & 0xFFFFFFFF, "b32"))
    for v, o in L.smem_offset.items():
        L.smem_base[v] = b.add32(L.sbase, o)
    for v, o in L.bar_offset.items():
        L.bar_base[v] = b.add32(L.sbase, o)
    # broadcast from lane 0: ptxas then knows the warpgroup index (and all that derives
    # from it: a role's branch, a ping-pong consumer's tiles and ring position, a
    # warpgroup's rows of A) is the same across the warp and keeps it in uniform registers
    # (tid >> 7 alone put the k-loop's descriptor arithmetic in per-thread registers, moved
    # to uniform ones before every wgmma)
    L.geo["warpgroup"] = b.r(ptx.ShflIdxOp(b.bin("shr", "u32", L.tid, 7), b.u32(0)))
    _thread_values(L, sched)
    if sched.timeout_ns.data:
        now = b.sreg("%globaltimer")
        L.deadline = b.bin("add", "u64", now, sched.timeout_ns.data)
    for op in sched.block.ops:
        if type(op) in BEFORE_SETUP_BARRIER:
            _op(L, op)
            L.hoisted.add(op)
    with b.if_(b.setp("eq", "u32", L.tid, 0)):
        for op in bars:
            t = op.result.type
            for i in range(t.count.data):
                addr = b.add32(L.sbase, L.bar_offset[op.result] + 8 * i)
                b.add(ptx.MbarrierOp("init", addr, b.u32(t.arrivals.data)))
        b.fence("mbarrier_init.release.cluster")
        b.fence("proxy.async.shared::cta")
    if sched.cluster.data > 1:
        b.add(ptx_sm90.ClusterBarrierOp())
    else:
        b.bar()
    return off + SMEM_ALIGN


def _block(L: Lowering, block: Block) -> None:
    ops = list(block.ops)
    i = 0
    while i < len(ops):
        if isinstance(ops[i], s.RoleOp):
            j = i
            while j < len(ops) and isinstance(ops[j], s.RoleOp):
                j += 1
            _roles(L, ops[i:j])
            i = j
        else:
            if ops[i] not in L.hoisted:
                _op(L, ops[i])
            i += 1


def _roles(L: Lowering, roles: list[s.RoleOp]) -> None:
    """Consecutive roles as ``if role0 {..} else if role1 {..}``: each warpgroup runs one,
    and the CFG says so (a producer that gave registers away never flows into consumer
    code, which ptxas would otherwise have to keep registers for)."""
    b = L.b
    op, rest = roles[0], roles[1:]
    first, count = op.first.data, op.warpgroups.data
    if not rest and first + count == L.sched.threads.data // 128 and L.roles_seen == first:
        # the last role takes every warpgroup the others left: no test
        _role_body(L, op)
        return
    L.roles_seen = first + count
    wg = L.warpgroup()
    inside = b.setp("eq", "u32", wg, first) if count == 1 else b.pand(
        b.setp("ge", "u32", wg, first), b.setp("lt", "u32", wg, first + count))
    then, other = b.if_else(inside)
    with b.at(then):
        _role_body(L, op)
        b.add(ptx.YieldOp())
    with b.at(other):
        if rest:
            _roles(L, rest)
        b.add(ptx.YieldOp())


def _op(L: Lowering, op: Operation) -> None:
    hooks = TARGET_LOWERINGS.get(L.target)
    fn = hooks.ops.get(type(op)) if hooks is not None else None
    fn = fn or _LOWERINGS.get(type(op)) or EXTRA_LOWERINGS.get(type(op))
    if fn is None:
        raise CodegenError(f"lower-schedule: no {L.target} lowering for '{op.name}'")
    fn(L, op)


# ---- structure -------------------------------------------------------------------------


def _role_body(L: Lowering, op: s.RoleOp) -> None:
    b, sched = L.b, L.sched
    first = op.first.data
    regs = op.regs.data
    if regs:
        launch = min(255, (MAX_REGS // sched.threads.data) // 8 * 8)
        action = "dec" if regs < launch else "inc"
        b.add(ptx_sm90.SetmaxnregOp(action, regs))
    L.role = op
    outer = (dict(L.geo), dict(L.smem_base), dict(L.bar_base))
    # the role's own copies of the addresses and the thread's position, computed after
    # setmaxnreg: nothing of the entry block stays live into the role but the warpgroup
    for v, o in L.smem_offset.items():
        L.smem_base[v] = b.add32(L.sbase, o)
    for v, o in L.bar_offset.items():
        L.bar_base[v] = b.add32(L.sbase, o)
    _thread_values(L, op)
    if op.single_thread is not None:
        cond = b.setp("eq", "u32", L.tid, 128 * first)
        guard = getattr(TARGET_LOWERINGS.get(L.target), "single_thread_guard", None)
        if guard is not None:       # sm_100a: a CTA pair's issuer is on the even CTA
            cond = guard(L, op, cond)
        with b.if_(cond):
            _block(L, op.block)
    else:
        _block(L, op.block)
    L.geo, L.smem_base, L.bar_base = outer
    L.role = None


def _thread_values(L: Lowering, scope: Operation) -> None:
    """The thread's lane in its warpgroup, the warpgroup leader predicate and the epilogue
    geometry that ``scope``'s ops use, in the current block."""
    b = L.b
    L.geo["lane_in_wg"] = b.bin("and", "b32", L.tid, 127)
    L.geo["lead"] = b.setp("eq", "u32", L.geo["lane_in_wg"], 0)
    if L.target != "sm_90a":
        return              # wgmma's fragment geometry; tensor memory has its own
    widths = {o.width.data for o in scope.walk() if isinstance(o, s.AccStoreSmemOp)}
    epi = (s.AccStoreGlobalOp, s.AccScaleOp, s.ScalePrefetchOp)
    if widths or any(isinstance(o, epi) for o in scope.walk()):
        thread_geometry(L, widths)


def _warpgroup_index(L: Lowering, op: s.WarpgroupIndexOp) -> None:
    first = L.role.first.data if L.role is not None else 0
    L.vals[op.result] = L.b.bin("sub", "u32", L.warpgroup(), first)


def _cluster_rank(L: Lowering, op: s.ClusterRankOp) -> None:
    L.vals[op.result] = (L.b.sreg("%cluster_ctarank") if L.sched.cluster.data > 1
                         else L.b.u32(0))


def _tile_loop(L: Lowering, op: s.TileLoopOp) -> None:
    lower_tile_loop(L, op)


def lower_tile_loop(L: Lowering, op, chunks: int = 1) -> None:
    """A ``pks.tile_loop``, or (``chunks`` > 1) a loop over ``chunks`` copies of the tile
    space whose slot s is chunk ``(first + s) mod chunks`` (``pks.chunk_tile_loop``: the
    chunk is the body's third argument)."""
    b = L.b
    bm, bn, gm = op.bm.data, op.bn.data, op.group_m.data
    cl = L.sched.cluster.data
    cm, cn = cluster_shape(op)          # cm x cn tiles per cluster (cluster_n's doc)
    M, N = L.v(op.m), L.v(op.n)
    num_m = b.bin("div", "u32", b.add32(M, bm - 1), bm)
    num_n = b.bin("div", "u32", b.add32(N, bn - 1), bn)
    num_mc = b.bin("div", "u32", b.add32(num_m, cm - 1), cm) if cm > 1 else num_m
    if cn > 1:      # the sweep is over column blocks of clusters
        num_n = b.bin("div", "u32", b.add32(num_n, cn - 1), cn)
    num_tiles = b.mul32(num_mc, num_n)
    group_sz = b.mul32(num_n, gm)
    main = getattr(L, "tile_ctas", None)    # a pks.cta_partition's main CTAs (else all)
    if cl > 1:
        # the side CTAs are the grid's last whole clusters: the main ones come first
        tile0 = b.sreg("%clusterid.x")
        stride = (b.bin("div", "u32", main, cl) if main is not None
                  else b.sreg("%nclusterid.x"))
        rank = b.sreg("%cluster_ctarank")
    else:
        # inside a pks.cta_partition's main region: the CTAs its side role leaves
        tile0, rank = b.sreg("%ctaid.x"), None
        stride = main if main is not None else b.sreg("%nctaid.x")
    total = b.mul32(num_tiles, chunks) if chunks > 1 else num_tiles
    loop, body = b.for_carried(tile0, total, stride, [L.v(x) for x in op.inits], "u32")
    tile, *carried = body.args
    with b.at(body):
        if chunks > 1:
            slot = b.bin("div", "u32", tile, num_tiles)
            tile = b.bin("sub", "u32", tile, b.mul32(slot, num_tiles))
            chunk = b.add32(L.v(op.first), slot)
            wrap = b.setp("ge", "u32", chunk, chunks)
            chunk = b.selp("b32", b.bin("sub", "u32", chunk, chunks), chunk, wrap)
        g = b.bin("div", "u32", tile, group_sz)
        first = b.mul32(g, gm)
        gsz = b.bin("min", "u32", b.bin("sub", "u32", num_mc, first), gm)
        r = b.bin("sub", "u32", tile, b.mul32(g, group_sz))
        mloc = b.bin("rem", "u32", r, gsz)
        nb = b.bin("div", "u32", r, gsz)
        mb = b.add32(first, mloc)
        if rank is not None and cn > 1:
            mb = b.r(ptx.FmaOp(mb, b.u32(cm), b.bin("rem", "u32", rank, cm), "u32", "mad.lo"))
            nb = b.r(ptx.FmaOp(nb, b.u32(cn), b.bin("div", "u32", rank, cm), "u32", "mad.lo"))
        elif rank is not None:
            mb = b.r(ptx.FmaOp(mb, b.u32(cl), rank, "u32", "mad.lo"))
        m0, n0, *args = op.block.args
        L.vals[m0] = b.mul32(mb, bm)
        L.vals[n0] = b.mul32(nb, bn)
        if hasattr(op, "chunks"):       # pks.chunk_tile_loop: the chunk (0 of 1 chunk)
            L.vals[args[0]] = chunk if chunks > 1 else b.u32(0)
            args = args[1:]
        for a, c in zip(args, carried):
            L.vals[a] = c
        _block(L, op.block)
    for res, val in zip(op.res, loop.res):
        L.vals[res] = val


def _yield(L: Lowering, op: s.YieldOp | scf.YieldOp) -> None:
    if isinstance(op.parent_op(), s.RoleOp):
        return
    L.b.add(ptx.YieldOp([L.v(x) for x in op.operands]))


def _scf_for(L: Lowering, op: scf.ForOp) -> None:
    b = L.b
    lb, ub = _const(op.lb), _const(op.ub)
    once = lb is not None and ub is not None and lb < ub
    loop, body = b.for_carried(L.v(op.lb), L.v(op.ub), L.v(op.step),
                               [L.v(x) for x in op.iter_args], "s32", at_least_once=once)
    for a, r in zip(op.body.block.args, body.args):
        L.vals[a] = r
    with b.at(body):
        _block(L, op.body.block)
    for res, val in zip(op.results, loop.res):
        L.vals[res] = val


# ---- resources and synchronization -----------------------------------------------------


def _no_code(L: Lowering, op: Operation) -> None:
    """Resources placed by _setup."""


def _mbarrier_wait(L: Lowering, op: s.MbarrierWaitOp) -> None:
    addr = L.bar_addr(op.bars, op.index)
    L.b.add(ptx_sm90.MbarrierWaitParityOp(addr, L.v(op.parity), L.deadline))


def _mbarrier_arrive(L: Lowering, op: s.MbarrierArriveOp) -> None:
    b = L.b
    addr = L.bar_addr(op.bars, op.index)
    pred = L.v(op.pred) if op.pred is not None else None
    if L.role is None or L.role.single_thread is None:
        pred = L.lead() if pred is None else b.pand(pred, L.lead())
    if op.tx_bytes is not None:
        b.add(ptx_sm90.MbarrierArriveOp(addr, b.u32(op.tx_bytes.data), guard=pred))
    elif op.all_ctas is not None and L.sched.cluster.data > 1:
        for r in range(L.sched.cluster.data):
            remote = b.r(ptx_sm90.MapaOp(addr, b.u32(r)))
            b.add(ptx_sm90.MbarrierArriveOp(remote, guard=pred, remote=True))
    else:
        b.add(ptx_sm90.MbarrierArriveOp(addr, guard=pred))


def _warpgroup_barrier(L: Lowering, op: s.WarpgroupBarrierOp) -> None:
    # named barrier 1 + warpgroup (0 is bar.sync 0 of the whole CTA)
    L.b.add(ptx_sm90.NamedBarrierOp(L.b.add32(L.warpgroup(), 1), 128))


def _fence_async(L: Lowering, op: s.FenceAsyncSharedOp) -> None:
    L.b.fence("proxy.async.shared::cta")


def _cluster_sync(L: Lowering, op: s.ClusterSyncOp) -> None:
    L.b.add(ptx_sm90.ClusterBarrierOp() if L.sched.cluster.data > 1 else ptx.BarSyncOp(0))


def _tma_load(L: Lowering, op: s.TmaLoadOp) -> None:
    b = L.b
    dst = L.slot_addr(op.dst, op.slot, L.v(op.offset))
    bar = L.bar_addr(op.bars, op.bar)
    mask = None
    if op.multicast is not None and op.multicast.data > 1:
        mask = b.imm((1 << op.multicast.data) - 1, "b16")
    b.add(ptx_sm90.TmaLoadOp(dst, L.v(op.tmap), [L.v(c) for c in op.coords], bar, mask))


def _tma_prefetch(L: Lowering, op: s.TmaPrefetchOp) -> None:
    L.b.add(ptx_sm90.PrefetchTensormapOp(L.v(op.tmap)))


def _tma_store(L: Lowering, op: s.TmaStoreOp) -> None:
    src = L.slot_addr(op.src, op.slot)
    reduce = op.reduce.data if op.reduce is not None else None
    L.b.add(ptx_sm90.TmaStoreOp(L.v(op.tmap), [L.v(c) for c in op.coords], src, L.lead(), reduce))


def _bulk_commit(L: Lowering, op: s.BulkCommitOp) -> None:
    L.b.add(ptx.BulkGroupOp(guard=L.lead()))


def _bulk_wait(L: Lowering, op: s.BulkWaitOp) -> None:
    L.b.add(ptx.BulkGroupOp(op.pending.data, read=op.read is not None, guard=L.lead()))


def _acc_alloc(L: Lowering, op: s.AccAllocOp) -> None:
    t = op.result.type
    frag = L.b.r(ptx_sm90.FragAllocOp(t.rows.data // 64 * t.cols.data // 2))
    L.vals[op.result] = frag


def _mma_commit(L: Lowering, op: s.MmaCommitOp) -> None:
    L.b.add(ptx_sm90.WgmmaSyncOp("commit"))


def _mma_wait(L: Lowering, op: s.MmaWaitOp) -> None:
    L.b.add(ptx_sm90.WgmmaSyncOp("wait", op.pending.data))


# ---- arith on i32 / i1 -------------------------------------------------------------------

_BIN = {arith.AddiOp: ("add", "u32"), arith.SubiOp: ("sub", "u32"), arith.MuliOp: ("mul.lo", "u32"),
        arith.DivUIOp: ("div", "u32"), arith.RemUIOp: ("rem", "u32"), arith.MinUIOp: ("min", "u32"),
        arith.XOrIOp: ("xor", "b32"), arith.AndIOp: ("and", "b32"), arith.OrIOp: ("or", "b32"),
        arith.ShLIOp: ("shl", "b32"), arith.ShRUIOp: ("shr", "u32")}
_CMP = {0: "eq", 1: "ne", 2: "lt", 3: "le", 4: "gt", 5: "ge", 6: "lt", 7: "le", 8: "gt", 9: "ge"}


def _arith_const(L: Lowering, op: arith.ConstantOp) -> None:
    value = op.value.value.data
    width = op.result.type.width.data
    if width == 1:
        L.vals[op.result] = L.b.setp("ne", "u32", L.b.u32(value & 1), 0)
    elif width == 32:
        L.vals[op.result] = L.b.u32(value & 0xFFFFFFFF)
    else:
        raise CodegenError(f"lower-schedule: {op.result.type} constants are not lowered (i32, i1)")


def _arith_bin(L: Lowering, op: Operation) -> None:
    opcode, type_ = _BIN[type(op)]
    L.vals[op.result] = L.b.bin(opcode, type_, L.v(op.lhs), L.v(op.rhs))


def _arith_cmp(L: Lowering, op: arith.CmpiOp) -> None:
    p = op.predicate.value.data
    type_ = "s32" if p in (2, 3, 4, 5) else "u32"
    L.vals[op.result] = L.b.setp(_CMP[p], type_, L.v(op.lhs), L.v(op.rhs))


def _arith_select(L: Lowering, op: arith.SelectOp) -> None:
    L.vals[op.result] = L.b.selp("b32", L.v(op.lhs), L.v(op.rhs), L.v(op.cond))


_LOWERINGS = {
    s.WarpgroupIndexOp: _warpgroup_index, s.ClusterRankOp: _cluster_rank,
    s.TileLoopOp: _tile_loop, s.YieldOp: _yield, scf.YieldOp: _yield, scf.ForOp: _scf_for,
    s.SmemAllocOp: _no_code, s.MbarrierAllocOp: _no_code, s.MbarrierWaitOp: _mbarrier_wait,
    s.MbarrierArriveOp: _mbarrier_arrive, s.WarpgroupBarrierOp: _warpgroup_barrier,
    s.FenceAsyncSharedOp: _fence_async, s.ClusterSyncOp: _cluster_sync, s.TmaLoadOp: _tma_load,
    s.TmaStoreOp: _tma_store, s.TmaPrefetchOp: _tma_prefetch, s.BulkCommitOp: _bulk_commit, s.BulkWaitOp: _bulk_wait,
    s.AccAllocOp: _acc_alloc, s.MmaCommitOp: _mma_commit, s.MmaWaitOp: _mma_wait,
    arith.ConstantOp: _arith_const, arith.CmpiOp: _arith_cmp, arith.SelectOp: _arith_select,
    **{cls: _arith_bin for cls in _BIN},
    s.MmaAsyncOp: lambda L, op: lower_mma(L, op),
    s.AccStoreSmemOp: lambda L, op: lower_acc_store_smem(L, op),
    s.AccStoreGlobalOp: lambda L, op: lower_acc_store_global(L, op),
    s.AccScaleOp: lambda L, op: lower_acc_scale(L, op),
    s.ScalePrefetchOp: lambda L, op: lower_scale_prefetch(L, op),
}

from pkc.codegen import lower_schedule_comm  # noqa: E402,F401  (registers its lowerings)
from pkc.codegen import lower_schedule_fused  # noqa: E402,F401  (registers its lowerings)
from pkc.codegen import lower_schedule_tcgen05  # noqa: E402,F401  (registers sm_100a)
from pkc.codegen import lower_schedule_ag  # noqa: E402,F401  (registers its lowerings)
from pkc.codegen import lower_schedule_moe  # noqa: E402,F401  (registers its lowerings)
