"""The IR-built fused GEMM + all-reduce (W <= 2) and fresh-output GEMM + reduce-scatter
(W = 1, 2) against the IR-built GEMM alone of the same per-rank problem (the same tile,
every rank's GEMM on its lane: what the fusion costs over the GEMM), in the virtual world
on one H200 (W ranks on W green-context lanes of one GPU). At W = 1 (nothing to
communicate) the ratio is the cost of the communication machinery alone.

    python benchmarks/fused_ar_ir.py --out DIR    # on the GPU machine (xdsl carried as wheels)
    python benchmarks/fused_ar_ir.py --list       # the cases, no GPU

Per case: random bf16 operands per rank (inputs never zero); the IR kernel's result
against torch (the f32 sum of the ranks' f32 products; tolerance: a bf16 step of the
result's scale per rounding, W + 1 of them: each partial is rounded to bf16 before it is
added, the sum once more), a fresh output NaN-poisoned first, at W = 2 every rank's
all-reduce result bitwise equal; then the fused kernel and the GEMM alone launched in
alternation, ``rounds`` rounds behind a ``torch.cuda._sleep``, the order rotated each
round (benchmarks/timing.py ``rotated``); medians and the paired ratio fused / GEMM. A
fresh output is given as ``out=`` (one tensor per rank reused) so that the kernel alone is
timed; the result is checked again after the timed launches.
"""

from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sweep_common  # noqa: E402
from sweep_common import run_cases, virtual_peers  # noqa: E402  (the path above)

# (name, kind, W, M, N, K, layout): M = the product's rows (rs: W x the chunk's). Odd
# shapes (M, N, K not multiples of 16 or of W; N, K multiples of 8 for TMA) for
# correctness, then PK's GEMM + AR / RS shapes (N x N x N/8) and a Llama-70B o_proj
# (TP 8: 4096 tokens x 8192 x 1024) for speed.
CASES = [
    ("ar odd W=1", "ar", 1, 999, 776, 520, "nk"),
    ("ar odd W=2", "ar", 2, 1999, 776, 520, "nk"),
    ("ar odd W=2 kn", "ar", 2, 333, 264, 136, "kn"),
    ("rs odd W=2", "rs", 2, 1998, 776, 520, "nk"),
    ("ar 4096 W=2", "ar", 2, 4096, 4096, 512, "nk"),
    ("ar 8192 W=2", "ar", 2, 8192, 8192, 1024, "nk"),
    ("ar llama-o W=2", "ar", 2, 4096, 8192, 1024, "nk"),
    ("rs 4096 W=2", "rs", 2, 4096, 4096, 512, "nk"),
    ("rs 8192 W=2", "rs", 2, 8192, 8192, 1024, "nk"),
    ("rs 4096^3 W=1", "rs", 1, 4096, 4096, 4096, "nk"),
    ("ar 4096^3 W=1", "ar", 1, 4096, 4096, 4096, "nk"),
    ("rs 8192x8192x1024 W=1", "rs", 1, 8192, 8192, 1024, "nk"),
    ("ar 8192x8192x1024 W=1", "ar", 1, 8192, 8192, 1024, "nk"),
    # the W = 1 GEMM + RS shapes of the earlier fused_w1.py (PK's N x N x N/8, 8192^3)
    ("rs 16384x16384x2048 W=1", "rs", 1, 16384, 16384, 2048, "nk"),
    ("rs 8192^3 W=1", "rs", 1, 8192, 8192, 8192, "nk"),
]


