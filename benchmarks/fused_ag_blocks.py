"""The IR-built all-gather + GEMM of a gather along dim 1 (DTensor sequence parallelism,
``Shard(1)`` with B sequences: x_r [B, S/W, H] -all_gather(dim 1)-> [B, S, H] -> view
[B*S, H] -> matmul; pkc/passes/ag_blocks_schedule.py) on the GPU, in the virtual world
(W ranks on W green-context lanes of one H200), against torch, and its time against the
IR-built GEMM alone of the same per-rank problem (the gathered [B*S, H] times the rank's
weight, the same tile), at W >= 2 against the IR-built all-gather + GEMM of contiguous
row shards of the same sizes (``fused_ag_ir``: what the block layout costs over the row
gather; both give the GEMM's lanes' SMs to the same number of put CTAs) and, at W = 1,
against the unfused torch sequence (the gather's split -> cat copy of [B, S, H], then
torch.matmul).

    python benchmarks/fused_ag_blocks.py --out DIR     # on the GPU machine
    python benchmarks/fused_ag_blocks.py --list        # the cases, no GPU

Per case: random bf16 shards and a weight per rank; C (into a NaN-poisoned output)
against torch (the gathered x times the weight in f32: within a bf16 step of the scale);
the gathered G (where the IR asks for it) bitwise against torch.cat(shards, dim=1); then
the timed launches (benchmarks/timing.py ``rotated``: each round behind a sleep, the order
rotated), C checked again after them.
"""

from __future__ import annotations

import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sweep_common import case_cli, run_cases, virtual_peers  # noqa: E402  (the path above)

# (name, W, B, Sc, N, H, gathered): odd shapes (Sc no multiple of the tile, N and H
# multiples of 8, not 16) and one layer-sized case per W for the time
CASES = [
    ("odd W=1 B=2", 1, 2, 333, 776, 520, False),
    ("odd W=2 B=2 G", 2, 2, 97, 584, 392, True),
    ("odd W=2 B=3", 2, 3, 131, 776, 520, False),
    ("odd W=4 B=3 G", 4, 3, 61, 1048, 712, True),
    ("odd W=4 B=2", 4, 2, 200, 584, 392, False),
    # Llama-70B TP-8 up projection per rank (F/W = 3584), 2 x 4096 tokens, H = 8192
    ("llama70b-up W=1 B=2", 1, 2, 4096, 3584, 8192, False),
    ("llama70b-up W=2 B=2", 2, 2, 2048, 3584, 8192, False),
    ("llama70b-up W=4 B=2", 4, 2, 1024, 3584, 8192, False),
    # blocks of 1000 rows: each padded to 1024 (8 tiles), 2.4% more GEMM rows
    ("pad W=2 B=4", 2, 4, 1000, 3584, 8192, False),
]


def module_text(W: int, B: int, Sc: int, N: int, H: int, gathered: bool = False,
                dt: str = "bf16") -> str:
    """pk.all_gather of x [B, Sc, H] along dim 1, its [B*S, H] view times w [H, N]; with
    ``gathered`` the gathered [B, S, H] is a result too."""
    S = W * Sc
    x, g, v = (f"tensor<{B}x{Sc}x{H}x{dt}>", f"tensor<{B}x{S}x{H}x{dt}>",
               f"tensor<{B * S}x{H}x{dt}>")
    y, w = f"tensor<{B * S}x{N}x{dt}>", f"tensor<{H}x{N}x{dt}>"
    rets = [("%y", y)] + ([("%g", g)] if gathered else [])
    return (f"func.func @ag_blocks(%x: {x}, %w: {w}) -> ({', '.join(t for _, t in rets)}) {{\n"
            f"  %g = pk.all_gather %x {{dim = 1 : i64, world = {W} : i64}} : {x} -> {g}\n"
            f"  %v = pk.reshape %g : {g} -> {v}\n"
            f"  %y = pk.matmul %v, %w : ({v}, {w}) -> {y}\n"
            f"  func.return {', '.join(n for n, _ in rets)} : "
            f"{', '.join(t for _, t in rets)}\n}}\n")


def scheduled_module(W: int, B: int, Sc: int, N: int, H: int, gathered: bool = False,
                     target: str = "h200"):
    """The module after ``default{force=true}`` (W = 1: ``keep-single-rank``, so that a
    kernel is made), ``schedule-fused``, ``dce``."""
    from pkc.ir import make_context, parse_module, verify_module
    from pkc.passes.registry import parse_pipeline

    m = parse_module(module_text(W, B, Sc, N, H, gathered), "fused_ag_blocks.mlir")
    keep = " keep-single-rank=true" if W == 1 else ""
    ctx = make_context()
    for p in parse_pipeline(f"default{{force=true{keep} target={target}}},"
                            f"schedule-fused{{target={target}}},dce"):
        p.apply(ctx, m)
    verify_module(m)
    return m


def compile_case(W: int, B: int, Sc: int, N: int, H: int, gathered: bool = False,
                 arch: str = "sm_90a"):
    """(compiled kernel, its pk.kernel) of the IR path for one case."""
    from pkc.codegen import compile_kernel
    from pkc.codegen.emit import kernels_of

    target = "h200" if arch == "sm_90a" else "b200"
    (kop,) = [k for k in kernels_of(scheduled_module(W, B, Sc, N, H, gathered, target))
              if k.schedule() is not None]
    return compile_kernel(kop, arch), kop


