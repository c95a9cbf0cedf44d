"""The IR-built collectives (graph collective -> lower-collectives -> schedule-collectives ->
sm_90a PTX, launched by pkc/runtime/scheduled_comm.py) on a Hopper GPU in the virtual world:
bitwise equal to the rank-order f32 reference (the hand-written kernels they replaced gave
the same bits: benchmarks/results/h200_2026-12-01*), several launches in a row (epochs,
double-buffered staging), and a missing peer reported as a timeout.

    python -m pytest tests/gpu/test_scheduled_collectives.py      # needs an sm_90 GPU

benchmarks/collectives_ir.py runs the same comparison with timings (one H200, 2026-12-01:
37 cases bitwise equal, benchmarks/results/h200_2026-12-01/collectives_ir_run1.txt).
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

KIB, MIB = 1 << 10, 1 << 20
CASES = [("all_reduce", "one_shot", 4 * KIB), ("all_reduce", "one_shot", 1 * MIB),
         ("all_reduce", "two_shot", 1 * MIB + 48), ("all_gather", "direct", 16 * KIB),
         ("all_gather", "direct", 4 * MIB), ("reduce_scatter", "direct", 16 * KIB),
         ("reduce_scatter", "direct", 4 * MIB)]


@pytest.mark.parametrize("W", [2, 3, 4])
@pytest.mark.parametrize("coll,algo,nbytes", CASES)
def test_ir_collective_equals_reference(coll, algo, nbytes, W):
    from collectives_ir import compile_ir, peers, reference

    from pkc.runtime.scheduled_comm import ScheduledCollective

    unit = 16 if coll == "all_reduce" else 16 * W      # whole vectors per chunk
    nbytes -= nbytes % unit                            # (the two-shot's last chunk may be short)
    ck, plan, n_in, n_out = compile_ir(coll, algo, W, nbytes, "bf16")
    pr = peers(W)
    ir = ScheduledCollective(ck.ptx, ck.meta, pr, [n_in], [n_out], "bf16")
    g = torch.Generator(device="cuda").manual_seed(nbytes + W)
    for launch in range(3):
        xs = [torch.randn(n_in, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(W)]
        outs = {r: torch.full((n_out,), float("nan"), device="cuda", dtype=torch.bfloat16)
                for r in range(W)}
        got = {r: t.clone() for r, t in ir.run({r: xs[r] for r in range(W)}, outs=outs).items()}
        torch.cuda.synchronize()
        ir.check()
        want = reference(coll, xs, W)
        for r in range(W):
            name = f"{plan['comm_kind']} W={W} {nbytes} B rank {r} launch {launch}"
            assert torch.equal(got[r].view(-1), want[r].view(-1)), name


def test_missing_peer_is_a_timeout_not_a_hang():
    from collectives_ir import missing_peer

    res = missing_peer()
    assert res["missing_peer"] == "timeout reported", res
    assert "timed out waiting for rank 1" in res["message"]
