"""Analytic cost model: predicted times (seconds) of GEMMs, collectives and fused kernels.

Passes consult it (DESIGN.md, "Cost model and targets"): overlap fuses only where the
predicted fused kernel beats the non-overlapped sequence, sm-partition takes the number of
communication SMs, collective lowering takes one-shot / two-shot, direct / ring.

Conventions: times in seconds, sizes in bytes, `W` is the world size (ranks in the NVLink
domain), `dtype` is a byte count or a name ("bf16", "fp16", "fp32"). Every formula is a
roofline-style bound with the few effects that decide between schedules (wave quantization,
per-SM link drive rate, signal latencies, pipeline fill/drain); the figures come from
`pkc.target.targets` and are overridable there.

The primitives (a GEMM's tiling and time, link, copy, signal, launch) live in
:mod:`pkc.target.cost_basics`, the standalone collectives in
:mod:`pkc.target.cost_collectives`; this module, which re-exports both, predicts the fused
patterns (a timeline of the kernel's tasks) and plans fusions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping, Sequence

from pkc.target.targets import Target

# the basics and the collectives' model are re-exported: pkc.target.cost is the one name
# passes and tests import the model from
from pkc.target.cost_basics import (  # noqa: F401
    DTYPE_BYTES, FUSE_MIN_GAIN, MAX_STEPS, PATTERNS, TILE_EFFICIENCY, TILE_SHAPES, OverlapStyle, Pattern,
    Tiling, _check_sms, _check_world, _target, barrier_time, copy_time, dtype_bytes, fan_out_time,
    gemm_tiling, gemm_time, launch_time, link_rate, link_time, signal_time)
from pkc.target.cost_collectives import (  # noqa: F401
    Choice, all_gather_time, all_reduce_time, all_to_all_time, choose_all_gather, choose_all_reduce,
    choose_all_to_all, choose_reduce_scatter, reduce_scatter_time)


# --------------------------------------------------------------------------------------
# fused patterns: shapes


@dataclass(frozen=True)
class Shapes:
    """Per-rank GEMM shape of a pattern.

    mm_reduce_scatter / mm_all_reduce: the local GEMM M x N x K (K is the local shard of
      the contraction); its M x N partial result is reduce-scattered / all-reduced.
    all_gather_mm: M is the gathered row count (each rank holds M/W x K); `N` lists the
      output widths of the consumers that share the gathered operand (e.g. Q, K, V).
    all_gather_k_mm: M x N x K with K the gathered contraction (each rank holds M x K/W).
    all_to_all_mm_all_to_all: M tokens land on each rank (balanced), K = hidden in,
      N = features out of the grouped GEMM, `groups` = experts per rank.
    `blocks` (all_gather_mm): each rank's shard is that many separate blocks of M's rows
      (a gather along a middle dim, DTensor Shard(1) of [B, S/W, H]): the fused kernel
      tiles each block on its own (:func:`block_tile_rows`), the unfused sequence does not.
    """
    M: int
    N: tuple
    K: int
    groups: int = 1
    blocks: int = 1

    @property
    def n_total(self) -> int:
        return sum(self.N)


def _pattern(pattern: Pattern | str) -> Pattern:
    if pattern not in PATTERNS:
        raise ValueError(f"unknown pattern {pattern!r}; known: {', '.join(PATTERNS)}")
    return Pattern(pattern)


def as_shapes(pattern: Pattern | str, shapes) -> Shapes:
    """Normalize (M, N, K[, groups]), a dict, or a Shapes; N may be a tuple of consumers."""
    pattern = _pattern(pattern)
    if isinstance(shapes, Shapes):
        sh = shapes
    elif isinstance(shapes, Mapping):
        sh = Shapes(shapes["M"], shapes["N"], shapes["K"], shapes.get("groups", 1),
                    shapes.get("blocks", 1))
    else:
        sh = Shapes(*shapes)
    n = tuple(sh.N) if isinstance(sh.N, (tuple, list)) else (sh.N,)
    sh = Shapes(int(sh.M), tuple(int(x) for x in n), int(sh.K), int(sh.groups), int(sh.blocks))
    if min(sh.M, sh.K, sh.groups, sh.blocks, *sh.N) < 1:
        raise ValueError(f"{pattern}: shapes must be positive, got {sh}")
    if len(sh.N) > 1 and pattern is not Pattern.ALL_GATHER_MM:
        raise ValueError(f"{pattern}: several consumers (N={sh.N}) only for all_gather_mm")
    return sh


def _gemms(t: Target, sh: Shapes, dt: int, sms=None) -> float:
    """Time of the pattern's GEMM(s): one per consumer width in N."""
    return sum(gemm_time(t, sh.M, n, sh.K, dt, sms, sh.groups) for n in sh.N)


