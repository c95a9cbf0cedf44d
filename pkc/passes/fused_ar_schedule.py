"""The parts of the scheduled GEMM that a fused GEMM + all-reduce and the fresh-output
GEMM + reduce-scatter replace (given to :func:`pkc.passes.gemm_schedule.build_gemm`, as
:class:`pkc.passes.fused_schedule.RsParts` is). The protocols are those of the hand
kernels ``GemmArKernel``, ``GemmArOutKernel`` and ``GemmRsOutKernel``; what differs is
that a chunk is a window of rows (``pks.rows_tmap``), so the chunks of an all-reduce need
not be equal (``M`` need not be a multiple of ``W``).

    rank r: A_r [M, K] @ B_r -> partial P_r [M, N]; chunk p = rows [p*Mc, p*Mc + rows_p)

:class:`ArParts` (GEMM + all-reduce by broadcast, result in the symmetric output ``C``,
persistent): the tile space is W chunks, slot s = chunk ``(rank + s) mod W`` (own chunk
first). A tile of chunk p goes to every rank's copy of C: its owner stores it (slot 0 of
the owner's order: the stores come first, nothing is ever zeroed), every other rank
reduce-adds it after waiting once per owner until the owner's stores landed everywhere
(slot ``p*W + p`` of every rank's pad). Signals: when a warpgroup's chunk changes (and
at its end) it waits for its bulk groups, fences the async proxy and adds its tile count
to slot ``chunk*W + rank`` of every rank's pad (release, system scope). Before the kernel
ends every consumer warpgroup's leader waits until the slots ``c*W + q`` of its own pad
reached ``epoch x tiles per chunk x consumers`` for every chunk c and every peer q (its
own adds are ordered by the kernel's completion).

:class:`ArOutParts` (W = 2, the result in a fresh output ``C``, the broadcast's
accumulator ``acc`` a symmetric ``pk.alloc``): the own chunk's tiles are stored into both
ranks' ``acc`` (as above). A tile of the peer's chunk p is summed in the epilogue: p's
partial, in this rank's ``acc`` (waited for as above), is TMA-loaded piece by piece into
the epilogue buffers, the accumulator added in f32 and rounded once
(``pks.acc_add_smem``), and the sum stored into this rank's output and into p's ``acc``,
where it is p's result. After the final wait every consumer thread copies its share of
the own chunk (the sum the peer stored) from ``acc`` into the output. Both ranks hold the
same rounding of P_0 + P_1 for every element.

:class:`RsOutParts` (GEMM + reduce-scatter at W = 2 into a fresh output ``C [Mc, N]``,
the staging a symmetric ``pk.alloc [2*Mc, N]``): slot 0 is the peer's chunk, its tiles
stored into the peer's staging (the half of this epoch's parity); slot 1 the own chunk,
whose epilogue adds the peer's staged partial (loaded as above) and stores the sum into
the output. Signals: as the reduce-scatter's (slot ``rank`` of the chunk owner's pad); a
rank waits once, before its first own tile's pieces, until slot ``peer`` of its pad
counts the chunk's tiles. The parity halves: the peer may finish epoch e (it waits only
for our stores) while we still read our staging; its stores of epoch e + 1 go to the
other half, and it reaches e + 2 only after waiting for our stores of e + 1, which
follow our reads of e.

The summed epilogue (both ``Out`` parts): the epilogue buffers' slots (two per consumer
warpgroup) get one load mbarrier each; the phase of each is carried through the tile
loop (bit b of ``ph``). Piece k is loaded by the warpgroup's first thread into its slot
once the store that last read the slot is done (``pks.bulk_wait`` read): piece 0 before
the tile's main loop (``consumer_tile_start``, after the chunk-change signal and the
wait for the partial, which the epilogue then finds done), piece k + 1 after piece k's
stores, so a load is in flight while the MMAs run or the warpgroup adds.
"""

from __future__ import annotations

from xdsl.dialects import arith
from xdsl.ir import SSAValue

