"""Everyday use (issue 19): ptxas from the declared wheel, the main example as the README
describes it, mlir-opt spellings of options."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from pkc.codegen import ptxas
from pkc.passes.registry import parse_pipeline

REPO = Path(__file__).resolve().parents[2]


def _fake_ptxas(root: Path, layout: str) -> Path:
    p = root / layout
    p.parent.mkdir(parents=True)
    p.write_text("#!/bin/sh\necho fake\n")
    p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return p


@pytest.mark.parametrize("layout", ptxas.WHEEL_LAYOUTS)
def test_find_ptxas_finds_the_wheels_layout(tmp_path, monkeypatch, layout):
    fake = _fake_ptxas(tmp_path, layout)
    monkeypatch.delenv("PKC_PTXAS", raising=False)
    monkeypatch.setattr(sys, "path", [str(tmp_path / "elsewhere"), str(tmp_path)])
    assert ptxas.find_ptxas() == str(fake)  # before any ptxas on PATH


def test_ptxas_is_a_declared_dependency():
    text = (REPO / "pyproject.toml").read_text()
    deps = text.split("dependencies = [", 1)[1].split("]", 1)[0]
    assert '"nvidia-cuda-nvcc==' in deps


def test_bool_options_take_mlir_spellings():
    for spelling, value in [("1", True), ("0", False), ("true", True), ("false", False),
                            ("on", True), ("off", False)]:
        (p,) = parse_pipeline(f"lower-collectives{{keep-single-rank={spelling}}}")
        assert p.keep_single_rank is value, spelling


def test_main_example_runs_the_default_pipeline():
    """README: `python examples/tp_mlp.py` prints the IR after the default pipeline and its
    decisions (not a forced fusion), and its difference from eager PyTorch."""
    res = subprocess.run(
        [sys.executable, str(REPO / "examples" / "tp_mlp.py"), "--world", "2"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert "remark: [pk.kernel] left unfused: predicted fused" in res.stdout
    assert "force=true overrides" not in res.stdout
    err = float(res.stdout.rsplit("max abs error", 1)[1].split()[0])
    assert err < 1e-4
