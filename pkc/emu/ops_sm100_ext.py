"""Handlers of the Blackwell instructions of :mod:`pkc.codegen.ptx_sm100_ext`: stores to
tensor memory, shared-to-tensor-memory copies, the row shift and cluster launch control,
with their misuse as named errors. Tensor memory and the tcgen05 bookkeeping (which
thread's asynchronous operation last wrote a column, the commits that covered it) are
:mod:`pkc.emu.ops_sm100`'s.

* ``tcgen05.st.sync.aligned.32x32b.xN`` (PTX ISA 9.7.16.8.4): warp w writes lanes
  ``32 (w % 4) ..`` only; the values are taken at the st and land at the thread's
  ``tcgen05.wait::st`` (9.7.16.8.5). A tcgen05.ld or tcgen05.mma touching those columns
  before the wait, and a launch ending with stores not waited for, are
  :class:`EmuTensorMemoryError`.
* ``tcgen05.cp.cta_group::1.128x256b`` / ``.128x128b`` (9.7.16.9.2): row r of the source
  (shared-memory descriptor, 9.7.16.4.1, read as K-major 16-bit data: 32 / 16 bytes per
  row) goes to lane r, 8 / 4 columns from ``col(taddr)``. Asynchronous like tcgen05.mma:
  the columns are the issuing thread's until a commit covers them and a wait on the
  commit's mbarrier phase orders a tcgen05.ld after it.
* ``tcgen05.shift.cta_group::N.down`` (9.7.16.9.3): 32-byte elements (8 columns) of rows
  ``lane(taddr) .. 126`` move one row down (row 127's are dropped, row ``lane(taddr)``
  keeps its own); ``lane(taddr)`` a multiple of 32; with ``::2`` in both CTAs of the pair.
* ``clusterlaunchcontrol.try_cancel`` (9.7.13.17): cancels the last cluster of the rank
  not started yet (the machine's ``pending`` queue; any not-started cluster is legal) and
  writes the 16-byte response - the emulator's own encoding: u32 canceled, u32 x, y, z of
  its first CTA - through the async proxy: the bytes are pending on the mbarrier (of each
  CTA, with ``.multicast::cluster::all``), which counts 16 transaction bytes. Another
  request after the CTA read a "not canceled" response is undefined (an error here).
* ``clusterlaunchcontrol.query_cancel`` (9.7.13.18, with the load of the response): the
  response must be one a try_cancel wrote, and its mbarrier waited on (else "a CLC
  response read before its mbarrier completed").
"""

from __future__ import annotations

import numpy as np

from pkc.codegen import ptx_sm100_ext as x5
from pkc.emu.errors import EmuAsyncProxyError, EmuError, EmuTensorMemoryError, EmuUnsupported
from pkc.emu.machine import WARP
from pkc.emu.ops_async import complete_tx, mbar_keys
from pkc.emu.ops_mma import full_warps
from pkc.emu.ops_sm100 import (_allocated, _operand_addrs, _tmem, check_group, decode_smem_desc,
                               pair_ctas, read_operand)
from pkc.emu.registry import AT_EXIT, handles


def _fail(m, g, ins, i, msg):
    m.fail(EmuTensorMemoryError, msg, g, ins, i)


def _group(op) -> int:
    return 1 if op.cta_group is None else op.cta_group.data


# ---------------------------------------------------------------------------------------
# tcgen05.st

def _stores(m) -> dict:
    """{thread: [(cta, lane, first column, values, ins)]}: stores not yet waited for."""
    return m.state.setdefault("tc_st_pending", {})


def stores_in_flight(m, cta: int, col: int, n: int):
    """The first in-flight tcgen05.st (thread, ins) of CTA ``cta`` touching columns
    ``col .. col + n``, or None."""
    for t, items in _stores(m).items():
        for c, _lane, c0, vals, ins in items:
            if c == cta and c0 < col + n and col < c0 + vals.size:
                return t, ins
    return None


def flush_stores(m, threads) -> None:
    """``tcgen05.wait::st`` of ``threads``: their stores land."""
    pend = _stores(m)
    for t in threads:
        for cta, lane, c0, vals, _ins in pend.pop(t, []):
            tm = _tmem(m, cta)
            tm.cells[lane, c0:c0 + vals.size] = vals
            tm.written[c0:c0 + vals.size] = True


