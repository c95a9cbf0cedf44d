"""The parts of the scheduled GEMM that a fused GEMM + reduce-scatter replaces
(:class:`RsParts`, given to :func:`pkc.passes.gemm_schedule.build_gemm`).

    rank r: A_r [W*Mc, K] @ B_r -> partial product; out_p [Mc, N] (symmetric, on rank p)
    = sum over ranks of the rows [p*Mc, (p+1)*Mc) of their partials.

The protocol (that of the hand kernel ``GemmRsKernel``, bf16 / f16 accumulation in the
output):

* Tile space: W chunks of the ``[Mc, N]`` tiles (``pks.chunk_tile_loop``); slot s is
  chunk ``(rank + s) mod W``, so every rank starts with its own chunk and at every step
  the ranks' destinations form a permutation. The producer loads A's rows ``chunk * Mc +
  m0`` (rows past a chunk's end belong to the next chunk; their products are clipped by
  the output map).
* Epilogue per tile (consumer warpgroups, the first thread of each issues the bulk ops):
  the pieces of the tile go through the GEMM's swizzled buffers and, by TMA, into the
  chunk owner's copy of the output through its tensor map (``pks.peer_tmap`` W times,
  ``pks.tmap_select``): a plain store for the own chunk (the owner's stores come first:
  nothing is ever zeroed), a reduce-add for a peer's, issued only after the peer's own
  chunk is complete there (a bounded wait on its pad slot, once per peer: when the chunk
  changes to one that is not the own one; a CTA's tiles of a chunk come in one contiguous
  run of its tile loop, so it never enters a chunk twice and needs no per-owner state).
* Signals: when a warpgroup's chunk changes (and at its end) it waits for its bulk
  groups, fences the async proxy and adds its tile count to slot ``rank`` of the chunk
  owner's pad (release: at GPU scope for the own chunk, whose stores and pad are this
  GPU's, at system scope for a peer's). The owner's chunk is whole once slot q reached
  ``epoch x tiles per chunk x consumers`` for every q (x 1 for ping-pong consumers, which
  take a tile each) (epochs: pads are never reset);
  every consumer warpgroup of the owner waits for the peers' slots before the kernel ends.
* Epoch: read from the rank's control word before a CTA barrier, published by the last
  CTA at the end (``pks.epoch`` / ``pks.epoch_publish``), so that launches and CUDA-graph
  replays need no host work.
* W = 1: no peer reads a pad, so no epoch, signal or publication: the plain GEMM's
  prologue and end (docs/PERF_NOTES.md 2026-12-02 (d): the fixed cost they had).
"""

from __future__ import annotations

from xdsl.dialects import arith
from xdsl.ir import SSAValue

from pkc.dialects import graph as g
from pkc.dialects import schedule as s
from pkc.dialects import schedule_comm as c
from pkc.dialects import schedule_fused as f
from pkc.passes.gemm_schedule import Epi, GemmParts, Scales, _Ops, _tma_epilogue, build_gemm
from pkc.passes.gemm_schedule_pingpong import pingpong_refusal, tile_users
from pkc.passes.gemm_schedule_tmem import TmemView, build_gemm_tmem
from pkc.target import fused_tuning as ft
from pkc.target.gemm_tuning import (MULTICAST_FP8, MULTICAST_MIN_TILES,
                                    PAIRS_PINGPONG_MAX_KBLOCKS, PINGPONG_PAIRS_FP8, VARIANTS,
                                    BLayout, Epilogue, GemmConfig, multicast_tiles)
from pkc.target.gemm_tuning_sm100 import choose_tmem_config, stages_for
from pkc.target.targets import get_target


def b_operand(b: SSAValue) -> tuple[SSAValue, BLayout]:
    """(B as the kernel reads it, its layout): a ``pk.transpose``d 2-D ``[N, K]`` weight is
    read in place (``"nk"``, no transpose materialized), anything else as ``[K, N]``."""
    src = b.owner
    if isinstance(src, g.TransposeOp) and len(src.input.type.get_shape()) == 2:
        return src.input, BLayout.NK
    return b, BLayout.KN


