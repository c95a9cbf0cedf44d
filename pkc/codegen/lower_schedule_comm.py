"""Lowers a scheduled collective (a ``pk.kernel`` whose ``pks.schedule`` holds the
communication ops of :mod:`pkc.dialects.schedule_comm`) to a ``ptx.entry`` for sm_90a or
sm_100a (the same instructions; the grid must fit the target's SMs, :func:`_check_grid`).

It registers with the schedule-level lowering (:mod:`pkc.codegen.lower_schedule`): its op
lowerings in ``EXTRA_LOWERINGS`` (so ``arith``, ``pks.cluster_sync`` and the rest are
lowered there, and the comm ops here), and :func:`lower_comm_kernel` in
``KERNEL_LOWERINGS`` for kernels that hold comm ops: their entry has no shared memory, no
mbarriers and no tensor maps, but peer pointers, pads and the error record
(:class:`~pkc.codegen.abi.CommLaunch`). Nothing is decided here: the grid rule, the unroll,
the register cap (``.minnctapersm``) come from the plan ``schedule-collectives`` wrote.

* ``pks.ptr``: a kernel buffer's parameter; a symmetric buffer's own copy (its own
  parameter) or rank ``peer``'s (the peer parameter; a ``selp`` chain over the W for a
  rank computed at run time).
* ``pks.vec_loop``: ``ptx.for`` from ``lo + tid`` to ``hi`` by ``unroll * stride``.
* ``pks.vec_load`` / ``pks.vec_store``: ``ld.global.{nc,cg}.v4.b32`` / ``st.global.v4.b32``
  at ``ptr + 16 * (index + offset)``, guarded by ``index < bound`` (computed at the use: a
  predicate kept live per unrolled vector makes ptxas spill).
* ``pks.vec_sum``: per 32-bit word, the 16-bit halves (or the f32) widened, added in rank
  order with ``add.rn.f32``, rounded once (``cvt.rn.bf16x2.f32``).
* ``pks.epoch`` / ``pks.epoch_publish``: ``ld`` of the control word + 1; thread 0's
  ``atom.add`` on ``ctas_done``, the last CTA stores the epoch and resets the count.
* ``pks.mc_ptr`` / ``mc_ld_reduce`` / ``mc_store`` / ``mc_signal`` (NVLS kernels): the
  buffer's multicast-address parameter, ``multimem.ld_reduce`` / ``multimem.st`` /
  ``multimem.red`` (:mod:`pkc.codegen.ptx_multimem`), addressed and guarded as above.
* ``pks.signal``: ``red.relaxed.sys.global.add.u32 [pad + 4 * slot], 1``;
  ``pks.signal_wait``: ``ptx.epoch_wait``; ``pks.ll_*``: ``st.volatile`` pairs and
  ``ptx.ll_poll``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xdsl.dialects import arith
from xdsl.ir import SSAValue

from pkc.codegen import ptx, ptx_sm90
from pkc.codegen.abi import CommBufferArg, CommLaunch, ScheduledKernelMeta, _ident
from pkc.codegen.builder import Builder
from pkc.codegen.errors import CodegenError
from pkc.codegen.targets import get_codegen_target
from pkc.codegen.lower_schedule import (BEFORE_SETUP_BARRIER, EXTRA_LOWERINGS, KERNEL_LOWERINGS, Lowering,
                                       _block, select_b64)
from pkc.codegen.ptx_comm import EpochWaitOp, LdV4Op, LlPollOp, StV4Op, Unpack16x2Op
from pkc.codegen.ptx_multimem import MultimemLdReduceOp, MultimemRedOp, MultimemStOp
from pkc.dialects import schedule_comm as c
from pkc.dialects.kernel import AllocOp, KernelOp
from pkc.dialects.types import BufferType

# The PTX targets a scheduled collective lowers to. The kernels use no MMA, no tensor
# memory and no cluster: the same instructions on Hopper and Blackwell; what differs is
# checked per target (_check_grid: the SM count of pkc.codegen.targets).
COMM_TARGETS = ("sm_90a", "sm_100a")


@dataclass
class CommState:
    """Registers of one comm kernel's lowering: parameters by meaning, vector values."""

    peers: dict[SSAValue, list[SSAValue]] = field(default_factory=dict)   # symmetric buffer
    own: dict[SSAValue, SSAValue] = field(default_factory=dict)
    params: dict[str, SSAValue] = field(default_factory=dict)
    vecs: dict[SSAValue, list[SSAValue]] = field(default_factory=dict)    # !pks.vec -> 4 b32
    grid: dict[str, SSAValue] = field(default_factory=dict)
    mc: dict[SSAValue, SSAValue] = field(default_factory=dict)            # multicast address
    world: int = 1
    dtype: str = "bf16"


