"""The fused fp8 all-gathers along K and of blocks of rows (DTensor ``Shard(1)``) on one
H200: each fused kernel against the unfused sequence of the same product - pkc's fp8 GEMM
alone (schedule-matmul's kernel) and torch._scaled_mm (cuBLASLt, use_fast_accum=True) -
at W = 1, where the gather of one rank is the identity (the fused kernel's own cost over
the GEMM: its producer's shard walk, its block tiling, its epilogue); at W = 2 in the
virtual world (both ranks on this GPU, each on its lane of SMs) the outputs are checked and
the fused kernel is timed against pkc's fp8 GEMM of each rank's whole product on the same
lanes (the two ranks share the GPU, so these are not multi-GPU times).

    python benchmarks/fp8_gather_kinds.py --out DIR      # on the GPU machine
    python benchmarks/fp8_gather_kinds.py --list

Per case: random fp8 shards, weight B^T [N, K] (e4m3), f32 scales (row-wise: A's [M, 1]
and B's [1, N]; tensor-wise: [1]); the output against torch._scaled_mm of the gathered A
(within 2^-6 of its largest value); times: CUDA events after warm-up, medians of rounds
in rotated order (benchmarks/timing.py). JSON under DIR, a table last.
"""

from __future__ import annotations

import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from sweep_common import case_cli, compile_scheduled, run_cases, virtual_peers  # noqa: E402  (the path above)

E4 = "f8E4M3FN"
# (name, kind: agk (gather along K; M, N, K: the gathered product, Kc = K / W) or agb
# (B blocks of rows; M = B x S rows, K = H), W, M, N, K, B, row-wise scales)
CASES = [
    ("agk 4096x8192x7168 row", "agk", 1, 4096, 8192, 7168, 1, True),
    ("agk 4096x8192x3584 row", "agk", 1, 4096, 8192, 3584, 1, True),
    ("agk 4096x8192x7168 tensor", "agk", 1, 4096, 8192, 7168, 1, False),
    ("agb B2 4096x3584x8192 row", "agb", 1, 4096, 3584, 8192, 2, True),
    ("agb B2 4096x3584x8192 tensor", "agb", 1, 4096, 3584, 8192, 2, False),
    ("agk W2 4096x8192x7168 row", "agk", 2, 4096, 8192, 7168, 1, True),
    ("agk W4 4096x8192x7168 row", "agk", 4, 4096, 8192, 7168, 1, True),
    ("agb W2 B2 4096x3584x8192 row", "agb", 2, 4096, 3584, 8192, 2, True),
    ("agb W2 B2 4096x3584x8192 tensor", "agb", 2, 4096, 3584, 8192, 2, False),
    ("agb W4 B2 4096x3584x8192 row", "agb", 4, 4096, 3584, 8192, 2, True),
    ("agb W2 odd B3 3x2x333x1040x2000 row", "agb", 2, 3 * 2 * 333, 1040, 2000, 3, True),
]


