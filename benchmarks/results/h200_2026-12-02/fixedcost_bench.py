# How fixedcost_run1/2 were made (h8-fixedcost, 2026-12-02), kept for reproduction; not part
# of the benchmark suite (it needs the deleted hand generators). From the repo root:
#   mkdir -p .par/h8 && cp benchmarks/results/h200_2026-12-02/fixedcost_bench.py .par/h8/bench.py
#   cp benchmarks/results/h200_2026-12-02/fixedcost_cases.py .par/h8/cases.py
#   git worktree add /tmp/old bfd729f; cp -r /tmp/old/pkc .par/h8/oldpkc/pkc_old and rewrite
#     its imports: sed -E 's/\bfrom pkc\./from pkc_old./; s/\bfrom pkc import/from pkc_old import/;
#     s/\bimport pkc\./import pkc_old./' (the hand generators importable beside today's pkc)
#   git archive 90b4e08 pkc benchmarks | tar -x -C .par/h8/head  (before; also the runtime and
#     timing the runner uses); the after tree: the same plus the diff of 0a75a79 to
#     pkc/passes/fused_schedule.py and fused_ar_schedule.py
#   PTX (fixedcost_dump.py, run inside each tree): per case fused_ar_ir.compile_ir -> ptx, meta
#     pickle, plan json into .par/h8/ptx/{before,after}; the GEMM alone (gemm_ir.compile_gemm
#     with variant_of(plan)) into .par/h8/ptx/gemm/<case>.gemm.*
#   on the GPU: PYTHONPATH=/tmp/site:.par/h8/head:.par/h8/oldpkc python3 .par/h8/bench.py OUT
"""h8-fixedcost device runner: per case, the IR fused kernel of HEAD (before), of HEAD + the
change (after), the hand kernel (git history, bfd729f, imported as pkc_old) and the IR GEMM
alone, launched in one process, alternated (timing.rotated: each launch behind a sleep,
order rotated every round). PTX of before / after / GEMM precompiled on the CPU
(.par/h8/ptx). Writes $OUT/h8/bench.json and prints a table.
    PYTHONPATH=/tmp/site:.par/h8/head:.par/h8/oldpkc python .par/h8/bench.py OUTDIR [filter]"""
import json, os, pickle, statistics, sys, time, traceback
H8 = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(H8, "head", "benchmarks"), H8]
import torch
from cases import CASES, fname
from timing import rotated
from pkc.runtime.peers import VirtualPeers
from pkc.runtime.scheduled import ScheduledKernel
from pkc.runtime.scheduled_fused import ScheduledFused, launch_ranks

OUT = sys.argv[1]
FILT = sys.argv[2] if len(sys.argv) > 2 else ""
os.makedirs(OUT, exist_ok=True)
PTX = os.path.join(H8, "ptx")


def load(kind_dir, fn, suffix=""):
    ptx = open(os.path.join(PTX, kind_dir, fn + suffix + ".ptx")).read()
    meta = pickle.load(open(os.path.join(PTX, kind_dir, fn + suffix + ".meta.pkl"), "rb"))
    return ptx, meta


class Gemm:
    def __init__(self, fn, peers):
        ptx, meta = load("gemm", fn, ".gemm")
        self.k = ScheduledKernel(ptx, meta, peers.device)
        self.peers = peers
        W = peers.world
        self.grid = meta.grid(peers.sms if W == 1 else min(peers.sms_of(r) for r in peers.ranks))

    def __call__(self, a, b, c):
        bound = [(r, self.k.pack([a[r], b[r], c[r]])) for r in self.peers.ranks]
        launch_ranks(self.k.kernel, self.grid, self.k.meta.threads, bound, self.peers, self.peers.world)


def hand_world(kind, W, M, N, K, plan, fresh, peers, name):
    if M % W:
        return None
    from pkc_old.codegen.hopper.fused import FusedConfig, FusedWorld
    from pkc_old.target.gemm_tuning import GemmConfig
    cfg = GemmConfig(bm=plan["bm"], bn=plan["bn"], stages=plan["stages"], consumers=plan["consumers"],
                     group_m=plan["group_m"], b_layout=plan["b_layout"])
    return FusedWorld(FusedConfig(kind=kind, world=W, gemm=cfg, out=fresh), M // W, N, K,
                      peers=peers, owner=("h8-hand", name), sig_timeout_ns=500_000_000)


