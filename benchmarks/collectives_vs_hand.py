"""The IR-built collectives against the hand-written kernels they replaced, measured fairly:
ONE runner per case, the SAME buffers, the hand PTX and the IR PTX launched alternately on
them (issue 14: IR-built collectives >= 0.98x the hand versions in the virtual world).

    python benchmarks/hand_collectives_gen.py --old /tmp/old    # once, on the CPU (files kept)
    python benchmarks/collectives_vs_hand.py --out DIR          # on the GPU machine
    python benchmarks/collectives_vs_hand.py --out DIR --summary

Why: the same kernel's time moves 3-4 % with where its buffers lie (2026-12-02: the direct
reduce-scatter 4 MiB W = 4 measured 0.920-0.942x the hand kernel with one runner each, 1.004x
with four runners alternated), so two runners with their own allocations compare
placements as much as kernels. Here the IR kernel runs through its runtime runner
(:class:`~pkc.runtime.scheduled_comm.ScheduledCollective`, its own grid rule); the hand
kernel (PTX and launch plan from benchmarks/results/hand_collectives, written by
hand_collectives_gen.py from the tree before ec93917) is launched with the grid, threads and
parameters its own runner computed, on the IR runner's staging buffer (the same layout:
2 x W slots, or the two-shot's [result | W chunks], or the all-gather's output) and the same
input and output tensors. Only the signal pads and the epoch words are each kernel's own
(its waits count its own launches): two such control sets are made, and every case is
measured twice, the sets swapped between the kernels (their placement moves a 20 us kernel
by a few per cent too: the A/A runs of ``--variants``); the LL kinds' epoch starts at
0x10000 for the hand kernel, so that its flags in the shared LL lines never equal the IR
kernel's. Both are checked bitwise against the rank-order reference in alternation (hand,
IR, hand, ...) before each phase's timing; then timed by benchmarks/timing.py ``alternate``
(each launch between its own CUDA events, host queued ahead): per phase the median of the
paired ratio hand / IR, the result their geometric mean (>= 1: the IR kernel is as fast or
faster).

``--variants kind:W:dtype:bytes,...`` runs those cases with five launchers instead (hand,
a second hand instance, IR, a second IR runner, the IR PTX without the guarded loads' zero
defaults), each with its own control set: the A/A pairs show what placement alone does."""

from __future__ import annotations

import argparse
import ctypes
import itertools
import json
import os
import statistics
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

KIB, MIB = 1 << 10, 1 << 20
TIMEOUT_NS = 500_000_000
HAND_DIR = os.path.join(HERE, "results", "hand_collectives")
LL_EPOCH0 = 0x10000          # the hand LL kernel's first epoch (even: same staging half order)
SIZES = {   # the comparison of 2026-12-01 (benchmarks/collectives_ir.py before ec93917)
    ("all_reduce", "one_shot"): [4 * KIB, 64 * KIB, 1 * MIB, 16 * MIB],
    ("all_reduce", "two_shot"): [1 * MIB, 16 * MIB, 128 * MIB],
    ("all_gather", "direct"): [16 * KIB, 256 * KIB, 4 * MIB, 64 * MIB],
    ("reduce_scatter", "direct"): [16 * KIB, 256 * KIB, 4 * MIB, 64 * MIB],
}


def cases() -> list[tuple[str, str, int, int, str]]:
    """(collective, algorithm, W, bytes, dtype)."""
    out = [(c, a, W, n, "bf16") for W in (2, 4) for (c, a), ns in SIZES.items() for n in ns]
    out.append(("all_reduce", "two_shot", 4, 512 * MIB, "bf16"))       # the pull gather
    for c, a, n in (("all_reduce", "one_shot", 64 * KIB), ("all_reduce", "one_shot", 4 * MIB),
                    ("reduce_scatter", "direct", 4 * MIB)):
        for dt in ("f32", "f16"):
            out.append((c, a, 4, n, dt))
    return out


_HANDS = itertools.count()      # allocation keys (an id() comes back once an object is freed)