from pkc.dialects import schedule as s
from pkc.dialects import schedule_comm as c
from pkc.dialects import schedule_fused as f
from pkc.passes.fused_schedule import RsParts
from pkc.passes.gemm_schedule import Epi, _Ops
from pkc.passes.gemm_schedule import _tma_epilogue as gemm_epilogue
from pkc.target.gemm_tuning import GemmConfig

COPY_UNROLL = 4          # 16-byte vectors per thread per trip of the own chunk's copy


def chunk_rows(m: int, world: int) -> tuple[int, list[int]]:
    """(rows of a chunk, rows of each chunk): ``ceil(M / W)``, the last chunk shorter."""
    mc = -(-m // world)
    return mc, [max(0, min(mc, m - p * mc)) for p in range(world)]


class ArParts(RsParts):
    """GEMM + all-reduce by broadcast into the symmetric output (see the module doc).
    ``pad``: W x W u32 slots (symmetric, zeroed once), ``ctl``: the epoch control word."""

    cluster_pairs_problem = "the all-reduce's epilogues are not counted in pairs"

    pingpong_problem = "the all-reduce's broadcast epilogue is built for the cooperative consumers"

    def __init__(self, world: int, m: int, n: int, cfg: GemmConfig, pad: SSAValue,
                 ctl: SSAValue):
        mc, self.rows = chunk_rows(m, world)
        super().__init__(world, mc, n, cfg, pad, ctl)
        self.m = m

    def epilogue_setup(self, r: _Ops, cfg: GemmConfig) -> list[SSAValue]:
        """RsParts' carried values and the owners known ready (the own bit set): this
        kernel enters a chunk at a tile start and again at its epilogue (``_enter``)."""
        return [*super().epilogue_setup(r, cfg), r.bin(arith.ShLIOp, r.c(1), self.rank)]

    def _chunk_maps(self, top: _Ops, buf: SSAValue, tc_t, peers: list[int]) -> list[SSAValue]:
        """Maps of every chunk's rows of ``buf`` on each rank of ``peers`` (-1: this rank),
        peer-major: entry ``i * W + p`` is chunk p on ``peers[i]``."""
        return [top.add(f.RowsTmapOp(buf, d, p * self.mc, self.rows[p], tc_t)).result
                for d in peers for p in range(self.W)]

    def c_map(self, top: _Ops, C: SSAValue, tc_t) -> SSAValue | None:
        self.maps = self._chunk_maps(top, C, tc_t, list(range(self.W)))
        return None

    def _a_row0(self, t: _Ops, e: Epi, chunk: SSAValue, row0: SSAValue) -> SSAValue | None:
        """An fp8 kernel's first row of A for the tile (its row scales: chunk x mc + row0);
        None for a 16-bit one."""
        if e.scales is None:
            return None
        if e.a_row0 is not None:        # the same value, computed for the scale prefetch
            return e.a_row0
        return t.bin(arith.AddiOp, t.bin(arith.MuliOp, chunk, self.mc), row0)

    def _signal(self, o: _Ops, chunk: SSAValue, count: SSAValue) -> None:
        """Leader, if ``count`` tiles are pending: they landed (bulk groups done, async
        proxy fenced); add the count to slot ``chunk*W + rank`` of every rank's pad.
        Nothing at W = 1 (no peer reads the pad)."""
        if self.W == 1:
            return
        w = self._when(self._when(o, o.cmp("ne", count, 0)), self.lead)
        w.add(s.BulkWaitOp(0))
        w.add(f.FenceAsyncGlobalOp())
        slot = w.bin(arith.AddiOp, w.bin(arith.MuliOp, chunk, self.W), self.rank)
        for d in range(self.W):
            pad = w.add(c.BufferPtrOp(self.pad, w.c(d))).result
            w.add(f.SignalAddOp(pad, slot, count, "sys", "release"))

    def _wait_owner(self, t: _Ops, chunk: SSAValue, ready: SSAValue,
                    gate: SSAValue | None = None) -> SSAValue:
        """Leader, once per owner (a bitmask; only where ``gate`` is 1, if given): the
        owner's stores of its chunk landed in every rank (slot ``chunk*W + chunk`` of
        every pad); returns the new mask."""
        bit = t.bin(arith.ShLIOp, t.c(1), chunk)
        unknown = _flag(t, t.cmp("eq", t.bin(arith.AndIOp, ready, bit), 0), gate)
        w = self._when(self._when(t, t.cmp("ne", unknown, 0)), self.lead)
        slot = w.bin(arith.AddiOp, w.bin(arith.MuliOp, chunk, self.W), chunk)
        for d in range(self.W):
            pad = w.add(c.BufferPtrOp(self.pad, w.c(d))).result
            w.add(c.SignalWaitOp(pad, slot, self.want, chunk, c.WaitSite.ARRIVAL, "sys", 64))
        w.add(f.FenceAsyncGlobalOp())
        return t.bin(arith.OrIOp, ready, t.bin(arith.MuliOp, unknown, bit))

    def _enter(self, t: _Ops, chunk: SSAValue, extra, gate: SSAValue | None = None
               ) -> tuple[SSAValue, SSAValue, SSAValue]:
        """Signal the previous chunk when the chunk changes; wait for the owner (W > 1).
        With ``gate`` (i32 0 / 1), only where it is 1 (a tile start); a second call for
        the same tile then does nothing. Returns (cur, pend, ready)."""
        cur, pend, ready = extra[:3]
        changed = t.cmp("ne", _flag(t, t.cmp("ne", chunk, cur), gate), 0)
        self._signal(t, cur, t.select(changed, pend, t.c(0)))
        pend = t.select(changed, t.c(0), pend)
        cur = t.select(changed, chunk, cur)
        if self.W > 1:
            ready = self._wait_owner(t, chunk, ready, gate)
        return cur, pend, ready

    def epilogue_tile(self, t: _Ops, cfg: GemmConfig, e: Epi, coords, row0, ebuf, extra):
        m0, n0, chunk = coords
        _, pend, ready = self._enter(t, chunk, extra)
        idx = [t.bin(arith.AddiOp, t.c(d * self.W), chunk) for d in range(self.W)]
        tms = [t.add(f.TmapSelectOp(i, self.maps)).result for i in idx]
        add = t.cmp("ne", chunk, self.rank)

        def store(slot, col, row):
            for tm in tms:
                t.add(f.TmaStoreOrAddOp(e.epi, slot, tm, [col, row], add))
        ebuf = _tma_epilogue(t, cfg, e, row0, n0, ebuf, store, self._a_row0(t, e, chunk, row0))
        return ebuf, [chunk, t.bin(arith.AddiOp, pend, 1), ready, *extra[3:]]

    def _final_wait(self, r: _Ops) -> None:
        """Leader: every peer's tiles of every chunk landed here (own pad, slots c*W + q)."""
        if self.W == 1:
            return                      # the own tiles: ordered by the kernel's completion
        w = self._when(r, self.lead)
        own = w.add(c.BufferPtrOp(self.pad)).result
        for q in range(self.W):
            qv = w.c(q)
            ww = self._when(w, w.cmp("ne", qv, self.rank))
            for ch in range(self.W):
                ww.add(c.SignalWaitOp(own, ww.c(ch * self.W + q), self.want, qv,
                                      c.WaitSite.EXIT, "sys", 64))
        w.add(f.FenceAsyncGlobalOp())

    def epilogue_finish(self, r: _Ops, cfg: GemmConfig, extra) -> None:
        self._signal(r, extra[0], extra[1])
        self._final_wait(r)


def _tma_epilogue(t: _Ops, cfg: GemmConfig, e: Epi, row0, n0, ebuf, store,
                  a_row0: SSAValue | None = None) -> SSAValue:
    # e: an fp8 GEMM's pieces are scaled (e.scale) before they are written; a no-op for 16-bit
    return gemm_epilogue(t, cfg, e.acc, e.epi, e.wg, row0, n0, ebuf, store, e, a_row0)


def _flag(t: _Ops, cond: SSAValue, gate: SSAValue | None = None) -> SSAValue:
    """``cond`` (i1) as an i32 0 / 1, and-ed with ``gate`` (i32 0 / 1) if given (the
    schedule level's arithmetic is on i32)."""
    v = t.select(cond, t.c(1), t.c(0))
    return t.bin(arith.AndIOp, v, gate) if gate is not None else v


class _Summed:
    """The epilogue that sums a partial another rank stored here (see the module doc):
    ``_load_bars`` in the prologue, ``_two_epilogues`` per tile."""

    def _load_bars(self, o: _Ops, cfg: GemmConfig) -> None:
        # one per epilogue slot (consumer warpgroup x 2), one arrival: the leader's
        self.lbars = o.add(s.MbarrierAllocOp(cfg.consumers * cfg.epi_bufs, 1)).result

    def _load(self, o: _Ops, cfg: GemmConfig, epi, load_map, slot, col, row) -> None:
        """Leader: once the store that last read ``slot`` is done, TMA-load the piece at
        (col, row) of ``load_map`` into it, completing on the slot's load barrier."""
        o.add(s.BulkWaitOp(cfg.epi_bufs - 1, read=True))
        lw = self._when(o, self.lead)
        lw.add(s.MbarrierArriveOp(self.lbars, slot, tx_bytes=cfg.epi_buf_bytes))
        lw.add(s.TmaLoadOp(load_map, [col, row], epi, slot, lw.c(0), self.lbars, slot))

    def _first_load(self, t: _Ops, cfg: GemmConfig, coords, wg, epi, ebuf, load_map,
                    summed: SSAValue) -> None:
        """A summed tile's first piece, loaded before the main loop (the hand kernels'
        tile prologue): its latency hides under the MMAs."""
        m0, n0 = coords[:2]
        w = self._when(t, summed)
        slot = w.bin(arith.AddiOp, w.bin(arith.MuliOp, wg, cfg.epi_bufs), ebuf)
        row = w.bin(arith.AddiOp, m0, w.bin(arith.MuliOp, wg, cfg.wg_m))
        self._load(w, cfg, epi, load_map, slot, n0, row)

    def _two_epilogues(self, t: _Ops, cfg: GemmConfig, e: Epi, row0, n0, ebuf, ph,
                       summed: SSAValue, plain_store, load_map, sum_store,
                       a_row0: SSAValue | None = None):
        """The tile's plain epilogue (where ``summed`` fails: ``plain_store(slot, col,
        row)``) or the summed one (the partial loaded through ``load_map``, the sum stored
        by ``sum_store``); returns (ebuf, ph) after the tile (the same piece count either
        way, so the slots' order does not depend on the branch). An fp8 GEMM's piece is
        scaled (``e.scale``, A's rows from ``a_row0``) before it is stored or summed: the
        partials are summed scaled, as the unfused scaled matmul + all-reduce sums them."""
        w = cfg.epi_width
        pieces = [(mi, ch) for mi in range(cfg.m_slices) for ch in range(cfg.bn // w)]
        base = t.bin(arith.MuliOp, e.wg, cfg.epi_bufs)
        geo = []                      # per piece: slot, column, row, load parity
        ph0 = ph
        for mi, ch in pieces:
            slot = t.bin(arith.AddiOp, base, ebuf)
            col = t.bin(arith.AddiOp, n0, ch * w) if ch else n0
            row = t.bin(arith.AddiOp, row0, 64 * mi) if mi else row0
            parity = t.bin(arith.AndIOp, t.bin(arith.ShRUIOp, ph, ebuf), 1)
            geo.append((slot, col, row, parity))
            ph = t.bin(arith.XOrIOp, ph, t.bin(arith.ShLIOp, t.c(1), ebuf))
            ebuf = t.bin(arith.XOrIOp, ebuf, 1)
        plain = self._when(t, t.cmp("eq", t.select(summed, t.c(1), t.c(0)), 0))
        for (mi, ch), (slot, col, row, _) in zip(pieces, geo):
            plain.add(s.BulkWaitOp(cfg.epi_bufs - 1, read=True))
            plain.add(s.WarpgroupBarrierOp())
            e.scale(plain, a_row0, n0, (mi, ch * w, w))
            plain.add(s.AccStoreSmemOp(e.acc, e.epi, slot, mi, ch * w, w, cfg.dtype))
            plain.add(s.FenceAsyncSharedOp())
            plain.add(s.WarpgroupBarrierOp())
            plain_store(plain, slot, col, row)
            plain.add(s.BulkCommitOp())
        sm = self._when(t, summed)

        def load(k: int) -> None:
            slot, col, row, _ = geo[k]
            self._load(sm, cfg, e.epi, load_map, slot, col, row)
        # piece 0 was loaded at the tile's start (consumer_tile_start)
        for k, ((mi, ch), (slot, col, row, parity)) in enumerate(zip(pieces, geo)):
            sm.add(s.MbarrierWaitOp(self.lbars, slot, parity))
            e.scale(sm, a_row0, n0, (mi, ch * w, w))
            sm.add(f.AccAddSmemOp(e.acc, e.epi, slot, mi, ch * w, w, cfg.dtype))
            sm.add(s.FenceAsyncSharedOp())
            sm.add(s.WarpgroupBarrierOp())
            sum_store(sm, slot, col, row)
            sm.add(s.BulkCommitOp())
            if k + 1 < len(pieces):
                load(k + 1)
        return ebuf, t.select(summed, ph, ph0)       # only the summed tiles loaded


class ArOutParts(_Summed, ArParts):
    """GEMM + all-reduce at W = 2 into a fresh output ``C``; ``acc``: the broadcast's
    accumulator (a symmetric ``[M, N]`` ``pk.alloc``, never zeroed). See the module doc."""

    def __init__(self, world: int, m: int, n: int, cfg: GemmConfig, pad: SSAValue,
                 ctl: SSAValue, acc: SSAValue):
        if world != 2:
            raise ValueError(f"GEMM + all-reduce into a fresh output is a W = 2 kernel, not {world}")
        super().__init__(world, m, n, cfg, pad, ctl)
        self.acc, self.n = acc, n

    def c_map(self, top: _Ops, C: SSAValue, tc_t) -> SSAValue | None:
        self.out_maps = self._chunk_maps(top, C, tc_t, [-1])
        self.maps = self._chunk_maps(top, self.acc, tc_t, [0, 1])
        self.C = C
        return None

    def prologue(self, o: _Ops) -> None:
        super().prologue(o)
        self._load_bars(o, self.cfg)
        self.other = o.bin(arith.XOrIOp, self.rank, 1)

    def epilogue_setup(self, r: _Ops, cfg: GemmConfig) -> list[SSAValue]:
        return [*super().epilogue_setup(r, cfg), r.c(0)]           # + the load phases

    def _mine(self, t: _Ops, chunk: SSAValue) -> SSAValue:
        """The map of this rank's accumulator over ``chunk``'s rows."""
        idx = t.bin(arith.AddiOp, t.bin(arith.MuliOp, self.rank, 2), chunk)
        return t.add(f.TmapSelectOp(idx, self.maps)).result

    def consumer_tile_start(self, t, cfg, coords, wg, epi, ebuf, extra):
        # the peer's chunk: signal the chunk left (the peer waits for those signals before
        # it sends what we wait for), wait for the owner's partial, load the first piece
        chunk = coords[2]
        summed = _flag(t, t.cmp("ne", chunk, self.rank))
        cur, pend, ready = self._enter(t, chunk, extra, summed)
        self._first_load(t, cfg, coords, wg, epi, ebuf, self._mine(t, chunk),
                         t.cmp("ne", summed, 0))
        return [cur, pend, ready, *extra[3:]]

    def epilogue_tile(self, t: _Ops, cfg: GemmConfig, e: Epi, coords, row0, ebuf, extra):
        m0, n0, chunk = coords
        _, pend, ready = self._enter(t, chunk, extra)
        mine = self._mine(t, chunk)
        theirs = t.add(f.TmapSelectOp(t.bin(arith.AddiOp, t.bin(arith.MuliOp, self.other, 2),
                                            chunk), self.maps)).result
        out = t.add(f.TmapSelectOp(chunk, self.out_maps)).result

        def plain(o, slot, col, row):          # own chunk: the partial into both accs
            for tm in (mine, theirs):
                o.add(s.TmaStoreOp(e.epi, slot, tm, [col, row]))

        def summed(o, slot, col, row):         # peer's chunk: the sum to our output, its acc
            for tm in (out, theirs):
                o.add(s.TmaStoreOp(e.epi, slot, tm, [col, row]))
        ebuf, ph = self._two_epilogues(t, cfg, e, row0, n0, ebuf, extra[3],
                                       t.cmp("ne", chunk, self.rank), plain, mine, summed,
                                       self._a_row0(t, e, chunk, row0))
        return ebuf, [chunk, t.bin(arith.AddiOp, pend, 1), ready, ph]

    def epilogue_finish(self, r: _Ops, cfg: GemmConfig, extra) -> None:
        super().epilogue_finish(r, cfg, extra)
        # the own chunk (the peer's sums, in acc) into the output: every consumer thread
        # of the grid, CTA by CTA a contiguous slice of 16-byte vectors
        r.add(s.WarpgroupBarrierOp())                   # after the leader's final wait
        vrow = self.n // 8
        last = r.cmp("eq", self.rank, self.W - 1)
        nv = r.select(last, r.c(self.rows[-1] * vrow), r.c(self.mc * vrow))
        off = r.bin(arith.MuliOp, self.rank, self.mc * vrow)
        cta = r.add(c.GridValueOp(c.GridValue.CTA)).result
        ctas = r.add(c.GridValueOp(c.GridValue.CTAS)).result
        per = r.bin(arith.DivUIOp, r.bin(arith.AddiOp, nv, r.bin(arith.SubiOp, ctas, r.c(1))), ctas)
        lo = r.bin(arith.MuliOp, cta, per)
        hi = r.add(arith.MinUIOp(r.bin(arith.AddiOp, lo, per), nv)).result
        src = r.add(c.BufferPtrOp(self.acc)).result
        dst = r.add(c.BufferPtrOp(self.C)).result
        # the loop starts at lo + the CTA's thread index: the epilogue's threads start at
        # 128 x its first warpgroup (1 for wgmma's consumers, 2 in the tensor-memory GEMM)
        first = 128 * cfg.epilogue_wg
        loop = r.add(c.VecLoopOp(r.bin(arith.SubiOp, lo, r.c(first)), hi, COPY_UNROLL,
                                 128 * cfg.consumers))
        body = _Ops(loop.block)
        vals = [body.add(c.VecLoadOp(src, i, hi, c.CacheHint.CG, offset=off)).result
                for i in loop.block.args]
        for i, v in zip(loop.block.args, vals):
            body.add(c.VecStoreOp(dst, i, hi, v, offset=off))


class RsOutParts(_Summed, RsParts):
    """GEMM + reduce-scatter at W = 2 into a fresh output; ``stage``: the peer's partial
    of this rank's chunk (a symmetric ``[2*Mc, N]`` ``pk.alloc``, a half per epoch
    parity). See the module doc."""

    cluster_pairs_problem = "the all-reduce's epilogues are not counted in pairs"

    def __init__(self, world: int, mc: int, n: int, cfg: GemmConfig, pad: SSAValue,
                 ctl: SSAValue, stage: SSAValue):
        if world != 2:
            raise ValueError(f"GEMM + reduce-scatter into a fresh output is a W = 2 kernel, "
                             f"not {world}")
        super().__init__(world, mc, n, cfg, pad, ctl)
        self.stage = stage

    def c_map(self, top: _Ops, C: SSAValue, tc_t) -> SSAValue | None:
        # staging maps: entry d * 2 + h is half h on rank d
        self.maps = [top.add(f.RowsTmapOp(self.stage, d, h * self.mc, self.mc, tc_t)).result
                     for d in range(2) for h in range(2)]
        return top.add(s.TmapOp(C, tc_t)).result

    def prologue(self, o: _Ops) -> None:
        super().prologue(o)
        self._load_bars(o, self.cfg)
        self.other = o.bin(arith.XOrIOp, self.rank, 1)
        self.half = o.bin(arith.AndIOp, self.epoch, 1)

    tile_loop_reads_epoch = True     # the staging half is this epoch's parity

    def tile_loop(self, r: _Ops, M, N, inits, cfg):
        # the peer's chunk first, the own last
        loop = r.add(f.ChunkTileLoopOp(M, N, self.other, inits, cfg.bm, cfg.bn, cfg.group_m, 2))
        m0, n0, chunk = loop.block.args[:3]
        return loop, [m0, n0, chunk], list(loop.block.args[3:])

    def epilogue_setup(self, r: _Ops, cfg: GemmConfig) -> list[SSAValue]:
        cur, pend = super().epilogue_setup(r, cfg)
        return [cur, pend, r.c(0), r.c(0)]     # + staged (the peer's partial seen), phases

    def _stage_map(self, t: _Ops, rank: SSAValue) -> SSAValue:
        """The map of ``rank``'s staging half of this epoch."""
        idx = t.bin(arith.AddiOp, t.bin(arith.MuliOp, rank, 2), self.half)
        return t.add(f.TmapSelectOp(idx, self.maps)).result

    def _enter_own(self, t: _Ops, chunk: SSAValue, extra, gate: SSAValue | None = None):
        """Signal the chunk left when the chunk changes; before the first own tile, wait
        once for the peer's partial. With ``gate`` (i32 0 / 1) only where it is 1."""
        cur, pend, staged = extra[:3]
        changed = t.cmp("ne", _flag(t, t.cmp("ne", chunk, cur), gate), 0)
        self._signal(t, cur, t.select(changed, pend, t.c(0)))
        pend = t.select(changed, t.c(0), pend)
        cur = t.select(changed, chunk, cur)
        # once, before the first own tile's pieces: the peer's partial is staged here
        first = t.bin(arith.AndIOp, _flag(t, t.cmp("eq", chunk, self.rank), gate),
                      t.bin(arith.XOrIOp, staged, 1))
        w = self._when(self._when(t, t.cmp("ne", first, 0)), self.lead)
        pad = w.add(c.BufferPtrOp(self.pad)).result
        w.add(c.SignalWaitOp(pad, self.other, self.want, self.other, c.WaitSite.ARRIVAL, "sys", 64))
        w.add(f.FenceAsyncGlobalOp())
        return cur, pend, t.bin(arith.OrIOp, staged, first)

    def consumer_tile_start(self, t, cfg, coords, wg, epi, ebuf, extra):
        # the own chunk: signal the peer's chunk first (the peer waits for it), then wait
        # once for the peer's partial; load the first piece
        own = _flag(t, t.cmp("eq", coords[2], self.rank))
        cur, pend, staged = self._enter_own(t, coords[2], extra, own)
        self._first_load(t, cfg, coords, wg, epi, ebuf, self._stage_map(t, self.rank),
                         t.cmp("ne", own, 0))
        return [cur, pend, staged, extra[3]]

    def epilogue_tile(self, t: _Ops, cfg: GemmConfig, e: Epi, coords, row0, ebuf, extra):
        m0, n0, chunk = coords
        ph = extra[3]
        _, pend, staged = self._enter_own(t, chunk, extra)
        own = t.cmp("eq", chunk, self.rank)
        theirs = self._stage_map(t, self.other)
        mine = self._stage_map(t, self.rank)

        def plain(o, slot, col, row):          # the peer's chunk: into its staging
            o.add(s.TmaStoreOp(e.epi, slot, theirs, [col, row]))

        def summed(o, slot, col, row):         # the own chunk: the sum into the output
            o.add(s.TmaStoreOp(e.epi, slot, e.tC, [col, row]))
        ebuf, ph = self._two_epilogues(t, cfg, e, row0, n0, ebuf, ph, own, plain, mine, summed)
        return ebuf, [chunk, t.bin(arith.AddiOp, pend, 1), staged, ph]

    def epilogue_finish(self, r: _Ops, cfg: GemmConfig, extra) -> None:
        # the peer waits for its chunk's count; nobody reads the own chunk's (the peer's
        # only wait is for its own chunk, the own tiles are ordered by the kernel's end),
        # so no count, fence or bulk wait for it at the kernel's tail
        cur, pend = extra[0], extra[1]
        self._signal(r, cur, r.select(r.cmp("eq", cur, self.rank), r.c(0), pend))


__all__ = ["ArParts", "ArOutParts", "RsOutParts", "chunk_rows"]