def run_case(name, kind, W, M, N, K, lay, rounds, peers):
    fn = fname(kind, W, M, N, K, lay)
    plan = json.load(open(os.path.join(PTX, "before", fn + ".plan.json")))
    fresh = bool(plan.get("fresh_output"))
    irs = {}
    for tag in ("before", "after"):
        ptx, meta = load(tag, fn)
        irs[tag] = ScheduledFused(ptx, meta, peers, owner=("h8-" + tag, name), timeout_ns=500_000_000)
    torch.manual_seed(0)
    a = [torch.randn(M, K, device="cuda", dtype=torch.bfloat16) for _ in range(W)]
    w = [torch.randn(N, K, device="cuda", dtype=torch.bfloat16) / K ** 0.5 for _ in range(W)]
    b = [wi if lay == "nk" else wi.t().contiguous() for wi in w]
    full = sum(a[r].float() @ w[r].float().t() for r in range(W))
    Mc = M // W if kind == "rs" else M
    if kind == "rs":
        Mc = -(-M // W)
    refs = (lambda r: full[r * Mc:(r + 1) * Mc]) if kind == "rs" else (lambda r: full)
    scale = float(full.abs().max())
    tol = 2 ** -6 * scale * W if kind == "rs" else 2 ** -7 * scale * (W + 1)
    keep = {t: ({r: torch.full(tuple(refs(r).shape), float("nan"), device="cuda", dtype=torch.bfloat16)
                 for r in range(W)} if fresh else None) for t in irs}
    outs = {}
    for t, k in irs.items():
        outs[t] = {r: v for r, v in k.run(a, b, out=keep[t]).items()}
    hand = hand_world(kind, W, M, N, K, plan, fresh, peers, name)
    houts = hand.run(a, b) if hand is not None else None
    torch.cuda.synchronize()
    for k in irs.values():
        k.check()
    if hand is not None:
        hand.check()

    def err(o):
        return max(float((o[r].float() - refs(r)).abs().max()) for r in range(W))
    row = {"case": name, "kind": kind, "W": W, "M": M, "N": N, "K": K, "layout": lay,
           "tile": f"{plan['bm']}x{plan['bn']}_s{plan['stages']}", "fresh_output": fresh,
           "tol": tol, "grid": irs["after"].grid, "regs_after": irs["after"].kernel.num_regs,
           "regs_before": irs["before"].kernel.num_regs}
    for t in irs:
        row[f"err_{t}"] = err(outs[t])
        row[f"ok_{t}"] = row[f"err_{t}"] <= tol and not any(bool(torch.isnan(outs[t][r]).any()) for r in range(W))
    row["after_bitwise_before"] = all(torch.equal(outs["after"][r], outs["before"][r]) for r in range(W))
    if hand is not None:
        row["hand_grid"] = hand.grid
        row["err_hand"] = err({r: houts[r] for r in range(W)})
        row["after_bitwise_hand"] = all(torch.equal(outs["after"][r], houts[r]) for r in range(W))
    if not (row["ok_before"] and row["ok_after"]):
        return row
    gemm = Gemm(fn, peers)
    c = {r: torch.empty(M, N, device="cuda", dtype=torch.bfloat16) for r in range(W)}
    names = ["before", "after", "gemm"] + (["hand"] if hand is not None else [])
    fns = [lambda: irs["before"].run(a, b, out=keep["before"]),
           lambda: irs["after"].run(a, b, out=keep["after"]),
           lambda: gemm(a, b, c)] + ([lambda: hand.run(a, b)] if hand is not None else [])
    for _ in range(5):
        for f in fns:
            f()
    torch.cuda.synchronize()
    ts = rotated(fns, rounds)
    torch.cuda.synchronize()
    for k in irs.values():
        k.check()
    T = dict(zip(names, ts))
    for n in names:
        row[f"us_{n}"] = statistics.median(T[n]) * 1e6
        row[f"us_{n}_min"] = min(T[n]) * 1e6

    def ratio(x, y):
        return statistics.median(xi / yi for xi, yi in zip(T[x], T[y]))
    row["after_over_before"] = ratio("after", "before")
    row["after_over_gemm"] = ratio("after", "gemm")
    row["before_over_gemm"] = ratio("before", "gemm")
    if hand is not None:
        row["hand_over_after"] = ratio("hand", "after")
        row["hand_over_before"] = ratio("hand", "before")
    # correct after the timed launches too
    for t, k in irs.items():
        o = k.run(a, b, out=keep[t])
        torch.cuda.synchronize()
        row[f"ok_{t}_after_timing"] = err(o) <= tol
    row["rounds"] = rounds
    return row


def main():
    rows, worlds = [], {}
    t0 = time.time()
    for cs in CASES:
        if FILT and FILT not in cs[0]:
            continue
        name, kind, W = cs[:3]
        try:
            peers = worlds.get(W) or worlds.setdefault(W, VirtualPeers(W))
            row = run_case(*cs, peers=peers)
        except Exception as e:
            traceback.print_exc()
            row = {"case": name, "error": f"{type(e).__name__}: {e}"}
        row["t"] = round(time.time() - t0, 1)
        rows.append(row)
        print(json.dumps(row), flush=True)
        json.dump(rows, open(os.path.join(OUT, "bench.json"), "w"), indent=1)
    print(f"\n{'case':30} {'tile':12} {'ok':3} {'before':>7} {'after':>7} {'hand':>7} {'GEMM':>7} "
          f"{'aft/bef':>7} {'hnd/aft':>7} {'hnd/bef':>7} {'aft/G':>6} {'bef/G':>6} {'=bef':>5} {'=hnd':>5}")
    for r in rows:
        if "error" in r:
            print(f"{r['case']:30} ERROR {r['error'][:120]}")
            continue
        ok = r.get("ok_before") and r.get("ok_after") and r.get("ok_after_after_timing", False)
        g = lambda k, f="7.2f": format(r[k], f) if k in r else "-".rjust(int(f.split('.')[0]))
        print(f"{r['case']:30} {r['tile']:12} {'Y' if ok else 'N':3} {g('us_before','7.1f')} {g('us_after','7.1f')} "
              f"{g('us_hand','7.1f')} {g('us_gemm','7.1f')} {g('after_over_before','7.3f')} "
              f"{g('hand_over_after','7.3f')} {g('hand_over_before','7.3f')} {g('after_over_gemm','6.3f')} "
              f"{g('before_over_gemm','6.3f')} {str(r.get('after_bitwise_before'))[:5]:>5} "
              f"{str(r.get('after_bitwise_hand', '-'))[:5]:>5}")


if __name__ == "__main__":
    main()