def _comm(L: Lowering) -> CommState:
    return L.comm           # set by lower_comm_kernel


def is_comm_kernel(kop: KernelOp) -> bool:
    sched = kop.schedule()
    return sched is not None and any(type(op) in EXTRA_LOWERINGS for op in sched.walk())


def _plan_int(kop: KernelOp, key: str) -> int:
    plan = kop.attributes.get("pk.plan")
    v = plan.data.get(key) if plan is not None else None
    if v is None:
        raise CodegenError(f"kernel @{kop.kernel_name.data}: a scheduled collective needs "
                           f"pk.plan.{key} (written by schedule-collectives)")
    return v.value.data


def lower_comm_kernel(kop: KernelOp, target: str, entry_name: str
                      ) -> tuple[ptx.EntryOp, ScheduledKernelMeta]:
    """The ``ptx.entry`` and launch metadata of a scheduled collective kernel."""
    if target not in COMM_TARGETS:
        raise CodegenError(f"kernel @{kop.kernel_name.data}: scheduled collectives lower to "
                           f"{', '.join(COMM_TARGETS)} (asked for {target})")
    _check_grid(kop, target)
    sched = kop.schedule()
    W = kop.world_size
    args = list(kop.block.args)
    allocs = [op for op in kop.block.ops if isinstance(op, AllocOp)]
    comm_bufs = [CommBufferArg(f"alloc{i}", _elements(a.result.type), str(a.result.type.element_type),
                               a.result.type.symmetric, a.zero is not None)
                 for i, a in enumerate(allocs)]
    sym_out = [i for i, a in enumerate(args) if a.type.symmetric]
    names = {a.result: f"alloc{i}" for i, a in enumerate(allocs)}
    names.update({args[i]: f"out{i}" for i in sym_out})
    # NVLS kernels: the symmetric buffers a pks.mc_ptr takes get a multicast address
    mc = list(dict.fromkeys(op.buffer for op in sched.walk() if isinstance(op, c.McPtrOp)))
    launch = CommLaunch(world=W, buffers=comm_bufs, sym_outputs=sym_out,
                        multicast=[names[v] for v in mc],
                        chunk_vecs=_plan_int(kop, "chunk_vecs"), cta_vecs=_plan_int(kop, "cta_vecs"),
                        slice_align=_plan_int(kop, "slice_align"),
                        ctas_per_sm=_plan_int(kop, "ctas_per_sm"),
                        shrink_threads=bool(_plan_int(kop, "shrink_threads")),
                        max_ctas=_plan_int(kop, "max_ctas"), vecs=_plan_int(kop, "vecs"))
    meta = ScheduledKernelMeta(name=entry_name, target=target, threads=sched.threads.data,
                               cluster=1, smem_bytes=0,
                               buffers=[_ident(f"buf{i}") for i in range(len(args))], tmaps=[],
                               tiles=1, comm=launch)
    entry = ptx.EntryOp(entry_name, meta.params(), sched.threads.data, 0,
                        minnctapersm=_plan_int(kop, "min_ctas_per_sm"))
    regs = iter(entry.block.args)
    L = Lowering(Builder(entry.block), sched)
    st = CommState(world=W)
    L.comm = st
    for a in args:
        L.buffers[a] = next(regs)
    syms = [a.result for a in allocs if a.result.type.symmetric] + [args[i] for i in sym_out]
    for v in syms:
        st.peers[v] = [next(regs) for _ in range(W)]
    for a in allocs:
        if a.result.type.symmetric:
            st.own[a.result] = next(regs)
    for i in sym_out:
        st.own[args[i]] = L.buffers[args[i]]
    for v in mc:
        st.mc[v] = next(regs)
    for a in allocs:
        if not a.result.type.symmetric:
            L.buffers[a.result] = next(regs)
    for name in ("vecs", "chunk", "slice", "rank", "err", "timeout", "mbox", "trap"):
        st.params[name] = next(regs)
    b = L.b
    L.tid = b.sreg("%tid.x")
    st.grid = {"tid": L.tid, "cta": b.sreg("%ctaid.x"), "ctas": b.sreg("%nctaid.x")}
    _block(L, sched.block)
    entry.block.add_op(ptx.YieldOp())
    return entry, meta


