"""The schedule level's MMA and accumulator ops on sm_100a: ``tcgen05`` with the
accumulators in tensor memory (the ops: :mod:`pkc.codegen.ptx_sm100`).

Registered as the ``sm_100a`` entry of
:data:`pkc.codegen.lower_schedule.TARGET_LOWERINGS`; every other op lowers as for sm_90a
(TMA, mbarriers, roles, the tile loop are the same instructions on both).

* CTA accumulators (``pks.acc_alloc`` at the top of the schedule): after the mbarriers are
  initialized, warp 0 allocates their columns (the sum rounded up to a power of two, at
  least 32: PTX ISA 9.7.16.7.1) and gives the allocation permit back; the address goes
  through shared memory to every thread (fence / ``bar.sync`` / fence, 9.7.16.6.4).
  Accumulator i starts at column ``sum of the earlier ones' columns``. After the roles,
  every thread meets again and warp 0 frees the columns.
* ``pks.acc_select``: the address of accumulator ``index`` (they follow each other).
* ``pks.mma_async``: one 64-deep k-block as 4 ``tcgen05.mma.cta_group::1.kind::f16`` of
  K = 16, M = 128 (the accumulator's lanes), N = its columns; the shared-memory
  descriptors advance 32 bytes along K inside the 128-byte swizzle row (K-major) or 16
  rows of 128 bytes (MN-major B), as for wgmma. Only a ``single_thread`` role issues it.
* ``pks.mma_commit_arrive``: ``tcgen05.commit`` on the mbarrier.
* ``pks.acc_store_global``: thread t of the warpgroup owns row t (tensor-memory lane t;
  warp w of a warpgroup reaches lanes 32w..32w+31), 32 columns at a time
  (``tcgen05.ld.32x32b.x32``, ``tcgen05.wait::ld``), rounded in pairs and stored 16 bytes
  at a time, clipped at M and N (N is a multiple of 8).
* Waits and arrivals in a role that touches tensor memory get the tcgen05 fences that order
  its MMAs / loads against the thread synchronization (after a wait, before an arrival).

* ``pks.acc_store_smem``: the two warps whose lanes hold the 64-row slice load their rows
  and write them into the swizzled box (then a fence; the TMA store follows as on sm_90a);
  ``pks.acc_add_smem`` (a fused epilogue's sum): the same rows added in f32 to the piece
  already in the box, rounded once.

* A cluster of 2 is a CTA pair (``cta_group::2``, PTX ISA 9.7.16.6.1): alloc / dealloc /
  relinquish in both CTAs with ``cta_group::2``; ``pks.mma_async`` an M = 256 MMA
  (``2 x`` the accumulator's rows) issued by the even CTA only (the ``single_thread`` MMA
  role runs on cluster rank 0); ``pks.mma_commit_arrive`` a commit multicast to both CTAs
  (ctaMask 0b11); every ``pks.tma_load`` the ``.cta_group::2`` form whose bytes count on
  the even CTA's mbarrier (the address mapped to cluster rank 0).
* A cluster of 4 with CTA accumulators is two pairs (ranks 2p, 2p + 1; docs/sm100.md,
  "Clusters of two CTA pairs"): the MMA role runs on the even CTAs, a load's mbarrier is
  the even CTA of the issuer's pair, ``pks.tma_load {pair_multicast}`` adds
  ``.multicast::cluster`` with ctaMask ``pairs' even CTAs << place``, a commit goes to the
  own pair (ctaMask ``0b11 << 2p``) or, with ``pair_multicast``, to both CTAs of every pair
  in the mask, and an ``all_ctas`` arrival to the two CTAs of the own pair.

* ``pks.clc_tile_loop``: :mod:`pkc.codegen.lower_schedule_clc` (cluster launch control;
  single CTAs and CTA pairs).

* fp8 (:mod:`pkc.codegen.lower_schedule_tcgen05_scale`): ``pks.mma_async`` of e4m3 / e5m2
  operands is 4 ``tcgen05.mma.kind::f8f6f4`` of K = 32 (the same 32-byte steps);
  ``pks.acc_scale`` is applied by the accumulator's readers right after ``tcgen05.ld``.

Not lowered here (a clear error): the per-warpgroup (wgmma-form) accumulator, ``pks.mma_wait``
(tcgen05 completes through mbarriers), clusters of more than 2 CTAs that are not two pairs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pkc.codegen import ptx, ptx_comm, ptx_sm90
from pkc.codegen import ptx_sm100 as t5
from pkc.codegen.lower_schedule_clc import lower_clc_tile_loop
from pkc.codegen.lower_schedule_tcgen05_scale import lower_acc_scale, mma_kind_and_desc, scale_loaded
from pkc.codegen.lower_schedule_clc_chunk import lower_clc_chunk_tile_loop
from pkc.dialects.schedule_clc_chunk import ClcChunkTileLoopOp
from pkc.dialects.schedule_clc import ClcTileLoopOp
from pkc.codegen.errors import CodegenError
from pkc.dialects import schedule as s
from pkc.dialects import schedule_fused as f

if TYPE_CHECKING:
    from pkc.codegen.lower_schedule import Lowering

BK = 64
ROW_BYTES = 128
LD_COLUMNS = 32                 # columns per tcgen05.ld in the epilogue


def _tmem_accs(sched: s.ScheduleOp) -> list[s.AccAllocOp]:
    return [op for op in sched.block.ops if isinstance(op, s.AccAllocOp)]


def alloc_columns(cols: int) -> int:
    """Columns to allocate for ``cols``: a power of two, at least 32."""
    n = 32
    while n < cols:
        n *= 2
    return n


class Tcgen05Lowering:
    """The sm_100a hooks of :func:`pkc.codegen.lower_schedule.lower_tma_kernel`."""

    def check(self, kop, sched: s.ScheduleOp) -> None:
        name = f"kernel @{kop.kernel_name.data}"
        cl = sched.cluster.data
        if cl > 2 and not (cl == 4 and _tmem_accs(sched)):
            raise CodegenError(f"{name}: a cluster of {cl} CTAs; sm_100a lowers single CTAs, "
                               "CTA pairs (cluster 2, cta_group::2) and two pairs (cluster 4 "
                               "with CTA accumulators)")
        for op in sched.walk():
            if isinstance(op, s.AccAllocOp) and not isinstance(op.parent_op(), s.ScheduleOp):
                raise CodegenError(f"{name}: a warpgroup's register accumulator (pks.acc_alloc "
                                   "inside a pks.role, the wgmma form) has no sm_100a lowering; "
                                   "build the schedule for an sm_100a target (schedule-matmul"
                                   "{target=b200}), whose accumulators live in tensor memory")
        cols = sum(a.result.type.cols.data for a in _tmem_accs(sched))
        if cols > t5.TMEM_COLUMNS:
            raise CodegenError(f"{name}: accumulators of {cols} columns (tensor memory has "
                               f"{t5.TMEM_COLUMNS})")

    def setup(self, L: "Lowering", smem_bytes: int) -> int:
        accs = _tmem_accs(L.sched)
        if not accs:
            return smem_bytes
        b = L.b
        cols = sum(a.result.type.cols.data for a in accs)
        ncols = alloc_columns(cols)
        slot = b.add32(L.sbase, smem_bytes - 1024)     # after the mbarriers (16 bytes)
        warp = b.bin("shr", "u32", L.tid, 5)
        with b.if_(b.setp("eq", "u32", warp, 0)):
            b.add(t5.Tcgen05AllocOp(slot, ncols, _group(L)))
            b.add(t5.Tcgen05RelinquishOp(_group(L)))
        b.add(t5.Tcgen05FenceOp("before"))
        b.bar()
        b.add(t5.Tcgen05FenceOp("after"))
        # the address is read from shared memory where it is used, not kept in a register
        # across the roles (a producer that gave its registers back would spill it)
        L.geo["tmem_slot"] = smem_bytes - 1024
        L.geo["tmem_ncols"] = ncols
        col = 0
        for a in accs:
            L.geo[f"tmem_col_{id(a.result)}"] = col
            col += a.result.type.cols.data
        return smem_bytes + 16

    def finish(self, L: "Lowering") -> None:
        if "tmem_slot" not in L.geo:
            return
        b = L.b
        # every role is done with tensor memory (the epilogue waited for the last MMAs)
        b.add(t5.Tcgen05FenceOp("before"))
        b.bar()
        b.add(t5.Tcgen05FenceOp("after"))
        warp = b.bin("shr", "u32", L.tid, 5)
        with b.if_(b.setp("eq", "u32", warp, 0)):
            base = b.ld("shared", "b32", b.add32(L.sbase, L.geo["tmem_slot"]))
            b.add(t5.Tcgen05DeallocOp(base, L.geo["tmem_ncols"], _group(L)))

    @property
    def ops(self) -> dict:
        return _OPS

    def single_thread_guard(self, L: "Lowering", op: s.RoleOp, cond):
        """A pair's single-thread role (the MMA issuer) runs on the even CTA only."""
        if _group(L) == 1 or s.RoleKind(op.kind.data) is not s.RoleKind.MMA:
            return cond
        b = L.b
        place = b.bin("and", "b32", b.sreg("%cluster_ctarank"), 1)
        return b.pand(cond, b.setp("eq", "u32", place, 0))


