"""The IR-built fused GEMM + reduce-scatter (graph pk.matmul -> pk.reduce_scatter -> the
default pipeline (overlap forced) -> schedule-fused -> sm_90a lowering -> PTX) against the
IR-built GEMM alone of the same per-rank problem (``[W*Mc, K] x [K, N]``, the same tile,
every rank's GEMM on its lane: what the fusion costs over the GEMM), in the virtual world
on one H200 (W ranks on W green-context lanes of one GPU).

    python benchmarks/fused_ir.py --out DIR       # on the GPU machine (xdsl carried as wheels)
    python benchmarks/fused_ir.py --list          # the cases, no GPU

Per case: random bf16 operands per rank; the IR kernel's output (each rank's reduced
chunk, in the symmetric output) against torch (the f32 sum of the ranks' products,
rounded once; tolerance: a few bf16 steps of the result's scale, since the partials are
rounded to bf16 and added in arrival order at W > 2), a fresh output NaN-poisoned first;
then the fused kernel and the GEMM alone launched in alternation, ``rounds`` rounds, each
behind a ``torch.cuda._sleep``, the order rotated every round (benchmarks/timing.py
``rotated``); medians and the paired ratio fused / GEMM (> 1: the fusion's cost); the
result checked again after the timed launches.
"""

from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sweep_common import run_cases, virtual_peers  # noqa: E402  (the path above)

# (name, W, Mc, N, K, layout): odd shapes (Mc, N, K not multiples of 16 or of W; N, K
# multiples of 8 for TMA) and two larger ones
CASES = [
    ("odd W=2", 2, 999, 776, 520, "nk"),
    ("odd W=3", 3, 1001, 584, 392, "nk"),
    ("odd W=4", 4, 517, 1048, 712, "kn"),
    ("odd W=3 kn", 3, 333, 264, 136, "kn"),
    ("4096 W=2", 2, 2048, 4096, 4096, "nk"),
    ("4096 W=4", 4, 1024, 4096, 4096, "nk"),
]


def module_text(W: int, Mc: int, N: int, K: int, layout: str, dt: str = "bf16") -> str:
    M = W * Mc
    rs = (f"  %o = pk.reduce_scatter %c {{dim = 0 : i64, reduce = \"sum\", world = {W} : i64}} : "
          f"tensor<{M}x{N}x{dt}> -> tensor<{Mc}x{N}x{dt}>\n  func.return %o : tensor<{Mc}x{N}x{dt}>\n}}\n")
    if layout == "nk":
        return (f"func.func @mm_rs(%x: tensor<{M}x{K}x{dt}>, %w: tensor<{N}x{K}x{dt}>) -> tensor<{Mc}x{N}x{dt}> {{\n"
                f"  %wt = pk.transpose %w {{perm = [1, 0]}} : tensor<{N}x{K}x{dt}> -> tensor<{K}x{N}x{dt}>\n"
                f"  %c = pk.matmul %x, %wt : (tensor<{M}x{K}x{dt}>, tensor<{K}x{N}x{dt}>) -> tensor<{M}x{N}x{dt}>\n"
                + rs)
    return (f"func.func @mm_rs(%x: tensor<{M}x{K}x{dt}>, %w: tensor<{K}x{N}x{dt}>) -> tensor<{Mc}x{N}x{dt}> {{\n"
            f"  %c = pk.matmul %x, %w : (tensor<{M}x{K}x{dt}>, tensor<{K}x{N}x{dt}>) -> tensor<{M}x{N}x{dt}>\n"
            + rs)


def scheduled_module(W: int, Mc: int, N: int, K: int, layout: str, dt: str = "bf16",
                     variant: str = "", deterministic: bool = False):
    """The module after ``default{force=true},schedule-fused,dce`` (with the tile
    ``variant`` and the fixed add order of ``deterministic`` where given)."""
    from pkc.ir import make_context, parse_module, verify_module
    from pkc.passes.registry import parse_pipeline

    m = parse_module(module_text(W, Mc, N, K, layout, dt), "fused_ir.mlir")
    opts = [f"variant={variant}"] * bool(variant) + ["deterministic=true"] * deterministic
    opt = "{" + " ".join(opts) + "}" if opts else ""
    ctx = make_context()
    for p in parse_pipeline(f"default{{force=true}},schedule-fused{opt},dce"):
        p.apply(ctx, m)
    verify_module(m)
    return m


def compile_ir(W: int, Mc: int, N: int, K: int, layout: str, dt: str = "bf16", variant: str = "",
               deterministic: bool = False):
    """(compiled kernel, its pk.kernel) of the IR path for one case."""
    from pkc.codegen import compile_kernel
    from pkc.codegen.emit import kernels_of

    kops = [k for k in kernels_of(scheduled_module(W, Mc, N, K, layout, dt, variant, deterministic))
            if k.schedule() is not None]
    (kop,) = kops
    return compile_kernel(kop, "sm_90a"), kop


