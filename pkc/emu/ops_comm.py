"""Handlers of the communication instructions (:mod:`pkc.codegen.ptx_comm`) of scheduled
collectives: 16-byte vector loads and stores, the 16-bit pair unpack, the bounded epoch
wait and the LL packet poll.

``st.volatile`` / ``ld.volatile`` (LL lines, whose flags travel with the data) are strong
accesses (PTX ISA 8.4: volatile is relaxed at system scope), so they are not data races;
plain ``ld`` / ``st`` are checked (:mod:`pkc.emu.race`). The waits never time out here: a
wait nothing can satisfy is a deadlock error naming what it waits for.
"""

from __future__ import annotations

import numpy as np

from pkc.codegen import ptx_comm
from pkc.emu import race
from pkc.emu.machine import EXPLAIN
from pkc.emu.memory import GLOBAL_BASE
from pkc.emu.ops_memory import active_of, global_offsets
from pkc.emu.registry import handles


def _words(m, off: np.ndarray) -> np.ndarray:
    """[threads, 4] u32 at 16-byte aligned heap offsets."""
    v = m.gmem.heap.view(np.uint32)
    base = off // 4
    return np.stack([v[base + k] for k in range(4)], axis=1)


@handles(ptx_comm.LdV4Op)
def _ld_v4(m, ins, g):
    """``ld.global{.cache}.v4.b32`` (PTX ISA 9.7.9.8, vector loads): 16 aligned bytes;
    ``other`` (zeros without it) where the guard fails."""
    op = ins.op
    act, p = active_of(m, ins, g)
    res = [m.prog.slots[r] for r in op.res]
    if p is not None:
        others = [m.prog.slots[x] for x in op.other]
        for k, r in enumerate(res):
            g.set(r, g.get(others[k]) if others else np.zeros(g.n, np.uint32))
    if act.n == 0:
        return
    off = global_offsets(m, ins, act, act.get(ins.args[0]), 16, False)
    race.check(m, ins, act, off, 16, False)
    w = _words(m, off)
    for k, r in enumerate(res):
        act.set(r, w[:, k])


@handles(ptx_comm.StV4Op)
def _st_v4(m, ins, g):
    """``st{.volatile}.global.v4.b32 [a+offset]`` (PTX ISA 9.7.9.9)."""
    op = ins.op
    act, _ = active_of(m, ins, g)
    if act.n == 0:
        return
    addr = act.get(ins.args[0]).astype(np.uint64) + np.uint64(op.offset.data)
    off = global_offsets(m, ins, act, addr, 16, True)
    race.check(m, ins, act, off, 16, True, atomic=op.volatile is not None)
    v = m.gmem.heap.view(np.uint32)
    for k, s in enumerate(m.prog.slots[x] for x in op.values):
        v[off // 4 + k] = act.get(s).view(np.uint32)


@handles(ptx_comm.Unpack16x2Op)
def _unpack(m, ins, g):
    """``mov.b32 {lo, hi}, w`` (PTX ISA 9.7.9.10)."""
    w = g.get(ins.args[0]).view(np.uint32)
    g.set(ins.res[0], (w & np.uint32(0xFFFF)).astype(np.uint16))
    g.set(ins.res[1], (w >> np.uint32(16)).astype(np.uint16))


@handles(ptx_comm.EpochWaitOp)
def _epoch_wait(m, ins, g):
    """The bounded epoch wait: ``ld.acquire`` until ``(s32)([addr] - want) >= 0`` (PTX ISA
    9.7.9.8, 8.8 acquire); done threads join the signaller's clock."""
    off = global_offsets(m, ins, g, g.get(ins.args[0]), 4, False)
    seen = m.gmem.load(off, 4).view(np.int32)
    want = g.get(ins.args[1]).view(np.int32)
    with np.errstate(over="ignore"):
        done = (seen - want) >= 0
    if done.any():
        race.clocks(m).acquire(g.rank[done], off[done])
    return done


def _explain_epoch(m, ins, g):
    addr = int(g.get(ins.args[0])[0])
    seen = int(m.gmem.load(np.array([addr - GLOBAL_BASE]), 4)[0])
    return (f"epoch wait (site {ins.op.site.data}): the u32 at {m.gmem.locate(addr)} is {seen}, "
            f"it waits until >= {int(g.get(ins.args[1])[0])} (peer "
            f"{int(g.get(ins.args[7])[0])} never signalled)")


EXPLAIN[ptx_comm.EpochWaitOp] = _explain_epoch


@handles(ptx_comm.LlPollOp)
def _ll_poll(m, ins, g):
    """The LL poll: W lines of two 16-byte halves ``LL_HALF`` bytes apart, each word
    followed by its flag; done when every flag of every slot (but the rank's own, taken
    from ``own``) equals the epoch. The words are what was read at the last poll."""
    op = ins.op
    W = len(op.addrs)
    sl = m.prog.slots
    epoch = g.get(sl[op.epoch]).view(np.uint32)
    ok = np.ones(g.n, dtype=bool)
    out = [m.prog.slots[r] for r in op.words]
    own = [sl[r] for r in op.own]
    selfs = [sl[p] for p in op.selfs]
    for q in range(W):
        mine = g.get(selfs[q]) if selfs else np.zeros(g.n, dtype=bool)
        load = ~mine
        words = np.zeros((g.n, 4), dtype=np.uint32)
        flags = np.zeros((g.n, 4), dtype=np.uint32)
        if load.any():
            sub = g.sub(load)
            a = sub.get(sl[op.addrs[q]]).astype(np.uint64)
            lo = _words(m, global_offsets(m, ins, sub, a, 16, False))
            hi = _words(m, global_offsets(m, ins, sub, a + np.uint64(ptx_comm.LL_HALF), 16, False))
            words[load] = np.stack([lo[:, 0], lo[:, 2], hi[:, 0], hi[:, 2]], axis=1)
            flags[load] = np.stack([lo[:, 1], lo[:, 3], hi[:, 1], hi[:, 3]], axis=1)
        if own:
            for k in range(4):
                words[mine, k] = g.get(own[k]).view(np.uint32)[mine]
        ok &= mine | (flags == epoch[:, None]).all(axis=1)
        for k in range(4):
            g.set(out[4 * q + k], words[:, k])
    return ok


def _explain_ll(m, ins, g):
    return "LL poll: a peer's lines never carried this epoch's flags (a peer that never sent)"


EXPLAIN[ptx_comm.LlPollOp] = _explain_ll

