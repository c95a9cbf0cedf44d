"""One all-gather feeding several matmuls as ONE IR-built kernel (pkc/passes/gather_many.py)
on the GPU, in the virtual world: every rank's C per weight against torch (the gathered
shards times each weight, f32) for W = 1, 2, 3 (the gathered operand returned) and 4 on
odd shapes, again after timed launches (epochs advance, pads and the gathered operand are
reused); the split sequence (pkc's gather kernel, then a GEMM per weight) is checked
beside it. The timing cases are benchmarks/fused_ag_many.py's. And a whole program (two
weights, W = 1, 2, 4) run by the Executable against the interpreter: the runtime step
returns a C per weight."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from fused_ag_many import CASES, module_text, run_case  # noqa: E402

ODD = [c for c in CASES if "odd" in c[0]]


@pytest.mark.parametrize("case", ODD, ids=[c[0] for c in ODD])
def test_matches_torch(case):
    from pkc.runtime.peers import VirtualPeers

    row = run_case(*case, rounds=2, peers=VirtualPeers(case[1]))
    assert row["correct"] and row["correct_after_timing"], row
    # W = 1 also runs every other tile of ALT_TILES, forced: each must be right
    assert not [k for k in row if k.startswith("wrong_")], row
    if case[1] == 1:
        assert len([k for k in row if k.startswith("us_fused_")]) >= 4, row
    assert row["split_rel_err"] <= row["tol"], row


@pytest.mark.parametrize("W", [2, 4])
def test_compiled_program_runs_the_one_kernel(W):
    """default{force=true},schedule of a gather into q / k / v (odd shapes), three calls."""
    from tests.gpu.test_gpu_scheduled_program import _run

    report = _run(module_text(W, 37, 72, (136, 40, 8)), W)
    assert any("scheduled kernel" in line for line in report), report
