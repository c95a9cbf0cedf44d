"""benchmarks/gemm_ab.py on the CPU: ``prepare`` pickles each tree's kernels (PTX and its
launch description) under its label, ``run`` loads them grouped by shape and variant in
label order, and the ncu reader maps Nsight Compute's kernel IDs to the launches it saw,
skipping torch's reference and each kernel's checked call (a shifted mapping put one
kernel's cycles beside another's: docs/PERF_NOTES.md 2026-12-02 (t))."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import gemm_ab  # noqa: E402

sys.path.pop(0)


def test_prepare_pickles_each_label_and_load_groups_them(tmp_path):
    for label in ("b_new", "a_old"):
        gemm_ab.prepare(SimpleNamespace(dir=str(tmp_path), label=label, dtype="fp8",
                                        shapes="8192^3", variants="default,128x128_pp_s6"))
    gemm_ab.prepare(SimpleNamespace(dir=str(tmp_path), label="a_old", dtype="bf16",
                                    shapes="8192^3", variants="default"))
    recs = gemm_ab._load(str(tmp_path))
    keys = [(r["shape"], r["variant"], r["label"]) for r in recs]
    assert keys == [("bf16:8192^3", "default", "a_old"),
                    ("fp8:8192^3", "128x128_pp_s6", "a_old"),
                    ("fp8:8192^3", "128x128_pp_s6", "b_new"),
                    ("fp8:8192^3", "default", "a_old"), ("fp8:8192^3", "default", "b_new")]
    assert all(".entry" in r["ptx"] and r["meta"].threads == 384 for r in recs)
    assert "e4m3" in recs[1]["ptx"] and "e4m3" not in recs[0]["ptx"]


def test_ncu_rows_skip_the_reference_and_the_checked_calls(tmp_path, monkeypatch):
    order = ["fp8:8192^3 torch ref", "fp8:8192^3 a_old default-check",
             "fp8:8192^3 b_new default-check", "fp8:8192^3 torch row",
             "fp8:8192^3 a_old default", "fp8:8192^3 b_new default"]
    head = '"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"'
    lines = [head] + [f'"{i}","k{i}","sm__cycles_elapsed.max","cycle","{1000 + i}"'
                      for i in range(len(order))]
    out = "ORDER " + __import__("json").dumps(order) + "\n" + "\n".join(lines)
    monkeypatch.setattr(subprocess, "run",
                        lambda *a, **k: SimpleNamespace(stdout=out, stderr="", returncode=0))
    rows = gemm_ab.ncu_rows(SimpleNamespace(dir=str(tmp_path), out=str(tmp_path)))
    got = {(r["label"], r["variant"]): r["cycles"] for r in rows}
    assert got == {("torch", "row"): "1003", ("a_old", "default"): "1004",
                   ("b_new", "default"): "1005"}
