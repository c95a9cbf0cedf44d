"""The IR-built all-gather along K + GEMM (graph ``pk.all_gather`` of ``[M, Kc]`` along
dim 1 -> ``pk.matmul`` by ``B [W*Kc, N]`` -> the default pipeline (overlap forced) ->
schedule-fused (pkc/passes/ag_k_schedule.py) -> sm_90a PTX) against the IR-built GEMM
alone of the same per-rank problem (the gathered ``[M, K]`` times B, the same tile), in
the virtual world on one H200. At W = 1 the ratio is the cost of the K-gather machinery
when there is nothing to move (the fused kernel is the GEMM: no put side).

    python benchmarks/fused_ag_k_ir.py --out DIR     # on the GPU machine
    python benchmarks/fused_ag_k_ir.py --list        # the cases, no GPU

Per case: random bf16 shards per rank, one weight; the kernel's C (into a NaN-poisoned
output) against torch (the gathered A times B in f32: within a bf16 step of the scale);
the gathered A (where the IR asks for it; ``[M, K]``, or its slots ``[W*M, Kc]`` where a
row exceeds a put piece) bitwise against the shards; then the fused kernel and the GEMM alone in alternation (``rotated``),
medians and the paired ratio fused / GEMM (``fused_vs_gemm``); C checked again after.
"""

from __future__ import annotations

import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from sweep_common import case_cli, run_cases, virtual_peers  # noqa: E402  (the path above)

# (name, W, M, N, Kc, B layout, gathered): odd shapes (M, N, Kc not multiples of 16 or W;
# N, Kc multiples of 8 for TMA) and the timing shapes
CASES = [
    ("odd W=1", 1, 999, 776, 520, "nk", False),
    ("odd W=2", 2, 999, 776, 264, "kn", False),
    ("odd W=3 G", 3, 1001, 584, 136, "nk", True),
    ("odd W=4", 4, 517, 1048, 184, "nk", False),
    ("8192 W=1", 1, 8192, 8192, 8192, "nk", False),
    ("4096x7168x8192 W=1", 1, 4096, 7168, 8192, "nk", False),
    ("8192x1024x8192 W=1", 1, 8192, 1024, 8192, "nk", False),
    ("8192 W=2", 2, 8192, 8192, 4096, "nk", False),
    ("8192 W=2 G", 2, 8192, 8192, 4096, "nk", True),      # rows of 8 KiB: G written in place
    ("8192 W=4", 4, 8192, 8192, 2048, "nk", False),
]


def module_text(W: int, M: int, N: int, Kc: int, layout: str, gathered: bool = False,
                dt: str = "bf16") -> str:
    """pk.all_gather of a [M, Kc] shard along dim 1, a matmul by B ([N, K] transposed, or
    [K, N]); with ``gathered`` the gathered tensor is a result too (its negation)."""
    K = W * Kc
    ret, gt = f"tensor<{M}x{N}x{dt}>", f"tensor<{M}x{K}x{dt}>"
    wshape = f"tensor<{N}x{K}x{dt}>" if layout == "nk" else f"tensor<{K}x{N}x{dt}>"
    text = (f"func.func @ag_k(%x: tensor<{M}x{Kc}x{dt}>, %w: {wshape}) -> "
            f"({ret}{', ' + gt if gathered else ''}) {{\n"
            f"  %g = pk.all_gather %x {{dim = 1 : i64, world = {W} : i64}} : "
            f"tensor<{M}x{Kc}x{dt}> -> {gt}\n")
    b = "%w"
    if layout == "nk":
        text += f"  %wt = pk.transpose %w {{perm = [1, 0]}} : {wshape} -> tensor<{K}x{N}x{dt}>\n"
        b = "%wt"
    text += f"  %c = pk.matmul %g, {b} : ({gt}, tensor<{K}x{N}x{dt}>) -> {ret}\n"
    if gathered:
        text += (f"  %n = pk.map \"neg\" %g : ({gt}) -> {gt}\n"
                 f"  func.return %c, %n : {ret}, {gt}\n}}\n")
    else:
        text += f"  func.return %c : {ret}\n}}\n"
    return text


def scheduled_module(W: int, M: int, N: int, Kc: int, layout: str, gathered: bool = False,
                     dt: str = "bf16", target: str = "h200"):
    """The module after ``default{force=true}`` (W = 1: ``keep-single-rank``, so that a
    kernel is made), ``schedule-fused``, ``dce``."""
    from pkc.ir import make_context, parse_module, verify_module
    from pkc.passes.registry import parse_pipeline

    m = parse_module(module_text(W, M, N, Kc, layout, gathered, dt), "fused_ag_k_ir.mlir")
    ctx = make_context()
    single = " keep-single-rank=true" if W == 1 else ""
    for p in parse_pipeline(f"default{{force=true target={target}{single}}},"
                            f"schedule-fused{{target={target}}},dce"):
        p.apply(ctx, m)
    verify_module(m)
    return m


