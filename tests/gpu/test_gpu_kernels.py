"""Hand-written kernels on the GPU (virtual world of W ranks on one GPU): collectives and
fused GEMMs for W = 2, 4, 8 in bf16 and fp16 at shapes the tiles do not divide, op-
coverage kernels against the interpreter, and broken protocols that must raise the
timeout error instead of hanging. Targets: sm_90a (bulk copies) and the portable sm_80
path (the driver JIT-compiles it for the GPU at hand)."""

from __future__ import annotations

import pytest

from pkc.runtime.errors import KernelTimeoutError
from tests.gpu import kernels as K
from tests.gpu.helpers import run_case

TARGETS = ["sm_90a", "sm_80"]
PATTERNS = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "ag_gemm", "gemm_rs", "gemm_ar"]


def _collective(pattern: str, W: int, dt: str):
    return [c for c in K.collective_cases(W, dt) if c.name.startswith(pattern + "_W")][0]


def test_virtual_world_uses_green_contexts():
    from pkc.runtime.world import VirtualWorld

    from pkc.runtime import launch

    for W in (2, 4, 8):
        world = VirtualWorld(W)
        print(f"W={W}: {world.mode}, SMs per rank {[lane.sm_count for lane in world.lanes]}")
        assert world.mode == "green contexts", world.mode
        # A launch must not have fallen back to plain streams (see VirtualWorld._launch_all).
        run_case(K.unit_all_reduce(W, "bf16"), "sm_90a", world_runner=world)
        assert world.mode == "green contexts", world.mode
    kinds = {k.kind for k in launch._LOADED.values()}
    print(f"kernels loaded as: {kinds}")
    assert kinds == {"library"}, kinds


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dt", ["bf16", "f16"])
@pytest.mark.parametrize("W", [2, 4, 8])
def test_unit_all_reduce(W, dt, target):
    run_case(K.unit_all_reduce(W, dt), target)


# Every pattern, W and dtype on sm_90a; the portable path (sm_80 PTX) in bf16.
COLLECTIVES = [(p, W, dt, t) for t in TARGETS for dt in ("bf16", "f16") for W in (2, 4, 8)
               for p in PATTERNS if t == "sm_90a" or dt == "bf16"]


@pytest.mark.parametrize("pattern,W,dt,target", COLLECTIVES)
def test_collective(pattern, W, dt, target):
    run_case(_collective(pattern, W, dt), target, seed=W)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", K.coverage_cases(), ids=lambda c: c.name)
def test_coverage(case, target):
    run_case(case, target)


@pytest.mark.parametrize("target", TARGETS)
def test_wait_that_never_completes_raises(target):
    case = K.unit_all_reduce(4, "bf16", expected=5)
    with pytest.raises(KernelTimeoutError) as err:
        run_case(case, target, timeout_s=0.3)
    msg = str(err.value)
    print(msg)
    assert "kernel @all_reduce_one_shot" in msg and "rank" in msg
    assert "signal %arrived[0] is 4, it waits until >= 5" in msg
    assert "'pk.wait' at" in msg


@pytest.mark.parametrize("target", TARGETS)
def test_missing_signal_raises(target):
    case = K.unit_all_reduce(2, "f16", signal=False)
    with pytest.raises(KernelTimeoutError, match=r"signal %arrived\[0\] is 0, it waits until >= 2"):
        run_case(case, target, timeout_s=0.3)


def test_world_still_works_after_a_timeout():
    run_case(K.unit_all_reduce(4, "bf16"), "sm_90a")


def test_plain_streams_fallback():
    """Without green contexts (the documented fallback) the ranks still run concurrently
    here, since the CTA counts are fitted to an equal share of the SMs."""
    from pkc.runtime.world import VirtualWorld

    world = VirtualWorld(4, green=False)
    assert world.mode.startswith("plain streams")
    run_case(K.all_reduce(4, 100, 200, "bf16"), "sm_90a", world_runner=world)