def _group(L: "Lowering") -> int:
    """The kernel's .cta_group: 2 for CTA pairs (a cluster of 2, or of 4 = two pairs:
    ``check`` refuses a cluster of 4 without CTA accumulators)."""
    return 2 if L.sched.cluster.data in (2, 4) else 1


def _pair_mask(L: "Lowering", pairs: int, place) -> object:
    """The b16 ctaMask of the CTAs at ``place`` (0 / 1, or a register) of the pairs in
    ``pairs`` (bit p: cluster ranks 2p, 2p + 1)."""
    b = L.b
    even = sum(1 << (2 * p) for p in range(8) if pairs >> p & 1)
    if isinstance(place, int):
        return b.imm(even << place, "b16")
    return b.selp("b16", b.imm(even << 1, "b16"), b.imm(even, "b16"),
                  b.setp("eq", "u32", place, 1))


def _uses_tmem(L: "Lowering") -> bool:
    role = L.role
    if role is None:
        return False
    key = ("uses_tmem", id(role))
    if key not in L.geo:
        L.geo[key] = any(isinstance(o, (s.MmaAsyncOp, s.AccStoreGlobalOp, s.AccStoreSmemOp,
                                        f.AccAddSmemOp, s.MmaCommitArriveOp))
                         for o in role.walk())
    return L.geo[key]


