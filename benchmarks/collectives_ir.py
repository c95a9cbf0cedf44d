"""The IR-built collectives (graph collective -> lower-collectives -> schedule-collectives ->
sm_90a lowering -> PTX) in the virtual world (W ranks on one H200, each on its own SM
partition): correct against the rank-order reference, and timed against torch doing the
same job for all ranks at once on the whole GPU, in one run.

    python benchmarks/collectives_ir.py --out DIR [--group G]   # on the GPU machine
    python benchmarks/collectives_ir.py --out DIR --summary     # the table of DIR/rows.jsonl
    python benchmarks/collectives_ir.py --list | --groups       # the cases, no GPU

Per case (collective x size x W x dtype): the IR kernel of the kind the pass chose, with its
persistent buffers; ``launches`` launches in a row (epochs, double-buffered staging) with
fresh random inputs, outputs NaN-poisoned: the IR output compared bitwise with the
rank-order f32 reference (sums in rank order 0..W-1, rounded once); the error records
checked. Then the IR kernel and the torch baseline launched in alternation
(benchmarks/timing.py ``alternate``: each launch between its own CUDA events, the host
queued ahead behind a sleep); medians and the paired ratio torch / IR (> 1: the IR kernel
is faster). The torch baseline moves the same bytes within one GPU (NCCL needs one process
per GPU: benchmarks/collectives.py compares with it): all-reduce ``torch.sum`` over the
ranks' inputs then a copy to every rank's output; all-gather one copy of all the shards
into every rank's output; reduce-scatter ``torch.sum`` into the ranks' chunks. Last, a
missing peer: only rank 0 launches an IR kernel with a 20 ms timeout, which must come back
as a timeout record.

Groups beyond the graph collectives (``--extra`` runs them all, ``--group agp|a2a|mm-ar-pair`` one):
the pull all-gather ``agp`` (chunks already in a symmetric allocation, pulled into a
fresh output) against a torch copy of the chunks into every rank's output; the
all-to-all ``a2a`` against a torch copy that moves the same bytes for all ranks at once
(the ``[src, chunk]`` -> ``[chunk, src]`` transpose, the whole GPU); the GEMM + all-reduce
at W = 3, 4 (schedule-fused's pair: GEMM + reduce-scatter, then the pull all-gather of its
symmetric output) against torch (f32 reference for correctness; cuBLAS ``mm`` of every
rank, ``sum`` and a copy to every rank for time), odd shapes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sweep_common import virtual_peers as peers  # noqa: E402  (the path above)

KIB, MIB = 1 << 10, 1 << 20
TIMEOUT_NS = 500_000_000     # a broken protocol costs half a second per wait, not a hang
ESIZE = {"bf16": 2, "f16": 2, "f32": 4, "f8E4M3FN": 1, "f8E5M2": 1}
# (collective, algorithm, bytes: the all-reduce buffer / the all-gather's output / the
# reduce-scatter's input): LL sizes and bandwidth sizes of each kind
SIZES = {
    "all_reduce": ("one_shot", [4 * KIB, 64 * KIB, 1 * MIB, 16 * MIB]),
    "all_reduce ": ("two_shot", [1 * MIB, 16 * MIB, 128 * MIB]),
    "all_gather": ("direct", [16 * KIB, 256 * KIB, 4 * MIB, 64 * MIB]),
    "reduce_scatter": ("direct", [16 * KIB, 256 * KIB, 4 * MIB, 64 * MIB]),
}


def cases() -> list[tuple[str, str, int, int, str, str]]:
    """(collective, algorithm, W, bytes, dtype, group); a group runs in one process (a
    crash loses only its group)."""
    out = []
    for W in (2, 4):
        for coll, (algo, sizes) in SIZES.items():
            for nbytes in sizes:
                out.append((coll.strip(), algo, W, nbytes, "bf16", f"{coll.strip()}-{algo}-w{W}"))
    out.append(("all_reduce", "two_shot", 4, 512 * MIB, "bf16", "pull-w4"))     # the pull gather
    # other element types: correctness of the f32 / f16 sums (and a timing each)
    for coll, algo, nbytes in (("all_reduce", "one_shot", 64 * KIB), ("all_reduce", "one_shot", 4 * MIB),
                               ("reduce_scatter", "direct", 4 * MIB)):
        for dt in ("f32", "f16"):
            out.append((coll, algo, 4, nbytes, dt, "dtypes-w4"))
    return out


# pull all-gather: (W, elements per chunk); a2a: (W, elements per chunk); odd counts of
# 16-byte vectors
AGP_CASES = [(3, 8 * 12345), (4, 8 * 12345), (3, 8 * 699051), (4, 8 * 1048577)]
A2A_CASES = [(2, 8 * 1001), (3, 8 * 12345), (4, 8 * 65537), (4, 8 * 1048577)]
# GEMM + all-reduce pair: (name, W, Mc, N, K, layout)
PAIR_CASES = [("odd W=3", 3, 333, 776, 520, "nk"), ("odd W=4", 4, 257, 1048, 712, "kn"),
              ("4096 W=4", 4, 1024, 4096, 4096, "nk")]


def extra_groups() -> list[str]:
    return ["mm-ar-pair", "agp", "a2a"]


def groups() -> list[str]:
    seen = []
    for c in cases():
        if c[-1] not in seen:
            seen.append(c[-1])
    return seen + extra_groups()


def module_text(coll: str, W: int, nbytes: int, dt: str) -> tuple[str, int, int]:
    """(graph IR, input elements, output elements) of one collective of ``nbytes``."""
    full = nbytes // ESIZE[dt]
    n_in = full // W if coll == "all_gather" else full
    n_out = full // W if coll == "reduce_scatter" else full
    tin, tout = f"tensor<{n_in}x{dt}>", f"tensor<{n_out}x{dt}>"
    attrs = f"world = {W} : i64" + (', reduce = "sum"' if coll != "all_gather" else "") + \
        (", dim = 0 : i64" if coll != "all_reduce" else "")
    text = (f"func.func @f(%x: {tin}) -> {tout} {{\n"
            f"  %y = pk.{coll} %x {{{attrs}}} : {tin} -> {tout}\n"
            f"  func.return %y : {tout}\n}}\n")
    return text, n_in, n_out


def compile_ir(coll: str, algo: str, W: int, nbytes: int, dt: str):
    from pkc.codegen import compile_kernel
    from pkc.codegen.emit import kernels_of
    from pkc.ir import parse_module
    from pkc.passes.registry import run_pipeline
    from pkc.passes.remarks import plan_of

    text, n_in, n_out = module_text(coll, W, nbytes, dt)
    m = parse_module(text, "collectives_ir.mlir")
    run_pipeline(f"lower-collectives{{{coll}={algo}}},schedule-collectives", m)
    (kop,) = kernels_of(m)
    plan = plan_of(kop)
    if plan.get("schedule") != "collective":
        raise RuntimeError(f"not scheduled: {kop.attributes.get('pk.remarks')}")
    return compile_kernel(kop, "sm_90a"), plan, n_in, n_out


def reference(coll, xs, W):
    import torch
    acc = xs[0].float()
    for x in xs[1:]:
        acc = acc + x.float()
    s = acc.to(xs[0].dtype)
    if coll == "all_reduce":
        return [s] * W
    if coll == "reduce_scatter":
        return list(s.chunk(W))
    return [torch.cat(xs)] * W


def torch_same_bytes(coll: str, X, Y, W: int):
    """The torch baseline of a collective in the virtual world: every rank's result for all
    ranks at once on the whole GPU. ``X`` [W, n_in] (row r: rank r's input), ``Y`` [W, n_out]
    (row r: rank r's output)."""
    import torch

    if coll == "all_gather":
        n = X.shape[1]
        return lambda: Y.view(W, W, n).copy_(X.unsqueeze(0).expand(W, W, n))
    if coll == "reduce_scatter":
        return lambda: torch.sum(X, 0, out=Y.view(-1))
    S = torch.empty(X.shape[1], dtype=X.dtype, device=X.device)

    def ar():
        torch.sum(X, 0, out=S)
        Y.copy_(S.unsqueeze(0).expand_as(Y))
    return ar


def run_case(coll, algo, W, nbytes, dt, iters: int, launches: int = 3) -> dict:
    import torch
    from pkc.runtime.scheduled_comm import ScheduledCollective

    TD = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[dt]
    ck, plan, n_in, n_out = compile_ir(coll, algo, W, nbytes, dt)
    kind = plan["comm_kind"]
    pr = peers(W)
    ir = ScheduledCollective(ck.ptx, ck.meta, pr, [n_in], [n_out], dt, timeout_ns=TIMEOUT_NS)
    row = {"collective": coll, "kind": kind, "W": W, "bytes": nbytes, "dtype": dt,
           "ir_grid": ir.grid, "ir_threads": ir.threads, "ir_slice": ir.slice,
           "ir_regs": ir.kernel.num_regs, "lanes": pr.mode,
           "gather": plan.get("gather"), "groups": plan.get("groups")}
    g = torch.Generator(device="cuda").manual_seed(nbytes + W)
    X = torch.empty(W, n_in, dtype=TD, device="cuda")        # row r: rank r's input
    outs_ir = {r: torch.empty(n_out, dtype=TD, device="cuda") for r in range(W)}
    equal_ref = True
    nan = False
    for _ in range(launches):
        X.normal_(generator=g)
        xs = [X[r] for r in range(W)]
        for r in range(W):
            outs_ir[r].fill_(float("nan"))
        got_ir = ir.run({r: xs[r] for r in range(W)}, outs=outs_ir)
        got_ir = {r: t.clone() for r, t in got_ir.items()}   # ag: the next launch overwrites
        torch.cuda.synchronize()
        ir.check()
        want = reference(coll, xs, W)
        for r in range(W):
            a, w = got_ir[r].view(-1), want[r].view(-1)
            nan |= bool(torch.isnan(a).any())
            equal_ref &= bool(torch.equal(a, w))
            if not torch.equal(a, w) and "first_diff" not in row:
                bad = (a != w).nonzero().view(-1)
                row["first_diff"] = {"rank": r, "count": int(bad.numel()), "at": bad[:8].tolist(),
                                     "got": a[bad[:8]].float().tolist(), "want": w[bad[:8]].float().tolist()}
    row.update(bitwise_equal_reference=equal_ref, nan=nan)
    if not equal_ref:
        return row          # no timing of a wrong kernel
    xs = {r: X[r] for r in range(W)}
    Y = torch.empty(W, n_out, dtype=TD, device="cuda")
    row.update(_time_pair(lambda: ir.run(xs, outs=outs_ir), torch_same_bytes(coll, X, Y, W), iters))
    row["baseline"] = "torch: the same result for all ranks at once, whole GPU"
    ir.check()
    return row


def missing_peer() -> dict:
    """Rank 0 launches alone: its arrival wait must expire into the error record."""
    import torch
    from pkc.runtime.scheduled_comm import ScheduledCollective, ScheduledCollectiveTimeout

    ck, plan, n_in, n_out = compile_ir("all_reduce", "one_shot", 2, 1 * MIB, "bf16")
    pr = peers(2)
    ir = ScheduledCollective(ck.ptx, ck.meta, pr, [n_in], [n_out], "bf16", timeout_ns=20_000_000)
    x = torch.randn(n_in, device="cuda", dtype=torch.bfloat16)
    t0 = time.time()
    ir.run({0: x, 1: x}, ranks=[0])
    torch.cuda.synchronize()
    try:
        ir.check()
    except ScheduledCollectiveTimeout as e:
        return {"missing_peer": "timeout reported", "message": str(e), "s": time.time() - t0}
    return {"missing_peer": "NO timeout reported", "s": time.time() - t0}


def _time_pair(ir_fn, other_fn, iters: int) -> dict:
    import statistics as st

    from timing import alternate, last_stats
    times = alternate({"ir": [ir_fn], "other": [other_fn]}, iters, chunk=8)
    t_ir, t_o = times["ir"], times["other"]
    return {"us_ir": st.median(t_ir) * 1e3, "us_other": st.median(t_o) * 1e3,
            "other_over_ir": st.median(o / i for i, o in zip(t_ir, t_o)),
            "late_chunks": last_stats.get("late_chunks")}


def _agp_kernel(W: int, n: int, dt: str):
    """The scheduled pull all-gather of an ``n``-element chunk that a producer kernel
    leaves in symmetric memory (the kernel-level pull gather, scheduled)."""
    from pkc.codegen import compile_kernel
    from pkc.codegen.emit import kernels_of
    from pkc.ir import parse_module
    from pkc.passes.registry import run_pipeline

    t, o = f"tensor<1x1x{n}x{dt}>", f"tensor<1x{W}x{n}x{dt}>"     # lower-collectives' views
    text = (f"func.func @f(%x: {t}) -> {o} {{\n"
            f'  %c = pk.kernel "produce"(%x) {{world = {W} : i64}} : ({t}) -> {t} {{\n'
            f"  ^bb0(%i: !pk.buffer<1x1x{n}x{dt}>, %m: !pk.buffer<1x1x{n}x{dt}, symmetric>):\n"
            f'    pk.worker "compute" {{\n      pk.yield\n    }}\n    pk.yield\n  }}\n'
            f'  %y = pk.kernel "pull" (%c) {{world = {W} : i64, pk.plan = {{collective = "all_gather", '
            f'algorithm = "direct"}}}} : ({t}) -> {o} {{\n'
            f"  ^bb0(%s: !pk.buffer<1x1x{n}x{dt}, symmetric>, %out: !pk.buffer<1x{W}x{n}x{dt}>):\n"
            f'    pk.worker "communicate" {{\n      pk.yield\n    }}\n    pk.yield\n  }}\n'
            f"  func.return %y : {o}\n}}\n")
    m = parse_module(text, "agp.mlir")
    run_pipeline("schedule-collectives", m)
    kop = [k for k in kernels_of(m) if k.schedule() is not None][0]
    return compile_kernel(kop, "sm_90a"), kop


def run_agp_case(W: int, n: int, iters: int, dt: str = "bf16") -> dict:
    import torch
    from pkc.runtime.scheduled_comm import ScheduledCollective

    TD = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[dt]
    ck, kop = _agp_kernel(W, n, dt)
    pr = peers(W)
    src = pr.symmetric(("bench-agp-src", W, n), [n], TD)
    ir = ScheduledCollective(ck.ptx, ck.meta, pr, [1, 1, n], [1, W, n], dt, timeout_ns=TIMEOUT_NS)
    row = {"group": "agp", "kind": "agp", "W": W, "bytes": W * n * ESIZE[dt], "dtype": dt,
           "ir_grid": ir.grid, "ir_regs": ir.kernel.num_regs}
    outs = {r: torch.empty(1, W, n, dtype=TD, device="cuda") for r in range(W)}
    ok = True
    for _ in range(3):
        for r in range(W):
            src.tensors[r].normal_()
            outs[r].fill_(float("nan"))
        ir.run({r: src.tensors[r] for r in range(W)}, outs=outs)
        torch.cuda.synchronize()
        ir.check()
        want = torch.stack([src.tensors[r] for r in range(W)])
        ok &= all(torch.equal(outs[r].view(W, n), want) for r in range(W))
    row["bitwise_equal_reference"] = bool(ok)
    if ok:
        Y = torch.empty(W, W, n, dtype=TD, device="cuda")
        chunks = [src.tensors[q] for q in range(W)]

        def torch_copy():       # every rank's output from the W chunks, whole GPU
            for r in range(W):
                torch.stack(chunks, out=Y[r])
        row.update(_time_pair(lambda: ir.run({r: src.tensors[r] for r in range(W)}, outs=outs),
                              torch_copy, iters))
        row["baseline"] = "torch.stack of the W chunks into every rank's output, whole GPU"
        ir.check()
    return row


def run_a2a_case(W: int, n: int, iters: int, dt: str = "bf16") -> dict:
    import torch
    from pkc.runtime.scheduled_comm import ScheduledCollective

    TD = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[dt]
    ck, plan, n_in, n_out = _a2a_compile(W, n, dt)
    pr = peers(W)
    ir = ScheduledCollective(ck.ptx, ck.meta, pr, [n_in], [n_out], dt, timeout_ns=TIMEOUT_NS)
    row = {"group": "a2a", "kind": plan["comm_kind"], "W": W, "bytes": W * n * ESIZE[dt],
           "dtype": dt, "ir_grid": ir.grid, "ir_regs": ir.kernel.num_regs}
    X = torch.empty(W, W, n, dtype=TD, device="cuda")       # [src rank, chunk, n]
    Y = torch.empty(W, W, n, dtype=TD, device="cuda")       # the torch copy's result
    ok = True
    for _ in range(3):
        X.normal_()
        got = ir.run({r: X[r].view(-1) for r in range(W)})
        got = {r: t.clone() for r, t in got.items()}        # persistent: the next launch overwrites
        torch.cuda.synchronize()
        ir.check()
        ok &= all(torch.equal(got[r].view(W, n), X[:, r]) for r in range(W))
    row["bitwise_equal_reference"] = bool(ok)
    if ok:
        xs = {r: X[r].view(-1) for r in range(W)}
        row.update(_time_pair(lambda: ir.run(xs), lambda: Y.copy_(X.transpose(0, 1)), iters))
        row["baseline"] = "torch copy [src, chunk] -> [chunk, src] of all ranks at once"
        ir.check()
    return row


def _a2a_compile(W: int, n: int, dt: str):
    from pkc.codegen import compile_kernel
    from pkc.codegen.emit import kernels_of
    from pkc.ir import parse_module
    from pkc.passes.registry import run_pipeline
    from pkc.passes.remarks import plan_of

    t = f"tensor<{W * n}x{dt}>"
    text = (f"func.func @f(%x: {t}) -> {t} {{\n  %y = pk.all_to_all %x {{world = {W} : i64, "
            f"split_dim = 0 : i64, concat_dim = 0 : i64}} : {t} -> {t}\n  func.return %y : {t}\n}}\n")
    m = parse_module(text, "a2a.mlir")
    run_pipeline("lower-collectives,schedule-collectives", m)
    (kop,) = kernels_of(m)
    plan = plan_of(kop)
    if plan.get("schedule") != "collective":
        raise RuntimeError(f"not scheduled: {kop.attributes.get('pk.remarks')}")
    return compile_kernel(kop, "sm_90a"), plan, W * n, W * n


def pair_compile(W: int, Mc: int, N: int, K: int, layout: str):
    """((pk.kernel, compiled) of the GEMM + reduce-scatter, (...) of the pull all-gather):
    schedule-fused's pair for a GEMM + all-reduce over W > 2 ranks."""
    from fused_ar_ir import scheduled_kernels
    from pkc.codegen import compile_kernel

    rs_op, ag_op = scheduled_kernels("ar", W, W * Mc, N, K, layout)
    return (rs_op, compile_kernel(rs_op, "sm_90a")), (ag_op, compile_kernel(ag_op, "sm_90a"))


def run_pair_case(name, W, Mc, N, K, layout, iters: int) -> dict:
    """schedule-fused's GEMM + all-reduce pair against torch (the f32 reference; the time of
    cuBLAS ``mm`` per rank, ``sum`` and a copy to every rank, whole GPU)."""
    import torch
    from fused_ir import gemm_config_of
    from pkc.runtime.scheduled_comm import ScheduledPair

    M = W * Mc
    (rs_op, rs_ck), (ag_op, ag_ck) = pair_compile(W, Mc, N, K, layout)
    pr = peers(W)
    ir = ScheduledPair(rs_op, rs_ck, ag_op, ag_ck, pr, owner=("bench-pair", name),
                       timeout_ns=TIMEOUT_NS)
    cfg = gemm_config_of(rs_op)
    torch.manual_seed(W)
    a = [torch.randn(M, K, device="cuda", dtype=torch.bfloat16) for _ in range(W)]
    w = [torch.randn(N, K, device="cuda", dtype=torch.bfloat16) / K ** 0.5 for _ in range(W)]
    b = [wi if layout == "nk" else wi.t().contiguous() for wi in w]
    outs = {r: torch.empty(M, N, device="cuda", dtype=torch.bfloat16) for r in range(W)}
    full = sum(a[r].float() @ w[r].float().t() for r in range(W))
    tol = 2 ** -6 * float(full.abs().max()) * W
    for r in range(W):
        outs[r].fill_(float("nan"))
    ir.run({r: a[r] for r in range(W)}, {r: b[r] for r in range(W)}, outs=outs)
    torch.cuda.synchronize()
    ir.check()
    err = max(float((outs[r].float() - full).abs().max()) for r in range(W))
    nan = any(bool(torch.isnan(outs[r]).any()) for r in range(W))
    same = all(torch.equal(outs[r], outs[0]) for r in range(W))
    row = {"group": "mm-ar-pair", "case": name, "W": W, "Mc": Mc, "N": N, "K": K, "layout": layout,
           "tile": f"{cfg.bm}x{cfg.bn}_s{cfg.stages}", "max_abs_err": err, "tol": tol,
           "correct": err <= tol and not nan and same, "ranks_equal": same,
           "rs_grid": ir.rs.grid, "ag_grid": ir.ag.grid}
    if row["correct"]:
        xa, xb = {r: a[r] for r in range(W)}, {r: b[r] for r in range(W)}
        bts = [wi.t() if layout == "nk" else wi for wi in b]
        P = torch.empty(W, M, N, device="cuda", dtype=torch.bfloat16)
        S = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        Y = torch.empty(W, M, N, device="cuda", dtype=torch.bfloat16)

        def torch_mm_sum():
            for r in range(W):
                torch.mm(a[r], bts[r], out=P[r])
            torch.sum(P, 0, out=S)
            Y.copy_(S.unsqueeze(0).expand_as(Y))
        row.update(_time_pair(lambda: ir.run(xa, xb, outs=outs), torch_mm_sum, iters))
        row["baseline"] = "torch: mm per rank, sum, copy to every rank (whole GPU)"
        ir.check()
        out2 = ir.run(xa, xb, outs=outs)
        torch.cuda.synchronize()
        row["correct_after_timing"] = all(
            float((out2[r].float() - full).abs().max()) <= tol for r in range(W))
    return row


def run_extra(group: str, iters: int, emit) -> None:
    todo = {"agp": [(run_agp_case, c) for c in AGP_CASES],
            "a2a": [(run_a2a_case, c) for c in A2A_CASES],
            "mm-ar-pair": [(run_pair_case, c) for c in PAIR_CASES]}[group]
    for fn, c in todo:
        try:
            row = fn(*c, iters=iters)
        except Exception as e:      # one failing case must not hide the others
            row = {"group": group, "case": list(c), "error": f"{type(e).__name__}: {e}",
                   "trace": traceback.format_exc()[-1500:]}
        emit(row)


def summary(path: str) -> None:
    rows = [json.loads(line) for line in open(path)]
    print(f"\n{'kind':5} {'W':>2} {'dt':4} {'bytes':>10} {'=ref':5} {'IR us':>9} "
          f"{'torch us':>9} {'torch/IR':>8} {'grid':>5} {'regs':>4}")
    for r in rows:
        if "kind" not in r or "us_ir" not in r or r.get("group"):
            continue
        print(f"{r['kind']:5} {r['W']:2} {r['dtype']:4} {r['bytes']:10} "
              f"{str(r['bitwise_equal_reference']):5} {r['us_ir']:9.2f} {r['us_other']:9.2f} "
              f"{r['other_over_ir']:8.3f} {r['ir_grid']:5} {r['ir_regs']:4}")
    extra = [r for r in rows if r.get("group") and "us_ir" in r]
    if extra:
        print(f"\n{'group':10} {'case':22} {'W':>2} {'ok':5} {'IR us':>9} {'torch us':>9} {'torch/IR':>8}")
    for r in extra:
        case = r.get("case") or f"{r['kind']} {r['bytes']} B"
        ok = r.get("bitwise_equal_reference", r.get("correct"))
        print(f"{r['group']:10} {str(case):22} {r['W']:2} {str(ok):5} "
              f"{r['us_ir']:9.2f} {r['us_other']:9.2f} {r['other_over_ir']:8.3f}")
    for r in rows:
        if "error" in r or "missing_peer" in r or ("kind" in r and "us_ir" not in r) \
                or ("correct" in r and "us_ir" not in r):
            print(json.dumps(r)[:600])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out/collectives_ir")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--groups", action="store_true", help="print the group names")
    ap.add_argument("--group", default="", help="run only this group (default: all)")
    ap.add_argument("--summary", action="store_true", help="print the table of DIR/rows.jsonl")
    ap.add_argument("--missing-peer", action="store_true", help="only the missing-peer check")
    ap.add_argument("--extra", action="store_true",
                    help="only the groups beyond the graph collectives (agp, a2a, mm-ar-pair)")
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--budget-s", type=float, default=280.0)
    args = ap.parse_args()
    if args.list:
        for c in cases():
            print(*c)
        return
    if args.groups:
        print(" ".join(groups()))
        return
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "rows.jsonl")
    if args.summary:
        summary(path)
        return

    def emit(row):
        print(json.dumps(row), flush=True)
        with open(path, "a") as f:
            f.write(json.dumps(row) + "\n")
    if args.missing_peer:
        try:
            emit(missing_peer())
        except Exception as e:
            emit({"missing_peer": f"error {type(e).__name__}: {e}", "trace": traceback.format_exc()[-1500:]})
        return
    t0 = time.time()
    if args.group in extra_groups() or args.extra:
        for g in ([args.group] if args.group in extra_groups() else extra_groups()):
            if time.time() - t0 > args.budget_s:
                emit({"group": g, "error": "skipped: out of time"})
                continue
            run_extra(g, args.iters, emit)
        return
    for c in cases():
        if args.group and c[-1] != args.group:
            continue
        if time.time() - t0 > args.budget_s:
            emit({"case": list(c), "error": "skipped: out of time"})
            continue
        try:
            row = run_case(*c[:-1], iters=args.iters)
        except Exception as e:      # one failing case must not hide the others
            row = {"case": list(c), "error": f"{type(e).__name__}: {e}",
                   "trace": traceback.format_exc()[-1500:]}
        emit(row)


if __name__ == "__main__":
    main()
