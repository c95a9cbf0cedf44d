"""The emulator against the H200: the same kernels on the same inputs, outputs compared
bitwise.

    python tests/gpu/emu_vs_gpu.py prepare DIR [--seed S] [--only PREFIX]  # CPU: compile,
                                                  # inputs, emulate
    python tests/gpu/emu_vs_gpu.py run DIR OUT [--only PREFIX]   # on the GPU machine:
                                                  # compile, launch, compare with DIR's
                                                  # (merged into OUT's JSON)
    python tests/gpu/emu_vs_gpu.py table OUT [--only PREFIX]  # OUT/emu_vs_gpu.json's table
    python tests/gpu/emu_vs_gpu.py list           # the cases

The cases (tests/gpu/emu_cases.py): the IR-built GEMM tile variants, the portable path's
kernels, the scheduled collectives (LL / one-shot / two-shot all-reduce, LL / direct
all-gather and reduce-scatter, pull all-gather, all-to-all) in the virtual world, the
fused GEMM + reduce-scatter / all-reduce (fresh and persistent outputs, W = 1, 2, 3),
all-gather + GEMM, the GEMM + all-reduce pair at W = 3, the MoE kernel, and
(``new_``) the scheduled fp8 GEMM, the fused fp8 GEMM + reduce-scatter and the
GEMM + reduce-scatter layouts (columns, 3-D row blocks, bias).

``prepare`` writes, per case, the inputs, the emulator's outputs and the PTX's hash;
``run`` compiles the same IR again (the hash must match: the same kernel), launches it
through the runtime's runner of its kind (fresh runners: the first launch, the same epochs
as the emulator's) and writes ``OUT/emu_vs_gpu.json``: per case its kind, W, shapes,
bitwise equal or not, differing elements, largest difference, and, where the hardware's
order of the sums is open, the tolerance, its reason and whether it held; per output and
rank the same. Outputs are compared where they are the result (MoE: the rows below the
counts). The table is printed last.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import emu_cases as E  # noqa: E402


def _selected(only: str) -> list[E.Case]:
    return [c for c in E.cases() if c.name.startswith(only)]


def prepare(folder: Path, seed: int = 0, only: str = "") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    idx_path = folder / "index.json"
    index = json.loads(idx_path.read_text()) if idx_path.exists() else {}
    t_all = time.time()
    for i, c in enumerate(E.cases()):
        if not c.name.startswith(only):
            continue
        t0 = time.time()
        try:
            kernels = E.build(c)
            x = E.make_inputs(c, kernels, 1000 * seed + i)
            out = E.emulate_case(c, kernels, x)
        except Exception as e:  # noqa: BLE001 - one case's failure must not hide the others
            index[c.name] = {"error": f"{type(e).__name__}: {e}"}
            print(f"FAILED {c.name}: {index[c.name]['error']}", flush=True)
            traceback.print_exc()
            continue
        torch.save({"inputs": x, "emulated": out}, folder / f"{c.name}.pt")
        ref = E.reference_equal(c, x, out)
        index[c.name] = {"ptx_sha256": E.ptx_hash(kernels), "emulate_s": round(time.time() - t0, 2),
                         "emulator_equals_reference": ref}
        print(f"prepared {c.name} ({time.time() - t0:.1f} s)"
              + ("" if ref is None else f", emulator = torch reference: {ref}"), flush=True)
    idx_path.write_text(json.dumps(index, indent=1))
    print(f"prepare: {time.time() - t_all:.1f} s", flush=True)


def compare(c: E.Case, gpu, emu, x) -> dict:
    """Per rank and output: bitwise (NaN where both are NaN counts as equal), differing
    elements and the largest difference, over the valid part of the output."""
    rows = []
    if len(gpu) != len(emu) or any(len(g) != len(e) for g, e in zip(gpu, emu)):
        return {"error": f"outputs per rank: GPU {[len(g) for g in gpu]}, emulator "
                         f"{[len(e) for e in emu]}"}
    scale = 0.0
    for r in range(len(gpu)):
        for j, (g, e) in enumerate(zip(gpu[r], emu[r])):
            if tuple(g.shape) != tuple(e.shape) or g.dtype != e.dtype:
                return {"error": f"rank {r} output {j}: GPU {list(g.shape)} {g.dtype}, emulator "
                                 f"{list(e.shape)} {e.dtype}"}
            m = E.valid_mask(c, x, r, j, e)
            if m is not None:
                g, e = g[m], e[m]
            ints = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[g.element_size()]
            diff = g.contiguous().view(ints) != e.contiguous().view(ints)
            lone_nan = 0
            if g.dtype.is_floating_point:
                diff &= ~(torch.isnan(g) & torch.isnan(e))
                lone_nan = int((torch.isnan(g) != torch.isnan(e)).sum())
                d = (g.double() - e.double()).abs().nan_to_num(0)
                scale = max(scale, float(e.double().abs().nan_to_num(0).max()) if e.numel() else 0.0)
            else:
                d = (g.long() - e.long()).abs().double()
            rows.append({"rank": r, "output": j, "bitwise": not bool(diff.any()),
                         "differing": int(diff.sum()), "elements": g.numel(),
                         "max_abs": float(d.max()) if d.numel() else 0.0,
                         "nan_gpu": int(torch.isnan(g).sum()) if g.dtype.is_floating_point else 0,
                         "nan_one_side": lone_nan})
    res = {"outputs": rows, "bitwise": all(x["bitwise"] for x in rows),
           "differing": sum(x["differing"] for x in rows), "elements": sum(x["elements"] for x in rows),
           "max_abs": max((x["max_abs"] for x in rows), default=0.0), "scale": scale}
    if c.tolerance is not None:
        res.update(tolerance=c.tolerance, tolerance_abs=c.tolerance * scale, reason=c.reason,
                   within_tolerance=res["max_abs"] <= c.tolerance * scale
                   and not any(x["nan_one_side"] for x in rows))
    return res


def _head(c: E.Case) -> dict:
    return {"kind": c.kind, "family": c.family.value, "W": c.W, "shapes": c.shapes,
            "tuning": [f"{m.rsplit('.', 1)[-1]}.{n}={v}" for m, n, v in c.tuning]}


def run(folder: Path, out: Path, only: str = "") -> None:
    index = json.loads((folder / "index.json").read_text())
    out.mkdir(parents=True, exist_ok=True)
    rep_path = out / "emu_vs_gpu.json"      # merged: one process per group of cases
    report = json.loads(rep_path.read_text()) if rep_path.exists() else {}
    for c in _selected(only):
        rec = _head(c)
        try:
            want = index.get(c.name, {})
            if "ptx_sha256" not in want:
                raise RuntimeError(f"not prepared: {want.get('error', 'missing from index.json')}")
            kernels = E.build(c)
            if E.ptx_hash(kernels) != want["ptx_sha256"]:
                raise RuntimeError("the kernel compiled here differs from the emulated one")
            saved = torch.load(folder / f"{c.name}.pt")
            gpu = E.launch_case(c, kernels, saved["inputs"])
            torch.save(gpu, out / f"gpu_{c.name}.pt")    # for fitting models offline
            rec.update(compare(c, gpu, saved["emulated"], saved["inputs"]))
            rec["emulator_equals_reference"] = want.get("emulator_equals_reference")
        except Exception as e:  # noqa: BLE001 - one case's failure must not hide the others
            rec["error"] = f"{type(e).__name__}: {e}"
            rec["trace"] = traceback.format_exc()[-1500:]
        report[c.name] = rec
        rep_path.write_text(json.dumps(report, indent=1))    # a later crash keeps this one
        print(c.name, json.dumps({k: v for k, v in rec.items() if k != "outputs"})[:400], flush=True)
    table(report, only)


def table(report: dict, only: str = "") -> None:
    """One line per case (``case`` heads it); cases the report lacks (a crashed process)
    are listed as not run (of those ``only`` selects)."""
    print(f"\n{'case':26} {'kind':34} {'W':>1} {'bitwise':7} {'differ':>7} {'max diff':>9} "
          f"{'tol(abs)':>9} ok")
    for name, r in report.items():
        if "error" in r:
            print(f"{name:26} {r['kind'][:34]:34} {r['W']} ERROR {r['error'][:90]}")
            continue
        tol = f"{r['tolerance_abs']:9.3g}" if "tolerance" in r else f"{'-':>9}"
        ok = r["bitwise"] or r.get("within_tolerance", False)
        print(f"{name:26} {r['kind'][:34]:34} {r['W']} {str(r['bitwise']):7} {r['differing']:7} "
              f"{r['max_abs']:9.3g} {tol} {'yes' if ok else 'NO'}")
    missing = [c.name for c in _selected(only) if c.name not in report]
    if missing:
        print(f"not run: {' '.join(missing)}")
    done = [r for r in report.values() if "error" not in r]
    print(f"{sum(r['bitwise'] for r in done)} bitwise, "
          f"{sum(not r['bitwise'] and r.get('within_tolerance', False) for r in done)} within "
          f"their tolerance, {sum(not (r['bitwise'] or r.get('within_tolerance', False)) for r in done)} "
          f"differ, {len(report) - len(done)} errors, {len(missing)} not run")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cmd", choices=["prepare", "run", "table", "list"])
    ap.add_argument("paths", nargs="*")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default="", help="the cases whose name starts with this")
    a = ap.parse_args(argv)
    if a.cmd == "list":
        for c in _selected(a.only):
            print(c.name, json.dumps(_head(c)))
    elif a.cmd == "prepare":
        prepare(Path(a.paths[0]), a.seed, a.only)
    elif a.cmd == "run":
        run(Path(a.paths[0]), Path(a.paths[1]), a.only)
    else:
        table(json.loads((Path(a.paths[0]) / "emu_vs_gpu.json").read_text()), a.only)


if __name__ == "__main__":
    main()