def gemm_config_of(kop):
    """The GEMM tile of a scheduled fused kernel (its pk.plan), as a GemmConfig."""
    from pkc.passes.remarks import plan_of
    from pkc.target.gemm_tuning import GemmConfig

    p = plan_of(kop)
    return GemmConfig(bm=p["bm"], bn=p["bn"], stages=p["stages"], consumers=p["consumers"],
                      group_m=p["group_m"], b_layout=p["b_layout"])


def gemm_alone(kop, M: int, N: int, K: int, layout: str, peers, a, b):
    """(launcher, LaneGemm) of the IR-built GEMM alone of a fused kernel's per-rank problem
    (``[M, K] x B``, the fused kernel's tile), into one C per rank allocated once."""
    import torch
    from gemm_ir import LaneGemm, variant_of
    from pkc.passes.remarks import plan_of

    g = LaneGemm(M, N, K, layout, peers, variant_of(plan_of(kop)))
    c = {r: torch.empty(M, N, device=peers.device, dtype=torch.bfloat16) for r in peers.ranks}
    return (lambda: g(a, b, c)), g


def fused_vs_gemm(row: dict, fns: list, rounds: int, g) -> None:
    """Warm up, time ``fns`` = [fused, GEMM alone] in alternation, record into ``row``."""
    from timing import paired, rotated

    for _ in range(3):
        for fn in fns:
            fn()
    row.update(paired(rotated(fns, rounds), ["fused", "gemm"], base=1),
               gemm_variant=g.variant, gemm_grid=g.grid)


def run_case(name, W, Mc, N, K, layout, rounds: int, peers) -> dict:
    import torch
    from pkc.passes.remarks import plan_of
    from pkc.runtime.scheduled_fused import ScheduledFused

    ck, kop = compile_ir(W, Mc, N, K, layout)
    cfg = gemm_config_of(kop)
    ir = ScheduledFused(ck.ptx, ck.meta, peers, owner=("bench", name), timeout_ns=500_000_000)
    fresh = bool(plan_of(kop).get("fresh_output"))     # W = 2: into a fresh output
    torch.manual_seed(0)
    M = W * Mc
    a = [torch.randn(M, K, device="cuda", dtype=torch.bfloat16) for _ in range(W)]
    w = [torch.randn(N, K, device="cuda", dtype=torch.bfloat16) / K ** 0.5 for _ in range(W)]
    b = [wi if layout == "nk" else wi.t().contiguous() for wi in w]
    keep = ({r: torch.full((Mc, N), float("nan"), device="cuda", dtype=torch.bfloat16)
             for r in range(W)} if fresh else None)
    outs = ir.run(a, b, out=keep)
    torch.cuda.synchronize()
    ir.check()
    full = sum(a[r].float() @ w[r].float().t() for r in range(W))
    scale = float(full.abs().max())
    tol = 2 ** -6 * scale * W          # bf16: each of W roundings a step of the scale

    def errors(res):
        return [float((res[r].float() - full[r * Mc:(r + 1) * Mc]).abs().max()) for r in range(W)]
    errs = errors(outs)
    nan = any(bool(torch.isnan(outs[r]).any()) for r in range(W))
    row = {"case": name, "W": W, "Mc": Mc, "N": N, "K": K, "layout": layout,
           "tile": f"{cfg.bm}x{cfg.bn}_s{cfg.stages}", "fresh_output": fresh,
           "max_abs_err": max(errs), "tol": tol, "correct": (max(errs) <= tol) and not nan,
           "nan": nan, "grid": ir.grid, "registers": ir.kernel.num_regs}
    if not row["correct"]:
        return row                  # no timing of a wrong kernel
    gemm, g = gemm_alone(kop, M, N, K, layout, peers, a, b)
    fused_vs_gemm(row, [lambda: ir.run(a, b, out=keep), gemm], rounds, g)
    torch.cuda.synchronize()
    ir.check()
    # correct after the timed launches too (epochs advanced, persistent buffers reused)
    row["correct_after_timing"] = max(errors(ir.run(a, b, out=keep))) <= tol
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out/fused_ir")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args()
    if args.list:
        for c in CASES:
            print(*c)
        return
    os.makedirs(args.out, exist_ok=True)
    rows = run_cases(CASES, lambda c: run_case(*c, rounds=args.rounds, peers=virtual_peers(c[1])),
                     os.path.join(args.out, "fused_ir.json"))
    print(f"\n{'case':14} {'W':>2} {'Mc x N x K':18} {'lay':3} {'tile':12} {'ok':5} "
          f"{'fused us':>8} {'GEMM us':>8} {'fused/GEMM':>10}")
    for r in rows:
        if "error" in r:
            print(f"{r['case']:14} ERROR {r['error'][:100]}")
            continue
        print(f"{r['case']:14} {r['W']:2} {str(r['Mc']) + 'x' + str(r['N']) + 'x' + str(r['K']):18} "
              f"{r['layout']:3} {r['tile']:12} {str(r['correct'] and r.get('correct_after_timing', False)):5} "
              f"{r.get('us_fused', 0):8.1f} {r.get('us_gemm', 0):8.1f} "
              f"{r.get('fused_over_gemm', 0):10.3f}")


if __name__ == "__main__":
    main()
