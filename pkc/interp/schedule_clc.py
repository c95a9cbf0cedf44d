"""Interpreter rule of ``pks.clc_tile_loop`` (:mod:`pkc.dialects.schedule_clc`): the
persistent tile loop under cluster launch control.

The interpreter runs the grid's first ``ctas`` CTAs (its usual persistent grid); the other
tiles' clusters have not started, and a request cancels the last of them (any not-started CTA
is a legal answer), so the running CTAs take every tile between them and a request fails
only when none is left. The response is written like a TMA load: 16 bytes that land in
``resp[slot]`` when the copy engine completes them and count on ``full[slot]``; reading
them before a wait on that phase is the interpreter's "read before the data arrived"
error, and the issuer reuses a slot only after every role arrived on ``empty[slot]``.
"""

from __future__ import annotations

from collections.abc import Generator

import torch

from pkc.dialects import schedule_clc as c
from pkc.dialects.schedule_structure import cluster_shape
from pkc.interp.schedule_ops import grouped_tile
from pkc.interp.schedule_rules import BLOCKED, blocking
from pkc.interp.schedule_state import Actor, Mbarrier, Smem, TmaLoad, Write, join
from pkc.interp.values import InterpError


def _wait(R, a: Actor, op, bar: Mbarrier, parity: int) -> Generator:
    """A parity wait on ``bar`` (as pks.mbarrier_wait)."""
    seen = a.seen.get(bar.key, 0)
    target = seen if seen % 2 == 1 - parity else seen + 1
    while bar.completed < target:
        a.blocked = (op, f"phase {target - 1} of {bar.name} to complete (parity {parity}); "
                         f"{bar.status()}")
        yield BLOCKED
    a.blocked = None
    if bar.completed > target:
        raise InterpError(f"{a.at(op)}: {bar.name} completed {bar.completed} phases, this role "
                          f"waits for phase {target - 1}: a role fell a whole phase behind")
    a.seen[bar.key] = target
    join(a.clock, bar.done_clock)


@blocking(c.ClcTileLoopOp)
def _clc_tile_loop(R, a: Actor, op: c.ClcTileLoopOp, env) -> Generator:
    """Tiles: this cluster's own, then the cancelled clusters' (module docstring). In a
    cluster, rank 0's issuer asks and the response lands in every CTA (multicast); every
    CTA's issuer announces its 16 bytes; every reader frees the slot on rank 0's empty."""
    cl = R.cluster
    if cl > 2 and not getattr(R, "pair", False):
        raise InterpError(f"{a.at(op)}: cluster launch control in clusters of {cl} (of single "
                          "CTAs; clusters of 4 are two CTA pairs)")
    bm, bn, gm = op.bm.data, op.bn.data, op.group_m.data
    cm, cn = cluster_shape(op)
    num_m, num_n = -(-env[op.m] // bm), -(-env[op.n] // bn)
    num_mc, num_nc = -(-num_m // cm), -(-num_n // cn)
    tiles = num_mc * num_nc
    pending = R.__dict__.setdefault("clc_pending", {}).setdefault(
        (a.rank, a.launch), list(range(R.ctas // cl, tiles)))
    base = a.cta - a.cta % cl
    resp: Smem = env[op.resp]
    full = env[op.full]
    lead_empty = R.cta_objs[a.rank, base][op.empty]
    at = a.at(op)
    tile, trip = a.cta // cl, 0
    carried = [env[v] for v in op.inits]
    while tile < tiles:
        slot, phase = trip % c.RING, (trip // c.RING) % 2
        if op.issuer.data:
            full[slot].arrive(a, op, c.RESPONSE_BYTES)
            if a.cta == base:
                yield from _wait(R, a, op, lead_empty[slot], phase ^ 1)
                nxt = pending.pop() if pending else None
                words = torch.tensor([1, nxt * cl, 0, 0] if nxt is not None else [0, 0, 0, 0],
                                     dtype=torch.int32)
                targets = []
                for cta in range(base, base + cl):
                    r_cta: Smem = R.cta_objs[a.rank, cta][op.resp]
                    r_cta.check_range(at, slot, 0, c.RESPONSE_BYTES)
                    r_cta.check_write(a, at, slot, 0, c.RESPONSE_BYTES)
                    rec = Write(0, c.RESPONSE_BYTES, op,
                                f"{at}: clusterlaunchcontrol.try_cancel", pending=True)
                    r_cta.begin_write(slot, rec)
                    targets.append((r_cta, slot, rec, R.cta_objs[a.rank, cta][op.full][slot]))
                R.loads.append(TmaLoad(op, at, lambda w=words: w.view(torch.uint8), targets))
            a.clock[a.aid] += 1
            R.version += 1
        mc, nc = grouped_tile(tile, num_mc, num_nc, gm)
        mb, nb = mc * cm + a.cta % cl % cm, nc * cn + a.cta % cl // cm
        R._count()
        carried = yield from R.run_block(a, op.block, env, [mb * bm, nb * bn, *carried])
        yield from _wait(R, a, op, full[slot], phase)
        resp.check_read(a, at, slot, 0, c.RESPONSE_BYTES, async_proxy=False)
        words = resp.bytes(slot, 0, c.RESPONSE_BYTES).clone().view(torch.int32)
        lead_empty[slot].arrive(a, op, 0)
        a.clock[a.aid] += 1
        R.version += 1
        tile = int(words[1]) // cl if int(words[0]) else tiles
        trip += 1
    for res, v in zip(op.res, carried):
        env[res] = v


__all__: list[str] = []
