"""The emulator runs the scheduled collectives (schedule-collectives: LL, one-shot and
two-shot all-reduce, direct all-gather and reduce-scatter; ``ptx_comm`` instructions,
bound from ``CommLaunch`` by parameter name) for W ranks, compared with the interpreter's
graph-level collective on the same inputs; a missing peer is a deadlock naming the wait."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from pkc.codegen import compile_kernel
from pkc.codegen.emit import kernels_of
from pkc.emu import EmuDeadlock, emulate
from pkc.interp import interpret
from pkc.ir import parse_module
from pkc.passes.registry import run_pipeline
from pkc.passes.remarks import plan_of

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from collectives_ir import module_text  # noqa: E402


def _case(coll, algo, W, nbytes):
    text, _, _ = module_text(coll, W, nbytes, "bf16")
    ref_module = parse_module(text, "ref.mlir")
    m = parse_module(text, "t.mlir")
    run_pipeline(f"lower-collectives{{{coll}={algo}}},schedule-collectives", m)
    (kop,) = kernels_of(m)
    return ref_module, kop, compile_kernel(kop, "sm_90a")


@pytest.mark.parametrize("coll,algo,W,nbytes", [
    ("all_reduce", "one_shot", 2, 1024),
    ("all_reduce", "one_shot", 4, 16384),
    ("all_reduce", "one_shot", 2, 524288),       # above the LL limit: the ar1 kernel
    ("all_reduce", "two_shot", 4, 65536),
    ("all_gather", "direct", 4, 4096),
    ("reduce_scatter", "direct", 2, 8192),
])
def test_scheduled_collectives_match_the_interpreter(coll, algo, W, nbytes):
    ref_module, kop, ck = _case(coll, algo, W, nbytes)
    assert ck.meta.comm is not None, plan_of(kop)
    gen = torch.Generator().manual_seed(W)
    shape = tuple(kop.inputs[0].type.get_shape())
    x = [[torch.randn(shape, generator=gen).to(torch.bfloat16)] for _ in range(W)]
    out = emulate(ck, x, kop=kop)
    ref = interpret(ref_module, [[t.reshape(-1)] for t, in x], W, func="f")
    for r in range(W):
        got, want = out[r][0].reshape(-1).float(), ref[r][0].reshape(-1).float()
        if coll == "all_gather":
            assert torch.equal(got, want)
        else:   # the kernel and the interpreter sum the ranks' bf16 in their own orders
            assert torch.allclose(got, want, rtol=1.6e-2, atol=1e-2), (got - want).abs().max()


def test_missing_peer_is_a_deadlock_naming_the_wait(monkeypatch):
    """Rank 1 never signals (its ``red`` instructions dropped by a handler swapped in for
    the test): rank 0's epoch wait can never be satisfied."""
    from pkc.codegen import ptx
    from pkc.emu import launch, registry

    _, kop, ck = _case("all_reduce", "two_shot", 2, 65536)
    x = [[torch.randn(tuple(kop.inputs[0].type.get_shape())).to(torch.bfloat16)]
         for _ in range(2)]
    real = registry.HANDLERS[ptx.RedOp]

    def rank1_silent(m, ins, g):
        keep = g.rank != 1
        return real(m, ins, g.sub(keep)) if keep.any() else None
    monkeypatch.setitem(registry.HANDLERS, ptx.RedOp, rank1_silent)
    launch._PROGRAMS.clear()          # programs bind handlers once; rebuild this one
    try:
        with pytest.raises(EmuDeadlock) as ei:
            emulate(ck, x, kop=kop)
    finally:
        launch._PROGRAMS.clear()
    msg = str(ei.value)
    assert "epoch wait" in msg and "rank 0" in msg and "ptx.epoch_wait" in msg


@pytest.mark.parametrize("W,Mc,N,K", [(2, 128, 128, 64), (3, 64, 128, 64)])
def test_schedule_fused_gemm_reduce_scatter(W, Mc, N, K):
    """GEMM + reduce-scatter built at the schedule level (peer tensor maps, TMA stores and
    reduce-adds into the owner's copy, per-chunk signals), against the interpreter: the
    tensor core truncates (the H200's wgmma model) where the interpreter sums exactly, and
    at W > 2 the bf16 partials are added by TMA reduce-add (one rounding per add, in
    arrival order): within the bf16 error of W - 1 adds. At W = 2 (the fresh-output
    variant: the peer's bf16 partial added to the own f32 accumulator in the epilogue, as
    the hand GemmRsOutKernel does) the own partial is never rounded, where the
    interpreter rounds both partials before their sum: within the same bound, not bitwise
    (tests/unit/test_emu_fused_ar.py checks it against torch)."""
    from fused_ir import compile_ir, module_text

    ck, kop = compile_ir(W, Mc, N, K, "nk")
    assert ck.meta.fused is not None and any(t.peer >= 0 for t in ck.meta.tmaps)
    gen = torch.Generator().manual_seed(W)
    x = [[torch.randn(tuple(v.type.get_shape()), generator=gen).to(torch.bfloat16)
          for v in kop.inputs] for _ in range(W)]
    out = emulate(ck, x, kop=kop)
    ref = interpret(parse_module(module_text(W, Mc, N, K, "nk"), "r.mlir"), x, W, func="mm_rs")
    for r in range(W):
        got, want = out[r][0], ref[r][0]
        scale = want.float().abs().max()
        assert torch.allclose(got.float(), want.float(), rtol=0, atol=float(W * 2 ** -7 * scale))