def comm_bytes(pattern: Pattern | str, shapes, W: int, dtype=2) -> float:
    """Bytes each rank moves over its link (one direction) in the fused kernel's ideal
    lowering: (W-1)/W of the tensor for RS / AG / A2A, twice that for AR and for the two
    all-to-alls."""
    pattern, sh, dt = _pattern(pattern), as_shapes(pattern, shapes), dtype_bytes(dtype)
    f = (W - 1) / W
    return {Pattern.MM_REDUCE_SCATTER: f * sh.M * sh.N[0] * dt,
            Pattern.MM_ALL_REDUCE: 2 * f * sh.M * sh.N[0] * dt,
            Pattern.ALL_GATHER_MM: f * sh.M * sh.K * dt,
            Pattern.ALL_GATHER_K_MM: f * sh.M * sh.K * dt,
            Pattern.MOE: f * sh.M * (sh.K + sh.N[0]) * dt}[pattern]


def unfused_kernels(pattern: Pattern | str, shapes) -> int:
    """Kernels the unfused sequence launches: the GEMM(s) and the collective(s)."""
    pattern, sh = _pattern(pattern), as_shapes(pattern, shapes)
    return {Pattern.ALL_GATHER_MM: 1 + len(sh.N), Pattern.MOE: 3}.get(pattern, 2)


def predict_unfused(target, pattern: Pattern | str, shapes, W: int, dtype=2) -> float:
    """Non-overlapped sequence: GEMM kernel(s) on all SMs + best standalone collective(s),
    each with its launch."""
    t, sh, dt = _target(target), as_shapes(pattern, shapes), dtype_bytes(dtype)
    pattern = _pattern(pattern)
    _check_world(t, W)
    gemms = _gemms(t, sh, dt) + launch_time(t, len(sh.N))
    M, N, K = sh.M, sh.N[0], sh.K
    if pattern is Pattern.MM_REDUCE_SCATTER:
        return gemms + choose_reduce_scatter(t, M * N * dt, W).time
    if pattern is Pattern.MM_ALL_REDUCE:
        return gemms + choose_all_reduce(t, M * N * dt, W).time
    if pattern in (Pattern.ALL_GATHER_MM, Pattern.ALL_GATHER_K_MM):
        return choose_all_gather(t, M * K * dt, W).time + gemms
    return choose_all_to_all(t, M * K * dt, W).time + gemms + choose_all_to_all(t, M * N * dt, W).time


# --------------------------------------------------------------------------------------
# fused patterns: pipeline schedule


@dataclass
class _Task:
    """One step of one worker: runs after the worker's previous task and after `deps`
    (plus `lag`, the one-way flag latency when the dependency is on another GPU)."""
    name: str
    worker: str            # "compute" or "comm"
    op: str                # load / mma / put / signal
    dur: float
    deps: tuple = ()
    lag: float = 0.0
    step: int = 0


def _simulate(tasks: Sequence[_Task]) -> list:
    """List-schedule tasks in order, each worker in FIFO order: start = max(worker free,
    max(dep end) + lag). Returns (start, end, waited_from) per task."""
    free, out = {}, []
    for task in tasks:
        ready = max((out[d][1] for d in task.deps), default=0.0) + (task.lag if task.deps else 0.0)
        avail = free.get(task.worker, 0.0)
        start = max(avail, ready)
        out.append((start, start + task.dur, avail))
        free[task.worker] = start + task.dur
    return out