def module_text(kind: str, W: int, M: int, N: int, K: int, B: int, row: bool) -> str:
    """``_scaled_mm(gather(x), w.t(), sa, sb)``: ``agk`` gathers x [M, K/W] along its last
    dim (sa: the gathered rows' [M, 1], an input); ``agb`` gathers x [B, S/W, K] along dim 1
    and views it [M, K] (sa: the same gather of the shard's [B, S/W, 1] scale, viewed)."""
    sb = f"1x{N}" if row else "1"
    wt = (f"  %wt = pk.transpose %w {{perm = [1, 0]}} : tensor<{N}x{K}x{E4}> -> "
          f"tensor<{K}x{N}x{E4}>\n")
    sa_t = f"tensor<{M}x1xf32>" if row else "tensor<1xf32>"
    mm = (f"  %y = pk.scaled_matmul %a, %wt scales(%sa, %sb) : (tensor<{M}x{K}x{E4}>, "
          f"tensor<{K}x{N}x{E4}>, {sa_t}, tensor<{sb}xf32>) -> tensor<{M}x{N}xbf16>\n")
    if kind == "agk":
        Kc = K // W
        return (f"func.func @main(%x: tensor<{M}x{Kc}x{E4}>, %w: tensor<{N}x{K}x{E4}>, "
                f"%sa: {sa_t}, %sb: tensor<{sb}xf32>) -> tensor<{M}x{N}xbf16> {{\n{wt}"
                f"  %a = pk.all_gather %x {{dim = 1 : i64, world = {W} : i64}} : "
                f"tensor<{M}x{Kc}x{E4}> -> tensor<{M}x{K}x{E4}>\n{mm}"
                f"  func.return %y : tensor<{M}x{N}xbf16>\n}}\n")
    S = M // B
    Sc = S // W
    x, g = f"tensor<{B}x{Sc}x{K}x{E4}>", f"tensor<{B}x{S}x{K}x{E4}>"
    ss = f"tensor<{B}x{Sc}x1xf32>" if row else "tensor<1xf32>"
    gs = (f"  %gs = pk.all_gather %ss {{dim = 1 : i64, world = {W} : i64}} : {ss} -> "
          f"tensor<{B}x{S}x1xf32>\n  %sa = pk.reshape %gs : tensor<{B}x{S}x1xf32> -> "
          f"{sa_t}\n") if row else ""
    return (f"func.func @main(%x: {x}, %w: tensor<{N}x{K}x{E4}>, %ss: {ss}, "
            f"%sb: tensor<{sb}xf32>) -> tensor<{M}x{N}xbf16> {{\n{wt}"
            f"  %g = pk.all_gather %x {{dim = 1 : i64, world = {W} : i64}} : {x} -> {g}\n"
            f"  %a = pk.reshape %g : {g} -> tensor<{M}x{K}x{E4}>\n{gs}"
            + (mm if row else mm.replace("scales(%sa,", "scales(%ss,")) +
            f"  func.return %y : tensor<{M}x{N}xbf16>\n}}\n")


def compile_fused(kind, W, M, N, K, B, row):
    """(compiled kernel, its pk.kernel) of the fused kernel (default, schedule-fused)."""
    return compile_scheduled(module_text(kind, W, M, N, K, B, row), "fp8_gather_kinds.mlir")


def gathered(kind: str, W: int, B: int, xs: list, ss: list):
    """(the gathered A [M, K], its scale) from the ranks' shards as the kernel takes them
    (agk: [M, Kc]; agb: [B*Sc, K] views of [B, Sc, K], scales [B*Sc, 1])."""
    import torch

    if kind == "agk":
        return torch.cat(xs, dim=1), ss[0]
    K = xs[0].shape[1]
    a = torch.cat([x.view(B, -1, K) for x in xs], dim=1).reshape(-1, K)
    if ss[0].numel() == 1:
        return a, ss[0]
    return a, torch.cat([s.view(B, -1, 1) for s in ss], dim=1).reshape(-1, 1)


def lane_gemm(gck, peers, a, w, sa, sb, M: int, N: int):
    """A launcher of pkc's fp8 GEMM (compiled ``gck``) of the whole gathered product on
    every rank's lane of the virtual world at once, each into its own C."""
    import torch

    from pkc.runtime.scheduled import ScheduledKernel
    from pkc.runtime.scheduled_fused import launch_ranks

    k = ScheduledKernel(gck.ptx, gck.meta, peers.device)
    grid = gck.meta.grid(min(peers.sms_of(r) for r in peers.ranks))
    cs = [torch.empty(M, N, device="cuda", dtype=torch.bfloat16) for _ in peers.ranks]
    bound = [(r, k.pack([a, w, sa, sb, cs[i]])) for i, r in enumerate(peers.ranks)]
    return lambda: launch_ranks(k.kernel, grid, k.meta.threads, bound, peers, peers.world)


