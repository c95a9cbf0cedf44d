"""The parts of the scheduled GEMM that the MoE kernel (all-to-all dispatch + grouped GEMM
+ all-to-all combine) replaces (:class:`MoeParts`, given to
:func:`pkc.passes.gemm_schedule.build_gemm` by ``schedule-moe``).

Shapes per rank (W ranks, E experts per rank, capacity C rows per (rank, expert) block):

    X      [W*E*C, K]   block (q, e): the tokens this rank routes to expert e of rank q,
                        the first counts[q*E + e] rows valid (the rest is padding)
    Wt     [E*N, K]     expert e's weights [N, K] (nn.Linear layout), stacked
    counts [W*E] i32    valid rows per block of X, known only at run time (clipped to C)
    O      [W*E, C, N]  block (q, e): X's block (q, e) times expert e of rank q, back on
                        this rank (symmetric); rows past the count are not part of the result
    R      [E*W*C, K]   the expert operand (symmetric, W > 1 only): block (e, s) holds the
                        tokens rank s != rank routed to this rank's expert e

Layout choice (why per-block padding, not packed rows): every (expert, source) block has
a fixed place of C rows, so a sender needs no prefix sum of the other ranks' counts to
know where its rows go (no extra round trip before the data moves), and the tiles of one
block never mix two sources, so a tile waits for exactly one sender's signal. The price
is at most bm - 1 idle rows per block in the last tile and C rows of buffer per block.
(A packed receive layout saves the padding, but a sender must first learn where its rows
go - the prefix sums of every sender's counts at the receiver - a round trip before any
token moves.)
The A maps (X's and R's) and the output map are 3-D views ``[blocks, C, width]``: a tile's
rows clip at its block's C (zero-filled loads, dropped stores), so a tile never reads a
block another rank is writing meanwhile nor writes into the next block.

The protocol (every wait bounded by the launch's timeout; epochs: signal pads are never
reset, see :mod:`pkc.dialects.schedule_comm`), all in one kernel:

1. Counts: CTA 0 stores ``counts[q*E + e]`` into slot ``e*W + rank`` of rank q's count
   array ``cin`` (thread e, every q) and, after a CTA barrier and a system fence, adds 1
   to count flag ``rank`` of every rank's pad.
2. Dispatch (every CTA, all threads, before the roles start): the units ``(j, e, p)`` -
   destination ``q = (rank + j) mod W`` for j = 1..W-1, expert e, piece p of 64 rows -
   round-robin over the CTAs; a unit copies the piece's valid rows of X's block (q, e)
   into block (e, rank) of q's R with 16-byte vector stores, then (CTA barrier, system
   fence) adds 1 to data flag ``e*W + rank`` of q's pad. Every unit signals, empty or not,
   so a block's flag reaches ``epoch x ceil(C / 64)``: a fixed count whatever the tokens.
   The own rank's tokens are not copied: its tiles read them from X (a second A map).
3. Every CTA waits until every source's count flag reached the epoch (thread 0, then a
   CTA barrier): the tile loop reads the counts from ``cin``.
4. Grouped GEMM: ``pks.grouped_tile_loop`` over the (expert, source) blocks, the own
   rank's first (from X: nothing to wait for). For a peer's block the producer waits for
   its data flag (acquire, then a proxy fence: TMA reads what generic stores wrote) before
   its A loads from R: a block's tiles start when its rows arrived, while other blocks are
   in flight.
5. Combine: the epilogue stores each 64-row piece by TMA into block (rank, e) of the
   source's O through the source's tensor map (``pks.peer_tmap``, 3-D ``[N, C, W*E]``:
   rows clip at C, so a tile never spills into the next block).
6. Done: each consumer warpgroup, after its bulk stores completed (bulk wait, proxy
   fence), adds 1 (release) to done slot ``rank`` of every rank's pad; a rank's O is
   whole once every slot reached ``epoch x CTAs x consumers`` (a fixed count: it does not
   depend on the tokens), which every consumer warpgroup waits for before it ends. That
   also tells the senders that this launch's reads of their R copies are over, so the
   next launch may overwrite R, ``cin`` and O.

With one rank (W = 1) there is nothing to exchange: the tile loop reads the counts input
itself, the tiles read X, and the kernel has no signal, no wait and no epoch, so it also
runs when not all of its CTAs are resident at once (with W > 1 they must be: CTAs wait
for each other's dispatch pieces; the launcher sizes the grid to the rank's SMs).
"""

