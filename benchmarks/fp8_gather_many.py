"""Several fp8 scaled matmuls of one all-gather as ONE kernel (pkc/passes/gather_many.py:
every weight's column tiles in one tile space, each tile's B map, C map and B scale
selected by its weight) on one H200, against the unfused sequence of the same products:
torch._scaled_mm per weight (cuBLASLt; use_fast_accum=True, which is what the wgmma kernel
does, and the default) and pkc's fp8 GEMM per weight (schedule-matmul's kernel). W = 1:
the gather of one rank is the identity, so this is the fused kernel's own cost (its
padded tile space, the selects) against the separate GEMMs; W = 2 (virtual world, both
ranks on this GPU): outputs checked only.

    python benchmarks/fp8_gather_many.py --out DIR      # on the GPU machine
    python benchmarks/fp8_gather_many.py --list

Per case: random fp8 A [M, K] e4m3 and weights B_i^T [N_i, K] e4m3, f32 scales (row-wise:
A's [M, 1], B_i's [1, N_i]; tensor-wise [1]); every output (into NaN-poisoned buffers)
against torch._scaled_mm of the gathered A (within 2^-6 of its largest value); times: CUDA
events after warm-up, medians of rounds in rotated order (benchmarks/timing.py); checked
again after timing. JSON under DIR, a table last.
"""

from __future__ import annotations

import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from sweep_common import case_cli, compile_scheduled, run_cases, virtual_peers  # noqa: E402  (the path above)

E4 = "f8E4M3FN"
QKV = (1024, 128, 128)      # q, k, v of a 70B-like layer per rank (K = 8192)
# (name, W, M (gathered rows), K, widths, row-wise scales)
CASES = [
    ("qkv 2048 row W=1", 1, 2048, 8192, QKV, True),
    ("qkv 2048 tensor W=1", 1, 2048, 8192, QKV, False),
    ("qkv 4096 row W=1", 1, 4096, 8192, QKV, True),
    ("odd W=2 row", 2, 2 * 333, 1040, (208, 48, 96), True),
    ("odd W=2 tensor", 2, 2 * 333, 1040, (208, 48), False),
]


def module_text(W: int, M: int, K: int, ns, row: bool) -> str:
    """``_scaled_mm(gather(x), w_i.t(), sa, sb_i)`` for each weight; row-wise: A's scale
    is the same gather of the shard's [M / W, 1] scale."""
    Mc = M // W
    sa_t = f"tensor<{M}x1xf32>" if row else "tensor<1xf32>"
    ss = f"tensor<{Mc}x1xf32>" if row else "tensor<1xf32>"
    args = [f"%x: tensor<{Mc}x{K}x{E4}>", f"%ss: {ss}"]
    args += [f"%w{i}: tensor<{n}x{K}x{E4}>" for i, n in enumerate(ns)]
    sbs = [f"tensor<1x{n}xf32>" if row else "tensor<1xf32>" for n in ns]
    args += [f"%sb{i}: {t}" for i, t in enumerate(sbs)]
    body = (f"  %a = pk.all_gather %x {{dim = 0 : i64, world = {W} : i64}} : "
            f"tensor<{Mc}x{K}x{E4}> -> tensor<{M}x{K}x{E4}>\n")
    body += (f"  %sa = pk.all_gather %ss {{dim = 0 : i64, world = {W} : i64}} : {ss} -> "
             f"{sa_t}\n") if row else ""
    rets = []
    for i, (n, sb) in enumerate(zip(ns, sbs)):
        body += (f"  %t{i} = pk.transpose %w{i} {{perm = [1, 0]}} : tensor<{n}x{K}x{E4}> -> "
                 f"tensor<{K}x{n}x{E4}>\n"
                 f"  %y{i} = pk.scaled_matmul %a, %t{i} scales({'%sa' if row else '%ss'}, "
                 f"%sb{i}) : (tensor<{M}x{K}x{E4}>, tensor<{K}x{n}x{E4}>, {sa_t}, {sb}) -> "
                 f"tensor<{M}x{n}xbf16>\n")
        rets.append(f"tensor<{M}x{n}xbf16>")
    return (f"func.func @main({', '.join(args)}) -> ({', '.join(rets)}) {{\n{body}"
            f"  func.return {', '.join(f'%y{i}' for i in range(len(ns)))} : "
            f"{', '.join(rets)}\n}}\n")


def compile_fused(W, M, K, ns, row):
    """(compiled kernel, its pk.kernel): default (forced; W = 1 keeps the single rank's
    kernel), schedule-fused, dce."""
    single = " keep-single-rank=true" if W == 1 else ""
    return compile_scheduled(module_text(W, M, K, ns, row), "fp8_gather_many.mlir",
                             f"default{{force=true{single}}},schedule-fused,dce")