def fused_config(kind: ft.FusedKind, M: int, N: int, K: int, W: int, dt: str, layout: BLayout,
                 target: str, variant: str = "", fresh: bool = False) -> GemmConfig | TmemView:
    """The GEMM tile of a fused kernel: the forced ``variant``, else the tuning table's
    (:func:`pkc.target.fused_tuning.fused_gemm_config`), with what the fused epilogue needs
    (TMA stores; no CTA pairs but a forced variant's; 128-column tiles for B [K, N]; two
    epilogue buffers where the
    summed epilogue loads ahead: ``fresh``). A target whose MMA accumulates in tensor
    memory (sm_100a) gets the tensor-memory GEMM's tile (``choose_tmem_config`` for the
    whole product, unmeasured; TMA epilogue, two epilogue buffers) as a :class:`TmemView`,
    which :func:`build_fused_gemm` builds in the tensor-memory arrangement."""
    tgt = get_target(target)
    sms = tgt.num_sms
    if tgt.sm_arch == "sm_100a":
        return tmem_config("schedule-fused", M, N, K, dt, layout, target, variant)
    if variant:
        cfg = VARIANTS[variant].with_(dtype=dt, b_layout=layout)
    else:
        cfg = ft.fused_gemm_config(kind, M, N, K, W, dt, layout, sms, target)
    if layout is BLayout.KN and cfg.bn % 64:
        cfg = cfg.with_(bn=128)         # B [K, N] is loaded in 64-column boxes
    # CTA pairs (multicast B) only where forced: the parts that take them say so
    # (GemmParts.cluster_pairs_problem), the table's tile has none
    cfg = cfg.with_(cluster_m=cfg.cluster_m if variant else 1, epilogue=Epilogue.TMA)
    if fresh:
        cfg = cfg.with_(epi_bufs=2)
    cfg.validate()
    return cfg


