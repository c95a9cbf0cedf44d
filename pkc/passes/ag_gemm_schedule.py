"""The parts of the scheduled GEMM that a fused all-gather + GEMM replaces
(:class:`AgParts`, given to :func:`pkc.passes.fused_schedule.build_fused_gemm`: the wgmma
GEMM, or the tensor-memory one for an sm_100a target), and the rewrite
of an ``all_gather_mm`` kernel with one matmul into that scheduled kernel
(:func:`schedule_all_gather_mm`, called by ``schedule-fused``).

    rank r: A_r [Mc, K] (its shard); G [W*Mc, K] = the gathered A (symmetric: peers put
    their shards into it); C [W*Mc, N] = G @ B_r.

The protocol (that of the hand kernel ``AgGemmKernel``):

* Grid: the last ``side`` CTAs are the put side (``pks.cta_partition``); the GEMM's tile
  loop strides over the others. With nothing to put (W = 1 and G not asked for) there is
  no put side: the kernel is the GEMM.
* Tile space: W shards of the ``[Mc, N]`` tiles (``pks.chunk_tile_loop``), slot s is shard
  ``(rank + s) mod W``: the own shard first (no wait), then rank + 1, ... The producer
  loads the own shard from A's map, a remote one from G's 3-D map ``[W, Mc, K]`` (both
  ``pks.tmap_view``s of one type, ``pks.tmap_select``ed by the tile's shard: rows past a
  shard read zeros), after waiting once per row block (a raster group of ``group_m x bm``
  rows) until every put CTA of the owner signalled it (``epoch x side`` on the own pad's
  slot ``shard x G + block``). C is stored through a 3-D map ``[W, Mc, N]``: a tile never
  spills into the next shard's rows.
* Put side (one thread per put CTA): announce to every peer that this launch started
  (slot ``W x G + rank`` of its pad: it finished reading the previous launch's G), wait
  for every peer's announcement, then serve the peers in the order d = rank-1, rank-2, ...
  (peer d consumes this shard in its slot W-k: first the shard it needs first; at every
  step the ranks' destinations form a permutation), row block by row block: the CTA's
  pieces (``piece`` bytes, every ``side``-th) go global -> shared (``pks.bulk_load`` on a
  ring mbarrier) -> d's ``G[rank]`` (``pks.bulk_store``) through a ``ring``-deep ring over
  the GEMM's stage memory (``pks.smem_overlay``), ``lag`` pieces' stores in flight; then
  it waits for its writes, fences the async proxy and adds 1 to slot ``rank x G + block``
  of d's pad (release). Where the IR asks for G, the last destination is the rank itself
  (its own shard into its own G; no signal: the kernel's completion orders it).
* Epochs as in :mod:`pkc.passes.fused_schedule`: pads zeroed once, never reset.
"""

from __future__ import annotations

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import BFloat16Type, Float16Type, IntegerType, TensorType
from xdsl.ir import Block, Region, SSAValue
from xdsl.rewriter import Rewriter

from pkc.dialects import kernel as k
from pkc.dialects import schedule as s
from pkc.dialects import schedule_ag as ag
from pkc.dialects import schedule_comm as c
from pkc.dialects import schedule_fused as f
from pkc.dialects.plan import ScheduleKind
from pkc.dialects.types import LOCAL, SYMMETRIC, BufferType
from pkc.passes.fused_clc import ClcKind, static_words
from pkc.passes.fused_schedule import (arrangement, b_operand, build_fused_gemm, chunk_tile_count,
                                       fp8_fused_config, fused_config)
from pkc.passes.gemm_schedule import Epi, GemmParts, Scales, _for, _Ops, _tma_epilogue
from pkc.passes.remarks import add_remark, plan_of, set_plan
from pkc.target.cost import OverlapStyle
from pkc.target.fused_tuning import PUT_PIECE, PUT_RING, FusedKind, ag_put_ctas
from pkc.target.gemm_tuning import GemmConfig
from pkc.target.targets import get_target

_DTYPE = {BFloat16Type: "bf16", Float16Type: "f16"}
MAX_BYTES = 1 << 31          # byte offsets of the put side are u32 (s32 loops)


