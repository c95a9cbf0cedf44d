"""Handlers of the Hopper instructions (:mod:`pkc.codegen.ptx_sm90`): warpgroup MMA from
shared-memory descriptors, TMA tensor copies, cluster mbarriers and barriers, ``mapa``,
``setmaxnreg``, packed conversions, ``trap``.

wgmma (PTX ISA 9.7.15): ``m64nNk16`` with A and B in shared memory. A descriptor
(9.7.15.5.1.2) holds the start address >> 4 (bits 0-13), the leading byte offset (LBO,
16-29) and stride byte offset (SBO, 32-45), both >> 4, and the swizzle mode (62-63:
0 none, 1 128B, 2 64B, 3 32B). With a swizzle, a K-major operand's row i (of M or N),
element k is at ``start + (i / 8) * SBO + (i % 8) * 128 + 2k``; an MN-major operand's
(k, i) at ``start + (i / 64) * LBO + (k / 8) * SBO + (k % 8) * 128 + 2 (i % 64)`` (64
elements of 2 bytes per 128-byte row); then the swizzle of the address bits
(:func:`pkc.emu.tensormap.swizzle`). Without a swizzle, 8x16-byte core matrices: K-major
``start + (i / 8) * SBO + (k / 8) * LBO + (i % 8) * 16 + 2 (k % 8)``.

The accumulator (9.7.15.5.1.1, m64nN f32): thread t of the warpgroup (warp w = t / 32,
lane l) holds register ``4j + 2r + c`` = row ``16w + l/4 + 8r``, column
``8j + 2(l % 4) + c``, from the op's ``first`` register of the block.

MMAs are computed when issued, with the H200's arithmetic (:func:`accumulate_h200`:
products and accumulator aligned to the largest exponent and truncated, the sum truncated
to f32), but their
accumulator is *in flight* until ``wgmma.wait_group`` retires its group: reading it
before is an error, as is issuing an MMA on shared memory that generic stores wrote
without ``fence.proxy.async`` or that a TMA load has not completed.
"""

from __future__ import annotations

import numpy as np
import torch

from pkc.codegen import ptx, ptx_sm90
from pkc.emu.errors import (EmuAsyncProxyError, EmuError, EmuRegisterBudgetError,
                            EmuUnsupported, EmuWarpError)
from pkc.emu.machine import CLUSTER_BARRIER, DEADLOCK_CLASS, EXPLAIN, check_bad
from pkc.emu.memory import CLUSTER_SHIFT, GLOBAL_BASE
from pkc.emu.ops_async import (arrive, check_async_reads_smem, complete_tx, mbar_keys, mbars,
                               observed, reduce_add, start_async_read)
from pkc.emu.ops_memory import active_of
from pkc.emu.ops_mma import full_warps
from pkc.emu.registry import BRANCHED, handles
from pkc.emu.tensormap import TensorMap, box_elements, swizzle
from pkc.emu.values import bf16_to_f32, f32_to_bf16, f32_to_f16

WG = 128
MAX_REGS = 65536
_SWIZZLE_OF_MODE = {0: 0, 1: 128, 2: 64, 3: 32}
_FP8_TORCH = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


def fp8_bytes_to_f32(data: np.ndarray, dtype: str) -> np.ndarray:
    """8-bit floats (``e4m3`` = f8E4M3FN, ``e5m2``) as f32: exact (every fp8 value is an
    f32, and so is the product of two)."""
    raw = torch.from_numpy(np.ascontiguousarray(data, dtype=np.uint8))
    return raw.view(_FP8_TORCH[dtype]).float().numpy()


# ---------------------------------------------------------------------------------------
# Register blocks.

@handles(ptx_sm90.FragAllocOp)
def _frag_alloc(m, ins, g):
    """Declares an accumulator block: poisoned (NaN), so a read of an element no MMA wrote
    shows in the output."""
    arr = m.regs[ins.res[0]]
    if arr is None:
        arr = m.regs[ins.res[0]] = m.new_reg(ins.res[0])
    arr[g.idx] = np.nan


