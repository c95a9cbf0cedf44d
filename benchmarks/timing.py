"""Timing shared by the benchmarks: implementations launched in alternation, each launch
between its own pair of CUDA events, so that clock and power drift hit all alike."""


def alternate(impls: dict, iters: int, chunk: int = 8, warmup: int | None = None,
              sleep_cycles: int = 8_000_000) -> dict:
    """Per-launch times (ms) of each implementation (name -> list of zero-argument
    launchers): iteration i runs every implementation once, in an order rotated by i; the
    host is queued ahead of the GPU (a sleep kernel) before each chunk of iterations.
    ``warmup``: how many launchers of each implementation run once first (None: all)."""
    import torch

    names = list(impls)
    for n in names:
        for f in impls[n][:warmup]:
            f()
    torch.cuda.synchronize()
    out = {n: [] for n in names}
    for c0 in range(0, iters, chunk):
        evs = []
        torch.cuda._sleep(sleep_cycles)
        for i in range(c0, min(iters, c0 + chunk)):
            for j in range(len(names)):
                n = names[(i + j) % len(names)]
                fns = impls[n]
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                fns[i % len(fns)]()
                e.record()
                evs.append((n, s, e))
        torch.cuda.synchronize()
        for n, s, e in evs:
            out[n].append(s.elapsed_time(e))
    return out
