"""Builds the schedule-level (``pks``) program of a persistent GEMM whose accumulators are
CTA-shared (tensor memory on sm_100a), so that the MMAs and the epilogue run in different
roles and overlap across tiles.

    C[M, N] = A[M, K] @ B        (bf16 / f16 in, f32 accumulate, bf16 / f16 out)
    C[M, N] = (A @ B) * sa * sb [+ bias]   (fp8 in: pk.scaled_matmul; ``scales``)

The same target-neutral ops as :mod:`pkc.passes.gemm_schedule`, arranged as Blackwell
GEMMs are (one CTA per SM, three warpgroups):

* producer (warpgroup 0, one thread): the TMA loads of every tile's k-blocks into the
  ``stages``-deep ring (the same code as the wgmma GEMM's producer);
* mma (warpgroup 1, one thread): per tile, wait until accumulator ``a`` (of
  ``acc_bufs``) is drained (``acc_empty[a]``), then per k-block wait on ``full[s]``,
  issue the MMA and ``pks.mma_commit_arrive`` on ``empty[s]`` (the stage is released when
  the MMAs reading it completed, with no wait in the issuing thread); after the tile,
  commit-arrive on ``acc_full[a]``;
* epilogue (warpgroup 2): per tile, wait on ``acc_full[a]``, store the accumulator, then
  the warpgroup meets and one thread arrives on ``acc_empty[a]``. ``tma`` (default): 64 x
  w pieces rounded into two swizzled shared-memory buffers, each TMA-stored while the next
  is written (the wgmma GEMM's epilogue ops; the accumulator is handed back once its last
  piece is in shared memory, before the stores complete); ``global``: rounded and stored
  from registers (``pks.acc_store_global``, clipped at M and N).

With two accumulators the epilogue of tile t runs while the MMAs of tile t + 1 fill the
other one. The accumulators are ``pks.acc_alloc`` at the top of the schedule (one of the
CTA, not of a warpgroup), picked per tile with ``pks.acc_select``.

fp8 (``cfg.a_type`` / ``b_type``, e4m3 / e5m2; ``scales``): the same roles on 8-bit
operands - the k-block's 128-byte rows hold 128 elements of K (``cfg.bk``), the MMA is
``pks.mma_async {dtype, b_dtype}`` (tcgen05 ``kind::f8f6f4`` on sm_100a), and the epilogue
applies ``pks.acc_scale`` (the scales and bias) to each piece before it stores it, as the
wgmma GEMM's epilogue does (:class:`~pkc.passes.gemm_schedule.Epi`); the MMA warpgroup
gives registers back to the epilogue's (``EPILOGUE_REGS_FP8``).

A fused kernel gives its :class:`~pkc.passes.gemm_schedule.GemmParts` as for the wgmma GEMM
(the same parts: tensor maps, prologue / end, tile loop, the producer's rows, the
epilogue's setup / tile start / tile / finish); they see the configuration through
:class:`TmemView` (one epilogue warpgroup, warpgroup 2, reading the whole 128-row
accumulator as two 64-row slices), so the communication epilogue is the sm_90a one.
"""

from __future__ import annotations

from xdsl.dialects import arith, scf
from xdsl.ir import Block, SSAValue

from pkc.dialects import schedule as s
from pkc.passes.gemm_schedule import (_SWIZZLE_FOR_ROW_BYTES, Epi, GemmParts, Scales, _for, _Ops,
                                      _producer)
from pkc.target.gemm_tuning import BK, BLayout, Epilogue
from pkc.target.gemm_tuning_sm100 import TmemGemmConfig


class _ProducerView:
    """The fields of a GemmConfig that the shared producer reads, for a TmemGemmConfig."""

    cluster_m = 1

    def __init__(self, cfg: TmemGemmConfig):
        self.cfg = cfg

    def __getattr__(self, name):
        return getattr(self.cfg, name)


def tmem_tmap_types(cfg: TmemGemmConfig, b_rows: int | None = None) -> tuple[s.TmapType, s.TmapType]:
    """The A and B tensor maps (128-byte swizzle, one 128-byte row of K per box row: 64
    16-bit or 128 8-bit elements); ``b_rows``: B's box rows (default ``bn``)."""
    ta, tb = cfg.in_types
    a = s.TmapType(ta, [cfg.bk, cfg.bm], 128)
    b = (s.TmapType(tb, [cfg.bk, b_rows or cfg.bn], 128) if cfg.b_layout is BLayout.NK
         else s.TmapType(tb, [64, BK], 128))
    return a, b


