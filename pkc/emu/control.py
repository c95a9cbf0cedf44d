"""Handlers of the control-flow pseudo instructions (:class:`pkc.emu.program.Pseudo`):
structured ``ptx.if`` / ``ptx.for`` as the printer lowers them to ``setp`` + ``bra``
(PTX ISA 9.7.13.2 ``bra``, predicated execution 9.3), and the end of the entry (``ret``,
9.7.13.7). Divergence is per thread: each thread's branch goes its own way."""

from __future__ import annotations

import numpy as np

from pkc.emu.program import Pseudo
from pkc.emu.registry import BRANCHED, JUMPED


def _skip(m, ins, g):
    """``@!p bra END`` around an if-body (``negate``: ``@p bra END``)."""
    cond = g.get(ins.args[0])
    enter = ~cond if ins.owner.negate is not None else cond
    m.pc[g.idx] = np.where(enter, ins.pc + 1, ins.target)
    return JUMPED


def _jump(m, ins, g):
    m.pc[g.idx] = ins.target
    return JUMPED


def _for_init(m, ins, g):
    vals = [g.get(src) for src in ins.args]
    for dst, v in zip(ins.res, vals):
        g.set(dst, v)
    m.pc[g.idx] = ins.target
    return JUMPED


def _for_head(m, ins, g):
    """``setp.ge.<type> p, iv, ub; @p bra END`` (signed compare)."""
    t = ins.owner.type.data
    iv, ub = g.get(ins.args[0], t), g.get(ins.args[1], t)
    m.pc[g.idx] = np.where(iv >= ub, ins.target, ins.pc + 1)
    return JUMPED


def _for_latch(m, ins, g):
    """The carried registers take the yielded values (a parallel copy), iv += step (or,
    with ``next_iv``, iv = the first yielded value)."""
    t = ins.owner.type.data
    iv, step = g.get(ins.args[0], t), g.get(ins.args[1], t)
    vals = [g.get(s) for s in ins.args[2:]]
    if ins.owner.next_iv is not None:
        nxt, vals = vals[0], vals[1:]
        g.set(ins.res[0], nxt)
    else:
        g.set(ins.res[0], iv + step)
    for dst, v in zip(ins.res[1:], vals):
        g.set(dst, v)
    m.pc[g.idx] = ins.target
    return JUMPED


def _for_exit(m, ins, g):
    for src, dst in zip(ins.args, ins.res):
        g.set(dst, g.get(src))


def _ret(m, ins, g):
    m.exit_threads(g.idx)
    return BRANCHED


PSEUDO = {Pseudo.SKIP: _skip, Pseudo.JUMP: _jump, Pseudo.FOR_INIT: _for_init, Pseudo.FOR_HEAD: _for_head,
          Pseudo.FOR_LATCH: _for_latch, Pseudo.FOR_EXIT: _for_exit, Pseudo.RET: _ret}
