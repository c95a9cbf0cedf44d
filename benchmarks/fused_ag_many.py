"""One all-gather feeding several matmuls as ONE IR-built kernel (graph ``pk.all_gather`` of
``[Mc, K]`` -> one ``pk.matmul`` per weight ``[N_i, K]`` (transposed) -> the default
pipeline (overlap forced) -> schedule-fused (pkc/passes/gather_many.py: one tile space
over every weight) -> sm_90a PTX) against the unfused sequence, in the virtual world on
one H200:

* ``split``: what schedule-fused made before (and still makes where the one kernel cannot
  be built): pkc's all-gather kernel (lower-collectives + schedule-collectives) into the
  gathered ``[W*Mc, K]``, then pkc's IR GEMM per weight (schedule-matmul's tile) on it;
  at W = 1 (nothing to gather) the GEMMs alone;
* ``torch`` (W = 1 only): ``torch.mm`` (cuBLAS) per weight on the shard.

    python benchmarks/fused_ag_many.py --out DIR     # on the GPU machine
    python benchmarks/fused_ag_many.py --list        # the cases, no GPU

Per case: random bf16 shards and weights (the same weights on every rank); every C of the
fused kernel (into NaN-poisoned outputs) against torch (f32: within a bf16 step of the
scale), and the split sequence's too; then the variants launched in alternation
(benchmarks/timing.py ``alternate``: each launch sequence between its own CUDA events,
the host queued ahead), medians and the ratios fused / split, fused / torch; C checked
again after the timed launches. Probes timed beside them (not what the pass builds): at
W = 1 the kernel with each other tile of ``ALT_TILES`` forced (is the pass's tile the
fastest?), at W > 1 with 4 put CTAs (``p4``: a lane of the virtual world has 1/W of the
SMs the put-CTA plan was made for).
"""

from __future__ import annotations

import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from sweep_common import case_cli, run_cases, virtual_peers  # noqa: E402  (the path above)

GATE_UP = (3584, 3584)              # Llama-3 70B TP-8: gate and up projections per rank
QKV_8B = (512, 128, 128)            # Llama-3 8B TP-8: q, k, v per rank (K = 4096)
QKV_70B = (1024, 128, 128)          # Llama-3 70B TP-8 (K = 8192)
# the tiles forced at W = 1 beside the pass's choice (is the choice the fastest?)
ALT_TILES = ("128x128_s6_tma", "128x160_s5_tma", "128x192_s4_tma", "128x224_s4_tma",
             "128x256_s4_tma")

# (name, W, Mc: rows per rank, K, the weights' N, gathered): odd shapes, then Llama's
CASES = [
    ("odd W=1", 1, 333, 520, (136, 72, 264), False),
    ("odd W=2", 2, 301, 264, (200, 56), False),
    ("odd W=3 G", 3, 167, 136, (72, 136, 40), True),
    ("odd W=4", 4, 129, 392, (264, 8), False),
    *[(f"gate+up T={t} W=1", 1, t, 8192, GATE_UP, False) for t in (512, 1024, 2048, 4096)],
    *[(f"qkv8b T={t} W=1", 1, t, 4096, QKV_8B, False) for t in (512, 2048, 4096)],
    *[(f"qkv70b T={t} W=1", 1, t, 8192, QKV_70B, False) for t in (512, 2048, 4096)],
    ("gate+up T=1024 W=2", 2, 1024, 8192, GATE_UP, False),
    ("gate+up T=1024 W=4", 4, 1024, 8192, GATE_UP, False),
    ("qkv70b T=1024 W=2", 2, 1024, 8192, QKV_70B, False),
    ("qkv70b T=1024 W=4", 4, 1024, 8192, QKV_70B, False),
]


