"""The IR-built fused all-gather + GEMM (graph pk.all_gather -> pk.matmul -> the default
pipeline (overlap forced) -> schedule-fused -> sm_90a lowering -> PTX) against the
IR-built GEMM alone of the same per-rank problem (the gathered ``[W*Mc, K]`` times the
rank's B, the same tile, every rank's GEMM on its lane: what the fusion costs over the
GEMM), in the virtual world on one H200 (W ranks on W green-context lanes of one GPU). At
W = 1 the ratio is the cost of the all-gather machinery when there is nothing to move.

    python benchmarks/fused_ag_ir.py --out DIR     # on the GPU machine (xdsl carried as wheels)
    python benchmarks/fused_ag_ir.py --list        # the cases, no GPU

Per case: random bf16 shards per rank and a weight per rank; the IR kernel's C (into a
NaN-poisoned output) against torch (the gathered A times B in f32, rounded once: within a
bf16 step of the scale); the gathered A (where the IR asks for it) bitwise against the
concatenated shards; then the fused kernel and the GEMM alone launched in alternation,
``rounds`` rounds, each behind a ``torch.cuda._sleep``, the order rotated every round
(benchmarks/timing.py ``rotated``); medians and the paired ratio fused / GEMM; C checked
again after the timed launches.
"""

from __future__ import annotations

import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sweep_common import case_cli, run_cases, virtual_peers  # noqa: E402  (the path above)

# (name, W, Mc, N, K, layout, gathered): odd shapes (Mc, N, K not multiples of 16 or of W;
# N, K multiples of 8 for TMA) and larger ones (PK's AG + GEMM N x N/8 x N shapes per rank)
CASES = [
    ("odd W=1", 1, 999, 776, 520, "nk", False),
    ("odd W=2", 2, 999, 776, 520, "nk", False),
    ("odd W=3 G", 3, 1001, 584, 392, "kn", True),
    ("odd W=4", 4, 517, 1048, 712, "nk", False),
    ("8192 W=1", 1, 8192, 8192, 8192, "nk", False),
    ("4096x1024 W=2", 2, 2048, 1024, 4096, "nk", False),
    ("8192x1024 W=4", 4, 2048, 1024, 8192, "nk", False),
    ("8192 W=2", 2, 4096, 8192, 8192, "nk", False),
    ("8192 W=4 G", 4, 2048, 8192, 8192, "nk", True),
    ("llama70b-up W=4", 4, 1024, 7168, 8192, "nk", False),   # T=4096, TP-8 up+gate per rank
    # the W = 1 AG + GEMM shapes of the earlier fused_w1.py (PK's N x N/8 x N)
    ("4096x512 W=1", 1, 4096, 512, 4096, "nk", False),
    ("8192x1024 W=1", 1, 8192, 1024, 8192, "nk", False),
    ("16384x2048 W=1", 1, 16384, 2048, 16384, "nk", False),
]


def module_text(W: int, Mc: int, N: int, K: int, layout: str, gathered: bool = False,
                dt: str = "bf16") -> str:
    """pk.all_gather of a [Mc, K] shard, a matmul by B ([N, K] transposed, or [K, N]);
    with ``gathered`` the gathered tensor is a result too (its negation: the IR needs it)."""
    M = W * Mc
    ret = f"tensor<{M}x{N}x{dt}>"
    head = "func.func @ag_mm(%x: tensor<{}x{}x{}>, %w: tensor<{}x{}x{}>) -> ({}{}) {{\n"
    wshape = (N, K) if layout == "nk" else (K, N)
    text = head.format(Mc, K, dt, *wshape, dt, ret, f", tensor<{M}x{K}x{dt}>" if gathered else "")
    text += (f"  %g = pk.all_gather %x {{dim = 0 : i64, world = {W} : i64}} : "
             f"tensor<{Mc}x{K}x{dt}> -> tensor<{M}x{K}x{dt}>\n")
    b = "%w"
    if layout == "nk":
        text += (f"  %wt = pk.transpose %w {{perm = [1, 0]}} : tensor<{N}x{K}x{dt}> -> "
                 f"tensor<{K}x{N}x{dt}>\n")
        b = "%wt"
    text += (f"  %c = pk.matmul %g, {b} : (tensor<{M}x{K}x{dt}>, tensor<{K}x{N}x{dt}>) -> "
             f"{ret}\n")
    if gathered:
        text += (f"  %n = pk.map \"neg\" %g : (tensor<{M}x{K}x{dt}>) -> tensor<{M}x{K}x{dt}>\n"
                 f"  func.return %c, %n : {ret}, tensor<{M}x{K}x{dt}>\n}}\n")
    else:
        text += f"  func.return %c : {ret}\n}}\n"
    return text