def _tmem(L: "Lowering", acc) -> object:
    """The tensor-memory address of an accumulator value (a CTA accumulator: its
    allocation's base, read from shared memory, plus its first column)."""
    if acc in L.vals:
        return L.vals[acc]
    key = f"tmem_col_{id(acc)}"
    if key not in L.geo:
        raise CodegenError(f"lower-schedule: accumulator {acc} is not a CTA accumulator")
    b = L.b
    base = b.ld("shared", "b32", b.add32(L.sbase, L.geo["tmem_slot"]))
    col = L.geo[key]
    return b.add32(base, col) if col else base


def _acc_alloc(L: "Lowering", op: s.AccAllocOp) -> None:
    """Placed by :meth:`Tcgen05Lowering.setup` (the check refused any other kind)."""


def _acc_select(L: "Lowering", op: s.AccSelectOp) -> None:
    b = L.b
    accs = list(op.accs)
    cols = op.result.type.cols.data
    first = L.geo[f"tmem_col_{id(accs[0])}"]
    consecutive = all(L.geo[f"tmem_col_{id(a)}"] == first + i * cols for i, a in enumerate(accs))
    if consecutive:
        L.vals[op.result] = b.r(ptx.FmaOp(L.v(op.index), b.u32(cols), _tmem(L, accs[0]), "u32",
                                          "mad.lo"))
        return
    sel = _tmem(L, accs[0])
    for j in range(1, len(accs)):
        sel = b.selp("b32", _tmem(L, accs[j]), sel, b.setp("eq", "u32", L.v(op.index), j))
    L.vals[op.result] = sel


def _desc(L: "Lowering", addr, hi: int):
    # 64-bit here, unlike sm_90a's 32-bit word + pack (lower_schedule_mma): sm_100a adds
    # 64-bit uniform registers in one instruction (UIADD3.64), where the word form costs
    # two UMOV per MMA (docs/PERF_NOTES.md 2026-12-02 (t))
    b = L.b
    d = b.cvt("u64", "u32", addr)
    d = b.bin("shr", "u64", d, b.imm(4, "u32"))
    return b.bin("or", "b64", d, b.imm(hi, "b64"))