def module_text(W: int, Mc: int, K: int, ns, gathered: bool = False, dt: str = "bf16",
                layouts: str = "") -> str:
    """pk.all_gather of a [Mc, K] shard, a matmul per weight (``layouts[i]``: "n" for a
    [N_i, K] weight transposed (default), "k" for a [K, N_i] one); with ``gathered`` the
    gathered tensor is a result too (its negation: the IR needs it)."""
    M = W * Mc
    layouts = layouts or "n" * len(ns)
    ts = lambda *s: f"tensor<{'x'.join(map(str, s))}x{dt}>"  # noqa: E731
    ws = [ts(n, K) if lay == "n" else ts(K, n) for n, lay in zip(ns, layouts)]
    rets = [ts(M, n) for n in ns] + ([ts(M, K)] if gathered else [])
    args = ", ".join(f"%w{i}: {w}" for i, w in enumerate(ws))
    text = (f"func.func @main(%x: {ts(Mc, K)}, {args}) -> ({', '.join(rets)}) {{\n"
            f"  %g = pk.all_gather %x {{dim = 0 : i64, world = {W} : i64}} : "
            f"{ts(Mc, K)} -> {ts(M, K)}\n")
    outs = []
    for i, (n, lay) in enumerate(zip(ns, layouts)):
        b = f"%w{i}"
        if lay == "n":
            text += f"  %t{i} = pk.transpose %w{i} {{perm = [1, 0]}} : {ws[i]} -> {ts(K, n)}\n"
            b = f"%t{i}"
        text += f"  %c{i} = pk.matmul %g, {b} : ({ts(M, K)}, {ts(K, n)}) -> {ts(M, n)}\n"
        outs.append(f"%c{i}")
    if gathered:
        text += f"  %n = pk.map \"neg\" %g : ({ts(M, K)}) -> {ts(M, K)}\n"
        outs.append("%n")
    return text + f"  func.return {', '.join(outs)} : {', '.join(rets)}\n}}\n"


def scheduled_module(W: int, Mc: int, K: int, ns, gathered: bool = False, dt: str = "bf16",
                     target: str = "h200", layouts: str = "", variant: str = "",
                     put_ctas: int = 0):
    """The module after ``default{force=true}`` (W = 1: ``keep-single-rank``, so that a
    kernel is made), ``schedule-fused`` (``variant``: a forced tile; ``put_ctas``: the
    kernel-level plan's put CTAs replaced, for a probe), ``dce``."""
    from pkc.dialects.kernel import KernelOp
    from pkc.ir import make_context, parse_module, verify_module
    from pkc.passes.registry import parse_pipeline
    from pkc.passes.remarks import set_plan

    m = parse_module(module_text(W, Mc, K, ns, gathered, dt, layouts), "fused_ag_many.mlir")
    ctx = make_context()
    single = " keep-single-rank=true" if W == 1 else ""
    for p in parse_pipeline(f"default{{force=true target={target}{single}}}"):
        p.apply(ctx, m)
    if put_ctas:
        for kop in [o for o in m.walk() if isinstance(o, KernelOp)]:
            set_plan(kop, put_ctas=put_ctas)
    opts = f" variant={variant}" if variant else ""
    for p in parse_pipeline(f"schedule-fused{{target={target}{opts}}},dce"):
        p.apply(ctx, m)
    verify_module(m)
    return m


def compile_ir(W: int, Mc: int, K: int, ns, gathered: bool = False, dt: str = "bf16",
               target: str = "h200", arch: str = "sm_90a", variant: str = "",
               put_ctas: int = 0):
    """(compiled kernel, its pk.kernel) of the one kernel over the weights."""
    from pkc.codegen import compile_kernel
    from pkc.codegen.emit import kernels_of

    (kop,) = [k for k in kernels_of(scheduled_module(W, Mc, K, ns, gathered, dt, target,
                                                     variant=variant, put_ctas=put_ctas))
              if k.schedule() is not None]
    return compile_kernel(kop, arch), kop


