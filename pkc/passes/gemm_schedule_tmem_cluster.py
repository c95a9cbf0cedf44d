"""Builds the schedule-level (``pks``) program of the tensor-memory GEMM for a cluster of
two CTA pairs (sm_100a ``cta_group::2``) whose tiles share an operand, which the four CTAs
load in halves and TMA-multicast to each other.

Cluster rank ``q`` is CTA ``q % 2`` (its *place*) of pair ``q / 2``. The cluster works a
block of tiles (``pks.tile_loop`` with ``cluster_n``):

* ``2x2`` (A multicast): the two pairs take the same 256 rows and neighbouring column blocks
  (rank q: row block ``q % 2``, column block ``q / 2``). The CTAs at the same place of the
  two pairs need the same 128 rows of A: each loads 64 of them (rows ``m0 + 64 p`` of pair
  p) and multicasts the box to both (``pair_multicast = 0b11``); B as in one pair.
* ``4x1`` (B multicast): the two pairs take four row blocks of one column block (rank q:
  row block q). The CTAs at the same place of the two pairs need the same ``bn / 2`` rows of
  B: each loads ``bn / 4`` of them and multicasts them to both; A as in one pair.

What makes the multicast safe is the release of a stage: CTA c refills stage s of every
CTA of its multicast group, so it may issue only when *both* pairs' MMAs finished reading
their stage s. Each pair's MMA thread therefore commits the stage's release to the
``empty[s]`` of all four CTAs (``pks.mma_commit_arrive`` with ``pair_multicast = 0b11``)
and ``empty`` expects two arrivals, one per pair; every producer waits on its own
``empty[s]``. The other barriers are the pair's: ``full[s]`` of the even CTA counts the
bytes that land in both CTAs of its pair (whoever issued them: the ``.cta_group::2`` load
signals the receiver's pair), ``acc_full`` / ``acc_empty`` are per pair.

fp8 (``cfg.a_type`` / ``b_type``; ``scales``): the same cluster on 8-bit operands (128
elements of K per 128-byte stage row, the pair MMAs ``kind::f8f6f4``, the epilogue's
``pks.acc_scale``), as for one pair (:mod:`pkc.passes.gemm_schedule_tmem_pair`).

Under cluster launch control (``cfg.clc``) the unit of work is the cluster tile: rank 0's
producer asks, the response lands in all four CTAs, and the ten readers (three roles in each
even CTA, two in each odd one) free the slot on rank 0's ``empty``.
"""

from __future__ import annotations

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IntAttr
from xdsl.ir import Block, SSAValue

from pkc.dialects import schedule as s
from pkc.passes.gemm_schedule import GemmParts, Scales, _for, _Ops
from pkc.passes.gemm_schedule_clc import ClcParts
from pkc.passes.gemm_schedule_tmem import _epilogue, _mma, check_scales
from pkc.passes.gemm_schedule_tmem_pair import PairView, pair_schedule
from pkc.target.gemm_tuning import BLayout
from pkc.target.gemm_tuning_sm100 import PairCluster, TmemGemmConfig

BOTH_PAIRS = 0b11


class ClusterParts(GemmParts):
    """The static tile loop over blocks of ``cluster_m x cluster_n`` tiles."""

    def __init__(self, cluster_n: int):
        self.cluster_n = cluster_n

    def tile_loop(self, r: _Ops, M: SSAValue, N: SSAValue, inits: list[SSAValue], cfg):
        loop = r.add(s.TileLoopOp(M, N, inits, cfg.bm, cfg.bn, cfg.group_m, self.cluster_n))
        m0, n0, *carried = loop.block.args
        return loop, [m0, n0], carried


class ClusterClcParts(ClcParts):
    """The tile loop under cluster launch control over the same cluster tiles."""

    def __init__(self, cluster_n: int, roles: int):
        super().__init__(roles=roles)
        self.cluster_n = cluster_n

    def tile_loop(self, r: _Ops, M: SSAValue, N: SSAValue, inits: list[SSAValue], cfg):
        loop, coords, carried = super().tile_loop(r, M, N, inits, cfg)
        if self.cluster_n > 1:
            loop.attributes["cluster_n"] = IntAttr(self.cluster_n)
        return loop, coords, carried