def fp8_fused_config(cfg: GemmConfig | TmemView, types: tuple[str, str], M: int, N: int,
                     K: int, target: str, variant: str, parts_cls: type
                     ) -> GemmConfig | TmemView:
    """``cfg`` (of :func:`fused_config`) with fp8 operand ``types``; on sm_90a, unless a
    ``variant`` is forced, the plain fp8 GEMM's CTA pairs (the cooperative 128 x 256 tile,
    B multicast) where it takes them (every CTA with
    :data:`~pkc.target.gemm_tuning.MULTICAST_MIN_TILES` tiles of the whole ``M x N``
    product or more) and ``parts_cls`` is built for pairs: measured at W = 1 on the H200
    (docs/PERF_NOTES.md 2026-12-02 (s)), 1.5-1.9% faster back to back than the single-CTA
    tile, within 1% in rotated rounds. On those pairs, ping-pong consumers
    (:data:`~pkc.target.gemm_tuning.PINGPONG_PAIRS_FP8`) where a tile's main loop has at
    most :data:`~pkc.target.gemm_tuning.PAIRS_PINGPONG_MAX_KBLOCKS` k-blocks and the parts
    can work as a ping-pong pair (journal (t))."""
    cfg = cfg.with_(a_type=types[0], b_type=types[1])
    if (variant or isinstance(cfg, TmemView) or cfg.b_layout is not BLayout.NK
            or parts_cls.cluster_pairs_problem is not None
            or multicast_tiles(M, N, get_target(target).num_sms) < MULTICAST_MIN_TILES):
        return cfg
    pairs = MULTICAST_FP8       # (cfg.bk: the fp8 k-block, 128)
    if -(-K // cfg.bk) <= PAIRS_PINGPONG_MAX_KBLOCKS and pingpong_refusal(parts_cls) is None:
        pairs = PINGPONG_PAIRS_FP8
    return pairs.with_(dtype=cfg.dtype, a_type=types[0], b_type=types[1])


def tmem_config(pass_name: str, M: int, N: int, K: int, dt: str, layout: BLayout, target: str,
                variant: str = "") -> TmemView:
    """The tensor-memory GEMM tile of a fused (or MoE) kernel for an sm_100a ``target``
    (``choose_tmem_config`` for the whole ``M x N x K`` product, unmeasured), as the
    fused parts read it; a ValueError naming ``pass_name`` for a forced wgmma ``variant``."""
    if variant:
        raise ValueError(f"{pass_name}: variant={variant} is a wgmma (sm_90a) tile; target "
                         f"{target} (sm_100a) builds the tensor-memory GEMM (drop the variant "
                         "option)")
    # producer_regs=0: no setmaxnreg.dec in the producer. No role of this arrangement
    # takes registers back (no inc), and at 40 the epoch, live from the prologue to its
    # publication after the roles, spilled (ptxas -arch=sm_100a, 4 bytes).
    # pair=False: the fused parts tile one CTA's 128 rows (no CTA pairs yet); clc=False:
    # their tile loops are their own (chunked), not under cluster launch control
    cfg = choose_tmem_config(M, N, K, dt, layout, get_target(target).num_sms)
    cfg = cfg.with_(epilogue=Epilogue.TMA, epi_bufs=2, producer_regs=0, pair=False, clc=False)
    cfg = cfg.with_(stages=stages_for(cfg.bn, cfg.epi_bytes))
    cfg.validate()
    return TmemView(cfg)


def arrangement(cfg: GemmConfig | TmemView) -> tuple[dict, str]:
    """(plan entries, remark words) naming the GEMM arrangement a fused kernel became: for
    the wgmma one ``pingpong`` where its consumers are a ping-pong pair (its remark says
    the tile), the tensor-memory one spelled out (the same communication epilogue, another
    MMA path)."""
    if not isinstance(cfg, TmemView):
        return ({"pingpong": True} if cfg.pingpong else {}), ""
    return ({"acc": "tmem", "acc_bufs": cfg.acc_bufs},
            f"; sm_100a kernel: tcgen05 MMAs from one thread into {cfg.acc_bufs} tensor-memory "
            "accumulators, one epilogue warpgroup reads them (tcgen05.ld) and moves the tiles "
            "while the next tile's MMAs run")


def build_fused_gemm(body, A: SSAValue, B: SSAValue, C: SSAValue, M: int, N: int, K: int,
                     cfg: GemmConfig | TmemView, parts: GemmParts, scales: Scales | None = None):
    """The fused kernel's GEMM with ``parts``: the tensor-memory arrangement (mma and
    epilogue roles, :func:`pkc.passes.gemm_schedule_tmem.build_gemm_tmem`) for a config
    of :func:`fused_config` for sm_100a, else the wgmma one (producer and consumers)."""
    if isinstance(cfg, TmemView):      # fp8 (scales): tcgen05 kind::f8f6f4, scaled pieces
        return build_gemm_tmem(body, A, B, C, M, N, K, cfg, parts, scales)
    if cfg.cluster_m > 1 and parts.cluster_pairs_problem is not None:
        raise ValueError(f"{cfg.tag()}: CTA pairs (cluster_m = {cfg.cluster_m}) are not built "
                         f"for {type(parts).__name__}: {parts.cluster_pairs_problem}")
    return build_gemm(body, A, B, C, M, N, K, cfg, parts, scales=scales)


def chunk_tile_count(mc: int, n: int, cfg) -> int:
    """The tiles of one chunk as the chunk tile loop visits them (``f.chunk_tiles``: row
    tiles in whole CTA pairs, a pair's second tile may lie wholly past the chunk's rows:
    its loads read zeros or the next chunk's rows, its stores are clipped by the maps, and
    it is counted like any tile)."""
    rows, cols = f.chunk_tiles(mc, n, cfg.bm, cfg.bn, getattr(cfg, "cluster_m", 1))
    return rows * cols


class RsParts(GemmParts):
    """GEMM + reduce-scatter into the symmetric output (see the module doc). ``world``
    ranks, chunks of ``mc`` rows; ``pad``: the symmetric signal pad (W u32 slots, zeroed
    once), ``ctl``: the rank's ``[epoch, ctas_done]`` control word."""

    def __init__(self, world: int, mc: int, n: int, cfg: GemmConfig, pad: SSAValue,
                 ctl: SSAValue):
        self.W, self.mc, self.cfg, self.pad, self.ctl = world, mc, cfg, pad, ctl
        self.tiles_per_chunk = chunk_tile_count(mc, n, cfg)

    def c_map(self, top: _Ops, C: SSAValue, tc_t) -> SSAValue | None:
        self.maps = [top.add(f.PeerTmapOp(C, p, tc_t)).result for p in range(self.W)]
        return None

    # whether the subclass's own tile loop reads the launch epoch (cluster launch
    # control's tickets, the fresh-output kernel's staging halves)
    tile_loop_reads_epoch = False

    def needs_epoch(self) -> bool:
        """Whether the kernel reads the launch epoch: W > 1 (the counts its waits compare
        with), or a tile loop that reads it. At W = 1 no peer reads a signal, so the kernel
        has the plain GEMM's prologue and end: no control-word load ahead of the setup
        barrier, no completion atomic."""
        return self.W > 1 or self.tile_loop_reads_epoch

    def prologue(self, o: _Ops) -> None:
        self.rank = o.add(c.LaunchParamOp(c.CommParam.RANK)).result
        self.epoch = o.add(c.EpochOp(self.ctl)).result if self.needs_epoch() else None

    def end(self, o: _Ops) -> None:
        if self.epoch is not None:
            o.add(c.EpochPublishOp(self.ctl, self.epoch))

    def tile_loop(self, r: _Ops, M, N, inits, cfg):
        loop = r.add(f.ChunkTileLoopOp(M, N, self.rank, inits, cfg.bm, cfg.bn, cfg.group_m, self.W))
        m0, n0, chunk, *carried = loop.block.args
        return loop, [m0, n0, chunk], carried

    def producer_row(self, t: _Ops, coords) -> SSAValue:
        m0, _, chunk = coords
        return t.bin(arith.AddiOp, t.bin(arith.MuliOp, chunk, self.mc), m0)

    def adds_after(self, o: _Ops, chunk: SSAValue) -> SSAValue:
        """The rank whose tiles of ``chunk`` must have landed (its slot on the owner's pad)
        before this rank adds into it: the owner (its stores come first). A variant that
        fixes the order of the adds waits for another rank
        (:class:`pkc.passes.fused_rs_ordered.RsOrderedParts`)."""
        return chunk

    # ---- the consumers' epilogue ---------------------------------------------------
    def epilogue_setup(self, r: _Ops, cfg: GemmConfig) -> list[SSAValue]:
        """The warpgroup leader predicate, the count every slot reaches this epoch; the
        carried (chunk pending: the own one, so that a first tile of a peer's chunk waits
        for its owner; tiles pending)."""
        tid = r.add(c.GridValueOp(c.GridValue.TID)).result
        self.lead = r.cmp("eq", r.bin(arith.AndIOp, tid, 127), 0)
        # the output maps' descriptors fetched while the main loop runs, not at the first
        # store of the tile (on the critical path when a CTA has one tile)
        w = self._when(r, self.lead)
        for m in self.maps:
            w.add(s.TmaPrefetchOp(m))
        # every tile is counted by each warpgroup that handles it (tile_users)
        self.want = (None if self.epoch is None else
                     r.bin(arith.MuliOp, self.epoch, self.tiles_per_chunk * tile_users(cfg)))
        return [self.rank, r.c(0)]

    def _when(self, o: _Ops, cond: SSAValue) -> _Ops:
        w = o.add(c.WhenOp(cond))
        return _Ops(w.block)

    def _signal(self, o: _Ops, chunk: SSAValue, count: SSAValue) -> None:
        """Leader, if ``count`` tiles are pending: they landed (bulk groups done, async
        proxy fenced); add the count to slot rank of the chunk owner's pad. Nothing at
        W = 1 (no peer reads the pad)."""
        if self.W == 1:
            return
        w = self._when(self._when(o, o.cmp("ne", count, 0)), self.lead)
        w.add(s.BulkWaitOp(0))
        w.add(f.FenceAsyncGlobalOp())
        pad = w.add(c.BufferPtrOp(self.pad, chunk)).result
        # the own chunk's count at GPU scope, as the hand kernel signalled it: the stores
        # it orders and the pad are this GPU's memory, which its L2 serves to the peers'
        # loads and reduce-adds too, and the CTA made no peer write before it (the own
        # chunk is the tile loop's first). A system-scope release (MEMBAR.SYS) sat on the
        # critical path of every peer's first add (measured: docs/PERF_NOTES.md 2026-12-02)
        own = w.cmp("eq", chunk, self.rank)
        self._when(w, own).add(f.SignalAddOp(pad, self.rank, count, "gpu", "release"))
        self._when(w, w.cmp("ne", chunk, self.rank)).add(
            f.SignalAddOp(pad, self.rank, count, "sys", "release"))

    def outer_coords(self, coords) -> list[SSAValue]:
        """The output maps' coordinates after [column, row] (none: 2-D maps; a 3-D view's
        block index: pkc/passes/fused_rs_layouts.py)."""
        return []

    def epilogue_tile(self, t: _Ops, cfg: GemmConfig, e: Epi, coords, row0, ebuf, extra):
        m0, n0, chunk = coords[:3]
        cur, pend = extra
        changed = t.cmp("ne", chunk, cur)
        self._signal(t, cur, t.select(changed, pend, t.c(0)))
        pend = t.select(changed, t.c(0), pend)
        add = t.cmp("ne", chunk, self.rank)
        if self.W > 1:
            # adds into a peer's chunk only after its owner stored it: once per owner, as
            # pks.chunk_tile_loop gives a CTA each chunk's tiles in one contiguous run
            # (slot t / tiles grows with t), so the first tile of a peer's chunk is the
            # one where the chunk changes (or the CTA's first tile: cur starts as the rank)
            w = self._when(self._when(self._when(t, changed), add), self.lead)
            pad = w.add(c.BufferPtrOp(self.pad, chunk)).result
            before = self.adds_after(w, chunk)
            w.add(c.SignalWaitOp(pad, before, self.want, before, c.WaitSite.ARRIVAL, "sys", 64))
            w.add(f.FenceAsyncGlobalOp())
        tm = t.add(f.TmapSelectOp(chunk, self.maps)).result
        # an fp8 kernel scales each piece first (A's row scales: rows chunk x mc + row0 ..)
        # (the same value as the scale prefetch's e.a_row0, which then is used)
        a_row0 = (e.a_row0 or t.bin(arith.AddiOp, t.bin(arith.MuliOp, chunk, self.mc), row0)
                  if e.scales is not None else None)
        ebuf = _tma_epilogue(t, cfg, e.acc, e.epi, e.wg, row0, n0, ebuf,
                             lambda slot, col, row: t.add(f.TmaStoreOrAddOp(
                                 e.epi, slot, tm, [col, row, *self.outer_coords(coords)], add)),
                             e, a_row0)
        pend = t.bin(arith.AddiOp, pend, 1)
        return ebuf, [chunk, pend]

    def epilogue_finish(self, r: _Ops, cfg: GemmConfig, extra) -> None:
        cur, pend = extra
        self._signal(r, cur, pend)
        if self.W == 1:
            return                      # the own tiles: ordered by the kernel's completion
        w = self._when(r, self.lead)
        own = w.add(c.BufferPtrOp(self.pad)).result
        for q in range(self.W):
            qv = w.c(q)
            ww = self._when(w, w.cmp("ne", qv, self.rank))
            ww.add(c.SignalWaitOp(own, qv, self.want, qv, c.WaitSite.EXIT, "sys", 64))
        w.add(f.FenceAsyncGlobalOp())


__all__ = ["RsParts", "arrangement", "tmem_config", "build_fused_gemm", "fused_config", "b_operand",
           "chunk_tile_count", "fp8_fused_config"]
