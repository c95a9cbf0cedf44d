"""Handlers of the Blackwell instructions (:mod:`pkc.codegen.ptx_sm100`): tensor memory and
the fifth-generation tensor core (``tcgen05``), with their misuse as named errors.

Tensor memory (PTX ISA 9.7.16.2.1): per CTA 128 lanes x 512 columns of 32-bit cells, here
a ``uint32 [128, 512]`` array that starts poisoned (NaN bits). Addresses: lane in bits
31-16, column in bits 15-0 (9.7.16.2.2).

* ``tcgen05.alloc`` / ``dealloc`` / ``relinquish_alloc_permit`` (9.7.16.7.1): warp-wide;
  columns first-fit at a multiple of their count; an allocation waits while none fits (a
  deadlock if nothing frees one); an allocation after the CTA relinquished its permit, a
  dealloc of columns not allocated, and columns still allocated when the CTA's threads have
  all exited are :class:`EmuTensorMemoryError`.
* ``tcgen05.mma.cta_group::1.kind::f16`` (9.7.16.10.9): one thread; the instruction
  descriptor (9.7.16.4.2) and the shared-memory descriptors (9.7.16.4.1) are decoded here,
  independently of the encoders in :mod:`pkc.codegen.ptx_sm100`; the operands are read in
  the canonical layouts (9.7.16.3, the same as wgmma's) through the swizzle. M = 128 only
  (lane i = row i). The product is computed at issue, as one K = 16 step summed exactly and
  rounded once to f32 (how the B200's tensor core rounds is not known here).
  ``.kind::f8f6f4``: the descriptor's type codes are the kind's (E4M3 = 0, E5M2 = 1; a code
  of no format is an :class:`EmuTensorMemoryError`, the 6- / 4-bit ones unsupported), the
  bytes decoded exactly (:mod:`pkc.emu.fp8`), K-major A and B, one K = 32 step summed
  exactly and rounded once to f32, as for f16. The columns
  are *in flight* until a ``tcgen05.commit`` of the issuing thread and the completion of
  the phase of the mbarrier it arrived on.
* ``tcgen05.commit ... mbarrier::arrive::one`` (9.7.16.11.1): the issuing thread's MMAs
  are complete; one arrival on the mbarrier.
* ``tcgen05.ld.sync.aligned.32x32b.xN`` (9.7.16.8.3; layout 9.7.16.8.1): warp w reaches
  lanes ``32 (w % 4) ..`` only; reading columns an MMA writes (not committed, or its
  mbarrier phase not complete) is an error. The registers receive the values at
  ``tcgen05.wait::ld`` (9.7.16.8.5); an instruction that reads one of them between the
  ld and the wait (in straight-line code) is an :class:`EmuTensorMemoryError`.
* ``tcgen05.fence`` (9.7.16.6.4): ordering only, nothing to model.
* ``.cta_group`` (9.7.16.6.1, "peer CTA"): every tcgen05 instruction of a kernel names the
  same one (else :class:`EmuTensorMemoryError`, "wrong cta_group pairing"); ``::2`` needs a
  cluster of an even number of CTAs, whose ranks 2i and 2i + 1 are a pair. A pair's MMA
  (M = 256, data path layout A of 9.7.16.10.5) is issued by one thread of either CTA: A's
  rows 0-127 come from the even CTA's shared memory and rows 128-255 from the odd one's
  (the same descriptor), B's columns 0..N/2-1 from the even CTA and N/2..N-1 from the odd
  one, D's rows 0-127 go to the even CTA's tensor memory and 128-255 to the odd one's (the
  same address, allocated in both). M = 64 with cta_group::1 (layout F): row r goes to lane
  ``32 (r // 16) + r % 16``. A commit with ``.multicast::cluster`` arrives on the mbarrier
  at the same offset of each CTA its mask names.

Split: ``tcgen05.st`` / ``cp`` / ``shift`` and cluster launch control are in
:mod:`pkc.emu.ops_sm100_ext`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pkc.codegen import ptx_sm100 as t5
from pkc.emu.errors import EmuTensorMemoryError, EmuUnsupported, EmuWarpError
from pkc.emu.fp8 import FP8_TABLES, fp8_to_f32
from pkc.emu.machine import DEADLOCK_CLASS, EXPLAIN, WARP
from pkc.emu.ops_async import arrive, mbar_keys, mbars
from pkc.emu.ops_mma import full_warps
from pkc.emu.registry import AT_EXIT, handles
from pkc.emu.tensormap import swizzle
from pkc.emu.values import bf16_to_f32

LANES, COLUMNS = 128, 512
_NAN_BITS = np.uint32(0x7FC00000)


@dataclass
class Tmem:
    """One CTA's tensor memory."""

    cells: np.ndarray = field(default_factory=lambda: np.full((LANES, COLUMNS), _NAN_BITS,
                                                              dtype=np.uint32))
    allocs: dict = field(default_factory=dict)          # first column -> (ncols, thread, ins)
    relinquished: bool = False
    # per column: the thread whose MMA last wrote it (-1: none since allocated), and the
    # commits that covered that MMA since: {mbarrier key: the phase the first such commit's
    # arrival belongs to}. A commit covers every earlier MMA of its thread (they complete
    # in order), so each later commit on another mbarrier adds one.
    owner: np.ndarray = field(default_factory=lambda: np.full(COLUMNS, -1, dtype=np.int64))
    tokens: list = field(default_factory=lambda: [{} for _ in range(COLUMNS)])
    written: np.ndarray = field(default_factory=lambda: np.zeros(COLUMNS, dtype=bool))


