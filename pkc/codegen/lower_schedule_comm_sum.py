"""Lowers ``pks.vec_sum_slots`` (:mod:`pkc.dialects.schedule_comm_sum`): a scheduled
collective's rank-order sum of a vector's W slots as a loop over the slots.

Slot 0 is loaded and widened to f32 before the loop (the sum starts from it, as the
unrolled form's first operand: no ``0 + x``, which would turn a -0 into +0); the next
``(count - 1) % UNROLL`` slots follow straight-line; the loop then takes ``UNROLL`` slots
per trip (their loads in flight together), adding each in slot order with ``add.rn.f32``
into the carried partial sums (8 f32 for a bf16 / f16 vector, 4 for f32), and the sums are
rounded once at the end, as ``pks.vec_sum``. The loop runs over vector offsets, from
``index + offset + (1 + pre) * stride`` below ``index + offset + count * stride`` by
``UNROLL * stride``: ``stride`` is a launch parameter (a chunk's vectors), so ptxas does
not know the trip count and cannot unroll the loop back into W loads in flight (the spills
this op exists to avoid). Registers: the partial sums + UNROLL x 4 loaded words, whatever W.
"""

from __future__ import annotations

from pkc.codegen import ptx, ptx_sm90
from pkc.codegen.lower_schedule import EXTRA_LOWERINGS, Lowering
from pkc.codegen.lower_schedule_comm import _comm, _guard, _widen
from pkc.codegen.ptx_comm import LdV4Op
from pkc.dialects.schedule_comm_sum import VecSumSlotsOp

UNROLL = 4       # slots per loop trip: 16 loaded words + 8 sums, under the 64-register cap


def _ld(L: Lowering, ptr, vec_index, guard, cache: str) -> LdV4Op:
    """``ld.global.v4`` of vector ``vec_index`` at ``ptr`` (where ``guard`` holds)."""
    b = L.b
    addr = b.add64(b.bin("mul.wide", "u32", vec_index, 16, result_kind="b64"), ptr)
    return b.add(LdV4Op(addr, guard=guard, cache=cache))


def _f32(L: Lowering, ld: LdV4Op, dtype: str) -> list:
    """The f32 values of a loaded vector (8 for bf16 / f16, 4 for f32), in element order."""
    return [f for word in ld.res for f in _widen(L, word, dtype)]


def _add(L: Lowering, acc: list, parts: list) -> list:
    return [L.b.bin("add.rn", "f32", a, p) for a, p in zip(acc, parts)]


def _vec_sum_slots(L: Lowering, op: VecSumSlotsOp) -> None:
    b, dt, count = L.b, op.dtype.data, op.count.data
    cache = op.cache.data
    g = _guard(L, op.index, op.bound, None)
    ptr, stride = L.v(op.ptr), L.v(op.stride)
    first = b.add32(L.v(op.index), L.v(op.offset))          # vector of slot 0
    acc = _f32(L, _ld(L, ptr, first, g, cache), dt)
    pre = (count - 1) % UNROLL
    at = first
    for _ in range(pre):
        at = b.add32(at, stride)
        acc = _add(L, acc, _f32(L, _ld(L, ptr, at, g, cache), dt))
    if count - 1 - pre:
        lb = b.add32(at, stride)
        ub = b.add32(first, b.mul32(stride, count))
        loop, body = b.for_carried(lb, ub, b.mul32(stride, UNROLL), acc, "u32",
                                   at_least_once=True)
        with b.at(body):
            iv, *carried = body.args
            loads, v = [], iv
            for u in range(UNROLL):          # all UNROLL loads first: in flight together
                if u:
                    v = b.add32(v, stride)
                loads.append(_ld(L, ptr, v, g, cache))
            carried = list(carried)
            for ld in loads:
                carried = _add(L, carried, _f32(L, ld, dt))
            b.add(ptx.YieldOp(carried))
        acc = list(loop.res)
    if dt == "f32":
        out = [b.mov(x, "b32", "b32") for x in acc]
    else:
        out = [b.r(ptx_sm90.CvtPackOp(dt, acc[2 * k], acc[2 * k + 1])) for k in range(4)]
    _comm(L).vecs[op.result] = out


EXTRA_LOWERINGS[VecSumSlotsOp] = _vec_sum_slots