def scheduled_module(W: int, Mc: int, N: int, K: int, layout: str, gathered: bool = False,
                     dt: str = "bf16", variant: str = ""):
    """The module after ``default{force=true, keep-single-rank}`` (W = 1: the all-gather of
    one rank kept, so that a kernel is made), ``schedule-fused``, ``dce``."""
    from pkc.ir import make_context, parse_module, verify_module
    from pkc.passes.registry import parse_pipeline

    m = parse_module(module_text(W, Mc, N, K, layout, gathered, dt), "fused_ag_ir.mlir")
    opt = f"{{variant={variant}}}" if variant else ""
    ctx = make_context()
    pipe = "default{force=true keep-single-rank=true}" if W == 1 else "default{force=true}"
    for p in parse_pipeline(f"{pipe},schedule-fused{opt},dce"):
        p.apply(ctx, m)
    verify_module(m)
    return m


def compile_ir(W: int, Mc: int, N: int, K: int, layout: str, gathered: bool = False,
               dt: str = "bf16", variant: str = ""):
    """(compiled kernel, its pk.kernel) of the IR path for one case."""
    from pkc.codegen import compile_kernel
    from pkc.codegen.emit import kernels_of

    kops = [k for k in kernels_of(scheduled_module(W, Mc, N, K, layout, gathered, dt, variant))
            if k.schedule() is not None]
    (kop,) = kops
    return compile_kernel(kop, "sm_90a"), kop


def run_case(name, W, Mc, N, K, layout, gathered, rounds: int, peers) -> dict:
    import torch
    from fused_ir import fused_vs_gemm, gemm_alone
    from pkc.passes.remarks import plan_of
    from pkc.runtime.scheduled_ag import ScheduledAgGemm

    ck, kop = compile_ir(W, Mc, N, K, layout, gathered)
    plan = plan_of(kop)
    ir = ScheduledAgGemm(ck.ptx, ck.meta, peers, owner=("bench-ag", name), timeout_ns=500_000_000)
    torch.manual_seed(0)
    a = [torch.randn(Mc, K, device="cuda", dtype=torch.bfloat16) for _ in range(W)]
    w = [torch.randn(N, K, device="cuda", dtype=torch.bfloat16) / K ** 0.5 for _ in range(W)]
    b = [wi if layout == "nk" else wi.t().contiguous() for wi in w]
    fresh = [torch.full((W * Mc, N), float("nan"), device="cuda", dtype=torch.bfloat16)
             for _ in range(W)]
    res = ir.run(a, b, outs=fresh)
    torch.cuda.synchronize()
    ir.check()
    full = torch.cat(a).float()
    refs = [full @ w[r].float().t() for r in range(W)]

    def rel_errors(res):
        return [float((res[r][0].float() - refs[r]).abs().max() / refs[r].abs().max())
                for r in range(W)]
    errs = rel_errors(res)
    nan = any(bool(torch.isnan(res[r][0]).any()) for r in range(W))
    gath_ok = not gathered or all(torch.equal(res[r][1], torch.cat(a)) for r in range(W))
    tol = 2 ** -7
    row = {"case": name, "W": W, "Mc": Mc, "N": N, "K": K, "layout": layout,
           "gathered": gathered, "tile": f"{plan['bm']}x{plan['bn']}_s{plan['stages']}",
           "put_ctas": plan.get("comm_ctas"), "max_rel_err": max(errs), "tol": tol,
           "correct": max(errs) <= tol and not nan and gath_ok, "gathered_exact": gath_ok,
           "nan": nan, "grid": ir.grid, "registers": ir.kernel.num_regs}
    if not row["correct"]:
        return row
    # the GEMM alone: each rank's gathered A (the same for all) times its B
    a_full = [torch.cat(a) for _ in range(W)]
    gemm, g = gemm_alone(kop, W * Mc, N, K, layout, peers, a_full, b)
    fused_vs_gemm(row, [lambda: ir.run(a, b, outs=fresh), gemm], rounds, g)
    torch.cuda.synchronize()
    ir.check()
    row["correct_after_timing"] = max(rel_errors(ir.run(a, b, outs=fresh))) <= tol
    return row


def main() -> None:
    cli = case_cli(__doc__, CASES, "out/fused_ag_ir")
    if cli is None:
        return
    args, picked = cli
    rows = run_cases(picked, lambda c: run_case(*c, rounds=args.rounds, peers=virtual_peers(c[1])),
                     os.path.join(args.out, f"fused_ag_ir_r{args.rounds}.json"), trace=True)
    print(f"\n{'case':14} {'W':>2} {'Mc x N x K':18} {'tile':10} {'put':>3} {'ok':5} "
          f"{'fused us':>8} {'GEMM us':>8} {'fused/GEMM':>10}")
    for r in rows:
        if "error" in r:
            print(f"{r['case']:14} ERROR {r['error'][:100]}")
            continue
        print(f"{r['case']:14} {r['W']:2} {str(r['Mc']) + 'x' + str(r['N']) + 'x' + str(r['K']):18} "
              f"{r['tile']:10} {str(r['put_ctas']):>3} "
              f"{str(r['correct'] and r.get('correct_after_timing', False)):5} "
              f"{r.get('us_fused', 0):8.1f} {r.get('us_gemm', 0):8.1f} "
              f"{r.get('fused_over_gemm', 0):10.3f}")


if __name__ == "__main__":
    main()