def _check_grid(kop: KernelOp, target: str) -> None:
    """The per-target part of the lowering: the grid the pads were sized for
    (``max_ctas``, from the cost target's SM count) must be resident at once on the GPU the
    PTX is for (every CTA of every rank waits for its peers' CTA of the same index): a
    kernel scheduled for a b200 (148 SMs) cannot be lowered for an sm_90a (132)."""
    cg = get_codegen_target(target)
    max_ctas, per_sm = _plan_int(kop, "max_ctas"), _plan_int(kop, "ctas_per_sm")
    if max_ctas > per_sm * cg.num_sms:
        raise CodegenError(f"kernel @{kop.kernel_name.data}: scheduled for {max_ctas} CTAs "
                           f"({per_sm} per SM) but {target} has {cg.num_sms} SMs: schedule it "
                           f"with a cost target of {target} (schedule-collectives{{target=...}})")


def _elements(t: BufferType) -> int:
    n = 1
    for d in t.get_shape():
        n *= d
    return n


# ---- scalars and structure ---------------------------------------------------------------


def _launch_param(L: Lowering, op: c.LaunchParamOp) -> None:
    L.vals[op.result] = _comm(L).params[c.CommParam(op.param.data).value]


def _grid_value(L: Lowering, op: c.GridValueOp) -> None:
    L.vals[op.result] = _comm(L).grid[op.what.data]


def _when(L: Lowering, op: c.WhenOp) -> None:
    with L.b.if_(L.v(op.cond)):
        _block(L, op.block)


def _vec_loop(L: Lowering, op: c.VecLoopOp) -> None:
    b = L.b
    U, S = op.unroll.data, op.stride.data
    start = b.add32(L.v(op.lo), L.tid)
    with b.for_(start, L.v(op.hi), U * S, "u32") as iv:
        for u, arg in enumerate(op.block.args):
            L.vals[arg] = b.add32(iv, u * S) if u else iv
        _block(L, op.block)


# ---- memory ------------------------------------------------------------------------------


def _const(v: SSAValue) -> int | None:
    return v.owner.value.value.data if isinstance(v.owner, arith.ConstantOp) else None


def _ptr(L: Lowering, op: c.BufferPtrOp) -> None:
    st = _comm(L)
    buf = op.buffer
    if op.peer is None:
        L.vals[op.result] = st.own[buf] if buf in st.own else L.buffers[buf]
        return
    L.vals[op.result] = select_b64(L, st.peers[buf], op.peer, "'pks.ptr' peer rank")


def _vec_addr(L: Lowering, ptr: SSAValue, index: SSAValue, offset: SSAValue | None) -> SSAValue:
    """ptr + 16 * (index [+ offset])."""
    b = L.b
    i = L.v(index)
    if offset is not None:
        i = b.add32(i, L.v(offset))
    return b.add64(b.bin("mul.wide", "u32", i, 16, result_kind="b64"), L.v(ptr))


def _guard(L: Lowering, index, bound, pred) -> SSAValue | None:
    b = L.b
    g = b.setp("lt", "u32", L.v(index), L.v(bound)) if bound is not None else None
    if pred is not None:
        g = L.v(pred) if g is None else b.pand(g, L.v(pred))
    return g


