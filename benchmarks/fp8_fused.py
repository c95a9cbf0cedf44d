"""The fused fp8 kinds (overlap + schedule-fused: the scheduled fp8 GEMM with the scales in
its epilogue) against the unfused sequence, at W = 1 on one H200, in one run: GEMM +
reduce-scatter (pk.scaled_matmul -> pk.reduce_scatter), GEMM + all-reduce (-> pk.all_reduce)
and all-gather + GEMM with A's row-wise scale (pk.all_gather of A and of its scale ->
pk.scaled_matmul). At W = 1 the collective of one rank is the GEMM's output (or input):
the fused kernel's cost over the plain fp8 GEMM is its epilogue's and protocol's own.

    python benchmarks/fp8_fused.py --out DIR      # on the GPU machine (xdsl as wheels)
    python benchmarks/fp8_fused.py --list

Per case: random fp8 A [M, K], B^T [N, K], f32 scales; the fused kernel's output against
torch._scaled_mm (cuBLASLt); then three launchers timed in alternation (benchmarks/timing.py
``rotated`` / ``paired``): the fused kernel, pkc's fp8 GEMM alone (schedule-matmul's kernel
of the same product), torch._scaled_mm (use_fast_accum=True, the same accumulation). ``fused_over_gemm`` (<= 1.05 is the goal) and
``fused_over_torch``. JSON under DIR, a table last.
"""

from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from sweep_common import compile_scheduled, run_cases  # noqa: E402  (the path above)

# (name, W, M, N, K, row-wise scales, kind: rs (GEMM + reduce-scatter), ar (+ all-reduce),
# ag (all-gather + GEMM, A's row-wise scale gathered with A; M: the gathered rows))
CASES = [
    ("8192^3 row", 1, 8192, 8192, 8192, True, "rs"),
    ("4096^3 tensor", 1, 4096, 4096, 4096, False, "rs"),
    ("16384x8192x4096 row", 1, 16384, 8192, 4096, True, "rs"),
    ("8192x1280x8192 tensor", 1, 8192, 1280, 8192, False, "rs"),
    ("ar 8192^3 row", 1, 8192, 8192, 8192, True, "ar"),
    ("ar 4096^3 tensor", 1, 4096, 4096, 4096, False, "ar"),
    ("ar 8192x1280x8192 row", 1, 8192, 1280, 8192, True, "ar"),
    ("ag 8192^3 row", 1, 8192, 8192, 8192, True, "ag"),
    ("ag 4096^3 row", 1, 4096, 4096, 4096, True, "ag"),
    ("ag 16384x8192x4096 row", 1, 16384, 8192, 4096, True, "ag"),
]


def module_text(W: int, M: int, N: int, K: int, row: bool, kind: str = "rs") -> str:
    """``reduce_scatter`` / ``all_reduce`` of ``_scaled_mm(a, w.t(), sa, sb)`` over W ranks
    (row chunks), or ``_scaled_mm(all_gather(a), w.t(), all_gather(sa), sb)`` (``ag``:
    a [M / W, K] shard and its scale rows)."""
    sa, sb = (f"{M}x1", f"1x{N}") if row else ("1", "1")
    e4 = "f8E4M3FN"
    wt = (f"  %wt = pk.transpose %w {{perm = [1, 0]}} : tensor<{N}x{K}x{e4}> -> "
          f"tensor<{K}x{N}x{e4}>")
    mm = (f"pk.scaled_matmul %a, %wt scales(%sa, %sb) : (tensor<{M}x{K}x{e4}>, "
          f"tensor<{K}x{N}x{e4}>, tensor<{sa}xf32>, tensor<{sb}xf32>) -> tensor<{M}x{N}xbf16>")
    if kind == "ag":
        Ms = M // W
        ssa = f"{Ms}x1" if row else "1"
        gs = (f'  %sa = pk.all_gather %ss {{dim = 0 : i64, world = {W} : i64}} : '
              f'tensor<{Ms}x1xf32> -> tensor<{M}x1xf32>\n' if row else "")
        return f"""
func.func @main(%x: tensor<{Ms}x{K}x{e4}>, %w: tensor<{N}x{K}x{e4}>, %ss: tensor<{ssa}xf32>, %sb: tensor<{sb}xf32>) -> tensor<{M}x{N}xbf16> {{
{wt}
  %a = pk.all_gather %x {{dim = 0 : i64, world = {W} : i64}} : tensor<{Ms}x{K}x{e4}> -> tensor<{M}x{K}x{e4}>
{gs}  %y = {mm if row else mm.replace("scales(%sa,", "scales(%ss,")}
  func.return %y : tensor<{M}x{N}xbf16>
}}"""
    rows = M // W if kind == "rs" else M
    coll = (f'pk.reduce_scatter %c {{dim = 0 : i64, reduce = "sum", world = {W} : i64}}'
            if kind == "rs" else f'pk.all_reduce %c {{reduce = "sum", world = {W} : i64}}')
    return f"""
func.func @main(%a: tensor<{M}x{K}x{e4}>, %w: tensor<{N}x{K}x{e4}>, %sa: tensor<{sa}xf32>, %sb: tensor<{sb}xf32>) -> tensor<{rows}x{N}xbf16> {{
{wt}
  %c = {mm}
  %o = {coll} : tensor<{M}x{N}xbf16> -> tensor<{rows}x{N}xbf16>
  func.return %o : tensor<{rows}x{N}xbf16>
}}"""