def _resources(t: Target, overlap: OverlapStyle, comm_sms: int, mechanism: str):
    """(compute SMs, link SMs, MMA slowdown) of an overlap style.

    inter: comm_sms SMs only communicate; the GEMM runs on the rest at full speed.
    intra: every SM computes and a producer warp in every SM communicates, so the link is
      driven by all SMs and the MMA runs slower by the target's intra-SM factor.
    """
    if overlap is OverlapStyle.INTER:
        if not 1 <= comm_sms < t.num_sms:
            raise ValueError(f"inter-SM overlap needs 1 <= comm_sms < {t.num_sms}, got {comm_sms}")
        return t.num_sms - comm_sms, comm_sms, 1.0
    if overlap is OverlapStyle.INTRA:
        slow = t.intra_sm_slowdown_ldst if mechanism == "ldst" else t.intra_sm_slowdown_tma
        return t.num_sms, t.num_sms, slow
    raise ValueError(f"unknown overlap {overlap!r}; known: 'intra', 'inter'")


def _steps(units: int, per: int = 1) -> int:
    """Pipeline steps: one per unit (wave / row block), grouped so that at most MAX_STEPS."""
    return max(1, min(units, MAX_STEPS // per))


# the m-tile of the scheduled all-gather + GEMM (pkc/passes/ag_blocks_schedule.py pads
# each block of a shard to whole tiles of it)
BLOCK_TILE = 128


def block_tile_rows(sh: Shapes, W: int) -> Shapes:
    """``sh`` with M the rows the fused kernel's tiles cover when each rank's shard is
    ``sh.blocks`` separate blocks of rows: every block rounded up to whole BLOCK_TILE-row
    tiles (a tile never spans two blocks); ``sh`` itself for one block."""
    if sh.blocks <= 1 or W <= 1:
        return sh
    per = sh.M // (W * sh.blocks)
    return Shapes(W * sh.blocks * -(-per // BLOCK_TILE) * BLOCK_TILE, sh.N, sh.K, sh.groups,
                  sh.blocks)


def _build(t: Target, pattern: Pattern, sh: Shapes, W: int, dt: int, overlap: OverlapStyle,
           comm_sms: int, mechanism: str) -> list:
    """Tasks of the fused kernel's pipeline (see predict_fused)."""
    # intra-SM all-reduce: the compute SMs sum peers' partial tiles in registers (ld/st)
    mech = "ldst" if (pattern is Pattern.MM_ALL_REDUCE and overlap is OverlapStyle.INTRA) \
        else mechanism
    csms, lsms, slow = _resources(t, overlap, comm_sms, mech)
    gsh = block_tile_rows(sh, W)    # the rows the fused GEMM's tiles cover
    compute = _gemms(t, gsh, dt, csms) * slow
    til = gemm_tiling(t, gsh.M, sh.n_total, sh.K, csms, sh.groups)
    rate = link_rate(t, lsms, mech)
    one_way, sig = t.one_way_latency, t.signal_issue
    # a step whose data went to every peer flags every peer (fan_out_time: per-peer issue,
    # spread over the communicating SMs' CTAs); a reduce-scatter / all-gather step's tiles
    # have one owner / one source
    sig_all = fan_out_time(t, W - 1, lsms)
    tasks: list = []

    def add(name, worker, op, dur, deps=(), lag=0.0, step=0):
        tasks.append(_Task(name, worker, op, dur, tuple(deps), lag, step))
        return len(tasks) - 1

    if pattern in (Pattern.MM_REDUCE_SCATTER, Pattern.MM_ALL_REDUCE):
        S = _steps(til.waves)
        c, m = compute / S, (W - 1) / W * sh.M * sh.N[0] * dt / S / rate
        last_sig = {}
        for i in range(S):
            mma = add(f"mma {i}", "compute", "mma", c, step=i)
            put = add(f"put {i}", "comm", "put", m, [mma], step=i)
            last_sig[i] = add(f"signal {i}", "comm", "signal", sig, [put], step=i)
            if pattern is Pattern.MM_ALL_REDUCE and i >= 1:   # broadcast lags one step behind
                _bcast(add, i - 1, m, sig_all, last_sig[i - 1], one_way)
        if pattern is Pattern.MM_ALL_REDUCE:
            _bcast(add, S - 1, m, sig_all, last_sig[S - 1], one_way)
    elif pattern is Pattern.ALL_GATHER_MM:
        per = _steps(math.ceil(sh.M / W / til.tm), W)       # steps per rank chunk
        reuse = 1 if overlap is OverlapStyle.INTER else math.ceil(sh.n_total / til.tn)
        c = compute / (W * per)
        m = sh.M / W * sh.K * dt * reuse / per / rate
        ready = {}
        for j in range(1, W):                                 # remote chunks, in ring order
            for s in range(per):
                ld = add(f"load rank+{j} {s}", "comm", "load", m, step=j * per + s)
                ready[j * per + s] = add(f"signal rank+{j} {s}", "comm", "signal", sig, [ld],
                                         step=j * per + s)
        for i in range(W * per):                              # local chunk first
            deps = [ready[i]] if i in ready else []
            add(f"mma {i}", "compute", "mma", c, deps, step=i)
    elif pattern is Pattern.ALL_GATHER_K_MM:
        _gather_k(add, sh, W, dt, til, compute, rate, sig, overlap)
    else:  # all_to_all_mm_all_to_all
        S = _steps(math.ceil(sh.M / til.tm))
        c = compute / S
        f = (W - 1) / W
        md, mc = f * sh.M * sh.K * dt / S / rate, f * sh.M * sh.N[0] * dt / S / rate
        arrived = {}

        def dispatch(i):
            put = add(f"dispatch {i}", "comm", "put", md, step=i)
            arrived[i] = add(f"signal dispatch {i}", "comm", "signal", sig_all, [put], step=i)

        dispatch(0)
        for i in range(S):
            if i + 1 < S:
                dispatch(i + 1)
            mma = add(f"mma {i}", "compute", "mma", c, [arrived[i]], one_way, step=i)
            put = add(f"combine {i}", "comm", "put", mc, [mma], step=i)
            add(f"signal combine {i}", "comm", "signal", sig_all, [put], step=i)
    return tasks


def _gather_k(add, sh: Shapes, W: int, dt: int, til: Tiling, compute: float, rate: float,
              sig: float, overlap: OverlapStyle) -> None:
    """All-gather along K + GEMM: a step is a row block. Every output tile sums one product
    per rank's shard of its rows, the own shard's first (no wait), then the peers' ones,
    each after its row block arrived. The put side serves row block by row block (every
    peer gets row block 0 of the shard, then row block 1, ...: pkc/passes/ag_k_schedule.py),
    so a row block is complete after its share of the gather, as a row block of the
    all-gather along rows is."""
    per = _steps(math.ceil(sh.M / til.tm), W)            # row-block steps
    reuse = 1 if overlap is OverlapStyle.INTER else math.ceil(sh.n_total / til.tn)
    c = compute / per
    m = sh.M * sh.K / W * dt * reuse / per / rate         # one shard's row block
    ready = {}
    for s in range(per):
        for j in range(1, W):
            ld = add(f"load {s} of rank+{j}", "comm", "load", m, step=s)
            ready[s] = add(f"signal {s} of rank+{j}", "comm", "signal", sig, [ld], step=s)
    for s in range(per):
        add(f"mma own shard {s}", "compute", "mma", c / W, step=s)
        add(f"mma peers' shards {s}", "compute", "mma", c * (W - 1) / W, [ready[s]], step=s)


def _bcast(add, i, m, sig, after, one_way):
    """All-reduce second phase for step i: once all ranks' partials of the tile set have
    arrived at its owner (one-way flag latency after the owner's own put), the owner
    pushes the reduced tiles to the W-1 peers and flags each (``sig``: the fan-out)."""
    put = add(f"broadcast {i}", "comm", "put", m, [after], one_way, step=i)
    add(f"signal broadcast {i}", "comm", "signal", sig, [put], step=i)


def predict_fused(target, pattern: Pattern | str, shapes, W: int, dtype=2,
                  overlap: OverlapStyle | str = OverlapStyle.INTER,
                  comm_sms: int | None = None, mechanism: str = "tma") -> float:
    """Predicted time of one fused kernel: launch + entry barrier + pipeline + exit barrier.

    The pipeline has two workers, compute (the GEMM on num_sms - comm_sms SMs, or on all SMs
    slowed by the intra-SM factor) and comm (puts / loads over the link at
    link_rate(comm SMs)), each running its steps in order. A step is one wave of output
    tiles (mm+RS, mm+AR), one row block of a rank's chunk (AG+mm, local chunk first), or
    one row block of tokens (all-to-all: dispatch, grouped GEMM, combine). Every transfer
    is followed by a signal (release + flag, `signal_issue` on the comm worker; a step
    whose data went to every peer - the all-reduce broadcast, the all-to-alls - flags each,
    `fan_out_time`); a step that waits for another GPU's data also waits one one-way flag
    latency. The first compute step (RS/AR) or first transfer (AG, A2A) and the last
    transfer are exposed: fill and drain. Entry barrier: peers' destination buffers are
    free; exit barrier: all data landed (each a `barrier_time` of W ranks: it grows with W).
    """
    t, sh, dt = _target(target), as_shapes(pattern, shapes), dtype_bytes(dtype)
    _check_world(t, W)
    pattern = _pattern(pattern)
    overlap = OverlapStyle.parse(overlap, "predict_fused's overlap")
    if W == 1:
        return launch_time(t) + _gemms(t, sh, dt)
    if _rs_then_all_gather(t, pattern, W):
        rs = predict_fused(t, Pattern.MM_REDUCE_SCATTER, sh, W, dt, overlap, comm_sms, mechanism)
        return rs + launch_time(t) + choose_all_gather(t, sh.M * sh.N[0] * dt, W).time
    k = _default_comm_sms(t) if comm_sms is None else comm_sms
    times = _simulate(_build(t, pattern, sh, W, dt, overlap, k, mechanism))
    makespan = max(end for _, end, _ in times)
    return launch_time(t) + barrier_time(t, W, 2) + makespan


def _default_comm_sms(t: Target) -> int:
    return max(t.sm_partition_min, t.sm_partition_align)


def comm_sms_candidates(target) -> list:
    """Communication SM counts for inter-SM overlap: multiples of the green-context
    alignment from the minimum partition up to half the SMs.

    Inside one persistent kernel any count would do (roles by block index), but pkc's
    virtual world and split-kernel fallback put each worker in a green context, and on
    H200 those come in multiples of 8 SMs with a minimum of 8 (measured). The coarse grid
    costs little: the link saturates at ~8 TMA SMs, and past that the curve is flat.
    """
    t = _target(target)
    step, lo = t.sm_partition_align, max(t.sm_partition_min, t.sm_partition_align)
    return list(range(lo, t.num_sms // 2 + 1, step))


def fused_comm_sms_candidates(target) -> list:
    """Communication SM counts a fusion decision considers: the green-context grid of
    :func:`comm_sms_candidates` plus half its minimum. One persistent fused kernel gives
    roles by block index, so it can spare fewer SMs than a partition (the sm_90a
    all-gather + GEMM puts with 4 CTAs where the GEMM dominates: measured 1.07x cuBLAS +
    NCCL on Llama-70B up+gate at W = 2, where 8 comm SMs gave 1.03x); the general path's
    sm-partition rounds its own counts up to the grid."""
    t = _target(target)
    grid = comm_sms_candidates(t)
    return sorted({max(1, min(grid) // 2)} | set(grid))


# --------------------------------------------------------------------------------------
# planning


@dataclass(frozen=True)
class FusionPlan:
    """The decision for one pattern instance, with what it was decided from."""
    pattern: Pattern
    fuse: bool
    overlap: OverlapStyle           # overlap style of the best fused variant (INTRA / INTER)
    comm_sms: int              # dedicated communication SMs (0 for intra-SM)
    fused_time: float
    unfused_time: float
    target: Target
    shapes: Shapes
    W: int
    dtype_bytes: int
    mechanism: str = "tma"
    alternatives: Mapping[str, float] = field(default_factory=dict)   # "intra", "inter:<SMs>"

    def __post_init__(self):
        style = OverlapStyle.parse(self.overlap, "the fusion plan's overlap")
        object.__setattr__(self, "overlap", style)
        object.__setattr__(self, "pattern", _pattern(self.pattern))

    def remark(self) -> str:
        """One line for `pkc-opt` / IR attributes explaining the decision."""
        name = PATTERNS[self.pattern]
        f, u = _ms(self.fused_time), _ms(self.unfused_time)
        if self.W == 1:
            return f"left unfused: {name} on 1 rank has no communication to overlap"
        how = ("intra-SM, communication warp in every SM" if self.overlap is OverlapStyle.INTRA
               else f"inter-SM, {self.comm_sms} comm SMs")
        if self.fuse:
            many = (f"; one kernel over {len(self.shapes.N)} weights, gathering once"
                    if len(self.shapes.N) > 1 else "")
            return (f"fused {name}: predicted {f} ms vs {u} ms unfused; {how}"
                    f"{self._runner_up()}{many}")
        if self.fused_time >= self.unfused_time:
            why = "too small for overlap to pay" if self.unfused_time < 1e-4 else "overlap does not pay"
            return f"left unfused: predicted fused {f} ms >= unfused {u} ms ({why}); best fused: {how}"
        saved = _ms(launch_time(self.target, unfused_kernels(self.pattern, self.shapes) - 1))
        return (f"left unfused: predicted fused {f} ms vs unfused {u} ms, but {saved} ms of that "
                f"is launches; overlap gains under {FUSE_MIN_GAIN:.0%} (too small for overlap to "
                f"pay); best fused: {how}")


    def _runner_up(self) -> str:
        """Why this overlap style and split: the best variant of the other style, and the
        next comm-SM count of the same one."""
        alts = self.alternatives
        inter = {k: v for k, v in alts.items() if k.startswith("inter:")}
        parts = []
        if self.overlap is OverlapStyle.INTER and OverlapStyle.INTRA in alts:
            parts.append(f"intra-SM {_ms(alts[OverlapStyle.INTRA])} ms")
        if inter:
            best = min(inter, key=inter.get)
            if self.overlap is OverlapStyle.INTRA:
                parts.append(f"inter-SM best {_ms(inter[best])} ms with {best.split(':')[1]} comm SMs")
            else:
                more = [k for k in inter if int(k.split(":")[1]) > self.comm_sms]
                if more:
                    nxt = min(more, key=lambda k: int(k.split(":")[1]))
                    parts.append(f"{nxt.split(':')[1]} comm SMs {_ms(inter[nxt])} ms")
        return f" (vs {', '.join(parts)})" if parts else ""


def _ms(s: float) -> str:
    return f"{s * 1e3:.3g}"


def plan_fusion(target, pattern: Pattern | str, shapes, W: int, dtype=2,
                mechanism: str = "tma") -> FusionPlan:
    """Best fused variant (intra-SM, or inter-SM with each candidate comm-SM count) versus
    the unfused sequence; fuse when the fused prediction is at least FUSE_MIN_GAIN faster
    than the unfused one without the launches fusion saves (see FUSE_MIN_GAIN)."""
    t, sh, dt = _target(target), as_shapes(pattern, shapes), dtype_bytes(dtype)
    _check_world(t, W)
    pattern = _pattern(pattern)
    unfused = predict_unfused(t, pattern, sh, W, dt)
    intra, inter = OverlapStyle.INTRA, OverlapStyle.INTER
    variants = {(intra, 0): predict_fused(t, pattern, sh, W, dt, intra, 0, mechanism)}
    for k in fused_comm_sms_candidates(t):
        variants[(inter, k)] = predict_fused(t, pattern, sh, W, dt, inter, k, mechanism)
    (overlap, k), fused = min(variants.items(), key=lambda kv: (kv[1], kv[0][1]))
    # compare the work without any launch (one fused, several unfused): launch costs
    # depend on how the program runs (eager, CUDA graph), the decision must not
    fuse = W > 1 and fused - launch_time(t, 1) < \
        (unfused - launch_time(t, unfused_kernels(pattern, sh))) * (1 - FUSE_MIN_GAIN)
    alts = MappingProxyType({f"{o}:{n}" if o is OverlapStyle.INTER else str(o): v
                             for (o, n), v in variants.items()})
    return FusionPlan(pattern, fuse, overlap, k, fused, unfused, t, sh, W, dt, mechanism, alts)


# --------------------------------------------------------------------------------------
# timeline


@dataclass(frozen=True)
class Event:
    """One interval of a worker in the predicted schedule (seconds from kernel start)."""
    worker: str
    op: str                    # load / mma / put / wait / signal
    name: str
    start: float
    duration: float
    step: int = 0


def schedule_timeline(plan: FusionPlan, min_wait: float = 0.0) -> list:
    """Events of the fused kernel's predicted schedule for `plan` (its best fused variant,
    whether or not it was chosen), from kernel start (launch excluded): entry barrier, the
    pipeline steps of both workers, idle intervals spent waiting on flags or on the other
    worker (op "wait", only those longer than `min_wait`), exit barrier."""
    t = plan.target
    k = plan.comm_sms if plan.overlap is OverlapStyle.INTER else 0
    if plan.overlap is OverlapStyle.INTER:
        names = {"compute": f"compute SMs ({t.num_sms - k})", "comm": f"comm SMs ({k})"}
    else:
        names = {"compute": f"consumer warpgroups ({t.num_sms} SMs)",
                 "comm": f"producer warps ({t.num_sms} SMs)"}
    if plan.W == 1:
        return []
    pattern = plan.pattern
    rs_then_ag = _rs_then_all_gather(t, pattern, plan.W)
    if rs_then_ag:
        pattern = Pattern.MM_REDUCE_SCATTER
    tasks = _build(t, pattern, plan.shapes, plan.W, plan.dtype_bytes, plan.overlap,
                   k, plan.mechanism)
    times = _simulate(tasks)
    t0 = barrier_time(t, plan.W)
    ev = [Event(names[w], "wait", "entry barrier", 0.0, t0) for w in ("compute", "comm")]
    for task, (start, end, avail) in zip(tasks, times):
        if start - avail > min_wait and start > avail:
            ev.append(Event(names[task.worker], "wait", f"wait before {task.name}",
                            t0 + avail, start - avail, task.step))
        ev.append(Event(names[task.worker], task.op, task.name, t0 + start, task.dur, task.step))
    end = t0 + max(e for _, e, _ in times)
    ev += [Event(names[w], "signal", "exit barrier", end, t0) for w in ("compute", "comm")]
    if rs_then_ag:                  # the all-gather kernel after the launch gap
        sh = plan.shapes
        ag = choose_all_gather(t, sh.M * sh.N[0] * plan.dtype_bytes, plan.W).time
        start = end + t0 + launch_time(t)
        ev.append(Event(names["comm"], "put", "all-gather of the reduced chunks", start, ag))
    return ev


def _rs_then_all_gather(t: Target, pattern: Pattern, W: int) -> bool:
    """GEMM + all-reduce runs as fused GEMM + reduce-scatter, then an all-gather, on
    sm_90a with more than 2 ranks (the fast path: the broadcast kernel would send W-1
    copies of every tile)."""
    return pattern is Pattern.MM_ALL_REDUCE and W > 2 and t.sm_arch == "sm_90a"


def to_chrome_trace(events: Sequence[Event], process: str = "pkc fused kernel") -> dict:
    """Chrome trace-event JSON (Perfetto, chrome://tracing): one complete ("X") event per
    Event, times in microseconds, one thread per worker, with name metadata ("M")."""
    tids = {}
    for e in events:
        tids.setdefault(e.worker, len(tids) + 1)
    meta = [{"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": process}}]
    meta += [{"name": "thread_name", "ph": "M", "pid": 1, "tid": tid, "args": {"name": w}}
             for w, tid in tids.items()]
    spans = [{"name": e.name, "cat": e.op, "ph": "X", "ts": e.start * 1e6, "dur": e.duration * 1e6,
              "pid": 1, "tid": tids[e.worker], "args": {"step": e.step}} for e in events]
    return {"traceEvents": meta + spans, "displayTimeUnit": "ns"}
