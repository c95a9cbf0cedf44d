"""The CPU-only pieces of the issue-7 sweeps (benchmarks/fused_sweep.py,
benchmarks/collectives.py): the fused shapes, traffic and roofline arithmetic, bus
bandwidth, text tables, result folders and JSON, the fused sweep's summary table and plot.
No torch at import time (the sweeps set NCCL's environment before torch.distributed is
imported)."""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# ======================================================================================
# CPU-only pieces: shapes, traffic, roofline, bus bandwidth, tables, files
# ======================================================================================

PK_NS = (2048, 4096, 8192, 16384, 32768)
LLAMA70B = {"hidden": 8192, "ffn": 28672, "q_heads": 64, "kv_heads": 8, "head_dim": 128}
FAMILIES = ("ag", "rs", "ar")
FAMILY_NAMES = {"ag": "AG+GEMM", "rs": "GEMM+RS", "ar": "GEMM+AR"}


@dataclass(frozen=True)
class FusedShape:
    """One rank's problem: the local GEMM is M x N x K (A [M, K] @ B[N, K]^T), with the
    collective of ``family`` before (ag: A is gathered from W row shards) or after it
    (rs: the [M, N] partial sums are reduce-scattered by rows; ar: all-reduced)."""

    family: str
    label: str
    M: int
    N: int
    K: int

    def valid(self, world: int) -> bool:
        return (self.M % world == 0 and self.N % 8 == 0 and self.K % 8 == 0
                and self.family in FAMILIES)

    def operand_shapes(self, world: int) -> dict[str, tuple[int, ...]]:
        """Each rank's tensors: a (its A, or its shard for ag), b ([N, K]), out."""
        a = (self.M // world, self.K) if self.family == "ag" else (self.M, self.K)
        out = (self.M // world, self.N) if self.family == "rs" else (self.M, self.N)
        return {"a": a, "b": (self.N, self.K), "out": out}

    def flops(self) -> float:
        return 2.0 * self.M * self.N * self.K

    def comm_bytes(self, world: int, esize: int = 2) -> float:
        """Bytes each rank must receive over its links (and, symmetrically, send):
        ag (W-1)/W of the gathered A; rs (W-1)/W of the partial C; ar twice that (the
        reduce-scatter + all-gather lower bound of an all-reduce)."""
        if world <= 1:
            return 0.0
        f = (world - 1) / world
        if self.family == "ag":
            return f * self.M * self.K * esize
        if self.family == "rs":
            return f * self.M * self.N * esize
        return 2 * f * self.M * self.N * esize


def fused_shapes(world: int, ns=PK_NS, tokens=(8192,), llama: bool = True,
                 families=FAMILIES) -> list[FusedShape]:
    """The sweep for ``world`` ranks, in the order it runs: PK's shapes by N, then the
    Llama-70B TP layers (shapes that do not divide by W are left out)."""
    out: list[FusedShape] = []
    for n in ns:
        for fam in families:
            if fam == "ag":
                out.append(FusedShape("ag", f"pk ag+gemm N={n}", n, n // 8, n))
            else:
                out.append(FusedShape(fam, f"pk gemm+{fam} N={n}", n, n, n // 8))
    if llama:
        L = LLAMA70B
        h, f = L["hidden"], L["ffn"]
        qkv = (L["q_heads"] + 2 * L["kv_heads"]) * L["head_dim"]
        for t in tokens:
            if "ag" in families:
                out.append(FusedShape("ag", f"llama70b qkv T={t} (sp)", t, qkv // world, h))
                out.append(FusedShape("ag", f"llama70b up+gate T={t} (sp)", t, 2 * f // world, h))
            if "rs" in families:
                out.append(FusedShape("rs", f"llama70b o T={t} (sp)", t, h, h // world))
                out.append(FusedShape("rs", f"llama70b down T={t} (sp)", t, h, f // world))
            if "ar" in families:
                out.append(FusedShape("ar", f"llama70b o T={t} (tp)", t, h, h // world))
                out.append(FusedShape("ar", f"llama70b down T={t} (tp)", t, h, f // world))
    return [s for s in out if s.valid(world) and s.N > 0 and s.K > 0]


def priority_order(shapes: list[FusedShape], big: int = 16384) -> list[FusedShape]:
    """Run order under a time budget: everything below N=``big`` first (PK, then Llama),
    the big PK shapes last."""
    return [s for s in shapes if max(s.M, s.N, s.K) < big or s.label.startswith("llama")] + \
           [s for s in shapes if not (max(s.M, s.N, s.K) < big or s.label.startswith("llama"))]


def comm_ms(nbytes: float, link_bw: float | None) -> float:
    """Time to move ``nbytes`` at ``link_bw`` bytes/s (0 when nothing moves)."""
    if nbytes <= 0:
        return 0.0
    if not link_bw:
        return math.inf
    return nbytes / link_bw * 1e3


def roofline_ms(gemm_ms: float, nbytes: float, link_bw: float | None) -> float:
    """The limit of a perfectly overlapped kernel: max(GEMM time, bytes / link bandwidth)."""
    return max(gemm_ms, comm_ms(nbytes, link_bw))


def bus_factor(op: str, world: int) -> float:
    """nccl-tests' bus-bandwidth factor: all-reduce 2(W-1)/W, all-gather and
    reduce-scatter (W-1)/W (0 for one rank: nothing crosses a link)."""
    if op in ("all_reduce", "ar"):
        return 2 * (world - 1) / world
    if op in ("all_gather", "reduce_scatter", "ag", "rs"):
        return (world - 1) / world
    raise ValueError(f"unknown collective {op!r}")


def alg_bw(size_bytes: float, ms: float) -> float:
    """Algorithm bandwidth in GB/s: the message size over the time (nccl-tests' algbw;
    size = the all-reduce buffer, the gathered output, the reduce-scatter input)."""
    return size_bytes / (ms * 1e-3) / 1e9 if ms > 0 else 0.0


def bus_bw(op: str, size_bytes: float, world: int, ms: float) -> float:
    return alg_bw(size_bytes, ms) * bus_factor(op, world)


def collective_sizes(lo: int = 4096, hi: int = 1 << 30, step: int = 4) -> list[int]:
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s *= step
    return out


def fmt_size(n: int) -> str:
    for unit, v in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= v and n % v == 0:
            return f"{n // v}{unit}"
    return str(n)


def gemm_shape(shape: str) -> tuple[int, int, int]:
    """(M, N, K) of a GEMM shape's name: ``MxNxK`` or ``N^3``."""
    if shape.endswith("^3"):
        return (int(shape[:-2]),) * 3
    try:
        M, N, K = (int(x) for x in shape.split("x"))
    except ValueError:
        raise SystemExit(f"GEMM shape {shape!r} is not MxNxK or N^3") from None
    return M, N, K


def ratio(num: float | None, den: float | None) -> float | None:
    """num / den, or None where either is missing (a time of an implementation that did
    not run) or den is 0."""
    if num is None or den is None or den == 0 or (isinstance(num, float) and math.isnan(num)):
        return None
    return num / den


def format_table(headers: list[str], rows: list[list], floatfmt: str = "{:.3f}") -> str:
    """Right-aligned text table; None is printed as '-', floats with ``floatfmt``."""
    def cell(v):
        if v is None:
            return "-"
        if isinstance(v, float):
            if math.isinf(v) or math.isnan(v):
                return str(v)
            return floatfmt.format(v)
        return str(v)
    body = [[cell(v) for v in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h)
              for i, h in enumerate(headers)]
    lines = ["  ".join(h.rjust(w) if i else h.ljust(w) for i, (h, w) in enumerate(zip(headers, widths)))]
    for r in body:
        lines.append("  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(r, widths))))
    return "\n".join(lines)


def machine_tag(name: str | None = None, count: int | None = None) -> str:
    """``h200x2`` for two NVIDIA H200s (the torch device name's last word, lower case), or
    ``cpu`` without a GPU."""
    if name is None:
        try:
            import torch

            if torch.cuda.is_available():
                name, count = torch.cuda.get_device_name(0), torch.cuda.device_count()
        except Exception:
            name = None
    if not name:
        return "cpu"
    word = name.replace("NVIDIA", "").strip().split()[0].lower() if name.strip() else "gpu"
    word = "".join(c for c in word if c.isalnum() or c in "-_") or "gpu"
    return f"{word}x{count}" if count and count > 1 else word


def results_dir(tag: str | None = None, date: str | None = None, root: Path | None = None) -> Path:
    """benchmarks/results/<machine>_<date>/"""
    date = date or datetime.date.today().isoformat()
    return (root or ROOT / "benchmarks" / "results") / f"{tag or machine_tag()}_{date}"


def write_json(path: Path | str, obj) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w") as fh:
        json.dump(obj, fh, indent=1, default=str)
    os.replace(tmp, path)


def case_cli(doc: str, cases: list, default_out: str, rounds: int = 30, extra=None):
    """The command line of a benchmark of named cases: ``--out``, ``--rounds``, ``--cases``
    (comma-separated substrings of case names) and ``--list`` (prints the picked cases and
    returns None: no GPU needed), and what ``extra(parser)`` adds. Else returns (args, the
    picked cases), ``--out`` made."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    if extra is not None:
        extra(ap)
    ap.add_argument("--out", default=default_out)
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--rounds", type=int, default=rounds)
    ap.add_argument("--cases", default="", help="comma-separated substrings of case names")
    args = ap.parse_args()
    picked = [c for c in cases if not args.cases or any(x in c[0] for x in args.cases.split(","))]
    if args.list:
        for c in picked:
            print(*c)
        return None
    os.makedirs(args.out, exist_ok=True)
    return args, picked


def run_cases(cases, run_one, json_path, error_row=lambda c: {"case": c[0]},
              trace: bool = False) -> list[dict]:
    """Run ``run_one(case)`` for each case; a case that raises becomes ``error_row(case)``
    plus its ``error`` (and with ``trace`` the traceback's end) (one failing case must not
    hide the others). Each row is printed as a JSON line as it comes and the rows so far
    are written to ``json_path`` (a crash later keeps them)."""
    rows = []
    for c in cases:
        try:
            row = run_one(c)
        except Exception as e:
            row = {**error_row(c), "error": f"{type(e).__name__}: {e}"}
            if trace:
                import traceback
                row["trace"] = traceback.format_exc()[-2000:]
        rows.append(row)
        print(json.dumps(row), flush=True)
        write_json(json_path, rows)
    return rows


_VIRTUAL_PEERS: dict = {}


def scheduled_kernels(text: str, name: str, pipeline: str = "default{force=true},schedule-fused,dce"):
    """The scheduled pk.kernels of a graph-level module (``text``, reported as file ``name``)
    after ``pipeline``: the fused kernels the benchmarks time."""
    from pkc.codegen.emit import kernels_of
    from pkc.ir import make_context, parse_module, verify_module
    from pkc.passes.registry import parse_pipeline

    m = parse_module(text, name)
    ctx = make_context()
    for p in parse_pipeline(pipeline):
        p.apply(ctx, m)
    verify_module(m)
    return [k for k in kernels_of(m) if k.schedule() is not None]


def compile_scheduled(text: str, name: str, pipeline: str = "default{force=true},schedule-fused,dce",
                      target: str = "sm_90a"):
    """(compiled kernel, its pk.kernel) of the one scheduled kernel of ``text``."""
    from pkc.codegen import compile_kernel

    (kop,) = scheduled_kernels(text, name, pipeline)
    return compile_kernel(kop, target), kop


def virtual_peers(world: int):
    """One virtual world of ``world`` ranks on this GPU per process, shared by the cases
    (building one allocates its symmetric buffers and green contexts)."""
    from pkc.runtime.peers import VirtualPeers
    if world not in _VIRTUAL_PEERS:
        _VIRTUAL_PEERS[world] = VirtualPeers(world)
    return _VIRTUAL_PEERS[world]


def have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401,F811
        return True
    except ImportError:
        return False


# ---- the fused sweep's table --------------------------------------------------------

FUSED_COLUMNS = ["base", "gemm", "coll", "symm", "pkc"]


def summarize_fused(row: dict) -> dict:
    """Derived numbers of one shape's result: roofline, ratios (speedups: baseline time /
    implementation time, > 1 is faster), comm/compute balance."""
    t = row.get("ms", {})
    base, gemm = t.get("base"), t.get("gemm")
    link = row.get("link_bw")
    nbytes = row.get("comm_bytes", 0.0)
    out = dict(row)
    if gemm is not None:
        out["roofline_ms"] = roofline_ms(gemm, nbytes, link)
        out["comm_est_ms"] = comm_ms(nbytes, link)
        out["comm_over_compute"] = ratio(out["comm_est_ms"], gemm)
    out["speedup"] = {
        "pkc": ratio(base, t.get("pkc")),
        "symm": ratio(base, t.get("symm")),
        "roofline": ratio(base, out.get("roofline_ms")),
    }
    for name, ms in t.items():            # any other implementation of the row
        if name not in FUSED_COLUMNS:
            out["speedup"][name] = ratio(base, ms)
    out["pkc_vs_symm"] = ratio(t.get("symm"), t.get("pkc"))
    out["pkc_vs_roofline"] = ratio(out.get("roofline_ms"), t.get("pkc"))
    return out


def fused_table(res: dict) -> str:
    """One line per shape: times, speedups over cuBLAS+NCCL (``x``), the roofline; a column
    for every further implementation that a row timed (``<name> x``)."""
    shapes = res.get("shapes", [])
    extra = sorted({k for r in shapes for k in r.get("ms", {}) if k not in FUSED_COLUMNS})
    headers = ["shape", "MxNxK", "base ms", "gemm ms", "roof ms", "c/c", "pkc x", "symm x"] + \
        [f"{k} x" for k in extra] + ["roof x", "pkc/symm", "pkc/roof", "checks"]
    rows = []
    for r in shapes:
        if "error" in r and "ms" not in r:
            rows.append([r["label"], f"{r['M']}x{r['N']}x{r['K']}"] + [None] * (len(headers) - 3)
                        + ["ERROR " + r["error"][:60]])
            continue
        s = summarize_fused(r)
        bad = [k for k, c in r.get("checks", {}).items() if not c.get("ok")]
        rows.append([r["label"], f"{r['M']}x{r['N']}x{r['K']}", r["ms"].get("base"), r["ms"].get("gemm"),
                     s.get("roofline_ms"), s.get("comm_over_compute"), s["speedup"]["pkc"],
                     s["speedup"]["symm"]] + [s["speedup"].get(k) for k in extra]
                    + [s["speedup"]["roofline"], s["pkc_vs_symm"], s["pkc_vs_roofline"],
                       "ok" if not bad else "BAD " + ",".join(bad)])
    return format_table(headers, rows)


def plot_fused(res: dict, path: Path | str) -> bool:
    if not have_matplotlib():
        return False
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [summarize_fused(r) for r in res.get("shapes", []) if "ms" in r]
    if not rows:
        return False
    fig, ax = plt.subplots(figsize=(max(8, 0.55 * len(rows)), 5))
    xs = range(len(rows))
    for key, mark in (("pkc", "o"), ("symm", "s"), ("roofline", "_")):
        ys = [r["speedup"][key] if r["speedup"][key] is not None else float("nan") for r in rows]
        ax.plot(list(xs), ys, mark, label=key, markersize=8)
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_yscale("log")
    ax.set_xticks(list(xs))
    ax.set_xticklabels([r["label"] for r in rows], rotation=70, ha="right", fontsize=7)
    ax.set_ylabel("speedup over cuBLAS+NCCL (base time / time)")
    ax.set_title(f"fused GEMM+collective, W={res.get('world')} ({res.get('device')})")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
