"""The IR-built fused GEMM + reduce-scatter (graph pk.matmul -> pk.reduce_scatter -> the
default pipeline (overlap forced) -> schedule-fused -> sm_90a lowering -> PTX) against the
hand-written kernel it replaces (``GemmRsKernel``, the same tile), in the virtual world on
one H200 (W ranks on W green-context lanes of one GPU).

    python benchmarks/fused_ir.py --out DIR       # on the GPU machine (xdsl carried as wheels)
    python benchmarks/fused_ir.py --list          # the cases, no GPU

Per case: random bf16 operands per rank; the IR kernel's output (each rank's reduced
chunk, in the symmetric output) against torch (the f32 sum of the ranks' products,
rounded once; tolerance: a few bf16 steps of the result's scale, since the partials are
rounded to bf16 and added in arrival order at W > 2) and bitwise against the hand kernel
(equal at W <= 2, where the own store and one add give one order); then both launched in
alternation, ``rounds`` rounds, each behind a ``torch.cuda._sleep``, the order rotated
every round (as benchmarks/gemm_ir.py); medians and the paired ratio hand / IR.
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
                     variant: str = ""):
    """The module after ``default{force=true},schedule-fused,dce``."""
    from pkc.ir import make_context, parse_module, verify_module
    from pkc.passes.registry import parse_pipeline

    m = parse_module(module_text(W, Mc, N, K, layout, dt), "fused_ir.mlir")
    opt = f"{{variant={variant}}}" if variant else ""
    ctx = make_context()
    for p in parse_pipeline(f"default{{force=true}},schedule-fused{opt},dce"):
        p.apply(ctx, m)
    verify_module(m)
    return m


def compile_ir(W: int, Mc: int, N: int, K: int, layout: str, dt: str = "bf16", variant: str = ""):
    """(compiled kernel, its pk.kernel) of the IR path for one case."""
    from pkc.codegen import compile_kernel
    from pkc.codegen.emit import kernels_of

    kops = [k for k in kernels_of(scheduled_module(W, Mc, N, K, layout, dt, variant))
            if k.schedule() is not None]
    (kop,) = kops
    return compile_kernel(kop, "sm_90a"), kop


def gemm_config_of(kop):
    """The GEMM tile of a scheduled fused kernel (its pk.plan), as the hand kernel's config."""
    from pkc.passes.remarks import plan_of
    from pkc.target.gemm_tuning import GemmConfig

    p = plan_of(kop)
    return GemmConfig(bm=p["bm"], bn=p["bn"], stages=p["stages"], consumers=p["consumers"],
                      group_m=p["group_m"], b_layout=p["b_layout"])


def _time(fns, rounds: int) -> list[list[float]]:
    from gemm_ir import _time as t
    return t(fns, rounds)


def run_case(name, W, Mc, N, K, layout, rounds: int, peers) -> dict:
    import torch
    from pkc.codegen.hopper.fused import FusedConfig, FusedWorld
    from pkc.passes.remarks import plan_of
    from pkc.runtime.scheduled_fused import ScheduledFused

    ck, kop = compile_ir(W, Mc, N, K, layout)
    cfg = gemm_config_of(kop)
    ir = ScheduledFused(ck.ptx, ck.meta, peers, owner=("bench", name), timeout_ns=500_000_000)
    fresh = bool(plan_of(kop).get("fresh_output"))     # W = 2: GemmRsOutKernel's variant
    hand = FusedWorld(FusedConfig(kind="rs", world=W, gemm=cfg, out=fresh), Mc, N, K,
                      peers=peers, owner=("bench-hand", name), sig_timeout_ns=500_000_000)
    torch.manual_seed(0)
    M = W * Mc
    a = [torch.randn(M, K, device="cuda", dtype=torch.bfloat16) for _ in range(W)]
    w = [torch.randn(N, K, device="cuda", dtype=torch.bfloat16) / K ** 0.5 for _ in range(W)]
    b = [wi if layout == "nk" else wi.t().contiguous() for wi in w]
    outs = ir.run({r: a[r] for r in range(W)}, {r: b[r] for r in range(W)})
    houts = hand.run(a, b)
    torch.cuda.synchronize()
    ir.check()
    hand.check()
    full = sum(a[r].float() @ w[r].float().t() for r in range(W))
    scale = float(full.abs().max())
    errs, hand_eq, nan = [], True, False
    for r in range(W):
        ref = full[r * Mc:(r + 1) * Mc]
        got = outs[r].float()
        nan = nan or bool(torch.isnan(got).any())
        errs.append(float((got - ref).abs().max()))
        hand_eq = hand_eq and bool(torch.equal(outs[r], houts[r]))
    tol = 2 ** -6 * scale * W          # bf16: each of W roundings a step of the scale
    row = {"case": name, "W": W, "Mc": Mc, "N": N, "K": K, "layout": layout,
           "tile": f"{cfg.bm}x{cfg.bn}_s{cfg.stages}", "max_abs_err": max(errs),
           "tol": tol, "correct": (max(errs) <= tol) and not nan, "nan": nan,
           "bitwise_equal_hand": hand_eq, "grid": ir.grid, "hand_grid": hand.grid,
           "registers": ir.kernel.num_regs}
    if not row["correct"]:
        return row                  # no timing of a wrong kernel
    for _ in range(3):
        ir.run(a, b)
        hand.run(a, b)
    t_ir, t_hand = _time([lambda: ir.run(a, b), lambda: hand.run(a, b)], rounds)
    torch.cuda.synchronize()
    ir.check()
    hand.check()
    med = [statistics.median(t) for t in (t_ir, t_hand)]
    row.update({"us_ir": med[0] * 1e6, "us_hand": med[1] * 1e6,
                "hand_over_ir": statistics.median(h / i for i, h in zip(t_ir, t_hand))})
    # correct after the timed launches too (epochs advanced, persistent buffers reused)
    outs = ir.run(a, b)
    torch.cuda.synchronize()
    row["correct_after_timing"] = all(
        float((outs[r].float() - full[r * Mc:(r + 1) * Mc]).abs().max()) <= tol for r in range(W))
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
    from pkc.runtime.peers import VirtualPeers

    os.makedirs(args.out, exist_ok=True)
    rows, worlds = [], {}
    for c in CASES:
        try:
            W = c[1]
            peers = worlds.get(W) or worlds.setdefault(W, VirtualPeers(W))
            row = run_case(*c, rounds=args.rounds, peers=peers)
        except Exception as e:      # one failing case must not hide the others
            row = {"case": c[0], "error": f"{type(e).__name__}: {e}"}
        rows.append(row)
        print(json.dumps(row), flush=True)
    with open(os.path.join(args.out, "fused_ir.json"), "w") as f:
        json.dump(rows, f, indent=1)
    print(f"\n{'case':14} {'W':>2} {'Mc x N x K':18} {'lay':3} {'tile':12} {'ok':5} {'=hand':5} "
          f"{'IR us':>8} {'hand us':>8} {'hand/IR':>7}")
    for r in rows:
        if "error" in r:
            print(f"{r['case']:14} ERROR {r['error'][:100]}")
            continue
        print(f"{r['case']:14} {r['W']:2} {str(r['Mc']) + 'x' + str(r['N']) + 'x' + str(r['K']):18} "
              f"{r['layout']:3} {r['tile']:12} {str(r['correct'] and r.get('correct_after_timing', False)):5} "
              f"{str(r['bitwise_equal_hand']):5} {r.get('us_ir', 0):8.1f} {r.get('us_hand', 0):8.1f} "
              f"{r.get('hand_over_ir', 0):7.3f}")


if __name__ == "__main__":
    main()