def compile_ir(W: int, M: int, N: int, Kc: int, layout: str, gathered: bool = False,
               dt: str = "bf16", target: str = "h200", arch: str = "sm_90a"):
    """(compiled kernel, its pk.kernel) of the IR path for one case."""
    from pkc.codegen import compile_kernel
    from pkc.codegen.emit import kernels_of

    (kop,) = [k for k in kernels_of(scheduled_module(W, M, N, Kc, layout, gathered, dt, target))
              if k.schedule() is not None]
    return compile_kernel(kop, arch), kop


def run_case(name, W, M, N, Kc, layout, gathered, rounds: int, peers) -> dict:
    import torch
    from fused_ir import fused_vs_gemm, gemm_alone
    from pkc.passes.remarks import plan_of
    from pkc.runtime.scheduled_ag import ScheduledAgGemm

    ck, kop = compile_ir(W, M, N, Kc, layout, gathered)
    plan = plan_of(kop)
    ir = ScheduledAgGemm(ck.ptx, ck.meta, peers, owner=("bench-agk", name),
                         timeout_ns=500_000_000)
    K = W * Kc
    torch.manual_seed(0)
    a = [torch.randn(M, Kc, device="cuda", dtype=torch.bfloat16) for _ in range(W)]
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16) / K ** 0.5
    b = [w if layout == "nk" else w.t().contiguous() for _ in range(W)]
    fresh = [torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
             for _ in range(W)]
    res = ir.run(a, b, outs=fresh)
    torch.cuda.synchronize()
    ir.check()
    full = torch.cat(a, dim=1)
    ref = full.float() @ w.float().t()

    def rel_error(res) -> float:
        return max(float((res[r][0].float() - ref).abs().max() / ref.abs().max())
                   for r in range(W))
    err = rel_error(res)
    nan = any(bool(torch.isnan(res[r][0]).any()) for r in range(W))
    # G in its own layout [M, K] (or, rows longer than a put piece, the slots [W*M, Kc])
    want_g = full if plan.get("gathered_layout") == "rows" else torch.cat(a)
    gath_ok = not gathered or all(torch.equal(res[r][1], want_g) for r in range(W))
    tol = 2 ** -7
    row = {"case": name, "W": W, "M": M, "N": N, "Kc": Kc, "K": K, "layout": layout,
           "gathered": gathered, "tile": f"{plan['bm']}x{plan['bn']}_s{plan['stages']}",
           "put_ctas": plan.get("comm_ctas"), "max_rel_err": err, "tol": tol,
           "correct": err <= tol and not nan and gath_ok, "gathered_exact": gath_ok,
           "nan": nan, "grid": ir.grid, "registers": ir.kernel.num_regs}
    if not row["correct"] or rounds <= 0:
        return row
    gemm, g = gemm_alone(kop, M, N, K, layout, peers, [full for _ in range(W)], b)
    fused_vs_gemm(row, [lambda: ir.run(a, b, outs=fresh), gemm], rounds, g)
    torch.cuda.synchronize()
    ir.check()
    row["correct_after_timing"] = rel_error(ir.run(a, b, outs=fresh)) <= tol
    return row


def main() -> None:
    cli = case_cli(__doc__, CASES, "out/fused_ag_k_ir")
    if cli is None:
        return
    args, picked = cli
    rows = run_cases(picked, lambda c: run_case(*c, rounds=args.rounds, peers=virtual_peers(c[1])),
                     os.path.join(args.out, f"fused_ag_k_ir_r{args.rounds}.json"))
    print(f"\n{'case':20} {'W':>2} {'M x N x K':18} {'tile':10} {'put':>3} {'ok':5} "
          f"{'fused us':>8} {'GEMM us':>8} {'fused/GEMM':>10}")
    for r in rows:
        if "error" in r:
            print(f"{r['case']:20} ERROR {r['error'][:100]}")
            continue
        shape = f"{r['M']}x{r['N']}x{r['K']}"
        print(f"{r['case']:20} {r['W']:2} {shape:18} "
              f"{r['tile']:10} {str(r['put_ctas']):>3} "
              f"{str(r['correct'] and r.get('correct_after_timing', False)):5} "
              f"{r.get('us_fused', 0):8.1f} {r.get('us_gemm', 0):8.1f} "
              f"{r.get('fused_over_gemm', 0):10.3f}")


if __name__ == "__main__":
    main()