def _vec_load(L: Lowering, op: c.VecLoadOp) -> None:
    addr = _vec_addr(L, op.ptr, op.index, op.offset)
    g = _guard(L, op.index, op.bound, op.pred)
    other = _comm(L).vecs[op.other] if op.other is not None else ()
    ld = L.b.add(LdV4Op(addr, guard=g, other=other, cache=op.cache.data))
    _comm(L).vecs[op.result] = list(ld.res)


def _vec_store(L: Lowering, op: c.VecStoreOp) -> None:
    addr = _vec_addr(L, op.ptr, op.index, op.offset)
    g = _guard(L, op.index, op.bound, op.pred)
    L.b.add(StV4Op(addr, _comm(L).vecs[op.value], guard=g))


def _widen(L: Lowering, word: SSAValue, dtype: str) -> list[SSAValue]:
    """The f32 value(s) of a 32-bit word: (lo, hi) halves, or the f32 itself."""
    b = L.b
    if dtype == "f32":
        return [b.mov(word, "b32", "f32")]
    if dtype == "bf16":
        lo = b.mov(b.bin("shl", "b32", word, 16), "b32", "f32")
        hi = b.mov(b.bin("and", "b32", word, 0xFFFF0000), "b32", "f32")
        return [lo, hi]
    u = b.add(Unpack16x2Op(word))
    return [b.cvt("f32", "f16", u.lo), b.cvt("f32", "f16", u.hi)]


def _vec_sum(L: Lowering, op: c.VecSumOp) -> None:
    b, dt = L.b, op.dtype.data
    vecs = [_comm(L).vecs[v] for v in op.values]
    out = []
    for k in range(4):
        acc = None
        for vec in vecs:
            parts = _widen(L, vec[k], dt)
            acc = parts if acc is None else [b.bin("add.rn", "f32", a, p) for a, p in zip(acc, parts)]
        if dt == "f32":
            out.append(b.mov(acc[0], "b32", "b32"))
        else:
            out.append(b.r(ptx_sm90.CvtPackOp(dt, acc[0], acc[1])))
    _comm(L).vecs[op.result] = out


# ---- epochs and signals ------------------------------------------------------------------


def _epoch(L: Lowering, op: c.EpochOp) -> None:
    b = L.b
    L.vals[op.result] = b.add32(b.ld("global", "u32", L.buffers[op.ctl]), 1)


def _epoch_publish(L: Lowering, op: c.EpochPublishOp) -> None:
    b, st = L.b, _comm(L)
    cond = b.setp("eq", "u32", L.tid, 0)
    if op.pred is not None:
        cond = b.pand(cond, L.v(op.pred))
    with b.if_(cond):
        done = b.add64(L.buffers[op.ctl], 4)
        old = b.r(ptx.AtomOp("add", "u32", done, b.u32(1)))
        last = b.setp("eq", "u32", b.add32(old, 1), st.grid["ctas"])
        b.st("global", "u32", done, b.u32(0), guard=last)
        b.st("global", "u32", L.buffers[op.ctl], L.v(op.epoch), guard=last)


def _fence_sys(L: Lowering, op: c.FenceSysOp) -> None:
    L.b.fence("acq_rel.sys")


def _slot_addr(L: Lowering, pad: SSAValue, slot: SSAValue) -> SSAValue:
    b = L.b
    return b.add64(b.bin("mul.wide", "u32", L.v(slot), 4, result_kind="b64"), L.v(pad))


def _signal(L: Lowering, op: c.SignalOp) -> None:
    L.b.add(ptx.RedOp("add", "u32", _slot_addr(L, op.pad, op.slot), L.b.u32(1), sem=op.sem.data,
                      scope=op.scope.data))


def _signal_wait(L: Lowering, op: c.SignalWaitOp) -> None:
    st = _comm(L)
    p = st.params
    L.b.add(EpochWaitOp(_slot_addr(L, op.pad, op.slot), L.v(op.epoch), p["timeout"], p["err"],
                        p["mbox"], p["trap"], p["rank"], L.v(op.peer), st.grid["cta"],
                        site=op.site.data, scope=op.scope.data, sleep_ns=op.sleep_ns.data))


# ---- LL ----------------------------------------------------------------------------------