def gather_kernel(W: int, Mc: int, K: int, peers):
    """pkc's all-gather kernel of the split sequence: ``run(x) -> gathered`` per rank."""
    from pkc.codegen import compile_kernel
    from pkc.codegen.emit import kernels_of
    from pkc.ir import parse_module
    from pkc.passes.registry import run_pipeline
    from pkc.runtime.scheduled_comm import ScheduledCollective

    n = Mc * K
    text = (f"func.func @f(%x: tensor<{n}xbf16>) -> tensor<{W * n}xbf16> {{\n"
            f"  %y = pk.all_gather %x {{world = {W} : i64, dim = 0 : i64}} : "
            f"tensor<{n}xbf16> -> tensor<{W * n}xbf16>\n  func.return %y : tensor<{W * n}xbf16>\n}}\n")
    m = parse_module(text, "gather.mlir")
    run_pipeline("lower-collectives,schedule-collectives", m)
    (kop,) = kernels_of(m)
    ck = compile_kernel(kop, "sm_90a")
    return ScheduledCollective(ck.ptx, ck.meta, peers, [n], [W * n], "bf16",
                               timeout_ns=500_000_000)


def run_case(name, W, Mc, K, ns, gathered, rounds: int, peers, alt=ALT_TILES) -> dict:
    import statistics as st

    import torch
    from gemm_ir import LaneGemm
    from timing import alternate
    from pkc.passes.remarks import plan_of
    from pkc.runtime.scheduled_ag import ScheduledAgGemm

    ck, kop = compile_ir(W, Mc, K, ns, gathered)
    plan = plan_of(kop)
    ir = ScheduledAgGemm(ck.ptx, ck.meta, peers, owner=("bench-ag-many", name),
                         timeout_ns=500_000_000)
    M = W * Mc
    torch.manual_seed(0)
    a = [torch.randn(Mc, K, device="cuda", dtype=torch.bfloat16) for _ in range(W)]
    ws = [torch.randn(n, K, device="cuda", dtype=torch.bfloat16) / K ** 0.5 for n in ns]
    cs = [[torch.full((M, n), float("nan"), device="cuda", dtype=torch.bfloat16) for n in ns]
          for _ in range(W)]
    wargs = [[w] * W for w in ws]

    def fused():
        return ir.run(a, *wargs, outs=cs)
    res = fused()
    torch.cuda.synchronize()
    ir.check()
    full = torch.cat(a).float()
    refs = [full @ w.float().t() for w in ws]

    def rel_error(got) -> float:     # got[r][i]: rank r's C_i
        return max(float((got[r][i].float() - refs[i]).abs().max() / refs[i].abs().max())
                   for r in range(W) for i in range(len(ns)))
    err = rel_error(res)
    nan = any(bool(torch.isnan(res[r][i]).any()) for r in range(W) for i in range(len(ns)))
    gath_ok = not gathered or all(torch.equal(res[r][-1], torch.cat(a)) for r in range(W))
    tol = 2 ** -7
    row = {"case": name, "W": W, "Mc": Mc, "K": K, "ns": list(ns), "gathered": gathered,
           "tile": f"{plan['bm']}x{plan['bn']}_s{plan['stages']}", "put_ctas": plan.get("comm_ctas"),
           "max_rel_err": err, "tol": tol, "correct": err <= tol and not nan and gath_ok,
           "grid": ir.grid, "registers": ir.kernel.num_regs}
    if not row["correct"]:
        return row
    # the split sequence: pkc's gather kernel (W > 1), then pkc's GEMM per weight
    gemms = [LaneGemm(M, n, K, "nk", peers) for n in ns]
    row["split_tiles"] = [g.tile for g in gemms]
    gout = [[torch.empty(M, n, device="cuda", dtype=torch.bfloat16) for n in ns] for _ in range(W)]
    if W > 1:
        coll = gather_kernel(W, Mc, K, peers)
        gbuf = {r: torch.empty(M * K, device="cuda", dtype=torch.bfloat16) for r in range(W)}
        flat = {r: a[r].reshape(-1) for r in range(W)}
        got = coll.run(flat, outs=gbuf)      # (the same tensors every launch)
        lhs = [got[r].view(M, K) for r in range(W)]
    else:
        lhs = [a[0]]

    def split():
        if W > 1:
            coll.run(flat, outs=gbuf)
        for i, g in enumerate(gemms):
            g(lhs, wargs[i], [gout[r][i] for r in range(W)])
    split()
    torch.cuda.synchronize()
    row["split_rel_err"] = rel_error(gout)
    impls = {"fused": [fused], "split": [split]}
    # probes (not the pass's choice): at W = 1 the other tiles, forced; at W > 1 four put
    # CTAs (a virtual-world lane has a quarter or half of the SMs the plan was made for)
    probes = ([("p4", "", 4)] if W > 1 else
              [(v, v, 0) for v in alt if not v.startswith(row["tile"] + "_")])
    for key, variant, side in probes:
        pck, pkop = compile_ir(W, Mc, K, ns, gathered, variant=variant, put_ctas=side)
        run = ScheduledAgGemm(pck.ptx, pck.meta, peers, owner=("bench-ag-many", name, key),
                              timeout_ns=500_000_000)
        out = run.run(a, *wargs, outs=cs)
        torch.cuda.synchronize()
        run.check()
        if rel_error(out) > tol:
            row[f"wrong_{key}"] = rel_error(out)
            continue
        impls[f"fused_{key}"] = [lambda run=run: run.run(a, *wargs, outs=cs)]
    if W == 1:
        tout = [torch.empty(M, n, device="cuda", dtype=torch.bfloat16) for n in ns]
        wts = [w.t() for w in ws]

        def torch_mm():
            for i in range(len(ns)):
                torch.mm(a[0], wts[i], out=tout[i])
        impls["torch"] = [torch_mm]
    times = alternate(impls, max(rounds, 10))
    for key, v in times.items():
        row[f"us_{key}"] = 1e3 * st.median(v)
    alts = {k[len("us_fused_"):]: v for k, v in row.items()
            if k.startswith("us_fused_") and k != "us_fused_p4"}
    if alts:
        row["best_alt"] = min(alts, key=alts.get)
        row["best_alt_over_fused"] = alts[row["best_alt"]] / row["us_fused"]
    row["fused_over_split"] = row["us_fused"] / row["us_split"]
    if W == 1:
        row["fused_over_torch"] = row["us_fused"] / row["us_torch"]
    torch.cuda.synchronize()
    ir.check()
    row["correct_after_timing"] = rel_error(fused()) <= tol
    return row