class HandOnShared:
    """The hand kernel of one case, bound to the IR runner's staging buffer and the caller's
    input / output tensors; its own pads, epoch word and error record."""

    def __init__(self, spec: dict, ir, peers, device):
        import torch
        from pkc.runtime.tma_launch import load_kernel

        h = spec["hand"]
        self.spec, self.peers, self.kind = spec, peers, spec["kind"]
        ptx = open(os.path.join(HAND_DIR, h["ptx"])).read()
        self.kernel = load_kernel(ptx, h["kernel"], 0, device)
        fit = _occupancy(self.kernel, 512)
        cps = min(fit, h["ctas_per_sm"])
        budget = cps * min(peers.sms_of(r) for r in peers.ranks)
        plan = h["plans"].get(str(budget))
        if plan is None:
            raise RuntimeError(f"no hand plan for a budget of {budget} CTAs (have {list(h['plans'])})")
        self.nv, self.cv, self.per, self.grid, self.threads = (
            plan["nv"], plan["cv"], plan["per"], plan["grid"], plan["threads"])
        W = spec["W"]
        want = h["sym_vecs"] * h["vec_elems"]
        self.sym = next(iter(ir.sym_out.values())) if self.kind == "ag" else ir.syms[0]
        have = next(iter(self.sym.tensors.values())).numel()
        if have < want or next(iter(self.sym.tensors.values())).dtype != ir.tdt:
            raise RuntimeError(f"the IR staging buffer ({have} elements) cannot hold the hand "
                               f"kernel's ({want})")
        key = ("hand-on-shared", h["kernel"], spec["n_in"], next(_HANDS))
        self.pads = peers.symmetric(key + ("pads",), [(2 * W + 1) * self.grid], torch.int32, zero=True)
        self.ctl = peers.local(key + ("ctl",), [2], torch.int32, zero=True)
        if self.kind.startswith("ll"):
            for r in peers.ranks:
                self.ctl[r][0] = LL_EPOCH0
        self.err = peers.local(key + ("err",), [8], torch.int32, zero=True)
        self.mbox = {r: peers.mailbox.slot(h["kernel"], r, {}) for r in peers.ranks}
        self._args: dict = {}

    def _bind(self, r: int, src, out):
        from pkc.runtime.tma_launch import KernelArgs

        key = (r, src.data_ptr(), 0 if out is None else out.data_ptr())
        hit = self._args.get(key)
        if hit is None:
            u32, u64 = ctypes.c_uint32, ctypes.c_uint64
            vals = ([u64(src.data_ptr()), u64(0 if out is None else out.data_ptr())]
                    + [u64(p) for p in self.sym.ptrs] + [u64(p) for p in self.pads.ptrs]
                    + [u64(self.sym.ptrs[r]), u64(self.pads.ptrs[r]), u32(self.nv), u32(self.cv),
                       u32(self.per), u32(r), u64(self.ctl[r].data_ptr()), u64(self.err[r].data_ptr()),
                       u64(TIMEOUT_NS), u64(self.mbox[r]), u32(0)])
            hit = self._args[key] = KernelArgs(vals)
        return hit

    def run(self, inputs: dict, outs: dict) -> dict:
        from pkc.runtime.tma_launch import launch

        self.peers.begin()
        for r in self.peers.ranks:
            o = None if self.kind == "ag" else outs[r]
            launch(self.kernel, self.grid, self.threads, self._bind(r, inputs[r], o),
                   self.peers.stream(r))
        self.peers.end()
        if self.kind == "ag":
            return {r: self.sym.tensors[r] for r in self.peers.ranks}
        return outs

    def check(self) -> None:
        for r in self.peers.ranks:
            rec = self.err[r].tolist()
            if rec[0]:
                raise RuntimeError(f"hand {self.spec['hand']['kernel']} rank {r}: timeout record {rec}")


def _occupancy(kernel, threads: int) -> int:
    from pkc.runtime.driver import call

    return int(call("cuOccupancyMaxActiveBlocksPerMultiprocessor", kernel.func, threads, 0))