def _tmem(m, cta: int) -> Tmem:
    return m.state.setdefault("tmem", {}).setdefault(cta, Tmem())


def _fail(m, g, ins, i, msg):
    m.fail(EmuTensorMemoryError, msg, g, ins, i)


def check_group(m, g, ins, i: int, group: int) -> None:
    """The kernel's tcgen05 instructions all name one ``.cta_group`` (PTX ISA 9.7.16.6.1);
    ``::2`` works on a CTA pair of a cluster (an even cluster size)."""
    first = m.state.setdefault("tc_group", (group, ins))
    if first[0] != group:
        from pkc.emu.program import render
        _fail(m, g, ins, i, f"wrong cta_group pairing: this is .cta_group::{group}, but "
                            f"'{render(first[1], m.prog)}' used .cta_group::{first[0]} (every "
                            "tcgen05 instruction of a kernel names the same .cta_group)")
    if group == 2 and m.cluster % 2:
        _fail(m, g, ins, i, f"wrong cta_group pairing: .cta_group::2 needs CTA pairs, but the "
                            f"cluster has {m.cluster} CTA(s)")


def pair_ctas(m, cta: int, group: int) -> list[int]:
    """The CTAs whose tensor memory a ``cta_group`` instruction of ``cta`` touches (the even
    CTA of a pair first)."""
    if group == 1:
        return [cta]
    even = cta - (cta - int(m.cluster_base_of[cta * m.threads])) % 2
    return [even, even + 1]


def _allocated(tm: Tmem, c0: int, n: int) -> bool:
    return any(s <= c0 and c0 + n <= s + k for s, (k, _, _) in tm.allocs.items())


# ---------------------------------------------------------------------------------------
# Allocation.

def _shared_flat(m, g, ins, i: int, addr: int, size: int) -> int:
    flat, _, bad = m.smem.flat(g.cta[i:i + 1], np.array([addr], dtype=np.int64), size)
    if bad[0]:
        _fail(m, g, ins, i, f"shared address 0x{addr:x} outside the CTA's shared memory or "
                            f"not {size}-byte aligned")
    return int(flat[0])


