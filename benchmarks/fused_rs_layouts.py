"""The IR-built GEMM + reduce-scatter along columns and along dim 1 of a 3-D result
(pkc/passes/fused_rs_layouts.py) on the GPU, in the virtual world (W ranks on W
green-context lanes of one H200): the output of each rank against torch, then the fused
kernel, the row-chunk fused kernel of the same product (benchmarks/fused_ir.py's, where R
divides by W) and the IR-built GEMM alone of the same per-rank problem launched in
alternation (benchmarks/timing.py ``rotated``): medians and the paired ratios fused /
GEMM (the fusion's cost over the GEMM: the goal is <= 1.05) and fused / row kernel (the
layout's cost over the row layout). A bias case (``matmul + bias -> reduce_scatter``, the
bias in the fused kernel's epilogue) is timed against the unfused sequence's compute too:
the GEMM alone, then torch's bias add (``fused_over_unfused``); at W = 1 that is the whole
unfused sequence (no communication).

    python benchmarks/fused_rs_layouts.py --out DIR   # on the GPU machine (xdsl carried)
    python benchmarks/fused_rs_layouts.py --list      # the cases, no GPU
"""

from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from sweep_common import run_cases, virtual_peers  # noqa: E402  (the path above)

# (name, W, lead dims of the result, scattered dim, N, K, B layout, bias): odd shapes
# (rows, N, K not multiples of 16 or of W; chunks of columns multiples of 8 for TMA),
# larger ones, and W = 1 (one rank: the fusion's cost over the GEMM, and for a bias over
# the unfused GEMM + bias add)
CASES = [
    ("cols odd W=2", 2, (998,), 1, 784, 520, "nk", False),
    ("cols odd W=3", 3, (1001,), 1, 600, 392, "kn", False),
    ("cols 3d odd W=4", 4, (4, 517), 2, 1056, 712, "nk", False),
    ("blocks odd W=2", 2, (3, 1024), 1, 776, 520, "nk", False),
    ("blocks odd W=4", 4, (3, 768), 1, 584, 392, "kn", False),
    ("blocks odd rows W=3", 3, (3, 303), 1, 584, 392, "nk", False),    # 101 rows: 3-D maps
    ("bias blocks odd W=2", 2, (2, 202), 1, 264, 136, "kn", True),
    ("bias rows odd W=2", 2, (998,), 0, 776, 520, "kn", True),
    ("bias cols odd W=3", 3, (1001,), 1, 600, 392, "kn", True),
    ("cols 4096 W=2", 2, (4096,), 1, 4096, 4096, "nk", False),
    ("cols 4096 W=4", 4, (4096,), 1, 4096, 4096, "nk", False),
    ("blocks 4096 W=4", 4, (2, 2048), 1, 4096, 4096, "nk", False),
    ("bias rows 4096 W=4", 4, (4096,), 0, 4096, 4096, "kn", True),
    ("cols 4096 W=1", 1, (4096,), 1, 4096, 4096, "nk", False),
    ("bias rows 4096 W=1", 1, (4096,), 0, 4096, 4096, "kn", True),
    ("bias rows odd W=1", 1, (999,), 0, 776, 520, "kn", True),
]


