"""The emulator runs the IR-built fused GEMM + all-reduce (W = 1: the broadcast into the
symmetric output; W = 2: into a fresh output, the peer's chunk summed in the epilogue, the
own chunk copied; and the persistent broadcast at W = 2 when the tuning table says no
fresh output) and the fresh-output GEMM + reduce-scatter at W = 2, on odd shapes (M, N, K
not multiples of 16, M not a multiple of W for the all-reduce), against torch.

Tolerance: the tensor core truncates its products (the H200's wgmma, as the emulator
models it) and each rank's partial is rounded to bf16 before it is added: W + 1 bf16
steps of the result's scale. At W = 2 every rank holds the same all-reduce result, bit
for bit (one rank's sum, the other's copy of it)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from pkc.emu import emulate

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from fused_ar_ir import compile_ir  # noqa: E402


def _run(kind, W, M, N, K, layout="nk", seed=0, dt="bf16"):
    ck, kop = compile_ir(kind, W, M, N, K, layout, dt)
    tdt = torch.bfloat16 if dt == "bf16" else torch.float16
    g = torch.Generator().manual_seed(seed)
    a = [torch.randn(M, K, generator=g).to(tdt) for _ in range(W)]
    w = [(torch.randn(N, K, generator=g) / K ** 0.5).to(tdt) for _ in range(W)]
    b = [wi if layout == "nk" else wi.t().contiguous() for wi in w]
    out = emulate(ck, [[a[r], b[r]] for r in range(W)], kop=kop)
    full = sum(a[r].float() @ w[r].float().t() for r in range(W))
    return ck, kop, [o[0] for o in out], full


def _close(got: torch.Tensor, ref: torch.Tensor, W: int) -> None:
    tol = 2 ** -7 * float(ref.abs().max()) * (W + 1)
    assert not torch.isnan(got).any()
    err = float((got.float() - ref).abs().max())
    assert err <= tol, (err, tol)


@pytest.mark.parametrize("W,M,N,K,layout", [(1, 137, 136, 72, "nk"), (2, 137, 136, 72, "kn")])
def test_gemm_all_reduce(W, M, N, K, layout):
    ck, kop, outs, full = _run("ar", W, M, N, K, layout)
    fresh = not any(ck.meta.fused.sym_outputs)
    assert fresh == (W == 2)          # AR_INTO_OUTPUT: the fresh output at W = 2
    for r in range(W):
        _close(outs[r], full, W)
    if W == 2:
        assert torch.equal(outs[0], outs[1])


def test_gemm_all_reduce_persistent_at_w2(monkeypatch):
    """The broadcast into the symmetric output (store own chunk, reduce-add the peer's)."""
    from pkc.target import fused_tuning

    monkeypatch.setattr(fused_tuning, "AR_INTO_OUTPUT", False)
    ck, kop, outs, full = _run("ar", 2, 129, 72, 136, seed=1)
    assert ck.meta.fused.sym_outputs == [2]
    for r in range(2):
        _close(outs[r], full, 2)
    assert torch.equal(outs[0], outs[1])


@pytest.mark.parametrize("dt", ["bf16", "f16"])
def test_gemm_reduce_scatter_into_a_fresh_output(dt):
    W, Mc = 2, 99
    ck, kop, outs, full = _run("rs", W, W * Mc, 136, 72, seed=2, dt=dt)
    assert not ck.meta.fused.sym_outputs and any(t.alloc for t in ck.meta.tmaps)
    for r in range(W):
        _close(outs[r], full[r * Mc:(r + 1) * Mc], W)
