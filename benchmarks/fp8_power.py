"""Why the fp8 GEMM's ratio to cuBLASLt moves between runs: what cuBLASLt runs (kernel
names, grids, blocks, shared memory, registers, from torch.profiler) and each launcher's
steady-state time with the SM clock, the board power and the active clock-throttle reasons
sampled while it runs back to back (nvidia-smi every 50 ms), beside its burst time
(timing.rotated: each launch after an idle sleep), in one run on one H200.

    python benchmarks/fp8_power.py --out DIR [--seconds 1.5]   # on the GPU machine

A launcher in isolation for ``--seconds`` after a 0.3 s warm-up: calls timed with CUDA
events around the whole burst (us per call), the samples of the burst's second half
averaged. Launchers: torch._scaled_mm fast accum row-wise and tensor-wise, pkc's
schedule-matmul default and the other tiles of benchmarks/fp8_rowwise.py. A table last;
JSON under DIR.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from sweep_common import write_json  # noqa: E402  (the path above)

SHAPES = [("16384x8192x4096", 16384, 8192, 4096), ("8192^3", 8192, 8192, 8192),
          ("4096x28672x8192", 4096, 28672, 8192), ("8192x1280x8192", 8192, 1280, 8192)]
VARIANTS = [("pkc default", ""), ("pkc coop 128x256", "128x256_s4_tma"),
            ("pkc coop 128x256 cl2", "128x256_s4_cl2"), ("pkc pp 128x128", "128x128_pp_s6"),
            ("pkc pp 128x128 cl2", "128x128_pp_cl2")]


def kernel_names(fn) -> list[dict]:
    """The CUDA kernels one call of ``fn`` launches (name, grid, block, smem, registers)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    out = []
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            out.append({"name": ev.name[:160], "us": ev.device_time})
    try:        # grid / block / smem / registers are in the trace's kernel args
        import json
        import tempfile
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
            path = f.name
        prof.export_chrome_trace(path)
        with open(path) as f:
            tr = json.load(f)
        os.unlink(path)
        ks = [e for e in tr.get("traceEvents", []) if e.get("cat") == "kernel"]
        for rec, e in zip(out, ks):
            a = e.get("args", {})
            rec.update({k: a.get(k) for k in ("grid", "block", "shared memory",
                                               "registers per thread", "est. achieved occupancy %")})
    except Exception as exc:    # the names alone still tell the kernel
        out.append({"trace_error": repr(exc)[:200]})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, default=1.5)
    ap.add_argument("--rounds", type=int, default=20, help="rotated (burst) rounds per shape")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    import torch
    from fp8_gemm import torch_fp8_launchers
    from fp8_rowwise import compile_variant
    from timing import rotated, sustained

    from pkc.runtime.scheduled import ScheduledKernel

    rows = []
    for name, M, N, K in SHAPES:
        (a, w, sa, sb), ref, launchers, _ = torch_fp8_launchers(M, N, K)
        for label, fn in launchers:
            rows.append({"case": name, "launcher": label, "kernels": kernel_names(fn)})
        for label, variant in VARIANTS:
            try:
                ck, _ = compile_variant(M, N, K, True, variant, True)
            except Exception as exc:        # a tile this shape cannot take
                rows.append({"case": name, "launcher": label, "error": repr(exc)[:200]})
                continue
            kern = ScheduledKernel(ck.ptx, ck.meta)
            c = torch.full_like(ref, float("nan"))
            kern([a, w, sa, sb, c])
            torch.cuda.synchronize()
            ok = bool((c.float() - ref.float()).abs().max() <= 2 ** -6 * ref.float().abs().max())
            launchers.append((label, lambda k=kern, c=c: k([a, w, sa, sb, c])))
            rows.append({"case": name, "launcher": label, "correct": ok,
                         "registers": kern.kernel.num_regs})
        # burst: every launcher once per round behind an idle sleep, order rotated
        burst = rotated([fn for _, fn in launchers], args.rounds)
        base = burst[0]                     # torch row-wise
        for (label, fn), times in zip(launchers, burst):
            r = sustained(fn, args.seconds)
            r.update(case=name, launcher=label, tflops=2 * M * N * K / r["us"] / 1e6,
                     burst_us=statistics.median(times) * 1e6,
                     burst_speed=statistics.median(b / x for b, x in zip(base, times)))
            rows.append(r)
            print(r, flush=True)
        time.sleep(1.0)
    write_json(os.path.join(args.out, "fp8_power.json"), rows)
    print("\nkernels:")
    for r in rows:
        if "kernels" in r:
            for kk in r["kernels"]:
                print(f"  {r['case']:16s} {r['launcher']:13s} {kk}")
        if "error" in r or r.get("correct") is False:
            print("  !", r)
    print(f"\n{'case':16s} {'launcher':22s} {'us':>8s} {'TFLOP/s':>8s} {'MHz':>6s} {'W':>6s} "
          f"{'sust spd':>8s} {'burst us':>8s} {'burst spd':>9s} throttle   (speed: torch row / x)")
    sust = {}
    for r in rows:
        if "us" in r:
            base = sust.setdefault(r["case"], r["us"])      # torch row-wise comes first
            print(f"{r['case']:16s} {r['launcher']:22s} {r['us']:8.1f} {r['tflops']:8.0f} "
                  f"{r['sm_mhz']:6.0f} {r['watts']:6.0f} {base / r['us']:8.3f} "
                  f"{r['burst_us']:8.1f} {r['burst_speed']:9.3f} {','.join(r['throttle'])}")


if __name__ == "__main__":
    main()
