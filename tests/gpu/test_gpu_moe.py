"""The scheduled MoE kernel (schedule-moe) on the GPU, in a virtual world on one GPU:
a whole MoE program (all_to_all -> grouped matmul -> all_to_all, per-expert [N, K]
weights) through ``default{force=true}`` and ``schedule``, run by the Executable against
the interpreter (three calls: epochs, persistent buffers), and the launcher with unequal
run-time tokens per (rank, expert) against torch.

    python3 -m pytest -q tests/gpu/test_gpu_moe.py      # on the GPU machine
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from moe_ir import CHECKS, _check_world, module_text  # noqa: E402
from tests.gpu.test_gpu_scheduled_program import _run  # noqa: E402


@pytest.mark.parametrize("W", [1, 2, 4])
def test_moe_program_runs_the_scheduled_kernel(W):
    report = _run(module_text(W, 2, 37, 136, 200), W)
    assert any("moe" in line for line in report), report


@pytest.mark.parametrize("case", CHECKS, ids=[f"W{c[0]}" for c in CHECKS])
def test_unequal_loads(case):
    row = _check_world(*case)
    assert row["correct"], row
