"""Builds the schedule-level (``pks``) program of a persistent, warp-specialized GEMM.

    C[M, N] = A[M, K] @ B        (bf16 / f16 in, f32 accumulate, bf16 / f16 out)
    C[M, N] = (A @ B) * sa * sb [+ bias]   (fp8 in: pk.scaled_matmul, torch's _scaled_mm)

fp8 at the schedule level (the shape other targets' lowerings build on): the same program
with 8-bit element types and a scale step, no new structure -

* ``!pks.tmap<e4m3 | e5m2, 128 x rows, swizzle 128>`` for A ([M, K]) and B ([N, K], K-major:
  torch's column-major ``mat2``); a stage row is still 128 bytes, now 128 elements of K
  (``GemmConfig.bk``), so stage bytes, slots and the ring are unchanged;
* ``pks.mma_async {dtype = "e4m3", b_dtype = "e5m2"}`` (``b_dtype`` only where B's type
  differs): one 128-deep k-block, B K-major (wgmma m64nNk32 .e4m3/.e5m2 on sm_90a; sm_100a
  maps it to tcgen05 kind::f8f6f4);
* ``pks.acc_scale %acc, %SA, %SB [, %bias] at (row0, n0) in (M, N) {piece}`` in the
  epilogue, after the tile's last ``pks.mma_wait``: the f32 accumulator times the scales
  (tensor-wise [1] or row-wise [M, 1] / [1, N] kernel buffers), plus the bias; the TMA
  epilogue scales each 64 x w piece just before writing it (``piece``; its scales are
  then live one piece at a time), the register epilogue the whole tile; then the stores
  (or a fused kernel's puts and reduce-adds) move the scaled tile as any accumulator.

Written with the schedule level's fine-grained ops, the way a Gluon kernel is written in
Triton: every stage wait, arrival, copy and MMA is an op that a later pass can move or
change. The decisions (tile, stages, consumers, cluster, epilogue) come in as a
:class:`~pkc.target.gemm_tuning.GemmConfig`; the scheduling pass
(:mod:`pkc.passes.schedule_matmul`) chooses it and writes it as attributes.

The program (one CTA per SM, ``128 x (1 + consumers)`` threads):

* producer (warpgroup 0, 40 registers, one thread): for every tile of the CTA and every
  64-deep k-block, wait until ring stage ``s`` is empty, announce the stage's bytes on
  ``full[s]``, TMA-load the A and B boxes into the stage; advance ``(s, phase)``.
* consumers (warpgroups 1.., the rest of the registers): wait on ``full[s]``, issue the
  asynchronous MMA of their ``wg_m`` rows, commit, wait until one group is in flight,
  release the previous stage on ``empty`` (in every CTA of a cluster, whose B half came
  by multicast); after the tile, the epilogue: 64 x ``w`` pieces through swizzled shared
  memory and TMA stores (``tma``), or predicated stores from registers (``global``).
"""

from __future__ import annotations

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IntegerAttr, i1, i32
from xdsl.ir import Block, Operation, Region, SSAValue

from pkc.dialects import schedule as s
from pkc.target.gemm_tuning import BK, ROW_BYTES, BLayout, Epilogue, GemmConfig

_SWIZZLE_FOR_ROW_BYTES = {128: 128, 64: 64, 32: 32}


