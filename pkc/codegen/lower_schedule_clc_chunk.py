"""Lowers ``pks.clc_chunk_tile_loop`` (:mod:`pkc.dialects.schedule_clc_chunk`) for sm_100a:
a fused kernel's chunked tile loop under cluster launch control, work indices from a
ticket counter. Registered in the sm_100a op table of
:mod:`pkc.codegen.lower_schedule_tcgen05`; single CTAs only (the fused kernels are built
on single CTAs).

The issuer (one thread): ``atom.add`` on the rank's ticket word gives trip 0's index
(minus ``(epoch - 1) x total``: the tickets of the earlier launches), stored into slot 0
(byte 16) and published by an arrival on ``full[0]``. Trip i, next slot j = ``(i + 1) %
2``, phase ``((i + 1) / 2) % 2``: wait ``empty[j]`` (every reader read it two trips ago),
``mbarrier.arrive.expect_tx`` 16 bytes on ``got[j]`` (phase ``(i / 2) % 2``: trip 0's index
came from no request), ``clusterlaunchcontrol.try_cancel``
into slot j's bytes 0..15; the body; wait ``got[j]``, decode
(``clusterlaunchcontrol.query_cancel``); a cancel takes the next ticket, a failure gives
the total (the loop ends); store the index, arrive on ``full[j]``. After the loop it adds
its successful cancels to ``ctl``'s done word (the cancelled CTAs never count themselves
for ``pks.epoch_publish``).

A reader role: wait ``full[0]`` phase 0, read slot 0's index, meet (a warpgroup: every
thread read it), one thread arrives on ``empty[0]``; after trip i's body the same on slot
j. The tile of index t: slot ``t / tiles``, chunk ``(first + slot) mod chunks``, grouped
order inside the chunk (as :func:`pkc.codegen.lower_schedule.lower_tile_loop`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pkc.codegen import ptx, ptx_sm90
from pkc.codegen import ptx_sm100_ext as x5
from pkc.codegen.errors import CodegenError
from pkc.dialects.schedule_clc_chunk import INDEX_OFFSET, RESPONSE_BYTES, SLOT_BYTES

if TYPE_CHECKING:
    from pkc.codegen.lower_schedule import Lowering


def _slot(b, L, op, trip):
    """(slot's shared address, full, empty, got mbarriers, phase) of ``trip``."""
    j = b.bin("and", "b32", trip, 1)
    phase = b.bin("and", "b32", b.bin("shr", "u32", trip, 1), 1)
    addr = b.r(ptx.FmaOp(j, b.u32(SLOT_BYTES), L.smem_base[op.ring], "u32", "mad.lo"))
    bars = [b.r(ptx.FmaOp(j, b.u32(8), L.bar_base[v], "u32", "mad.lo"))
            for v in (op.full, op.empty, op.got)]
    return addr, *bars, phase


def _publish(b, addr, full, idx) -> None:
    """The issuer stores the index and arrives (release) on ``full``."""
    b.st("shared", "u32", b.add32(addr, INDEX_OFFSET), idx)
    b.add(ptx_sm90.MbarrierArriveOp(full))


def _read(b, L, addr, full, empty, phase):
    """A reader: waits for the index, reads it, frees the slot (one arrival per role)."""
    b.add(ptx_sm90.MbarrierWaitParityOp(full, phase, L.deadline))
    idx = b.ld("shared", "u32", b.add32(addr, INDEX_OFFSET))
    guard = None
    if L.role is None or L.role.single_thread is None:
        # every thread of the warpgroup read it before the one arrival
        b.add(ptx_sm90.NamedBarrierOp(b.add32(L.warpgroup(), 1), 128))
        guard = L.lead()
    b.add(ptx_sm90.MbarrierArriveOp(empty, guard=guard))
    return idx


def lower_clc_chunk_tile_loop(L: "Lowering", op) -> None:
    from pkc.codegen.lower_schedule import _op
    b = L.b
    if L.sched.cluster.data != 1:
        raise CodegenError(f"{op.name}: lowered for single CTAs (cluster of "
                           f"{L.sched.cluster.data})")
    issuer = bool(op.issuer.data)
    if issuer and (L.role is None or L.role.single_thread is None):
        raise CodegenError(f"{op.name}: the issuer is a single_thread role")
    bm, bn, gm, chunks = op.bm.data, op.bn.data, op.group_m.data, op.chunks.data
    M, N = L.v(op.m), L.v(op.n)
    num_m = b.bin("div", "u32", b.add32(M, bm - 1), bm)
    num_n = b.bin("div", "u32", b.add32(N, bn - 1), bn)
    tiles = b.mul32(num_m, num_n)
    total = b.mul32(tiles, chunks)
    group_sz = b.mul32(num_n, gm)
    tick = L.buffers[op.tick]
    # this launch's tickets start at (epoch - 1) x total (u32 arithmetic wraps as the
    # counter does)
    base = b.mul32(b.bin("sub", "u32", L.v(op.epoch), 1), total)
    zero = b.u32(0)
    addr0, full0, empty0, _, _ = _slot(b, L, op, zero)
    if issuer:
        first = b.bin("sub", "u32", b.r(ptx.AtomOp("add", "u32", tick, b.u32(1))), base)
        _publish(b, addr0, full0, first)
    else:
        first = _read(b, L, addr0, full0, empty0, zero)
    loop, body = b.for_carried(first, total, 0, [zero, *[L.v(x) for x in op.inits]], "u32",
                               next_iv=True)
    tile, trip, *carried = body.args
    with b.at(body):
        nxt_trip = b.add32(trip, 1)
        addr, full, empty, got, phase = _slot(b, L, op, nxt_trip)
        if issuer:
            b.add(ptx_sm90.MbarrierWaitParityOp(empty, b.bin("xor", "b32", phase, 1),
                                                L.deadline))
            b.add(ptx_sm90.MbarrierArriveOp(got, b.u32(RESPONSE_BYTES)))
            b.add(x5.ClcTryCancelOp(addr, got, False))
        # the tile of index `tile` (the static chunked loop's order)
        slot = b.bin("div", "u32", tile, tiles)
        t = b.bin("sub", "u32", tile, b.mul32(slot, tiles))
        chunk = b.add32(L.v(op.first), slot)
        chunk = b.bin("rem", "u32", chunk, chunks)
        g = b.bin("div", "u32", t, group_sz)
        f0 = b.mul32(g, gm)
        gsz = b.bin("min", "u32", b.bin("sub", "u32", num_m, f0), gm)
        r = b.bin("sub", "u32", t, b.mul32(g, group_sz))
        m0, n0, ch, *args = op.block.args
        L.vals[m0] = b.mul32(b.add32(f0, b.bin("rem", "u32", r, gsz)), bm)
        L.vals[n0] = b.mul32(b.bin("div", "u32", r, gsz), bn)
        L.vals[ch] = chunk
        for a, c in zip(args, carried):
            L.vals[a] = c
        for inner in list(op.block.ops)[:-1]:
            _op(L, inner)
        vals = [L.v(x) for x in op.block.last_op.operands]
        if issuer:
            # got[j] serves no request for trip 0's index: its phase is one use behind
            got_phase = b.bin("and", "b32", b.bin("shr", "u32", trip, 1), 1)
            b.add(ptx_sm90.MbarrierWaitParityOp(got, got_phase, L.deadline))
            q = b.add(x5.ClcQueryOp(addr))
            # only a cancel takes a ticket: where none was cancelled the atom adds 0
            inc = b.selp("b32", b.u32(1), zero, q.canceled)
            ticket = b.bin("sub", "u32", b.r(ptx.AtomOp("add", "u32", tick, inc)), base)
            nxt = b.selp("b32", ticket, total, q.canceled)
            _publish(b, addr, full, nxt)
        else:
            nxt = _read(b, L, addr, full, empty, phase)
        b.add(ptx.YieldOp([nxt, nxt_trip, *vals]))
    trips = loop.res[0]
    if issuer:
        # the CTAs it cancelled (every trip but the last came from a cancel) count as done
        # (none where it ran one tile, or none: a first index past the total)
        done = b.add64(L.buffers[op.ctl], 4)
        with b.if_(b.setp("gt", "u32", trips, 1)):
            b.add(ptx.AtomOp("add", "u32", done, b.bin("sub", "u32", trips, 1)))
    for res, val in zip(op.res, loop.res[1:]):
        L.vals[res] = val


__all__ = ["lower_clc_chunk_tile_loop"]