def _ll_addr(L: Lowering, op: c.LlAddrOp) -> None:
    """Line t at group t / 32 (2 * LL_HALF bytes each), 16 bytes per line in its group."""
    b = L.b
    t = L.v(op.line)
    grp = b.bin("mul.wide", "u32", b.bin("shr", "u32", t, 5), 2 * c.LL_HALF, result_kind="b64")
    within = b.bin("mul.wide", "u32", b.bin("and", "b32", t, c.LL_GROUP - 1), 16, result_kind="b64")
    L.vals[op.result] = b.add64(b.add64(grp, within), L.v(op.base))


def _ll_store(L: Lowering, op: c.LlStoreOp) -> None:
    b = L.b
    x, e = _comm(L).vecs[op.value], L.v(op.epoch)
    addr = L.v(op.addr)
    g = L.v(op.pred) if op.pred is not None else None
    b.add(StV4Op(addr, [x[0], e, x[1], e], guard=g, volatile=True))
    b.add(StV4Op(addr, [x[2], e, x[3], e], guard=g, offset=c.LL_HALF, volatile=True))


def _ll_wait(L: Lowering, op: c.LlWaitOp) -> None:
    b, st = L.b, _comm(L)
    p = st.params
    own, selfs = [], []
    if op.own is not None:
        own = st.vecs[op.own]
        slot = L.v(op.own_slot)
        selfs = [b.setp("eq", "u32", slot, q) for q in range(len(op.addrs))]
    poll = b.add(LlPollOp([L.v(a) for a in op.addrs], L.v(op.epoch), own, selfs, p["timeout"],
                          p["err"], p["mbox"], p["trap"], p["rank"], st.grid["cta"]))
    for q, r in enumerate(op.results):
        st.vecs[r] = list(poll.words[4 * q:4 * q + 4])


# ---- NVLS (multimem) ------------------------------------------------------------------------


def _mc_ptr(L: Lowering, op: c.McPtrOp) -> None:
    L.vals[op.result] = _comm(L).mc[op.buffer]


def _mc_ld_reduce(L: Lowering, op: c.McLoadReduceOp) -> None:
    addr = _vec_addr(L, op.ptr, op.index, op.offset)
    g = _guard(L, op.index, op.bound, None)
    ld = L.b.add(MultimemLdReduceOp(addr, op.dtype.data, guard=g))
    _comm(L).vecs[op.result] = list(ld.res)


def _mc_store(L: Lowering, op: c.McStoreOp) -> None:
    addr = _vec_addr(L, op.ptr, op.index, op.offset)
    g = _guard(L, op.index, op.bound, None)
    L.b.add(MultimemStOp(addr, _comm(L).vecs[op.value], guard=g))


def _mc_signal(L: Lowering, op: c.McSignalOp) -> None:
    L.b.add(MultimemRedOp(_slot_addr(L, op.pad, op.slot), L.b.u32(1)))


EXTRA_LOWERINGS.update({
    c.McPtrOp: _mc_ptr, c.McLoadReduceOp: _mc_ld_reduce, c.McStoreOp: _mc_store,
    c.McSignalOp: _mc_signal,
    c.LaunchParamOp: _launch_param, c.GridValueOp: _grid_value, c.WhenOp: _when,
    c.VecLoopOp: _vec_loop, c.BufferPtrOp: _ptr, c.VecLoadOp: _vec_load, c.VecStoreOp: _vec_store,
    c.VecSumOp: _vec_sum, c.EpochOp: _epoch, c.EpochPublishOp: _epoch_publish,
    c.FenceSysOp: _fence_sys, c.SignalOp: _signal, c.SignalWaitOp: _signal_wait,
    c.LlAddrOp: _ll_addr, c.LlStoreOp: _ll_store, c.LlWaitOp: _ll_wait,
})
KERNEL_LOWERINGS.append((is_comm_kernel, lower_comm_kernel))
BEFORE_SETUP_BARRIER.add(c.EpochOp)

# pks.vec_sum_slots (the slot sum of large worlds) lowers in its own module, on the helpers
# above; importing it registers it
from pkc.codegen import lower_schedule_comm_sum  # noqa: E402,F401