# fp8: the epilogue holds a piece's column scales and bias in registers beside the
# accumulator's (at the launch's 168 per thread, ptxas spilled 8-24 bytes); the MMA
# warpgroup (one issuing thread) gives registers back so that the epilogue may take them:
# 80 (a fused kernel keeps its epoch live across the roles: at 40 it spilled 4 bytes),
# so producer (40, or 168 in a fused kernel) + 80 + 232 <= 512 per thread of a warpgroup
# slice of the register file, as setmaxnreg.inc needs
MMA_REGS_FP8, EPILOGUE_REGS_FP8 = 80, 232


def build_gemm_tmem(body: Block, A: SSAValue, B: SSAValue, C: SSAValue, M: int, N: int, K: int,
                    cfg: TmemGemmConfig, parts: GemmParts | None = None,
                    scales: Scales | None = None) -> s.ScheduleOp:
    """Appends the tensor maps and the ``pks.schedule`` of ``cfg`` for the given shape to
    ``body`` (a ``pk.kernel`` block whose arguments include A, B and C); ``parts``: the
    pieces a fused kernel replaces (default: the plain GEMM's); ``scales``: an fp8 GEMM's
    (``pks.acc_scale`` in every tile's epilogue)."""
    cfg.validate()
    check_scales(cfg, scales)
    parts = parts or GemmParts()
    view = cfg if isinstance(cfg, TmemView) else TmemView(cfg)
    ta_t, tb_t = tmem_tmap_types(cfg)
    top = _Ops(body)
    tA = parts.a_map(top, A, ta_t)
    tB = parts.b_map(top, B, tb_t)
    tc_t = None
    if cfg.epilogue is Epilogue.TMA:
        w = cfg.epi_width
        tc_t = s.TmapType(cfg.dtype, [w, 64], _SWIZZLE_FOR_ROW_BYTES[2 * w])
    tC = parts.c_map(top, C, tc_t)
    sched = top.add(s.ScheduleOp(cfg.threads, 1, cfg.timeout_ns))
    o = _Ops(sched.block)
    parts.prologue(o)
    S, nb = cfg.stages, cfg.acc_bufs
    a_st = o.add(s.SmemAllocOp(S, cfg.a_stage_bytes)).result
    b_st = o.add(s.SmemAllocOp(S, cfg.b_stage_bytes)).result
    epi = (o.add(s.SmemAllocOp(cfg.epi_bufs, 64 * cfg.epi_width * 2)).result
           if cfg.epilogue is Epilogue.TMA else None)
    full = o.add(s.MbarrierAllocOp(S, 1)).result
    empty = o.add(s.MbarrierAllocOp(S, 1)).result         # one arrival: the MMA commit
    acc_full = o.add(s.MbarrierAllocOp(nb, 1)).result
    acc_empty = o.add(s.MbarrierAllocOp(nb, 1)).result
    accs = [o.add(s.AccAllocOp(cfg.bm, cfg.bn)).result for _ in range(nb)]
    dims = (M, N, K)
    roles = parts.role_block(o, view, a_st)      # an all-gather's put CTAs: the side role
    _producer(roles, view, dims, tA, tB, a_st, b_st, full, empty, parts)
    _mma(roles, view, dims, a_st, b_st, full, empty, acc_full, acc_empty, accs, parts)
    _epilogue(roles, view, dims, C, tC, epi, acc_full, acc_empty, accs, parts, scales)
    parts.end(o)
    return sched


def check_scales(cfg: TmemGemmConfig, scales: Scales | None) -> None:
    if cfg.fp8 != (scales is not None):
        raise ValueError(f"tmem GEMM {cfg.tag()} with{'out' if scales is None else ''} scales "
                         "(fp8 operands and scales go together)")


