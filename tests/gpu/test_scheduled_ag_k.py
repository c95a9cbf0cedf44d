"""The IR-built all-gather along K + GEMM (pkc/passes/ag_k_schedule.py) on the GPU, in the
virtual world: each rank's C against torch (the shards concatenated along K times B, f32)
for W = 1, 2, 3 (with the gathered slots returned) and 4 on odd shapes, again after
timed launches (epochs advance, pads and the gathered operand are reused); the timing
cases are benchmarks/fused_ag_k_ir.py's. And whole programs (2-d and 3-d, the gathered
tensor returned) run by the Executable against the interpreter."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from fused_ag_k_ir import CASES, run_case  # noqa: E402

ODD = [c for c in CASES if "odd" in c[0]]


@pytest.mark.parametrize("case", ODD, ids=[c[0] for c in ODD])
def test_matches_torch(case):
    from pkc.runtime.peers import VirtualPeers

    row = run_case(*case, rounds=2, peers=VirtualPeers(case[1]))
    assert row["correct"] and row["correct_after_timing"], row


@pytest.mark.parametrize("W,lead,Kc,N,gathered", [(2, (67,), 72, 136, True),
                                                  (3, (2, 37), 40, 200, False),
                                                  (4, (3, 45), 24, 72, True)])
def test_compiled_program_runs_the_scheduled_kernel(W, lead, Kc, N, gathered):
    """The graph-level program (default{force=true},schedule) run by the Executable against
    the interpreter, three calls: the scheduled kernel, the 3-d views around it, and the
    gathered tensor transposed back from its slots after it."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "unit"))
    from test_ag_k import _text

    from tests.gpu.test_gpu_scheduled_program import _run

    report = _run(_text(W, lead, Kc, N, "bf16", gathered), W)
    assert any("scheduled kernel" in line for line in report), report