def run_case(name, W, M, K, ns, row, rounds: int) -> dict:
    import torch
    from fp8_gemm import compile_fp8, fp8_inputs, torch_scaled_mm
    from timing import paired, rotated

    from pkc.passes.remarks import plan_of
    from pkc.runtime.scheduled import ScheduledKernel
    from pkc.runtime.scheduled_ag import ScheduledAgGemm

    ck, kop = compile_fused(W, M, K, ns, row)
    p = plan_of(kop)
    peers = virtual_peers(W)
    fused = ScheduledAgGemm(ck.ptx, ck.meta, peers, owner=("fp8-gather-many", name),
                            timeout_ns=500_000_000)
    a, _, sa, _, _ = fp8_inputs(M, 16, K, row, seed=0)
    ws, sbs = [], []
    for i, n in enumerate(ns):
        _, w, _, sb, _ = fp8_inputs(16, n, K, row, seed=1 + i)
        ws.append(w)
        sbs.append(sb)
    Mc = M // W
    xs = [a[r * Mc:(r + 1) * Mc].contiguous() for r in range(W)]
    ss = [sa[r * Mc:(r + 1) * Mc].contiguous() for r in range(W)] if row else [sa] * W
    cs = [[torch.full((M, n), float("nan"), device="cuda", dtype=torch.bfloat16) for n in ns]
          for _ in range(W)]
    rest = [[w] * W for w in ws[1:]] + [ss] + [[sb] * W for sb in sbs]
    run = lambda: fused.run(xs, [ws[0]] * W, *rest, outs=cs)  # noqa: E731
    refs = [torch_scaled_mm(a, w, sa, sb) for w, sb in zip(ws, sbs)]

    def error() -> tuple[float, bool]:
        outs = run()
        torch.cuda.synchronize()
        fused.check()
        ok, worst = True, 0.0
        for i, ref in enumerate(refs):
            tol = 2 ** -6 * float(ref.float().abs().max())
            for r in range(W):
                got = outs[r][i].float()
                e = float((got - ref.float()).abs().max())
                worst = max(worst, e / max(tol, 1e-30))
                ok = ok and e <= tol and not bool(torch.isnan(got).any())
        return worst, ok
    worst, ok = error()
    row_ = {"case": name, "W": W, "M": M, "K": K, "ns": list(ns), "row_wise": row,
            "tile": f"{p['bm']}x{p['bn']}_s{p['stages']}", "weights": p.get("weights"),
            "err_over_tol": worst, "correct": ok, "registers": fused.kernel.num_regs,
            "grid": fused.grid}
    if not ok or rounds <= 0 or W != 1:
        return row_
    fns, names = [run], ["fused"]
    gemms = []
    for n, w, sb in zip(ns, ws, sbs):
        gck, _ = compile_fp8(M, n, K, row)
        c = torch.empty(M, n, device="cuda", dtype=torch.bfloat16)
        gemms.append((ScheduledKernel(gck.ptx, gck.meta), [a, w, sa, sb, c]))
    tout = [torch.empty(M, n, device="cuda", dtype=torch.bfloat16) for n in ns]

    def pkc_gemms():
        for k, args in gemms:
            k(args)

    def torch_fast():
        for i, (w, sb) in enumerate(zip(ws, sbs)):
            torch_scaled_mm(a, w, sa, sb, out=tout[i], fast=True)

    def torch_default():
        for i, (w, sb) in enumerate(zip(ws, sbs)):
            torch_scaled_mm(a, w, sa, sb, out=tout[i])
    fns += [pkc_gemms, torch_fast, torch_default]
    names += ["gemms", "torch", "torch_slow"]
    for _ in range(3):
        for f in fns:
            f()
    t = paired(rotated(fns, rounds), names)
    row_.update(t)
    row_.update(fused_over_gemms=t["us_fused"] / t["us_gemms"],
                fused_over_torch=t["us_fused"] / t["us_torch"])
    row_["correct_after_timing"] = error()[1]
    return row_


def main() -> None:
    cli = case_cli(__doc__, CASES, "out/fp8_gather_many", rounds=30)
    if cli is None:
        return
    args, picked = cli
    rows = run_cases(picked, lambda c: run_case(*c, rounds=args.rounds),
                     os.path.join(args.out, f"fp8_gather_many_r{args.rounds}.json"), trace=True)
    print(f"\n{'case':22} {'tile':10} {'ok':5} {'fused us':>8} {'GEMMs us':>8} {'torch us':>8} "
          f"{'slow us':>8} {'f/GEMMs':>7} {'f/torch':>7}")
    for r in rows:
        if "error" in r:
            print(f"{r['case']:22} ERROR {r['error'][:90]}")
            continue
        ok = r["correct"] and r.get("correct_after_timing", r["W"] > 1)
        print(f"{r['case']:22} {r['tile']:10} {str(ok):5} {r.get('us_fused', 0):8.1f} "
              f"{r.get('us_gemms', 0):8.1f} {r.get('us_torch', 0):8.1f} "
              f"{r.get('us_torch_slow', 0):8.1f} {r.get('fused_over_gemms', 0):7.3f} "
              f"{r.get('fused_over_torch', 0):7.3f}")


if __name__ == "__main__":
    main()