@handles(t5.Tcgen05AllocOp)
def _alloc(m, ins, g):
    """``tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [dst], ncols``: the warp
    gets ``ncols`` columns (first fit at a multiple of ncols) and their address (lane 0)
    is written to shared memory at ``dst``; waits while no such range is free."""
    ok, rows = full_warps(m, g)
    if rows.size == 0:
        return ok
    n = ins.op.ncols.data
    done = ok.copy()
    first = np.flatnonzero(ok)
    for w in range(rows.shape[0]):
        t0 = int(rows[w, 0])
        i = int(first[w * WARP])
        check_group(m, g, ins, i, t5.cta_group_of(ins.op))
        tm = _tmem(m, int(m.cta_of[t0]))
        if tm.relinquished:
            _fail(m, g, ins, i, "tcgen05.alloc after the CTA gave its allocation permit back "
                                "(tcgen05.relinquish_alloc_permit)")
        col = next((c for c in range(0, COLUMNS, n)
                    if not any(c < s + k and s < c + n for s, (k, _, _) in tm.allocs.items())), None)
        if col is None:
            done[first[w * WARP]:first[w * WARP] + WARP] = False
            continue
        tm.allocs[col] = (n, t0, ins)
        tm.written[col:col + n] = False         # what an earlier owner left is not ours
        dst = int(m.regs[ins.args[0]][t0])
        flat = _shared_flat(m, g, ins, i, dst, 4)
        m.smem.data[flat:flat + 4] = np.frombuffer(np.uint32(col).tobytes(), dtype=np.uint8)
    return done


def _explain_alloc(m, ins, g):
    tm = _tmem(m, int(g.cta[0]))
    held = ", ".join(f"columns {s}..{s + k - 1}" for s, (k, _, _) in sorted(tm.allocs.items()))
    return (f"tcgen05.alloc of {ins.op.ncols.data} columns waits for tensor memory that no one "
            f"frees (held: {held or 'nothing'}; or not all lanes of the warp arrived)")


EXPLAIN[t5.Tcgen05AllocOp] = _explain_alloc
DEADLOCK_CLASS[t5.Tcgen05AllocOp] = EmuTensorMemoryError


@handles(t5.Tcgen05DeallocOp)
def _dealloc(m, ins, g):
    """``tcgen05.dealloc.cta_group::1.sync.aligned.b32 taddr, ncols``: frees an allocation
    (the address and count it was made with); not while an MMA still writes it."""
    ok, rows = full_warps(m, g)
    if rows.size == 0:
        return ok
    first = np.flatnonzero(ok)
    for w in range(rows.shape[0]):
        t0 = int(rows[w, 0])
        i = int(first[w * WARP])
        check_group(m, g, ins, i, t5.cta_group_of(ins.op))
        tm = _tmem(m, int(m.cta_of[t0]))
        taddr = int(m.regs[ins.args[0]][t0])
        col, n = taddr & 0xFFFF, ins.op.ncols.data
        if taddr >> 16 or tm.allocs.get(col, (None,))[0] != n:
            _fail(m, g, ins, i, f"tcgen05.dealloc of {n} columns at 0x{taddr:x}, which is not an "
                                "allocation of this CTA")
        if any(tm.owner[c] >= 0 and not tm.tokens[c] for c in range(col, col + n)):
            _fail(m, g, ins, i, "tcgen05.dealloc of columns an MMA still writes (no "
                                "tcgen05.commit covered it)")
        del tm.allocs[col]
        tm.owner[col:col + n] = -1
    return ok


@handles(t5.Tcgen05RelinquishOp)
def _relinquish(m, ins, g):
    """``tcgen05.relinquish_alloc_permit``: the CTA allocates no more."""
    ok, rows = full_warps(m, g)
    for t0 in rows[:, 0].tolist() if rows.size else []:
        check_group(m, g, ins, int(np.flatnonzero(g.idx == t0)[0]), t5.cta_group_of(ins.op))
        _tmem(m, int(m.cta_of[t0])).relinquished = True
    return ok


def _check_freed(m) -> None:
    """At the end of the launch: every allocation was freed."""
    for cta, tm in sorted(m.state.get("tmem", {}).items()):
        for col, (n, t0, ins) in sorted(tm.allocs.items()):
            raise EmuTensorMemoryError(f"{n} columns of tensor memory (from column {col}) were "
                                       "not freed before the CTA exited (no tcgen05.dealloc)",
                                       m.where(t0, ins))


AT_EXIT.append(_check_freed)


# ---------------------------------------------------------------------------------------
# Descriptors (decoded from the PTX ISA's tables, not with the codegen's encoders).