from __future__ import annotations

from xdsl.dialects import arith, scf
from xdsl.ir import SSAValue

from pkc.dialects import schedule as s
from pkc.dialects import schedule_ag as ag
from pkc.dialects import schedule_comm as c
from pkc.dialects import schedule_fused as f
from pkc.dialects import schedule_moe as m
from pkc.passes.gemm_schedule import _SWIZZLE_FOR_ROW_BYTES, Epi, GemmParts, _for, _Ops, _tma_epilogue
from pkc.target.gemm_tuning import BK, GemmConfig

PIECE_ROWS = 64          # rows of one dispatch unit (a piece of a block)
COPY_UNROLL = 4          # 16-byte vectors per thread per trip of the dispatch copy


def pieces(capacity: int) -> int:
    return -(-capacity // PIECE_ROWS)


class MoeParts(GemmParts):
    """The MoE kernel's parts (see the module doc). ``world`` ranks, ``experts`` per rank,
    ``capacity`` rows per block, ``n`` / ``k`` the expert's output / input width; the
    kernel's buffers ``X``, ``counts``, ``O``, ``R``; its allocations ``pad`` (symmetric
    u32: E*W data flags, W count flags, W done slots), ``cin`` (symmetric u32 [E*W]) and
    ``ctl`` (the epoch control word)."""

    cluster_pairs_problem = "its blocks of run-time rows are not counted in pairs"

    pingpong_problem = (
        "the MoE kernel's blocks of run-time rows are built for the cooperative consumers")

    def __init__(self, world: int, experts: int, capacity: int, n: int, k: int, cfg: GemmConfig,
                 X, counts, O, R, pad, cin, ctl):
        self.W, self.E, self.C, self.N, self.K, self.cfg = world, experts, capacity, n, k, cfg
        self.X, self.counts, self.O, self.R = X, counts, O, R
        self.pad, self.cin, self.ctl = pad, cin, ctl
        self.P = pieces(capacity)
        self.flag0 = 0                          # data flags: slot e*W + s
        self.cflag0 = experts * world           # count flags: slot cflag0 + s
        self.done0 = experts * world + world    # done slots: slot done0 + s

    @property
    def pad_slots(self) -> int:
        return self.E * self.W + 2 * self.W

    def a_map(self, top: _Ops, A: SSAValue, ta_t) -> SSAValue:
        """R's map (the peers' tokens) and X's (the own tokens; with W = 1, A is X), as
        ``[blocks, C, K]`` views: rows clip at the block's end."""
        W, E, C, K = self.W, self.E, self.C, self.K
        t3 = s.TmapType(self.cfg.dtype, [BK, self.cfg.bm, 1], 128)
        self.tX = top.add(ag.TmapViewOp(self.X, [W * E, C, K], t3)).result
        if W == 1:
            return self.tX
        return top.add(ag.TmapViewOp(A, [E * W, C, K], t3)).result

    def c_map(self, top: _Ops, C: SSAValue, tc_t) -> SSAValue | None:
        w = self.cfg.epi_width
        t = s.TmapType(self.cfg.dtype, [w, 64, 1], _SWIZZLE_FOR_ROW_BYTES[2 * w])
        self.maps = [top.add(f.PeerTmapOp(self.O, p, t)).result for p in range(self.W)]
        return None

    # ---- before the roles: epoch, counts, dispatch ---------------------------------
    def prologue(self, o: _Ops) -> None:
        W, E, C = self.W, self.E, self.C
        self.rank = o.add(c.LaunchParamOp(c.CommParam.RANK)).result
        if W == 1:
            self.cin_ptr = o.add(c.BufferPtrOp(self.counts)).result   # [E]: the same layout
            return
        self.epoch = o.add(c.EpochOp(self.ctl)).result
        tid = o.add(c.GridValueOp(c.GridValue.TID)).result
        cta = o.add(c.GridValueOp(c.GridValue.CTA)).result
        self.ctas = o.add(c.GridValueOp(c.GridValue.CTAS)).result
        self.own_pad = o.add(c.BufferPtrOp(self.pad)).result
        self.want_data = o.bin(arith.MuliOp, self.epoch, self.P)
        counts = o.add(c.BufferPtrOp(self.counts)).result
        # 1. this rank's counts to their destinations (CTA 0, thread e for expert e; one
        # destination at a time: a peer pointer is the same for the whole CTA)
        w0 = _when(o, o.cmp("eq", cta, 0))
        w1 = _when(w0, w0.cmp("ult", tid, E))
        slot = w1.bin(arith.AddiOp, w1.bin(arith.MuliOp, tid, W), self.rank)
        for q in range(W):
            cnt = w1.bin(arith.MinUIOp, w1.add(m.WordLoadOp(
                counts, w1.bin(arith.AddiOp, tid, q * E))).result, C)
            w1.add(m.WordStoreOp(w1.add(c.BufferPtrOp(self.cin, w1.c(q))).result, slot, cnt))
        w0.add(s.ClusterSyncOp())
        w2 = _when(w0, w0.cmp("eq", tid, 0))
        w2.add(c.FenceSysOp())
        for q in range(W):
            peer_pad = w2.add(c.BufferPtrOp(self.pad, w2.c(q))).result
            w2.add(c.SignalOp(peer_pad, w2.bin(arith.AddiOp, self.rank, self.cflag0)))
        # 2. dispatch: units (j, e, piece) round-robin over the CTAs
        self._dispatch(o, tid, cta, counts)
        # 3. every source's counts are here
        w3 = _when(o, o.cmp("eq", tid, 0))
        for src in range(W):
            sv = w3.c(src)
            w3.add(c.SignalWaitOp(self.own_pad, w3.c(self.cflag0 + src), self.epoch, sv,
                                  c.WaitSite.ARRIVAL))
        o.add(s.ClusterSyncOp())
        self.cin_ptr = o.add(c.BufferPtrOp(self.cin)).result

    def _dispatch(self, o: _Ops, tid, cta, counts) -> None:
        W, E, C, P = self.W, self.E, self.C, self.P
        vk = self.K * 2 // c.VEC_BYTES          # 16-byte vectors per row (K % 8 == 0)
        loop, u, unit, _ = _for(o, cta, o.c((W - 1) * E * P), self.ctas, [])
        j = u.bin(arith.AddiOp, u.bin(arith.DivUIOp, unit, E * P), 1)
        rem = u.bin(arith.RemUIOp, unit, E * P)
        e = u.bin(arith.DivUIOp, rem, P)
        p = u.bin(arith.RemUIOp, rem, P)
        q = u.bin(arith.RemUIOp, u.bin(arith.AddiOp, self.rank, j), W)
        blk_x = u.bin(arith.AddiOp, u.bin(arith.MuliOp, q, E), e)
        cnt = u.bin(arith.MinUIOp, u.add(m.WordLoadOp(counts, blk_x)).result, C)
        row0 = u.bin(arith.MuliOp, p, PIECE_ROWS)
        left = u.bin(arith.SubiOp, cnt, row0)                       # may be negative
        rows = u.select(u.cmp("slt", left, 0), u.c(0), u.bin(arith.MinUIOp, left, PIECE_ROWS))
        hi = u.bin(arith.MuliOp, rows, vk)
        src_off = u.bin(arith.MuliOp, u.bin(arith.AddiOp, u.bin(arith.MuliOp, blk_x, C), row0), vk)
        blk_r = u.bin(arith.AddiOp, u.bin(arith.MuliOp, e, W), self.rank)
        dst_off = u.bin(arith.MuliOp, u.bin(arith.AddiOp, u.bin(arith.MuliOp, blk_r, C), row0), vk)
        src = u.add(c.BufferPtrOp(self.X)).result
        dst = u.add(c.BufferPtrOp(self.R, q)).result
        vl = u.add(c.VecLoopOp(u.c(0), hi, COPY_UNROLL, self.cfg.threads))
        v = _Ops(vl.block)
        vals = [v.add(c.VecLoadOp(src, i, hi, c.CacheHint.NC, src_off)).result for i in vl.block.args]
        for i, x in zip(vl.block.args, vals):
            v.add(c.VecStoreOp(dst, i, hi, x, dst_off))
        u.add(s.ClusterSyncOp())        # the CTA's stores of the piece, then one signal
        w = _when(u, u.cmp("eq", tid, 0))
        w.add(c.FenceSysOp())
        w.add(c.SignalOp(w.add(c.BufferPtrOp(self.pad, q)).result, blk_r))
        u.add(scf.YieldOp())

    def end(self, o: _Ops) -> None:
        if self.W > 1:
            o.add(c.EpochPublishOp(self.ctl, self.epoch))

    # ---- the grouped tile loop ---------------------------------------------------------
    def tile_loop(self, r: _Ops, M, N, inits, cfg):
        loop = r.add(m.GroupedTileLoopOp(self.cin_ptr, N, self.rank, inits, cfg.bm, cfg.bn,
                                         self.E, self.W, self.C))
        m0, n0, e, src, *carried = loop.block.args
        t = _Ops(loop.block)
        n_stacked = t.bin(arith.AddiOp, t.bin(arith.MuliOp, e, self.N), n0)   # B: expert e's rows
        return loop, [m0, n_stacked, e, src, n0], carried

    def producer_tile(self, t: _Ops, coords, tA, extra):
        """The own tokens' row in X; a peer's block's row in R, after its rows arrived
        (data flag, then a proxy fence)."""
        m0, _, e, src, _ = coords
        x_blk = t.bin(arith.AddiOp, t.bin(arith.MuliOp, self.rank, self.E), e)
        if self.W == 1:
            return self.tX, m0, [x_blk], extra
        blk = t.bin(arith.AddiOp, t.bin(arith.MuliOp, e, self.W), src)
        own = t.cmp("eq", src, self.rank)
        w = _when(t, t.cmp("ne", src, self.rank))
        w.add(c.SignalWaitOp(self.own_pad, blk, self.want_data, src, c.WaitSite.ARRIVAL))
        w.add(f.FenceAsyncGlobalOp())
        tm = t.add(f.TmapSelectOp(t.select(own, t.c(1), t.c(0)), [tA, self.tX])).result
        return tm, m0, [t.select(own, x_blk, blk)], extra

    # ---- combine --------------------------------------------------------------------------
    def epilogue_setup(self, r: _Ops, cfg: GemmConfig) -> list[SSAValue]:
        tid = r.add(c.GridValueOp(c.GridValue.TID)).result
        self.lead = r.cmp("eq", r.bin(arith.AndIOp, tid, 127), 0)
        return []

    def epilogue_tile(self, t: _Ops, cfg: GemmConfig, e: Epi, coords, row0, ebuf, extra):
        _, _, ex, src, n0 = coords
        tm = t.add(f.TmapSelectOp(src, self.maps)).result
        blk = t.bin(arith.AddiOp, t.bin(arith.MuliOp, self.rank, self.E), ex)
        ebuf = _tma_epilogue(t, cfg, e.acc, e.epi, e.wg, row0, n0, ebuf,
                             lambda slot, col, row: t.add(s.TmaStoreOp(e.epi, slot, tm,
                                                                       [col, row, blk])))
        return ebuf, extra

    def epilogue_finish(self, r: _Ops, cfg: GemmConfig, extra) -> None:
        w = _when(r, self.lead)
        w.add(s.BulkWaitOp(0))
        w.add(f.FenceAsyncGlobalOp())   # the bulk stores complete, before the end / signals
        if self.W == 1:
            return
        one = w.c(1)
        slot = w.bin(arith.AddiOp, self.rank, self.done0)
        for q in range(self.W):
            w.add(f.SignalAddOp(w.add(c.BufferPtrOp(self.pad, w.c(q))).result, slot, one,
                                "sys", "release"))
        want = w.bin(arith.MuliOp, w.bin(arith.MuliOp, self.epoch, self.ctas), cfg.consumers)
        for q in range(self.W):
            w.add(c.SignalWaitOp(self.own_pad, w.c(self.done0 + q), want, w.c(q), c.WaitSite.EXIT))


def _when(o: _Ops, cond: SSAValue) -> _Ops:
    return _Ops(o.add(c.WhenOp(cond)).block)


__all__ = ["MoeParts", "PIECE_ROWS", "pieces"]
