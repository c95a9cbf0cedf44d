"""``mma.sync`` (the portable path's tensor-core op): one warp-wide matrix multiply-add
with the fragment layouts of PTX ISA 9.7.14.5.8 ("Matrix Fragments for mma.m16n8k16 with
floating point type") and 9.7.14.5.7 (m16n8k8).

With ``groupID = laneid >> 2`` and ``tig = laneid % 4``, for f16/bf16 inputs:

* A (16 x K, row-major), element i of a lane (two per b32 register, lower index in the
  low half): row ``groupID + 8 * ((i // 2) % 2)``, column ``tig * 2 + (i & 1) + 8 * (i // 4)``;
* B (K x 8, column-major), element i: row ``tig * 2 + (i & 1) + 8 * (i // 2)``, column
  ``groupID``;
* C and D (16 x 8 f32), element i: row ``groupID + 8 * (i // 2)``, column ``tig * 2 + (i & 1)``.

Arithmetic: products of f16/bf16 are exact; they are summed with C in f64 and rounded
once to f32. The tensor core's internal summation order and precision are not specified;
results can differ from the H200 in the last bits of f32 (docs/emulator.md).

``shfl.sync.idx`` (the other warp-collective register instruction) is here too: it needs
the same whole-warp grouping.
"""

from __future__ import annotations

import numpy as np

from pkc.codegen import ptx
from pkc.emu.errors import EmuUnsupported, EmuWarpError
from pkc.emu.machine import DEADLOCK_CLASS, EXPLAIN, WARP
from pkc.emu.registry import handles
from pkc.emu.values import bf16_to_f32

_LANE = np.arange(WARP)
_GID, _TIG = _LANE >> 2, _LANE % 4


def _a_map(k: int):
    n = 8 if k == 16 else 4
    return [(_GID + 8 * ((i // 2) % 2), _TIG * 2 + (i & 1) + 8 * (i // 4)) for i in range(n)]


def _b_map(k: int):
    n = 4 if k == 16 else 2
    return [(_TIG * 2 + (i & 1) + 8 * (i // 2), _GID) for i in range(n)]


_C_MAP = [(_GID + 8 * (i // 2), _TIG * 2 + (i & 1)) for i in range(4)]


def full_warps(m, g, size: int = WARP):
    """Which threads of ``g`` belong to a unit (warp, or ``size`` threads) that is wholly
    in the group; the units' thread numbers as rows."""
    unit = g.idx // size
    counts = np.bincount(unit - unit.min(), minlength=1) if g.n else np.zeros(0, dtype=int)
    ok = counts[unit - unit.min()] == size if g.n else np.zeros(0, dtype=bool)
    return ok, g.idx[ok].reshape(-1, size)


def _halves(x: np.ndarray, t: str) -> tuple[np.ndarray, np.ndarray]:
    lo = (x & np.uint32(0xFFFF)).astype(np.uint16)
    hi = (x >> np.uint32(16)).astype(np.uint16)
    if t == "bf16":
        return bf16_to_f32(lo), bf16_to_f32(hi)
    if t == "f16":
        return lo.view(np.float16).astype(np.float32), hi.view(np.float16).astype(np.float32)
    raise KeyError(t)


def _unpack(m, slots, rows, t):
    """Element i of each lane from packed 16-bit registers: [elements][warp, lane]."""
    out = []
    for s in slots:
        lo, hi = _halves(m.regs[s][rows], t)
        out += [lo, hi]
    return out


@handles(ptx.MmaSyncOp)
def _mma_sync(m, ins, g):
    """``mma.sync.aligned.<shape>.row.col.<d>.<a>.<b>.<c>`` (PTX ISA 9.7.14.5.14): every
    lane of the warp must execute it together (``.aligned``); lanes whose warp is not all
    here wait for the rest."""
    shape, types = ins.op.shape.data, ins.op.types.data
    dt, at, bt, ct = types.split(".")
    if shape not in ("m16n8k16", "m16n8k8") or at not in ("bf16", "f16") or dt != "f32":
        raise EmuUnsupported(f"mma.sync.{shape}.{types}", g.where(ins))
    k = int(shape.split("k")[1])
    ok, rows = full_warps(m, g)
    if rows.size == 0:
        return ok
    na, nb = len(ins.op.a), len(ins.op.b)
    a_slots, b_slots = ins.args[:na], ins.args[na:na + nb]
    c_slots = ins.args[na + nb:]
    nw = rows.shape[0]
    A = np.zeros((nw, 16, k))
    for (r, c), v in zip(_a_map(k), _unpack(m, a_slots, rows, at)):
        A[:, r, c] = v
    B = np.zeros((nw, k, 8))
    for (r, c), v in zip(_b_map(k), _unpack(m, b_slots, rows, bt)):
        B[:, r, c] = v
    C = np.zeros((nw, 16, 8))
    for (r, c), s in zip(_C_MAP, c_slots):
        C[:, r, c] = m.regs[s][rows].view(np.float32)
    D = (A @ B + C).astype(np.float32)
    for (r, c), s in zip(_C_MAP, ins.res):
        m.regs[s] = m.regs[s] if m.regs[s] is not None else np.zeros(m.N, dtype=np.float32)
        m.regs[s][rows] = D[:, r, c]
    return ok


def _explain_partial(m, ins, g):
    return ("a warp-collective instruction (.aligned) waits for the other lanes of its warp, "
            "which went elsewhere or exited")


@handles(ptx.ShflIdxOp)
def _shfl_idx(m, ins, g):
    """``shfl.sync.idx.b32 d, a, lane, 31, -1`` (PTX ISA 9.7.8.6): each lane gets ``a`` of
    lane ``lane & 31`` of its warp; the whole warp takes part (membermask -1), so lanes
    whose warp is not all here wait for the rest."""
    ok, rows = full_warps(m, g)
    if rows.size == 0:
        return ok
    src = m.regs[ins.args[0]]
    if src is None:
        src = m.regs[ins.args[0]] = m.new_reg(ins.args[0])
    lane = m.regs[ins.args[1]]
    if lane is None:
        lane = m.regs[ins.args[1]] = m.new_reg(ins.args[1])
    pick = lane[rows].astype(np.int64) & (WARP - 1)
    vals = np.take_along_axis(src[rows], pick, axis=1)
    out = m.regs[ins.res[0]]
    if out is None:
        out = m.regs[ins.res[0]] = m.new_reg(ins.res[0])
    out[rows] = vals
    return ok


EXPLAIN[ptx.MmaSyncOp] = _explain_partial
DEADLOCK_CLASS[ptx.MmaSyncOp] = EmuWarpError
EXPLAIN[ptx.ShflIdxOp] = _explain_partial
DEADLOCK_CLASS[ptx.ShflIdxOp] = EmuWarpError

__all__ = ["full_warps", "EmuWarpError"]