@handles(x5.Tcgen05StOp)
def _st(m, ins, g):
    """``tcgen05.st.sync.aligned.32x32b.x<num>.b32 [taddr], {r..}``: lane l of warp w writes
    tensor-memory lane ``lane(taddr) + l`` (= ``32 (w % 4) + l``), ``num`` columns."""
    ok, rows = full_warps(m, g)
    if rows.size == 0:
        return ok
    num = ins.op.num.data
    first = np.flatnonzero(ok)
    pend = _stores(m)
    for w in range(rows.shape[0]):
        thr = rows[w]
        i = int(first[w * WARP])
        taddr = m.regs[ins.args[0]][thr].astype(np.int64)
        if (taddr != taddr[0]).any():
            _fail(m, g, ins, i, "tcgen05.st .sync.aligned with different addresses in one warp")
        lane0, col = int(taddr[0]) >> 16, int(taddr[0]) & 0xFFFF
        warp = int(m.tid_of[thr[0]]) // WARP
        if lane0 != 32 * (warp % 4):
            _fail(m, g, ins, i, f"warp {warp} writes tensor-memory lanes {lane0}.. (a warp reaches "
                                f"lanes {32 * (warp % 4)}..{32 * (warp % 4) + 31} only)")
        cta = int(m.cta_of[thr[0]])
        tm = _tmem(m, cta)
        if not _allocated(tm, col, num):
            _fail(m, g, ins, i, f"tcgen05.st to columns {col}..{col + num - 1} outside the CTA's "
                                "tensor-memory allocations")
        if (tm.owner[col:col + num] >= 0).any() and not all(tm.tokens[c] for c in range(col, col + num)
                                                          if tm.owner[c] >= 0):
            _fail(m, g, ins, i, "tcgen05.st to tensor memory an MMA / copy still writes (no "
                                "tcgen05.commit covered it)")
        vals = np.stack([m.regs[s][thr] if m.regs[s] is not None else np.zeros(WARP, np.uint32)
                         for s in ins.args[1:]], axis=1).view(np.uint32)
        for k, t in enumerate(thr.tolist()):
            pend.setdefault(t, []).append((cta, lane0 + k, col, vals[k].copy(), ins))
    return ok


def _check_stores_waited(m) -> None:
    for t, items in sorted(_stores(m).items()):
        if items:
            raise EmuTensorMemoryError("a tcgen05.st was never waited for (no tcgen05.wait::st "
                                       "before the thread exited)", m.where(t, items[0][4]))


AT_EXIT.append(_check_stores_waited)


# ---------------------------------------------------------------------------------------
# tcgen05.cp and tcgen05.shift (asynchronous, like tcgen05.mma: completed by a commit)

def _issued(tm, cols: slice, t: int) -> None:
    tm.written[cols] = True
    tm.owner[cols] = t
    for c in range(cols.start, cols.stop):
        tm.tokens[c] = {}


@handles(x5.Tcgen05CpOp)
def _cp(m, ins, g):
    """``tcgen05.cp.cta_group::1.{128x256b,128x128b} [taddr], s-desc`` (PTX ISA 9.7.16.9.2),
    issued by each active thread on its own."""
    for i in range(g.n):
        t = int(g.idx[i])
        group = _group(ins.op)
        check_group(m, g, ins, i, group)
        shape = ins.op.shape.data
        if group != 1 or shape not in ("128x256b", "128x128b"):
            raise EmuUnsupported(f"tcgen05.cp.cta_group::{group}.{shape} (modelled: cta_group::1, "
                                 "128x256b and 128x128b)", g.where(ins, i))
        cta = int(m.cta_of[t])
        tm = _tmem(m, cta)
        taddr = int(m.regs[ins.args[0]][t])
        lane, col = taddr >> 16, taddr & 0xFFFF
        ncols = 8 if shape == "128x256b" else 4
        if lane or not _allocated(tm, col, ncols):
            _fail(m, g, ins, i, f"tcgen05.cp writes lanes {lane}.., columns {col}..{col + ncols - 1} "
                                "outside the CTA's tensor-memory allocations")
        f = decode_smem_desc(int(m.regs[ins.args[1]][t]))
        if f["version"] != 1 or f["base"] or f["lbo_mode"]:
            _fail(m, g, ins, i, f"tcgen05.cp shared-memory descriptor {f}: the fixed constant "
                                "0b001 in bits 46-48, base offset 0 and relative LBO are modelled")
        addrs = _operand_addrs(f, 128, False)[0][:, :2 * ncols]    # 16-bit halves of each cell
        half = read_operand(m, g, ins, i, cta, addrs, "f16").astype(np.float16).view(np.uint16)
        cells = half[:, 0::2].astype(np.uint32) | (half[:, 1::2].astype(np.uint32) << 16)
        tm.cells[:, col:col + ncols] = cells
        _issued(tm, slice(col, col + ncols), t)