def main() -> None:
    cli = case_cli(__doc__, CASES, "out/fused_ag_many", extra=lambda ap: ap.add_argument(
        "--alt", default=",".join(ALT_TILES), help="the tiles forced at W = 1 (variants)"))
    if cli is None:
        return
    args, picked = cli
    alt = tuple(v for v in args.alt.split(",") if v)
    rows = run_cases(picked, lambda c: run_case(*c, rounds=args.rounds, peers=virtual_peers(c[1]),
                                                 alt=alt),
                     os.path.join(args.out, f"fused_ag_many_r{args.rounds}.json"), trace=True)
    print(f"\n{'case':19} {'tile':10} {'ok':5} {'fused':>7} {'split':>7} {'torch':>7} "
          f"{'f/split':>7} {'f/torch':>7} {'probe':>14} {'/fused':>6}")
    for r in rows:
        if "error" in r:
            print(f"{r['case']:20} ERROR {r['error'][:100]}")
            continue
        probe = r.get("best_alt", "p4" if "us_fused_p4" in r else "")
        ratio = r.get("best_alt_over_fused", r.get("us_fused_p4", 0) / r.get("us_fused", 1))
        print(f"{r['case']:19} {r['tile'][:10]:10} "
              f"{str(r['correct'] and r.get('correct_after_timing', False)):5} "
              f"{r.get('us_fused', 0):7.1f} {r.get('us_split', 0):7.1f} "
              f"{r.get('us_torch', 0):7.1f} {r.get('fused_over_split', 0):7.3f} "
              f"{r.get('fused_over_torch', 0):7.3f} {probe[:14]:>14} {ratio:6.3f}")


if __name__ == "__main__":
    main()
