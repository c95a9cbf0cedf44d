"""A codegen change to the scheduled GEMM, before against after, in one run on one GPU: the
kernels of two (or more) source trees side by side (parity before a change replaces what
was measured), each against torch: torch._scaled_mm (fast accumulation, row-wise scales)
for fp8, torch.matmul for bf16.

    # on this machine, once per tree, with that tree's copy of this script (it compiles
    # with the pkc beside it, e.g. a `git worktree` of the commit before the change):
    python OLD/benchmarks/gemm_ab.py prepare DIR --label old [--dtype bf16] [--shapes ...]
    python NEW/benchmarks/gemm_ab.py prepare DIR --label new [--variants ...]
    # on the GPU machine (any tree: the kernels are loaded from DIR, not compiled):
    python benchmarks/gemm_ab.py run DIR --out OUT [--rounds 30] [--ncu]

``prepare`` compiles schedule-matmul's kernel of ``_scaled_mm(x, w.t())`` (or the bf16
``x @ w.T``) for every shape and tile variant ("default": its own pick) and pickles the
PTX with its launch description.
``run`` loads every kernel of DIR, checks each output against torch's (2^-6 of the
output's largest value, no NaN left in the poisoned output), compares the labels' outputs
bitwise, then times every kernel of a shape with torch in rotated rounds
(benchmarks/timing.py) and prints per kernel the median time and the median over rounds
of torch / kernel (``speed``) and of the first label's same variant / this one (``vs
first``). ``--ncu``: the same kernels once each under Nsight Compute (clocks left alone),
with cycles and tensor-pipe activity per kernel: the per-clock comparison that a power-
capped clock cannot blur.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import pickle
import statistics
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sweep_common import gemm_shape  # noqa: E402  (the path above)

VARIANTS = {"fp8": ["", "128x256_s4_tma", "128x128_pp_s6", "128x128_pp_cl2"],
            "bf16": ["", "128x256_s4_cl2", "128x128_pp_s6"]}
NCU_METRICS = ["sm__cycles_elapsed.max", "sm__cycles_active.avg",
               "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
               "sm__inst_executed.sum", "gpu__time_duration.sum"]


def prepare(args) -> None:
    from fp8_rowwise import compile_bf16_variant, compile_variant

    os.makedirs(args.dir, exist_ok=True)
    variants = args.variants or ",".join(v or "default" for v in VARIANTS[args.dtype])
    for shape in args.shapes.split(","):
        M, N, K = gemm_shape(shape)
        for v in variants.split(","):
            v = "" if v == "default" else v
            if args.dtype == "bf16":
                ck, _ = compile_bf16_variant(M, N, K, v)
            else:
                ck, _ = compile_variant(M, N, K, True, v, True)
            key = f"{args.dtype}:{shape}"
            rec = {"label": args.label, "shape": key, "variant": v or "default",
                   "ptx": ck.ptx, "meta": ck.meta}
            name = f"{args.label}__{args.dtype}_{shape.replace('^', 'p')}__{v or 'default'}.pkl"
            with open(os.path.join(args.dir, name), "wb") as f:
                pickle.dump(rec, f)
            print("prepared", name, flush=True)


def _load(dirname: str) -> list[dict]:
    recs = []
    for p in sorted(glob.glob(os.path.join(dirname, "*.pkl"))):
        with open(p, "rb") as f:
            recs.append(pickle.load(f))
    labels = list(dict.fromkeys(r["label"] for r in sorted(recs, key=lambda r: r["label"])))
    return sorted(recs, key=lambda r: (r["shape"], r["variant"], labels.index(r["label"])))


def _launchers(recs, shape):
    """(label, variant, launcher, output) per kernel of ``shape``, checked against torch."""
    import torch
    from fp8_gemm import fp8_inputs, torch_scaled_mm

    from pkc.runtime.scheduled import ScheduledKernel

    dtype, dims = shape.split(":")
    M, N, K = gemm_shape(dims)
    if dtype == "bf16":
        g = torch.Generator(device="cpu").manual_seed(0)
        a = torch.randn(M, K, generator=g).to(torch.bfloat16).cuda()
        w = torch.randn(N, K, generator=g).to(torch.bfloat16).cuda()
        ref, args = a @ w.t(), [a, w]
        o = torch.empty_like(ref)
        out = [("torch", "mm", lambda: torch.matmul(a, w.t(), out=o), o, None)]
    else:
        a, w, sa, sb, _ = fp8_inputs(M, N, K, True)
        ref, args = torch_scaled_mm(a, w, sa, sb, fast=True), [a, w, sa, sb]
        o = torch.empty_like(ref)
        out = [("torch", "row", lambda: torch_scaled_mm(a, w, sa, sb, out=o, fast=True), o,
                None)]
    scale = float(ref.float().abs().max())
    for r in recs:
        if r["shape"] != shape:
            continue
        k = ScheduledKernel(r["ptx"], r["meta"])
        c = torch.full_like(ref, float("nan"))
        k(args + [c])
        torch.cuda.synchronize()
        err = float((c.float() - ref.float()).abs().max())
        ok = err <= 2 ** -6 * scale and not bool(torch.isnan(c).any())
        out.append((r["label"], r["variant"], lambda k=k, c=c: k(args + [c]), c,
                    {"max_abs_vs_torch": err, "correct": ok, "registers": k.kernel.num_regs}))
    return out


def run(args) -> None:
    import torch
    from timing import rotated

    recs = _load(args.dir)
    shapes = list(dict.fromkeys(r["shape"] for r in recs))
    if args.child:                  # under ncu: each kernel once, nothing timed
        order = []
        for shape in shapes:
            ls = _launchers(recs, shape)
            # what ncu also saw, in order: torch's reference and each kernel's checked call
            order += [f"{shape} torch ref"] + [f"{shape} {x[0]} {x[1]}-check" for x in ls[1:]]
            for lab, var, fn, _, _ in ls:
                fn()
                order.append(f"{shape} {lab} {var}")
            torch.cuda.synchronize()
        print("ORDER " + json.dumps(order), flush=True)
        return
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for shape in shapes:
        ls = _launchers(recs, shape)
        first = {}
        for lab, var, _, c, info in ls[1:]:
            if var in first:
                info["bitwise_equal_first"] = bool(torch.equal(c.view(torch.int16),
                                                               first[var].view(torch.int16)))
            else:
                first[var] = c
        good = [x for x in ls if x[4] is None or x[4]["correct"]]
        for _ in range(3):
            for x in good:
                x[2]()
        t = rotated([x[2] for x in good], args.rounds)
        base = t[0]
        firsts = {}
        for (lab, var, _, _, info), times in zip(good, t):
            r = {"shape": shape, "label": lab, "variant": var, **(info or {}),
                 "us": statistics.median(times) * 1e6,
                 "speed": statistics.median(b / x for b, x in zip(base, times))}
            if lab != "torch":
                f = firsts.setdefault(var, times)
                r["vs_first"] = statistics.median(a / b for a, b in zip(f, times))
            rows.append(r)
        rows += [{"shape": shape, "label": x[0], "variant": x[1], **x[4]}
                 for x in ls if x[4] is not None and not x[4]["correct"]]
    if args.ncu:
        rows += ncu_rows(args)
    with open(os.path.join(args.out, "gemm_ab.json"), "w") as f:
        json.dump(rows, f, indent=1, default=str)
    print(f"\n{'shape':21s} {'label':6s} {'variant':16s} {'ok':5s} {'bits=':5s} {'us':>8s} "
          f"{'speed':>6s} {'vs 1st':>6s} {'cycles':>9s} {'tensor%':>7s} {'instr':>9s}")
    ncu = {(r["shape"], r["label"], r["variant"]): r for r in rows if "ncu" in r}
    for r in rows:
        if "ncu" in r:
            continue
        n = ncu.get((r["shape"], r["label"], r["variant"]), {})
        print(f"{r['shape']:21s} {r['label']:6s} {r['variant']:16s} "
              f"{str(r.get('correct', '')):5s} {str(r.get('bitwise_equal_first', '')):5s} "
              f"{r.get('us', 0):8.1f} {r.get('speed', 0):6.3f} {r.get('vs_first', 1):6.3f} "
              f"{n.get('cycles', ''):>9} {n.get('tensor', ''):>7} {n.get('instr', ''):>9}")


def ncu_rows(args) -> list[dict]:
    """Cycles and tensor-pipe activity of each kernel, one launch each under ncu."""
    from fp8_ncu import find_ncu

    ncu = find_ncu()
    cmd = [ncu, "--clock-control", "none", "-k", "regex:scaled_matmul|nvjet|sm90_|cutlass",
           "--metrics", ",".join(NCU_METRICS), "--csv", sys.executable,
           os.path.abspath(__file__), "run", args.dir, "--child"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    with open(os.path.join(args.out, "ncu.csv"), "w") as f:
        f.write(p.stdout + "\n" + p.stderr)
    order = next((json.loads(ln[6:]) for ln in p.stdout.splitlines()
                  if ln.startswith("ORDER ")), [])
    import csv
    import io
    vals: dict[int, dict] = {}
    body = "\n".join(ln for ln in p.stdout.splitlines() if ln.startswith('"'))
    for rec in csv.DictReader(io.StringIO(body)):
        try:
            vals.setdefault(int(rec["ID"]), {})[rec["Metric Name"]] = rec["Metric Value"]
        except (KeyError, ValueError):
            continue
    out = []
    for i, key in enumerate(order):
        v = vals.get(i, {})
        shape, lab, var = key.split(" ")          # no spaces in any of the three
        if lab == "torch" and var == "ref" or var.endswith("-check"):
            continue
        out.append({"ncu": True, "shape": shape, "label": lab, "variant": var,
                    "cycles": v.get("sm__cycles_elapsed.max", "").replace(",", ""),
                    "tensor": v.get(NCU_METRICS[2], ""),
                    "instr": v.get("sm__inst_executed.sum", "").replace(",", "")})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("dir")
    p.add_argument("--label", required=True)
    p.add_argument("--shapes", default="16384x8192x4096,8192^3")
    p.add_argument("--dtype", choices=sorted(VARIANTS), default="fp8")
    p.add_argument("--variants", default="", help="comma-separated (default: VARIANTS)")
    r = sub.add_parser("run")
    r.add_argument("dir")
    r.add_argument("--out")
    r.add_argument("--rounds", type=int, default=30)
    r.add_argument("--ncu", action="store_true")
    r.add_argument("--child", action="store_true")
    args = ap.parse_args()
    if args.cmd == "prepare":
        prepare(args)
    else:
        sys.path.insert(0, ROOT)
        run(args)


if __name__ == "__main__":
    main()