def build_gemm_tmem_cluster(body: Block, A: SSAValue, B: SSAValue, C: SSAValue, M: int, N: int,
                            K: int, cfg: TmemGemmConfig,
                            scales: Scales | None = None) -> s.ScheduleOp:
    """Appends the tensor maps and the ``pks.schedule`` of a two-pair config ``cfg``
    (``scales``: an fp8 GEMM's)."""
    pc = cfg.pair_cluster
    if not cfg.pair or pc is PairCluster.X2:
        raise ValueError(f"build_gemm_tmem_cluster: {cfg.tag()} is not a cluster of CTA pairs")
    cfg.validate()
    check_scales(cfg, scales)
    if cfg.b_layout is not BLayout.NK:
        raise ValueError(f"build_gemm_tmem_cluster: {cfg.tag()} reads B as [N, K] only")
    view = PairView(cfg)
    cn = pc.cluster_n
    parts = ClusterClcParts(cn, roles=10) if cfg.clc else ClusterParts(cn)
    top = _Ops(body)
    a_rows = cfg.bm // 2 if pc is PairCluster.A2X2 else cfg.bm
    b_rows = cfg.bn // 4 if pc is PairCluster.B4X1 else cfg.bn // 2
    ta, tb = cfg.in_types
    tA = top.add(s.TmapOp(A, s.TmapType(ta, [cfg.bk, a_rows], 128))).result
    tB = top.add(s.TmapOp(B, s.TmapType(tb, [cfg.bk, b_rows], 128))).result
    # both pairs' MMA commits release a stage
    sched, o, r = pair_schedule(top, C, cfg, ctas=pc.size, stage_releases=2)
    tC, a_st, b_st, epi, full, empty = r.tC, r.a_st, r.b_st, r.epi, r.full, r.empty
    acc_full, acc_empty, accs = r.acc_full, r.acc_empty, r.accs
    dims = (M, N, K)
    _producer(o, view, dims, tA, tB, a_st, b_st, full, empty, parts, a_rows, b_rows)
    _mma(o, view, dims, a_st, b_st, full, empty, acc_full, acc_empty, accs, parts)
    # the stage's release goes to every CTA that multicasts into this pair's stages: the
    # CTAs of both pairs (the accumulator's commit stays the pair's)
    for op in sched.walk():
        if isinstance(op, s.MmaCommitArriveOp) and op.bars == empty:
            op.attributes["pair_multicast"] = IntAttr(BOTH_PAIRS)   # (its constructor's)
    _epilogue(o, view, dims, C, tC, epi, acc_full, acc_empty, accs, parts, scales)
    return sched


def _producer(o: _Ops, cfg: PairView, dims, tA, tB, a_st, b_st, full, empty,
              parts: GemmParts, a_rows: int, b_rows: int) -> None:
    """Per k-block: wait on the own ``empty[s]`` (both pairs released the stage), the even
    CTA announces its pair's bytes, then the CTA's share of the shared operand (multicast to
    its place in both pairs) and its own rows of the other operand."""
    mc_a = cfg.pair_cluster is PairCluster.A2X2
    role = o.add(s.RoleOp(s.RoleKind.PRODUCER, 0, 1, cfg.producer_regs, single_thread=True))
    r = _Ops(role.block)
    r.add(s.TmaPrefetchOp(tA))
    r.add(s.TmaPrefetchOp(tB))
    M, N = r.c(dims[0]), r.c(dims[1])
    rank = r.add(s.ClusterRankOp()).result
    place = r.bin(arith.AndIOp, rank, 1)                   # CTA of its pair
    pair = r.bin(arith.ShRUIOp, rank, 1)                   # which pair
    even = r.cmp("eq", place, 0)
    zero, one = r.c(0), r.c(1)
    num_kb = r.c(-(-dims[2] // cfg.bk))
    # this CTA's share of the multicast operand: rows and the byte offset in the stage
    share = r.bin(arith.MuliOp, pair, a_rows if mc_a else b_rows)
    share_off = r.bin(arith.MuliOp, share, 128)
    b_half = r.bin(arith.MuliOp, place, cfg.bn // 2)      # the pair's B rows of this place
    loop, (m0, n0), (stage, phase) = parts.tile_loop(r, M, N, [zero, zero], cfg)
    t = _Ops(loop.block)
    a_row = t.bin(arith.AddiOp, m0, share) if mc_a else m0
    b_row = t.bin(arith.AddiOp, n0, b_half)
    if not mc_a:
        b_row = t.bin(arith.AddiOp, b_row, share)
    a_off, b_off = (share_off, zero) if mc_a else (zero, share_off)
    kloop, k, kb, (ks, kph) = _for(t, zero, num_kb, one, [stage, phase])
    k.add(s.MbarrierWaitOp(empty, ks, k.bin(arith.XOrIOp, kph, 1)))
    k.add(s.MbarrierArriveOp(full, ks, pred=even, tx_bytes=2 * cfg.stage_bytes))
    kc = k.bin(arith.MuliOp, kb, cfg.bk)
    k.add(s.TmaLoadOp(tA, [kc, a_row], a_st, ks, a_off, full, ks,
                      pair_multicast=BOTH_PAIRS if mc_a else 0))
    k.add(s.TmaLoadOp(tB, [kc, b_row], b_st, ks, b_off, full, ks,
                      pair_multicast=0 if mc_a else BOTH_PAIRS))
    k.add(scf.YieldOp(*k.advance(ks, kph, cfg.stages)))
    t.add(s.YieldOp(list(kloop.results)))
    r.add(s.YieldOp())


__all__ = ["build_gemm_tmem_cluster", "ClusterParts", "ClusterClcParts"]
