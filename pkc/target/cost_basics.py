"""The cost model's basics: the constants and kinds it is written in (tile shapes, the
fusable patterns, overlap styles), target and argument checks, and the primitive times
(a GEMM's tiling and time, copies, link transfers, signals, launches) that the collective
and fused-kernel predictions (:mod:`pkc.target.cost`) are built from."""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import MappingProxyType

from pkc.kinds import Kind
from pkc.target.targets import Target, get_target

# Output tile shapes a Hopper/Blackwell persistent GEMM uses (cuBLAS / CUTLASS / PK).
TILE_SHAPES = ((128, 256), (128, 128))
# estimate: a 128x128 tile re-reads operands twice as often per FLOP as 128x256 and keeps
# fewer wgmma in flight; ~10% lower per-SM rate (CUTLASS profiles on H100 show 5-15%).
TILE_EFFICIENCY = {(128, 256): 1.0, (128, 128): 0.9}
# Pipeline steps simulated per fused kernel (steps are grouped above this, for speed).
MAX_STEPS = 256
# Fusion must pay through overlap: the fused kernel must beat the unfused sequence by this
# fraction *after* the unfused sequence is credited the launches fusion saves. The figures
# marked "estimate" in targets.py are not better than a few percent; the launch saving
# depends on how the program is launched (eager ~3 us per kernel, ~1 us in a CUDA graph),
# so a decision must not rest on it; and the unfused pair (cuBLAS + a collective) is the
# known-good fallback. Reported times still include every launch. 2%: on 2 and 4 H200s
# every fused sm_90a kernel measured >= 1.0x cuBLAS + NCCL on the shapes the model gave
# 2-3% (Llama-70B up+gate at W = 2: predicted 2.1%, measured 1.03-1.07x fused, 0.95x for
# pkc's unfused pair), so 3% left real gains on the table.
FUSE_MIN_GAIN = 0.02

DTYPE_BYTES = {"bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2, "half": 2,
               "fp32": 4, "float32": 4, "float": 4, "fp8": 1, "float8_e4m3fn": 1}

class Pattern(Kind):
    """A GEMM + collective pattern that can be fused (``pk.plan.pattern``, ``pk.fusion``)."""

    MM_REDUCE_SCATTER = "mm_reduce_scatter"
    MM_ALL_REDUCE = "mm_all_reduce"
    ALL_GATHER_MM = "all_gather_mm"
    # an all-gather along the matmul's contraction dim K (the lhs's last dim): every output
    # tile sums one product per rank's shard (pkc/passes/patterns_gather_k.py)
    ALL_GATHER_K_MM = "all_gather_k_mm"
    MOE = "all_to_all_mm_all_to_all"      # dispatch all-to-all, grouped GEMM, combine


PATTERNS = MappingProxyType({
    Pattern.MM_REDUCE_SCATTER: "mm+reduce_scatter",
    Pattern.MM_ALL_REDUCE: "mm+all_reduce",
    Pattern.ALL_GATHER_MM: "all_gather+mm",
    Pattern.ALL_GATHER_K_MM: "all_gather(K)+mm",
    Pattern.MOE: "all_to_all+grouped_mm+all_to_all",
})


class OverlapStyle(Kind):
    """How a fused kernel overlaps communication with its GEMM (``pk.plan.overlap``)."""

    INTRA = "intra"    # every SM computes; a producer warp in each SM communicates
    INTER = "inter"    # comm_sms SMs only communicate; the GEMM runs on the rest
    NONE = "none"      # nothing communicates beside the GEMM (a scheduled kernel's record)


# --------------------------------------------------------------------------------------
# helpers


def _target(target) -> Target:
    return target if isinstance(target, Target) else get_target(target)


def dtype_bytes(dtype) -> int:
    """Bytes per element of `dtype` (an int, a name like "bf16", or a torch dtype)."""
    if isinstance(dtype, int):
        if dtype <= 0:
            raise ValueError(f"dtype bytes must be positive, got {dtype}")
        return dtype
    name = str(dtype).replace("torch.", "").lower()
    if name not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype!r}; known: {sorted(DTYPE_BYTES)} or a byte count")
    return DTYPE_BYTES[name]


def _check_world(target: Target, W: int) -> None:
    if not 1 <= W <= target.max_gpus:
        raise ValueError(f"world size {W} outside 1..{target.max_gpus} "
                         f"(NVLink domain of {target.name})")


def _check_sms(target: Target, sms, what: str) -> int:
    sms = target.num_sms if sms is None else int(sms)
    if not 1 <= sms <= target.num_sms:
        raise ValueError(f"{what}: sms={sms} outside 1..{target.num_sms} on {target.name}")
    return sms


# --------------------------------------------------------------------------------------
# primitives


@dataclass(frozen=True)
class Tiling:
    """How a GEMM maps onto SMs: tile shape, tile count, waves, compute-only time."""
    tm: int
    tn: int
    tiles: int
    waves: int
    compute_time: float