def row_blocks(mc: int, cfg: GemmConfig) -> int:
    """G: the row blocks of a shard signalled one by one (raster groups of m-tiles)."""
    return -(-(-(-mc // cfg.bm)) // cfg.group_m)


class AgParts(GemmParts):
    """All-gather + GEMM (see the module doc). ``gath``: G (a symmetric kernel output),
    ``pad``: the symmetric signal pad (W x G + W u32 slots, zeroed once), ``ctl``: the
    rank's ``[epoch, ctas_done]``; ``side`` put CTAs (0: none), ``self_copy``: the own
    shard into the own G as well."""

    def __init__(self, world: int, mc: int, n: int, kdim: int, cfg: GemmConfig,
                 A: SSAValue, gath: SSAValue, pad: SSAValue | None, ctl: SSAValue | None,
                 side: int, ring: int, piece: int, self_copy: bool):
        self.W, self.mc, self.n, self.k, self.cfg = world, mc, n, kdim, cfg
        self.A, self.gath, self.pad, self.ctl = A, gath, pad, ctl
        self.side, self.ring, self.piece, self.self_copy = side, ring, piece, self_copy
        self.lag = max(1, ring // 2)
        self.G = row_blocks(mc, cfg)
        self.tiles_per_chunk = chunk_tile_count(mc, n, cfg)
        self.tile_rows = mc         # rows of one shard's tile space (the GEMM's M)

    @staticmethod
    def signal_slots(mc: int, cfg: GemmConfig, blocks: int) -> int:
        """Signal slots of one shard (the row blocks signalled one by one)."""
        return row_blocks(mc, cfg)

    def block_span(self, o: _Ops, b: SSAValue, base: SSAValue, total: int, blk: int):
        """(source byte offset in A, destination byte offset in G, bytes) of row block
        ``b`` of this rank's shard (``base``: its shard's offset in G)."""
        off = o.bin(arith.MuliOp, b, blk)
        nb = o.bin(arith.MinUIOp, o.bin(arith.SubiOp, o.c(total), off), o.c(blk))
        return off, o.bin(arith.AddiOp, base, off), nb

    def piece_dest(self, o: _Ops, poff: SSAValue) -> SSAValue:
        """Where a piece at byte ``poff`` of a row block's run lands, from the run's
        destination offset: ``poff`` (the run is contiguous in G too; a subclass whose
        destination rows are strided maps it: :mod:`pkc.passes.ag_k_schedule`)."""
        return poff

    # ---- maps and the launch's scalars ---------------------------------------------
    def a_map(self, top: _Ops, A: SSAValue, ta_t) -> SSAValue:
        if self.W == 1:
            return super().a_map(top, A, ta_t)
        t3 = s.TmapType(self.cfg.in_types[0], [*ta_t.box_dims, 1], ta_t.swizzle.data)
        self.tA = top.add(ag.TmapViewOp(A, [1, self.mc, self.k], t3)).result
        self.tG = top.add(ag.TmapViewOp(self.gath, [self.W, self.mc, self.k], t3)).result
        return self.tA

    def c_map(self, top: _Ops, C: SSAValue, tc_t) -> SSAValue | None:
        if self.W == 1:
            return super().c_map(top, C, tc_t)
        t3 = s.TmapType(self.cfg.dtype, [*tc_t.box_dims, 1], tc_t.swizzle.data)
        n = C.type.get_shape()[1]       # C's own columns (one weight's of several)
        return top.add(ag.TmapViewOp(C, [self.W, self.mc, n], t3)).result

    def prologue(self, o: _Ops) -> None:
        self.rank = o.add(c.LaunchParamOp(c.CommParam.RANK)).result
        if self.W > 1:
            self.epoch = o.add(c.EpochOp(self.ctl)).result

    def end(self, o: _Ops) -> None:
        if self.W > 1:
            o.add(c.EpochPublishOp(self.ctl, self.epoch))

    def tile_loop(self, r: _Ops, M, N, inits, cfg):
        if self.W == 1:
            return super().tile_loop(r, M, N, inits, cfg)
        loop = r.add(f.ChunkTileLoopOp(M, N, self.rank, inits, cfg.bm, cfg.bn, cfg.group_m,
                                       self.W))
        m0, n0, chunk, *carried = loop.block.args
        return loop, [m0, n0, chunk], carried

    # ---- the producer: wait once per remote row block, load from the shard's map ---
    def producer_setup(self, r: _Ops, cfg: GemmConfig) -> list[SSAValue]:
        if self.W == 1:
            return []
        r.add(s.TmaPrefetchOp(self.tG))
        self.want = r.bin(arith.MuliOp, self.epoch, self.side)
        return [r.c(-1)]                # the row block waited for last (none)

    def producer_tile(self, t: _Ops, coords, tA, extra):
        if self.W == 1:
            return super().producer_tile(t, coords, tA, extra)
        m0, _, chunk = coords
        (last,) = extra
        own = t.cmp("eq", chunk, self.rank)
        # (a CTA pair's second tile may lie wholly past the shard: its block is the last)
        block = t.bin(arith.MinUIOp, t.bin(arith.DivUIOp, m0, self.cfg.bm * self.cfg.group_m),
                      self.G - 1)
        key = t.bin(arith.AddiOp, t.bin(arith.MuliOp, chunk, self.G), block)
        tm, last = self.wait_row_block(t, own, chunk, key, last)
        return tm, m0, [t.select(own, t.c(0), chunk)], [last]

    def wait_row_block(self, t: _Ops, own: SSAValue, chunk: SSAValue, key: SSAValue,
                       last: SSAValue) -> tuple[SSAValue, SSAValue]:
        """For a peer's ``chunk``: wait, once per signal slot ``key`` (``last``: the slot
        waited for last), until every put CTA of its owner released it. Returns the map to
        load from (A's for the own shard, G's otherwise) and the new ``last``."""
        remote = _when(t, t.cmp("ne", chunk, self.rank))
        new = _when(remote, remote.cmp("ne", key, last))
        pad = new.add(c.BufferPtrOp(self.pad)).result
        new.add(c.SignalWaitOp(pad, key, self.want, chunk, c.WaitSite.ARRIVAL, "sys", 64))
        new.add(f.FenceAsyncGlobalOp())   # the puts (async proxy) before our TMA loads
        last = t.select(own, last, key)
        tm = t.add(f.TmapSelectOp(t.select(own, t.c(0), t.c(1)), [self.tA, self.tG])).result
        return tm, last

    # ---- the consumers: C through the 3-D map -------------------------------------
    def epilogue_tile(self, t: _Ops, cfg: GemmConfig, e: Epi, coords, row0, ebuf, extra):
        if self.W == 1:
            return super().epilogue_tile(t, cfg, e, coords, row0, ebuf, extra)
        _, n0, chunk = coords
        # an fp8 kernel's pieces are scaled first (row scales: rows of the gathered A)
        a_row0 = (t.bin(arith.AddiOp, t.bin(arith.MuliOp, chunk, self.mc), row0)
                  if e.scales is not None else None)
        ebuf = _tma_epilogue(t, cfg, e.acc, e.epi, e.wg, row0, n0, ebuf,
                             lambda slot, col, row: t.add(s.TmaStoreOp(e.epi, slot, e.tC,
                                                                       [col, row, chunk])),
                             e, a_row0)
        return ebuf, extra

    # ---- the put side ----------------------------------------------------------------
    def role_block(self, o: _Ops, cfg: GemmConfig, a_st: SSAValue) -> _Ops:
        if not self.side:
            return o
        slot = -(-self.piece // 1024) * 1024     # slots are whole KiB; a piece may be less
        ring = o.add(ag.SmemOverlayOp(a_st, self.ring, slot, s.SmemType(self.ring, slot))).result
        bars = o.add(s.MbarrierAllocOp(self.ring, 1)).result
        part = o.add(ag.CtaPartitionOp(self.side))
        self._put_side(_Ops(part.side_block), part.side_block.args[0], ring, bars)
        return _Ops(part.main)

    # the put side's order: peer by peer, a whole shard each (peer d needs this shard
    # in its slot W - k: the all-gather along rows), or row block by row block, every
    # peer (a subclass whose tiles need every shard's row block: the gather along K)
    rows_first = False

    def put_extra(self, o: _Ops, j: SSAValue, d: SSAValue) -> None:
        """What put CTA ``j`` sends peer ``d`` beside the shard, before the shard's first
        signal to d (nothing; A's fp8 row scales: :mod:`pkc.passes.fused_fp8_ag`)."""

    def _put_side(self, o: _Ops, j: SSAValue, ring: SSAValue, bars: SSAValue) -> None:
        W, G = self.W, self.G
        tid = o.add(c.GridValueOp(c.GridValue.TID)).result
        p = _when(o, o.cmp("eq", tid, 0))
        rank = self.rank
        if W > 1:
            # announce this launch to every peer (once per rank: put CTA 0), then wait
            # until every peer announced it: it finished reading the last launch's G
            first = _when(p, p.cmp("eq", j, 0))
            for kk in range(1, W):
                d = _peer(first, rank, kk, W)
                pad = first.add(c.BufferPtrOp(self.pad, d)).result
                first.add(f.SignalAddOp(pad, first.bin(arith.AddiOp, rank, W * G), first.c(1),
                                        "sys", "release"))
            own_pad = p.add(c.BufferPtrOp(self.pad)).result
            for kk in range(1, W):
                d = _peer(p, rank, kk, W)
                p.add(c.SignalWaitOp(own_pad, p.bin(arith.AddiOp, d, W * G), self.epoch, d,
                                     c.WaitSite.ARRIVAL, "sys", 64))
            p.add(f.FenceAsyncGlobalOp())
        src = p.add(c.BufferPtrOp(self.A)).result
        es = 1 if self.cfg.fp8 else 2          # bytes of A's elements (fp8 moves as bytes)
        total = self.mc * self.k * es
        blk = self.k * es * self.cfg.bm * self.cfg.group_m
        dests = W - 1 + (1 if self.self_copy else 0)
        base = p.bin(arith.MuliOp, rank, total)       # G[rank]'s byte offset
        zero = p.c(0)
        if self.rows_first:     # row block b to every peer, then b + 1
            ol, ob, b, (os_, oph) = _for(p, p.c(0), p.c(G), p.c(1), [zero, zero])
            il, ib, kk, (st, ph) = _for(ob, ob.c(1), ob.c(dests + 1), ob.c(1), [os_, oph])
            d = _peer(ib, rank, kk, W)
            dst = ib.add(c.BufferPtrOp(self.gath, d)).result
            if type(self).put_extra is not AgParts.put_extra:   # before d's first block
                self.put_extra(_when(ib, ib.cmp("eq", b, 0)), j, d)
        else:                   # peer by peer, the whole shard each
            ol, ob, kk, (os_, oph) = _for(p, p.c(1), p.c(dests + 1), p.c(1), [zero, zero])
            d = _peer(ob, rank, kk, W)
            dst = ob.add(c.BufferPtrOp(self.gath, d)).result
            self.put_extra(ob, j, d)
            il, ib, b, (st, ph) = _for(ob, ob.c(0), ob.c(G), ob.c(1), [os_, oph])
        off, dst_off, nb = self.block_span(ib, b, base, total, blk)
        st2, ph2 = self._copy_block(ib, j, src, dst, dst_off, off, nb, ring, bars, st, ph)
        ib.add(s.BulkWaitOp(0))
        ib.add(f.FenceAsyncGlobalOp())        # the bulk writes before the signal
        if W > 1:       # (the own copy needs no signal: nothing waits for it)
            sig = _when(ib, ib.cmp("ne", d, rank))
            pad = sig.add(c.BufferPtrOp(self.pad, d)).result
            sig.add(f.SignalAddOp(pad, sig.bin(arith.AddiOp, sig.bin(arith.MuliOp, rank, G), b),
                                  sig.c(1), "sys", "release"))
        ib.add(scf.YieldOp(st2, ph2))
        ob.add(scf.YieldOp(*il.results))

    def _copy_block(self, o: _Ops, j, src, dst, dst_off, src_off, nb, ring, bars, st, ph):
        """This CTA's pieces ``j, j + side, ...`` of the ``nb`` bytes at ``src + src_off``
        to ``dst + dst_off`` through the ring (slot ``st``, phase ``ph`` carried from the
        last block: its stores were drained). Returns the ring's (slot, phase)."""
        piece, side, R, lag = self.piece, self.side, self.ring, self.lag
        npieces = o.bin(arith.DivUIOp, o.bin(arith.AddiOp, nb, piece - 1), piece)
        has = o.cmp("ult", j, npieces)
        mine_n = o.bin(arith.DivUIOp, o.bin(arith.AddiOp, o.bin(arith.SubiOp, npieces, j),
                                            side - 1), side)
        mine = o.select(has, mine_n, o.c(0))
        lim = o.bin(arith.MinUIOp, o.c(R - lag), mine)

        def geometry(b: _Ops, l: SSAValue):
            poff = b.bin(arith.MuliOp, b.bin(arith.AddiOp, j, b.bin(arith.MuliOp, l, side)), piece)
            size = b.bin(arith.MinUIOp, b.bin(arith.SubiOp, nb, poff), b.c(piece))
            return poff, size

        def issue(b: _Ops, l: SSAValue, slot: SSAValue) -> None:
            poff, size = geometry(b, l)
            b.add(ag.BulkLoadOp(src, b.bin(arith.AddiOp, src_off, poff), size, ring, slot, bars,
                                slot))

        # the first lim pieces into the slots after the carried one
        _, pre, l0, _ = _for(o, o.c(0), lim, o.c(1), [])
        issue(pre, l0, pre.bin(arith.RemUIOp, pre.bin(arith.AddiOp, st, l0), R))
        pre.add(scf.YieldOp())
        loop, m, l, (ms, mph) = _for(o, o.c(0), mine, o.c(1), [st, ph])
        # the next load: piece l + lim into the slot of piece l - lag, once that piece's
        # stores read it (fresh slots while l < lag)
        nxt = m.bin(arith.AddiOp, l, lim)
        more = _when(m, m.cmp("ult", nxt, mine))
        late = _when(more, more.cmp("uge", l, lag))
        late.add(s.BulkWaitOp(lag - 1, read=True))
        issue(more, nxt, more.bin(arith.RemUIOp, more.bin(arith.AddiOp, ms, lim), R))
        m.add(s.MbarrierWaitOp(bars, ms, mph))
        poff, size = geometry(m, l)
        m.add(ag.BulkStoreOp(dst, m.bin(arith.AddiOp, dst_off, self.piece_dest(m, poff)),
                             size, ring, ms))
        m.add(s.BulkCommitOp())
        m.add(scf.YieldOp(*m.advance(ms, mph, R)))
        return loop.results[0], loop.results[1]


def _when(o: _Ops, cond: SSAValue) -> _Ops:
    return _Ops(o.add(c.WhenOp(cond)).block)


def _peer(o: _Ops, rank: SSAValue, kk, W: int) -> SSAValue:
    """(rank + W - kk) mod W: the k-th peer served (rank - 1, rank - 2, ...)."""
    kk = o.c(kk) if isinstance(kk, int) else kk
    return o.bin(arith.RemUIOp, o.bin(arith.SubiOp, o.bin(arith.AddiOp, rank, W), kk), W)


def _dtype(t) -> str | None:
    return _DTYPE.get(type(t.element_type)) if isinstance(t, (TensorType, BufferType)) else None


def operand_problem(name: str, a, b, outs) -> str | None:
    """Why the shard ``a``, the weight ``b`` and the results ``outs`` of a ``name`` kernel
    do not suit a scheduled gather + GEMM: all 2-D, all bf16 or all f16."""
    if any(len(t.get_shape()) != 2 for t in (a, b, *outs)):
        return f"{name}: operands are not 2-D ({a}, {b})"
    dt = _dtype(a)
    if dt is None or any(_dtype(t) != dt for t in (b, *outs)):
        return f"{name}: operands and results must all be bf16 or f16 ({a}, {b})"
    return None


def why_not_ag(kop: k.KernelOp) -> str | None:
    """Why an ``all_gather_mm`` kernel (inputs ``[x, B0, B1, ...]``, results ``[Y0, Y1,
    ..., (the gathered x)]``) cannot be scheduled (None: it can)."""
    a, weights = kop.inputs[0].type, [w.type for w in kop.inputs[1:]]
    outs = [o.type for o in kop.outputs]
    if not weights or len(outs) not in (len(weights), len(weights) + 1):
        return (f"all_gather_mm with {len(weights)} weights and {len(outs)} results: not "
                "one result per weight (and the gathered operand)")
    for b in weights:
        if (why := operand_problem("all_gather_mm", a, b, outs)) is not None:
            return why
    W = kop.world_size
    Mc, K = a.get_shape()
    for b, y in zip(weights, outs):
        K2, N = b.get_shape()
        if K != K2 or tuple(y.get_shape()) != (W * Mc, N):
            return f"all_gather_mm: shard {a} x B {b} -> {y} is not a gather of {W} shards"
        if K % 8 or N % 8:
            return (f"all_gather_mm: N = {N} and K = {K} must be multiples of 8 (TMA row "
                    "strides)")
        if min(Mc, N, K) == 0:
            return "all_gather_mm: empty product"
    if len({b_operand(w)[1] for w in kop.inputs[1:]}) > 1:
        return ("all_gather_mm: weights in both layouts (B [K, N] and a transposed [N, K]): "
                "the tiles' B maps are of one type")
    if len(outs) > len(weights) and tuple(outs[-1].get_shape()) != (W * Mc, K):
        return f"all_gather_mm: the gathered result {outs[-1]} is not [{W * Mc}, {K}]"
    if W * Mc * K * 2 >= MAX_BYTES:
        return f"all_gather_mm: the gathered A ({W * Mc * K * 2} bytes) needs 64-bit offsets"
    return None


def put_ctas(plan: dict, W: int, asked: bool, M: int, N: int, K: int,
             target: str) -> tuple[int, str]:
    """(put CTAs, why): none where there is nothing to put (W = 1, G not asked for);
    else sm-partition's plan (from the GEMM's predicted time), else the rule."""
    if W == 1 and not asked:
        return 0, "W = 1: nothing to put"
    planned = plan.get("put_ctas")
    if isinstance(planned, int) and not isinstance(planned, bool) and planned > 0:
        return planned, f"{planned} put CTAs from sm-partition's plan"
    return ag_put_ctas(M, N, K, W, target)


def put_ring(cfg: GemmConfig) -> tuple[int, int, int]:
    """(arena bytes, ring slots, piece bytes): the ring lies over the GEMM's stage memory,
    PUT_RING pieces of PUT_PIECE bytes, or smaller pieces where the stages are smaller
    (never fewer than PUT_RING slots)."""
    arena = cfg.stages * (cfg.a_stage_bytes + cfg.b_stage_bytes)
    return arena, PUT_RING, min(PUT_PIECE, arena // PUT_RING // 1024 * 1024)


def signal_allocs(block: Block, W: int, slots: int) -> tuple[SSAValue | None, SSAValue | None]:
    """The symmetric signal pad (W x ``slots`` + W u32, zeroed once) and the rank's
    ``[epoch, ctas_done]``, added to ``block``; none at W = 1."""
    if W == 1:
        return None, None
    i32 = IntegerType(32)
    pad = k.AllocOp(BufferType([W * slots + W], i32, SYMMETRIC), zero=True)
    ctl = k.AllocOp(BufferType([2], i32, LOCAL), zero=True)
    block.add_op(pad)
    block.add_op(ctl)
    return pad.result, ctl.result


def is_scaled(kop: k.KernelOp) -> bool:
    """Whether overlap fused fp8 scaled matmuls into ``kop`` (``pk.fusion.scaled``)."""
    fz = kop.attributes.get("pk.fusion")
    v = fz.data.get("scaled") if fz is not None else None
    return v is not None and bool(v.value.data)


def schedule_all_gather_mm(kop: k.KernelOp, target: str, variant: str,
                           parts_cls: type = AgParts, blocks: int = 1) -> None:
    """Rewrite ``kop`` (pattern ``all_gather_mm``) into the scheduled kernel, or leave it
    with a remark saying why not. ``parts_cls`` / ``blocks``: another layout of the shard
    (:mod:`pkc.passes.ag_blocks_schedule`: ``blocks`` blocks of rows per shard). Several
    weights (inputs ``[x, B0, B1, ...]``): one tile space over every weight's tiles, each
    weight's columns padded to whole tiles; ``parts_cls`` then takes ``weights = (B
    buffers, C buffers, widths)`` (:func:`pkc.passes.gather_many.many_parts`); fp8 (inputs
    ``[x, SX, B0.., SB0..]``) also the B scales, one picked per tile."""
    scaled = is_scaled(kop)     # fp8: X, SX, B0.., SB0.. (schedule-fused checked it)
    reason = None if scaled else why_not_ag(kop)
    if reason:
        add_remark(kop, f"fused kernel left unscheduled: {reason}")
        return
    W = kop.world_size
    nsc = (len(kop.inputs) - 2) // 2    # (scaled: the weights)
    a, bs = ((kop.inputs[0], list(kop.inputs[2:2 + nsc])) if scaled
             else (kop.inputs[0], kop.inputs[1:]))
    Mc, K = a.type.get_shape()
    ns = [b.type.get_shape()[1] for b in bs]
    nw = len(bs)
    asked = len(kop.outputs) == nw + 1
    if scaled:
        from pkc.passes.fused_fp8 import fp8_operands

        b_vals, layouts, dts, types = zip(*[fp8_operands(kop, a, b) for b in bs])
        layout, dt, types = layouts[0], dts[0], types[0]   # (why_not_scaled: one dtype)
    else:       # why_not_ag checked that the weights share one layout
        b_vals, layouts = zip(*[b_operand(b) for b in bs])
        layout, dt, types = layouts[0], _dtype(a.type), ("", "")
    plan = plan_of(kop)
    side, why_side = put_ctas(plan, W, asked, W * Mc, sum(ns), K, target)
    if nw > 1:          # the tile that pads the weights least (gather_many.many_config)
        from pkc.passes.gather_many import many_config, many_parts  # (they import this)

        cfg = many_config(W, Mc, K, ns, dt, layout, target, variant,
                          get_target(target).num_sms - side)
    else:
        cfg = fused_config(FusedKind.AG, W * Mc, ns[0], K, W, dt, layout, target, variant)
    if scaled and nw == 1:      # (CTA pairs where the plain fp8 GEMM takes them)
        cfg = fp8_fused_config(cfg, types, W * Mc, ns[0], K, target, variant, parts_cls)
    elif scaled:
        cfg = cfg.with_(a_type=types[0], b_type=types[1])
    pairs = getattr(cfg, "cluster_m", 1)    # (a tensor-memory view has none here)
    if side % pairs:            # CTA pairs: the put CTAs a whole number of clusters
        side += pairs - side % pairs
        why_side += f", rounded up to {side} (whole CTA pairs)"
    # the tile space's columns: every weight's, each padded to whole tiles
    N = ns[0] if nw == 1 else sum(-(-n // cfg.bn) * cfg.bn for n in ns)
    arena, ring, piece = put_ring(cfg)
    ys = [o.type for o in kop.outputs[:nw]]
    scale_ins = [kop.inputs[1], *kop.inputs[2 + nsc:]] if scaled else []
    block = Block(arg_types=[BufferType([Mc, K], a.type.element_type),
                             *[BufferType(v.type.get_shape(), v.type.element_type)
                               for v in [*b_vals, *scale_ins]],
                             *[BufferType(y.get_shape(), y.element_type, LOCAL) for y in ys],
                             BufferType([W * Mc, K], a.type.element_type, SYMMETRIC)])
    A, Gb = block.args[0], block.args[-1]
    Bs, Cs = list(block.args[1:1 + nw]), list(block.args[-1 - nw:-1])
    scales = (Scales(block.args[1 + nw], block.args[2 + nw], rows=W * Mc) if scaled
              else None)
    sbs = list(block.args[2 + nw:2 + 2 * nw]) if scaled else []
    pad, ctl = signal_allocs(block, W, parts_cls.signal_slots(Mc, cfg, blocks))
    if scaled and W > 1 and len(kop.inputs[1].type.get_shape()) == 2:
        from pkc.passes.fused_fp8_ag import row_scale_parts  # A's row scales

        parts_cls = row_scale_parts(parts_cls)
    if nw > 1:          # (over the layout's parts, fp8 row scales included)
        parts_cls = many_parts(parts_cls)
    parts = parts_cls(W, Mc, N, K, cfg, A, Gb, pad, ctl, side, ring, piece, asked,
                      **({"blocks": blocks} if blocks > 1 else {}),
                      **({"weights": (Bs, Cs, ns, *([sbs] if scaled else []))}
                         if nw > 1 else {}))
    build_fused_gemm(block, A, Bs[0], Cs[0], parts.tile_rows, N, K, cfg, parts, scales)
    block.add_op(k.YieldOp())
    attrs = {key: v for key, v in kop.attributes.items() if key not in ("kernel_name", "world")}
    gtype = TensorType(a.type.element_type, [W * Mc, K])
    new = k.KernelOp("all_gather_scaled_matmul" if scaled else "all_gather_matmul", W,
                     [a, *b_vals, *scale_ins], [*ys, gtype], Region(block), attributes=attrs)
    comm_sms = plan.get("comm_sms", 0) or 0
    tmem_plan, tmem_words = arrangement(cfg)
    # sm_100a: never under cluster launch control (fused_clc says why)
    clc_plan, clc_words = static_words(ClcKind.AG, cfg)
    set_plan(new, schedule=ScheduleKind.FUSED, fused_kind=FusedKind.AG, bm=cfg.bm, bn=cfg.bn,
             stages=cfg.stages, consumers=cfg.consumers, group_m=cfg.group_m, b_layout=layout,
             chunk_rows=Mc, tiles_per_chunk=parts.tiles_per_chunk, row_blocks=parts.G,
             scheduled_overlap=OverlapStyle.INTER if side else OverlapStyle.NONE, comm_ctas=side,
             put_piece=piece, put_ring=ring, put_lag=parts.lag, gathered_output=asked,
             **({"batches": blocks} if blocks > 1 else {}),
             **({"weights": nw} if nw > 1 else {}), **tmem_plan, **clc_plan)
    followed = ""
    if comm_sms and comm_sms != side:
        followed = (f"; the kernel-level plan's {comm_sms} communicate SMs are for a "
                    "green-context split, the put CTAs here share the grid with the GEMM")
    what = (f"fp8 GEMM{'' if nw == 1 else 's'} ({types[0]} x {types[1]} -> {dt}, scales in "
            "the epilogue)" if scaled else "GEMM" if nw == 1 else f"{nw} GEMMs")
    shape = f"{W * Mc}x{N}x{K}" if nw == 1 else f"{W * Mc}x({'+'.join(map(str, ns))})x{K}"
    many = ("" if nw == 1 else
            f"one kernel over {nw} weights, gathering once (a tile is one weight's: "
            f"{N // cfg.bn} column tiles, each weight's padded to whole tiles, B and C maps "
            + ("and B's scale " if scaled else "") + "selected per tile); ")
    add_remark(new, f"scheduled all-gather + {what} W={W} {shape}"
               f"{'' if scaled else ' ' + dt}: {cfg.tag()}, {many}"
               f"{W} shards of {parts.tiles_per_chunk} tiles (own shard first), "
               f"{parts.G} row blocks per shard signalled one by one; "
               f"{getattr(parts, 'layout_words', '')}{why_side}{followed}; "
               f"puts by cp.async.bulk through a {ring} x {piece // 1024} KiB ring; "
               + ("the gathered A is returned" if asked else "the gathered A stays in the kernel")
               + tmem_words + clc_words)
    new.location = kop.location
    Rewriter.replace_op(kop, new, new_results=list(new.results[:len(kop.outputs)]))


__all__ = ["AgParts", "schedule_all_gather_mm", "why_not_ag", "row_blocks", "is_scaled"]
