"""Probe: is the rs 4 MiB W = 4 gap the kernel or the runner? Each PTX in each runner."""
import json, os, statistics, sys
sys.path.insert(0, os.path.join(os.getcwd(), "benchmarks")); sys.path.insert(0, os.getcwd())
import torch
import collectives_ir as B
from timing import alternate
import pkc.codegen.hopper.collectives as HC
from pkc.runtime.scheduled_comm import ScheduledCollective

out = os.environ.get("OUT", "/tmp")
rows = []
for dt in ("bf16", "f16"):
    W, nbytes = 4, 4 << 20
    ck, plan, n_in, n_out = B.compile_ir("reduce_scatter", "direct", W, nbytes, dt)
    ir_ptx = ck.ptx
    cfg = HC.hand_collective_config("rs", W, dt, n_in)
    hand_ptx = HC.emit_collective_ptx(cfg)
    hname, iname = cfg.kernel_name, ck.meta.name
    # IR PTX with the hand's parameter order (ctl after rank) and name
    L = ir_ptx.split("\n")
    a2 = next(i for i, l in enumerate(L) if l.strip().startswith(".param .u64 alloc2"))
    line = L.pop(a2)
    rk = next(i for i, l in enumerate(L) if l.strip().startswith(".param .u32 rank"))
    L.insert(rk + 1, line)
    ir_as_hand = "\n".join(L).replace(iname, hname)
    # hand PTX with the IR's parameter order (ctl after mypad) and name
    L = hand_ptx.split("\n")
    c = next(i for i, l in enumerate(L) if l.strip().startswith(f".param .u64 {hname}_param_ctl"))
    line = L.pop(c)
    mp = next(i for i, l in enumerate(L) if l.strip().startswith(f".param .u64 {hname}_param_mypad"))
    L.insert(mp + 1, line)
    hand_as_ir = "\n".join(L).replace(hname, iname)
    pr = B.peers(W)
    TD = {"bf16": torch.bfloat16, "f16": torch.float16}[dt]
    runners = {}
    runners["ir"] = ScheduledCollective(ir_ptx, ck.meta, pr, [n_in], [n_out], dt, timeout_ns=B.TIMEOUT_NS)
    runners["ir_runner_hand_ptx"] = ScheduledCollective(hand_as_ir, ck.meta, pr, [n_in], [n_out], dt, timeout_ns=B.TIMEOUT_NS)
    runners["hand"] = HC.CollectiveRunner(cfg, n_in, pr, timeout_ns=B.TIMEOUT_NS)
    orig = HC.emit_collective_ptx
    HC.emit_collective_ptx = lambda c: ir_as_hand
    runners["hand_runner_ir_ptx"] = HC.CollectiveRunner(cfg, n_in, pr, timeout_ns=B.TIMEOUT_NS)
    HC.emit_collective_ptx = orig
    xs = {r: torch.randn(n_in, device="cuda", dtype=TD) for r in range(W)}
    want = B.reference("reduce_scatter", [xs[r] for r in range(W)], W)
    outs = {k: {r: torch.empty(n_out, dtype=TD, device="cuda") for r in range(W)} for k in runners}
    fns = {}
    for k, run in runners.items():
        if isinstance(run, ScheduledCollective):
            fns[k] = [lambda run=run, o=outs[k]: run.run(xs, outs=o)]
        else:
            fns[k] = [lambda run=run, o=outs[k]: run.run(xs, outs=o)]
    ok = {}
    for k, f in fns.items():
        for r in range(W):
            outs[k][r].fill_(float("nan"))
        f[0](); torch.cuda.synchronize(); runners[k].check()
        ok[k] = all(torch.equal(outs[k][r].view(-1), want[r].view(-1)) for r in range(W))
    t = alternate(fns, 160, chunk=8)
    row = {"dtype": dt, "correct": ok}
    base = t["hand"]
    for k, v in t.items():
        row[f"us_{k}"] = statistics.median(v) * 1e3
        row[f"{k}_speed_vs_hand"] = statistics.median(h / x for x, h in zip(v, base))
    rows.append(row); print(json.dumps(row), flush=True)
json.dump(rows, open(os.path.join(out, "rs_swap.json"), "w"), indent=1)
for r in rows:
    print(r["dtype"], r["correct"])
    for k in ("hand", "ir", "hand_runner_ir_ptx", "ir_runner_hand_ptx"):
        print(f"  {k:22s} {r['us_' + k]:8.2f} us  speed vs hand {r[k + '_speed_vs_hand']:.3f}")
