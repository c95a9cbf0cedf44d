"""Interpreter rules of the schedule level's NVLS ops (``pks.mc_*`` of
:mod:`pkc.dialects.schedule_comm`): a multicast address stands for every rank's copy of a
symmetric buffer (:class:`~pkc.interp.schedule_world.Ptr` with ``rank = MULTICAST``);
``pks.mc_ld_reduce`` reads the W copies and sums them in rank order in f32, rounded once
(as ``pks.vec_sum`` of the W loads: the graph-level reduction, bitwise); ``pks.mc_store``
writes every copy; ``pks.mc_signal`` adds 1 to the slot of every rank's pad (a relaxed add:
it publishes the clock of the last ``pks.fence_sys``, as ``pks.signal``). Reads and
writes go through each copy's access records, so a read before the data landed is the
same error as for the plain ops."""

from __future__ import annotations

import torch

from pkc.dialects import schedule_comm as c
from pkc.interp.schedule_comm import _DT, _vec_words, signal_add
from pkc.interp.schedule_rules import simple
from pkc.interp.schedule_state import Actor
from pkc.interp.schedule_world import Ptr, active, lanes

MULTICAST = -1      # the rank of a multicast address: every rank's copy


def _copies(R, ptr: Ptr) -> list[Ptr]:
    return [Ptr(ptr.buf, q, ptr.off) for q in range(R.world)]


def _act(a: Actor, op, env):
    idx = env[op.index]
    below = (lanes(idx, a.lanes) < env[op.bound]) if op.bound is not None else None
    return idx, active(a, below)


@simple(c.McPtrOp)
def _mc_ptr(R, a: Actor, op: c.McPtrOp, env) -> bool:
    env[op.result] = Ptr(op.buffer, MULTICAST)
    return False


@simple(c.McLoadReduceOp)
def _mc_ld_reduce(R, a: Actor, op: c.McLoadReduceOp, env) -> bool:
    dt = _DT[op.dtype.data]
    idx, act = _act(a, op, env)
    out = torch.zeros((a.lanes, 4), dtype=torch.int32)
    if bool(act.any()):
        off = env[op.offset] if op.offset is not None else None
        acc = None
        for p in _copies(R, env[op.ptr]):
            g, w = _vec_words(R, a, op, p, idx, off, act)
            x = g.read(a, a.at(op), w).contiguous().view(dt).float()
            acc = x if acc is None else acc + x
        out[act] = acc.to(dt).view(torch.int32).reshape(-1, 4)
    env[op.result] = out
    return False


@simple(c.McStoreOp)
def _mc_store(R, a: Actor, op: c.McStoreOp, env) -> bool:
    idx, act = _act(a, op, env)
    if not bool(act.any()):
        return False
    off = env[op.offset] if op.offset is not None else None
    for p in _copies(R, env[op.ptr]):
        g, w = _vec_words(R, a, op, p, idx, off, act)
        g.write(a, a.at(op), w, env[op.value][act], R.memory.actor_key(a), a.epoch)
    R.version += 1
    return True


@simple(c.McSignalOp)
def _mc_signal(R, a: Actor, op: c.McSignalOp, env) -> bool:
    done = False
    for p in _copies(R, env[op.pad]):
        done |= signal_add(R, a, op, p, env[op.slot], 1, "relaxed")
    return done