@handles(x5.Tcgen05ShiftOp)
def _shift(m, ins, g):
    """``tcgen05.shift.cta_group::N.down [taddr]`` (PTX ISA 9.7.16.9.3)."""
    for i in range(g.n):
        t = int(g.idx[i])
        group = _group(ins.op)
        check_group(m, g, ins, i, group)
        taddr = int(m.regs[ins.args[0]][t])
        lane, col = taddr >> 16, taddr & 0xFFFF
        if lane % 32:
            _fail(m, g, ins, i, f"tcgen05.shift at lane {lane}: the lane must be a multiple of 32")
        for c in pair_ctas(m, int(m.cta_of[t]), group):
            tm = _tmem(m, c)
            if not _allocated(tm, col, 8) or not tm.written[col:col + 8].all():
                _fail(m, g, ins, i, f"tcgen05.shift of columns {col}..{col + 7} (CTA {c % m.ctas}), "
                                    "which are not allocated or hold nothing written")
            tm.cells[lane + 1:, col:col + 8] = tm.cells[lane:-1, col:col + 8].copy()
            _issued(tm, slice(col, col + 8), t)


# ---------------------------------------------------------------------------------------
# Cluster launch control

def _responses(m) -> dict:
    """{flat shared index of a response: the CTA it was written for}."""
    return m.state.setdefault("clc_responses", {})


@handles(x5.ClcTryCancelOp)
def _try_cancel(m, ins, g):
    """``clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes
    {.multicast::cluster::all}.b128 [addr], [mbar]`` (PTX ISA 9.7.13.17)."""
    S = m.smem.size
    failed = m.state.setdefault("clc_failed", set())
    keys = mbar_keys(m, ins, g, g.get(ins.args[1]))
    addr = g.get(ins.args[0]).astype(np.int64)
    for i in range(g.n):
        t = int(g.idx[i])
        cta, rank = int(m.cta_of[t]), int(m.rank_of[t])
        if cta in failed:
            m.fail(EmuError, "clusterlaunchcontrol.try_cancel after this CTA read a response that "
                              "said 'not canceled' (undefined behaviour, PTX ISA 9.7.13.17)", g, ins, i)
        a = int(addr[i]) & 0xFFFFFF
        if a % 16 or a + 16 > m.smem.declared:
            m.fail(EmuError, f"clusterlaunchcontrol response at shared 0x{a:x}: 16-byte aligned "
                              "inside the CTA's shared memory", g, ins, i)
        queue = m.pending.get(rank)
        if queue:
            first = queue.pop()             # the last not-started cluster of the rank
            words = np.array([1, first - rank * m.ctas, 0, 0], dtype=np.uint32)
        else:
            words = np.zeros(4, dtype=np.uint32)
        base = int(m.cluster_base_of[t])
        targets = range(base, base + m.cluster) if ins.op.multicast is not None else [cta]
        for c in targets:
            flat = c * S + a
            m.smem.data[flat:flat + 16] = words.view(np.uint8)
            m.smem.pending[flat:flat + 16] = int(keys[i]) % S + 1
            _responses(m)[flat] = c
            complete_tx(m, c * S + int(keys[i]) % S, x5.CLC_RESPONSE_BYTES)


@handles(x5.ClcQueryOp)
def _query(m, ins, g):
    """``ld.shared.b128`` of a response and ``clusterlaunchcontrol.query_cancel.is_canceled``
    / ``.get_first_ctaid::x`` (PTX ISA 9.7.13.18)."""
    S = m.smem.size
    addr = g.get(ins.args[0]).astype(np.int64) & 0xFFFFFF
    flat = g.cta.astype(np.int64) * S + addr
    resp = _responses(m)
    canceled = np.zeros(g.n, dtype=bool)
    xs = np.zeros(g.n, dtype=np.uint32)
    for i in range(g.n):
        f = int(flat[i])
        if f not in resp:
            m.fail(EmuAsyncProxyError, f"clusterlaunchcontrol.query_cancel of shared 0x{int(addr[i]):x}, "
                                       "where no clusterlaunchcontrol.try_cancel wrote a response",
                   g, ins, i)
        if m.smem.pending[f:f + 16].any():
            m.fail(EmuAsyncProxyError, "a CLC response read before its mbarrier completed: "
                                       "clusterlaunchcontrol.query_cancel of the try_cancel response "
                                       f"at shared 0x{int(addr[i]):x} before a wait on the mbarrier "
                                       "its 16 bytes complete on", g, ins, i)
        words = m.smem.data[f:f + 16].view(np.uint32)
        canceled[i], xs[i] = bool(words[0]), words[1]
        if not words[0]:
            m.state.setdefault("clc_failed", set()).add(int(g.cta[i]))
    g.set(ins.res[0], canceled)
    g.set(ins.res[1], xs)


__all__ = ["flush_stores", "stores_in_flight"]

# the stage-release rule of MMAs' shared-memory operands (registers its hooks)
from pkc.emu import ops_sm100_cluster as _stage_release  # noqa: E402,F401
