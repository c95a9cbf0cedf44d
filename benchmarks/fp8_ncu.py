"""Where the fp8 GEMM's time goes against cuBLASLt's, from the hardware counters: Nsight
Compute (ncu, clocks left alone) on one launch of each of pkc's fp8 GEMM tiles and of
torch._scaled_mm (fast accumulation, row- and tensor-wise), same inputs, one run on one
H200. Per kernel: duration, SM clock, cycles, SM / tensor-pipe / L2 / DRAM throughput,
issue-slot use, registers, shared memory, and the warp-stall reasons sampled (the largest
first), so that a gap in work per clock can be placed (operand traffic, a pipeline bubble,
the epilogue, the scale loads) instead of guessed.

    python benchmarks/fp8_ncu.py --out DIR [--shapes 16384x8192x4096,8192^3]  # GPU; MxNxK or N^3

The script runs itself under ncu (``--child``: compile, check against torch, launch each
once), keeps the report (``DIR/fp8.ncu-rep``) and its pages as CSV (``details.csv``,
``raw.csv``, ``source_*.csv``: SASS with stall samples), and prints a table last.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from sweep_common import gemm_shape  # noqa: E402  (the path above)

# (label, schedule-matmul variant; "": its own pick)
VARIANTS = [("pkc default", ""), ("pkc coop 128x256", "128x256_s4_tma"),
            ("pkc pp 128x128", "128x128_pp_s6"), ("pkc pp 128x128 cl2", "128x128_pp_cl2")]
KERNELS = "regex:scaled_matmul|nvjet|sm90_|cutlass"   # pkc's entry: scaled_matmul
SECTIONS = ["SpeedOfLight", "ComputeWorkloadAnalysis", "MemoryWorkloadAnalysis",
            "WarpStateStats", "SchedulerStats", "LaunchStats", "Occupancy", "SourceCounters"]
# extra counters asked for by name where this ncu knows them (checked with --query-metrics)
WANTED = ["sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
          "sm__inst_executed_pipe_tensor_op_gmma.sum",
          "sm__pipe_shared_cycles_active.avg.pct_of_peak_sustained_active",
          "lts__t_sectors_srcunit_tex_op_read.sum", "l1tex__m_xbar2l1tex_read_bytes.sum",
          "smsp__cycles_active.avg", "sm__cycles_elapsed.avg.per_second"]


def child(shapes: list[str]) -> None:
    """Compile and check every variant, then launch each (and torch) once: what ncu sees."""
    import torch
    from fp8_gemm import torch_fp8_launchers
    from fp8_rowwise import compile_variant

    from pkc.runtime.scheduled import ScheduledKernel

    for shape in shapes:
        M, N, K = gemm_shape(shape)
        (a, w, sa, sb), ref, launches, o1 = torch_fp8_launchers(M, N, K)
        outs = [("torch row", o1)]
        for label, variant in VARIANTS:
            ck, _ = compile_variant(M, N, K, True, variant, True)
            kern = ScheduledKernel(ck.ptx, ck.meta)
            c = torch.full_like(ref, float("nan"))
            launches.append((label, lambda k=kern, c=c: k([a, w, sa, sb, c])))
            outs.append((label, c))
            print(json.dumps({"shape": shape, "launcher": label, "kernel": ck.meta.name}),
                  flush=True)
        torch.cuda.synchronize()
        for label, fn in launches:
            fn()
            torch.cuda.synchronize()
        errs = {lb: float((c.float() - ref.float()).abs().max()) for lb, c in outs}
        # ncu numbers the kernels it profiles in launch order: the reference call first
        print(json.dumps({"order": [f"{shape} torch ref"] + [f"{shape} {lb}"
                                                             for lb, _ in launches],
                          "max_abs_vs_torch": errs}), flush=True)


def find_ncu() -> str:
    """Nsight Compute's command line (PATH, then CUDA's usual place)."""
    for p in (shutil.which("ncu"), "/usr/local/cuda/bin/ncu"):
        if p and os.path.exists(p):
            return p
    raise SystemExit("ncu not found")


def known_metrics(ncu: str) -> list[str]:
    """The WANTED counters this ncu can collect on this GPU (by base name)."""
    try:
        q = subprocess.run([ncu, "--query-metrics", "--csv"], capture_output=True, text=True,
                           timeout=120).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    names = {row[0].strip('"') for row in csv.reader(io.StringIO(q)) if row}
    return [m for m in WANTED if m.split(".")[0] in names]


def label_of(key: str, order: list[str]) -> str:
    i = key.split(" ")[0]
    return order[int(i)] if i.isdigit() and int(i) < len(order) else key


def table(details: str, order: list[str]) -> str:
    """Per kernel, the headline figures of the details page."""
    want = ["Duration", "SM Frequency", "Elapsed Cycles", "Compute (SM) Throughput",
            "Memory Throughput", "L2 Cache Throughput", "DRAM Throughput", "Executed Ipc Active",
            "Issue Slots Busy", "Registers Per Thread", "Dynamic Shared Memory Per Block",
            "Warp Cycles Per Issued Instruction", "Achieved Occupancy"]
    rows: dict[str, dict] = {}
    seen = []
    for r in csv.DictReader(io.StringIO(details)):
        key = f'{r.get("ID")} {r.get("Kernel Name", "")[:60]}'
        if key not in rows:
            rows[key] = {}
            seen.append(key)
        if r.get("Metric Name") in want:
            rows[key][r["Metric Name"]] = f'{r.get("Metric Value")} {r.get("Metric Unit", "")}'
    out = []
    for k in seen:
        out.append(f"{k}  [{label_of(k, order)}]")
        out += [f"    {m:36s} {rows[k].get(m, '-')}" for m in want if m in rows[k]]
    return "\n".join(out)


def stalls(raw: str, order: list[str], top: int = 10) -> str:
    """Per kernel, the sampled warp-stall reasons, largest first, and the extra counters."""
    rd = list(csv.reader(io.StringIO(raw)))
    if len(rd) < 3:
        return "(no raw page)"
    head = rd[0]
    out = []
    for row in rd[2:]:
        rec = dict(zip(head, row))
        key = f'{rec.get("ID")} {rec.get("Kernel Name", "")[:60]}'
        out.append(f"{key}  [{label_of(key, order)}]")
        samp = []
        for h, v in rec.items():
            if "pcsamp_warps_issue_stalled" in h and not h.endswith("not_issued"):
                try:
                    samp.append((float(v.replace(",", "")), h.split("stalled_")[-1]))
                except ValueError:
                    pass
        tot = sum(s for s, _ in samp) or 1.0
        out.append("    stalls: " + ", ".join(f"{n} {100 * s / tot:.1f}%"
                                              for s, n in sorted(samp, reverse=True)[:top]))
        for m in WANTED:
            if m in rec:
                out.append(f"    {m} = {rec[m]}")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out")
    ap.add_argument("--shapes", default="16384x8192x4096")
    ap.add_argument("--child", action="store_true")
    args = ap.parse_args()
    shapes = args.shapes.split(",")
    if args.child:
        child(shapes)
        return
    os.makedirs(args.out, exist_ok=True)
    ncu = find_ncu()
    extra = known_metrics(ncu)
    rep = os.path.join(args.out, "fp8")
    cmd = [ncu, "--clock-control", "none", "--target-processes", "all", "-k", KERNELS,
           "-f", "-o", rep, "--import-source", "no"]
    for s in SECTIONS:
        cmd += ["--section", s]
    if extra:
        cmd += ["--metrics", ",".join(extra)]
    cmd += [sys.executable, os.path.abspath(__file__), "--child", "--shapes", args.shapes]
    p = subprocess.run(cmd, capture_output=True, text=True)
    with open(os.path.join(args.out, "ncu_log.txt"), "w") as f:
        f.write(" ".join(cmd) + "\n" + p.stdout + "\n" + p.stderr)
    print(f"ncu rc {p.returncode}; metrics asked by name: {extra}")
    order = []
    for ln in p.stdout.splitlines():
        if ln.startswith("{"):
            print(ln)
            order += json.loads(ln).get("order", [])
    pages = {}
    for page in ("details", "raw"):
        q = subprocess.run([ncu, "--import", rep + ".ncu-rep", "--page", page, "--csv"],
                           capture_output=True, text=True)
        pages[page] = q.stdout
        with open(os.path.join(args.out, f"{page}.csv"), "w") as f:
            f.write(q.stdout + q.stderr)
    q = subprocess.run([ncu, "--import", rep + ".ncu-rep", "--page", "source", "--csv",
                        "--print-source", "sass"], capture_output=True, text=True)
    with open(os.path.join(args.out, "source_sass.csv"), "w") as f:
        f.write(q.stdout + q.stderr)
    print(stalls(pages["raw"], order))
    print()
    print(table(pages["details"], order))
    if p.returncode:
        print(p.stderr[-3000:])


if __name__ == "__main__":
    main()