def module_text(kind: str, W: int, M: int, N: int, K: int, layout: str, dt: str = "bf16") -> str:
    """A pk.matmul followed by the collective of ``kind`` over ``W`` ranks."""
    if kind == "rs":
        from fused_ir import module_text as rs_text
        return rs_text(W, M // W, N, K, layout, dt)
    if layout == "nk":
        head = (f"func.func @mm_ar(%x: tensor<{M}x{K}x{dt}>, %w: tensor<{N}x{K}x{dt}>) -> tensor<{M}x{N}x{dt}> {{\n"
                f"  %wt = pk.transpose %w {{perm = [1, 0]}} : tensor<{N}x{K}x{dt}> -> tensor<{K}x{N}x{dt}>\n"
                f"  %c = pk.matmul %x, %wt : (tensor<{M}x{K}x{dt}>, tensor<{K}x{N}x{dt}>) -> tensor<{M}x{N}x{dt}>\n")
    else:
        head = (f"func.func @mm_ar(%x: tensor<{M}x{K}x{dt}>, %w: tensor<{K}x{N}x{dt}>) -> tensor<{M}x{N}x{dt}> {{\n"
                f"  %c = pk.matmul %x, %w : (tensor<{M}x{K}x{dt}>, tensor<{K}x{N}x{dt}>) -> tensor<{M}x{N}x{dt}>\n")
    return head + (f"  %o = pk.all_reduce %c {{reduce = \"sum\", world = {W} : i64}} : "
                   f"tensor<{M}x{N}x{dt}> -> tensor<{M}x{N}x{dt}>\n"
                   f"  func.return %o : tensor<{M}x{N}x{dt}>\n}}\n")


def scheduled_kernels(kind: str, W: int, M: int, N: int, K: int, layout: str, dt: str = "bf16"):
    """The scheduled pk.kernels after ``default{force=true},schedule-fused,dce`` (one fused
    kernel; at W > 2 an all-reduce is a pair: GEMM + reduce-scatter, then a pull gather)."""
    return sweep_common.scheduled_kernels(module_text(kind, W, M, N, K, layout, dt), "fused_ar_ir.mlir")


def compile_ir(kind: str, W: int, M: int, N: int, K: int, layout: str, dt: str = "bf16"):
    """(compiled kernel, its pk.kernel) after ``default{force=true},schedule-fused,dce``."""
    from pkc.codegen import compile_kernel

    (kop,) = scheduled_kernels(kind, W, M, N, K, layout, dt)
    return compile_kernel(kop, "sm_90a"), kop


def run_case(name, kind, W, M, N, K, layout, rounds: int, peers) -> dict:
    import torch
    from fused_ir import fused_vs_gemm, gemm_alone
    from pkc.passes.remarks import plan_of
    from pkc.runtime.scheduled_fused import ScheduledFused

    ck, kop = compile_ir(kind, W, M, N, K, layout)
    plan = plan_of(kop)
    ir = ScheduledFused(ck.ptx, ck.meta, peers, owner=("bench-ar", name), timeout_ns=500_000_000)
    torch.manual_seed(0)
    a = [torch.randn(M, K, device="cuda", dtype=torch.bfloat16) for _ in range(W)]
    w = [torch.randn(N, K, device="cuda", dtype=torch.bfloat16) / K ** 0.5 for _ in range(W)]
    b = [wi if layout == "nk" else wi.t().contiguous() for wi in w]
    full = sum(a[r].float() @ w[r].float().t() for r in range(W))
    Mc = M // W if kind == "rs" else M

    def refs(r):
        return full[r * Mc:(r + 1) * Mc] if kind == "rs" else full
    # fresh outputs: one NaN-poisoned tensor per rank, reused by the timed launches
    keep = ({r: torch.full((Mc, N), float("nan"), device="cuda", dtype=torch.bfloat16)
             for r in range(W)} if plan["fresh_output"] else None)
    outs = ir.run(a, b, out=keep)
    torch.cuda.synchronize()
    ir.check()
    scale = float(full.abs().max())
    tol = 2 ** -7 * scale * (W + 1)
    errs = [float((outs[r].float() - refs(r)).abs().max()) for r in range(W)]
    nan = any(bool(torch.isnan(outs[r]).any()) for r in range(W))
    row = {"case": name, "kind": kind, "W": W, "M": M, "N": N, "K": K, "layout": layout,
           "tile": f"{plan['bm']}x{plan['bn']}_s{plan['stages']}",
           "fresh_output": plan["fresh_output"], "max_abs_err": max(errs), "tol": tol,
           "nan": nan, "correct": max(errs) <= tol and not nan, "grid": ir.grid,
           "registers": ir.kernel.num_regs}
    if kind == "ar" and W > 1:
        row["ranks_bitwise_equal"] = all(torch.equal(outs[0], outs[r]) for r in range(W))
    if not row["correct"]:
        return row                  # no timing of a wrong kernel
    gemm, g = gemm_alone(kop, M, N, K, layout, peers, a, b)
    fused_vs_gemm(row, [lambda: ir.run(a, b, out=keep), gemm], rounds, g)
    torch.cuda.synchronize()
    ir.check()
    # correct after the timed launches too (epochs advanced, persistent buffers reused)
    outs = ir.run(a, b, out=keep)
    torch.cuda.synchronize()
    row["correct_after_timing"] = all(
        float((outs[r].float() - refs(r)).abs().max()) <= tol for r in range(W))
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out/fused_ar_ir")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--rounds", type=int, default=25)
    ap.add_argument("--only", default="", help="run the cases whose name contains this")
    args = ap.parse_args()
    cases = [c for c in CASES if args.only in c[0]]
    if args.list:
        for c in cases:
            print(*c)
        return
    os.makedirs(args.out, exist_ok=True)
    rows = run_cases(cases, lambda c: run_case(*c, rounds=args.rounds, peers=virtual_peers(c[2])),
                     os.path.join(args.out, "fused_ar_ir.json"))
    print(f"\n{'case':24} {'tile':12} {'ok':5} {'fused us':>8} {'GEMM us':>8} {'fused/GEMM':>10}")
    for r in rows:
        if "error" in r:
            print(f"{r['case']:24} ERROR {r['error'][:100]}")
            continue
        print(f"{r['case']:24} {r['tile']:12} {str(r['correct'] and r.get('correct_after_timing', False)):5} "
              f"{r.get('us_fused', 0):8.1f} {r.get('us_gemm', 0):8.1f} "
              f"{r.get('fused_over_gemm', 0):10.3f}")


if __name__ == "__main__":
    main()
