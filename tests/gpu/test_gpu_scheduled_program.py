"""Whole programs on the kernels the compiler scheduled, in a virtual world on one GPU:
graph-level IR through ``default{force=true}`` and ``schedule`` (what
``CompiledProgram.kernel_module`` runs), run by the Executable, against the interpreter on
the graph-level program. Every kernel of a bf16 / f16 program must be a scheduled one (the
report says which path each took); three calls with fresh inputs (epochs, persistent
buffers) are all correct and a later call does not overwrite an earlier call's outputs;
a CUDA graph of a call replays correctly. Shapes are odd on purpose (rows not multiples
of 16 or of W; N and K multiples of 8, as TMA needs)."""

from __future__ import annotations

import pytest

from tests.gpu.helpers import TIMEOUT_S, check_outputs, gemm_atol


def _t(shape, dt):
    return f"tensor<{'x'.join(map(str, shape))}x{dt}>"


def mm_coll(W, dt, Mc, K, N, coll, nk=True):
    """x [W*Mc, K] @ w -> reduce_scatter / all_reduce; or all_gather(x [Mc, K]) @ w."""
    M = W * Mc
    wt = _t((N, K), dt) if nk else _t((K, N), dt)
    pre = f"  %wt = pk.transpose %w {{perm = [1, 0]}} : {wt} -> {_t((K, N), dt)}\n" if nk else ""
    b = "%wt" if nk else "%w"
    if coll == "ag":
        a, g, o = _t((Mc, K), dt), _t((M, K), dt), _t((M, N), dt)
        return (f"func.func @main(%a: {a}, %w: {wt}) -> {o} {{\n{pre}"
                f"  %g = pk.all_gather %a {{dim = 0 : i64, world = {W} : i64}} : {a} -> {g}\n"
                f"  %y = pk.matmul %g, {b} : ({g}, {_t((K, N), dt)}) -> {o}\n"
                f"  func.return %y : {o}\n}}")
    a, o = _t((M, K), dt), _t((M, N), dt)
    out = o if coll == "ar" else _t((Mc, N), dt)
    op = (f'pk.all_reduce %p {{reduce = "sum", world = {W} : i64}} : {o} -> {o}' if coll == "ar"
          else f'pk.reduce_scatter %p {{dim = 0 : i64, reduce = "sum", world = {W} : i64}} : '
               f'{o} -> {out}')
    return (f"func.func @main(%a: {a}, %w: {wt}) -> {out} {{\n{pre}"
            f"  %p = pk.matmul %a, {b} : ({a}, {_t((K, N), dt)}) -> {o}\n"
            f"  %y = {op}\n  func.return %y : {out}\n}}")


def layer(W, dt, Mc=40, K=256, N=520):
    """mm + RS, the gather of its result feeding two matmuls, an all-reduce."""
    M = W * Mc
    x, w, h, r = _t((M, K), dt), _t((K, N), dt), _t((M, N), dt), _t((Mc, N), dt)
    w2, w3, o, q = _t((N, K), dt), _t((N, 136), dt), _t((M, K), dt), _t((M, 136), dt)
    return f"""func.func @main(%x: {x}, %w: {w}, %w2: {w2}, %v: {w3}) -> ({r}, {o}, {q}) {{
  %h = pk.matmul %x, %w : ({x}, {w}) -> {h}
  %r = pk.reduce_scatter %h {{dim = 0 : i64, reduce = "sum", world = {W} : i64}} : {h} -> {r}
  %g = pk.all_gather %r {{dim = 0 : i64, world = {W} : i64}} : {r} -> {h}
  %m = pk.matmul %g, %w2 : ({h}, {w2}) -> {o}
  %a = pk.all_reduce %m {{reduce = "sum", world = {W} : i64}} : {o} -> {o}
  %q = pk.matmul %g, %v : ({h}, {w3}) -> {q}
  func.return %r, %a, %q : {r}, {o}, {q}
}}"""


