"""The fp8 GEMM with row-wise scales against cuBLASLt, variant by variant, in one run on one
H200: schedule-matmul's kernel with the tile's scales prefetched into registers before its
main loop (``pks.scale_prefetch``, the default) and without (``scale-prefetch=false``: the
per-piece global loads of the epilogue), on its own tile and on other tiles, cooperative
and ping-pong (``GemmConfig.pingpong``: the two consumer warpgroups on alternate tiles,
one's epilogue under the other's MMAs), each against
``torch._scaled_mm(use_fast_accum=True)`` with row-wise scales (the target) and with
tensor-wise ones (the speed the epilogue's scales cost cuBLASLt nothing); then the fused
fp8 kinds (GEMM + AR / RS, AG + GEMM, row-wise) at W = 1 with the default against the
unfused torch sequence (at W = 1: torch._scaled_mm alone; benchmarks/fp8_fused.py).

    python benchmarks/fp8_rowwise.py --out DIR [--budget-s 170]   # on the GPU machine
    python benchmarks/fp8_rowwise.py --list

Per GEMM case: random fp8 operands and scales (benchmarks/fp8_gemm.py ``fp8_inputs``),
every variant's output checked against torch's row-wise result (2^-6 of the output's
scale) and the variants' outputs against each other bitwise (the prefetch changes where
the scales come from, not the arithmetic); then every launcher timed in alternation
(benchmarks/timing.py ``rotated``: each round queued behind a sleep, the order rotated),
medians, and ``speed`` = the median over rounds of torch row-wise time / variant time
(>= 0.98 is the goal; > 1: pkc faster); bf16 cases against torch.matmul. JSON under DIR, a
short table last.
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

# (case, M, N, K, [(label, tile variant ("": schedule-matmul's pick), prefetch)])
_PP = [("pp 128x128", "128x128_pp_s6", True), ("pp 128x128 cl2", "128x128_pp_cl2", True),
       ("pp 64x256", "64x256_pp_s4", True)]
GEMM_CASES = [
    ("16384x8192x4096", 16384, 8192, 4096,
     [("loads", "", False), ("prefetch", "", True), ("pf 256x128", "256x128_s4_tma", True),
      *_PP]),
    ("8192x1280x8192", 8192, 1280, 8192,
     [("loads", "", False), ("prefetch", "", True), *_PP]),
    ("8192^3", 8192, 8192, 8192,
     [("loads", "", False), ("prefetch", "", True), ("pf 128x192", "128x192_s4_tma", True),
      *_PP]),
    ("4096x28672x8192", 4096, 28672, 8192,
     [("loads", "", False), ("prefetch", "", True), *_PP]),
    ("4096^3", 4096, 4096, 4096, [("loads", "", False), ("prefetch", "", True), *_PP]),
    ("odd 1000x1040x2000", 1000, 1040, 2000,
     [("loads", "", False), ("prefetch", "", True), ("pp 128x128", "128x128_pp_s6", True)]),
]

# --confirm (a short run): schedule-matmul's default (CTA pairs / ping-pong / the table:
# gemm_tuning's fp8 rules) against the single-CTA cooperative tile and the ping-pong tiles,
# and two fused kinds
_CONFIRM = [("coop", "128x256_s4_tma", True), ("pp", "128x128_pp_s6", True),
            ("pp cl2", "128x128_pp_cl2", True)]
CONFIRM_GEMM = [
    ("16384x8192x4096", 16384, 8192, 4096, [("default", "", True), *_CONFIRM]),
    ("8192x1280x8192", 8192, 1280, 8192, [("default", "", True), *_CONFIRM]),
    ("8192^3", 8192, 8192, 8192, [("default", "", True), *_CONFIRM]),
    ("4096x28672x8192", 4096, 28672, 8192, [("default", "", True), *_CONFIRM]),
    ("4096^3", 4096, 4096, 4096, [("default", "", True)]),
]

# the fused kinds at W = 1 (benchmarks/fp8_fused.py's cases): (name, W, M, N, K, row, kind)
FUSED_CASES = [
    ("ar 8192x1280x8192 row", 1, 8192, 1280, 8192, True, "ar"),
    ("ag 16384x8192x4096 row", 1, 16384, 8192, 4096, True, "ag"),
    ("ar 8192^3 row", 1, 8192, 8192, 8192, True, "ar"),
    ("ag 8192^3 row", 1, 8192, 8192, 8192, True, "ag"),
    ("rs 16384x8192x4096 row", 1, 16384, 8192, 4096, True, "rs"),
]


def compile_matmul(text: str, name: str, **options):
    """(compiled kernel, its pk.kernel) of schedule-matmul (``options``: the pass's) on the
    one matmul of ``text``."""
    from pkc.codegen import compile_kernel
    from pkc.codegen.emit import kernels_of
    from pkc.ir import make_context, parse_module
    from pkc.passes.schedule_matmul import ScheduleMatmul

    m = parse_module(text, name)
    ScheduleMatmul(**options).apply(make_context(), m)
    (kop,) = kernels_of(m)
    return compile_kernel(kop, "sm_90a"), kop


def compile_variant(M, N, K, row, variant, prefetch):
    """(compiled kernel, its pk.kernel) of schedule-matmul on ``_scaled_mm(x, w.t())``."""
    from fp8_gemm import module_text

    return compile_matmul(module_text(M, N, K, row), "fp8_rowwise.mlir", variant=variant,
                          scale_prefetch=prefetch)


def run_gemm_case(name, M, N, K, variants, rounds: int) -> list[dict]:
    import torch
    from fp8_gemm import fp8_inputs, torch_scaled_mm
    from timing import rotated

    from pkc.passes.remarks import plan_of
    from pkc.runtime.scheduled import ScheduledKernel

    a, w, sa, sb, _ = fp8_inputs(M, N, K, True)
    _, _, ta, tb, _ = fp8_inputs(M, N, K, False)
    ref = torch_scaled_mm(a, w, sa, sb, fast=True)
    scale = float(ref.float().abs().max())
    rows, fns, labels, outs = [], [], [], []
    first = None
    for label, variant, prefetch in variants:
        ck, kop = compile_variant(M, N, K, True, variant, prefetch)
        p = plan_of(kop)
        k = ScheduledKernel(ck.ptx, ck.meta)
        c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        k([a, w, sa, sb, c])
        torch.cuda.synchronize()
        err = float((c.float() - ref.float()).abs().max())
        same = None if first is None else bool(torch.equal(c.view(torch.int16),
                                                           first.view(torch.int16)))
        first = c.clone() if first is None else first
        r = {"case": name, "M": M, "N": N, "K": K, "variant": label,
             "tile": f"{p['bm']}x{p['bn']}_s{p['stages']}" + ("_cl2" if p.get("cluster") == 2
                                                              else ""),
             "scales": p.get("scales"), "registers": k.kernel.num_regs,
             "max_abs_vs_torch": err, "correct": err <= 2 ** -6 * scale and not
             bool(torch.isnan(c).any()), "bitwise_equal_first": same}
        rows.append(r)
        if r["correct"]:
            fns.append((lambda k=k, c=c: k([a, w, sa, sb, c])))
            labels.append(label)
            outs.append(r)
    # pkc's default on tensor-wise scales, and torch row- / tensor-wise (fast accumulation)
    ckt, _ = compile_variant(M, N, K, False, "", True)
    kt = ScheduledKernel(ckt.ptx, ckt.meta)
    ct = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    o1, o2 = torch.empty_like(ct), torch.empty_like(ct)
    try:                # torch's out= variant (no allocation per call), where it has one
        torch_scaled_mm(a, w, sa, sb, out=o1, fast=True)
    except (TypeError, RuntimeError):
        o1 = o2 = None
    fns += [lambda: kt([a, w, ta, tb, ct]),
            lambda: torch_scaled_mm(a, w, sa, sb, out=o1, fast=True),
            lambda: torch_scaled_mm(a, w, ta, tb, out=o2, fast=True)]
    for _ in range(3):
        for f in fns:
            f()
    t = rotated(fns, rounds)
    med = [statistics.median(x) * 1e6 for x in t]
    t_row, t_ten = t[-2], t[-1]
    for r, x, us in zip(outs, t, med):
        r.update(us=us, us_torch_row=med[-2], us_torch_tensor=med[-1],
                 speed_vs_torch_row=statistics.median(b / o for b, o in zip(t_row, x)),
                 speed_vs_torch_tensor=statistics.median(b / o for b, o in zip(t_ten, x)),
                 tflops=2 * M * N * K / us / 1e6)
    rows.append({"case": name, "variant": "pkc tensor-wise", "us": med[-3],
                 "speed_vs_torch_tensor": statistics.median(
                     b / o for b, o in zip(t_ten, t[-3])), "us_torch_row": med[-2],
                 "us_torch_tensor": med[-1], "correct": True})
    return rows


# bf16 for comparison (the ping-pong consumers are not fp8's alone): (case, M, N, K, variants)
BF16_CASES = [
    ("bf16 16384x8192x4096", 16384, 8192, 4096, ["", "128x128_pp_s6", "64x256_pp_s4"]),
    ("bf16 8192^3", 8192, 8192, 8192, ["", "128x128_pp_s6", "64x256_pp_s4"]),
]


def bf16_module_text(M: int, N: int, K: int) -> str:
    """``x @ w.T`` in bf16 (w as [N, K], the layout of the fp8 cases)."""
    return (f"func.func @mm(%x: tensor<{M}x{K}xbf16>, %w: tensor<{N}x{K}xbf16>) -> "
            f"tensor<{M}x{N}xbf16> {{\n  %wt = pk.transpose %w {{perm = [1, 0]}} : "
            f"tensor<{N}x{K}xbf16> -> tensor<{K}x{N}xbf16>\n  %y = pk.matmul %x, %wt : "
            f"(tensor<{M}x{K}xbf16>, tensor<{K}x{N}xbf16>) -> tensor<{M}x{N}xbf16>\n"
            f"  func.return %y : tensor<{M}x{N}xbf16>\n}}\n")


def compile_bf16_variant(M, N, K, variant):
    """(compiled kernel, its pk.kernel) of schedule-matmul on the bf16 ``x @ w.T``."""
    return compile_matmul(bf16_module_text(M, N, K), "bf16.mlir", variant=variant)


def run_bf16_case(name, M, N, K, variants, rounds: int) -> list[dict]:
    """schedule-matmul's bf16 kernel (x @ w.T) per variant against torch.matmul."""
    import torch
    from timing import rotated

    from pkc.runtime.scheduled import ScheduledKernel

    g = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(M, K, generator=g).to(torch.bfloat16).cuda()
    w = torch.randn(N, K, generator=g).to(torch.bfloat16).cuda()
    ref = a @ w.t()
    rows, fns = [], []
    for v in variants:
        ck, _ = compile_bf16_variant(M, N, K, v)
        k = ScheduledKernel(ck.ptx, ck.meta)
        c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        k([a, w, c])
        torch.cuda.synchronize()
        err = float((c.float() - ref.float()).abs().max())
        rows.append({"case": name, "variant": v or "auto", "tile": v or "auto",
                     "correct": err <= 2 ** -6 * float(ref.float().abs().max())})
        fns.append(lambda k=k, c=c: k([a, w, c]))
    o = torch.empty_like(ref)
    fns.append(lambda: torch.matmul(a, w.t(), out=o))
    for _ in range(3):
        for f in fns:
            f()
    t = rotated(fns, rounds)
    for r, x in zip(rows, t):
        r.update(us=statistics.median(x) * 1e6, us_torch_row=statistics.median(t[-1]) * 1e6,
                 speed_vs_torch_row=statistics.median(b / q for b, q in zip(t[-1], x)))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out/fp8_rowwise")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--budget-s", type=float, default=170.0,
                    help="start no case after this many seconds")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--confirm", action="store_true",
                    help="the default against the single-CTA and ping-pong tiles, two fused kinds")
    args = ap.parse_args()
    if args.confirm:
        GEMM_CASES[:] = CONFIRM_GEMM
        FUSED_CASES[:] = FUSED_CASES[:2]
        BF16_CASES.clear()
    if args.list:
        for c in GEMM_CASES:
            print(*c[:4], [v[0] for v in c[4]])
        for c in FUSED_CASES:
            print(*c)
        return
    t0 = time.time()
    path = os.path.join(args.out, "fp8_rowwise.json")
    rows: list[dict] = []
    todo = [("gemm", c) for c in GEMM_CASES[:3]] + [("fused", c) for c in FUSED_CASES[:2]] \
        + [("gemm", c) for c in GEMM_CASES[3:]] + [("fused", c) for c in FUSED_CASES[2:]] \
        + [("bf16", c) for c in BF16_CASES]
    for kind, c in todo:
        if time.time() - t0 > args.budget_s:
            rows.append({"case": c[0], "skipped": "budget"})
            continue
        try:
            if kind == "gemm":
                rows += run_gemm_case(*c, rounds=args.rounds)
            elif kind == "bf16":
                rows += run_bf16_case(*c, rounds=args.rounds)
            else:
                from fp8_fused import run_case
                rows.append(run_case(*c, rounds=args.rounds))
        except Exception as e:          # one failing case must not hide the others
            rows.append({"case": c[0], "error": f"{type(e).__name__}: {e}"[:300]})
        print(rows[-1], flush=True)
        write_json(path, rows)
    print(f"\n{'case':24} {'variant':15} {'tile':13} {'ok':5} {'us':>7} {'torch row':>9} "
          f"{'speed':>6} {'vs tensor':>9}   (speed: torch row-wise time / pkc time)")
    for r in rows:
        if "error" in r or "skipped" in r or "kind" in r:
            continue
        print(f"{r['case']:24} {r['variant']:15} {r.get('tile', ''):13} "
              f"{str(r['correct']):5} {r.get('us', 0):7.1f} {r.get('us_torch_row', 0):9.1f} "
              f"{r.get('speed_vs_torch_row', 0):6.3f} {r.get('speed_vs_torch_tensor', 0):9.3f}")
    print("\nsummary (speed = torch row-wise fast-accum time / pkc time; fused: time ratios)")
    for name, *_ in GEMM_CASES + BF16_CASES:
        got = {r["variant"]: r for r in rows if r.get("case") == name and "us" in r
               and r["variant"] != "pkc tensor-wise"}
        if not got:
            why = [r.get("error") or r.get("skipped") for r in rows if r.get("case") == name]
            print(f"{name:24} {(why or ['no rows'])[-1]}"[:100])
            continue
        best = max(got.values(), key=lambda r: r["speed_vs_torch_row"])
        sp = {k: f"{v['speed_vs_torch_row']:.3f}" for k, v in got.items()}
        print(f"{name:24} " + " ".join(f"{k} {v}" for k, v in sp.items()) + " "
              f"best {best['variant']} {best['speed_vs_torch_row']:.3f} "
              f"bitwise {all(r.get('bitwise_equal_first') in (None, True) for r in got.values())}")
    for r in rows:
        if "kind" in r:
            print(f"{r['case']:24} fused/torch {r.get('fused_over_torch', 0):.3f} fused/gemm "
                  f"{r.get('fused_over_gemm', 0):.3f} ({r.get('us_fused', 0):.1f} / "
                  f"{r.get('us_torch', 0):.1f} / {r.get('us_gemm', 0):.1f} us) ok {r['correct']}")
        elif ("error" in r or "skipped" in r) and any(r["case"] == c[0] for c in FUSED_CASES):
            print(f"{r['case']:24} {r.get('error') or r.get('skipped')}"[:100])
    print(f"elapsed {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
