"""Tuning table of the fused GEMM + collective kernels: the figures and rules that pick a
fused kernel's tile and variant, with where each was measured.

The passes that schedule fused kernels (``schedule-fused``, ``sm-partition``) decide with
these figures and write the decisions into the IR; the runtime decides nothing. The
measurements were made on H200s with the hand-written kernels that the IR-built ones
replaced (deleted at parity, 2026-12-01: docs/PERF_NOTES.md); the same kernels now come from IR.
"""

from __future__ import annotations

import math

from pkc.kinds import Kind
from pkc.target.gemm_tuning import BLayout, GemmConfig, choose_config


class FusedKind(Kind):
    """Which fused GEMM + collective a kernel is (``pk.plan.fused_kind``)."""

    RS = "rs"      # GEMM + reduce-scatter
    AR = "ar"      # GEMM + all-reduce (broadcast)
    AG = "ag"      # all-gather + GEMM
    AGP = "agp"    # the pull all-gather after a GEMM + reduce-scatter (fused_ar_pair)


# AG + GEMM: bytes per second one put CTA moved over NVLink (cp.async.bulk through a
# 4 x 32 KiB ring), measured on 2 and 4 H200s: 16 CTAs reached about the link's 370 GB/s.
PUT_CTA_BW = 24e9

# GEMM + all-reduce into a fresh output ("arf") is off: it measured slower than the
# broadcast kernel plus the copy of its result on every W = 2 shape (2 H200s, compiled:
# N = 8192 0.54-0.63 vs 0.52-0.53 ms, N = 16384 2.68-2.72 vs ~2.1, N = 32768 17.2-17.4 vs
# 14.2), with bulk reduce-add reducers, with all-thread vector reducers, and with tiles
# signalled 1 or 4 tiles late alike: the bound is not the reducers' instruction mix.
ARF_ENABLED = False

# The scheduled GEMM + reduce-scatter (alone, and as the first kernel of GEMM + all-reduce
# at W > 2) takes a TMA tensor map per peer by value (10 KB of parameters at W = 72: more
# than the classic 4 KB, within the 32 KB that CUDA 12.1+ allows on sm_70+) and waits for a
# chunk's owner when its tile loop enters the chunk (no per-owner mask: it was one bit of
# an i32, hence a cap of 32 before). It assembles without spills at W = 72 (ptxas
# -arch=sm_90a: tests/unit/test_world72.py; 452 bytes spilled there while pks.tmap_select
# was a 72-way selp chain, which kept 72 map addresses live). 72: the largest NVLink
# domain (nvl72); nothing above it was checked.
RS_MAX_WORLD = 72

# Fused GEMM + all-reduce (broadcast) and GEMM + reduce-scatter at W <= 2 where the link,
# not the GEMM, bounds the kernel (the bytes a rank sends take this many times the GEMM's
# time, or more): 128 x 128 tiles, twice as many as 128 x 256 (the partials travel in
# finer steps, the last wave is shorter). Measured on 2 H200s (hand kernels, x cuBLAS+NCCL,
# link / GEMM in brackets): GEMM+AR N = 2048 (2.2) 1.31 -> 1.36x, 4096 (2.6) 1.31 -> 1.41x,
# 8192 (1.8) 1.42-1.45 -> 1.49-1.50x; N = 16384 (0.93) 1.83 either way; Llama-70B o / down
# (0.47 / 0.12) 1.36 -> 1.30x / 1.14 -> 1.05x, hence the threshold. GEMM+RS N = 4096 (1.3)
# 1.47 -> 1.57x; below the threshold N = 2048 (1.1) 1.54 -> 1.56x, 8192 (0.9) 1.52 -> 1.54x,
# 16384 (0.5) 1.53 -> 1.51x. (All-gather + GEMM: no gain measured, not applied.)
LINK_BOUND = 1.25
LINK_BOUND_TILE = dict(bm=128, bn=128, stages=6)