def compile_fused(W, M, N, K, row, kind: str = "rs", variant: str = ""):
    """(compiled kernel, its pk.kernel) of the fused fp8 kernel (``variant``: a forced
    GEMM tile of schedule-fused)."""
    pipe = ("default{force=true},schedule-fused" + (f"{{variant={variant}}}" if variant else "")
            + ",dce")
    return compile_scheduled(module_text(W, M, N, K, row, kind), "fp8_fused.mlir", pipe)


def run_case(name, W, M, N, K, row, kind, rounds: int, other: str = "",
             sustained_s: float = 0.0) -> dict:
    """One case; ``other``: further fused kernels on those forced tiles (comma-separated;
    ``fused2``, ``fused3``, ...), timed in the same rounds;
    ``sustained_s``: each launcher also back to back for that long (timing.sustained:
    the board at its power limit) -> ``sustained`` rows."""
    import torch
    from collectives_ir import peers as make_peers
    from fp8_gemm import compile_fp8, fp8_inputs, torch_scaled_mm
    from timing import paired, rotated

    from pkc.passes.remarks import plan_of
    from pkc.runtime.scheduled import ScheduledKernel
    from pkc.runtime.scheduled_ag import ScheduledAgGemm
    from pkc.runtime.scheduled_fused import ScheduledFused

    peers = make_peers(W)
    cls = ScheduledAgGemm if kind == "ag" else ScheduledFused
    a, w, sa, sb, _ = fp8_inputs(M, N, K, row)
    ref = torch_scaled_mm(a, w, sa, sb)
    tol = 2 ** -6 * float(ref.float().abs().max())

    def load(variant: str = ""):
        """(the fused kernel on ``variant``'s tile, its plan, its tile label, its max
        error against torch or inf where it left a NaN) after one launch."""
        ck, kop = compile_fused(W, M, N, K, row, kind, variant)
        p = plan_of(kop)
        k = cls(ck.ptx, ck.meta, peers, owner=("fp8", name, variant), timeout_ns=500_000_000)
        outs = k.run([a], [w], [sa], [sb])
        torch.cuda.synchronize()
        k.check()
        got = outs[0][0] if kind == "ag" else outs[0]
        err = (float("inf") if bool(torch.isnan(got).any())
               else float((got.float() - ref.float()).abs().max()))
        tile = (f"{p['bm']}x{p['bn']}_s{p['stages']}" + ("_pp" if p.get("pingpong") else "")
                + ("_cl2" if ck.meta.cluster == 2 else ""))
        return k, kop, p, tile, err

    fused, kop, p, tile, err = load()
    row_ = {"case": name, "kind": kind, "kernel": kop.kernel_name.data, "W": W, "M": M,
            "N": N, "K": K, "row_wise": row, "tile": tile, "max_abs_vs_torch": err,
            "tol": tol, "correct": err <= tol, "registers": fused.kernel.num_regs,
            "grid": fused.grid}
    if not row_["correct"]:
        return row_
    gck, _ = compile_fp8(M, N, K, row)
    gemm = ScheduledKernel(gck.ptx, gck.meta)
    c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    fns = [lambda: fused.run([a], [w], [sa], [sb]), lambda: gemm([a, w, sa, sb, c]),
           lambda: torch_scaled_mm(a, w, sa, sb, fast=True)]
    names = ["fused", "gemm", "torch"]
    for i, variant in enumerate(v for v in other.split(",") if v):
        f2, _, _, tile2, err2 = load(variant)
        tag = f"fused{i + 2}"
        row_[f"tile_{tag}"], row_[f"correct_{tag}"] = tile2, err2 <= tol
        fns.append(lambda f2=f2: f2.run([a], [w], [sa], [sb]))
        names.append(tag)
    row_["pingpong"] = bool(p.get("pingpong"))
    for _ in range(3):
        for f in fns:
            f()
    t = paired(rotated(fns, rounds), names, base=2)     # ratios over torch
    row_.update(t, fused_over_gemm=t["us_fused"] / t["us_gemm"],
                fused_over_torch=t["us_fused"] / t["us_torch"])
    if sustained_s:
        from timing import sustained
        row_["sustained"] = {n: sustained(f, sustained_s) for n, f in zip(names, fns)}
        st = row_["sustained"]
        for n in names:
            if n.startswith("fused"):
                row_[f"sustained_{n}_over_torch"] = st[n]["us"] / st["torch"]["us"]
    torch.cuda.synchronize()
    fused.check()
    return row_