def _mma(o: _Ops, cfg: TmemGemmConfig, dims, a_st, b_st, full, empty, acc_full, acc_empty,
         accs, parts: GemmParts) -> None:
    role = o.add(s.RoleOp(s.RoleKind.MMA, 1, 1, MMA_REGS_FP8 if cfg.fp8 else 0,
                          single_thread=True))
    r = _Ops(role.block)
    M, N = r.c(dims[0]), r.c(dims[1])
    zero, one = r.c(0), r.c(1)
    num_kb = r.c(-(-dims[2] // cfg.bk))
    loop, _coords, (stage, phase, ab, aph) = parts.tile_loop(r, M, N, [zero] * 4, cfg)
    t = _Ops(loop.block)
    # the epilogue drained accumulator ab (the first pass over the ring finds it free)
    t.add(s.MbarrierWaitOp(acc_empty, ab, t.bin(arith.XOrIOp, aph, 1)))
    acc = t.add(s.AccSelectOp(ab, accs)).result
    row = t.c(0)
    major = s.BMajor.K if cfg.b_layout is BLayout.NK else s.BMajor.N
    kloop, k, kb, (ks, kph) = _for(t, zero, num_kb, one, [stage, phase])
    k.add(s.MbarrierWaitOp(full, ks, kph))
    ta, tb = cfg.in_types
    k.add(s.MmaAsyncOp(acc, a_st, ks, row, b_st, ks, k.cmp("ne", kb, 0), ta, major, tb))
    k.add(s.MmaCommitArriveOp(empty, ks))      # the stage is free once these MMAs are done
    k.add(scf.YieldOp(*k.advance(ks, kph, cfg.stages)))
    stage2, phase2 = kloop.results
    t.add(s.MmaCommitArriveOp(acc_full, ab))    # the tile's accumulator is complete
    nab, naph = t.advance(ab, aph, cfg.acc_bufs)
    t.add(s.YieldOp([stage2, phase2, nab, naph]))
    r.add(s.YieldOp())


class TmemView(_ProducerView):
    """A TmemGemmConfig as the wgmma GEMM's epilogue and a fused kernel's parts read a
    GemmConfig: the whole 128-row accumulator in two 64-row slices, by one warpgroup
    (``consumers`` = 1), the epilogue role's first warpgroup 2."""

    m_slices = 2
    consumers = 1
    epilogue_wg = 2

    @property
    def wg_m(self) -> int:
        return self.cfg.bm

    def with_(self, **kw) -> "TmemView":
        """The view of ``cfg.with_(**kw)`` (a fused kernel sets its fp8 operand types on the
        tile it was given; the builder keys the arrangement on the view)."""
        return type(self)(self.cfg.with_(**kw))

    @property
    def epi_buf_bytes(self) -> int:
        return 64 * self.cfg.epi_width * 2


def _epilogue(o: _Ops, cfg: TmemView, dims, C, tC, epi, acc_full, acc_empty, accs,
              parts: GemmParts, scales: Scales | None = None) -> None:
    role = o.add(s.RoleOp(s.RoleKind.EPILOGUE, cfg.epilogue_wg, 1,
                          EPILOGUE_REGS_FP8 if cfg.fp8 else 0))
    r = _Ops(role.block)
    M, N = r.c(dims[0]), r.c(dims[1])
    zero = r.c(0)
    tma = cfg.epilogue is Epilogue.TMA
    extra = parts.epilogue_setup(r, cfg)
    inits = [zero, zero, zero] if tma else [zero, zero]
    loop, coords, carried = parts.tile_loop(r, M, N, [*inits, *extra], cfg)
    ab, aph = carried[0], carried[1]
    ebuf, extra = (carried[2] if tma else zero), carried[len(inits):]
    t = _Ops(loop.block)
    # a fused epilogue's first load, in flight while the MMAs fill the accumulator
    extra = parts.consumer_tile_start(t, cfg, coords, zero, epi, ebuf, extra)
    t.add(s.MbarrierWaitOp(acc_full, ab, aph))
    acc = t.add(s.AccSelectOp(ab, accs)).result
    e = Epi(acc, epi, C, tC, zero, M, N, scales)     # scales: pks.acc_scale per piece
    ebuf, extra = parts.epilogue_tile(t, cfg, e, coords, coords[0], ebuf, extra)
    if not tma:
        # every thread's reads of the accumulator are done before it is handed back
        t.add(s.WarpgroupBarrierOp())
    # a CTA pair's MMA thread waits for both CTAs' epilogues (gemm_schedule_tmem_pair)
    t.add(s.MbarrierArriveOp(acc_empty, ab, all_ctas=cfg.cluster_m > 1))
    nab, naph = t.advance(ab, aph, cfg.acc_bufs)
    t.add(s.YieldOp([nab, naph, *([ebuf] if tma else []), *extra]))
    parts.epilogue_finish(r, cfg, list(loop.results)[len(inits):])
    if tma:
        r.add(s.BulkWaitOp(0))
    r.add(s.YieldOp())


__all__ = ["build_gemm_tmem", "tmem_tmap_types", "TmemView", "check_scales"]
