"""Interpreter rule of ``pks.clc_chunk_tile_loop`` (:mod:`pkc.dialects.schedule_clc_chunk`):
a fused kernel's chunked tile loop under cluster launch control, work indices from a
ticket counter.

The interpreter runs the grid's first ``ctas`` CTAs (its usual persistent grid); the grid
of the launch is one CTA per work index, so the other ``total - ctas`` have not started
and every request cancels one of them while any is left. Which one does not matter: the
index comes from the rank's ticket word (``tick``), in the order the issuers take them.
The response is written like a TMA load (16 bytes landing in the slot and counting on
``got``); the index is a generic write of the issuer published by its arrival on
``full``; a reader's read is recorded, so an issuer that rewrote a slot before every
reader arrived on ``empty`` is an error naming both. At its loop's end the issuer adds
its cancels to ``ctl``'s done word, and ``pks.epoch_publish`` counts against the launch's
grid (``R.launch_ctas``), not the CTAs the interpreter runs.
"""

from __future__ import annotations

from collections.abc import Generator

import torch

from pkc.dialects import schedule_clc_chunk as c
from pkc.interp.schedule_clc import _wait
from pkc.interp.schedule_ops import grouped_tile
from pkc.interp.schedule_rules import blocking
from pkc.interp.schedule_state import Actor, Read, Smem, TmaLoad, Write
from pkc.interp.values import InterpError

U32 = 0xFFFFFFFF
IDX = (c.INDEX_OFFSET, c.INDEX_OFFSET + 4)


def _take_ticket(R, a: Actor, op, base: int, total: int) -> int:
    """The rank's next ticket, as this launch's work index."""
    w = R.gbuf(op.tick, a.rank).words
    t = int(w[0]) & U32
    w[0] = ((t + 1 + 2**31) & U32) - 2**31
    idx = (t - base) & U32
    if idx >= total:
        raise InterpError(f"{a.at(op)}: ticket {t} is work index {idx} of a launch of {total} "
                          "(the ticket counter is out of step with the epoch: every launch must "
                          "take exactly one ticket per CTA of its grid)")
    return idx


def _publish(R, a: Actor, op, ring: Smem, slot: int, full, idx: int) -> None:
    at = a.at(op)
    ring.check_write(a, at, slot, *IDX)
    rec = Write(*IDX, op, f"{at}: the work index", actor=a.aid, epoch=a.epoch)
    ring.finish_write(slot, rec, torch.tensor([idx & U32], dtype=torch.int64)
                      .to(torch.int32).view(torch.uint8))
    full[slot].arrive(a, op, 0)
    a.clock[a.aid] += 1
    R.version += 1


def _read(R, a: Actor, op, ring: Smem, slot: int, full, empty, phase: int) -> Generator:
    at = a.at(op)
    yield from _wait(R, a, op, full[slot], phase)
    ring.check_read(a, at, slot, *IDX, async_proxy=False)
    idx = int(ring.bytes(slot, *IDX).clone().view(torch.int32)[0]) & U32
    ring.add_read(slot, Read(*IDX, op, f"{at}", a.aid, "read of the work index", epoch=a.epoch))
    empty[slot].arrive(a, op, 0)
    a.clock[a.aid] += 1
    R.version += 1
    return idx


@blocking(c.ClcChunkTileLoopOp)
def _clc_chunk_tile_loop(R, a: Actor, op: c.ClcChunkTileLoopOp, env) -> Generator:
    """Index t: slot t / tiles, chunk (first + slot) mod chunks, grouped order inside the
    chunk (module docstring)."""
    if R.cluster != 1:
        raise InterpError(f"{a.at(op)}: the chunked CLC loop in clusters of {R.cluster}")
    bm, bn, gm, chunks = op.bm.data, op.bn.data, op.group_m.data, op.chunks.data
    num_m, num_n = -(-env[op.m] // bm), -(-env[op.n] // bn)
    tiles = num_m * num_n
    total = tiles * chunks
    if R.ctas > total:
        raise InterpError(f"{a.at(op)}: {R.ctas} CTAs run for {total} work indices")
    R.launch_ctas = total
    key = (a.rank, a.launch)
    not_started = R.__dict__.setdefault("clc_chunk_left", {})
    not_started.setdefault(key, total - R.ctas)
    first = int(env[op.first])
    base = ((int(env[op.epoch]) - 1) * total) & U32
    ring: Smem = env[op.ring]
    got, full, empty = env[op.got], env[op.full], env[op.empty]
    issuer = bool(op.issuer.data)
    at = a.at(op)
    if issuer:
        tile = _take_ticket(R, a, op, base, total)
        _publish(R, a, op, ring, 0, full, tile)
    else:
        tile = yield from _read(R, a, op, ring, 0, full, empty, 0)
    carried = [env[v] for v in op.inits]
    trip = 0
    while tile < total:
        # the next trip's slot and the phase of its full / empty; got[j] has no use for
        # the first index (a ticket, no request), so its phase is one use behind
        j, phase = (trip + 1) % c.RING, ((trip + 1) // c.RING) % 2
        got_phase = (trip // c.RING) % 2
        if issuer:
            yield from _wait(R, a, op, empty[j], phase ^ 1)
            got[j].arrive(a, op, c.RESPONSE_BYTES)
            cancel = not_started[key] > 0
            not_started[key] -= int(cancel)
            words = torch.tensor([int(cancel), 0, 0, 0], dtype=torch.int32)
            ring.check_range(at, j, 0, c.RESPONSE_BYTES)
            ring.check_write(a, at, j, 0, c.RESPONSE_BYTES)
            rec = Write(0, c.RESPONSE_BYTES, op, f"{at}: clusterlaunchcontrol.try_cancel",
                        pending=True)
            ring.begin_write(j, rec)
            R.loads.append(TmaLoad(op, at, lambda w=words: w.view(torch.uint8),
                                   [(ring, j, rec, got[j])]))
            a.clock[a.aid] += 1
            R.version += 1
        slot = tile // tiles
        chunk = (first + slot) % chunks
        mb, nb = grouped_tile(tile % tiles, num_m, num_n, gm)
        R._count()
        carried = yield from R.run_block(a, op.block, env, [mb * bm, nb * bn, chunk, *carried])
        if issuer:
            yield from _wait(R, a, op, got[j], got_phase)
            ring.check_read(a, at, j, 0, c.RESPONSE_BYTES, async_proxy=False)
            canceled = bool(int(ring.bytes(j, 0, c.RESPONSE_BYTES).clone().view(torch.int32)[0]))
            nxt = _take_ticket(R, a, op, base, total) if canceled else total
            _publish(R, a, op, ring, j, full, nxt)
        else:
            nxt = yield from _read(R, a, op, ring, j, full, empty, phase)
        tile = nxt
        trip += 1
    if issuer and trip > 1:
        # the cancelled CTAs never run: they count as done for pks.epoch_publish
        w = R.gbuf(op.ctl, a.rank).words
        w[1] += trip - 1
        R.version += 1
    for res, v in zip(op.res, carried):
        env[res] = v


__all__: list[str] = []
