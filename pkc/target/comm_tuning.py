"""The collectives' tuning table: which algorithm a lowered collective runs (sm_90a, and
sm_100a with the same rules; NVLS kinds only where the target has NVLS), by kind, world and
message size, and the launch shape of each algorithm.

The compiler decides once (``schedule-collectives`` writes the choice into the IR); the
runtime reads nothing here. Each figure says where it was measured (first with the
hand-written kernels that the IR-built ones replaced at parity, 2026-12-01: docs/PERF_NOTES.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum

from pkc.target.collectives import Algorithm, Collective

ESIZE = {"bf16": 2, "f16": 2, "f32": 4}
# 1-byte element types: raw data for the kinds that only move it (all-gather, all-to-all);
# no kernel adds them (schedule-collectives refuses their reductions)
BYTE_TYPES = {"f8E4M3FN": 1, "f8E5M2": 1, "ui8": 1, "i8": 1}
ESIZE.update(BYTE_TYPES)
VEC_BYTES = 16
THREADS = 512              # threads per CTA of every collective kernel (one CTA fits any SM)
UNROLL = 4                 # vectors per thread per loop trip (bandwidth kinds)

# LL kernels (flags in the data: no fence, no signal round trip; twice the bytes, and
# the all-reduce sends W - 1 copies) for small messages, up to a limit x 2 / W.
# One-shot all-reduce (limit LL_MAX_BYTES; above it the one-shot push kernel), measured on
# 2 H200s: LL 1.15-1.34x NCCL up to 256 KiB, 0.93x at 1 MiB (where one-shot push is
# 1.38x); on 4: LL 1.33x at 64 KiB (push 1.12x), 0.76x at 256 KiB (push 1.13x).
LL_MAX_BYTES = 256 << 10
# All-gathers (by output) and reduce-scatters (by input), measured on 2 H200s: LL
# 1.17-1.33x NCCL up to 256 KiB where the direct push kernels are 0.89-1.02x; at 1 MiB
# LL 1.15x vs 0.99x for the direct all-gather with its output copied out of the symmetric
# buffer (the compiled path); from 4 MiB direct wins. On 4: LL 1.14x at 256 KiB, 0.81x at
# 1 MiB (direct 1.06x with the copy).
LL_GATHER_MAX_BYTES = 1 << 20
# LL kinds: vectors of a slot per CTA (one per thread). Fewer than THREADS spreads a small
# message over more SMs: each SM's share of the stores and polls is what its load/store
# path takes time for. Measured on 2 H200s (all-reduce, x NCCL at 4K / 16K / 64K / 256K):
# 512: 1.41 / 1.34 / 1.34 / 1.28; 256: 1.42 / 1.53 / 1.45 / 1.33; 128: 1.48 / 1.52 / 1.46 /
# 1.36; 64: 1.52 / 1.63 / 1.55 / 1.38; 32: 1.48 / 1.51 / 1.46 / 1.34 (docs/PERF_NOTES.md).
LL_CTA_VECS = 64
# Two-shot all-reduces into a fresh output at W > 2 pull the reduced chunks from the
# peers from this size; below (and at W = 2 always) they push them into the peers'
# buffers and copy the peers' chunks out. Measured on 4 H200s (kernels alone, run j,
# when push still copied all W chunks): push 1.10 / 1.46 / 0.96 / 0.88x NCCL at 1 MiB /
# 4 MiB / 256 MiB / 1 GiB, pull 1.05 / 1.46 / 0.95 / 0.91x; on 2 H200s (session 4, the
# own chunk written straight to the output): push 0.94-0.95x at 1 GiB, pull 0.83-0.85x.
AR2_PULL_MIN_BYTES = 512 << 20
# From this size the two-shot runs in 2 CTA groups that take turns on the exchange (a
# group's copy-out overlaps the next group's link traffic). On 2 H200s, push: 1 GiB
# 0.95 -> 0.99x NCCL, 256 MiB 1.08 -> 1.13x, 64 MiB 1.18 -> 1.21x; 16 MiB 1.38 -> 1.30x
# (why not below); pull 1 GiB 0.84 -> 0.94x.
AR2_GROUPS_MIN_BYTES = 64 << 20
# CTAs per SM of the bandwidth kinds (ag, rs, ar2): with 1 the first all-gather reached
# 189 GB/s on 1 GiB, with 2 342 GB/s (2 H200s; docs/FACTS.md has the caveat); the
# latency kinds (LL, one-shot) run 1.
BANDWIDTH_CTAS_PER_SM = 2


# LL kinds up to this world: a thread polls its vector's W packets and holds them all (W x
# 4 registers) to sum or copy them out; at W = 16 the LL all-gather and reduce-scatter
# spilled (ptxas -arch=sm_90a: 1036 and 156 bytes). Above, the bandwidth kinds run.
LL_MAX_WORLD = 8
# Two-shot push gather up to this world: its reduce stores each result vector to the W
# peers (W addresses live in the loop); at W = 48 it spilled (132 bytes), at 32 not.
# Above, the pull gather (two stores per vector).
AR2_PUSH_MAX_WORLD = 32


def ll_limit(limit: int, world: int) -> int:
    """An LL size limit measured at W = 2, for W ranks (LL traffic grows with W); 0 (no
    LL) above LL_MAX_WORLD."""
    if world > LL_MAX_WORLD:
        return 0
    return limit * 2 // max(2, world)


class CommKind(Enum):
    """The algorithms of the scheduled collectives (the hand kernels' names)."""

    LL = "ll"          # LL one-shot all-reduce
    LLAG = "llag"      # LL all-gather
    LLRS = "llrs"      # LL reduce-scatter
    AR1 = "ar1"        # one-shot push all-reduce
    AR2 = "ar2"        # two-shot all-reduce, copy-in, fresh output
    AG = "ag"          # direct push all-gather
    RS = "rs"          # direct push reduce-scatter
    AGP = "agp"        # pull all-gather of chunks already in symmetric memory, fresh output
    A2A = "a2a"        # direct push all-to-all (equal splits), result in symmetric memory
    ARMC = "armc"      # NVLS all-reduce: multimem.ld_reduce of the own chunk, multimem.st
    AGMC = "agmc"      # NVLS all-gather: multimem.st of the input into every rank's output

    @property
    def is_ll(self) -> bool:
        return self in (CommKind.LL, CommKind.LLAG, CommKind.LLRS)

    @property
    def chunked(self) -> bool:
        """Data split by rank into W chunks (a CTA's slice is of one chunk)."""
        return self in (CommKind.LLRS, CommKind.RS, CommKind.AR2, CommKind.A2A, CommKind.ARMC)

    @property
    def bandwidth(self) -> bool:
        """Moves bulk data with many CTAs (2 per SM, ``.minnctapersm 2``)."""
        return self in (CommKind.AG, CommKind.RS, CommKind.AR2, CommKind.AGP, CommKind.A2A,
                        CommKind.ARMC, CommKind.AGMC)

    @property
    def multicast(self) -> bool:
        """Uses NVLS (multimem on a multicast object): only for targets with ``nvls``."""
        return self in (CommKind.ARMC, CommKind.AGMC)


class Gather(Enum):
    PUSH = "push"
    PULL = "pull"


@dataclass(frozen=True)
class CommConfig:
    """One scheduled collective: ``kind`` over ``world`` ranks of ``dtype``; ``unroll``;
    two-shot options (``gather``, CTA ``groups``; always a fresh output)."""

    kind: CommKind
    world: int
    dtype: str
    unroll: int = UNROLL
    gather: Gather = Gather.PUSH
    groups: int = 1
    reason: str = field(default="", compare=False)     # why the table chose it

    @property
    def vec_elems(self) -> int:
        return VEC_BYTES // ESIZE[self.dtype]

    @property
    def ctas_per_sm(self) -> int:
        return BANDWIDTH_CTAS_PER_SM if self.kind.bandwidth else 1

    @property
    def min_ctas_per_sm(self) -> int:
        """The register cap the kernel is compiled for (``.minnctapersm``): 2 CTAs of 512
        threads (64 registers) for every kind but LL, as the hand kernels."""
        return 1 if self.kind.is_ll else 2

    @property
    def slice_align(self) -> int:
        """LL: a CTA's slice in whole warps of whole LL line groups (32 lines)."""
        return 32 if self.kind.is_ll else 1

    @property
    def cta_vecs(self) -> int:
        """Vectors of a chunk one CTA takes at most (the grid rule's work per CTA)."""
        # not the loop's unroll: the two-shot's loops take 2-3 vectors per trip (registers)
        # and still give a CTA up to THREADS x UNROLL vectors, as the hand kernel's grid
        return LL_CTA_VECS if self.kind.is_ll else THREADS * UNROLL

    def tag(self) -> str:
        extra = f" {self.gather.value} gather" if self.kind is CommKind.AR2 else ""
        extra += f" {self.groups} CTA groups" if self.groups > 1 else ""
        return f"{self.kind.value} W={self.world} {self.dtype}{extra}"


def choose(collective: Collective | str, algorithm: Algorithm | str, world: int, dtype: str,
           elems: int, nvls: bool = False) -> CommConfig:
    """The scheduled collective of a lowered ``collective`` (``algorithm`` as lower-collectives
    chose it) on ``elems`` elements of the input: LL for small messages, else the one-shot
    / two-shot / direct kernel; the two-shot's gather and CTA groups by size. ``nvls``
    (the target has NVLS: :attr:`pkc.target.targets.Target.nvls`): all-reduces and
    all-gathers above the LL limits use the switch (:func:`_nvls`)."""
    collective = Collective.parse(collective, "the scheduled collective")
    algorithm = Algorithm.parse(algorithm, f"the scheduled {collective}'s algorithm")
    cfg = _choose(collective, algorithm, world, dtype, elems)
    nbytes = elems * ESIZE[dtype]
    if nvls and not cfg.kind.is_ll and world > 1 and collective in NVLS_KINDS:
        kind = NVLS_KINDS[collective]
        full = nbytes * world if collective is Collective.ALL_GATHER else nbytes
        return CommConfig(kind, world, dtype, reason=(
            f"{full} B above the LL limit on a target with NVLS: the switch "
            f"{'reduces and multicasts' if kind is CommKind.ARMC else 'multicasts'} (each byte "
            "crosses the rank's link once; unmeasured, no NVLS machine here)"))
    if collective is Collective.ALL_REDUCE and algorithm is Algorithm.ONE_SHOT:
        lim = ll_limit(LL_MAX_BYTES, world)
        why = f"{nbytes} B {'<=' if cfg.kind.is_ll else '>'} the LL limit {lim} B at W = {world}"
    elif collective is Collective.ALL_TO_ALL:
        why = (f"{nbytes} B: direct puts of each chunk into its rank's slot (no LL all-to-all "
               "yet, so small messages pay a signal round trip)")
    elif collective is Collective.ALL_REDUCE:
        why = (f"{nbytes} B; the pull gather from {AR2_PULL_MIN_BYTES} B at W > 2, "
               f"2 CTA groups from {AR2_GROUPS_MIN_BYTES} B")
    else:
        full = nbytes * world if collective is Collective.ALL_GATHER else nbytes
        lim = ll_limit(LL_GATHER_MAX_BYTES, world)
        why = f"{full} B {'<=' if cfg.kind.is_ll else '>'} the LL limit {lim} B at W = {world}"
    return replace(cfg, reason=why)


def _choose(collective: Collective, algorithm: Algorithm, world: int, dtype: str,
            elems: int) -> CommConfig:
    nbytes = elems * ESIZE[dtype]
    if collective is Collective.ALL_REDUCE:
        if algorithm is Algorithm.ONE_SHOT:
            kind = CommKind.LL if nbytes <= ll_limit(LL_MAX_BYTES, world) else CommKind.AR1
            return CommConfig(kind, world, dtype)
        pull = world > 2 and (nbytes >= AR2_PULL_MIN_BYTES or world > AR2_PUSH_MAX_WORLD)
        # the two-shot holds more live registers (3 loops) and must stay within 64 for 2
        # CTAs per SM; the push gather's reduce also stores to W ranks: 2, or ptxas spills
        return CommConfig(CommKind.AR2, world, dtype, unroll=3 if pull else 2,
                          gather=Gather.PULL if pull else Gather.PUSH,
                          groups=2 if nbytes >= AR2_GROUPS_MIN_BYTES else 1)
    full = nbytes * world if collective is Collective.ALL_GATHER else nbytes
    small = full <= ll_limit(LL_GATHER_MAX_BYTES, world)
    if collective is Collective.ALL_GATHER:
        return CommConfig(CommKind.LLAG if small else CommKind.AG, world, dtype)
    if collective is Collective.REDUCE_SCATTER:
        return CommConfig(CommKind.LLRS if small else CommKind.RS, world, dtype)
    return CommConfig(CommKind.A2A, world, dtype)


# NVLS kinds by collective. Chosen above the LL limits only: LL's one-way flags beat the
# multimem kernels' two signal round trips for small messages (an estimate, as NCCL's NVLS
# threshold; no NVLS machine measured here). Never for a target without ``nvls``.
NVLS_KINDS = {Collective.ALL_REDUCE: CommKind.ARMC, Collective.ALL_GATHER: CommKind.AGMC}


def choose_pull_gather(world: int, dtype: str, elems: int) -> CommConfig:
    """The all-gather of ``elems``-element chunks that already lie in symmetric memory (a
    producer kernel left them there): every rank pulls the W chunks into a fresh output
    (no input copy, nothing persistent leaves; the hand fast path's ``agp`` after its
    GEMM + reduce-scatter, 2 CTAs per SM as its bandwidth kernels)."""
    nbytes = elems * ESIZE[dtype] * world
    return CommConfig(CommKind.AGP, world, dtype,
                      reason=f"{nbytes} B gathered from chunks in symmetric memory: pulled "
                             "into a fresh output")