# GEMM + all-reduce at W = 2 by broadcast into a fresh output (the peer's chunk summed in
# the epilogue, the own chunk copied from the accumulator inside the kernel), instead of
# the broadcast into the persistent accumulator and a copy of all of it after the kernel.
# Measured on 2 H200s (compiled, x cuBLAS+NCCL, before -> after, two runs each): N = 2048
# 1.16 -> 1.28-1.30, 4096 1.20 -> 1.36, 8192 1.34 -> 1.49-1.50, 16384 1.52 -> 1.60-1.62,
# 32768 1.39 -> 1.39-1.40; Llama-70B o / down (tp) 1.28 -> 1.33 / 1.15 -> 1.13-1.14. The
# kernel alone is 3-5% slower than the persistent one on GEMM-bound shapes (the own
# chunk's copy at its end), faster where the link bounds it.
AR_INTO_OUTPUT = True
# GEMM + reduce-scatter at W = 2 into a fresh output (the peer's chunk first, its partial
# stored into the peer's staging; the own chunk summed in the epilogue), instead of
# reduce-adds into the persistent accumulator and a copy after. Measured on 2 H200s
# (compiled, x cuBLAS+NCCL, the final run before -> one run after): N = 4096 1.42 -> 1.58,
# 8192 1.37 -> 1.51, 16384 1.43 -> 1.51, 32768 1.31 -> 1.30; Llama-70B o / down (sp) 1.26
# -> 1.29 / 1.14 -> 1.15. The kernel alone: equal to the persistent one where the link
# matters, 1-3% slower on the GEMM-bound Llama shapes.
RS_INTO_OUTPUT = True


def side_ctas_for(rate: float) -> int:
    """CTAs that move ``rate`` bytes/s at 1.25x headroom, ~PUT_CTA_BW each: a multiple of
    4 in [4, 16] (every one is an SM less for the GEMM)."""
    return min(16, max(4, 4 * math.ceil(1.25 * rate / PUT_CTA_BW / 4)))


def link_over_gemm(kind: FusedKind, M: int, N: int, K: int, world: int,
                   target: str = "h200") -> float:
    """A fused GEMM + all-reduce broadcast's ("ar": the M x N 16-bit partial to each of the
    W - 1 peers) or GEMM + reduce-scatter's ("rs": (W-1)/W of it) link time over its GEMM
    time."""
    from pkc.target.cost import gemm_time
    from pkc.target.targets import get_target

    sent = M * N * 2 * (world - 1) / (1 if kind is FusedKind.AR else world)
    return sent / get_target(target).nvlink_achievable_bw / gemm_time(target, M, N, K)


def fused_gemm_config(kind: FusedKind, M: int, N: int, K: int, world: int, dtype: str,
                      b_layout: BLayout, sms: int, target: str = "h200") -> GemmConfig:
    """The GEMM tile config of a fused kernel over the whole ``[M, N, K]`` product: the
    one for the whole GPU (choose_config; picking it for the SMs the put CTAs leave
    measured 4-7% slower on Llama up+gate and N = 32768 AG + GEMM, 2 / 4 GPUs), except
    128 x 128 for a link-bound GEMM + all-reduce / reduce-scatter at W <= 2 (above)."""
    cfg = choose_config(M, N, K, dtype, b_layout, sms)
    if kind in (FusedKind.AR, FusedKind.RS) and world <= 2 and \
            link_over_gemm(kind, M, N, K, world, target) >= LINK_BOUND:
        cfg = cfg.with_(**LINK_BOUND_TILE)
    return cfg


def rs_into_output(world: int) -> bool:
    """GEMM + reduce-scatter into a fresh output (the W = 2 variant) or reduce-adds into
    the persistent accumulator."""
    return world == 2 and RS_INTO_OUTPUT


# All-gather + GEMM's put side: bulk copies of PUT_PIECE bytes through a PUT_RING-deep
# ring in each put CTA's shared memory (the GEMM's stage memory, which a put CTA does not
# use), half of the ring's pieces' stores in flight: the hand kernel's measured defaults.
PUT_PIECE = 32768
PUT_RING = 4


def ag_put_ctas(M: int, N: int, K: int, world: int, target: str = "h200") -> tuple[int, str]:
    """(put CTAs, why) for an all-gather + GEMM with gathered A ``[M, K]``: enough to
    deliver the remote rows at 1.25x the rate the GEMM consumes them (the (W-1)/W remote
    part of A over the whole GEMM's predicted time), a multiple of 4 in [4, 16]. Every CTA
    more is an SM less for the GEMM: compute-bound shapes (Llama up+gate) want few;
    measured on 2 and 4 H200s (hand kernels), 16 won where A's bytes outrun the GEMM (8
    lost 8-17% there), 8 won over 12 and 16 on N = 32768 at W = 4 (by 7%), 4 over 8 on
    up+gate at W = 2 (the hand path's rule)."""
    from pkc.target.cost import gemm_time

    remote = (world - 1) / world * M * K * 2
    t = gemm_time(target, M, N, K)
    n = side_ctas_for(remote / t)
    why = (f"{n} put CTAs: the remote rows of A ({remote / 1e6:.3g} MB) over the GEMM's "
           f"predicted {t * 1e6:.3g} us need {remote / t / 1e9:.3g} GB/s; at 1.25x headroom "
           f"and ~{PUT_CTA_BW / 1e9:.0f} GB/s per put CTA, a multiple of 4 in [4, 16]")
    return n, why
