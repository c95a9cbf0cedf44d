"""The IR-built GEMM (graph pk.matmul -> schedule-matmul -> sm_90a lowering -> PTX) against
cuBLAS, in one run on one H200; and the IR GEMM as the baseline of the fused benchmarks
(:class:`LaneGemm`: each rank's GEMM on its lane of a virtual world).

    python benchmarks/gemm_ir.py --out DIR        # on the GPU machine (xdsl carried as wheels)
    python benchmarks/gemm_ir.py --list           # the cases, no GPU

Cases: the 11 shapes below with schedule-matmul's own pick (choose_config), then every
other named tile variant on one shape each. Per case: outputs NaN-poisoned, random
inputs; the IR-built kernel's output compared with cuBLAS's (max abs difference, and
whether bitwise equal); then the two launched in alternation (``rounds`` rounds, each
queued behind a ``torch.cuda._sleep`` so launch overhead is not timed, the order rotated
every round, each launch between its own CUDA events: benchmarks/timing.py ``rotated``);
medians and the median of the paired ratios cuBLAS / IR (> 1: the IR kernel is faster).
The table is printed last; JSON under DIR.
"""

from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sweep_common import run_cases  # noqa: E402  (the path above)

# (name, M, N, K): 8192^3; Llama-70B TP-8 layers at 8192 tokens (hidden 8192, FFN 28672,
# 64 query / 8 KV heads of 128: QKV 8192 x 1280 x 8192, O 8192 x 8192 x 1024, up+gate
# 8192 x 7168 x 8192, down 8192 x 8192 x 3584); PK's local GEMMs (AG+GEMM N x N/8 x N and
# GEMM+RS N x N x N/8 for N = 4096, 8192, 16384)
SHAPES: list[tuple[str, int, int, int]] = [
    ("square 8192^3", 8192, 8192, 8192),
    ("llama70b-tp8 qkv", 8192, 1280, 8192),
    ("llama70b-tp8 o", 8192, 8192, 1024),
    ("llama70b-tp8 up+gate", 8192, 7168, 8192),
    ("llama70b-tp8 down", 8192, 8192, 3584),
    ("pk ag+gemm N=4096", 4096, 512, 4096),
    ("pk ag+gemm N=8192", 8192, 1024, 8192),
    ("pk ag+gemm N=16384", 16384, 2048, 16384),
    ("pk gemm+rs N=4096", 4096, 4096, 512),
    ("pk gemm+rs N=8192", 8192, 8192, 1024),
    ("pk gemm+rs N=16384", 16384, 16384, 2048),
]

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


def compile_gemm(M: int, N: int, K: int, variant: str, layout: str):
    """(compiled kernel: PTX + launch metadata, its pk.kernel) of the IR path for one
    case (``variant`` "": schedule-matmul's own pick)."""
    from pkc.codegen import compile_kernel
    from pkc.codegen.emit import kernels_of
    from pkc.ir import make_context, parse_module
    from pkc.passes.schedule_matmul import ScheduleMatmul

    m = parse_module(module_text(M, N, K, layout), "gemm_ir.mlir")
    ScheduleMatmul(variant=variant).apply(make_context(), m)
    (kop,) = kernels_of(m)
    return compile_kernel(kop, "sm_90a"), kop


def compile_ir(M: int, N: int, K: int, variant: str, layout: str):
    """The compiled kernel (PTX + launch metadata) of the IR path for one case."""
    return compile_gemm(M, N, K, variant, layout)[0]


def variant_of(plan: dict) -> str:
    """The name in gemm_tuning.VARIANTS of a scheduled kernel's GEMM tile (its pk.plan: bm,
    bn, stages, consumers, group_m, cluster; TMA-store epilogue; the layout of B is the
    program's), or "" where none matches (schedule-matmul then picks its own)."""
    from pkc.target.gemm_tuning import VARIANTS

    want = (plan["bm"], plan["bn"], plan["stages"], plan.get("consumers", 2),
            plan.get("group_m", 8), plan.get("cluster", 1) or 1, "tma")
    for name, c in VARIANTS.items():
        if (c.bm, c.bn, c.stages, c.consumers, c.group_m, c.cluster_m, c.epilogue) == want:
            return name
    return ""


