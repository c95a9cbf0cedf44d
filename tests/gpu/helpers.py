"""Running a test kernel on the GPU and comparing it with its reference."""

from __future__ import annotations

import torch

from pkc.interp import interpret, random_inputs
from pkc.ir import parse_module, verify_module

# Kernels here finish in milliseconds: a wait that takes this long is a protocol bug.
TIMEOUT_S = 1.0


def check_outputs(name, got, expected, atol, rtol):
    for r, (g_r, e_r) in enumerate(zip(got, expected)):
        assert len(g_r) == len(e_r), f"{name}: rank {r} has {len(g_r)} outputs, expected {len(e_r)}"
        for i, (g, e) in enumerate(zip(g_r, e_r)):
            g = g.detach().cpu()
            assert g.shape == e.shape and g.dtype == e.dtype, (name, r, i, g.shape, e.shape, g.dtype, e.dtype)
            if g.dtype.is_floating_point:
                assert not torch.isnan(g).any() or torch.isnan(e).any(), \
                    f"{name}: rank {r} output {i} has NaN (poison never overwritten?) at {torch.isnan(g).nonzero()[:5].tolist()}"
                torch.testing.assert_close(g.double(), e.double(), atol=atol, rtol=rtol,
                                           msg=lambda m: f"{name}: rank {r} output {i}: {m}")
            else:
                assert torch.equal(g, e), f"{name}: rank {r} output {i} differs at {(g != e).nonzero()[:5].tolist()}"


def gemm_atol(expected, world: int, dtype=None) -> float:
    """Absolute tolerance of a fused GEMM + reduction with a 16-bit accumulator (the fast
    path: each rank's partial tile is rounded to bf16/f16, then every TMA reduce-add
    rounds again), against the graph's order (round each partial once, sum in f32, round
    once): up to (W + 1) half-ulps of the largest result, plus the GEMM's own 1-ulp
    differences from torch's accumulation order; f32 or narrower cases fall back to 3e-2."""
    import math

    flat = [t for r in expected for t in r if t.dtype.is_floating_point]
    if not flat:
        return 3e-2
    dt = dtype or flat[0].dtype
    bits = {torch.bfloat16: 8, torch.float16: 11}.get(dt)
    if bits is None:
        return 3e-2
    top = max(float(t.abs().max()) for t in flat) or 1.0
    ulp = 2.0 ** (math.floor(math.log2(top)) + 1 - bits)
    return max(3e-2, (world + 1) * ulp / 2 + ulp)


def run_case(case, target, seed=0, timeout_s=TIMEOUT_S, world_runner=None):
    from pkc.runtime.execute import run_kernel_module

    module = parse_module(case.ir, case.name)
    verify_module(module)
    inputs = random_inputs(module, case.world, seed)
    outs = run_kernel_module(module, inputs, case.world, target=target, timeout_s=timeout_s,
                             runner=world_runner)
    expected = case.reference(inputs) if case.reference else interpret(module, inputs, case.world)
    check_outputs(case.name, outs, expected, case.atol, case.rtol)
    return outs
