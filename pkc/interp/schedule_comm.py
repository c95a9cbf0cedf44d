"""Interpreter rules of the schedule level's communication ops
(:mod:`pkc.dialects.schedule_comm`): peer pointers, 16-byte vector loads / stores, rank-order
sums, epochs, signals, bounded waits and LL packets, for W simulated ranks.

Threads: a warpgroup is one actor of :class:`pkc.interp.schedule.ScheduleRun` whose up to
128 threads run in lockstep as lanes: ``pks.grid_value tid`` is a per-lane tensor, arith
on it is element-wise (:func:`lane_arith`), ``pks.when`` and ``pks.vec_loop`` trips mask
lanes, and a wait blocks the warpgroup until it holds on every active lane. Memory and
ordering: :mod:`pkc.interp.schedule_world`. A wait no signal can satisfy ends in the
scheduler's deadlock report (op, rank, CTA, warpgroup, the slot and what it holds), never
a hang; the launch's timeout is not modelled (a deadlock is reported instead).

The grid of a scheduled collective follows the launch rule (:class:`CommGrid`, the same
rule as the runtime's ``CommLaunch.launch``): ``slice`` vectors of a chunk per CTA.
"""

from __future__ import annotations

import operator
from collections.abc import Generator
from dataclasses import dataclass

import torch
from xdsl.dialects import arith

from pkc.dialects import schedule_comm as c
from pkc.dialects.schedule_comm_sum import VecSumSlotsOp
from pkc.dialects.kernel import KernelOp
from pkc.dialects.plan import ScheduleKind, schedule_kind
from pkc.interp.schedule_rules import BLOCKED, blocking, simple
from pkc.interp.schedule_state import Actor, join
from pkc.interp.schedule_world import (INIT, POISON_WORD, Ptr, acquire, active, lanes,
                                       release, snapshot, uniform)
from pkc.interp.values import InterpError, where

_DT = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
THREADS_PER_WG = 128


# ---- the grid of a scheduled collective ----------------------------------------------------


def _plan(op: KernelOp) -> dict:
    a = op.attributes.get("pk.plan")
    out = {}
    for k, v in (a.data.items() if a is not None else ()):
        v = getattr(v, "value", v)
        out[k] = getattr(v, "data", v)
    return out


