"""The readers of benchmarks/gemm_ab.py and fp8_ncu.py on the CPU: ``prepare`` pickles each
tree's kernels (PTX and its launch description) under its label, ``run`` loads them grouped
by shape and variant in label order, and the ncu readers map Nsight Compute's kernel IDs to
the launches it saw, skipping torch's reference and each kernel's checked call (a shifted
mapping put one kernel's cycles beside another's: docs/PERF_NOTES.md 2026-12-02 (t))."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import gemm_ab  # noqa: E402
from sweep_common import gemm_shape  # noqa: E402

sys.path.pop(0)


def test_gemm_shape_names():
    assert gemm_shape("8192^3") == (8192, 8192, 8192)
    assert gemm_shape("1024x3584x8192") == (1024, 3584, 8192)
    with pytest.raises(SystemExit, match="not MxNxK"):
        gemm_shape("1024x3584")


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
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import fp8_ncu
    sys.path.pop(0)
    monkeypatch.setattr(fp8_ncu, "find_ncu", lambda: "ncu")     # (none on this machine)
    rows = gemm_ab.ncu_rows(SimpleNamespace(dir=str(tmp_path), out=str(tmp_path)))
    got = {(r["label"], r["variant"]): r["cycles"] for r in rows}
    assert got == {("torch", "row"): "1003", ("a_old", "default"): "1004",
                   ("b_new", "default"): "1005"}


def test_fp8_ncu_tables_label_the_kernels_and_rank_the_stalls():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import fp8_ncu
    sys.path.pop(0)
    order = ["s torch ref", "s pkc default"]
    details = ('"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"\n'
               '"0","nvjet_x","Duration","us","720.5"\n'
               '"1","scaled_matmul","Duration","us","760.1"\n'
               '"1","scaled_matmul","Elapsed Cycles","cycle","1,170,507"\n')
    t = fp8_ncu.table(details, order)
    assert "[s torch ref]" in t and "[s pkc default]" in t and "1,170,507 cycle" in t
    raw = ('"ID","Kernel Name","smsp__pcsamp_warps_issue_stalled_barrier",'
           '"smsp__pcsamp_warps_issue_stalled_wait",'
           '"smsp__pcsamp_warps_issue_stalled_barrier_not_issued"\n'
           '"","","warp","warp","warp"\n'
           '"1","scaled_matmul","300","100","999"\n')
    st = fp8_ncu.stalls(raw, order)
    assert "[s pkc default]" in st and "barrier 75.0%, wait 25.0%" in st
