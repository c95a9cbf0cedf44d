"""All-reduce, all-gather and reduce-scatter from 4 KiB to 1 GiB (issue 7): pkc against
NCCL (torch.distributed) and torch's symmetric-memory collectives; latency and bus bandwidth.

    torchrun --nproc_per_node=W benchmarks/collectives.py [--out DIR] [--budget-s 120]
    python benchmarks/collectives.py                # one GPU: W = 1 (a 1-rank NCCL group)

Sizes (bf16) are nccl-tests' message sizes: the all-reduce buffer, the all-gather's
output, the reduce-scatter's input; 4 KiB, 16 KiB, ... 1 GiB (x4 steps; ``--max-size``).
Implementations (outputs checked against NCCL's on the first call):
- ``nccl``: dist.all_reduce (in place) / all_gather_into_tensor / reduce_scatter_tensor
  (NVLS off: NCCL_NVLS_ENABLE=0);
- ``one_shot``, ``two_shot`` (all-reduce): torch.ops.symm_mem.one_shot_all_reduce /
  two_shot_all_reduce_ on a symmetric-memory input;
- ``ce`` (all-gather, reduce-scatter): torch's symmetric-memory "low contention"
  collectives (_low_contention_all_gather / _reduce_scatter: copy-engine pulls);
- ``pkc``: the compiler's path: graph-level pk IR of the collective, the ``default``
  pipeline (lower-collectives picks one-shot / two-shot from the cost model), run by
  pkc's runtime under torch.distributed (pkc.runtime.executable: the lowered kernel takes
  the sm_90a fast path when it has one; ``pkc_path`` in the JSON says which), output
  copied out of the persistent buffer as a compiled graph's result is;
- ``pkc_one_shot``, ``pkc_two_shot`` (all-reduce), ``pkc_direct`` (all-gather,
  reduce-scatter): pkc's IR-built collective kernels (lower-collectives with that
  algorithm, schedule-collectives, sm_90a lowering: benchmarks/collectives_ir.py's
  ``compile_ir``) driven directly (pkc.runtime.scheduled_comm.ScheduledCollective over the
  compiled programs' symmetric-memory peers): the kernel without the compiled path's
  per-call graph walk and output copy; into one output tensor allocated once (the
  all-gather: its persistent symmetric output).

Timing as in fused_sweep.py: CUDA events around every call, implementations interleaved,
host queued ahead with torch.cuda._sleep, medians. Bus bandwidth as in nccl-tests
(all-reduce: algbw x 2(W-1)/W; all-gather, reduce-scatter: algbw x (W-1)/W).
Writes ``collectives.json`` (+ ``collectives.png`` with matplotlib) under ``--out``
(default benchmarks/results/<machine>_<date>/), prints tables of ratios (speedup over NCCL).
"""

from __future__ import annotations

import os

for _k, _v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
               ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ[_k] = _v

import argparse  # noqa: E402
import datetime  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fused_sweep import (Ctx, PkcProgram, bus_bw, collective_ir,  # noqa: E402
                         collective_sizes, fmt_size, format_table, have_matplotlib, machine_tag,
                         median, ratio, rel_err, results_dir, time_interleaved, timing_stats,
                         write_json)

OPS = ("all_reduce", "all_gather", "reduce_scatter")
COLS = 256          # elements per row of the 2-d tensors (4 KiB of bf16 = 8 rows)
ESIZE = 2           # bf16


def layout(op: str, size_bytes: int, world: int, cols: int = COLS) -> tuple[int, int] | None:
    """(rows, cols) of the message's full tensor, or None if ``size_bytes`` does not split
    into whole rows for every rank."""
    elems = size_bytes // ESIZE
    if elems % cols:
        return None
    rows = elems // cols
    if op != "all_reduce" and rows % world:
        return None
    return rows, cols


def iters_for(size_bytes: int) -> int:
    return 40 if size_bytes <= 16 << 20 else (12 if size_bytes <= 256 << 20 else 6)


def speedups(row: dict) -> dict:
    """NCCL time / implementation time (> 1: faster than NCCL)."""
    t = row.get("ms", {})
    return {k: ratio(t.get("nccl"), v) for k, v in t.items() if k != "nccl"}


def waited(t):
    """The low-contention collectives run on a backend stream and register a work item for
    their output: wait for it on the current stream (funcol's wait_tensor), or the CUDA
    events around the call time only the enqueue. (The first device run, 2026-11-29, timed
    them without this wait: its ``ce`` numbers, a flat ~3 us, are not valid.)"""
    import torch

    return torch.ops._c10d_functional.wait_tensor(t)


