"""GPU target descriptions for the pkc cost model.

One frozen `Target` per GPU kind. All figures are SI units (FLOP/s, bytes/s, seconds, bytes)
and every figure has its source in `Target.sources` (field name -> text). Sources are one of:

- "measured here 2026-11-29 (PLATFORM.md)": run on the lent H200 with torch/cuBLAS;
- "measured here 2026-11-29 (benchmarks/transfer.py, ...)": pkc's transfer microbenchmark
  on the lent H200 (device to device: per-SM drive rates, not NVLink);
- "datasheet: ...": NVIDIA's published product figures;
- "PK paper ...": ParallelKittens, arXiv 2511.13940 (measured by its authors);
- "estimate: ...": derived or assumed by us, with the reasoning; to be replaced by
  microbenchmarks (use `Target.with_overrides`).

Figures measured here override datasheet leads (DESIGN.md, "Cost model and targets").
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

KB = 1024

# --- source texts -----------------------------------------------------------------------
MEASURED = "measured here 2026-11-29 (PLATFORM.md)"
DS_H100 = "datasheet: NVIDIA H100 SXM5"
DS_H200 = "datasheet: NVIDIA H200 SXM"
DS_B200 = "datasheet: NVIDIA HGX B200 (per GPU = 1/8 of the 8-GPU figure)"
DS_NVL72 = "datasheet: NVIDIA GB200 NVL72 (per GPU = 1/72 of the rack figure)"
DS_HOPPER_SMEM = "datasheet: Hopper tuning guide, 228 KB shared memory per SM (227 KB per block)"
DS_BW_SMEM = "datasheet: Blackwell tuning guide, 228 KB shared memory per SM"
PK_TMA = ("PK paper arXiv 2511.13940: TMA reaches ~78% of NVLink with ~15 of 148 SMs on B200 "
          "-> 0.78 * 900 GB/s / 15 = 46.8 GB/s per SM")
PK_LDST = ("PK paper arXiv 2511.13940: ld/st needs 3-5x more SMs than TMA for the same "
           "bandwidth; 4x taken -> 46.8 / 4 = 11.7 GB/s per SM")
PK_EFF = "PK paper arXiv 2511.13940: device-initiated TMA reaches ~78% of NVLink peak"
EST_HOPPER_TMA = ("estimate: PK's per-SM TMA rate (B200, 46.8 GB/s) assumed for Hopper "
                  "(same TMA unit design, similar clocks) -> 8 SMs saturate 351 GB/s")
EST_HOPPER_LDST = "estimate: PK's 3-5x ld/st penalty (4x) applied to the Hopper TMA estimate"
EST_HOPPER_EFF = "estimate: PK's ~78% TMA-of-NVLink efficiency (measured on B200) assumed"
EST_SIGNAL = ("estimate: NVLink/NVSwitch remote flag round trip (red.release.sys then "
              "ld.acquire.sys seen by the peer) ~2 us; replace with a ping-pong microbenchmark")
EST_SIGNAL_ISSUE = ("estimate: fence.proxy.async + membar/release + one remote flag write "
                    "on the issuing warp, ~0.5 us")
EST_PEER_ISSUE = ("estimate: one more relaxed system-scope red.add to a peer's pad from the "
                  "signalling thread, after the one fence signal_issue already counts: a "
                  "posted NVLink write, ~50 ns of issue and fabric credit per peer (thread 0 "
                  "signals the peers one after another, so a barrier's issue grows with W)")
EST_FANIN = ("estimate: one more peer's flag landing in this GPU's pad: the W - 1 posted "
             "atomics arrive through one NVLink ingress and serialize at the L2 slice of the "
             "pad's line, ~25 ns each (an L2 atomic on one line is ~10-30 ns)")
EST_LAUNCH = ("estimate: kernel launch plus dependent-kernel gap on one stream ~3 us "
              "(eager torch; CUDA graphs are lower)")
EST_SLOW_TMA = ("estimate: intra-SM overlap, one producer warp issuing TMA puts/flags and "
                "holding an output tile in smem costs the MMA warpgroups ~5%")
EST_SLOW_LDST = ("estimate: intra-SM overlap with register ld/st (remote reductions) "
                 "competes for issue slots and registers, ~15% MMA slowdown")
EST_HBM_RATIO = ("estimate: datasheet * 0.88, the measured/datasheet ratio on H200 "
                 "(4227 / 4800 GB/s)")
EST_MMA_RATIO = ("estimate: datasheet * 0.79, the measured/datasheet ratio on H200 "
                 "(785 / 989 TFLOP/s)")
ARCH_SRC = {"sm_90a": "datasheet: Hopper is compute capability 9.0 (PTX target sm_90a)",
            "sm_100a": "datasheet: Blackwell B200 is compute capability 10.0 (PTX target sm_100a)"}
MEAS_GC = MEASURED + ": cuDevSmResourceSplitByCount min partition 8 SMs, alignment 8"
MEASURED_NVL = "measured here 2026-11-29 (benchmarks/fused_sweep.py, 2 and 4 H200s over NVSwitch)"
MEASURED_XFER = "measured here 2026-11-29 (benchmarks/transfer.py, device-to-device on one H200)"
MEAS_H200_TMA = (MEASURED_XFER + ": one thread per SM, cp.async.bulk global->smem->global, "
                 "49.9 GB/s copied per SM at 8 SMs with 32 KB messages (48-50 from 1 to 32 SMs "
                 "at >= 8 KB; 11.7 at 2 KB, issue-bound; HBM saturates at ~1.9 TB/s). Drive "
                 "rate against HBM, not NVLink: taken as the per-SM put rate until a "
                 "multi-GPU run measures it over the link")
MEAS_H200_LDST = (MEASURED_XFER + ": 1024 threads per SM, 16-byte ld/st, 37.7 GB/s copied per "
                  "SM at 8 SMs with 32 KB messages (47 at 1 SM, 31 at 32; flat in message "
                  "size). Drive rate against HBM, not NVLink")
NVLS_OFF = ("policy: never on Hopper targets here: the lent H100/H200 machines must keep "
            "NVLink multicast / NVLS off (DESIGN.md, 'Runtime'); the hardware has NVLS, pkc "
            "does not emit multimem collectives for it")
NVLS_B200 = ("datasheet: NVIDIA HGX B200: NVLink 5 switches with NVIDIA SHARP in-network "
             "reduction (NVLS; CUDA multicast objects, PTX multimem)")
NVLS_NVL72 = ("datasheet: NVIDIA GB200 NVL72: NVLink Switch System with NVIDIA SHARP "
              "in-network reduction (NVLS; CUDA multicast objects, PTX multimem)")
EST_GC = ("estimate: same as measured on H200 (8 / 8); the driver reports it as "
          "minSmPartitionSize / smCoscheduledAlignment")


@dataclass(frozen=True)
class Target:
    """One GPU kind in an NVLink domain, as the cost model sees it."""

    name: str
    sm_arch: str                      # "sm_90a" (Hopper) or "sm_100a" (Blackwell)
    num_sms: int
    mma_peak_flops: float             # dense bf16/fp16 tensor-core FLOP/s, datasheet
    mma_achievable_flops: float       # per-GPU GEMM rate before wave quantization
    hbm_bw: float                     # bytes/s, datasheet
    hbm_achievable_bw: float          # bytes/s counting reads + writes (device copy)
    nvlink_bw: float                  # bytes/s per direction per GPU, datasheet
    nvlink_achievable_bw: float       # bytes/s per direction reachable by device copies
    tma_bw_per_sm: float              # bytes/s one SM drives over NVLink with cp.async.bulk
    ldst_bw_per_sm: float             # bytes/s one SM drives over NVLink with ld/st
    signal_latency: float             # s, remote flag round trip
    signal_issue: float               # s, cost on the issuing warp of one release + flag
    peer_signal_issue: float          # s, each further peer flag the same thread issues
    flag_fanin: float                 # s, each further peer flag landing in one pad
    launch_overhead: float            # s, per kernel launch
    smem_per_sm: int                  # bytes
    max_gpus: int                     # GPUs in one NVLink domain
    sm_partition_min: int             # smallest green-context SM partition
    sm_partition_align: int           # green-context SM partition granularity
    intra_sm_slowdown_tma: float      # MMA time factor with a TMA comm warp in every SM
    intra_sm_slowdown_ldst: float     # MMA time factor with an ld/st comm warp in every SM
    # the compiler may emit NVLS collectives (multimem instructions on a multicast object,
    # the switch reduces): a flag, not a figure; False for every target of the lent
    # machines, which must keep NVLink multicast off (DESIGN.md, "Runtime")
    nvls: bool
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self):
        object.__setattr__(self, "sources", MappingProxyType(dict(self.sources)))

    @classmethod
    def figure_names(cls) -> tuple[str, ...]:
        """Names of every figure that needs a source (all fields but name and sources)."""
        return tuple(f.name for f in dataclasses.fields(cls) if f.name not in ("name", "sources"))

    def with_overrides(self, source: str = "override", **figures) -> "Target":
        """Copy with some figures replaced (e.g. from microbenchmarks); their source becomes
        `source`. Unknown names raise TypeError."""
        unknown = sorted(set(figures) - set(self.figure_names()) - {"name"})
        if unknown:
            raise TypeError(f"Target.with_overrides: unknown figures {unknown}; "
                            f"known: {', '.join(self.figure_names())}")
        sources = dict(self.sources)
        sources.update({k: source for k in figures if k != "name"})
        return dataclasses.replace(self, sources=sources, **figures)

    @property
    def one_way_latency(self) -> float:
        """Half the flag round trip: time for a remote write + flag to become visible."""
        return self.signal_latency / 2


def _hopper_link(src: str) -> dict:
    """NVLink 4 (18 links, 900 GB/s bidirectional) and Hopper comm figures."""
    return dict(
        values=dict(nvlink_bw=450e9, nvlink_achievable_bw=0.78 * 450e9,
                    tma_bw_per_sm=46.8e9, ldst_bw_per_sm=11.7e9),
        sources=dict(nvlink_bw=src + ": NVLink 900 GB/s bidirectional -> 450 GB/s per direction",
                     nvlink_achievable_bw=EST_HOPPER_EFF, tma_bw_per_sm=EST_HOPPER_TMA,
                     ldst_bw_per_sm=EST_HOPPER_LDST))


def _common(smem_src: str, gc_src: str) -> dict:
    """Figures shared by all targets (estimates unless stated)."""
    return dict(
        values=dict(signal_latency=2e-6, signal_issue=0.5e-6, peer_signal_issue=50e-9,
                    flag_fanin=25e-9, launch_overhead=3e-6,
                    smem_per_sm=228 * KB, sm_partition_min=8, sm_partition_align=8,
                    intra_sm_slowdown_tma=1.05, intra_sm_slowdown_ldst=1.15),
        sources=dict(signal_latency=EST_SIGNAL, signal_issue=EST_SIGNAL_ISSUE,
                     peer_signal_issue=EST_PEER_ISSUE, flag_fanin=EST_FANIN,
                     launch_overhead=EST_LAUNCH, smem_per_sm=smem_src,
                     sm_partition_min=gc_src, sm_partition_align=gc_src,
                     intra_sm_slowdown_tma=EST_SLOW_TMA, intra_sm_slowdown_ldst=EST_SLOW_LDST))


def _make(name: str, sm_arch: str, own: dict, *parts: dict) -> Target:
    """Assemble a Target from (value, source) pairs in `own` plus shared parts."""
    values, sources = {}, {"sm_arch": ARCH_SRC[sm_arch]}
    for k, (v, s) in own.items():
        values[k], sources[k] = v, s
    for p in parts:
        for k, v in p["values"].items():
            values.setdefault(k, v)
        for k, s in p["sources"].items():
            sources.setdefault(k, s)
    return Target(name=name, sm_arch=sm_arch, sources=sources, **values)


H100 = _make("h100", "sm_90a", dict(
    num_sms=(132, DS_H100 + ": 132 SMs (SXM5)"),
    mma_peak_flops=(989e12, DS_H100 + ": BF16 dense 989 TFLOP/s (1979 with sparsity)"),
    mma_achievable_flops=(760e12, "estimate: same GH100 die and clocks as the H200 measured "
                                  "here (785 TFLOP/s); taken ~3% lower for the 3.35 TB/s HBM"),
    hbm_bw=(3.35e12, DS_H100 + ": HBM3 3.35 TB/s"),
    hbm_achievable_bw=(0.88 * 3.35e12, EST_HBM_RATIO),
    nvls=(False, NVLS_OFF),
    max_gpus=(8, DS_H100 + ": HGX H100 8-GPU NVSwitch baseboard"),
), _hopper_link(DS_H100), _common(DS_HOPPER_SMEM, EST_GC))

H200 = _make("h200", "sm_90a", dict(
    num_sms=(132, MEASURED + ": 132 SMs"),
    mma_peak_flops=(989e12, DS_H200 + ": BF16 dense 989 TFLOP/s (1979 with sparsity)"),
    # cuBLAS bf16: 8192^3 799, 16384x8192x4096 748, 4096x28672x8192 776, 2048x8192x28672 721
    # TFLOP/s. Each of these shapes loses ~3% to wave quantization (128x256 tiles, 132 SMs),
    # which cost.gemm_time models separately, so the per-GPU rate here is their mean / 0.97.
    mma_achievable_flops=(785e12, MEASURED + ": cuBLAS bf16 721-799 TFLOP/s on 4 shapes; "
                                             "mean with wave quantization divided out"),
    hbm_bw=(4.8e12, DS_H200 + ": HBM3e 4.8 TB/s"),
    hbm_achievable_bw=(4227e9, MEASURED + ": device-to-device copy 4227 GB/s (read + write)"),
    nvls=(False, NVLS_OFF),
    max_gpus=(8, DS_H200 + ": HGX H200 8-GPU NVSwitch baseboard"),
    sm_partition_min=(8, MEAS_GC), sm_partition_align=(8, MEAS_GC),
    tma_bw_per_sm=(49.9e9, MEAS_H200_TMA),
    ldst_bw_per_sm=(37.7e9, MEAS_H200_LDST),
    nvlink_achievable_bw=(370e9, MEASURED_NVL + ": the best of a peer pull through symmetric "
                                 "memory and NCCL all-gather bus bandwidth at 256 MiB, 370-371 "
                                 "GB/s on 2 and on 4 GPUs"),
    intra_sm_slowdown_tma=(1.02, "measured here 2026-11-29 (benchmarks/results/h200_2026-11-29/fused_w1.json; the W = 1 cases of benchmarks/fused_ar_ir.py re-measure it): the fused GEMM + "
                                 "reduce-scatter kernel at W = 1 costs 1.00-1.03x the GEMM "
                                 "alone"),
), _hopper_link(DS_H200), _common(DS_HOPPER_SMEM, MEAS_GC))

_BLACKWELL_LINK = dict(
    values=dict(nvlink_bw=900e9, nvlink_achievable_bw=0.78 * 900e9,
                tma_bw_per_sm=46.8e9, ldst_bw_per_sm=11.7e9),
    sources=dict(nvlink_bw=DS_B200 + ": NVLink 5 1.8 TB/s bidirectional -> 900 GB/s per direction",
                 nvlink_achievable_bw=PK_EFF, tma_bw_per_sm=PK_TMA, ldst_bw_per_sm=PK_LDST))

B200 = _make("b200", "sm_100a", dict(
    num_sms=(148, "PK paper arXiv 2511.13940: 148 SMs on B200"),
    mma_peak_flops=(2.25e15, DS_B200 + ": BF16 36 PFLOP/s with sparsity per 8 GPUs -> 2.25 dense per GPU"),
    mma_achievable_flops=(0.79 * 2.25e15, EST_MMA_RATIO),
    hbm_bw=(8e12, DS_B200 + ": HBM3e 64 TB/s per 8 GPUs"),
    hbm_achievable_bw=(0.88 * 8e12, EST_HBM_RATIO),
    nvls=(True, NVLS_B200),
    max_gpus=(8, DS_B200 + ": HGX B200 8-GPU NVSwitch baseboard"),
), _BLACKWELL_LINK, _common(DS_BW_SMEM, EST_GC))

NVL72 = _make("nvl72", "sm_100a", dict(
    num_sms=(148, "estimate: same Blackwell die as B200 (148 SMs, PK paper)"),
    mma_peak_flops=(2.5e15, DS_NVL72 + ": BF16 360 PFLOP/s with sparsity per 72 GPUs -> 2.5 "
                            "dense per GPU (GB200 runs at a higher power limit than HGX B200's "
                            "2.25)"),
    mma_achievable_flops=(0.79 * 2.5e15, EST_MMA_RATIO),
    hbm_bw=(8e12, DS_NVL72 + ": HBM3e 576 TB/s per 72 GPUs"),
    hbm_achievable_bw=(0.88 * 8e12, EST_HBM_RATIO),
    nvlink_bw=(900e9, DS_NVL72 + ": NVLink 130 TB/s per 72 GPUs = 1.8 TB/s bidirectional "
                                 "-> 900 GB/s per direction"),
    signal_latency=(3e-6, "estimate: 2 us as on 8-GPU boards plus ~0.5 us each way for the "
                          "rack's NVLink spine (every GPU reaches every other through one "
                          "of the 9 NVSwitch trays over copper cables, not a baseboard)"),
    nvls=(True, NVLS_NVL72),
    max_gpus=(72, DS_NVL72 + ": 72 GPUs in one NVLink domain"),
    nvlink_achievable_bw=(0.78 * 900e9, "estimate: PK's ~78% of NVLink by device-initiated "
                                        "TMA (measured on HGX B200, arXiv 2511.13940) assumed "
                                        "for the NVL72's NVLink 5 ports (same generation and "
                                        "per-GPU bandwidth)"),
    tma_bw_per_sm=(46.8e9, "estimate: PK's B200 per-SM TMA rate (46.8 GB/s) for the same "
                           "Blackwell die"),
    ldst_bw_per_sm=(11.7e9, "estimate: PK's B200 ld/st rate (4x below TMA) for the same die"),
), _BLACKWELL_LINK, _common(DS_BW_SMEM, EST_GC))

TARGETS: Mapping[str, Target] = MappingProxyType({t.name: t for t in (H100, H200, B200, NVL72)})


def get_target(name: str) -> Target:
    """The Target called `name` (case-insensitive); ValueError listing known names if none."""
    key = str(name).strip().lower()
    if key not in TARGETS:
        raise ValueError(f"unknown target {name!r}; known targets: {', '.join(sorted(TARGETS))}")
    return TARGETS[key]
