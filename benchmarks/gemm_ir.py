"""The IR-built GEMM (graph pk.matmul -> schedule-matmul -> sm_90a lowering -> PTX) against
the hand-written generator it replaces and against cuBLAS, in one run on one H200.

    python benchmarks/gemm_ir.py --out DIR        # on the GPU machine (xdsl carried as wheels)
    python benchmarks/gemm_ir.py --list           # the cases, no GPU

Per case (shape x tile configuration): outputs NaN-poisoned, random inputs; the IR-built
kernel's output compared bitwise with the hand kernel's (same configuration) and with
cuBLAS (max abs difference); then the three launched in alternation (IR, hand, cuBLAS;
``rounds`` rounds, each queued behind a ``torch.cuda._sleep`` so launch overhead is not
timed, the order rotated every round so that no kernel always runs first, each launch
between its own CUDA events); medians and paired ratios. The table is
printed last; JSON under DIR.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gemm import SHAPES  # noqa: E402  (benchmarks/gemm.py: the 11 shapes)

# Every tile configuration the benchmarks use, on one shape each (beyond the auto picks).
EXTRA = [
    ("square 8192^3", "128x256_s4_cl2", "nk"),
    ("square 8192^3", "128x256_s4_kn", "kn"),
    ("square 8192^3", "128x256_s4_g16", "nk"),
    ("square 8192^3", "128x256_s3_global", "nk"),
    ("llama70b-tp8 qkv", "128x160_s5_cl2", "nk"),
    ("llama70b-tp8 up+gate", "256x128_s4_cl2", "nk"),
    ("pk gemm+rs N=4096", "128x128_s6_cl2", "nk"),
    ("pk gemm+rs N=4096", "128x192_s4_cl2", "nk"),
    ("odd 200x136x72", "128x128_s6_tma", "nk"),
    ("odd 1000x264x200", "64x256_c1_s5", "nk"),
]
ODD = {"odd 200x136x72": (200, 136, 72), "odd 1000x264x200": (1000, 264, 200)}


def cases() -> list[tuple[str, int, int, int, str, str]]:
    from pkc.target.gemm_tuning import VARIANTS, choose_config
    shapes = {name: (M, N, K) for name, M, N, K in SHAPES} | ODD
    out = []
    for name, M, N, K in SHAPES:
        cfg = choose_config(M, N, K, "bf16", "nk", 132)
        variant = next(v for v, c in VARIANTS.items() if c == cfg)
        out.append((name, M, N, K, variant, "nk"))
    for name, variant, layout in EXTRA:
        out.append((name, *shapes[name], variant, layout))
    return out


def module_text(M: int, N: int, K: int, layout: str) -> str:
    if layout == "nk":
        return (f"func.func @mm(%x: tensor<{M}x{K}xbf16>, %w: tensor<{N}x{K}xbf16>) -> tensor<{M}x{N}xbf16> {{\n"
                f"  %wt = pk.transpose %w {{perm = [1, 0]}} : tensor<{N}x{K}xbf16> -> tensor<{K}x{N}xbf16>\n"
                f"  %y = pk.matmul %x, %wt : (tensor<{M}x{K}xbf16>, tensor<{K}x{N}xbf16>) -> tensor<{M}x{N}xbf16>\n"
                f"  func.return %y : tensor<{M}x{N}xbf16>\n}}\n")
    return (f"func.func @mm(%x: tensor<{M}x{K}xbf16>, %w: tensor<{K}x{N}xbf16>) -> tensor<{M}x{N}xbf16> {{\n"
            f"  %y = pk.matmul %x, %w : (tensor<{M}x{K}xbf16>, tensor<{K}x{N}xbf16>) -> tensor<{M}x{N}xbf16>\n"
            f"  func.return %y : tensor<{M}x{N}xbf16>\n}}\n")


def compile_ir(M: int, N: int, K: int, variant: str, layout: str):
    """The compiled kernel (PTX + launch metadata) of the IR path for one case."""
    from pkc.codegen import compile_kernel
    from pkc.codegen.emit import kernels_of
    from pkc.ir import make_context, parse_module
    from pkc.passes.schedule_matmul import ScheduleMatmul

    m = parse_module(module_text(M, N, K, layout), "gemm_ir.mlir")
    ScheduleMatmul(variant=variant).apply(make_context(), m)
    (kop,) = kernels_of(m)
    return compile_kernel(kop, "sm_90a")


def _time(fns, rounds: int) -> list[list[float]]:
    import torch
    times = [[] for _ in fns]
    n = len(fns)
    for r in range(rounds):
        torch.cuda._sleep(2_000_000)
        evs = []
        order = [(r + j) % n for j in range(n)]     # each kernel takes each position in turn
        for i in order:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fns[i]()
            e.record()
            evs.append((i, s, e))
        torch.cuda.synchronize()
        for i, s, e in evs:
            times[i].append(s.elapsed_time(e) * 1e-3)
    return times


def run_case(name, M, N, K, variant, layout, rounds: int) -> dict:
    import torch
    from pkc.codegen.hopper.launch import HopperGemm
    from pkc.runtime.scheduled import ScheduledKernel
    from pkc.target.gemm_tuning import VARIANTS

    ck = compile_ir(M, N, K, variant, layout)
    ir = ScheduledKernel(ck.ptx, ck.meta)
    hand = HopperGemm(VARIANTS[variant].with_(b_layout=layout))
    torch.manual_seed(0)
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    b = w if layout == "nk" else w.t().contiguous()
    bt = w.t() if layout == "nk" else b
    c_ir = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    c_hand = torch.full_like(c_ir, float("nan"))
    ir([a, b, c_ir])
    hand(a, b, c_hand)
    ref = torch.mm(a, bt)
    torch.cuda.synchronize()
    row = {"case": name, "M": M, "N": N, "K": K, "variant": variant, "layout": layout,
           "bitwise_equal_hand": bool(torch.equal(c_ir, c_hand)),
           "nan": bool(torch.isnan(c_ir).any()),
           "max_abs_vs_cublas": float((c_ir.float() - ref.float()).abs().max()),
           "bitwise_equal_cublas": bool(torch.equal(c_ir, ref)),
           "registers": ir.kernel.num_regs, "hand_registers": hand.kernel.num_regs,
           "smem": ck.meta.smem_bytes, "grid": ir.grid}
    out = torch.empty_like(c_ir)
    for _ in range(3):
        ir([a, b, out]); hand(a, b, out); torch.mm(a, bt, out=out)
    t_ir, t_hand, t_cub = _time([lambda: ir([a, b, out]), lambda: hand(a, b, out),
                                 lambda: torch.mm(a, bt, out=out)], rounds)
    flop = 2 * M * N * K
    med = [statistics.median(t) for t in (t_ir, t_hand, t_cub)]
    row.update({"us_ir": med[0] * 1e6, "us_hand": med[1] * 1e6, "us_cublas": med[2] * 1e6,
                "tflops_ir": flop / med[0] / 1e12, "tflops_cublas": flop / med[2] / 1e12,
                "ir_over_hand": statistics.median(h / i for i, h in zip(t_ir, t_hand)),
                "ir_over_cublas": statistics.median(c / i for i, c in zip(t_ir, t_cub))})
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out/gemm_ir")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args()
    if args.list:
        for c in cases():
            print(*c)
        return
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for c in cases():
        try:
            row = run_case(*c, rounds=args.rounds)
        except Exception as e:      # one failing case must not hide the others
            row = {"case": c[0], "variant": c[4], "layout": c[5], "error": f"{type(e).__name__}: {e}"}
        rows.append(row)
        print(json.dumps(row), flush=True)
    with open(os.path.join(args.out, "gemm_ir.json"), "w") as f:
        json.dump(rows, f, indent=1)
    print(f"\n{'case':24} {'variant':18} {'lay':3} {'bits=hand':9} {'IR us':>8} {'hand us':>8} "
          f"{'cuBLAS':>8} {'IR/hand':>7} {'IR/cuBLAS':>9} {'TFLOP/s':>7}")
    for r in rows:
        if "error" in r:
            print(f"{r['case']:24} {r['variant']:18} {r['layout']:3} ERROR {r['error'][:80]}")
            continue
        print(f"{r['case']:24} {r['variant']:18} {r['layout']:3} {str(r['bitwise_equal_hand']):9} "
              f"{r['us_ir']:8.1f} {r['us_hand']:8.1f} {r['us_cublas']:8.1f} {r['ir_over_hand']:7.3f} "
              f"{r['ir_over_cublas']:9.3f} {r['tflops_ir']:7.1f}")


if __name__ == "__main__":
    main()