def _single_thread(L: "Lowering", op) -> None:
    if L.role is None or L.role.single_thread is None:
        raise CodegenError(f"{op.name}: tcgen05 MMAs are issued by one thread; put it in a "
                           "pks.role with single_thread (sm_100a)")


def _mma(L: "Lowering", op: s.MmaAsyncOp) -> None:
    _single_thread(L, op)
    b = L.b
    acc = op.acc.type
    m, n = acc.rows.data, acc.cols.data
    n_major = op.b_major.data == "n"
    group = _group(L)
    try:        # kind::f16, or kind::f8f6f4 for fp8 operands (lower_schedule_tcgen05_scale)
        kind, idesc_val = mma_kind_and_desc(op, m * group, n, n_major, group)
    except ValueError as e:
        raise CodegenError(f"{op.name} on !pks.acc<{m}x{n}>: {e}") from None
    d = _tmem(L, op.acc)
    a_addr = L.slot_addr(op.a, op.a_slot, b.mul32(L.v(op.a_row), ROW_BYTES))
    b_addr = L.slot_addr(op.b, op.b_slot)
    da = _desc(L, a_addr, t5.DESC_KMAJOR)
    db = _desc(L, b_addr, t5.DESC_MNMAJOR if n_major else t5.DESC_KMAJOR)
    idesc = b.u32(idesc_val)
    always = b.setp("eq", "u32", idesc, idesc)
    for k in range(BK // 16):
        boff = k * 16 * ROW_BYTES if n_major else k * 32
        dak = b.bin("add", "s64", da, (k * 32) >> 4) if k else da
        dbk = b.bin("add", "s64", db, boff >> 4) if boff else db
        b.add(t5.Tcgen05MmaOp(d, dak, dbk, idesc, L.v(op.accumulate) if k == 0 else always,
                              group, kind))


def _commit_arrive(L: "Lowering", op: s.MmaCommitArriveOp) -> None:
    _single_thread(L, op)
    group = _group(L)
    b = L.b
    # a pair's MMAs wrote both CTAs' tensor memory: both CTAs' mbarriers hear of it; with
    # pair_multicast, both CTAs of every pair in the mask (those multicasting into ours)
    mask = None
    if op.pair_multicast is not None:
        pm = op.pair_multicast.data
        mask = b.imm(sum(0b11 << (2 * p) for p in range(8) if pm >> p & 1), "b16")
    elif group == 2 and L.sched.cluster.data == 2:
        mask = b.imm(0b11, "b16")
    elif group == 2:        # the issuer is the even CTA of pair rank / 2
        mask = b.selp("b16", b.imm(0b1100, "b16"), b.imm(0b0011, "b16"),
                      b.setp("eq", "u32", b.sreg("%cluster_ctarank"), 2))
    b.add(t5.Tcgen05CommitOp(L.bar_addr(op.bars, op.index), mask, group))


def _tma_load(L: "Lowering", op: s.TmaLoadOp) -> None:
    """In a CTA pair, both CTAs' loads count on the even CTA's mbarrier (where its MMA
    thread waits): ``.cta_group::2`` with the mbarrier's address at cluster rank 0."""
    if _group(L) == 1:
        from pkc.codegen.lower_schedule import _tma_load as common
        common(L, op)
        return
    b = L.b
    if op.multicast is not None and op.multicast.data > 1:
        raise CodegenError(f"{op.name}: multicast = {op.multicast.data} in a CTA pair; a "
                           "cluster of pairs multicasts with pair_multicast")
    dst = L.slot_addr(op.dst, op.slot, L.v(op.offset))
    rank = b.sreg("%cluster_ctarank")
    lead = b.bin("and", "b32", rank, 0xFFFFFFFE) if L.sched.cluster.data > 2 else b.u32(0)
    # the even CTA of this CTA's pair; a multicast signals each receiver's pair alike
    bar = b.r(ptx_sm90.MapaOp(L.bar_addr(op.bars, op.bar), lead))
    mask = None
    if op.pair_multicast is not None:
        mask = _pair_mask(L, op.pair_multicast.data, b.bin("and", "b32", rank, 1))
    b.add(ptx_sm90.TmaLoadOp(dst, L.v(op.tmap), [L.v(c) for c in op.coords], bar, mask,
                             cta_group=2))


def _no_wait(L: "Lowering", op) -> None:
    raise CodegenError(f"{op.name}: tcgen05 MMAs complete through mbarriers on sm_100a; use "
                       "pks.mma_commit_arrive and a pks.mbarrier_wait")


_SWIZZLE_MASK = {128: 7, 64: 3, 32: 1}    # 16-byte chunks that the swizzle permutes - 1


def _acc_store_smem(L: "Lowering", op: s.AccStoreSmemOp) -> None:
    """Rows 64 * slice .. + 63 of the accumulator (lanes of warps 2 slice and 2 slice + 1
    of the warpgroup; the other two skip), columns col .. col + width: each thread loads
    its row (``tcgen05.ld.32x32b``), rounds pairs and writes the row into the swizzled
    64 x width box (16-byte chunk j of row r at chunk ``j ^ ((r * row bytes >> 7) & mask)``)."""
    b = L.b
    _acc_piece(L, op, lambda addr, lo, hi: b.st("shared", "b32", addr, b.r(
        ptx_sm90.CvtPackOp(op.dtype.data, lo, hi))))


def _acc_add_smem(L: "Lowering", op) -> None:
    """``pks.acc_add_smem``: as :func:`_acc_store_smem`, but each pair is added in f32 to
    the two 16-bit values already at its address (a loaded partial) and rounded once."""
    from pkc.codegen.lower_schedule_comm import _widen
    b, dt = L.b, op.dtype.data

    def add(addr, lo, hi):
        old_lo, old_hi = _widen(L, b.ld("shared", "b32", addr), dt)
        s0, s1 = b.bin("add.rn", "f32", old_lo, lo), b.bin("add.rn", "f32", old_hi, hi)
        b.st("shared", "b32", addr, b.r(ptx_sm90.CvtPackOp(dt, s0, s1)))
    _acc_piece(L, op, add)


def _acc_piece(L: "Lowering", op, pair) -> None:
    """The 64 x width piece of ``op`` (slice, col, width, dst slot): each of the two
    warps owning the slice's lanes loads its rows from tensor memory and calls
    ``pair(shared address, lo, hi)`` per column pair at its swizzled address."""
    b = L.b
    acc = op.acc.type
    w, sl, c0 = op.width.data, op.slice.data, op.col.data
    if acc.rows.data != 128 or L.role is None or L.role.warpgroups.data != 1:
        raise CodegenError(f"{op.name}: one warpgroup reads a 128-lane accumulator")
    t = L.lane_in_wg()
    warp = b.bin("shr", "u32", t, 5)
    mine = b.setp("eq", "u32", b.bin("shr", "u32", warp, 1), sl)
    with b.if_(mine):
        taddr = b.add32(_tmem(L, op.acc), b.bin("shl", "b32", warp, 21))
        r = b.bin("sub", "u32", t, 64 * sl)                 # row in the box
        rowb = 2 * w
        ro = b.mul32(r, rowb)
        xo = b.bin("shl", "b32", b.bin("and", "b32", b.bin("shr", "u32", ro, 7),
                                       _SWIZZLE_MASK[rowb]), 4)
        row_addr = b.add32(L.slot_addr(op.dst, op.slot), ro)
        c = 0
        while c < w:
            num = min(LD_COLUMNS, w - c)
            vals = list(b.add(t5.Tcgen05LdOp(b.add32(taddr, c0 + c) if c0 + c else taddr,
                                             num)).res)
            b.add(t5.Tcgen05WaitOp("ld"))
            vals = scale_loaded(L, op.acc, vals, c0 + c, range(sl, sl + 1))   # fp8's scales
            for i in range(num // 2):
                byte = 2 * (c + 2 * i)                      # byte of the pair in the row
                chunk, within = byte // 16, byte % 16
                x = b.bin("xor", "b32", xo, 16 * chunk) if chunk else xo
                pair(b.add32(row_addr, b.add32(x, within) if within else x),
                     vals[2 * i], vals[2 * i + 1])
            c += num
        b.add(t5.Tcgen05FenceOp("before"))


def _acc_store_global(L: "Lowering", op: s.AccStoreGlobalOp) -> None:
    b = L.b
    acc = op.acc.type
    n = acc.cols.data
    if acc.rows.data != 128 or L.role is None or L.role.warpgroups.data != 1:
        raise CodegenError(f"{op.name}: one warpgroup reads a 128-lane accumulator (got "
                           f"!pks.acc<{acc.rows.data}x{n}> in a role of "
                           f"{L.role.warpgroups.data if L.role else 0} warpgroups)")
    t = L.lane_in_wg()                                   # row of the tile = TMEM lane
    warp = b.bin("shr", "u32", t, 5)
    taddr = b.add32(_tmem(L, op.acc), b.bin("shl", "b32", warp, 21))     # lane 32w in bits 16+
    row = b.add32(L.v(op.row), t)
    rows, cols = L.v(op.rows), L.v(op.cols)
    prow = b.setp("lt", "u32", row, rows)
    off = b.bin("mul.wide", "u32", row, cols, "b64")
    off = b.add64(off, b.cvt("u64", "u32", L.v(op.col)))
    addr = b.add64(L.v(op.buffer), b.bin("shl", "b64", off, b.imm(1, "u32")))
    crem = b.bin("sub", "s32", cols, L.v(op.col))        # columns left from the tile's first
    c = 0
    while c < n:
        num = min(LD_COLUMNS, n - c)
        num = max(x for x in t5.LD_32X32B_NUM if x <= num)
        vals = list(b.add(t5.Tcgen05LdOp(b.add32(taddr, c) if c else taddr, num)).res)
        b.add(t5.Tcgen05WaitOp("ld"))
        vals = scale_loaded(L, op.acc, vals, c, range(acc.rows.data // 64))    # fp8's scales
        packed = [b.r(ptx_sm90.CvtPackOp(op.dtype.data, vals[2 * i], vals[2 * i + 1]))
                  for i in range(num // 2)]
        for q in range(0, num // 8):
            guard = b.pand(b.setp("gt", "s32", crem, c + 8 * q), prow)
            b.add(ptx_comm.StV4Op(addr, packed[4 * q:4 * q + 4], guard=guard,
                                  offset=2 * (c + 8 * q)))
        c += num
    # the loads are complete (wait::ld): order them before the warpgroup's barrier / arrival
    b.add(t5.Tcgen05FenceOp("before"))


def _mbarrier_wait(L: "Lowering", op: s.MbarrierWaitOp) -> None:
    from pkc.codegen.lower_schedule import _mbarrier_wait as common
    common(L, op)
    if _uses_tmem(L):
        L.b.add(t5.Tcgen05FenceOp("after"))


def _mbarrier_arrive(L: "Lowering", op: s.MbarrierArriveOp) -> None:
    from pkc.codegen.lower_schedule import _mbarrier_arrive as common
    if _uses_tmem(L):
        L.b.add(t5.Tcgen05FenceOp("before"))
    if op.all_ctas is not None and _group(L) == 2 and L.sched.cluster.data > 2:
        # in a cluster of pairs, "every CTA" is the pair's two (the accumulator's MMA spans
        # the pair, not the cluster)
        b = L.b
        addr = L.bar_addr(op.bars, op.index)
        pred = L.v(op.pred) if op.pred is not None else None
        if L.role is None or L.role.single_thread is None:
            pred = L.lead() if pred is None else b.pand(pred, L.lead())
        lead = b.bin("and", "b32", b.sreg("%cluster_ctarank"), 0xFFFFFFFE)
        for r in (lead, b.add32(lead, 1)):
            b.add(ptx_sm90.MbarrierArriveOp(b.r(ptx_sm90.MapaOp(addr, r)), guard=pred,
                                            remote=True))
        return
    common(L, op)


_OPS = {
    s.AccAllocOp: _acc_alloc, s.AccSelectOp: _acc_select, s.MmaAsyncOp: _mma,
    s.MmaCommitArriveOp: _commit_arrive, s.MmaCommitOp: _no_wait, s.MmaWaitOp: _no_wait,
    s.AccStoreSmemOp: _acc_store_smem, s.AccStoreGlobalOp: _acc_store_global,
    f.AccAddSmemOp: _acc_add_smem, s.AccScaleOp: lower_acc_scale,
    s.MbarrierWaitOp: _mbarrier_wait, s.MbarrierArriveOp: _mbarrier_arrive,
    s.TmaLoadOp: _tma_load, ClcTileLoopOp: lower_clc_tile_loop,
    ClcChunkTileLoopOp: lower_clc_chunk_tile_loop,
}


def _register() -> None:
    from pkc.codegen.lower_schedule import TARGET_LOWERINGS
    TARGET_LOWERINGS["sm_100a"] = Tcgen05Lowering()


_register()
