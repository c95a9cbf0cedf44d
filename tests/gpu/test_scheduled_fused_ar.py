"""The IR-built fused GEMM + all-reduce (W = 1, 2) and fresh-output GEMM + reduce-scatter
(W = 2) on the GPU, in the virtual world: against torch, the ranks' all-reduce results
bitwise equal, and a caller's output tensor
(benchmarks/fused_ar_ir.py has the cases and the timing)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from fused_ar_ir import CASES, compile_ir, run_case  # noqa: E402

ODD = [c for c in CASES if "odd" in c[0]]


@pytest.mark.parametrize("case", ODD, ids=[c[0] for c in ODD])
def test_matches_torch(case):
    from pkc.runtime.peers import VirtualPeers

    row = run_case(*case, rounds=2, peers=VirtualPeers(case[2]))
    assert row["correct"] and row["correct_after_timing"], row
    assert row.get("ranks_bitwise_equal", True), row


def test_fresh_output_into_the_callers_tensor():
    from pkc.runtime.peers import VirtualPeers
    from pkc.runtime.scheduled_fused import ScheduledFused

    W, M, N, K = 2, 333, 264, 136
    ck, kop = compile_ir("ar", W, M, N, K, "nk")
    fused = ScheduledFused(ck.ptx, ck.meta, VirtualPeers(W), owner="test-out")
    assert fused.persistent == [False]
    torch.manual_seed(3)
    a = [torch.randn(M, K, device="cuda", dtype=torch.bfloat16) for _ in range(W)]
    b = [torch.randn(N, K, device="cuda", dtype=torch.bfloat16) / K ** 0.5 for _ in range(W)]
    out = {r: torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
           for r in range(W)}
    got = fused.run(a, b, out=out)
    torch.cuda.synchronize()
    fused.check()
    ref = sum(a[r].float() @ b[r].float().t() for r in range(W))
    for r in range(W):
        assert got[r].data_ptr() == out[r].data_ptr()
        torch.testing.assert_close(out[r].float(), ref, rtol=2e-2, atol=2e-1)
    with pytest.raises(ValueError, match="out must be a contiguous"):
        fused.run(a, b, out={r: out[r][:, :128] for r in range(W)})