def run_case(name, W, B, Sc, N, H, gathered, rounds: int, peers) -> dict:
    import torch
    from fused_ir import gemm_alone
    from pkc.passes.remarks import plan_of
    from pkc.runtime.scheduled_ag import ScheduledAgGemm

    ck, kop = compile_case(W, B, Sc, N, H, gathered)
    plan = plan_of(kop)
    ir = ScheduledAgGemm(ck.ptx, ck.meta, peers, owner=("bench-ag-blocks", name),
                         timeout_ns=500_000_000)
    torch.manual_seed(0)
    x = [torch.randn(B, Sc, H, device="cuda", dtype=torch.bfloat16) for _ in range(W)]
    w = [torch.randn(H, N, device="cuda", dtype=torch.bfloat16) / H ** 0.5 for _ in range(W)]
    a = [xi.reshape(B * Sc, H) for xi in x]
    M = B * W * Sc
    fresh = [torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
             for _ in range(W)]
    res = ir.run(a, w, outs=fresh)
    torch.cuda.synchronize()
    ir.check()
    full = torch.cat(x, dim=1).reshape(M, H)
    refs = [full.float() @ w[r].float() for r in range(W)]

    def rel_errors(res):
        return [float((res[r][0].float() - refs[r]).abs().max() / refs[r].abs().max())
                for r in range(W)]
    errs = rel_errors(res)
    nan = any(bool(torch.isnan(res[r][0]).any()) for r in range(W))
    gath_ok = not gathered or all(torch.equal(res[r][1], full) for r in range(W))
    tol = 2 ** -7
    row = {"case": name, "W": W, "B": B, "Sc": Sc, "N": N, "H": H, "gathered": gathered,
           "tile": f"{plan['bm']}x{plan['bn']}_s{plan['stages']}",
           "batches": plan.get("batches", 1), "put_ctas": plan.get("comm_ctas"),
           "max_rel_err": max(errs), "tol": tol,
           "correct": max(errs) <= tol and not nan and gath_ok, "gathered_exact": gath_ok,
           "nan": nan, "grid": ir.grid, "registers": ir.kernel.num_regs}
    if not row["correct"] or rounds <= 0:
        return row
    a_full = [full for _ in range(W)]
    gemm, g = gemm_alone(kop, M, N, H, "kn", peers, a_full, w)
    fns = [lambda: ir.run(a, w, outs=fresh), gemm]
    if W == 1:      # the unfused torch sequence: the gather's split -> cat copy, then mm
        out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        fns.append(lambda: torch.mm(torch.cat(torch.split(x[0], Sc, dim=1), dim=1)
                                    .view(M, H), w[0], out=out))
        other = "torch_unfused"
    else:           # the row gather of the same sizes (its rows in another order)
        from fused_ag_ir import compile_ir

        rck, rkop = compile_ir(W, B * Sc, N, H, "kn")
        rows = ScheduledAgGemm(rck.ptx, rck.meta, peers, owner=("bench-ag-rows", name),
                               timeout_ns=500_000_000)
        rout = [torch.empty(M, N, device="cuda", dtype=torch.bfloat16) for _ in range(W)]
        fns.append(lambda: rows.run(a, w, outs=rout))
        other = "rows"
        row["rows_put_ctas"] = plan_of(rkop).get("comm_ctas")
    from timing import paired, rotated

    for _ in range(3):
        for fn in fns:
            fn()
    row.update(paired(rotated(fns, rounds), ["fused", "gemm", other], base=0),
               gemm_variant=g.variant)
    row["fused_over_gemm"] = 1 / row.pop("gemm_over_fused")
    row[f"fused_over_{other}"] = 1 / row.pop(f"{other}_over_fused")
    torch.cuda.synchronize()
    ir.check()
    row["correct_after_timing"] = max(rel_errors(ir.run(a, w, outs=fresh))) <= tol
    return row


def main() -> None:
    cli = case_cli(__doc__, CASES, "out/fused_ag_blocks")
    if cli is None:
        return
    args, picked = cli
    rows = run_cases(picked, lambda c: run_case(*c, rounds=args.rounds,
                                                peers=virtual_peers(c[1])),
                     os.path.join(args.out, f"fused_ag_blocks_r{args.rounds}.json"))
    print(f"\n{'case':22} {'ok':5} {'fused us':>9} {'GEMM us':>9} {'fused/GEMM':>10} "
          f"{'fused/torch':>11} {'fused/rows':>10}")
    for r in rows:
        if "error" in r:
            print(f"{r['case']:22} ERROR {r['error'][:100]}")
            continue
        print(f"{r['case']:22} {str(r['correct'] and r.get('correct_after_timing', True)):5} "
              f"{r.get('us_fused', 0):9.1f} {r.get('us_gemm', 0):9.1f} "
              f"{r.get('fused_over_gemm', 0):10.3f} {r.get('fused_over_torch_unfused', 0):11.3f} "
              f"{r.get('fused_over_rows', 0):10.3f}")


if __name__ == "__main__":
    main()
