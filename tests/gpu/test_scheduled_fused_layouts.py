"""The IR-built GEMM + reduce-scatter along columns (2-D dim 1, 3-D last dim) and along
dim 1 of a 3-D result (row blocks, Shard(1)), and with a bias between the matmul and the
scatter (added in the epilogue), on the GPU, in the virtual world: each rank's chunk
against torch (the f32 sum of the ranks' products and biases), again after several
launches (epochs advance, the persistent output and pads are reused); a
deterministic-order W = 4 kernel gives the same bits on every launch
(benchmarks/fused_rs_layouts.py has the cases and the timing)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from fused_rs_layouts import CASES, compile_case, expected, run_case  # noqa: E402

ODD = [c for c in CASES if "odd" in c[0]]


@pytest.mark.parametrize("case", ODD, ids=[c[0] for c in ODD])
def test_matches_torch(case):
    from pkc.runtime.peers import VirtualPeers

    row = run_case(*case, rounds=2, peers=VirtualPeers(case[1]))
    assert row["correct"] and row["correct_after_timing"], row


def test_fixed_order_column_kernel_is_repeatable():
    import sys as _sys

    from pkc.passes.remarks import plan_of
    from pkc.runtime.peers import VirtualPeers
    from pkc.runtime.scheduled_fused import ScheduledFused

    _sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "unit"))
    from test_schedule_fused_layouts import rs_text, scheduled

    from pkc.codegen import compile_kernel
    from pkc.codegen.emit import kernels_of

    W, R, N, K = 4, 517, 1056, 712
    (kop,) = [k for k in kernels_of(scheduled(rs_text(W, (R,), 1, N, K, "nk"),
                                              "{deterministic=true}"))
              if k.schedule() is not None]
    assert plan_of(kop)["add_order"] == "rank-ring"
    ck = compile_kernel(kop, "sm_90a")
    fused = ScheduledFused(ck.ptx, ck.meta, VirtualPeers(W), owner="layouts-det")
    torch.manual_seed(5)
    a = [torch.randn(R, K, device="cuda", dtype=torch.bfloat16) for _ in range(W)]
    b = [torch.randn(N, K, device="cuda", dtype=torch.bfloat16) / K ** 0.5 for _ in range(W)]
    first = {r: t.clone() for r, t in fused.run(a, b).items()}
    for _ in range(5):
        again = fused.run(a, b)
        torch.cuda.synchronize()
        fused.check()
        assert all(torch.equal(again[r], first[r]) for r in range(W))
    full = sum(a[r].float() @ b[r].float().t() for r in range(W))
    for r in range(W):
        torch.testing.assert_close(first[r].float(), expected(full, W, r, 1, 1),
                                   rtol=0, atol=W * 2 ** -6 * float(full.abs().max()))


PROGRAMS = {  # name: (W, graph-level IR) through default{force=true},schedule, executed
    "cols W=2": (2, ("rs", 2, (333,), 1, 272, 136)),
    "blocks-3d W=3": (3, ("rs", 3, (2, 3 * 128), 1, 200, 72)),
    "blocks-odd W=2": (2, ("rs", 2, (2, 2 * 101), 1, 200, 72)),
    "bias rows W=3": (3, ("bias", 3, (3 * 117,), 0, 264, 136)),
    "bias cols-3d W=2": (2, ("bias", 2, (3, 101), 2, 272, 136)),
    "shard1 gather W=2": (2, ("shard1", 2, 133, 264, 136)),
}


def _shard1_text(W, Sc, H, N):
    """all_gather of [1, Sc, H] along dim 1 (one sequence), its 2-d view, a matmul."""
    s, g = f"tensor<1x{Sc}x{H}xbf16>", f"tensor<1x{W * Sc}x{H}xbf16>"
    v, y = f"tensor<{W * Sc}x{H}xbf16>", f"tensor<{W * Sc}x{N}xbf16>"
    return (f"func.func @main(%x: {s}, %w: tensor<{H}x{N}xbf16>) -> {y} {{\n"
            f"  %g = pk.all_gather %x {{dim = 1 : i64, world = {W} : i64}} : {s} -> {g}\n"
            f"  %v = pk.reshape %g : {g} -> {v}\n"
            f"  %y = pk.matmul %v, %w : ({v}, tensor<{H}x{N}xbf16>) -> {y}\n"
            f"  func.return %y : {y}\n}}\n")


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_compiled_program_runs_the_scheduled_layout(name):
    """The program's kernel module (graph-level IR, default{force=true},schedule) run by
    the Executable: the layout's scheduled kernel (and a bias's graph-level view and scale
    constant) against the interpreter on the graph-level program, three calls."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "unit"))
    from test_schedule_fused_layouts import bias_text, rs_text

    from tests.gpu.test_gpu_scheduled_program import _run

    W, (kind, *args) = PROGRAMS[name]
    text = (bias_text(*args) if kind == "bias" else _shard1_text(*args) if kind == "shard1"
            else rs_text(*args, "kn"))
    report = _run(text, W)
    assert any("scheduled kernel" in line for line in report), report
