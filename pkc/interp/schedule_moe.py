"""Interpreter rules of the MoE kernel's ops (:mod:`pkc.dialects.schedule_moe`): the grouped
tile loop over (expert, source) row blocks whose counts it reads from memory, and the
count words.

The loop reads each block's count when it reaches the block, through the ordering checks
of :mod:`pkc.interp.schedule_world` (a count a peer stored must be ordered before the read
by a signal wait: else the interpreter names the loop, rank and role). Word stores are
recorded like vector stores (ordered by ``pks.fence_sys`` and a signal). The kernel's
``[blocks, C, width]`` maps are ``pks.tmap_view``s (rule in :mod:`pkc.interp.schedule_ag`).
"""

from __future__ import annotations

from collections.abc import Generator

import torch

from pkc.dialects import schedule_moe as m
from pkc.interp.schedule_rules import blocking, simple
from pkc.interp.schedule_state import Actor
from pkc.interp.schedule_world import active, lanes, uniform
from pkc.interp.values import InterpError


def _words(R, a: Actor, op, ptr, index, act: torch.Tensor):
    g = R.gbuf(ptr.buf, ptr.rank)
    off = (lanes(ptr.off, a.lanes) + 4 * lanes(index, a.lanes))[act]
    return g, g.word_index(a, op, off, 4)


@simple(m.WordLoadOp)
def _word_load(R, a: Actor, op: m.WordLoadOp, env) -> bool:
    act = active(a)
    out = torch.zeros(a.lanes, dtype=torch.int64)
    if bool(act.any()):
        g, w = _words(R, a, op, env[op.ptr], env[op.index], act)
        out[act] = g.read(a, a.at(op), w)[:, 0].to(torch.int64) & 0xFFFFFFFF
    env[op.result] = out
    return False


@simple(m.WordStoreOp)
def _word_store(R, a: Actor, op: m.WordStoreOp, env) -> bool:
    act = active(a)
    if not bool(act.any()):
        return False
    g, w = _words(R, a, op, env[op.ptr], env[op.index], act)
    g.write(a, a.at(op), w, lanes(env[op.value], a.lanes)[act], R.memory.actor_key(a), a.epoch)
    R.version += 1
    return True


@blocking(m.GroupedTileLoopOp)
def _grouped_tile_loop(R, a: Actor, op: m.GroupedTileLoopOp, env) -> Generator:
    """Block slot j*E + e: expert e's rows from source (first + j) mod S, count read (and
    clipped to the capacity) when the loop reaches it; its tiles rows fastest; this CTA's
    tiles of the concatenation are cta, cta + grid, ... (GroupedTileLoopOp's doc)."""
    bm, bn = op.bm.data, op.bn.data
    E, S, C = op.experts.data, op.sources.data, op.capacity.data
    if R.cluster != 1:
        raise InterpError(f"{a.at(op)}: a grouped tile loop in clusters of {R.cluster}")
    ptr = env[op.counts]
    num_n = -(-uniform(a, op, env[op.n], "N") // bn)
    first = uniform(a, op, env[op.first], "the first source")
    off = uniform(a, op, ptr.off, "the counts' address")
    g = R.gbuf(ptr.buf, ptr.rank)
    carried = [env[v] for v in op.inits]
    base = 0
    for slot in range(E * S):
        j, e = divmod(slot, E)
        src = (first + j) % S
        w = g.word_index(a, op, torch.tensor([off + 4 * (e * S + src)]), 4)
        cnt = min(int(g.read(a, a.at(op), w)[0, 0]) & 0xFFFFFFFF, C)
        mt = -(-cnt // bm)
        end = base + mt * num_n
        for t in range(base + (a.cta - base) % R.ctas, end, R.ctas):
            local = t - base
            R._count()
            carried = yield from R.run_block(a, op.block, env,
                                             [local % mt * bm, local // mt * bn, e, src, *carried])
        base = end
    for res, v in zip(op.res, carried):
        env[res] = v


__all__: list[str] = []