def run_case(name, kind, W, M, N, K, B, row, rounds: int) -> dict:
    import torch
    from fp8_gemm import compile_fp8, fp8_inputs, torch_scaled_mm
    from timing import paired, rotated

    from pkc.passes.remarks import plan_of
    from pkc.runtime.scheduled import ScheduledKernel
    from pkc.runtime.scheduled_ag import ScheduledAgGemm

    ck, kop = compile_fused(kind, W, M, N, K, B, row)
    p = plan_of(kop)
    peers = virtual_peers(W)
    fused = ScheduledAgGemm(ck.ptx, ck.meta, peers, owner=("fp8-gather", name),
                            timeout_ns=500_000_000)
    a, w, sa, sb, _ = fp8_inputs(M, N, K, row)
    if kind == "agk":       # rank r: columns r*Kc.. of every row; the rows' scale whole
        Kc = K // W
        xs = [a[:, r * Kc:(r + 1) * Kc].contiguous() for r in range(W)]
        ss = [sa] * W
    else:                   # rank r: rows r*Sc.. of each of the B blocks (and their scales)
        S, K_ = M // B, K
        Sc = S // W
        xs = [a.view(B, S, K_)[:, r * Sc:(r + 1) * Sc].reshape(-1, K_).contiguous()
              for r in range(W)]
        ss = ([sa.view(B, S, 1)[:, r * Sc:(r + 1) * Sc].reshape(-1, 1).contiguous()
               for r in range(W)] if row else [sa] * W)
    full, sfull = gathered(kind, W, B, xs, ss)
    assert torch.equal(full.view(torch.uint8), a.view(torch.uint8))
    run = lambda: fused.run(xs, [w] * W, ss, [sb] * W)  # noqa: E731
    outs = run()
    torch.cuda.synchronize()
    fused.check()
    ref = torch_scaled_mm(full, w, sfull, sb)
    tol = 2 ** -6 * float(ref.float().abs().max())
    err = max(float((outs[r][0].float() - ref.float()).abs().max()) for r in range(W))
    nan = any(bool(torch.isnan(outs[r][0]).any()) for r in range(W))
    row_ = {"case": name, "kind": kind, "W": W, "M": M, "N": N, "K": K, "B": B,
            "row_wise": row, "kernel": kop.kernel_name.data,
            "tile": f"{p['bm']}x{p['bn']}_s{p['stages']}", "put_ctas": p.get("comm_ctas"),
            "max_abs_vs_torch": err, "tol": tol, "correct": err <= tol and not nan,
            "registers": fused.kernel.num_regs, "grid": fused.grid}
    if not row_["correct"] or rounds <= 0:
        return row_
    fns, names = [run], ["fused"]
    gck, _ = compile_fp8(M, N, K, row)
    if W == 1:
        gemm = ScheduledKernel(gck.ptx, gck.meta)
        c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        fns += [lambda: gemm([a, w, sa, sb, c]),
                lambda: torch_scaled_mm(a, w, sa, sb, fast=True)]
        names += ["gemm", "torch"]
    else:   # the fp8 GEMM alone of each rank's whole product, on its lane (as the fused)
        fns.append(lane_gemm(gck, peers, a, w, sa, sb, M, N))
        names.append("gemm")
    for _ in range(3):
        for f in fns:
            f()
    t = paired(rotated(fns, rounds), names)
    row_.update(t)
    row_.update(fused_over_gemm=t["us_fused"] / t["us_gemm"])
    if W == 1:
        row_.update(fused_over_torch=t["us_fused"] / t["us_torch"])
    outs = run()
    torch.cuda.synchronize()
    fused.check()
    row_["correct_after_timing"] = max(float((outs[r][0].float() - ref.float()).abs().max())
                                       for r in range(W)) <= tol
    return row_


def main() -> None:
    cli = case_cli(__doc__, CASES, "out/fp8_gather_kinds", rounds=20)
    if cli is None:
        return
    args, picked = cli
    rows = run_cases(picked, lambda c: run_case(*c, rounds=args.rounds),
                     os.path.join(args.out, f"fp8_gather_kinds_r{args.rounds}.json"), trace=True)
    print(f"\n{'case':36} {'ok':5} {'fused us':>8} {'GEMM us':>8} {'torch us':>8} "
          f"{'f/GEMM':>6} {'f/torch':>7}")
    for r in rows:
        if "error" in r:
            print(f"{r['case']:36} ERROR {r['error'][:90]}")
            continue
        ok = r["correct"] and r.get("correct_after_timing", False)
        print(f"{r['case']:36} {str(ok):5} {r.get('us_fused', 0):8.1f} "
              f"{r.get('us_gemm', 0):8.1f} {r.get('us_torch', 0):8.1f} "
              f"{r.get('fused_over_gemm', 0):6.3f} {r.get('fused_over_torch', 0):7.3f}")


if __name__ == "__main__":
    main()