class LaneGemm:
    """The IR-built GEMM of one rank's problem, launched for every rank of ``peers`` at
    once, each on its lane (W = 1: torch's stream over the whole GPU), as the fused kernels
    are: ``g(a, b, c)`` with per-rank lists (or dicts by rank) of A, B and the output.
    ``variant``: the tile ("" : schedule-matmul's pick); ``grid`` sized for a lane."""

    def __init__(self, M: int, N: int, K: int, layout: str, peers, variant: str = ""):
        from pkc.passes.remarks import plan_of
        from pkc.runtime.scheduled import ScheduledKernel

        ck, kop = compile_gemm(M, N, K, variant, layout)
        p = plan_of(kop)
        self.tile = f"{p['bm']}x{p['bn']}_s{p['stages']}" + ("_cl2" if p.get("cluster") == 2 else "")
        self.variant = variant or variant_of(p) or self.tile
        self.peers = peers
        self.k = ScheduledKernel(ck.ptx, ck.meta, peers.device)
        W = peers.world
        self.grid = ck.meta.grid(peers.sms if W == 1 else min(peers.sms_of(r) for r in peers.ranks))

    def __call__(self, a, b, c) -> None:
        from pkc.runtime.scheduled_fused import launch_ranks

        bound = [(r, self.k.pack([a[r], b[r], c[r]])) for r in self.peers.ranks]
        launch_ranks(self.k.kernel, self.grid, self.k.meta.threads, bound, self.peers,
                     self.peers.world)


def run_case(name, M, N, K, variant, layout, rounds: int) -> dict:
    import torch
    from pkc.runtime.scheduled import ScheduledKernel
    from timing import paired, rotated

    ck = compile_ir(M, N, K, variant, layout)
    ir = ScheduledKernel(ck.ptx, ck.meta)
    torch.manual_seed(0)
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    b = w if layout == "nk" else w.t().contiguous()
    bt = w.t() if layout == "nk" else b
    c_ir = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    ir([a, b, c_ir])
    ref = torch.mm(a, bt)
    torch.cuda.synchronize()
    err = float((c_ir.float() - ref.float()).abs().max())
    nan = bool(torch.isnan(c_ir).any())
    # fp32 accumulation in another order than cuBLAS's: within a few bf16 steps of the scale
    tol = 2 ** -6 * float(ref.float().abs().max())
    row = {"case": name, "M": M, "N": N, "K": K, "variant": variant, "layout": layout,
           "nan": nan, "max_abs_vs_cublas": err, "tol": tol, "correct": err <= tol and not nan,
           "bitwise_equal_cublas": bool(torch.equal(c_ir, ref)),
           "registers": ir.kernel.num_regs, "smem": ck.meta.smem_bytes, "grid": ir.grid}
    if not row["correct"]:
        return row                  # no timing of a wrong kernel
    out = torch.empty_like(c_ir)
    fns = [lambda: ir([a, b, out]), lambda: torch.mm(a, bt, out=out)]
    for _ in range(3):
        for f in fns:
            f()
    t = paired(rotated(fns, rounds), ["ir", "cublas"])
    flop = 2 * M * N * K
    row.update(t, tflops_ir=flop / t["us_ir"] / 1e6, tflops_cublas=flop / t["us_cublas"] / 1e6)
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
    rows = run_cases(cases(), lambda c: run_case(*c, rounds=args.rounds),
                     os.path.join(args.out, "gemm_ir.json"),
                     error_row=lambda c: {"case": c[0], "variant": c[4], "layout": c[5]})
    print(f"\n{'case':24} {'variant':18} {'lay':3} {'ok':5} {'=cuBLAS':7} {'IR us':>8} "
          f"{'cuBLAS':>8} {'cuBLAS/IR':>9} {'TFLOP/s':>7}")
    for r in rows:
        if "error" in r:
            print(f"{r['case']:24} {r['variant']:18} {r['layout']:3} ERROR {r['error'][:80]}")
            continue
        print(f"{r['case']:24} {r['variant']:18} {r['layout']:3} {str(r['correct']):5} "
              f"{str(r['bitwise_equal_cublas']):7} {r.get('us_ir', 0):8.1f} "
              f"{r.get('us_cublas', 0):8.1f} {r.get('cublas_over_ir', 0):9.3f} "
              f"{r.get('tflops_ir', 0):7.1f}")


if __name__ == "__main__":
    main()