def run_case(spec: dict, budget_s: float) -> dict:
    import torch
    from collectives_ir import compile_ir, peers, reference
    from pkc.runtime.scheduled_comm import ScheduledCollective
    from timing import alternate, last_stats

    coll, algo, W, nbytes, dt = (spec[k] for k in ("collective", "algorithm", "W", "bytes", "dtype"))
    TD = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[dt]
    ck, plan, n_in, n_out = compile_ir(coll, algo, W, nbytes, dt)
    if plan["comm_kind"] != spec["kind"] or (n_in, n_out) != (spec["n_in"], spec["n_out"]):
        raise RuntimeError(f"the IR plan ({plan['comm_kind']}, {n_in}, {n_out}) is not the one the "
                           f"hand kernels were generated for ({spec['kind']}, {spec['n_in']}, {spec['n_out']})")
    pr = peers(W)
    ir = ScheduledCollective(ck.ptx, ck.meta, pr, [n_in], [n_out], dt, timeout_ns=TIMEOUT_NS)
    hand = HandOnShared(spec, ir, pr, pr.device)
    row = {"collective": coll, "kind": spec["kind"], "W": W, "bytes": nbytes, "dtype": dt,
           "gather": plan.get("gather"), "groups": plan.get("groups"), "lanes": pr.mode,
           "ir_grid": ir.grid, "ir_threads": ir.threads, "ir_slice": ir.slice,
           "ir_regs": ir.kernel.num_regs, "hand_grid": hand.grid, "hand_threads": hand.threads,
           "hand_slice": hand.per, "hand_regs": hand.kernel.num_regs, "hand": spec["hand"]["kernel"]}
    g = torch.Generator(device="cuda").manual_seed(nbytes + W)
    X = torch.empty(W, n_in, dtype=TD, device="cuda")
    outs = {r: torch.empty(n_out, dtype=TD, device="cuda") for r in range(W)}
    xs = {r: X[r] for r in range(W)}
    fi, fh = (lambda: ir.run(xs, outs=outs)), (lambda: hand.run(xs, outs))
    sets = [control_set(pr, ir, ("vs-hand", spec["hand"]["kernel"], n_in, k)) for k in range(2)]
    ratios_all = []
    for phase, (mine, theirs) in enumerate([(0, 1), (1, 0)]):
        use_controls(ir, hand, sets[mine], sets[theirs])
        ok = {"ir": True, "hand": True}
        for i in range(6):                     # hand, IR, hand, ... on the same buffers
            name = "hand" if i % 2 == 0 else "ir"
            X.normal_(generator=g)
            for o in outs.values():
                o.fill_(float("nan"))
            got = fh() if name == "hand" else fi()
            got = {r: t.clone() for r, t in got.items()}
            torch.cuda.synchronize()
            ir.check()
            hand.check()
            want = reference(coll, [X[r] for r in range(W)], W)
            ok[name] &= all(torch.equal(got[r].view(-1), want[r].view(-1)) for r in range(W))
        row.update(ir_equal_reference=ok["ir"] and row.get("ir_equal_reference", True),
                   hand_equal_reference=ok["hand"] and row.get("hand_equal_reference", True))
        if not (ok["ir"] and ok["hand"]):
            return row
        for fn in (fi, fh, fi, fh):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(4):
            fi()
            fh()
        torch.cuda.synchronize()
        pair_s = (time.perf_counter() - t0) / 4
        iters = int(max(40, min(400, budget_s / 2 / max(pair_s, 1e-6))) // 8 * 8)
        times = alternate({"ir": [fi], "hand": [fh]}, iters, chunk=8)
        ir.check()
        hand.check()
        t_ir, t_h = times["ir"], times["hand"]
        ratios = [h / i for i, h in zip(t_ir, t_h)]
        ratios_all += ratios
        row[f"phase{phase}"] = {"iters": len(t_ir), "us_ir": statistics.median(t_ir) * 1e3,
                                "us_hand": statistics.median(t_h) * 1e3,
                                "ir_speed_over_hand": statistics.median(ratios),
                                "late_chunks": last_stats.get("late_chunks"),
                                **by_position(t_ir, t_h)}
    p0, p1 = row["phase0"], row["phase1"]
    ratios_all.sort()
    q = len(ratios_all) // 4
    row.update(iters=len(ratios_all), us_ir=(p0["us_ir"] + p1["us_ir"]) / 2,
               us_hand=(p0["us_hand"] + p1["us_hand"]) / 2,
               # the two placements of the control words weigh equally
               ir_speed_over_hand=(p0["ir_speed_over_hand"] * p1["ir_speed_over_hand"]) ** 0.5,
               ratio_q1=ratios_all[q], ratio_q3=ratios_all[-q - 1])
    return row


def by_position(t_ir: list, t_h: list) -> dict:
    """The launches split by their place in the pair (``alternate`` runs IR then hand in
    even iterations, hand then IR in odd ones; whole chunks of 8 are kept or dropped, so
    the parity holds): medians (us) of each kernel first and second, and the paired ratio
    hand / IR of each order. A kernel's time depends on what ran just before it (the L2
    holds the previous launch's staging half), so a distribution of two modes shows here."""
    def med(xs):
        return statistics.median(xs) * 1e3 if xs else float("nan")
    ev, od = range(0, len(t_ir), 2), range(1, len(t_ir), 2)
    return {"us_ir_first": med([t_ir[i] for i in ev]), "us_hand_second": med([t_h[i] for i in ev]),
            "us_hand_first": med([t_h[i] for i in od]), "us_ir_second": med([t_ir[i] for i in od]),
            "ratio_ir_first": statistics.median(t_h[i] / t_ir[i] for i in ev) if ev else None,
            "ratio_hand_first": statistics.median(t_h[i] / t_ir[i] for i in od) if od else None,
            "t_ir_us": [round(t * 1e3, 3) for t in t_ir], "t_hand_us": [round(t * 1e3, 3) for t in t_h]}


def control_set(peers, ir, key) -> dict:
    """Signal pads (symmetric) and an epoch word pair (per rank) big enough for either
    kernel (the IR's pads are sized for its largest grid), zeroed."""
    import torch

    n = max(b.elements for b in ir.comm.buffers if b.symmetric and b.dtype == "i32")
    return {"pads": peers.symmetric(key + ("pads",), [n], torch.int32, zero=True),
            "ctl": peers.local(key + ("ctl",), [2], torch.int32, zero=True)}


def use_controls(ir, hand, for_ir: dict, for_hand: dict) -> None:
    """Gives each kernel a control set (zeroed again: a fresh epoch count; the LL kinds'
    shared lines cleared too, since their flags are epochs); the other buffers stay shared."""
    import torch

    syms = [b for b in ir.comm.buffers if b.symmetric]
    locs = [b for b in ir.comm.buffers if not b.symmetric]
    (pi,) = [i for i, b in enumerate(syms) if b.dtype == "i32"]
    (ci,) = [i for i, b in enumerate(locs) if b.dtype == "i32" and b.elements == 2]
    for cs in (for_ir, for_hand):
        for t in list(cs["pads"].tensors.values()) + list(cs["ctl"].values()):
            t.zero_()
    if hand.kind.startswith("ll"):     # LL lines carry epochs: counting restarts, so clear them
        for i, b in enumerate(syms):
            if b.dtype != "i32":
                for t in ir.syms[i].tensors.values():
                    t.zero_()
    ir.syms[pi], ir.locals[ci] = for_ir["pads"], for_ir["ctl"]
    ir._args.clear()
    hand.pads, hand.ctl = for_hand["pads"], for_hand["ctl"]
    if hand.kind.startswith("ll"):
        for t in hand.ctl.values():
            t[0] = LL_EPOCH0
    hand._args.clear()
    torch.cuda.synchronize()


def strip_zero_defaults(ptx: str) -> tuple[str, int]:
    """The IR PTX without the zero moves that define a guarded vector load's registers
    where its guard fails (ptx.ld_v4 since 46bcb01): an experiment on their cost, not a
    kernel to use (the registers are then undefined where the guard fails)."""
    import re

    pat = re.compile(r"((?:[ \t]*mov\.b32 (%r\d+), 0;\n){4})([ \t]*@%p\d+ ld\.global[\w.]*\.v4\.b32 "
                     r"\{(%r\d+), (%r\d+), (%r\d+), (%r\d+)\})")
    n = 0

    def drop(m):
        nonlocal n
        movs = re.findall(r"mov\.b32 (%r\d+), 0;", m.group(1))
        if movs != [m.group(4), m.group(5), m.group(6), m.group(7)]:
            return m.group(0)
        n += 1
        return m.group(3)
    return pat.sub(drop, ptx), n


def run_variants(spec: dict, iters: int) -> dict:
    """One case, five launchers alternated on the same staging / input / output: the hand
    kernel, a second hand instance (its own pads: A/A), the IR runner, a second IR runner
    (its own pads: A/A), and the IR PTX without the guarded loads' zero defaults. Medians
    and the median per-round ratio of each to the IR runner's launch (> 1: slower)."""
    import torch
    from collectives_ir import compile_ir, peers, reference
    from pkc.runtime.scheduled_comm import ScheduledCollective
    from timing import alternate, last_stats

    coll, algo, W, nbytes, dt = (spec[k] for k in ("collective", "algorithm", "W", "bytes", "dtype"))
    if spec["kind"].startswith("ll"):
        raise ValueError("variants share the LL lines between launchers of equal epochs: not for LL kinds")
    TD = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[dt]
    ck, plan, n_in, n_out = compile_ir(coll, algo, W, nbytes, dt)
    pr = peers(W)
    ir = ScheduledCollective(ck.ptx, ck.meta, pr, [n_in], [n_out], dt, timeout_ns=TIMEOUT_NS)
    nozero_ptx, stripped = strip_zero_defaults(ck.ptx)
    others = {"ir_b": ScheduledCollective(ck.ptx, ck.meta, pr, [n_in], [n_out], dt, timeout_ns=TIMEOUT_NS),
              "ir_nozero": ScheduledCollective(nozero_ptx, ck.meta, pr, [n_in], [n_out], dt,
                                               timeout_ns=TIMEOUT_NS)}
    for o in others.values():        # the same staging (or symmetric output) as the IR runner
        if o.sym_out:
            o.sym_out = ir.sym_out
        else:
            o.syms[0] = ir.syms[0]
    hands = {"hand": HandOnShared(spec, ir, pr, pr.device), "hand_b": HandOnShared(spec, ir, pr, pr.device)}
    X = torch.empty(W, n_in, dtype=TD, device="cuda")
    outs = {r: torch.empty(n_out, dtype=TD, device="cuda") for r in range(W)}
    xs = {r: X[r] for r in range(W)}
    fns = {"ir": lambda: ir.run(xs, outs=outs), "hand": lambda: hands["hand"].run(xs, outs),
           "ir_b": lambda: others["ir_b"].run(xs, outs=outs),
           "hand_b": lambda: hands["hand_b"].run(xs, outs),
           "ir_nozero": lambda: others["ir_nozero"].run(xs, outs=outs)}
    row = {"variants": True, "collective": coll, "kind": spec["kind"], "W": W, "bytes": nbytes,
           "dtype": dt, "stripped_loads": stripped, "regs": {"ir": ir.kernel.num_regs,
           "ir_nozero": others["ir_nozero"].kernel.num_regs, "hand": hands["hand"].kernel.num_regs}}
    g = torch.Generator(device="cuda").manual_seed(nbytes + W)
    ok = {}
    for rnd in range(2):
        for name, fn in fns.items():
            X.normal_(generator=g)
            for o in outs.values():
                o.fill_(float("nan"))
            got = {r: t.clone() for r, t in fn().items()}
            torch.cuda.synchronize()
            want = reference(coll, [X[r] for r in range(W)], W)
            ok[name] = ok.get(name, True) and all(
                torch.equal(got[r].view(-1), want[r].view(-1)) for r in range(W))
    ir.check()
    for h in hands.values():
        h.check()
    row["equal_reference"] = ok
    if not all(ok.values()):
        return row
    times = alternate({n: [f] for n, f in fns.items()}, iters, chunk=8)
    base = times["ir"]
    row.update(iters=len(base), late_chunks=last_stats.get("late_chunks"),
               us={n: statistics.median(t) * 1e3 for n, t in times.items()},
               over_ir={n: statistics.median(a / b for a, b in zip(t, base))
                        for n, t in times.items() if n != "ir"})
    row["ir_speed_over_hand"] = row["over_ir"]["hand"]
    return row


def summary(path: str) -> None:
    rows = [json.loads(line) for line in open(path)]
    print(f"\n{'kind':5} {'W':>2} {'dt':4} {'bytes':>10} {'ok':3} {'IR us':>9} {'hand us':>9} "
          f"{'hand/IR':>7} {'q1..q3':>13} {'grid i/h':>9} {'regs i/h':>8}")
    for r in rows:
        if r.get("variants"):
            print(f"{r['kind']:5} {r['W']:2} {r['dtype']:4} {r['bytes']:10} variants (time / IR's): "
                  + ", ".join(f"{n} {v:.3f}" for n, v in r.get("over_ir", {}).items())
                  + f"  us IR {r.get('us', {}).get('ir', float('nan')):.2f}  ok {r.get('equal_reference')}")
            continue
        if "ir_speed_over_hand" not in r:
            print(json.dumps(r)[:400])
            continue
        flag = "" if r["ir_speed_over_hand"] >= 0.98 else "  < 0.98"
        print(f"{r['kind']:5} {r['W']:2} {r['dtype']:4} {r['bytes']:10} {'ok':3} {r['us_ir']:9.2f} "
              f"{r['us_hand']:9.2f} {r['ir_speed_over_hand']:7.3f} {r['ratio_q1']:6.3f}..{r['ratio_q3']:.3f} "
              f"{r['ir_grid']:4}/{r['hand_grid']:<4} {r['ir_regs']:3}/{r['hand_regs']:<3}{flag}")
        for ph in ("phase0", "phase1"):
            p = r.get(ph, {})
            if "us_ir_first" in p:      # by place in the pair: first / second of the two
                print(f"{'':24} {ph}: IR first {p['us_ir_first']:.2f} / second {p['us_ir_second']:.2f} us, "
                      f"hand first {p['us_hand_first']:.2f} / second {p['us_hand_second']:.2f} us; "
                      f"hand/IR with IR first {p['ratio_ir_first']:.3f}, hand first {p['ratio_hand_first']:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out/collectives_vs_hand")
    ap.add_argument("--summary", action="store_true")
    ap.add_argument("--only", default="", help="kinds to run, comma-separated (default all)")
    ap.add_argument("--case-s", type=float, default=1.2, help="timing budget per case (s)")
    ap.add_argument("--budget-s", type=float, default=200.0)
    ap.add_argument("--variants", default="",
                    help="kind:W:dtype:bytes,... run these cases with five launchers (A/A and "
                         "the IR PTX without zero defaults) instead")
    ap.add_argument("--variant-iters", type=int, default=800)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "rows.jsonl")
    if args.summary:
        summary(path)
        return
    specs = json.load(open(os.path.join(HAND_DIR, "cases.json")))
    only = set(filter(None, args.only.split(",")))
    chosen = [tuple(v.split(":")) for v in filter(None, args.variants.split(","))]
    if chosen:
        specs = [s for s in specs if (s["kind"], str(s["W"]), s["dtype"], str(s["bytes"])) in chosen]
    t0 = time.time()
    for spec in specs:
        if only and spec["kind"] not in only:
            continue
        if time.time() - t0 > args.budget_s:
            row = {"case": spec, "error": "skipped: out of time"}
        else:
            try:
                row = run_variants(spec, args.variant_iters) if chosen else run_case(spec, args.case_s)
            except Exception as e:      # one failing case must not hide the others
                row = {"case": {k: spec[k] for k in ("collective", "kind", "W", "bytes", "dtype")},
                       "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-1500:]}
        print(json.dumps(row), flush=True)
        with open(path, "a") as f:
            f.write(json.dumps(row) + "\n")
    summary(path)


if __name__ == "__main__":
    main()