class _Ops:
    """Appends ops to a block and returns their results (a tiny builder for arith)."""

    def __init__(self, block: Block):
        self.block = block

    def add(self, op: Operation) -> Operation:
        self.block.add_op(op)
        return op

    def c(self, value: int, ty=i32) -> SSAValue:
        return self.add(arith.ConstantOp(IntegerAttr(value, ty))).result

    def bin(self, cls, a: SSAValue, b: SSAValue | int) -> SSAValue:
        if isinstance(b, int):
            b = self.c(b)
        return self.add(cls(a, b)).result

    def cmp(self, pred: str, a: SSAValue, b: SSAValue | int) -> SSAValue:
        if isinstance(b, int):
            b = self.c(b)
        return self.add(arith.CmpiOp(a, b, pred)).result

    def select(self, cond: SSAValue, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.add(arith.SelectOp(cond, a, b)).result

    def advance(self, stage: SSAValue, phase: SSAValue, stages: int) -> tuple[SSAValue, SSAValue]:
        """The ring's next (stage, phase): the phase flips when the stage wraps."""
        nxt = self.bin(arith.AddiOp, stage, 1)
        wrap = self.cmp("eq", nxt, stages)
        stage2 = self.select(wrap, self.c(0), nxt)
        phase2 = self.select(wrap, self.bin(arith.XOrIOp, phase, 1), phase)
        return stage2, phase2


def _for(o: _Ops, lb: SSAValue, ub: SSAValue, step: SSAValue, inits: list[SSAValue]):
    """An scf.for over i32 with carried values; returns (op, body builder, iv, carried)."""
    block = Block(arg_types=[i32, *[v.type for v in inits]])
    loop = scf.ForOp(lb, ub, step, inits, Region(block))
    o.add(loop)
    return loop, _Ops(block), block.args[0], list(block.args[1:])


def tmap_types(cfg: GemmConfig) -> tuple[s.TmapType, s.TmapType, s.TmapType | None]:
    """The A, B and (TMA epilogue) C tensor maps of ``cfg``."""
    ta, tb = cfg.in_types
    a = s.TmapType(ta, [cfg.bk, cfg.bm], 128)
    if cfg.b_layout is BLayout.NK:
        b = s.TmapType(tb, [cfg.bk, cfg.bn // cfg.cluster_m], 128)
    else:
        b = s.TmapType(tb, [64, BK], 128)
    c = None
    if cfg.epilogue is Epilogue.TMA:
        w = cfg.epi_width
        c = s.TmapType(cfg.dtype, [w, 64], _SWIZZLE_FOR_ROW_BYTES[2 * w])
    return a, b, c


class GemmParts:
    """The parts of the GEMM's program that a fused kernel replaces; the defaults are the
    plain GEMM's (a subclass overrides some: :mod:`pkc.passes.fused_schedule`). Each part
    appends ops through the builder it is given.

    * ``c_map``: the epilogue's tensor map(s) of C (top level, before the schedule);
    * ``prologue`` / ``end``: ops of the schedule block before / after the roles (all
      threads);
    * ``tile_loop``: the persistent loop (the role's loop op, its tile coordinates, its
      carried values); ``producer_row``: the row of A a tile loads (the producer's tile
      prologue);
    * ``epilogue_setup`` (extra carried values of the consumer's loop), ``epilogue_tile``
      (the per-tile epilogue; returns the carried values), ``epilogue_finish`` (after the
      consumer's loop); ``consumer_tile_start`` (before a tile's main loop: a fused
      epilogue's first load, which then overlaps the MMAs)."""

    def c_map(self, top: _Ops, C: SSAValue, tc_t) -> SSAValue | None:
        return top.add(s.TmapOp(C, tc_t)).result if tc_t else None

    def prologue(self, o: _Ops) -> None:
        pass

    def end(self, o: _Ops) -> None:
        pass

    def tile_loop(self, r: _Ops, M: SSAValue, N: SSAValue, inits: list[SSAValue],
                  cfg: GemmConfig) -> tuple[Operation, list[SSAValue], list[SSAValue]]:
        loop = r.add(s.TileLoopOp(M, N, inits, cfg.bm, cfg.bn, cfg.group_m))
        m0, n0, *carried = loop.block.args
        return loop, [m0, n0], carried

    def producer_row(self, t: _Ops, coords: list[SSAValue]) -> SSAValue:
        return coords[0]

    def a_map(self, top: _Ops, A: SSAValue, ta_t) -> SSAValue:
        """A's tensor map (top level), the one the producer prefetches."""
        return top.add(s.TmapOp(A, ta_t)).result

    def b_map(self, top: _Ops, B: SSAValue, tb_t) -> SSAValue:
        """B's tensor map (top level), the one the producer prefetches (a kernel over
        several weights makes one per weight: :mod:`pkc.passes.gather_many`)."""
        return top.add(s.TmapOp(B, tb_t)).result

    def producer_b(self, t: _Ops, coords: list[SSAValue], tB: SSAValue
                   ) -> tuple[SSAValue, SSAValue]:
        """(B's map, B's column ``n0``) of a tile's B loads: ``tB`` at the tile's column
        (a kernel over several weights picks the tile's weight and its column in it)."""
        return tB, coords[1]

    def role_block(self, o: _Ops, cfg: GemmConfig, a_st: SSAValue) -> _Ops:
        """Where the roles go (the schedule block; a fused kernel with a side role by CTA
        index puts them in its main region)."""
        return o

    def producer_setup(self, r: _Ops, cfg: GemmConfig) -> list[SSAValue]:
        """Extra carried values of the producer's tile loop (their initial values)."""
        return []

    def producer_tile(self, t: _Ops, coords: list[SSAValue], tA: SSAValue,
                      extra: list[SSAValue]):
        """(A's map, row, outer coordinates after [k, row], carried values) of a tile's
        A loads: the plain GEMM's ``tA`` at ``producer_row``."""
        return tA, self.producer_row(t, coords), [], extra

    def producer_k(self, k: _Ops, kb: SSAValue, kc: SSAValue, tA: SSAValue, m0: SSAValue,
                   outer: list[SSAValue]) -> tuple[SSAValue, list[SSAValue], SSAValue]:
        """(A's map, A's coordinates, B's k coordinate) of the producer's k-step ``kb``
        (``kc`` = kb x bk): the tile's map at ``[kc, m0, *outer]``, B at row ``kc``. A
        kernel whose K is several operands (an all-gather along K:
        :mod:`pkc.passes.ag_k_schedule`) picks the map and offsets per step."""
        return tA, [kc, m0, *outer], kc

    def epilogue_setup(self, r: _Ops, cfg: GemmConfig) -> list[SSAValue]:
        return []

    def epilogue_tile(self, t: _Ops, cfg: GemmConfig, e: "Epi", coords: list[SSAValue],
                      row0: SSAValue, ebuf: SSAValue, extra: list[SSAValue]
                      ) -> tuple[SSAValue, list[SSAValue]]:
        if cfg.epilogue is Epilogue.TMA:
            ebuf = _tma_epilogue(t, cfg, e.acc, e.epi, e.wg, row0, coords[1], ebuf,
                                 lambda slot, col, row: t.add(s.TmaStoreOp(e.epi, slot, e.tC,
                                                                           [col, row])), e)
        else:
            e.scale(t, row0, coords[1])
            t.add(s.AccStoreGlobalOp(e.acc, e.C, row0, coords[1], e.M, e.N, cfg.dtype))
        return ebuf, extra

    def epilogue_finish(self, r: _Ops, cfg: GemmConfig, extra: list[SSAValue]) -> None:
        pass

    def consumer_tile_start(self, t: _Ops, cfg: GemmConfig, coords: list[SSAValue],
                            wg: SSAValue, epi: SSAValue | None, ebuf: SSAValue,
                            extra: list[SSAValue]) -> list[SSAValue]:
        """Before a tile's main loop (consumers): work that then overlaps the MMAs (a
        fused epilogue's first load); returns the carried values."""
        return extra

    def tile_scales(self, t: _Ops, scales: "Scales", coords: list[SSAValue], N: SSAValue
                    ) -> tuple["Scales", SSAValue, SSAValue]:
        """(the tile's scales, its first column in B's scales, their width): what the
        tile's ``pks.scale_prefetch`` reads (several weights: the tile's weight's B
        scale, :class:`pkc.passes.gather_many.ManyWeights`)."""
        return scales, coords[1], N

    # why these parts cannot be built with ping-pong consumers
    # (pkc.passes.gemm_schedule_pingpong), or on CTA pairs sharing B (cluster_m = 2: the
    # row-chunked fused kinds count whole pairs, pkc.dialects.schedule_fused.chunk_tiles);
    # None: they can
    pingpong_problem: str | None = None
    cluster_pairs_problem: str | None = None


class Epi:
    """What the consumer's epilogue works with: its accumulator, the epilogue buffers, C
    and its map, the warpgroup index, the shape's M and N (values of the role)."""

    def __init__(self, acc, epi, C, tC, wg, M, N, scales: "Scales | None" = None,
                 prefetch: SSAValue | None = None, rows: SSAValue | None = None,
                 a_row0: SSAValue | None = None):
        self.acc, self.epi, self.C, self.tC, self.wg, self.M, self.N = acc, epi, C, tC, wg, M, N
        self.scales = scales     # an fp8 GEMM's: every epilogue applies them (pks.acc_scale)
        # the tile's pks.scale_prefetch result (the scales in registers), A's row bound and
        # the warpgroup's first row of A it loaded: an epilogue that scales with these
        # values reads A's row scales from its registers
        self.prefetch, self.rows, self.a_row0 = prefetch, rows, a_row0

    def prefetched(self, n0: SSAValue) -> SSAValue | None:
        """The tile's prefetched scales, if they are those of column ``n0``."""
        pf = self.prefetch
        return pf if pf is not None and pf.owner.col == n0 else None

    def scale(self, t: "_Ops", row0: SSAValue, n0: SSAValue,
              piece: tuple[int, int, int] | None = None) -> None:
        """``pks.acc_scale`` of the accumulator (or one piece of it) if the GEMM is scaled;
        ``row0``: the tile's first row of A (its row scales)."""
        sc = self.scales
        if sc is not None:
            rows = self.rows or (t.c(sc.rows) if sc.rows else self.M)
            t.add(s.AccScaleOp(self.acc, sc.sa, sc.sb, sc.bias, row0, n0, rows, self.N, piece,
                               self.prefetched(n0)))


class Scales:
    """The scaled GEMM's epilogue operands (kernel buffers): A's and B's f32 scales
    (tensor-wise [1] or row-wise [M, 1] / [1, N]) and the optional bias [N]; ``rows``: A's
    rows where they are not the tile grid's M (a fused kernel whose grid is one chunk)."""

    def __init__(self, sa: SSAValue, sb: SSAValue, bias: SSAValue | None = None,
                 rows: int = 0):
        self.sa, self.sb, self.bias, self.rows = sa, sb, bias, rows


def build_gemm(body: Block, A: SSAValue, B: SSAValue, C: SSAValue, M: int, N: int, K: int,
               cfg: GemmConfig, parts: GemmParts | None = None,
               scales: Scales | None = None) -> s.ScheduleOp:
    """Appends the tensor maps and the ``pks.schedule`` of ``cfg`` for the given shape to
    ``body`` (a ``pk.kernel`` block whose arguments include A, B and C); ``parts``: the
    pieces a fused kernel replaces (default: the plain GEMM's); ``scales``: an fp8 GEMM's
    (``pks.acc_scale`` before every tile's epilogue)."""
    cfg.validate()
    if cfg.fp8 != (scales is not None):
        raise ValueError(f"build_gemm: {cfg.tag()} with{'out' if scales is None else ''} "
                         "scales (fp8 operands and scales go together)")
    parts = parts or GemmParts()
    ta_t, tb_t, tc_t = tmap_types(cfg)
    top = _Ops(body)
    tA = parts.a_map(top, A, ta_t)
    tB = parts.b_map(top, B, tb_t)
    tC = parts.c_map(top, C, tc_t)
    sched = top.add(s.ScheduleOp(cfg.threads, cfg.cluster_m, cfg.timeout_ns))
    o = _Ops(sched.block)
    parts.prologue(o)
    S = cfg.stages
    a_st = o.add(s.SmemAllocOp(S, cfg.a_stage_bytes)).result
    b_st = o.add(s.SmemAllocOp(S, cfg.b_stage_bytes)).result
    epi = (o.add(s.SmemAllocOp(cfg.consumers * cfg.epi_bufs, cfg.epi_buf_bytes)).result
           if cfg.epilogue is Epilogue.TMA else None)
    full = o.add(s.MbarrierAllocOp(S, 1)).result
    # a stage is released by every consumer warpgroup of every CTA sharing it (one of
    # them when the warpgroups take alternate tiles: gemm_schedule_pingpong)
    users = 1 if cfg.pingpong else cfg.consumers
    empty = o.add(s.MbarrierAllocOp(S, users * cfg.cluster_m)).result
    # the ping-pong pair's order (one arrival each: the other warpgroup's turn)
    order = o.add(s.MbarrierAllocOp(2, 1)).result if cfg.pingpong else None
    dims = (M, N, K)

    roles = parts.role_block(o, cfg, a_st)
    _producer(roles, cfg, dims, tA, tB, a_st, b_st, full, empty, parts)
    if cfg.pingpong:
        # (imported here: that module builds on this one's helpers)
        from pkc.passes.gemm_schedule_pingpong import check_pingpong_parts, consumer_pingpong
        check_pingpong_parts(parts)
        consumer_pingpong(roles, cfg, dims, C, tC, a_st, b_st, epi, full, empty, order,
                          parts, scales)
    else:
        _consumer(roles, cfg, dims, C, tC, a_st, b_st, epi, full, empty, parts, scales)
    parts.end(o)
    return sched


def _producer(o: _Ops, cfg: GemmConfig, dims, tA, tB, a_st, b_st, full, empty,
              parts: GemmParts) -> None:
    role = o.add(s.RoleOp(s.RoleKind.PRODUCER, 0, 1, cfg.producer_regs, single_thread=True))
    r = _Ops(role.block)
    r.add(s.TmaPrefetchOp(tA))
    r.add(s.TmaPrefetchOp(tB))
    M, N, K = (r.c(d) for d in dims)
    rank = r.add(s.ClusterRankOp()).result
    zero, one = r.c(0), r.c(1)
    num_kb = r.c(-(-dims[2] // cfg.bk))
    pinit = parts.producer_setup(r, cfg)
    loop, coords, (stage, phase, *pextra) = parts.tile_loop(r, M, N, [zero, zero, *pinit], cfg)
    t = _Ops(loop.block)
    tB, n0 = parts.producer_b(t, coords, tB)
    tA_tile, m0, outer, pextra = parts.producer_tile(t, coords, tA, pextra)
    mc = cfg.cluster_m if cfg.cluster_m > 1 else 0
    # where this CTA's part of the B tile goes and comes from (loop-invariant over k)
    if cfg.b_layout is BLayout.NK:
        rows = cfg.bn // cfg.cluster_m          # rows of B this CTA loads
        b_parts = [(t.bin(arith.MuliOp, rank, rows * ROW_BYTES),
                    t.bin(arith.AddiOp, t.bin(arith.MuliOp, rank, rows), n0))]
    else:
        blocks = cfg.bn // 64 // cfg.cluster_m   # 64-column boxes this CTA loads
        b_parts = [(t.bin(arith.AddiOp, t.bin(arith.MuliOp, rank, blocks * 64 * ROW_BYTES),
                          j * 64 * ROW_BYTES),
                    t.bin(arith.AddiOp, t.bin(arith.AddiOp, t.bin(arith.MuliOp, rank, blocks * 64),
                                                n0), j * 64))
                   for j in range(blocks)]
    kloop, k, kb, (ks, kph) = _for(t, zero, num_kb, one, [stage, phase])
    parity = k.bin(arith.XOrIOp, kph, 1)
    k.add(s.MbarrierWaitOp(empty, ks, parity))
    k.add(s.MbarrierArriveOp(full, ks, tx_bytes=cfg.stage_bytes))
    kc = k.bin(arith.MuliOp, kb, cfg.bk)
    tA_k, a_at, b_k = parts.producer_k(k, kb, kc, tA_tile, m0, outer)
    k.add(s.TmaLoadOp(tA_k, a_at, a_st, ks, k.c(0), full, ks))
    for off, n in b_parts:
        coords = [b_k, n] if cfg.b_layout is BLayout.NK else [n, b_k]
        k.add(s.TmaLoadOp(tB, coords, b_st, ks, off, full, ks, multicast=mc))
    k.add(scf.YieldOp(*k.advance(ks, kph, cfg.stages)))
    t.add(s.YieldOp([*kloop.results, *pextra]))
    r.add(s.YieldOp())


def _consumer(o: _Ops, cfg: GemmConfig, dims, C, tC, a_st, b_st, epi, full, empty,
              parts: GemmParts, scales: Scales | None = None) -> None:
    role = o.add(s.RoleOp(s.RoleKind.CONSUMER, 1, cfg.consumers, cfg.consumer_reg_target
                          if cfg.consumers == 2 else 0))
    r = _Ops(role.block)
    M, N, K = (r.c(d) for d in dims)
    wg = r.add(s.WarpgroupIndexOp()).result
    acc = r.add(s.AccAllocOp(cfg.wg_m, cfg.bn)).result
    a_row = r.bin(arith.MuliOp, wg, cfg.wg_m)
    zero, one = r.c(0), r.c(1)
    num_kb = r.c(-(-dims[2] // cfg.bk))
    all_ctas = cfg.cluster_m > 1
    prefetch = scales is not None and cfg.scale_prefetch
    rows = (r.c(scales.rows) if scales.rows else M) if prefetch else None
    extra = parts.epilogue_setup(r, cfg)
    loop, coords, (stage, phase, ebuf, *extra) = parts.tile_loop(
        r, M, N, [zero, zero, zero, *extra], cfg)
    t = _Ops(loop.block)
    m0 = coords[0]
    extra = parts.consumer_tile_start(t, cfg, coords, wg, epi, ebuf, extra)
    pf = row0 = a_row0 = None
    if prefetch:
        # the tile's scales into registers now: their loads overlap the main loop; A's
        # rows are the ones the producer loads (a fused kernel's chunk row, not C's)
        row0 = t.bin(arith.AddiOp, m0, a_row)
        prow = parts.producer_row(t, coords)
        a_row0 = row0 if prow is m0 else t.bin(arith.AddiOp, prow, a_row)
        sc, col, cols = parts.tile_scales(t, scales, coords, N)
        pf = t.add(s.ScalePrefetchOp(acc, sc.sa, sc.sb, sc.bias, a_row0, col, rows, cols,
                                     row_scales(scales)))
    kloop = mma_k_loop(t, cfg, acc, a_st, a_row, b_st, full, empty, (zero, one, num_kb),
                       stage, phase, all_ctas)
    stage2, phase2, last = kloop.results
    t.add(s.MmaWaitOp(0))
    t.add(s.MbarrierArriveOp(empty, last, all_ctas=all_ctas))
    if row0 is None:
        row0 = t.bin(arith.AddiOp, m0, a_row)
    e = Epi(acc, epi, C, tC, wg, M, N, scales, pf.result if pf else None, rows, a_row0)
    ebuf, extra = parts.epilogue_tile(t, cfg, e, coords, row0, ebuf, extra)
    if pf is not None:
        _trim_prefetch(pf)
    t.add(s.YieldOp([stage2, phase2, ebuf, *extra]))
    parts.epilogue_finish(r, cfg, list(loop.results)[3:])
    if cfg.epilogue is Epilogue.TMA:
        r.add(s.BulkWaitOp(0))
    r.add(s.YieldOp())


def mma_k_loop(t: _Ops, cfg: GemmConfig, acc, a_st, a_row, b_st, full, empty, bounds,
               stage, phase, all_ctas: bool, turns: bool = False) -> scf.ForOp:
    """A consumer's K loop over one tile: per k-block, wait for its stage (``turns``: the
    other warpgroup's phases skipped, ping-pong), one async MMA, and release the previous
    k-block's stage once its group is complete. ``bounds`` = (zero, one, k-blocks);
    results: the ring's (stage, phase) after the tile and the last stage used."""
    zero, one, num_kb = bounds
    kloop, k, kb, (ks, kph, _prev) = _for(t, zero, num_kb, one, [stage, phase, zero])
    k.add(s.MbarrierWaitOp(full, ks, kph, turns=turns))
    not_first = k.cmp("ne", kb, 0)
    ta, tb = cfg.in_types
    k.add(s.MmaAsyncOp(acc, a_st, ks, a_row, b_st, ks, not_first, ta,
                       s.BMajor.K if cfg.b_layout is BLayout.NK else s.BMajor.N, tb))
    k.add(s.MmaCommitOp())
    k.add(s.MmaWaitOp(1))
    k.add(s.MbarrierArriveOp(empty, _prev, pred=not_first, all_ctas=all_ctas))
    nstage, nphase = k.advance(ks, kph, cfg.stages)
    k.add(scf.YieldOp(nstage, nphase, ks))
    return kloop


def row_scales(scales: Scales) -> bool:
    """Whether A's scale is row-wise ([M, 1]): the prefetch loads the thread's rows."""
    return len(scales.sa.type.get_shape()) == 2


def _trim_prefetch(pf: s.ScalePrefetchOp) -> None:
    """After the epilogue is built: a prefetch no ``pks.acc_scale`` reads is erased, and
    its row scales are not loaded where none reads them (a fused epilogue whose rows of
    A are not the tile's, e.g. a gathered shard's)."""
    users = [u.operation for u in pf.result.uses]
    if not users:
        pf.detach()
        pf.erase()
    elif pf.with_rows is not None and not any(u.rows_prefetched() for u in users):
        del pf.attributes["with_rows"]


def _tma_epilogue(t: _Ops, cfg: GemmConfig, acc, epi, wg, row0, n0, ebuf, store,
                  e: Epi | None = None, a_row0: SSAValue | None = None) -> SSAValue:
    """The accumulator piece by piece (64 rows x w columns) through the warpgroup's
    ``epi_bufs`` swizzled buffers, each stored by TMA while the next is written
    (``store(slot, col, row)`` appends the piece's TMA store); a scaled GEMM's piece is
    scaled just before it is written (``e.scale``: its scales live one piece at a time;
    ``a_row0``: the tile's first row of A where it is not ``row0``, C's)."""
    w = cfg.epi_width
    base = t.bin(arith.MuliOp, wg, cfg.epi_bufs)
    for mi in range(cfg.m_slices):
        row = t.bin(arith.AddiOp, row0, 64 * mi) if mi else row0
        for ch in range(cfg.bn // w):
            t.add(s.BulkWaitOp(cfg.epi_bufs - 1, read=True))
            t.add(s.WarpgroupBarrierOp())
            slot = t.bin(arith.AddiOp, base, ebuf)
            if e is not None:
                e.scale(t, row0 if a_row0 is None else a_row0, n0, (mi, ch * w, w))
            t.add(s.AccStoreSmemOp(acc, epi, slot, mi, ch * w, w, cfg.dtype))
            t.add(s.FenceAsyncSharedOp())
            t.add(s.WarpgroupBarrierOp())
            col = t.bin(arith.AddiOp, n0, ch * w) if ch else n0
            store(slot, col, row)
            t.add(s.BulkCommitOp())
            if cfg.epi_bufs == 2:
                ebuf = t.bin(arith.XOrIOp, ebuf, 1)
    return ebuf


__all__ = ["build_gemm", "tmap_types", "GemmParts", "Epi", "Scales", "i1"]
