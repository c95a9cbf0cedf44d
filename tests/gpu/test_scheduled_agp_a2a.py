"""The IR-built pull all-gather (agp), all-to-all (a2a) and the GEMM + all-reduce pair at
W > 2 (schedule-fused: GEMM + reduce-scatter, then the agp of its symmetric output) on a
Hopper GPU in the virtual world: agp bitwise equal to the reference (and, until they were deleted, to the hand agp) on
the same symmetric source, a2a bitwise equal to the reference, the pair within a bf16 step
of torch and equal on every rank (three launches each; benchmarks/collectives_ir.py's
cases, a few timed launches included); and whole programs with an all_to_all run by the
Executable against the interpreter (the result lives in the kernel's symmetric output: a
later call must not overwrite an earlier call's result).

    python -m pytest tests/gpu/test_scheduled_agp_a2a.py      # needs an sm_90 GPU

One H200, 2026-12-01 (benchmarks/results/h200_2026-12-01b/collectives_ir_extra.json): all
correct; hand / IR 0.981-1.001 (pair), 0.992-1.050 (agp).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))


def _hopper() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


pytestmark = pytest.mark.skipif(not _hopper(), reason="needs an sm_90 GPU")


@pytest.mark.parametrize("W,n", [(2, 8 * 1001), (3, 8 * 12345), (4, 8 * 4099)])
def test_agp_equals_reference(W, n):
    from collectives_ir import run_agp_case

    row = run_agp_case(W, n, iters=8)
    assert row["bitwise_equal_reference"], row


@pytest.mark.parametrize("W,n", [(2, 8 * 1001), (3, 8 * 12345), (4, 8 * 4099)])
def test_a2a_equals_reference(W, n):
    from collectives_ir import run_a2a_case

    row = run_a2a_case(W, n, iters=8)
    assert row["bitwise_equal_reference"], row


@pytest.mark.parametrize("case", [("odd W=3", 3, 333, 776, 520, "nk"),
                                  ("odd W=4", 4, 257, 1048, 712, "kn")])
def test_mm_all_reduce_pair_against_torch(case):
    from collectives_ir import run_pair_case

    row = run_pair_case(*case, iters=8)
    assert row["correct"] and row["correct_after_timing"], row


@pytest.mark.parametrize("W", [2, 3, 4])
def test_all_to_all_program(W):
    from tests.gpu.test_gpu_scheduled_program import _run

    rows, cols = 3 * W, 40
    t = f"tensor<{rows}x{cols}xbf16>"
    ir = (f"func.func @main(%x: {t}) -> {t} {{\n  %y = pk.all_to_all %x {{world = {W} : i64, "
          f"split_dim = 0 : i64, concat_dim = 0 : i64}} : {t} -> {t}\n  func.return %y : {t}\n}}")
    _run(ir, W)
