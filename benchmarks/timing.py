"""Timing shared by the benchmarks: implementations launched in alternation, each launch
between its own pair of CUDA events, so that clock and power drift hit all alike."""


# what the last alternate() call saw: chunks whose launches the host had not all queued
# before the GPU reached them (their times could include host time; left out), the sleep
# it ended with
last_stats: dict = {}


def alternate(impls: dict, iters: int, chunk: int = 8, warmup: int | None = None,
              sleep_cycles: int = 8_000_000) -> dict:
    """Per-launch times (ms) of each implementation (name -> list of zero-argument
    launchers): iteration i runs every implementation once, in an order rotated by i; the
    host is queued ahead of the GPU (a sleep kernel) before each chunk of iterations.
    ``warmup``: how many launchers of each implementation run once first (None: all).

    A chunk counts only if the sleep was still running when the host had queued all its
    launches (else the GPU may have waited for the host inside an event pair, and a slow
    host path would be timed as GPU time): such a chunk's times are left out and the sleep
    doubles for the next (``last_stats`` says how often; the call sequence, and so every
    rank's collectives, is the same either way)."""
    import torch

    names = list(impls)
    for n in names:
        for f in impls[n][:warmup]:
            f()
    torch.cuda.synchronize()
    out = {n: [] for n in names}
    tainted = 0
    for c0 in range(0, iters, chunk):
        evs = []
        torch.cuda._sleep(sleep_cycles)
        asleep = torch.cuda.Event()
        asleep.record()
        for i in range(c0, min(iters, c0 + chunk)):
            for j in range(len(names)):
                n = names[(i + j) % len(names)]
                fns = impls[n]
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                fns[i % len(fns)]()
                e.record()
                evs.append((n, s, e))
        ahead = not asleep.query()
        torch.cuda.synchronize()
        if not ahead:
            tainted += 1
            sleep_cycles *= 2
            if tainted < -(-iters // chunk):      # keep the last chunk if all were late
                continue
        for n, s, e in evs:
            out[n].append(s.elapsed_time(e))
    last_stats.clear()
    last_stats.update(late_chunks=tainted, chunks=-(-iters // chunk), sleep_cycles=sleep_cycles)
    return out


def rotated(fns: list, rounds: int, sleep_cycles: int = 2_000_000) -> list[list[float]]:
    """Seconds per launch of each zero-argument launcher in ``fns``: ``rounds`` rounds,
    each queued behind a ``torch.cuda._sleep`` (so that launch overhead is not timed), every
    launcher once per round between its own CUDA events, the order rotated each round so
    that none always runs first. The caller warms up."""
    import torch

    times = [[] for _ in fns]
    n = len(fns)
    for r in range(rounds):
        torch.cuda._sleep(sleep_cycles)
        evs = []
        for i in [(r + j) % n for j in range(n)]:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fns[i]()
            e.record()
            evs.append((i, s, e))
        torch.cuda.synchronize()
        for i, s, e in evs:
            times[i].append(s.elapsed_time(e) * 1e-3)
    return times


def paired(times: list[list[float]], names: list[str], base: int = 0) -> dict:
    """Medians (us) of each launcher and the median of the per-round ratios other / base
    (``<name>_over_<base name>``; > 1: the base is faster)."""
    import statistics

    out = {f"us_{n}": statistics.median(t) * 1e6 for n, t in zip(names, times)}
    for i, n in enumerate(names):
        if i != base:
            out[f"{n}_over_{names[base]}"] = statistics.median(
                o / b for b, o in zip(times[base], times[i]))
    return out


_SMI_QUERY = "clocks.sm,power.draw,clocks_throttle_reasons.active"


def sustained(fn, seconds: float, warmup_s: float = 0.3) -> dict:
    """``fn`` back to back for ``seconds`` (after ``warmup_s`` of the same): us per call over
    the whole burst (CUDA events around it) and the GPU's state meanwhile (nvidia-smi every
    50 ms; the burst's second half averaged: SM MHz, board watts, the active clock-throttle
    reasons). :func:`rotated` times each launch after an idle sleep, when the clock is
    high; a GEMM that runs for long at the board's power limit runs at the clock that
    power allows, which favours the kernel that spends less energy per FLOP (fewer bytes
    moved): both regimes are real, and the two can order kernels differently."""
    import subprocess
    import time

    import torch

    t_end = time.time() + warmup_s
    while time.time() < t_end:
        fn()
    torch.cuda.synchronize()
    try:
        smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={_SMI_QUERY}",
                                "--format=csv,noheader,nounits", "-lms", "50"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    except OSError:
        smi = None
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    calls = 0
    start.record()
    t_end = time.time() + seconds
    while time.time() < t_end:
        for _ in range(10):
            fn()
        calls += 10
        torch.cuda.synchronize()
    stop.record()
    torch.cuda.synchronize()
    samples = []
    if smi is not None:
        smi.terminate()
        for line in smi.communicate(timeout=5)[0].strip().splitlines():
            p = [x.strip() for x in line.split(",")]
            try:
                samples.append((float(p[0]), float(p[1]), p[2]))
            except (ValueError, IndexError):
                pass
    half = samples[len(samples) // 2:] or samples
    n = max(1, len(half))
    return {"us": start.elapsed_time(stop) * 1e3 / calls, "calls": calls,
            "sm_mhz": sum(s[0] for s in half) / n, "watts": sum(s[1] for s in half) / n,
            "throttle": sorted({s[2] for s in half})}
