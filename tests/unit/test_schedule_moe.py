"""schedule-moe: the MoE kernel (all-to-all dispatch + grouped GEMM + all-to-all combine)
built at the schedule level runs in the emulator for W = 1, 2, 4 with unequal tokens per
(rank, expert) read at run time, against torch and against the interpreter of the graph;
its verifiers and its remark for weights it cannot read."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from xdsl.dialects import arith
from xdsl.dialects.builtin import IntegerAttr, i32
from xdsl.ir import Block
from xdsl.utils.exceptions import VerifyException

from pkc.dialects import schedule as s
from pkc.dialects import schedule_comm as c
from pkc.dialects import schedule_moe as m
from pkc.emu import emulate
from pkc.interp import interpret
from pkc.ir import parse_module
from pkc.passes.remarks import plan_of

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from moe_ir import compile_ir, max_error, module_text, reference  # noqa: E402


def _inputs(W, E, C, N, K, seed):
    gen = torch.Generator().manual_seed(seed)
    X = [torch.randn(W * E * C, K, generator=gen).to(torch.bfloat16) for _ in range(W)]
    Wt = [(torch.randn(E * N, K, generator=gen)).to(torch.bfloat16) for _ in range(W)]
    counts = [torch.randint(0, C + 1, (W * E,), generator=gen).to(torch.int32) for _ in range(W)]
    counts[0][0] = C                # a full block
    counts[-1][W * E - 1] = 0       # an empty one
    return X, Wt, counts


@pytest.mark.parametrize("W,E,C,N,K", [(1, 2, 64, 128, 64), (2, 2, 136, 72, 72),
                                       (4, 1, 40, 64, 64)])
def test_unequal_loads_match_torch(W, E, C, N, K):
    """Rows per (rank, expert) block drawn at random (one full, one empty), only known to
    the kernel at run time: each valid output row is the expert's product (bf16 rounding
    of an f32 accumulation: within a bf16 step of the scale). C = 136 spans two 128-row
    tiles per block, N = 72 and K = 72 leave partial tiles."""
    ck, kop = compile_ir(W, E, C, N, K)
    assert plan_of(kop)["schedule"] == "moe" and ck.meta.fused.kind == "moe"
    X, Wt, counts = _inputs(W, E, C, N, K, seed=W)
    out = emulate(ck, [[X[r], Wt[r], counts[r]] for r in range(W)], kop=kop, sms=4)
    err, scale = max_error([out[r][0] for r in range(W)], reference(X, Wt, counts, W, E, C, N))
    assert scale > 0 and err <= 2 ** -7 * scale, (err, scale)


def test_counts_above_capacity_are_clipped():
    """A count above C is read as C (the kernel never reads or writes past a block)."""
    W, E, C, N, K = 1, 2, 64, 64, 64
    ck, kop = compile_ir(W, E, C, N, K)
    X, Wt, _ = _inputs(W, E, C, N, K, seed=5)
    counts = [torch.tensor([1000, 3], dtype=torch.int32)]
    out = emulate(ck, [[X[0], Wt[0], counts[0]]], kop=kop, sms=2)
    err, scale = max_error([out[0][0]], reference(X, Wt, [torch.tensor([C, 3])], W, E, C, N))
    assert err <= 2 ** -7 * scale


def test_equal_split_matches_the_interpreter():
    """From the graph (an even all_to_all: the counts are the pass's constant C), the
    emulated kernel equals the interpreter's graph-level all_to_all -> matmul -> all_to_all
    on every row, W = 2."""
    W, E, C, N, K = 2, 2, 64, 64, 64
    ck, kop = compile_ir(W, E, C, N, K)
    gen = torch.Generator().manual_seed(7)
    x = [torch.randn(W * E, C, K, generator=gen).to(torch.bfloat16) for _ in range(W)]
    w = [torch.randn(E, N, K, generator=gen).to(torch.bfloat16) for _ in range(W)]
    full = torch.full((W * E,), C, dtype=torch.int32)
    out = emulate(ck, [[x[r].reshape(-1, K), w[r].reshape(-1, K), full] for r in range(W)],
                  kop=kop, sms=4)
    ref = interpret(parse_module(module_text(W, E, C, N, K), "moe.mlir"), [[x[r], w[r]] for r in range(W)],
                    W, func="moe")
    for r in range(W):
        got, want = out[r][0].float(), ref[r][0].float()
        assert got.shape == want.shape
        assert torch.allclose(got, want, rtol=0, atol=2 ** -7 * float(want.abs().max()))


def test_assembles_without_spills():
    from pkc.codegen.ptxas import find_ptxas

    if find_ptxas() is None:
        pytest.skip("no ptxas")
    import subprocess
    import tempfile

    ck, _ = compile_ir(2, 4, 256, 512, 512)
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "moe.ptx"
        p.write_text(ck.ptx)
        r = subprocess.run([find_ptxas(), "-arch=sm_90a", "-v", str(p), "-o", str(Path(d) / "o")],
                           capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "0 bytes spill stores" in r.stderr and "0 bytes stack frame" in r.stderr


def _loop(**kw) -> m.GroupedTileLoopOp:
    b = Block()
    ptr = b.insert_arg(c.PTR, 0)
    n = arith.ConstantOp(IntegerAttr(64, i32))
    b.add_op(n)
    args = dict(bm=128, bn=128, experts=2, sources=2, capacity=64)
    args.update(kw)
    op = m.GroupedTileLoopOp(ptr, n.result, n.result, [], **args)
    op.block.add_op(s.YieldOp([]))
    b.add_op(op)
    return op


@pytest.mark.parametrize("kw,msg", [({"bm": 96}, "bm a positive multiple of 64"),
                                    ({"sources": 0}, "sources = 0"),
                                    ({"capacity": 0}, "capacity = 0"),
                                    ({"experts": 4096, "sources": 2}, "4096 row blocks")])
def test_grouped_tile_loop_verifier(kw, msg):
    _loop().verify()
    with pytest.raises(VerifyException, match="pks.grouped_tile_loop") as ei:
        _loop(**kw).verify()
    assert msg in str(ei.value)


def test_schedule_pipeline_takes_the_moe_kernel():
    """``schedule`` (what CompiledProgram.kernel_module runs) schedules the MoE kernel
    with schedule-moe (before schedule-fused, which then leaves it alone); the runtime's
    step for its metadata is the MoE launcher's."""
    from pkc.codegen.emit import kernels_of
    from pkc.passes.registry import run_pipeline

    module = parse_module(module_text(2, 2, 40, 64, 64), "moe.mlir")
    run_pipeline("default{force=true},schedule", module)
    (kop,) = kernels_of(module)
    assert plan_of(kop)["schedule"] == "moe"
    remarks = [r.data for r in kop.attributes["pk.remarks"].data]
    assert any(r.startswith("scheduled MoE W=2") for r in remarks)
    assert not any("left unscheduled" in r for r in remarks)


def test_check_transform_interpreter_w1_w2():
    """interp(kernel level) == interp(schedule-moe's kernel), W = 1, 2: the interpreter
    runs the scheduled kernel's roles, waits and signals and checks their ordering (a read
    of tokens or counts not ordered after the peer's store is an error)."""
    from pkc.passes.registry import run_pipeline
    from pkc.testing import check_transform

    def make(W):
        mod = parse_module(module_text(W, 2, 40, 64, 64), "moe.mlir")
        run_pipeline("default{force=true}", mod)
        return mod
    check_transform(make, "schedule-moe", world_sizes=[1, 2], func="moe")


def test_interpreter_catches_a_missing_dispatch_wait(monkeypatch):
    """The same kernel with the producer's wait for a peer's block removed: the interpreter
    names the TMA load that read the expert operand before the peer's tokens arrived."""
    from pkc.dialects import schedule_comm as comm
    from pkc.interp.values import InterpError
    from pkc.passes import moe_schedule, schedule_moe
    from pkc.passes.registry import run_pipeline
    from pkc.testing import check_transform

    class NoWait(moe_schedule.MoeParts):
        def producer_tile(self, t, coords, tA, extra):
            out = super().producer_tile(t, coords, tA, extra)
            for op in list(t.block.ops):
                if isinstance(op, comm.WhenOp):
                    op.detach()
                    op.erase()
            return out

    monkeypatch.setattr(schedule_moe, "MoeParts", NoWait)

    def make(W):
        mod = parse_module(module_text(W, 2, 40, 64, 64), "moe.mlir")
        run_pipeline("default{force=true}", mod)
        return mod
    with pytest.raises(InterpError, match="pks.tma_load.*(before the data arrived|no signal)"):
        check_transform(make, "schedule-moe", world_sizes=[2], func="moe")
