"""Builds the schedule-level (``pks``) program of the tensor-memory GEMM for a CTA pair
(sm_100a ``cta_group::2``): a cluster of two CTAs works one 256 x bn tile.

The roles are those of :mod:`pkc.passes.gemm_schedule_tmem`; what differs:

* the schedule is a cluster of 2 (``pks.schedule`` cluster = 2), which the sm_100a
  lowering makes a CTA pair: every tcgen05 instruction is ``cta_group::2``, a
  ``single_thread`` role runs on the even CTA only, MMA commits arrive on both CTAs'
  mbarriers, and TMA loads count their bytes on the even CTA's mbarrier
  (:mod:`pkc.codegen.lower_schedule_tcgen05`);
* the tile loop is the cluster GEMM's: CTA rank r of the pair takes rows ``m0`` of its
  own 128-row block (m block ``2 i + r``) and the same columns ``n0``;
* producer (each CTA): per k-block wait on its own ``empty[s]`` (released by the MMA
  commit of both CTAs), load its 128 rows of A and its ``bn / 2`` rows of B (rows ``n0 +
  r bn / 2``) into its own stage, counted on the even CTA's ``full[s]``, whose expected
  bytes the even CTA's producer announces for both;
* mma (even CTA): as for one CTA; the MMA is M = 256 (A's rows from both CTAs, B's
  columns half from each, D's rows 0-127 in the even CTA's tensor memory, 128-255 in the
  odd one's);
* epilogue (each CTA): its own 128 rows, as for one CTA; it hands the accumulator back on
  ``acc_empty`` of both CTAs (2 arrivals each), so the MMA thread waits for both halves.

B is split between the pair, not multicast: each CTA loads half of the tile's B rows and
the pair MMA reads both halves, which halves each CTA's B traffic as a multicast would.

fp8 (``scales``): as for one CTA (:mod:`pkc.passes.gemm_schedule_tmem`): 128 elements of K
per 128-byte stage row, the pair MMA ``kind::f8f6f4``, each CTA's epilogue scales its own
128 rows.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects import arith, scf
from xdsl.ir import Block, SSAValue

from pkc.dialects import schedule as s
from pkc.passes.gemm_schedule import _SWIZZLE_FOR_ROW_BYTES, GemmParts, Scales, _for, _Ops
from pkc.passes.gemm_schedule_clc import ClcParts
from pkc.passes.gemm_schedule_tmem import TmemView, _epilogue, _mma, check_scales, tmem_tmap_types
from pkc.target.gemm_tuning import Epilogue
from pkc.target.gemm_tuning_sm100 import TmemGemmConfig


class PairView(TmemView):
    """The pair's config as the shared roles read it: a cluster of 2 along M."""

    cluster_m = 2