# the all-gather + GEMM at W > 1 in the virtual world, A's row-wise scale (gathered with A by
# the put side) against the tensor-wise kernel of the same shape: what moving the scale
# rows costs; W = 1 (no put side: the GEMM alone) is the row-wise epilogue's own cost, the
# baseline of the ratio. (name, W, Mc, N, K)
SCALE_CASES = [
    ("ag W=1 8192x8192x8192", 1, 8192, 8192, 8192),
    ("ag W=1 8192x4096x8192", 1, 8192, 4096, 8192),
    ("ag W=2 8192x8192x8192", 2, 4096, 8192, 8192),
    ("ag W=4 8192x4096x8192", 4, 2048, 4096, 8192),
    ("ag W=4 odd 4x1001x1040x2000", 4, 1001, 1040, 2000),
]


def run_scales_case(name, W, Mc, N, K, rounds: int) -> dict:
    import torch
    from fp8_gemm import fp8_inputs, torch_scaled_mm
    from sweep_common import virtual_peers
    from timing import paired, rotated

    from pkc.runtime.scheduled_ag import ScheduledAgGemm

    peers = virtual_peers(W)
    row_ = {"case": name, "W": W, "Mc": Mc, "N": N, "K": K}
    fns = []
    for row in (True, False):
        ck, kop = compile_fused(W, W * Mc, N, K, row, "ag")
        ag = ScheduledAgGemm(ck.ptx, ck.meta, peers, owner=("fp8-scales", name, row),
                             timeout_ns=500_000_000)
        ins = [fp8_inputs(Mc, N, K, row, seed=r) for r in range(W)]
        a, sa = [x[0] for x in ins], [x[2] for x in ins]
        w, sb = [ins[0][1]] * W, [ins[0][3]] * W          # one weight, on every rank
        outs = ag.run(a, w, sa, sb)
        torch.cuda.synchronize()
        ag.check()
        ref = torch_scaled_mm(torch.cat(a), w[0], torch.cat(sa) if row else sa[0], sb[0])
        err = max(float((outs[r][0].float() - ref.float()).abs().max()) for r in range(W))
        tag = "row" if row else "tensor"
        row_[f"max_abs_{tag}"] = err
        row_[f"correct_{tag}"] = err <= 2 ** -6 * W * float(ref.float().abs().max())
        row_[f"put_ctas_{tag}"] = ag.fz.side_ctas
        fns.append(lambda ag=ag, a=a, w=w, sa=sa, sb=sb: ag.run(a, w, sa, sb))
    if not (row_["correct_row"] and row_["correct_tensor"]):
        return row_
    for _ in range(3):
        for f in fns:
            f()
    row_.update(paired(rotated(fns, rounds), ["row", "tensor"], base=1))
    torch.cuda.synchronize()
    return row_


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out/fp8_fused")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--kinds", default="rs,ar,ag", help="the kinds to run (comma-separated)")
    ap.add_argument("--ag-scales", action="store_true",
                    help="the W > 1 all-gather: row-wise vs tensor-wise scales (SCALE_CASES)")
    ap.add_argument("--only", default="", help="case names to run, '|'-separated")
    ap.add_argument("--other", default="",
                    help="also the fused kernel on these forced tiles (comma-separated, e.g. "
                         "128x256_s4_cl2,128x128_pp_cl2: CTA pairs), same rounds")
    ap.add_argument("--sustained-s", type=float, default=0.0,
                    help="also each launcher back to back for this long (power-limited clock)")
    args = ap.parse_args()
    if args.ag_scales:
        rows = run_cases(SCALE_CASES, lambda c: run_scales_case(*c, rounds=args.rounds),
                         os.path.join(args.out, "fp8_ag_scales.json"))
        print(f"\n{'case':30} {'ok':5} {'row us':>9} {'tensor us':>9} {'row/tensor':>10}")
        for r in rows:
            print(f"{r['case']:30} {str(r.get('correct_row')) + '/' + str(r.get('correct_tensor')):11}"
                  f" {r.get('us_row', 0):9.1f} {r.get('us_tensor', 0):9.1f} "
                  f"{r.get('row_over_tensor', 0):10.3f}"
                  if "error" not in r else f"{r['case']:30} ERROR {r['error'][:100]}")
        return
    cases = [c for c in CASES if c[-1] in args.kinds.split(",")
             and (not args.only or c[0] in args.only.split("|"))]
    if args.list:
        for c in cases:
            print(*c)
        return
    rows = run_cases(cases, lambda c: run_case(*c, rounds=args.rounds, other=args.other,
                                               sustained_s=args.sustained_s),
                     os.path.join(args.out, "fp8_fused.json"))
    print(f"\n{'case':24} {'tile':12} {'ok':5} {'fused us':>9} {'gemm us':>9} {'torch us':>9} "
          f"{'fused/gemm':>10} {'fused/torch':>11}")
    for r in rows:
        if "error" in r:
            print(f"{r['case']:24} ERROR {r['error'][:100]}")
            continue
        print(f"{r['case']:24} {r['tile']:12} {str(r['correct']):5} {r.get('us_fused', 0):9.1f} "
              f"{r.get('us_gemm', 0):9.1f} {r.get('us_torch', 0):9.1f} "
              f"{r.get('fused_over_gemm', 0):10.3f} {r.get('fused_over_torch', 0):11.3f}")
    if args.other or args.sustained_s:
        print("\nfused kernels against torch._scaled_mm fast accum (time ratios; burst: rotated "
              "rounds, sustained: back to back at the power limit)")
        for r in rows:
            if "error" in r or "us_torch" not in r:
                continue
            st = r.get("sustained", {})
            for n in ["fused"] + [k[len("tile_"):] for k in r if k.startswith("tile_fused")]:
                tile = r["tile"] if n == "fused" else r[f"tile_{n}"]
                ok = r["correct"] if n == "fused" else r[f"correct_{n}"]
                sus = r.get(f"sustained_{n}_over_torch", 0)
                mhz = st.get(n, {}).get("sm_mhz", 0)
                print(f"{r['case']:24} {n:7} {tile:18} ok {str(ok):5} burst "
                      f"{r[f'us_{n}'] / r['us_torch']:6.3f} sustained {sus:6.3f} ({mhz:.0f} MHz; "
                      f"torch {st.get('torch', {}).get('sm_mhz', 0):.0f})")

if __name__ == "__main__":
    main()
