"""Kernels produced by pkc's passes, on the GPU, against the interpreter run on the
graph-level program (skipped where the pipeline produces no kernel)."""

from __future__ import annotations

import pytest

from tests.gpu.helpers import TIMEOUT_S, check_outputs, gemm_atol
from tests.gpu.pass_cases import graph_cases

CASES = [c for W in (2, 4, 8) for dt in ("bf16", "f16") for c in graph_cases(W, dt)]


@pytest.mark.parametrize("target", ["fast", "sm_90a", "sm_80"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_pass_kernel(case, target):
    """``fast``: the kernels at the schedule level where the schedule stage builds one (the rest on
    sm_90a codegen); ``sm_90a`` / ``sm_80``: the general codegen path only."""
    from pkc.interp import interpret, random_inputs
    from pkc.ir import parse_module
    from pkc.runtime.execute import run_kernel_module
    from tests.gpu.pass_cases import lower

    try:
        module, steps, kernels = lower(case)
    except ImportError as e:
        pytest.skip(f"passes not available: {e}")
    if not kernels:
        pytest.skip(f"pipeline {steps} produced no pk.kernel")
    original = parse_module(case.ir, case.name)
    inputs = random_inputs(original, case.world, 1)
    fast = target == "fast"       # the kernels at the schedule level (what pkc.compile runs)
    if fast:
        from pkc.passes.pipelines import schedule_for_target

        module, _ = schedule_for_target(module, "h200")
    got = run_kernel_module(module, inputs, case.world, target="sm_90a" if fast else target,
                            timeout_s=TIMEOUT_S)
    if case.gemm:
        # A fused GEMM sums f32 partials and rounds once, where the graph rounds each
        # rank's product first: compare with the interpreter on the kernel itself.
        want = interpret(module, inputs, case.world)
        # the fast path's 16-bit accumulator rounds each partial and each add (gemm_atol)
        atol = gemm_atol(want, case.world) if fast else 3e-2
        check_outputs(case.name, got, want, atol, 2e-2)
    else:
        check_outputs(case.name, got, interpret(original, inputs, case.world), 1e-2, 1e-2)