def _prepare(ir):
    from pkc.ir import parse_module
    from pkc.passes.registry import run_pipeline

    original = parse_module(ir, "sched.mlir")
    module = parse_module(ir, "sched.mlir")
    run_pipeline("default{force=true},schedule", module)
    return original, module


def _report(module):
    from pkc.runtime.executable import _CACHE

    return [line for mod, ex in _CACHE.values() if mod is module for line in ex.kernel_report]


def _run(ir, W, all_scheduled=True, calls=3):
    from pkc.interp import interpret, random_inputs
    from pkc.runtime.execute import run_kernel_module

    original, module = _prepare(ir)
    fn = next(op.sym_name.data for op in original.walk() if op.name == "func.func")
    first = None
    for seed in range(calls):
        inputs = random_inputs(original, W, seed, func=fn)
        got = run_kernel_module(module, inputs, W, timeout_s=TIMEOUT_S, func_name=fn)
        want = interpret(original, inputs, W, func=fn)
        check_outputs(f"call {seed}", got, want, gemm_atol(want, W), 2e-2)
        if first is None:
            first = (got, [[t.clone() for t in g] for g in got])
    for r, (a, b) in enumerate(zip(*first)):
        for x, y in zip(a, b):
            assert x.equal(y), f"rank {r}: a later call overwrote the first call's output"
    report = _report(module)
    if all_scheduled:
        assert report and all("scheduled kernel" in line for line in report), report
    return report


@pytest.mark.parametrize("W", [1, 2, 3, 4])
@pytest.mark.parametrize("coll", ["rs", "ar", "ag"])
def test_fused_gemm_collective(coll, W):
    for Mc, K, N, nk in ((37, 200, 136, True), (517, 264, 392, False)):
        _run(mm_coll(W, "bf16", Mc, K, N, coll, nk), W)


@pytest.mark.parametrize("W", [2, 4])
def test_fused_f16(W):
    _run(mm_coll(W, "f16", 99, 136, 264, "rs"), W)


@pytest.mark.parametrize("W", [2, 3])
@pytest.mark.parametrize("coll", ["rs", "ar", "ag"])
def test_f32_runs_on_the_portable_path(coll, W):
    # no f32 tensor-core kernel at the schedule level: the kernel-level body runs, correct
    _run(mm_coll(W, "f32", 33, 40, 48, coll), W, all_scheduled=False, calls=1)


@pytest.mark.parametrize("W", [2, 3, 4])
@pytest.mark.parametrize("dt", ["bf16", "f16"])
def test_layer(W, dt):
    _run(layer(W, dt), W)


def test_cuda_graph_capture_and_replay():
    import torch

    from pkc.interp import interpret, random_inputs
    from pkc.runtime.executable import _CACHE
    from pkc.runtime.execute import run_kernel_module

    W = 2
    original, module = _prepare(layer(W, "bf16"))
    inputs = random_inputs(original, W, 0)
    run_kernel_module(module, inputs, W, timeout_s=TIMEOUT_S)      # prepare + warm up
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


def test_compiled_program_runs_its_kernel_module():
    """pkc.compile(...).run on the GPU launches the scheduled kernels (kernel_module)."""
    import torch
    import torch.distributed._functional_collectives as funcol

    import pkc

    def f(x, w):
        return funcol.reduce_scatter_tensor(x @ w.t(), "sum", 0, [0, 1])

    x = torch.randn(2 * 77, 136, dtype=torch.bfloat16)
    w = torch.randn(264, 136, dtype=torch.bfloat16)
    prog = pkc.compile(f, [x, w], world_size=2, pipeline="default{force=true}")
    xs = [torch.randn_like(x) for _ in range(2)]
    got = prog.run([[xi, w] for xi in xs])
    ref = sum(xi.float() @ w.float().t() for xi in xs)
    for r in range(2):
        want = ref[r * 77:(r + 1) * 77]
        err = (got[r][0].float().cpu() - want).abs().max().item()
        assert err <= 0.02 * want.abs().max().item(), err
    assert _report(prog.kernel_module) and all("scheduled kernel" in line
                                               for line in _report(prog.kernel_module))