@dataclass
class CommGrid:
    """CTAs, threads and launch parameters of one scheduled collective: the launch rule
    (each CTA takes at most ``cta_vecs`` vectors of a chunk, its slice rounded up to
    ``slice_align``, no CTA gets an empty slice; LL kinds launch only the threads their
    slice needs) over at most ``max_ctas`` CTAs."""

    grid: int
    slice: int
    threads: int
    vecs: int
    chunk: int

    @staticmethod
    def of(op: KernelOp, ctas: int | None) -> CommGrid | None:
        try:
            kind = schedule_kind(op)
        except ValueError as e:
            raise InterpError(f"{where(op)} {e}") from None
        if kind is not ScheduleKind.COLLECTIVE:
            return None
        plan = _plan(op)
        try:
            cv, cta_vecs, align = plan["chunk_vecs"], plan["cta_vecs"], plan["slice_align"]
            max_ctas, vecs = plan["max_ctas"] or 1 << 30, plan["vecs"]
        except KeyError as e:
            raise InterpError(f"{where(op)} @{op.kernel_name.data}: a scheduled collective needs "
                              f"pk.plan.{e.args[0]} (written by schedule-collectives)") from None
        if ctas is not None:            # the most CTAs the caller wants: small slices
            max_ctas, cta_vecs = min(max_ctas, ctas), 1
        grid = max(1, min(max_ctas, -(-cv // cta_vecs)))
        per = -(-cv // grid)
        per = -(-per // align) * align
        grid = max(1, -(-cv // per))
        threads = op.schedule().threads.data
        if plan.get("shrink_threads"):
            threads = min(threads, -(-per // 32) * 32)
        return CommGrid(grid, per, threads, vecs, cv)


# ---- per-lane arithmetic --------------------------------------------------------------------


def _t(x, like: torch.Tensor) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x
    return torch.full(like.shape, x, dtype=torch.bool if isinstance(x, bool) else torch.int64)


def _pairwise(tensor_fn, scalar_fn):
    def fn(x, y):
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            like = x if isinstance(x, torch.Tensor) else y
            return tensor_fn(_t(x, like), _t(y, like))
        return scalar_fn(x, y)
    return fn


def _select(cond, x, y):
    if isinstance(cond, torch.Tensor):
        return torch.where(cond.bool(), _t(x, cond), _t(y, cond))
    return x if cond else y


_CMP = [operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge,
        operator.lt, operator.le, operator.gt, operator.ge]
_LANE = {
    arith.AddiOp: operator.add, arith.SubiOp: operator.sub, arith.MuliOp: operator.mul,
    arith.DivUIOp: operator.floordiv, arith.RemUIOp: operator.mod,
    arith.FloorDivSIOp: operator.floordiv, arith.AndIOp: operator.and_,
    arith.OrIOp: operator.or_, arith.XOrIOp: operator.xor, arith.ShLIOp: operator.lshift,
    arith.ShRUIOp: operator.rshift, arith.ShRSIOp: operator.rshift,
    arith.MinUIOp: _pairwise(torch.minimum, min), arith.MinSIOp: _pairwise(torch.minimum, min),
    arith.MaxUIOp: _pairwise(torch.maximum, max), arith.MaxSIOp: _pairwise(torch.maximum, max),
    arith.CeilDivUIOp: lambda x, y: -(-x // y),
    arith.SelectOp: _select, arith.IndexCastOp: lambda x: x,
}


def lane_arith(op):
    """The element-wise rule of an ``arith`` op over scalars or per-lane tensors (None:
    not one of them; the scalar rules apply)."""
    if type(op) is arith.CmpiOp:
        return _CMP[op.predicate.value.data]
    return _LANE.get(type(op))


def tids(a: Actor) -> torch.Tensor:
    return torch.arange(a.lanes, dtype=torch.int64) + THREADS_PER_WG * a.wg


# ---- scalars and structure --------------------------------------------------------------


@simple(c.LaunchParamOp)
def _launch_param(R, a: Actor, op: c.LaunchParamOp, env) -> bool:
    p = c.CommParam(op.param.data)
    if p is c.CommParam.RANK:
        env[op.result] = a.rank
        return False
    if R.comm is None:
        raise InterpError(f"{a.at(op)}: launch parameter {p.value} of a kernel that is not a "
                          "scheduled collective (no pk.plan with schedule = \"collective\")")
    env[op.result] = {c.CommParam.SLICE: R.comm.slice, c.CommParam.VECS: R.comm.vecs,
                      c.CommParam.CHUNK: R.comm.chunk}[p]
    return False


@simple(c.GridValueOp)
def _grid_value(R, a: Actor, op: c.GridValueOp, env) -> bool:
    what = c.GridValue(op.what.data)
    env[op.result] = (tids(a) if what is c.GridValue.TID else
                      a.cta if what is c.GridValue.CTA else R.ctas)
    return False


def masked(R, a: Actor, mask: torch.Tensor, block, env, args=()) -> Generator:
    """Runs ``block`` on the lanes of ``mask`` (none: skipped)."""
    if not bool(mask.any()):
        return
    saved = a.mask
    a.mask = None if bool(mask.all()) else mask
    try:
        yield from R.run_block(a, block, env, args)
    finally:
        a.mask = saved


@blocking(c.WhenOp)
def _when(R, a: Actor, op: c.WhenOp, env) -> Generator:
    yield from masked(R, a, active(a, env[op.cond]), op.block, env)


@blocking(c.VecLoopOp)
def _vec_loop(R, a: Actor, op: c.VecLoopOp, env) -> Generator:
    """Lane t visits lo + t, lo + t + unroll * stride, ... below hi; trip k runs the lanes
    that have a k-th trip."""
    U, S = op.unroll.data, op.stride.data
    start = lanes(env[op.lo], a.lanes) + tids(a)
    hi = lanes(env[op.hi], a.lanes)
    outer = active(a)
    k = 0
    while True:
        base = start + k * U * S
        m = outer & (base < hi)
        if not bool(m.any()):
            return
        R._count()
        yield from masked(R, a, m, op.block, env, [base + u * S for u in range(U)])
        k += 1


# ---- memory --------------------------------------------------------------------------------


@simple(c.BufferPtrOp)
def _ptr(R, a: Actor, op: c.BufferPtrOp, env) -> bool:
    rank = a.rank
    if op.peer is not None:
        rank = uniform(a, op, env[op.peer], "the peer rank")
        if not 0 <= rank < R.world:
            raise InterpError(f"{a.at(op)}: peer rank {rank} outside 0..{R.world - 1}")
    if op.buffer not in R.data:
        raise InterpError(f"{a.at(op)}: the address of a value that is no kernel buffer")
    env[op.result] = Ptr(op.buffer, rank)
    return False


def _vec_words(R, a: Actor, op, ptr: Ptr, index, offset, act: torch.Tensor):
    """(buffer, words [lanes, 4]) of the vectors ``index (+ offset)`` at ``ptr`` of the
    active lanes."""
    v = index if offset is None else index + offset
    off = ptr.off + 16 * v              # scalars and per-lane tensors broadcast
    off = off[act] if isinstance(off, torch.Tensor) else torch.full(
        (int(act.sum()),), int(off), dtype=torch.int64)
    g = R.gbuf(ptr.buf, ptr.rank)
    return g, g.word_index(a, op, off, 16)


def _poison(n: int) -> torch.Tensor:
    return torch.full((n, 4), POISON_WORD, dtype=torch.int32)


def _vec_fields(R, op) -> tuple:
    """(ptr, index, bound, offset, pred, other or value, result, nc) of a vector load /
    store, read from the op once per run (xDSL's operand properties are slow to read)."""
    cache = R.__dict__.setdefault("_vec_fields", {})
    f = cache.get(op)
    if f is None:
        load = isinstance(op, c.VecLoadOp)
        f = cache[op] = (op.ptr, op.index, op.bound, op.offset, op.pred,
                         op.other if load else op.value, op.result if load else None,
                         load and op.cache.data == c.CacheHint.NC.value)
    return f


@simple(c.VecLoadOp)
def _vec_load(R, a: Actor, op: c.VecLoadOp, env) -> bool:
    ptr, index, bound, offset, pred, other, result, nc = _vec_fields(R, op)
    idx = env[index]
    below = (lanes(idx, a.lanes) < env[bound]) if bound is not None else None
    act = active(a, below, env[pred] if pred is not None else None)
    out = env[other].clone() if other is not None else _poison(a.lanes)
    if bool(act.any()):
        g, w = _vec_words(R, a, op, env[ptr], idx, env[offset] if offset is not None else None,
                          act)
        if nc:
            _check_read_only(R, a, op, g, w)
        out[act] = g.read(a, a.at(op), w)
    env[result] = out
    return False


def _check_read_only(R, a: Actor, op, g, w: torch.Tensor) -> None:
    """``.nc`` loads go through the read-only cache: only for data no kernel wrote during
    the run (an input); what a peer or another CTA stored may be stale there (use cg)."""
    kids = g.wk[w.reshape(-1)]
    own = R.memory.actor_key(a)
    bad = (kids != INIT) & (kids != own)
    if bool(bad.any()):
        k = int(kids[bad][0])
        raise InterpError(f"{a.at(op)}: a read-only (cache nc) load of {g.name}, which "
                          f"{R.memory.who[R.memory.keys[k]]} wrote during the run: the "
                          "non-coherent cache may hold an older line (load it with cache cg)")


@simple(c.VecStoreOp)
def _vec_store(R, a: Actor, op: c.VecStoreOp, env) -> bool:
    ptr, index, bound, offset, pred, value, _, _ = _vec_fields(R, op)
    idx = env[index]
    below = (lanes(idx, a.lanes) < env[bound]) if bound is not None else None
    act = active(a, below, env[pred] if pred is not None else None)
    if not bool(act.any()):
        return False
    g, w = _vec_words(R, a, op, env[ptr], idx, env[offset] if offset is not None else None, act)
    g.write(a, a.at(op), w, env[value][act], R.memory.actor_key(a), a.epoch)
    R.version += 1
    return True


@simple(c.VecSumOp)
def _vec_sum(R, a: Actor, op: c.VecSumOp, env) -> bool:
    """In f32, in operand order, rounded once (as the lowering's add.rn.f32 chain)."""
    dt = _DT[op.dtype.data]
    acc = None
    for v in op.values:
        x = env[v].contiguous().view(dt).float()
        acc = x if acc is None else acc + x
    env[op.result] = acc.to(dt).view(torch.int32).reshape(a.lanes, 4)
    return False


@simple(VecSumSlotsOp)
def _vec_sum_slots(R, a: Actor, op: VecSumSlotsOp, env) -> bool:
    """Slot q at vector ``index + offset + q * stride``, q = 0 .. count-1, summed as
    ``pks.vec_sum`` sums its operands (f32, in q order, rounded once); every slot read is
    checked as a ``pks.vec_load`` of it would be."""
    dt = _DT[op.dtype.data]
    idx, off, stride = env[op.index], env[op.offset], env[op.stride]
    below = (lanes(idx, a.lanes) < env[op.bound]) if op.bound is not None else None
    act = active(a, below)
    out = _poison(a.lanes)
    if bool(act.any()):
        acc = None
        for q in range(op.count.data):
            g, w = _vec_words(R, a, op, env[op.ptr], idx, off + q * stride, act)
            x = g.read(a, a.at(op), w).contiguous().view(dt).float()
            acc = x if acc is None else acc + x
        out[act] = acc.to(dt).view(torch.int32).reshape(-1, 4)
    env[op.result] = out
    return False


# ---- epochs and signals -----------------------------------------------------------------


@simple(c.EpochOp)
def _epoch(R, a: Actor, op: c.EpochOp, env) -> bool:
    env[op.result] = int(R.gbuf(op.ctl, a.rank).words[0]) + 1
    return False


@simple(c.EpochPublishOp)
def _epoch_publish(R, a: Actor, op: c.EpochPublishOp, env) -> bool:
    """Thread 0 counts its CTA done; the grid's last stores the epoch for the next launch."""
    act = active(a, tids(a) == 0, env[op.pred] if op.pred is not None else None)
    if not bool(act.any()):
        return False
    words = R.gbuf(op.ctl, a.rank).words
    words[1] += 1
    # the launch's grid: under cluster launch control more CTAs than the interpreter runs
    # (the cancelled ones are counted by pks.clc_chunk_tile_loop)
    grid = getattr(R, "launch_ctas", R.ctas)
    if int(words[1]) == grid:
        words[1] = 0
        words[0] = uniform(a, op, env[op.epoch], "the epoch")
    elif int(words[1]) > grid:
        raise InterpError(f"{a.at(op)}: {int(words[1])} CTAs counted done in a grid of "
                          f"{grid} (pks.epoch_publish runs more than once per CTA)")
    R.version += 1
    return True


@simple(c.FenceSysOp)
def _fence_sys(R, a: Actor, op, env) -> bool:
    a.fenced = dict(a.clock)
    release(a)
    return False


def _pad_words(R, a: Actor, op, ptr: Ptr, slot, act: torch.Tensor):
    g = R.gbuf(ptr.buf, ptr.rank)
    off = (lanes(ptr.off, a.lanes) + 4 * lanes(slot, a.lanes))[act]
    return g, g.word_index(a, op, off, 4)[:, 0]


def signal_add(R, a: Actor, op, ptr: Ptr, slot, value, sem: str) -> bool:
    """Adds ``value`` to pad word ``slot`` (per active lane); a release publishes the
    clock, a relaxed add the clock of the last ``pks.fence_sys``."""
    act = active(a)
    if not bool(act.any()):
        return False
    g, w = _pad_words(R, a, op, ptr, slot, act)
    vals = lanes(value, a.lanes)[act]
    published = a.clock if sem == "release" else (a.fenced or {})
    for word, v in zip(w.tolist(), vals.tolist()):
        g.words[word] += v
        join(g.signal_clocks.setdefault(word, {}), published)
    if sem == "release":
        release(a)
    R.version += 1
    return True


@simple(c.SignalOp)
def _signal(R, a: Actor, op: c.SignalOp, env) -> bool:
    return signal_add(R, a, op, env[op.pad], env[op.slot], 1, op.sem.data)


@blocking(c.SignalWaitOp)
def _signal_wait(R, a: Actor, op: c.SignalWaitOp, env) -> Generator:
    """Blocks until every active lane's slot reached its epoch, then acquires."""
    act = active(a)
    if not bool(act.any()):
        return
    g, w = _pad_words(R, a, op, env[op.pad], env[op.slot], act)
    want = lanes(env[op.epoch], a.lanes)[act]
    peer = lanes(env[op.peer], a.lanes)[act]
    while True:
        diff = (g.words[w].to(torch.int64) - want + (1 << 31)) % (1 << 32) - (1 << 31)
        short = diff < 0
        if not bool(short.any()):
            break
        i = int(short.nonzero()[0])
        a.blocked = (op, f"u32 slot {int(w[i])} of {g.name} to reach {int(want[i])} (it holds "
                         f"{int(g.words[w[i]])}; {c.WaitSite(op.site.data).name} wait on peer "
                         f"{int(peer[i])}, {int(short.sum())} of {int(act.sum())} threads short)")
        yield BLOCKED
    a.blocked = None
    for word in set(w.tolist()):
        join(a.clock, g.signal_clocks.get(word, {}))


# ---- LL packets ---------------------------------------------------------------------------


@simple(c.LlAddrOp)
def _ll_addr(R, a: Actor, op: c.LlAddrOp, env) -> bool:
    t = env[op.line]
    env[op.result] = env[op.base].plus((t >> 5) * (2 * c.LL_HALF) + (t & (c.LL_GROUP - 1)) * 16)
    return False


@simple(c.LlStoreOp)
def _ll_store(R, a: Actor, op: c.LlStoreOp, env) -> bool:
    """Two 16-byte halves [x0, e, x1, e] and [x2, e, x3, e], LL_HALF bytes apart; the
    flags publish the writer's clock."""
    act = active(a, env[op.pred] if op.pred is not None else None)
    if not bool(act.any()):
        return False
    p: Ptr = env[op.addr]
    g = R.gbuf(p.buf, p.rank)
    off = lanes(p.off, a.lanes)[act]
    x = env[op.value][act].to(torch.int64)
    e = lanes(env[op.epoch], a.lanes)[act]
    key, at = R.memory.actor_key(a), a.at(op)
    count = a.epoch
    for half, (i, j) in enumerate(((0, 1), (2, 3))):
        w = g.word_index(a, op, off + half * c.LL_HALF, 16)
        g.write(a, at, w, torch.stack([x[:, i], e, x[:, j], e], 1), key, count)
    snapshot(R.memory, a, key)
    R.version += 1
    return True


@blocking(c.LlWaitOp)
def _ll_wait(R, a: Actor, op: c.LlWaitOp, env) -> Generator:
    act = active(a)
    own = uniform(a, op, env[op.own_slot], "the own slot") if op.own is not None else -1
    results = [_poison(a.lanes) for _ in op.addrs]
    if not bool(act.any()):
        for r, v in zip(op.results, results):
            env[r] = v
        return
    e = lanes(env[op.epoch], a.lanes)[act]
    polls = []
    for q, av in enumerate(op.addrs):
        if q == own:
            results[q] = env[op.own].clone()
            continue
        p: Ptr = env[av]
        g = R.gbuf(p.buf, p.rank)
        off = lanes(p.off, a.lanes)[act]
        polls.append((q, g, g.word_index(a, op, off, 16), g.word_index(a, op, off + c.LL_HALF, 16)))
    while True:
        short = None
        for q, g, w1, w2 in polls:
            flags = torch.cat([g.words[w1][:, 1::2], g.words[w2][:, 1::2]], 1).to(torch.int64)
            bad = (flags != e.unsqueeze(1)).any(1)
            if bool(bad.any()):
                i = int(bad.nonzero()[0])
                short = (q, g, int(w1[i, 0]), int(e[i]), flags[i].tolist())
                break
        if short is None:
            break
        q, g, word, want, seen = short
        a.blocked = (op, f"the LL line of slot {q} at bytes {4 * word}.. of {g.name} to carry "
                         f"epoch {want} in its flags (they hold {seen})")
        yield BLOCKED
    a.blocked = None
    at = a.at(op)
    for q, g, w1, w2 in polls:
        acquire(R.memory, a, g.wk[w1], g.wv[w1])
        acquire(R.memory, a, g.wk[w2], g.wv[w2])
        d1, d2 = g.read(a, at, w1), g.read(a, at, w2)
        out = results[q]
        out[act] = torch.stack([d1[:, 0], d1[:, 2], d2[:, 0], d2[:, 2]], 1)
    for r, v in zip(op.results, results):
        env[r] = v


__all__ = ["CommGrid", "lane_arith", "tids", "masked", "signal_add"]