def compile_case(W, lead, dim, N, K, layout, bias=False):
    """(compiled kernel, its pk.kernel) of the scheduled fused kernel of one case (a bias
    case: ``matmul + bias -> reduce_scatter``, B as [K, N])."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "unit"))
    from test_schedule_fused_layouts import bias_text, rs_text, scheduled

    from pkc.codegen import compile_kernel
    from pkc.codegen.emit import kernels_of

    text = bias_text(W, lead, dim, N, K) if bias else rs_text(W, lead, dim, N, K, layout)
    (kop,) = [k for k in kernels_of(scheduled(text)) if k.schedule() is not None]
    return compile_kernel(kop, "sm_90a"), kop


def expected(full, W: int, r: int, sd: int, bt: int):
    """Rank r's chunk of the summed product ``full`` [R, N] under the layout."""
    R, N = full.shape
    if sd == 1:
        return full[:, r * (N // W):(r + 1) * (N // W)]
    return full.reshape(bt, W, R // bt // W, N)[:, r].reshape(-1, N)


def run_case(name, W, lead, dim, N, K, layout, bias, rounds: int, peers) -> dict:
    import torch
    from fused_ir import compile_ir
    from gemm_ir import LaneGemm, variant_of
    from timing import paired, rotated

    from pkc.passes.remarks import plan_of
    from pkc.runtime.scheduled_fused import ScheduledFused

    assert not bias or layout == "kn", "bias cases take B as [K, N]"
    ck, kop = compile_case(W, lead, dim, N, K, layout, bias)
    plan = plan_of(kop)
    sd, bt = plan["scatter_dim"], plan["batches"]
    ir = ScheduledFused(ck.ptx, ck.meta, peers, owner=("layouts", name), timeout_ns=500_000_000)
    R = 1
    for d in lead:
        R *= d
    torch.manual_seed(0)
    a = [torch.randn(R, K, device="cuda", dtype=torch.bfloat16) for _ in range(W)]
    w = [torch.randn(N, K, device="cuda", dtype=torch.bfloat16) / K ** 0.5 for _ in range(W)]
    b = [wi if layout == "nk" else wi.t().contiguous() for wi in w]
    ins = [a, b]
    if bias:
        bvec = [torch.randn(1, N, device="cuda", dtype=torch.bfloat16) for _ in range(W)]
        ins += [[v.reshape(N) for v in bvec], [torch.ones(1, device="cuda")] * W]
    outs = ir.run(*ins)
    torch.cuda.synchronize()
    ir.check()
    full = sum(a[r].float() @ w[r].float().t() + (bvec[r].float() if bias else 0)
               for r in range(W))
    tol = 2 ** -6 * float(full.abs().max()) * W

    def errors(res):
        return [float((res[r].float() - expected(full, W, r, sd, bt)).abs().max())
                for r in range(W)]
    errs = errors(outs)
    row = {"case": name, "W": W, "lead": list(lead), "dim": dim, "N": N, "K": K,
           "layout": layout, "scatter_dim": sd, "batches": bt, "bias": bias,
           "tile": f"{plan['bm']}x{plan['bn']}_s{plan['stages']}", "max_abs_err": max(errs),
           "tol": tol, "correct": max(errs) <= tol, "grid": ir.grid,
           "registers": ir.kernel.num_regs}
    if not row["correct"]:
        return row
    g = LaneGemm(R, N, K, layout, peers, variant_of(plan))
    c = {r: torch.empty(R, N, device=peers.device, dtype=torch.bfloat16) for r in peers.ranks}
    fns, names = [lambda: ir.run(*ins), lambda: g(a, b, c)], ["fused", "gemm"]
    if bias:            # the unfused sequence's compute: the GEMM, then the bias add
        def unfused():
            g(a, b, c)
            for r in peers.ranks:
                c[r].add_(bvec[r])
        fns.append(unfused)
        names.append("gemm_bias")
    elif R % W == 0 and W > 1:   # the row-chunk kernel of the same product: the layout's cost
        ck_rows, kop_rows = compile_ir(W, R // W, N, K, layout)
        rows = ScheduledFused(ck_rows.ptx, ck_rows.meta, peers, owner=("layouts-rows", name))
        fresh = bool(plan_of(kop_rows).get("fresh_output"))
        keep = ({r: torch.empty(R // W, N, device="cuda", dtype=torch.bfloat16)
                 for r in range(W)} if fresh else None)
        fns.append(lambda: rows.run(a, b, out=keep))
        names.append("rows")
    for _ in range(3):
        for fn in fns:
            fn()
    row.update(paired(rotated(fns, rounds), names, base=1), gemm_variant=g.variant)
    if "us_rows" in row:
        row["fused_over_rows"] = row["us_fused"] / row["us_rows"]
    if "us_gemm_bias" in row:
        row["fused_over_unfused"] = row["us_fused"] / row["us_gemm_bias"]
    torch.cuda.synchronize()
    ir.check()
    row["correct_after_timing"] = max(errors(ir.run(*ins))) <= tol
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out/fused_rs_layouts")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--only", default="", help="run the cases whose name contains this")
    args = ap.parse_args()
    if args.list:
        for c in CASES:
            print(*c)
        return
    rows = run_cases([c for c in CASES if args.only in c[0]],
                     lambda c: run_case(*c, rounds=args.rounds, peers=virtual_peers(c[1])),
                     os.path.join(args.out, "fused_rs_layouts.json"))
    print(f"\n{'case':20} {'W':>2} {'tile':12} {'ok':5} {'fused us':>8} {'GEMM us':>8} "
          f"{'rows us':>8} {'fused/GEMM':>10} {'fused/rows':>10} {'fused/GEMM+bias':>15}")
    for r in rows:
        if "error" in r:
            print(f"{r['case']:20} ERROR {r['error'][:100]}")
            continue
        print(f"{r['case']:20} {r['W']:2} {r['tile']:12} "
              f"{str(r['correct'] and r.get('correct_after_timing', False)):5} "
              f"{r.get('us_fused', 0):8.1f} {r.get('us_gemm', 0):8.1f} {r.get('us_rows', 0):8.1f} "
              f"{r.get('fused_over_gemm', 0):10.3f} {r.get('fused_over_rows', 0):10.3f} "
              f"{r.get('fused_over_unfused', 0):15.3f}")


if __name__ == "__main__":
    main()