def bench_baselines(ctx: Ctx, op: str, size: int, args) -> dict:
    import torch
    import torch.distributed._symmetric_memory as symm_mem

    W, dev = ctx.world, ctx.device
    rows, cols = layout(op, size, W)
    row = {"op": op, "size": size, "rows": rows, "cols": cols, "ms": {}, "checks": {}, "notes": []}
    gen = torch.Generator(device=dev).manual_seed(7 + ctx.rank + size)
    bf = torch.bfloat16
    if op == "all_gather":
        x = torch.randn(rows // W, cols, device=dev, dtype=bf, generator=gen)
        out = torch.empty(rows, cols, device=dev, dtype=bf)
        nccl = lambda: ctx.dist.all_gather_into_tensor(out, x)  # noqa: E731
        nccl()
        ref = out.clone()
    elif op == "reduce_scatter":
        x = torch.randn(rows, cols, device=dev, dtype=bf, generator=gen)
        out = torch.empty(rows // W, cols, device=dev, dtype=bf)
        nccl = lambda: ctx.dist.reduce_scatter_tensor(out, x)  # noqa: E731
        nccl()
        ref = out.clone()
    else:
        x = torch.randn(rows, cols, device=dev, dtype=bf, generator=gen)
        buf = x.clone()
        nccl = lambda: ctx.dist.all_reduce(buf)  # noqa: E731  (in place: values grow; time does not)
        nccl()
        ref = buf.clone()
    torch.cuda.synchronize()
    impls = {"nccl": nccl}
    if size <= 64 << 10:
        # the floor of this timing: one launch of a kernel that does (almost) nothing
        impls["launch"] = lambda: torch.cuda._sleep(1)
    outs = {}
    keep = []

    def try_impl(name, make):
        """make() -> the callable; its first result is checked; dropped on every rank if it
        fails on any."""
        err = None
        try:
            fn = make()
            outs[name] = fn()
            torch.cuda.synchronize()
            impls[name] = fn
        except Exception as e:
            err = f"{type(e).__name__}: {e}"[:300]
        if ctx.agree(err is not None):
            impls.pop(name, None)
            outs.pop(name, None)
            row["notes"].append(f"{name} failed on some rank: {err}")

    def symm_copy(shape, src):
        t = symm_mem.empty(*shape, dtype=bf, device=dev)
        keep.append(symm_mem.rendezvous(t, ctx.group_name))
        t.copy_(src)
        ctx.barrier()
        return t

    def pkc_compiled():
        prog = PkcProgram(collective_ir(op, rows, cols, W), args.pipeline)
        row["pkc_remarks"] = prog.remarks[:3]
        prog(x)                                   # prepares the executable
        row["pkc_path"] = prog.kernel_report()
        return lambda: prog(x)

    def pkc_kernel(algo):
        """The IR-built kernel of ``algo`` for this collective and size, driven directly;
        its first launch's error record checked."""
        def make():
            from collectives_ir import compile_ir
            from pkc.runtime.scheduled_comm import ScheduledCollective

            ck, plan, n_in, n_out = compile_ir(op, algo, W, size, "bf16")
            k = ScheduledCollective(ck.ptx, ck.meta, pkc_peers(), [n_in], [n_out], "bf16")
            row.setdefault("pkc_kinds", {})[f"pkc_{algo}"] = plan.get("comm_kind")
            r, flat = ctx.rank, x.reshape(-1)
            out = {r: torch.full((n_out,), float("nan"), device=dev, dtype=bf)}

            def call():
                return k.run({r: flat}, outs=out)[r]
            call()
            torch.cuda.synchronize()
            k.check()
            return call
        return make

    if not args.no_pkc:
        try_impl("pkc", pkc_compiled)
        for algo in (("one_shot", "two_shot") if op == "all_reduce" else ("direct",)) if W > 1 else ():
            try_impl(f"pkc_{algo}", pkc_kernel(algo))
    if op == "all_reduce":
        def one():
            s1 = symm_copy((rows, cols), x)
            return lambda: torch.ops.symm_mem.one_shot_all_reduce(s1, "sum", ctx.group_name)

        def two():
            s2 = symm_copy((rows, cols), x)
            return lambda: torch.ops.symm_mem.two_shot_all_reduce_(s2, "sum", ctx.group_name)
        try_impl("one_shot", one)
        try_impl("two_shot", two)
    elif op == "all_gather":
        def ce():
            ss = symm_copy((rows // W, cols), x)
            return lambda: waited(symm_mem._low_contention_all_gather(ss, ctx.group_name))
        try_impl("ce", ce)
    else:
        try_impl("ce", lambda: (lambda: waited(symm_mem._low_contention_reduce_scatter(x, "sum", ctx.group_name))))
    for k, v in outs.items():
        e, nan = rel_err(v.view(ref.shape), ref)
        row["checks"][k] = {"rel_err": e, "nan": nan, "ok": nan == 0 and e < 1e-2}
    outs.clear()
    ctx.barrier()
    per = time_interleaved(impls, iters_for(size))
    row["timing"] = dict(timing_stats)      # chunks left out: the host fell behind
    for k, ts in per.items():
        row["ms"][k] = median(ts)
    row["_keep"] = keep  # dropped before writing
    return row


def pkc_peers():
    """The symmetric-memory peers of the compiled programs' runner: one peer world for
    every pkc kernel of the run."""
    return PkcProgram.runner().peers


def add_bandwidths(row: dict, world: int) -> dict:
    row["busbw_GBps"] = {k: bus_bw(row["op"], row["size"], world, v) for k, v in row["ms"].items() if v}
    return row


def tables(res: dict) -> str:
    W = res["world"]
    parts = []
    for op in OPS:
        rows = [r for r in res["rows"] if r["op"] == op]
        if not rows:
            continue
        fixed = ("pkc", "pkc_one_shot", "pkc_two_shot", "pkc_direct", "one_shot", "two_shot",
                 "ce")
        extra = sorted({k for r in rows for k in r["ms"] if k not in fixed and k != "nccl"})
        impls = [k for k in fixed[:2] + tuple(extra) + fixed[2:] if any(k in r["ms"] for r in rows)]
        headers = ["size", "nccl us", "nccl busbw"] + [f"{k} x" for k in impls] + \
                  [f"{k} busbw" for k in impls] + ["checks"]
        body = []
        for r in rows:
            sp = speedups(r)
            bw = r.get("busbw_GBps", {})
            bad = [k for k, c in r["checks"].items() if not c.get("ok")]
            body.append([fmt_size(r["size"]), (r["ms"].get("nccl") or 0) * 1e3, bw.get("nccl")]
                        + [sp.get(k) for k in impls] + [bw.get(k) for k in impls]
                        + ["ok" if not bad else "BAD " + ",".join(bad)])
        parts.append(f"{op} (W={W}; x = NCCL time / time, >1 faster; busbw GB/s)\n"
                     + format_table(headers, body, floatfmt="{:.2f}"))
    return "\n\n".join(parts)


def plot(res: dict, path) -> bool:
    if not have_matplotlib():
        return False
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    for ax, op in zip(axes, OPS):
        rows = [r for r in res["rows"] if r["op"] == op]
        impls = sorted({k for r in rows for k in r.get("busbw_GBps", {})})
        for k in impls:
            pts = [(r["size"], r["busbw_GBps"][k]) for r in rows if k in r.get("busbw_GBps", {})]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=k, markersize=4)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("bus bandwidth (GB/s)")
        ax.set_title(f"{op}, W={res['world']}")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.suptitle(f"collectives on {res.get('device')} (NVLS off)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _nccl_version() -> str | None:
    try:
        import torch

        v = torch.cuda.nccl.version()
        return ".".join(map(str, v)) if isinstance(v, (tuple, list)) else str(v)
    except Exception:
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--min-size", type=int, default=4096)
    ap.add_argument("--max-size", type=int, default=1 << 30)
    ap.add_argument("--ops", nargs="+", choices=OPS, default=list(OPS))
    ap.add_argument("--no-pkc", action="store_true")
    ap.add_argument("--pipeline", default="default")
    ap.add_argument("--budget-s", type=float, default=600.0, help="start no new size after this")
    ap.add_argument("--no-plot", action="store_true")
    args = ap.parse_args(argv)
    import torch

    ctx = Ctx()
    out_dir = Path(args.out) if args.out else results_dir()
    t_start = time.time()
    res = {"bench": "collectives", "world": ctx.world, "device": torch.cuda.get_device_name(ctx.device),
           "machine": machine_tag(), "date": datetime.date.today().isoformat(), "torch": torch.__version__,
           "nccl": _nccl_version(),
           "env": {k: os.environ.get(k) for k in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST",
                                                  "NVSHMEM_DISABLE_NVLS")},
           "rows": [], "skipped": []}
    sizes = collective_sizes(args.min_size, args.max_size)
    # pass 1: NCCL and torch symm_mem at every size
    for op in args.ops:
        for size in sizes:
            if layout(op, size, ctx.world) is None:
                continue
            if ctx.agree(time.time() - t_start > args.budget_s):
                res["skipped"].append(f"{op} {fmt_size(size)}")
                continue
            try:
                row = bench_baselines(ctx, op, size, args)
            except Exception as e:
                traceback.print_exc()
                row = {"op": op, "size": size, "ms": {}, "checks": {}, "notes": [f"error: {e}"[:300]]}
            row.pop("_keep", None)
            res["rows"].append(row)
            ctx.log(f"{op:15s} {fmt_size(size):>5s} " + " ".join(
                f"{k} {v * 1e3:.1f}us" for k, v in row["ms"].items() if v) + " " + "; ".join(row["notes"])
                + (f" [late chunks {row['timing']['late_chunks']}]" if row.get("timing", {}).get("late_chunks") else ""))
    for row in res["rows"]:
        add_bandwidths(row, ctx.world)
    res["secs"] = round(time.time() - t_start, 1)
    if ctx.rank == 0:
        write_json(out_dir / "collectives.json", res)
        if not args.no_plot and plot(res, out_dir / "collectives.png"):
            print(f"plot: {out_dir / 'collectives.png'}")
        print(f"\ncollectives W={ctx.world} on {res['device']} (NCCL {res['nccl']}, NVLS off), medians "
              f"of interleaved event-timed calls; skipped: {res['skipped'] or 'none'}")
        print(tables(res))
        print(f"json: {out_dir / 'collectives.json'}")
    ctx.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