def build_gemm_tmem_pair(body: Block, A: SSAValue, B: SSAValue, C: SSAValue, M: int, N: int,
                         K: int, cfg: TmemGemmConfig, scales: Scales | None = None) -> s.ScheduleOp:
    """Appends the tensor maps and the ``pks.schedule`` of the pair config ``cfg``
    (``scales``: an fp8 GEMM's)."""
    if not cfg.pair:
        raise ValueError(f"build_gemm_tmem_pair: {cfg.tag()} is not a CTA-pair config")
    cfg.validate()
    check_scales(cfg, scales)
    view = PairView(cfg)
    # under cluster launch control the even CTA's producer, mma and epilogue and the odd
    # CTA's producer and epilogue read each response (the odd CTA runs no MMA role)
    parts = ClcParts(roles=5) if cfg.clc else GemmParts()
    top = _Ops(body)
    ta_t, tb_t = tmem_tmap_types(cfg, cfg.bn // 2)       # each CTA loads half of B's rows
    tA = top.add(s.TmapOp(A, ta_t)).result
    tB = top.add(s.TmapOp(B, tb_t)).result
    sched, o, r = pair_schedule(top, C, cfg, ctas=2, stage_releases=1)
    tC, a_st, b_st, epi, full, empty = r.tC, r.a_st, r.b_st, r.epi, r.full, r.empty
    acc_full, acc_empty, accs = r.acc_full, r.acc_empty, r.accs
    dims = (M, N, K)
    _producer(o, view, dims, tA, tB, a_st, b_st, full, empty, parts)
    _mma(o, view, dims, a_st, b_st, full, empty, acc_full, acc_empty, accs, parts)
    _epilogue(o, view, dims, C, tC, epi, acc_full, acc_empty, accs, parts, scales)
    return sched


@dataclass
class PairResources:
    """What a pair schedule allocates before its roles: the output's tensor map (TMA
    epilogue), the stage rings of A and B, the epilogue's buffers, the stage barriers and
    the double-buffered accumulators with their barriers."""

    tC: SSAValue | None
    a_st: SSAValue
    b_st: SSAValue
    epi: SSAValue | None
    full: SSAValue
    empty: SSAValue
    acc_full: SSAValue
    acc_empty: SSAValue
    accs: list[SSAValue]


def pair_schedule(top: _Ops, C: SSAValue, cfg: TmemGemmConfig, ctas: int,
                  stage_releases: int) -> tuple[s.ScheduleOp, _Ops, PairResources]:
    """The ``pks.schedule`` of ``ctas`` CTAs (a pair: 2; two pairs: 4) and its resources;
    ``stage_releases``: the MMA commits that free a stage (one per pair whose CTAs
    multicast into it)."""
    tC = None
    if cfg.epilogue is Epilogue.TMA:
        w = cfg.epi_width
        tC = top.add(s.TmapOp(C, s.TmapType(cfg.dtype, [w, 64], _SWIZZLE_FOR_ROW_BYTES[2 * w]))).result
    sched = top.add(s.ScheduleOp(cfg.threads, ctas, cfg.timeout_ns))
    o = _Ops(sched.block)
    S, nb = cfg.stages, cfg.acc_bufs
    a_st = o.add(s.SmemAllocOp(S, cfg.a_stage_bytes)).result
    b_st = o.add(s.SmemAllocOp(S, cfg.b_stage_bytes)).result
    epi = (o.add(s.SmemAllocOp(cfg.epi_bufs, 64 * cfg.epi_width * 2)).result
           if cfg.epilogue is Epilogue.TMA else None)
    full = o.add(s.MbarrierAllocOp(S, 1)).result       # the even CTA's producer, its pair's bytes
    empty = o.add(s.MbarrierAllocOp(S, stage_releases)).result   # the MMA commits (multicast)
    acc_full = o.add(s.MbarrierAllocOp(nb, 1)).result
    acc_empty = o.add(s.MbarrierAllocOp(nb, 2)).result  # both CTAs' epilogues
    accs = [o.add(s.AccAllocOp(cfg.bm, cfg.bn)).result for _ in range(nb)]
    return sched, o, PairResources(tC, a_st, b_st, epi, full, empty, acc_full, acc_empty, accs)


def _producer(o: _Ops, cfg: PairView, dims, tA, tB, a_st, b_st, full, empty,
              parts: GemmParts) -> None:
    role = o.add(s.RoleOp(s.RoleKind.PRODUCER, 0, 1, cfg.producer_regs, single_thread=True))
    r = _Ops(role.block)
    r.add(s.TmaPrefetchOp(tA))
    r.add(s.TmaPrefetchOp(tB))
    M, N = r.c(dims[0]), r.c(dims[1])
    rank = r.add(s.ClusterRankOp()).result
    even = r.cmp("eq", rank, 0)
    zero, one = r.c(0), r.c(1)
    num_kb = r.c(-(-dims[2] // cfg.bk))
    loop, (m0, n0), (stage, phase) = parts.tile_loop(r, M, N, [zero, zero], cfg)
    t = _Ops(loop.block)
    half = cfg.bn // 2
    nb = t.bin(arith.AddiOp, t.bin(arith.MuliOp, rank, half), n0)   # this CTA's B rows
    kloop, k, kb, (ks, kph) = _for(t, zero, num_kb, one, [stage, phase])
    k.add(s.MbarrierWaitOp(empty, ks, k.bin(arith.XOrIOp, kph, 1)))
    # the even CTA expects both CTAs' bytes on its full[s]
    k.add(s.MbarrierArriveOp(full, ks, pred=even, tx_bytes=2 * cfg.stage_bytes))
    kc = k.bin(arith.MuliOp, kb, cfg.bk)
    k.add(s.TmaLoadOp(tA, [kc, m0], a_st, ks, k.c(0), full, ks))
    k.add(s.TmaLoadOp(tB, [kc, nb], b_st, ks, k.c(0), full, ks))
    k.add(scf.YieldOp(*k.advance(ks, kph, cfg.stages)))
    t.add(s.YieldOp(list(kloop.results)))
    r.add(s.YieldOp())


__all__ = ["build_gemm_tmem_pair", "PairView"]
