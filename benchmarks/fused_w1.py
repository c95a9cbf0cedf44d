"""Fused GEMM+RS and AG+GEMM at W = 1 (all traffic local) against pkc's GEMM alone, in one
run on one Hopper GPU: what the communication machinery costs when there is nothing to
communicate.

    python benchmarks/fused_w1.py --out DIR [--iters 40]

Shapes: PK's local GEMMs (GEMM+RS N x N x N/8 and AG+GEMM N x N/8 x N for N = 4096,
8192, 16384) and 8192^3 (both kernels). Per shape one tile config (launch.choose_config's
pick, the same for the GEMM and the fused kernels); implementations launched in
alternation (A B C A B C ..., order rotated each iteration, each launch between its own
CUDA events, the host queued ahead of the GPU with torch.cuda._sleep), random inputs
(two input sets, alternated), median of ``iters`` launches; ratio = fused / GEMM median
time (also the median of the per-iteration paired ratios). cuBLAS (torch.mm) is timed
alongside for reference. The fused outputs are checked against the GEMM's (bit-identical
expected at W = 1). Prints a table, writes ``fused_w1.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from hopper_only import skip_pkc_init  # noqa: E402

skip_pkc_init()       # the Hopper modules without pkc/__init__ (frontend, xdsl, ...)
from timing import alternate  # noqa: E402

SHAPES = [  # (label, kernels, M, N, K); for rs M is the (single) chunk, for ag the shard
    ("pk gemm+rs N=4096", ("rs",), 4096, 4096, 512),
    ("pk gemm+rs N=8192", ("rs",), 8192, 8192, 1024),
    ("pk gemm+rs N=16384", ("rs",), 16384, 16384, 2048),
    ("pk ag+gemm N=4096", ("ag",), 4096, 512, 4096),
    ("pk ag+gemm N=8192", ("ag",), 8192, 1024, 8192),
    ("pk ag+gemm N=16384", ("ag",), 16384, 2048, 16384),
    ("square 8192^3", ("rs", "ag"), 8192, 8192, 8192),
]


def bench_shape(label, kinds, M, N, K, iters) -> dict:
    import torch

    from pkc.codegen.hopper.fused import FusedConfig, FusedWorld
    from pkc.codegen.hopper.launch import choose_config, get_gemm
    from pkc.runtime.peers import VirtualPeers

    cfg = choose_config(M, N, K)
    gm = get_gemm(cfg)
    g = torch.Generator(device="cuda").manual_seed(M + 3 * N + 7 * K)
    sets = []
    for _ in range(2):
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16, generator=g)
        b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16, generator=g)
        sets.append({"a": a, "b": b, "c": torch.empty(M, N, device="cuda", dtype=torch.bfloat16)})
    impls = {"pkc_gemm": [lambda s=s: gm(s["a"], s["b"], s["c"]) for s in sets],
             "cublas": [lambda s=s: torch.mm(s["a"], s["b"].t(), out=s["c"]) for s in sets]}
    worlds = {}
    for kind in kinds:
        if kind == "rs":
            # rs: the default kernel; "gmap": own tiles stored through the device-array
            # tensor map; "v1": that and the end-of-kernel wait on its own tiles too (the
            # first device run's kernel); f32 accumulator + conversion
            variants = {"rs_bf16acc": {}, "rs_gmap": {"own_map": "global"},
                        "rs_v1": {"own_map": "global", "wait_own": True},
                        "rs_f32acc": {"acc": "f32"}}
        else:
            variants = {"ag": {}}
        for name, kw in variants.items():
            f = FusedConfig(kind=kind, world=1, gemm=cfg, **kw)
            w = FusedWorld(f, M, N, K, peers=VirtualPeers(1, green=False))   # W = 1: torch's stream
            worlds[name] = w
            impls[name] = [lambda s=s, w=w: w.run([s["a"]], [s["b"]]) for s in sets]
    # correctness on set 0: every fused output against the GEMM's
    checks = {}
    gm(sets[0]["a"], sets[0]["b"], sets[0]["c"])
    ref = sets[0]["c"].clone()
    for name, w in worlds.items():
        for t in w.out:
            t.fill_(float("nan"))
        o = w.run([sets[0]["a"]], [sets[0]["b"]])[0]
        torch.cuda.synchronize()
        w.check()
        err = float((o.float().nan_to_num(0.0) - ref.float()).norm() / ref.float().norm())
        checks[name] = {"bit_identical": bool(torch.equal(o, ref)), "rel_err": err,
                        "nan": int(torch.isnan(o.float()).sum())}
    per = alternate(impls, iters)
    for w in worlds.values():
        w.check()
    base = per["pkc_gemm"]
    flop = 2.0 * M * N * K
    rows = {}
    for n, ts in per.items():
        ms = statistics.median(ts)
        rows[n] = {"ms": ms, "tflops": flop / (ms * 1e-3) / 1e12,
                   "ratio_vs_pkc_gemm": ms / statistics.median(base),
                   "paired_ratio": statistics.median(t / b for t, b in zip(ts, base)),
                   "spread_iqr": (statistics.quantiles(ts, n=4)[2] - statistics.quantiles(ts, n=4)[0]) / ms,
                   "launches": len(ts)}
    return {"shape": label, "M": M, "N": N, "K": K, "cfg": cfg.tag(), "impls": rows,
            "checks": checks}


def device_run(out: str, check_s: int, bench_s: int, transfer_s: int) -> int:
    """The whole device run in one command: environment, correctness (tests/gpu, under
    benchmarks/supervise.py), this benchmark, the transfer benchmark; each step in its
    own process with a time limit; logs and JSON under ``out``; a summary printed last."""
    import subprocess

    os.makedirs(out, exist_ok=True)
    py = sys.executable
    env = dict(os.environ, PYTHONUNBUFFERED="1")

    def step(cmd, log, limit):
        t0 = time.time()
        with open(os.path.join(out, log), "w") as fh:
            try:
                rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env,
                                    timeout=limit, cwd=str(ROOT)).returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
        print(f"[{log}: rc={rc}, {time.time() - t0:.0f} s]", flush=True)

    with open(os.path.join(out, "env.txt"), "w") as fh:
        try:
            subprocess.run(["nvidia-smi", "--query-gpu=name,clocks.sm,clocks.max.sm,power.draw,"
                            "power.limit,temperature.gpu", "--format=csv"], stdout=fh,
                           stderr=subprocess.STDOUT, timeout=20)
        except (OSError, subprocess.TimeoutExpired) as e:
            fh.write(f"nvidia-smi: {e}\n")
    jl = os.path.join(out, "fused_check.jsonl")
    if check_s:
        sys.path.insert(0, str(ROOT / "tests" / "gpu"))
        import test_hopper_fused as tf
        step([py, str(ROOT / "benchmarks" / "supervise.py"), str(len(tf.CASES)), str(check_s),
              jl, "--", py, "-u", str(ROOT / "tests" / "gpu" / "test_hopper_fused.py")],
             "check.log", check_s + 15)
    if bench_s:
        step([py, "-u", __file__, "--out", out], "fused_w1.log", bench_s)
    if transfer_s:
        step([py, "-u", str(ROOT / "benchmarks" / "transfer.py"), "--out", out],
             "transfer.log", transfer_s)
    # summary
    if os.path.exists(jl):
        recs = [json.loads(l) for l in open(jl) if l.strip()]
        ok = sum(bool(r.get("ok")) for r in recs)
        print(f"\ncorrectness: {ok}/{len(recs)} cases ok")
        groups: dict = {}
        for r in recs:
            k = (r.get("kind"), r.get("W"), r.get("dtype"), r.get("acc"))
            groups.setdefault(k, []).append(r)
        for k, rs in groups.items():
            bad = [r for r in rs if not r.get("ok")]
            worst = max((r.get("rel_err") or 0) for r in rs)
            bit = sum(bool(r.get("bit_identical_to_pkc_gemm")) for r in rs)
            print(f"  {str(k):34s} {len(rs) - len(bad)}/{len(rs)} ok, worst rel err {worst:.1e},"
                  f" bit-identical to pkc GEMM {bit}")
            for r in bad[:3]:
                print("    BAD:", json.dumps({x: r.get(x) for x in ("case", "error", "rel_err",
                                                                  "nan", "message")})[:400])
        for r in recs:
            if r.get("case", "").endswith("sabotage"):
                print("  error path:", r.get("ok"), (r.get("message") or r.get("error") or "")[:300])
    for log, n in (("fused_w1.log", 12), ("transfer.log", 44)):
        path = os.path.join(out, log)
        if os.path.exists(path):
            print(f"\n---- {log} (tail)")
            print("".join(open(path).readlines()[-n:]))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--device-run", action="store_true",
                    help="checks + this benchmark + transfer benchmark, each time-limited")
    ap.add_argument("--check-s", type=int, default=80)
    ap.add_argument("--bench-s", type=int, default=75)
    ap.add_argument("--transfer-s", type=int, default=60)
    args = ap.parse_args()
    if args.device_run:
        return device_run(args.out, args.check_s, args.bench_s, args.transfer_s)
    import torch

    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    res = {"device": torch.cuda.get_device_name(0), "iters": args.iters, "shapes": []}
    for label, kinds, M, N, K in SHAPES:
        try:
            r = bench_shape(label, kinds, M, N, K, args.iters)
        except Exception as e:            # one shape must not cost the others
            r = {"shape": label, "M": M, "N": N, "K": K, "error": f"{type(e).__name__}: {e}"[:500]}
            print("ERROR", label, r["error"], flush=True)
            if "illegal" in str(e) or "trap" in str(e).lower() or "launch failed" in str(e):
                res["shapes"].append(r)
                break                     # the context is gone
        res["shapes"].append(r)
        print(json.dumps(r)[:600], flush=True)
        with open(os.path.join(args.out, "fused_w1.json"), "w") as fh:
            json.dump(res, fh, indent=1)
    res["secs"] = round(time.time() - t0, 1)
    with open(os.path.join(args.out, "fused_w1.json"), "w") as fh:
        json.dump(res, fh, indent=1)
    print_table(res)
    return 0


def print_table(res: dict) -> None:
    print("\nfused at W=1 vs pkc GEMM alone (median of alternating launches; ratio = time / "
          "GEMM time, paired = median of per-iteration ratios; target <= 1.05)")
    cols = ["rs_bf16acc", "rs_gmap", "rs_v1", "rs_f32acc", "ag"]
    print(f"{'shape':22s} {'MxNxK':>18s} {'tile':>16s} {'GEMM ms':>8s} {'cuBLAS':>7s} "
          + " ".join(f"{c:>11s}" for c in cols) + "  checks")
    for r in res["shapes"]:
        if "error" in r:
            print(f"{r['shape']:22s} ERROR {r['error'][:100]}")
            continue
        im = r["impls"]

        def cell(n, w):
            if n not in im:
                return f"{'-':>{w}s}"
            return f"{im[n]['ratio_vs_pkc_gemm']:.3f}/{im[n]['paired_ratio']:.3f}".rjust(w)
        ok = all(c["nan"] == 0 and c["rel_err"] < 1e-2 for c in r["checks"].values())
        bit = all(c["bit_identical"] for c in r["checks"].values())
        print(f"{r['shape']:22s} {r['M']:>5d}x{r['N']:>5d}x{r['K']:>5d} {r['cfg'][:16]:>16s} "
              f"{im['pkc_gemm']['ms']:8.3f} {im['cublas']['ratio_vs_pkc_gemm']:7.3f} "
              + " ".join(cell(c, 11) for c in cols) + "  "
              f"{'ok' if ok else 'BAD'}{' bit-identical' if bit else ''}")


if __name__ == "__main__":
    sys.exit(main())
