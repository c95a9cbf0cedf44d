"""The IR-built collectives (graph collective -> lower-collectives -> schedule-collectives ->
sm_90a lowering -> PTX) against the hand-written kernels they replace
(pkc/codegen/hopper/collectives.py), in the virtual world (W ranks on one H200, each on
its own SM partition), in one run.

    python benchmarks/collectives_ir.py --out DIR [--group G]   # on the GPU machine
    python benchmarks/collectives_ir.py --out DIR --summary     # the table of DIR/rows.jsonl
    python benchmarks/collectives_ir.py --list | --groups       # the cases, no GPU

Per case (collective x size x W x dtype): the IR kernel and the hand kernel of the kind the
pass chose (the two-shot with the fast path's gather and CTA groups), each with its own persistent buffers; ``launches`` launches in a row (epochs,
double-buffered staging) with fresh random inputs, outputs NaN-poisoned: the IR output
compared bitwise with the hand kernel's and with the rank-order f32 reference; the error
records checked. Then the two launched in alternation (benchmarks/timing.py: each launch
between its own CUDA events, the host queued ahead behind a sleep); medians and the
paired ratio hand / IR (> 1: the IR kernel is faster). Last, a missing peer: only rank 0
launches an IR kernel with a 20 ms timeout, which must come back as a timeout record.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

KIB, MIB = 1 << 10, 1 << 20
TIMEOUT_NS = 500_000_000     # a broken protocol costs half a second per wait, not a hang
ESIZE = {"bf16": 2, "f16": 2, "f32": 4}
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


def groups() -> list[str]:
    seen = []
    for c in cases():
        if c[-1] not in seen:
            seen.append(c[-1])
    return seen


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


_PEERS: dict = {}


def peers(W):
    from pkc.runtime.peers import VirtualPeers
    if W not in _PEERS:
        _PEERS[W] = VirtualPeers(W)
    return _PEERS[W]


def run_case(coll, algo, W, nbytes, dt, iters: int, launches: int = 3) -> dict:
    import torch
    from pkc.codegen.hopper.collectives import CollectiveRunner
    from pkc.runtime.fastpath import collective_config
    from pkc.runtime.scheduled_comm import ScheduledCollective
    from timing import alternate, last_stats

    TD = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[dt]
    ck, plan, n_in, n_out = compile_ir(coll, algo, W, nbytes, dt)
    kind = plan["comm_kind"]
    pr = peers(W)
    ir = ScheduledCollective(ck.ptx, ck.meta, pr, [n_in], [n_out], dt, timeout_ns=TIMEOUT_NS)
    hand = CollectiveRunner(collective_config(kind, W, dt, n_in), n_in, pr, timeout_ns=TIMEOUT_NS)
    row = {"collective": coll, "kind": kind, "W": W, "bytes": nbytes, "dtype": dt,
           "ir_grid": ir.grid, "ir_threads": ir.threads, "ir_slice": ir.slice,
           "hand_grid": hand.grid, "hand_threads": hand.threads, "hand_slice": hand.per,
           "ir_regs": ir.kernel.num_regs, "hand_regs": hand.kernel.num_regs, "lanes": pr.mode,
           "gather": plan.get("gather"), "groups": plan.get("groups")}
    g = torch.Generator(device="cuda").manual_seed(nbytes + W)
    outs_ir = {r: torch.empty(n_out, dtype=TD, device="cuda") for r in range(W)}
    equal_hand = equal_ref = True
    nan = False
    for _ in range(launches):
        xs = [torch.randn(n_in, device="cuda", dtype=TD, generator=g) for _ in range(W)]
        for r in range(W):
            outs_ir[r].fill_(float("nan"))
            if hand.local_output:
                hand.out[r].fill_(float("nan"))
        got_ir = ir.run({r: xs[r] for r in range(W)}, outs=outs_ir)
        got_ir = {r: t.clone() for r, t in got_ir.items()}   # ag: the next launch overwrites
        got_hand = hand.run({r: xs[r] for r in range(W)})
        torch.cuda.synchronize()
        ir.check()
        hand.check()
        want = reference(coll, xs, W)
        for r in range(W):
            a, h, w = got_ir[r].view(-1), got_hand[r].view(-1), want[r].view(-1)
            nan |= bool(torch.isnan(a).any())
            equal_hand &= bool(torch.equal(a, h))
            equal_ref &= bool(torch.equal(a, w))
            if not torch.equal(a, w) and "first_diff" not in row:
                bad = (a != w).nonzero().view(-1)
                row["first_diff"] = {"rank": r, "count": int(bad.numel()), "at": bad[:8].tolist(),
                                     "got": a[bad[:8]].float().tolist(), "want": w[bad[:8]].float().tolist(),
                                     "hand_ok": bool(torch.equal(h, w))}
    row.update(bitwise_equal_hand=equal_hand, bitwise_equal_reference=equal_ref, nan=nan)
    if not (equal_hand and equal_ref):
        return row          # no timing of a wrong kernel
    xs = {r: torch.randn(n_in, device="cuda", dtype=TD, generator=g) for r in range(W)}
    times = alternate({"ir": [lambda: ir.run(xs, outs=outs_ir)], "hand": [lambda: hand.run(xs)]},
                      iters, chunk=8)
    ir.check()
    hand.check()
    t_ir, t_hand = times["ir"], times["hand"]
    row.update(us_ir=statistics.median(t_ir) * 1e3, us_hand=statistics.median(t_hand) * 1e3,
               ir_speed_over_hand=statistics.median(h / i for i, h in zip(t_ir, t_hand)),
               late_chunks=last_stats.get("late_chunks"))
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


def summary(path: str) -> None:
    rows = [json.loads(line) for line in open(path)]
    print(f"\n{'kind':5} {'W':>2} {'dt':4} {'bytes':>10} {'=hand':5} {'=ref':5} {'IR us':>9} "
          f"{'hand us':>9} {'hand/IR':>7} {'grid':>9} {'regs':>7}")
    for r in rows:
        if "kind" not in r or "us_ir" not in r:
            continue
        print(f"{r['kind']:5} {r['W']:2} {r['dtype']:4} {r['bytes']:10} {str(r['bitwise_equal_hand']):5} "
              f"{str(r['bitwise_equal_reference']):5} {r['us_ir']:9.2f} {r['us_hand']:9.2f} "
              f"{r['ir_speed_over_hand']:7.3f} {r['ir_grid']:4}/{r['hand_grid']:<4} "
              f"{r['ir_regs']:3}/{r['hand_regs']:<3}")
    for r in rows:
        if "error" in r or "missing_peer" in r or ("kind" in r and "us_ir" not in r):
            print(json.dumps(r)[:600])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out/collectives_ir")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--groups", action="store_true", help="print the group names")
    ap.add_argument("--group", default="", help="run only this group (default: all)")
    ap.add_argument("--summary", action="store_true", help="print the table of DIR/rows.jsonl")
    ap.add_argument("--missing-peer", action="store_true", help="only the missing-peer check")
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