_SWIZZLE_OF = {0: 0, 2: 128, 4: 64, 6: 32}


def decode_smem_desc(d: int) -> dict:
    """Fields of a shared-memory descriptor (PTX ISA 9.7.16.4.1)."""
    return dict(start=(d & 0x3FFF) << 4, lbo=((d >> 16) & 0x3FFF) << 4,
                sbo=((d >> 32) & 0x3FFF) << 4, version=(d >> 46) & 7, base=(d >> 49) & 7,
                lbo_mode=(d >> 52) & 1, swizzle=(d >> 61) & 7)


def decode_instr_desc(d: int) -> dict:
    """Fields of a ``.kind::f16`` instruction descriptor (PTX ISA 9.7.16.4.2)."""
    return dict(sparse=(d >> 2) & 1, dtype=(d >> 4) & 3, atype=(d >> 7) & 7, btype=(d >> 10) & 7,
                neg_a=(d >> 13) & 1, neg_b=(d >> 14) & 1, trans_a=(d >> 15) & 1,
                trans_b=(d >> 16) & 1, n=((d >> 17) & 0x3F) << 3, m=((d >> 24) & 0x1F) << 4,
                shift=(d >> 30) & 3)


def _operand_addrs(f: dict, rows: int, mn_major: bool, esize: int = 2) -> tuple[np.ndarray, int]:
    """Shared addresses [rows, 32 / esize] of element (i, k) of an operand (A: i < M, B:
    i < N) of ``esize``-byte elements (one instruction's K: 32 bytes of a row), canonical
    layouts of PTX ISA 9.7.16.3 (in 16-byte units, so the same bytes for 16- and 8-bit
    elements) with a swizzle of ``sw`` bytes (rows of sw bytes, 8-row groups SBO apart;
    MN-major: sw / esize elements of i per row, K-rows of 8 SBO apart, MN blocks LBO
    apart; no swizzle: 8 x 16-byte core matrices, LBO between them along the leading
    dimension, SBO between 8-row groups)."""
    sw = _SWIZZLE_OF[f["swizzle"]]
    start, lbo, sbo = f["start"], f["lbo"], f["sbo"]
    i = np.arange(rows)[:, None]
    k = np.arange(32 // esize)[None, :]
    if sw:
        if not mn_major:
            a = start + (i // 8) * sbo + (i % 8) * sw + esize * k
        else:
            per = sw // esize
            a = start + (i // per) * lbo + (k // 8) * sbo + (k % 8) * sw + esize * (i % per)
    else:
        if not mn_major:
            kb = esize * k
            a = start + (i // 8) * sbo + (kb // 16) * lbo + (i % 8) * 16 + kb % 16
        else:
            ib = esize * i
            a = start + (k // 8) * sbo + (ib // 16) * lbo + (k % 8) * 16 + ib % 16
    return swizzle(a, sw), sw


# what else watches the async proxy's reads of shared memory and the commits that end them
# (pkc.emu.ops_sm100_cluster): hook(m, g, ins, i, flat byte indices, element size) and
# hook(m, ins, thread, mbarrier keys the commit arrives on)
SMEM_READ_HOOKS: list = []
COMMIT_HOOKS: list = []


def read_operand(m, g, ins, i, cta: int, addrs: np.ndarray, dtype: str) -> np.ndarray:
    """The elements at ``addrs`` of the CTA's shared memory as f32 (bf16, f16, or the 8-bit
    floats of :mod:`pkc.emu.fp8`)."""
    S = m.smem.size
    esize = 1 if dtype in FP8_TABLES else 2
    if (addrs < 0).any() or (addrs + esize > m.smem.declared).any():
        _fail(m, g, ins, i, "tcgen05.mma descriptor addresses leave the CTA's shared memory")
    flat = (cta * S + addrs).reshape(-1)
    for hook in SMEM_READ_HOOKS:        # e.g. the stage stays in use until a commit
        hook(m, g, ins, i, flat, esize)
    if m.smem.pending[flat].any() or m.smem.pending[flat + esize - 1].any():
        from pkc.emu.errors import EmuAsyncProxyError
        m.fail(EmuAsyncProxyError, "tcgen05.mma reads shared memory that a TMA / bulk copy "
                                   "writes and whose mbarrier this CTA has not waited on", g, ins, i)
    if esize == 1:
        return fp8_to_f32(m.smem.data[flat].reshape(addrs.shape), dtype)
    bits = m.smem.data.view(np.uint16)[flat // 2].reshape(addrs.shape)
    return bf16_to_f32(bits) if dtype == "bf16" else bits.view(np.float16).astype(np.float32)


_F8_OF_CODE = {0: "f8E4M3FN", 1: "f8E5M2"}
_F8_NOT_MODELLED = {3: "E2M3", 4: "E3M2", 5: "E2M1"}


def _mma_types(m, act, ins, i, f: dict) -> tuple[str, str]:
    """The A and B element types of a ``tcgen05.mma`` from its ``.kind`` and instruction
    descriptor (PTX ISA 9.7.16.4.2: the type codes mean different formats per kind)."""
    kind = ins.op.mma_kind()
    if kind is t5.MmaKind.F16:
        types = {0: "f16", 1: "bf16"}
        if f["sparse"] or f["dtype"] != 1 or f["atype"] != f["btype"] or f["atype"] not in types \
                or f["neg_a"] or f["neg_b"] or f["shift"] or f["trans_a"]:
            raise EmuUnsupported(f"tcgen05.mma instruction descriptor {f} (modelled: dense, f32 D, "
                                 "A = B = f16 / bf16, K-major A, no negate / shift)", act.where(ins, i))
        return types[f["atype"]], types[f["btype"]]
    out = []
    for name in ("atype", "btype"):
        code = f[name]
        if code in _F8_NOT_MODELLED:
            raise EmuUnsupported(f"tcgen05.mma .kind::f8f6f4 with {name} {_F8_NOT_MODELLED[code]} "
                                 "(modelled: E4M3, E5M2)", act.where(ins, i))
        if code not in _F8_OF_CODE:
            _fail(m, act, ins, i, f"instruction descriptor {name} = {code} is no .kind::f8f6f4 "
                                  "format (E4M3 = 0, E5M2 = 1, E2M3 = 3, E3M2 = 4, E2M1 = 5; PTX "
                                  "ISA 9.7.16.4.2): a descriptor built for another kind?")
        out.append(_F8_OF_CODE[code])
    if f["dtype"] not in (0, 1):
        _fail(m, act, ins, i, f"instruction descriptor dtype = {f['dtype']}: .kind::f8f6f4 "
                              "accumulates in F16 (0) or F32 (1)")
    if f["sparse"] or f["dtype"] != 1 or f["neg_a"] or f["neg_b"] or f["shift"] \
            or f["trans_a"] or f["trans_b"]:
        raise EmuUnsupported(f"tcgen05.mma .kind::f8f6f4 instruction descriptor {f} (modelled: "
                             "dense, f32 D, K-major A and B, no negate / shift)", act.where(ins, i))
    return out[0], out[1]


# ---------------------------------------------------------------------------------------
# MMA and commit.

@handles(t5.Tcgen05MmaOp)
def _mma(m, ins, g):
    """``tcgen05.mma.cta_group::1.kind::f16 [d], adesc, bdesc, idesc, enable_input_d``
    (PTX ISA 9.7.16.10.9), issued by each active thread on its own."""
    act = g                     # no guard: every thread here issues
    for i in range(act.n):
        t = int(act.idx[i])
        cta = int(m.cta_of[t])
        tm = _tmem(m, cta)
        d = int(m.regs[ins.args[0]][t])
        adesc, bdesc = (int(m.regs[ins.args[j]][t]) for j in (1, 2))
        f = decode_instr_desc(int(m.regs[ins.args[3]][t]))
        enable = bool(m.regs[ins.args[4]][t])
        adt, bdt = _mma_types(m, act, ins, i, f)
        esize = 1 if adt in FP8_TABLES else 2
        M, N = f["m"], f["n"]
        group = t5.cta_group_of(ins.op)
        check_group(m, act, ins, i, group)
        try:
            t5.check_mma_shape(M, N, group, ins.op.mma_kind())
        except ValueError as e:
            _fail(m, act, ins, i, f"instruction descriptor: {e}")
        if group == 2 and M != 256:
            raise EmuUnsupported(f"tcgen05.mma.cta_group::2 with M = {M} (modelled: 256, "
                                 "layout A)", act.where(ins, i))
        lane, col = d >> 16, d & 0xFFFF
        if lane or not _allocated(tm, col, N):
            _fail(m, act, ins, i, f"tcgen05.mma writes lanes {lane}.., columns {col}..{col + N - 1} "
                                  "outside the CTA's tensor-memory allocations")
        fa, fb = decode_smem_desc(adesc), decode_smem_desc(bdesc)
        for name, fd in (("A", fa), ("B", fb)):
            if fd["version"] != 1 or fd["base"] or fd["lbo_mode"] or fd["swizzle"] not in _SWIZZLE_OF:
                _fail(m, act, ins, i, f"shared-memory descriptor of {name} {fd}: the fixed "
                                      "constant 0b001 in bits 46-48, base offset 0, relative "
                                      "LBO and swizzle 0 / 2 / 4 / 6 are modelled")
        ctas = pair_ctas(m, cta, group)
        rows = M // len(ctas)                 # rows of A and D per CTA
        half = N // len(ctas)                 # columns of B per CTA
        A = np.concatenate([read_operand(m, act, ins, i, c,
                                         _operand_addrs(fa, rows, False, esize)[0], adt)
                            for c in ctas]).astype(np.float64)
        B = np.concatenate([read_operand(m, act, ins, i, c,
                                         _operand_addrs(fb, half, bool(f["trans_b"]), esize)[0], bdt)
                            for c in ctas]).astype(np.float64)
        with np.errstate(invalid="ignore"):        # inf x 0 is NaN, as on the GPU
            D = A @ B.T                                               # M x N, exact
        # tensor-memory lanes of D's rows in each CTA: identity (M = 128, or 128 per CTA of
        # a pair), or 16 rows per warp quarter (M = 64, layout F)
        lanes = (np.arange(rows) if M != 64
                 else 32 * (np.arange(64) // 16) + np.arange(64) % 16)
        for j, c in enumerate(ctas):
            tc = _tmem(m, c)
            if not _allocated(tc, col, N):
                _fail(m, act, ins, i, f"tcgen05.mma.cta_group::2 writes columns {col}..{col + N - 1} "
                                      f"of CTA {c % m.ctas} of the pair, which has not allocated them "
                                      "(wrong cta_group pairing: both CTAs allocate with "
                                      ".cta_group::2)")
            Dj = D[j * rows:(j + 1) * rows]
            if enable:
                if not tc.written[col:col + N].all():
                    _fail(m, act, ins, i, "tcgen05.mma accumulates (enable_input_d) into tensor "
                                          "memory no MMA wrote")
                Dj = Dj + tc.cells[lanes, col:col + N].view(np.float32)
            tc.cells[lanes, col:col + N] = Dj.astype(np.float32).view(np.uint32)
            tc.written[col:col + N] = True
            tc.owner[col:col + N] = t
            for c2 in range(col, col + N):
                tc.tokens[c2] = {}


@handles(t5.Tcgen05CommitOp)
def _commit(m, ins, g):
    """``tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [mbar]``:
    the thread's MMAs so far complete with the mbarrier's current phase; one arrival."""
    act = g                     # no guard: every thread here issues
    if act.n == 0:
        return
    keys = mbar_keys(m, ins, act, act.get(ins.args[0]))
    group = t5.cta_group_of(ins.op)
    masks = act.get(ins.args[1]).astype(np.int64) if ins.op.mask is not None else None
    table = mbars(m)
    S = m.smem.size
    targets = []
    for i in range(act.n):
        check_group(m, act, ins, i, group)
        t, key = int(act.idx[i]), int(keys[i])
        if masks is None:
            tk = [key]
        else:       # the same offset in each CTA of the mask (PTX ISA 9.7.16.11.1)
            base = int(m.cluster_base_of[t])
            tk = [(base + r) * S + key % S for r in range(m.cluster) if masks[i] >> r & 1]
            if masks[i] >> m.cluster:
                _fail(m, act, ins, i, f"tcgen05.commit ctaMask 0x{int(masks[i]):x} names CTAs "
                                      f"beyond the cluster of {m.cluster}")
        for k in tk:
            if table.get(k) is None:
                _fail(m, act, ins, i, "tcgen05.commit on shared memory that is not an "
                                      "initialized mbarrier")
        for c in pair_ctas(m, int(m.cta_of[t]), group):
            tm = _tmem(m, c)
            for col in np.flatnonzero(tm.owner == t).tolist():
                for k in tk:    # the earliest phase on each mbarrier
                    tm.tokens[col].setdefault(k, table[k].phase)
        targets.append(tk)
        for hook in COMMIT_HOOKS:
            hook(m, ins, t, tk)
    for i, tk in enumerate(targets):
        sub = act.sub(np.arange(act.n) == i)
        for k in tk:
            arrive(m, ins, sub, np.array([k], dtype=np.int64))


# ---------------------------------------------------------------------------------------
# Loads from tensor memory.

def _pending_lds(m) -> dict:
    """{thread: [(result slots, values)]}: tcgen05.ld results not yet waited for."""
    return m.state.setdefault("tc_ld_pending", {})


def _check_use_before_wait(m, ins, g, p: int) -> None:
    """An instruction between the ld and the next tcgen05.wait::ld (straight-line code
    after the ld) that reads one of the ld's registers."""
    cache = m.state.setdefault("tc_ld_checked", {})
    if p in cache:
        bad = cache[p]
    else:
        res, bad = set(ins.res), None
        for q in range(p + 1, len(m.code)):
            nxt = m.code[q]
            if isinstance(nxt.op, t5.Tcgen05WaitOp) and nxt.op.kind.data == "ld":
                break
            if nxt.op is None:          # a branch or loop pseudo-op: not straight-line
                break
            if res & set(nxt.args):
                bad = q
                break
        cache[p] = bad
    if bad is not None:
        from pkc.emu.program import render
        _fail(m, g, ins, 0, "a register of this tcgen05.ld is read before tcgen05.wait::ld, by "
                            f"'{render(m.code[bad], m.prog)}'")


@handles(t5.Tcgen05LdOp)
def _ld(m, ins, g):
    """``tcgen05.ld.sync.aligned.32x32b.x<num>.b32``: lane l of warp w gets tensor-memory
    lane ``lane(taddr) + l`` (which must be ``32 (w % 4)``), ``num`` columns."""
    ok, rows = full_warps(m, g)
    if rows.size == 0:
        return ok
    _check_use_before_wait(m, ins, g, int(m.pc[rows[0, 0]]))
    num = ins.op.num.data
    first = np.flatnonzero(ok)
    pend = _pending_lds(m)
    for w in range(rows.shape[0]):
        thr = rows[w]
        i = int(first[w * WARP])
        taddr = m.regs[ins.args[0]][thr].astype(np.int64)
        if (taddr != taddr[0]).any():
            _fail(m, g, ins, i, "tcgen05.ld .sync.aligned with different addresses in one warp")
        lane0, col = int(taddr[0]) >> 16, int(taddr[0]) & 0xFFFF
        warp = int(m.tid_of[thr[0]]) // WARP
        if lane0 != 32 * (warp % 4):
            _fail(m, g, ins, i, f"warp {warp} reads tensor-memory lanes {lane0}.. (a warp reaches "
                                f"lanes {32 * (warp % 4)}..{32 * (warp % 4) + 31} only)")
        tm = _tmem(m, int(m.cta_of[thr[0]]))
        if not _allocated(tm, col, num):
            _fail(m, g, ins, i, f"tcgen05.ld of columns {col}..{col + num - 1} outside the CTA's "
                                "tensor-memory allocations")
        from pkc.emu.ops_sm100_ext import stores_in_flight
        st = stores_in_flight(m, int(m.cta_of[thr[0]]), col, num)
        if st is not None:
            from pkc.emu.program import render
            _fail(m, g, ins, i, f"tcgen05.ld reads tensor memory that '{render(st[1], m.prog)}' "
                                "writes and its thread has not waited for (tcgen05.wait::st)")
        if not tm.written[col:col + num].all():
            _fail(m, g, ins, i, "tcgen05.ld reads tensor memory no MMA wrote since it was "
                                "allocated (read before the MMA's mbarrier was waited on?)")
        seen = _seen(m)
        groups = {tuple(sorted(tm.tokens[c].items())) for c in range(col, col + num)
                  if tm.owner[c] >= 0}
        for tokens in groups:
            if not tokens:
                _fail(m, g, ins, i, "tcgen05.ld reads tensor memory that an MMA writes and no "
                                    "tcgen05.commit has covered (read before the MMA completed)")
            for t in thr.tolist():
                saw = seen.get(t, {})
                if not any(saw.get(key, -1) > ph for key, ph in tokens):
                    k = int(np.flatnonzero(g.idx == t)[0])
                    _fail(m, g, ins, k, "tcgen05.ld reads tensor memory before this thread waited "
                                        "for the phase of an mbarrier that a tcgen05.commit "
                                        "covering the MMA writing it arrived on (read before the "
                                        "matching wait)")
        vals = tm.cells[lane0:lane0 + WARP, col:col + num].view(np.float32)
        for k, t in enumerate(thr.tolist()):
            pend.setdefault(t, []).append((list(ins.res), vals[k].copy()))
    return ok


def _seen(m) -> dict:
    """{thread: {mbarrier key: completed phases when the thread last waited on it}}."""
    return m.state.setdefault("mbar_seen", {})


def _observing(wait_handler):
    """The mbarrier parity wait (pkc.emu.ops_sm90), also recording which completed phase
    each thread saw: a tcgen05.ld is ordered after an MMA only through such a wait."""
    def fn(m, ins, g):
        r = wait_handler(m, ins, g)
        done = np.ones(g.n, dtype=bool) if r is None else np.asarray(r, dtype=bool)
        if done.any():
            keys = mbar_keys(m, ins, g, g.get(ins.args[0]))
            table, seen = mbars(m), _seen(m)
            for t, key in zip(g.idx[done].tolist(), keys[done].tolist()):
                seen.setdefault(t, {})[key] = table[key].phase
        return r
    fn.__doc__ = wait_handler.__doc__
    return fn


def _wrap_waits() -> None:
    from pkc.codegen import ptx_sm90
    from pkc.emu import ops_sm90  # noqa: F401  (its handler first)
    from pkc.emu.registry import HANDLERS
    h = HANDLERS[ptx_sm90.MbarrierWaitParityOp]
    if not getattr(h, "observes", False):
        w = _observing(h)
        w.observes = True
        HANDLERS[ptx_sm90.MbarrierWaitParityOp] = w


_wrap_waits()


@handles(t5.Tcgen05WaitOp)
def _wait(m, ins, g):
    """``tcgen05.wait::ld`` / ``::st``: the thread's loads land in their registers."""
    ok, rows = full_warps(m, g)
    if rows.size == 0:
        return ok
    if ins.op.kind.data == "st":
        from pkc.emu.ops_sm100_ext import flush_stores
        flush_stores(m, rows.reshape(-1).tolist())
        return ok
    pend = _pending_lds(m)
    for t in rows.reshape(-1).tolist():
        for slots, vals in pend.pop(t, []):
            for s, v in zip(slots, vals):
                arr = m.regs[s]
                if arr is None:
                    arr = m.regs[s] = m.new_reg(s)
                arr[t] = v
    return ok


@handles(t5.Tcgen05FenceOp)
def _fence(m, ins, g):
    """``tcgen05.fence::{before,after}_thread_sync``: ordering; nothing to model."""
    return None


for _op in (t5.Tcgen05AllocOp, t5.Tcgen05DeallocOp, t5.Tcgen05RelinquishOp, t5.Tcgen05LdOp,
            t5.Tcgen05WaitOp):
    DEADLOCK_CLASS.setdefault(_op, EmuWarpError)

__all__ = ["EmuTensorMemoryError", "decode_smem_desc", "decode_instr_desc"]
