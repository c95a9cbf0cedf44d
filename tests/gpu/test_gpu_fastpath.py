"""The compiled path on pkc's sm_90a fast kernels (pkc/runtime/fastpath.py) in a virtual
world on one GPU: graph-level programs through the ``default{force=true}`` pipeline, run by
the Executable, against the interpreter on the graph-level program; each kernel's path
(fast or general, with the reason) is the one the plan says; three calls with fresh
inputs (epochs, persistent buffers) all correct, and an earlier call's outputs are not
overwritten by a later call (outputs are copied out of persistent buffers)."""

from __future__ import annotations

import pytest

from tests.gpu.helpers import TIMEOUT_S, check_outputs, gemm_atol
from tests.unit.test_fastpath import layer, t


def _t(shape, dt):
    return t(shape, dt)


def layer_ir(W, dt, M, K, N, V=128):
    """The layer of tests/unit/test_fastpath.py (fused mm+RS, AG + two matmuls, all_reduce)."""
    assert V == 128
    return layer(W, dt, M, K, N)


def mm_ir(W, dt, M, K, N, coll):
    if coll == "ag":
        a, b, g, o = _t((M // W, K), dt), _t((K, N), dt), _t((M, K), dt), _t((M, N), dt)
        return f"""func.func @main(%a: {a}, %b: {b}) -> {o} {{
  %g = pk.all_gather %a {{dim = 0 : i64, world = {W} : i64}} : {a} -> {g}
  %y = pk.matmul %g, %b : ({g}, {b}) -> {o}
  func.return %y : {o}
}}"""
    a, b, o = _t((M, K), dt), _t((K, N), dt), _t((M, N), dt)
    op = (f'pk.all_reduce %p {{reduce = "sum", world = {W} : i64}} : {o} -> {o}' if coll == "ar" else
          f'pk.reduce_scatter %p {{dim = 0 : i64, reduce = "sum", world = {W} : i64}} : {o} -> '
          f'{_t((M // W, N), dt)}')
    out = o if coll == "ar" else _t((M // W, N), dt)
    return f"""func.func @main(%a: {a}, %b: {b}) -> {out} {{
  %p = pk.matmul %a, %b : ({a}, {b}) -> {o}
  %y = {op}
  func.return %y : {out}
}}"""


def _run(ir, W, expect_fast, calls=3, tol=None):
    from pkc.interp import interpret, random_inputs
    from pkc.ir import parse_module
    from pkc.passes.registry import run_pipeline
    from pkc.runtime.executable import _CACHE
    from pkc.runtime.execute import run_kernel_module

    original = parse_module(ir, "fast.mlir")
    module = parse_module(ir, "fast.mlir")
    run_pipeline("default{force=true}", module)
    first = None
    for seed in range(calls):
        inputs = random_inputs(original, W, seed)
        got = run_kernel_module(module, inputs, W, timeout_s=TIMEOUT_S, fast=True)
        want = interpret(original, inputs, W)
        atol = gemm_atol(want, W) if tol is None else tol[0]
        check_outputs(f"call {seed}", got, want, atol, 2e-2 if tol is None else tol[1])
        if first is None:
            first = (got, [[t.clone() for t in g] for g in got])
    for r, (a, b) in enumerate(zip(*first)):
        for x, y in zip(a, b):
            assert x.equal(y), f"rank {r}: a later call overwrote the first call's output"
    report = [line for mod, ex in _CACHE.values() if mod is module for line in ex.fast_report]
    fast = [line for line in report if "fast path:" in line]
    assert len(fast) == expect_fast, report
    return report


@pytest.mark.parametrize("W", [1, 2, 4])
@pytest.mark.parametrize("coll", ["rs", "ar", "ag"])
def test_fused_gemm_collective(coll, W):
    # M = 8 * 12 * W / 2 rows: chunks smaller and larger than one 128-row tile; N, K not tiles
    for M, K, N in ((96 * W, 200, 136), (512 * W, 256, 384)):
        report = _run(mm_ir(W, "bf16", M, K, N, coll), W, expect_fast=1)
        kind = {"rs": "mm_rs", "ar": "mm_ar", "ag": "ag_mm"}[coll]
        assert f"fast path: {kind} W={W}" in report[0]


@pytest.mark.parametrize("W", [2, 4])
@pytest.mark.parametrize("dt", ["bf16", "f16"])
def test_layer(W, dt):
    # mm+RS fused, AG + two matmuls (ag_mms), lowered all_reduce: all three fast
    _run(layer_ir(W, dt, 128 * W, 256, 512, 128), W, expect_fast=3)


def test_general_path_still_runs_what_fast_declines():
    # all_gather along dim 1: no fast kernel (chunks not contiguous) -> general codegen
    W, a, b = 2, _t((64, 32), "bf16"), _t((64, 64), "bf16")
    ir = f"""func.func @main(%x: {a}) -> {b} {{
  %y = pk.all_gather %x {{dim = 1 : i64, world = {W} : i64}} : {a} -> {b}
  func.return %y : {b}
}}"""
    report = _run(ir, W, expect_fast=0, tol=(0, 0))
    assert "non-leading dim" in report[0]


def test_cuda_graph_capture_and_replay():
    """A prepared Executable whose kernels are all fast does no host work that a CUDA graph
    cannot hold: capture one call, replay it with new inputs copied in, compare."""
    import torch

    from pkc.interp import interpret, random_inputs
    from pkc.ir import parse_module
    from pkc.passes.registry import run_pipeline
    from pkc.runtime.executable import _CACHE
    from pkc.runtime.execute import run_kernel_module

    W = 2
    ir = layer_ir(W, "bf16", 256, 256, 512, 128)
    original, module = parse_module(ir, "g.mlir"), parse_module(ir, "g.mlir")
    run_pipeline("default{force=true}", module)
    inputs = random_inputs(original, W, 0)
    run_kernel_module(module, inputs, W, timeout_s=TIMEOUT_S, fast=True)   # prepare + warm up
    (ex,) = [ex for mod, ex in _CACHE.values() if mod is module]
    static = {r: [t.cuda() for t in inputs[r]] for r in range(W)}
    ex.run(static)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = ex.run(static)
    for seed in (1, 2, 3):
        new = random_inputs(original, W, seed)
        for r in range(W):
            for s, n in zip(static[r], new[r]):
                s.copy_(n)
        graph.replay()
        torch.cuda.synchronize()
        got = [[t.clone() for t in outs[r]] for r in range(W)]
        want = interpret(original, new, W)
        check_outputs(f"replay {seed}", got, want, gemm_atol(want, W), 2e-2)


def test_step_times_name_every_step():
    from pkc.interp import random_inputs
    from pkc.ir import parse_module
    from pkc.passes.registry import run_pipeline
    from pkc.runtime.executable import _CACHE, step_times
    from pkc.runtime.execute import run_kernel_module

    W = 2
    ir = layer_ir(W, "bf16", 256, 256, 512, 128)
    module = parse_module(ir, "p.mlir")
    run_pipeline("default{force=true}", module)
    inputs = random_inputs(parse_module(ir, "p.mlir"), W, 0)
    run_kernel_module(module, inputs, W, fast=True)
    (ex,) = [ex for mod, ex in _CACHE.values() if mod is module]
    times = step_times(ex, lambda: [run_kernel_module(module, inputs, W, fast=True) for _ in range(3)])
    names = [n for n, _ in times]
    assert "matmul_reduce_scatter" in names and "all_gather_matmul" in names
    assert all(ms > 0 for _, ms in times)