@handles(ptx_sm90.FragGetOp)
def _frag_get(m, ins, g):
    """One register of a block; an error while an MMA that writes it is in flight."""
    inflight = _inflight(m).get(ins.args[0])
    if inflight is not None:
        busy = np.isin(g.idx // WG, list(inflight))
        if busy.any():
            i = int(np.flatnonzero(busy)[0])
            m.fail(EmuError, "accumulator read while a wgmma that writes it is in flight "
                             "(no wgmma.wait_group retired its group)", g, ins, i)
    g.set(ins.res[0], g.get(ins.args[0])[:, ins.op.index.data])


@handles(ptx_sm90.FragSetOp)
def _frag_set(m, ins, g):
    """One register of a block written (``mov.f32``); an error while an MMA that writes
    the block is in flight."""
    inflight = _inflight(m).get(ins.args[0])
    if inflight is not None:
        busy = np.isin(g.idx // WG, list(inflight))
        if busy.any():
            i = int(np.flatnonzero(busy)[0])
            m.fail(EmuError, "accumulator written while a wgmma that writes it is in flight "
                             "(no wgmma.wait_group retired its group)", g, ins, i)
    arr = m.regs[ins.args[0]]
    if arr is None:
        arr = m.regs[ins.args[0]] = m.new_reg(ins.args[0])
    arr[g.idx, ins.op.index.data] = g.get(ins.args[1]).view(np.float32)


@handles(ptx_sm90.CvtPackOp)
def _cvt_pack(m, ins, g):
    """``cvt.rn.{bf16x2,f16x2}.f32 d, hi, lo`` (PTX ISA 9.7.9.21): lo in the low half."""
    conv = f32_to_bf16 if ins.op.dtype.data == "bf16" else f32_to_f16
    lo = conv(g.get(ins.args[0]).view(np.float32)).astype(np.uint32)
    hi = conv(g.get(ins.args[1]).view(np.float32)).astype(np.uint32)
    g.set(ins.res[0], lo | (hi << np.uint32(16)))


# ---------------------------------------------------------------------------------------
# wgmma.

def _inflight(m) -> dict:
    """{frag slot: {warpgroup: open group count}}: accumulators an MMA still writes."""
    return m.state.setdefault("wgmma_inflight", {})


def _groups(m) -> dict:
    """{warpgroup: [committed groups (lists of frag slots)], and the open one last}."""
    return m.state.setdefault("wgmma_groups", {})


def _desc_fields(d: int):
    start = (d & 0x3FFF) << 4
    lbo = ((d >> 16) & 0x3FFF) << 4
    sbo = ((d >> 32) & 0x3FFF) << 4
    return start, lbo, sbo, _SWIZZLE_OF_MODE[(d >> 62) & 3]


def _operand_addrs(desc: int, rows: int, kmajor: bool, esize: int = 2) -> tuple[np.ndarray, int]:
    """Shared addresses [rows, k] of a descriptor's operand (A: rows = 64 of M; B: N),
    element (i, k) of one instruction's 32 bytes of K (k16 of 16-bit, k32 of 8-bit
    elements: ``esize`` bytes each); and its swizzle."""
    start, lbo, sbo, sw = _desc_fields(desc)
    i = np.arange(rows)[:, None]
    k = np.arange(32 // esize)[None, :]
    per = 16 // esize                 # elements of a core matrix's 16-byte row
    if sw:
        if kmajor:
            a = start + (i // 8) * sbo + (i % 8) * 128 + esize * k
        else:
            a = start + (i // 64) * lbo + (k // 8) * sbo + (k % 8) * 128 + 2 * (i % 64)
    else:
        if kmajor:
            a = start + (i // 8) * sbo + (k // per) * lbo + (i % 8) * 16 + esize * (k % per)
        else:
            a = start + (k // 8) * sbo + (i // 8) * lbo + (k % 8) * 16 + 2 * (i % 8)
    return swizzle(a, sw), sw


def _acc_map(n: int):
    """(row, column) of each accumulator register q < n/2 of each thread t < 128."""
    t = np.arange(WG)[:, None]
    q = np.arange(n // 2)[None, :]
    w, lane = t // 32, t % 32
    j, r, c = q // 4, (q // 2) % 2, q % 2
    return 16 * w + lane // 4 + 8 * r, 8 * j + 2 * (lane % 4) + c


def _read_operand(m, ins, g, i, cta: int, addrs: np.ndarray, dtype: str) -> np.ndarray:
    S = m.smem.size
    esize = 1 if dtype in ptx_sm90.FP8_DTYPES else 2
    flat = (cta * S + addrs).reshape(-1)
    if (addrs < 0).any() or (addrs + esize > m.smem.declared).any():
        m.fail(EmuError, "wgmma descriptor addresses leave the CTA's shared memory", g, ins, i)
    byt = np.concatenate([flat + j for j in range(esize)])
    check_async_reads_smem(m, ins, g, byt, np.full(byt.size, i), "wgmma (async proxy)")
    pend = m.smem.pending[byt]
    if pend.any():
        m.fail(EmuAsyncProxyError, "wgmma reads shared memory that a TMA / bulk copy writes "
                                   "and whose mbarrier this CTA has not waited on", g, ins, i)
    if esize == 1:
        return fp8_bytes_to_f32(m.smem.data[flat].reshape(addrs.shape), dtype)
    bits = m.smem.data.view(np.uint16)[flat // 2].reshape(addrs.shape)
    return bf16_to_f32(bits) if dtype == "bf16" else bits.view(np.float16).astype(np.float32)


def accumulate_exact(A: np.ndarray, B: np.ndarray, C: np.ndarray | None,
                     bits: int | None = None, sum_bits: int | None = None) -> np.ndarray:
    """One k16 step, IEEE style: exact products summed with C, rounded once to nearest
    f32 (``bits``, ``sum_bits`` ignored). Not what the H200 does (22 of 305,408 bf16
    outputs differed in five GEMMs)."""
    D = A @ B
    return (D if C is None else D + C).astype(np.float32)


ALIGN_FRACTION_BITS = 25
# fp8 (k32 .e4m3 / .e5m2): the same step with 13 bits below the largest exponent (fitted
# to the H200's bf16 outputs of the IR-built fp8 GEMM, K = 1024-4096, 61,440 outputs:
# 99.94% bitwise equal; 25 bits gives 80%: docs/emulator.md, tests/unit/test_fp8_gemm.py)
ALIGN_FRACTION_BITS_FP8 = 13
# ... and its sum keeps 13 fraction bits below its own leading bit (truncated toward zero)
# where the 16-bit types' keeps f32's 23: what makes the fp8 cases bitwise equal to the
# H200 (docs/emulator.md, tests/unit/test_fp8_gemm.py's probe test)
SUM_FRACTION_BITS_FP8 = 13


def _ieee_exponent(x: np.ndarray) -> np.ndarray:
    """The IEEE exponent of each element (x = 1.f * 2^e); meaningless for zeros."""
    _, e = np.frexp(x)
    return e - 1


def accumulate_h200(A: np.ndarray, B: np.ndarray, C: np.ndarray | None,
                    bits: int | None = None, sum_bits: int | None = None) -> np.ndarray:
    """One k16 step as the H200's tensor core does it (fitted to the H200's outputs of
    IR-built GEMMs and of a device probe of 2.9 M outputs, bitwise equal on all of them:
    docs/emulator.md): the 16 products (exact) and the accumulator are aligned to the
    largest exponent among them, where a product's exponent is the sum of its operands'
    exponents (its significand, in [1, 4), is not renormalized) and the accumulator's its
    own; each is truncated toward zero ``ALIGN_FRACTION_BITS`` bits below that exponent,
    the terms are summed exactly, and the sum is truncated toward zero to f32. ``bits``:
    another alignment width (fp8's k32 step: ``ALIGN_FRACTION_BITS_FP8``); ``sum_bits``:
    the sum truncated toward zero to that many fraction bits first (fp8:
    ``SUM_FRACTION_BITS_FP8``)."""
    P = A[:, None, :] * B.T[None, :, :]                       # rows x n x 16, exact
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        X = _ieee_exponent(A)[:, None, :] + _ieee_exponent(B.T)[None, :, :]
        X = np.where(P == 0, -100000, X)
        T = P
        if C is not None:
            T = np.concatenate([P, C[:, :, None]], axis=2)
            X = np.concatenate([X, np.where(C == 0, -100000, _ieee_exponent(C))[:, :, None]],
                               axis=2)
        emax = X.max(axis=2, keepdims=True)
        ulp = np.ldexp(1.0, np.maximum(emax - (bits or ALIGN_FRACTION_BITS), -1074))
        s = (np.trunc(T / ulp) * ulp).sum(axis=2)
        if sum_bits is not None:
            q = np.ldexp(1.0, np.maximum(_ieee_exponent(np.where(s == 0, 1.0, s)) - sum_bits,
                                         -1074))
            s = np.trunc(s / q) * q
        s = np.where(np.isfinite(T).all(axis=2), s, T.sum(axis=2))   # inf / NaN as IEEE
        f = s.astype(np.float32)
        away = np.abs(f.astype(np.float64)) > np.abs(s)
        return np.where(away & np.isfinite(s), np.nextafter(f, np.float32(0)), f
                        ).astype(np.float32)


# The k16 step's arithmetic (a name, so that other models can be tried against the
# hardware's outputs: tests/gpu/emu_vs_gpu.py).
ACCUMULATE = accumulate_h200


@handles(ptx_sm90.WgmmaOp)
def _wgmma(m, ins, g):
    """``wgmma.mma_async.sync.aligned.m64nNk16.f32.<t>.<t>`` (PTX ISA 9.7.15.5.2; fp8:
    ``m64nNk32.f32.<a>.<b>``, both operands K-major): the four warps of a warpgroup issue
    it together (``.aligned``)."""
    ok, rows = full_warps(m, g, WG)
    if rows.size == 0:
        return ok
    op = ins.op
    n, first = op.n.data, op.first.data
    ta, tb = op.types
    esize = 1 if ta in ptx_sm90.FP8_DTYPES else 2
    trans_b = op.trans_b.data
    frag = ins.args[0]
    da = m.regs[ins.args[1]][rows[:, 0]].astype(np.uint64)
    db = m.regs[ins.args[2]][rows[:, 0]].astype(np.uint64)
    scale = None
    if op.scale_d is not None:
        scale = m.regs[m.prog.slots[op.scale_d]][rows[:, 0]]
    acc = m.regs[frag]
    rr, cc = _acc_map(n)
    for w in range(rows.shape[0]):
        cta = int(m.cta_of[rows[w, 0]])
        i0 = int(np.flatnonzero(ok)[w * WG])
        a_addr, _ = _operand_addrs(int(da[w]), 64, True, esize)
        b_addr, _ = _operand_addrs(int(db[w]), n, not trans_b, esize)
        A = _read_operand(m, ins, g, i0, cta, a_addr, ta).astype(np.float64)   # 64 x k
        B = _read_operand(m, ins, g, i0, cta, b_addr, tb).astype(np.float64).T  # k x n
        C = None
        if scale is None or bool(scale[w]):
            C = np.zeros((64, n))
            C[rr, cc] = acc[rows[w], first:first + n // 2]
        step = (ACCUMULATE(A, B, C) if esize == 2 else
                ACCUMULATE(A, B, C, bits=ALIGN_FRACTION_BITS_FP8,
                           sum_bits=SUM_FRACTION_BITS_FP8))
        acc[rows[w], first:first + n // 2] = step[rr, cc]
        wgid = int(rows[w, 0]) // WG
        _inflight(m).setdefault(frag, {}).setdefault(wgid, 0)
        _inflight(m)[frag][wgid] += 1
        grp = _groups(m).setdefault(wgid, [[]])
        grp[-1].append(frag)
    return ok


@handles(ptx_sm90.WgmmaSyncOp)
def _wgmma_sync(m, ins, g):
    """``wgmma.fence`` / ``commit_group`` / ``wait_group N`` (PTX ISA 9.7.15.6-8): a wait
    retires all but the N most recent committed groups of the warpgroup."""
    kind = ins.op.kind.data
    ok, rows = full_warps(m, g, WG)
    if kind == "fence" or rows.size == 0:
        return ok if kind != "fence" else None
    for wgid in (rows[:, 0] // WG).tolist():
        grp = _groups(m).setdefault(wgid, [[]])
        if kind == "commit":
            grp.append([])
            continue
        keep = ins.op.pending.data
        committed = grp[:-1]
        done = committed[:len(committed) - keep] if keep else committed
        for frags in done:
            for f in frags:
                per = _inflight(m).get(f, {})
                per[wgid] = per.get(wgid, 1) - 1
                if per[wgid] <= 0:
                    per.pop(wgid, None)
        _groups(m)[wgid] = committed[len(committed) - keep:] + [grp[-1]] if keep else [grp[-1]]
    return ok


# ---------------------------------------------------------------------------------------
# setmaxnreg.

def _budget(m) -> dict:
    return m.state.setdefault("regs", {})


@handles(ptx_sm90.SetmaxnregOp)
def _setmaxnreg(m, ins, g):
    """``setmaxnreg.{inc,dec}.sync.aligned.u32 N`` (PTX ISA 9.7.17.1): the warpgroup's
    per-thread register count becomes N. A CTA starts with ``min(255, 65536 / threads)``
    (rounded down to 8) per thread; an ``inc`` waits until the CTA's registers allow it
    (``dec`` of other warpgroups returns them); a budget that can never fit is an
    :class:`~pkc.emu.errors.EmuRegisterBudgetError` (on the GPU: a hang)."""
    ok, rows = full_warps(m, g, WG)
    if rows.size == 0:
        return ok
    want = ins.op.count.data
    inc = ins.op.action.data == "inc"
    launch = min(255, (MAX_REGS // m.threads) // 8 * 8)
    done = ok.copy()
    for w in range(rows.shape[0]):
        cta = int(m.cta_of[rows[w, 0]])
        per = _budget(m).setdefault(cta, {})
        wg = int(m.tid_of[rows[w, 0]]) // WG
        cur = per.get(wg, launch)
        if (inc and want < cur) or (not inc and want > cur):
            m.fail(EmuRegisterBudgetError, f"setmaxnreg.{'inc' if inc else 'dec'} {want} with "
                                           f"{cur} registers per thread now", g, ins,
                   int(np.flatnonzero(ok)[w * WG]))
        nwg = m.threads // WG
        total = sum(per.get(x, launch) for x in range(nwg)) - cur + want
        if inc and total * WG > MAX_REGS:
            sel = np.flatnonzero(ok)[w * WG:(w + 1) * WG]
            done[sel] = False
            continue
        per[wg] = want
    return done


def _explain_regs(m, ins, g):
    cta = int(g.cta[0])
    launch = min(255, (MAX_REGS // m.threads) // 8 * 8)
    per = _budget(m).get(cta, {})
    counts = [per.get(x, launch) for x in range(m.threads // WG)]
    return (f"setmaxnreg.inc {ins.op.count.data} waits for registers: the warpgroups hold "
            f"{counts} per thread ({sum(counts) * WG} of {MAX_REGS}) and no one returns any")


EXPLAIN[ptx_sm90.SetmaxnregOp] = _explain_regs
DEADLOCK_CLASS[ptx_sm90.SetmaxnregOp] = EmuRegisterBudgetError
DEADLOCK_CLASS[ptx_sm90.WgmmaOp] = EmuWarpError
DEADLOCK_CLASS[ptx_sm90.WgmmaSyncOp] = EmuWarpError


# ---------------------------------------------------------------------------------------
# mbarriers and barriers of a cluster.

@handles(ptx_sm90.MbarrierArriveOp)
def _mbarrier_arrive(m, ins, g):
    """``mbarrier.arrive{.expect_tx}{.release.cta}.shared::cta.b64 _, [a]{, tx}`` and the
    remote ``mbarrier.arrive.shared::cluster.b64`` on a mapa address (PTX ISA
    9.7.13.15.13)."""
    act, _ = active_of(m, ins, g)
    if act.n == 0:
        return
    keys = mbar_keys(m, ins, act, act.get(ins.args[0]))
    tx = None
    if ins.op.tx_bytes is not None:
        tx = act.get(m.prog.slots[ins.op.tx_bytes])
    arrive(m, ins, act, keys, tx)


@handles(ptx_sm90.MbarrierWaitParityOp)
def _mbarrier_wait_parity(m, ins, g):
    """``mbarrier.try_wait.parity`` in a loop (PTX ISA 9.7.13.15.16): done once the phase
    of the given parity completed, i.e. the current phase's parity differs. The deadline
    is not modelled: a wait nothing can satisfy is a deadlock error."""
    keys = mbar_keys(m, ins, g, g.get(ins.args[0]))
    parity = g.get(ins.args[1]).astype(np.int64) & 1
    table = mbars(m)
    missing = [i for i, k in enumerate(keys.tolist()) if k not in table]
    if missing:
        from pkc.emu.ops_async import get_mbar
        get_mbar(m, ins, g, int(keys[missing[0]]), missing[0])
    phase = np.array([table[k].phase for k in keys.tolist()], dtype=np.int64)
    done = (phase & 1) != parity
    if done.any():
        observed(m, g, keys[done])
    return done


def _explain_parity(m, ins, g):
    from pkc.emu.ops_async import _explain_mbar
    return (f"waits for the phase of parity {int(g.get(ins.args[1])[0]) & 1}; "
            + _explain_mbar(m, ins, g))


EXPLAIN[ptx_sm90.MbarrierWaitParityOp] = _explain_parity


@handles(ptx_sm90.MapaOp)
def _mapa(m, ins, g):
    """``mapa.shared::cluster.u32 d, a, rank`` (PTX ISA 9.7.9.17): the emulator's cluster
    address carries ``rank + 1`` above the CTA's offset."""
    addr = g.get(ins.args[0], "u32").astype(np.int64) & ((1 << CLUSTER_SHIFT) - 1)
    rank = g.get(ins.args[1], "u32").astype(np.int64)
    bad = rank >= m.cluster
    check_bad(m, ins, g, bad, EmuError,
              lambda i: f"mapa to CTA rank {int(rank[i])} of a cluster of {m.cluster}")
    g.set(ins.res[0], ((rank + 1) << CLUSTER_SHIFT | addr).astype(np.uint32))


@handles(ptx_sm90.ClusterBarrierOp)
def _cluster_barrier(m, ins, g):
    """``barrier.cluster.arrive.release`` + ``wait.acquire`` (PTX ISA 9.7.13.3): every
    live thread of every CTA of the cluster."""
    m.at_bar[g.idx] = CLUSTER_BARRIER
    m.release_cluster(np.unique(m.cluster_base_of[g.idx]))
    return BRANCHED


@handles(ptx_sm90.NamedBarrierOp)
def _named_barrier(m, ins, g):
    """``bar.sync id, count`` (PTX ISA 9.7.13.1): ``count`` threads meet at barrier ``id``."""
    ids = g.get(ins.args[0], "u32").astype(np.int64)
    m.at_bar[g.idx] = ids
    for c, b in set(zip(g.cta.tolist(), ids.tolist())):
        m.bar_count[(c, b)] = ins.op.count.data
    m.release_barriers(np.unique(g.cta))
    return BRANCHED


@handles(ptx_sm90.TrapOp)
def _trap(m, ins, g):
    """``trap`` (PTX ISA 9.7.19.3): the launch fails."""
    act, _ = active_of(m, ins, g)
    if act.n:
        m.fail(EmuError, "trap: the kernel aborted (a launch error on the GPU)", act, ins)


@handles(ptx_sm90.PrefetchTensormapOp)
def _prefetch(m, ins, g):
    """``prefetch.tensormap`` (PTX ISA 9.7.9.15): checks that it is a tensor map."""
    tensor_map(m, ins, g, 0)


# ---------------------------------------------------------------------------------------
# TMA.

def tensor_map(m, ins, g, i: int, slot: int | None = None) -> TensorMap:
    addr = int(g.get(ins.args[0] if slot is None else slot)[i])
    off = addr - GLOBAL_BASE
    tm = None
    if 0 <= off < m.gmem.heap.size - 128:
        tm = TensorMap.decode(m.gmem.heap[off:off + 128])
    if tm is None:
        m.fail(EmuError, f"0x{addr:x} is not a tensor map ({m.gmem.locate(addr)})", g, ins, i)
    return tm


def _coords(m, ins, g, i: int) -> list[int]:
    return [int(m.regs[m.prog.slots[c]][g.idx[i]].view(np.int32)) for c in ins.op.coords]


# checks of the shared-memory bytes a TMA load is about to overwrite:
# hook(machine, ins, group, thread index in group, destination CTA, flat byte indices)
TMA_WRITE_CHECKS: list = []


@handles(ptx_sm90.TmaLoadOp)
def _tma_load(m, ins, g):
    """``cp.async.bulk.tensor.<r>d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
    {.multicast::cluster}`` (PTX ISA 9.7.9.25.5.1): the box at the coordinates, swizzled
    into shared memory, elements outside the tensor zero; its bytes counted on the
    mbarrier of each destination CTA (the multicast mask's CTAs of the cluster)."""
    act, _ = active_of(m, ins, g)
    S = m.smem.size
    for i in range(act.n):
        tm = tensor_map(m, ins, act, i, m.prog.slots[ins.op.tmap])
        coords = _coords(m, ins, act, i)
        dst = int(act.get(m.prog.slots[ins.op.dst])[i])
        bar = int(act.get(m.prog.slots[ins.op.mbar])[i])
        off, gaddr, inside = box_elements(tm, coords)
        goff = gaddr - GLOBAL_BASE
        src_ok = (goff >= 0) & (goff + tm.esize <= m.gmem.heap.size)
        if not (src_ok | ~inside).all():
            m.fail(EmuError, f"TMA load box at {coords} reads outside the heap: {tm.describe()}",
                   act, ins, i)
        cta = int(act.cta[i])
        base = int(m.cluster_base_of[act.idx[i]])
        if ins.op.mask is not None:
            mask = int(act.get(m.prog.slots[ins.op.mask])[i])
            targets = [base + r for r in range(m.cluster) if mask >> r & 1]
        else:
            targets = [cta]
        # .cta_group::2 (sm_100a): the bytes are counted on the mbarrier the address names,
        # the pair peer's where it carries a cluster rank; the copied bytes stay pending
        # until a wait on that mbarrier (the mark -(its flat index + 1)). A multicast
        # signals each receiver alike: on its own mbarrier where the address names the
        # issuer's, on its pair peer's where it names the issuer's peer
        bar_keys = {t: None for t in targets}
        if ins.op.cta_group is not None and bar >> CLUSTER_SHIFT:
            named = base + (bar >> CLUSTER_SHIFT) - 1
            if named not in (cta, cta ^ 1):
                m.fail(EmuError, f"TMA .cta_group::2 mbarrier in CTA rank {named - base} of the "
                                 "cluster: neither the issuing CTA nor its pair peer", act, ins, i)
            peer = named != cta
            bar_keys = {t: ((t ^ 1) if peer else t) * S + (bar & 0xFFFFFF) for t in targets}
        local = dst & ((1 << CLUSTER_SHIFT) - 1)
        if local % 128:
            m.fail(EmuError, f"TMA destination 0x{dst:x} is not 128-byte aligned", act, ins, i)
        if local + tm.box_bytes > m.smem.declared:
            m.fail(EmuError, f"TMA box of {tm.box_bytes} bytes at shared 0x{local:x} ends past "
                             f"the CTA's {m.smem.declared} bytes", act, ins, i)
        phys = swizzle(local + off, tm.swizzle)
        for k in range(tm.esize):
            vals = np.where(inside, m.gmem.heap[np.where(inside, goff, 0) + k], 0)
            for t in targets:
                byt = t * S + phys + k
                check_async_reads_smem(m, ins, act, byt, np.full(byt.size, i), "TMA load")
                if m.smem.reading[byt].any():
                    m.fail(EmuAsyncProxyError, "TMA load into shared memory that a bulk / TMA "
                           "store still reads (no cp.async.bulk.wait_group.read)", act, ins, i)
                for hook in TMA_WRITE_CHECKS:      # e.g. a stage an MMA still reads
                    hook(m, ins, act, i, t, byt)
                m.smem.data[byt] = vals
                bk = bar_keys[t]
                m.smem.pending[byt] = (bar & 0xFFFFFF) + 1 if bk is None else -(bk + 1)
        for t in targets:
            bk = bar_keys[t]
            complete_tx(m, t * S + (bar & 0xFFFFFF) if bk is None else bk, tm.box_bytes)
        if m.check_races:
            from pkc.emu import race
            sub = act.sub(np.arange(act.n) == i)
            ok = goff[inside]
            if ok.size:
                race.check(m, ins, sub, ok, tm.esize, False,
                           owner=np.zeros(ok.size * tm.esize, dtype=np.int64))


@handles(ptx_sm90.TmaStoreOp)
def _tma_store(m, ins, g):
    """``cp{.reduce}.async.bulk.tensor.<r>d.global.shared::cta{.add}.tile.bulk_group``
    (PTX ISA 9.7.9.25.5.2-3): the swizzled box from shared memory to the tensor (or
    added element-wise), elements outside the tensor skipped."""
    act, _ = active_of(m, ins, g)
    S = m.smem.size
    red = ins.op.reduce.data if ins.op.reduce is not None else None
    for i in range(act.n):
        tm = tensor_map(m, ins, act, i, m.prog.slots[ins.op.tmap])
        coords = _coords(m, ins, act, i)
        src = int(act.get(m.prog.slots[ins.op.src])[i]) & 0xFFFFFF
        off, gaddr, inside = box_elements(tm, coords)
        cta = int(act.cta[i])
        phys = swizzle(src + off, tm.swizzle)
        byt = (cta * S + phys[:, None] + np.arange(tm.esize)[None, :]).reshape(-1)
        check_async_reads_smem(m, ins, act, byt, np.full(byt.size, i), "TMA store")
        start_async_read(m, int(act.idx[i]), byt)
        goff = (gaddr - GLOBAL_BASE)[inside]
        raw = m.smem.data[byt].reshape(-1, tm.esize)[inside]
        if m.check_races and goff.size:
            from pkc.emu import race
            sub = act.sub(np.arange(act.n) == i)
            race.check(m, ins, sub, goff, tm.esize, True, atomic=red is not None,
                       owner=np.zeros(goff.size * tm.esize, dtype=np.int64))
        if red is None:
            for k in range(tm.esize):
                m.gmem.heap[goff + k] = raw[:, k]
            continue
        t = tm.element if tm.element in ("bf16", "f16", "f32") else None
        if red != "add" or t is None:
            raise EmuUnsupported(f"TMA reduce .{red} of {tm.esize}-byte elements", act.where(ins, i))
        reduce_add(m, goff, np.ascontiguousarray(raw).view(np.uint16 if t == "bf16"
                                                            else np.uint32).reshape(-1), t)