def gemm_tiling(target, M: int, N: int, K: int, sms=None, groups: int = 1) -> Tiling:
    """Best of the TILE_SHAPES for an M x N x K GEMM (or `groups` equal GEMMs of M/groups
    rows each, a grouped GEMM) on `sms` SMs.

    Each SM runs at achievable_rate / num_sms (times the tile's efficiency); an output tile
    costs 2*tm*tn*K FLOPs; tiles run in waves of `sms`, so the time is
    waves * tile_flops / per_sm_rate with waves = ceil(tiles / sms) (wave quantization).
    Using fewer SMs therefore costs time in proportion to the extra waves.
    """
    t = _target(target)
    sms = _check_sms(t, sms, "gemm")
    per_sm = t.mma_achievable_flops / t.num_sms
    rows = math.ceil(M / groups)
    best = None
    for tm, tn in TILE_SHAPES:
        tiles = groups * math.ceil(rows / tm) * math.ceil(N / tn)
        waves = math.ceil(tiles / sms)
        time = waves * 2.0 * tm * tn * K / (per_sm * TILE_EFFICIENCY[(tm, tn)])
        if best is None or time < best.compute_time:
            best = Tiling(tm, tn, tiles, waves, time)
    return best


def gemm_time(target, M: int, N: int, K: int, dtype_bytes: int = 2, sms=None,
              groups: int = 1) -> float:
    """GEMM kernel time (no launch): max(compute with wave quantization, HBM traffic).

    HBM traffic is the compulsory one, (M*K + groups*K*N + M*N) * dtype_bytes, at the
    achievable (read + write) HBM rate; operand re-reads are assumed to hit L2.
    """
    t = _target(target)
    compute = gemm_tiling(t, M, N, K, sms, groups).compute_time
    traffic = (M * K + groups * K * N + M * N) * dtype_bytes
    return max(compute, traffic / t.hbm_achievable_bw)


def copy_time(target, nbytes: float) -> float:
    """Local device-to-device copy: nbytes read + nbytes written at the achievable HBM rate
    (which was measured counting both)."""
    return 2.0 * nbytes / _target(target).hbm_achievable_bw


def link_rate(target, sms=None, mechanism: str = "tma") -> float:
    """Bytes/s one GPU pushes (or pulls) over NVLink in one direction with `sms` SMs:
    min(per-SM drive rate * sms, achievable per-direction NVLink bandwidth)."""
    t = _target(target)
    sms = _check_sms(t, sms, "link")
    per_sm = {"tma": t.tma_bw_per_sm, "ldst": t.ldst_bw_per_sm}.get(mechanism)
    if per_sm is None:
        raise ValueError(f"unknown mechanism {mechanism!r}; known: 'tma', 'ldst'")
    return min(per_sm * sms, t.nvlink_achievable_bw)


def link_time(target, nbytes: float, sms=None, mechanism: str = "tma") -> float:
    """Time to move nbytes over one GPU's NVLink port in one direction (no latency; add
    signal_time for the flags that announce the data)."""
    return nbytes / link_rate(target, sms, mechanism)


def signal_time(target, n: int = 1) -> float:
    """n remote flag round trips between two ranks (a 2-rank barrier costs one; a barrier
    of more ranks costs :func:`barrier_time`)."""
    return n * _target(target).signal_latency


def fan_out_time(target, peers: int, issuers: int = 1) -> float:
    """What signalling ``peers`` ranks after their data costs: one release fence and flag
    (``signal_issue``), then ``peer_signal_issue`` for each further peer, the flags split
    among ``issuers`` threads that issue theirs one after another (posted writes). A
    barrier's flags come from one thread (pkc's kernels: collective_kernels, comm_schedule's
    barrier_phase); a fused kernel's per-step flags from its communicating CTAs, each
    flagging the peers its own tiles went to."""
    t = _target(target)
    if peers <= 0:
        return 0.0
    return t.signal_issue + math.ceil((peers - 1) / max(1, issuers)) * t.peer_signal_issue


def barrier_time(target, W: int, n: int = 1) -> float:
    """n barriers among W ranks (every rank flags every other, then waits for all flags).

    One barrier = the flag round trip between two GPUs (``signal_latency``, the W = 2
    cost, as before) + for each peer past the first, the issuing thread's next flag
    (``peer_signal_issue``: thread 0 writes the W - 1 flags in a row) and the next flag
    landing in the waiter's pad (``flag_fanin``: W - 1 posted atomics through one NVLink
    ingress serialize at the pad's L2 line). So a barrier grows linearly with W: on nvl72
    (75 ns per peer, estimates in pkc.target.targets) 3.45 us at W = 8 and 8.25 us at
    W = 72 against 3 us at W = 2. NCCL's own small all-reduce latency grows with the
    rank count in the same way (its LL protocol's per-peer flags); a tree or a
    dissemination barrier (log2 W rounds) would grow more slowly and is not modelled:
    pkc's kernels signal every peer directly."""
    t = _target(target)
    if W <= 1:
        return 0.0
    return n * (t.signal_latency + (W - 2) * (t.peer_signal_issue + t.flag_fanin))


def launch_time(target, n: int = 1) -> float:
    """n kernel launches on one stream."""
    return n * _target(target).launch_overhead


