"""Issue 7's Done-when, read from the sweeps' JSON (no GPU): for each fused_sweep.json and
collectives.json given, the tallies and every miss.

    python benchmarks/done_when.py benchmarks/results/h200x4_2026-11-29g/w4 [more dirs or files]

Fused (compiled ``pkc`` column): >= 1.0x cuBLAS+NCCL on every shape; >= 1.3x where the
estimated communication / GEMM time (c/c) is within 2x (0.5 <= c/c <= 2); >= torch's fused
symm_mem op wherever it ran. All-reduce (compiled ``pkc``): >= 1.5x NCCL at <= 1 MiB,
>= 0.95x at 1 GiB. Counting by hand from the tables is how a session once miscounted.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from collectives import speedups  # noqa: E402
from fused_sweep import ratio, summarize_fused  # noqa: E402

MIN_X, BALANCED_X, CC_RANGE = 1.0, 1.3, (0.5, 2.0)
AR_SMALL, AR_SMALL_X, AR_BIG, AR_BIG_X = 1 << 20, 1.5, 1 << 30, 0.95


def fused_checks(res: dict) -> dict:
    """{check: (passed, total, [misses])} of one fused sweep."""
    out = {"pkc >= 1.0x": [0, 0, []], "pkc >= 1.3x (c/c 0.5-2)": [0, 0, []],
           "pkc >= symm": [0, 0, []]}

    def count(name, ok, miss):
        c = out[name]
        c[0] += ok
        c[1] += 1
        if not ok:
            c[2].append(miss)

    for row in res.get("shapes", []):
        if "ms" not in row:
            continue
        s = summarize_fused(row)
        x, cc = s["speedup"]["pkc"], s.get("comm_over_compute")
        if x is None:
            continue
        label = row["label"]
        count("pkc >= 1.0x", x >= MIN_X, f"{label} {x:.3f}")
        if cc is not None and CC_RANGE[0] <= cc <= CC_RANGE[1]:
            count("pkc >= 1.3x (c/c 0.5-2)", x >= BALANCED_X, f"{label} {x:.3f} (c/c {cc:.2f})")
        vs = ratio(row["ms"].get("symm"), row["ms"].get("pkc"))
        if vs is not None:
            count("pkc >= symm", vs >= 1.0, f"{label} {vs:.3f}")
    return {k: tuple(v) for k, v in out.items()}


def allreduce_checks(res: dict) -> dict:
    out = {f"all-reduce >= {AR_SMALL_X}x at <= 1 MiB": [0, 0, []],
           f"all-reduce >= {AR_BIG_X}x at 1 GiB": [0, 0, []]}
    for row in res.get("rows", []):
        if row.get("op") != "all_reduce":
            continue
        x = speedups(row).get("pkc")
        if x is None:
            continue
        for name, hit, want in ((f"all-reduce >= {AR_SMALL_X}x at <= 1 MiB", row["size"] <= AR_SMALL,
                                 AR_SMALL_X),
                                (f"all-reduce >= {AR_BIG_X}x at 1 GiB", row["size"] >= AR_BIG, AR_BIG_X)):
            if hit:
                c = out[name]
                c[0] += x >= want
                c[1] += 1
                if x < want:
                    c[2].append(f"{row['size']} B {x:.3f}")
    return {k: tuple(v) for k, v in out.items()}


def report(path: Path) -> str:
    res = json.loads(path.read_text())
    checks = fused_checks(res) if path.name.startswith("fused") else allreduce_checks(res)
    lines = [f"{path} (W={res.get('world')})"]
    for name, (ok, n, misses) in checks.items():
        lines.append(f"  {name}: {ok} of {n}" + (f"; misses: {', '.join(misses)}" if misses else ""))
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    files = []
    for a in map(Path, argv):
        found = [a] if a.is_file() else sorted(a.glob("fused_sweep.json")) + sorted(a.glob("collectives.json"))
        if not found:
            print(f"{a}: no fused_sweep.json or collectives.json", file=sys.stderr)
            return 2
        files += found
    print("\n".join(report(f) for f in files))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
