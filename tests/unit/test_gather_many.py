"""An all-gather feeding several matmuls (overlap fuses them into one kernel): schedule-fused
makes it one scheduled gather kernel and a matmul per weight (pkc/passes/gather_many.py);
the interpreter checks that the program still computes the same, W = 1..4."""

from __future__ import annotations

from pkc.dialects.kernel import KernelOp
from pkc.ir import parse_module
from pkc.passes.registry import run_pipeline
from pkc.testing import check_transform


def _ir(W, Mc=40, K=64, N1=48, N2=24, gathered=False, dt="bf16"):
    M = W * Mc
    x, g = f"tensor<{Mc}x{K}x{dt}>", f"tensor<{M}x{K}x{dt}>"
    w1, w2 = f"tensor<{K}x{N1}x{dt}>", f"tensor<{K}x{N2}x{dt}>"
    y1, y2 = f"tensor<{M}x{N1}x{dt}>", f"tensor<{M}x{N2}x{dt}>"
    extra_t, extra_v = (f", {g}", ", %g") if gathered else ("", "")
    return f"""func.func @main(%x: {x}, %w1: {w1}, %w2: {w2}) -> ({y1}, {y2}{extra_t}) {{
  %g = pk.all_gather %x {{dim = 0 : i64, world = {W} : i64}} : {x} -> {g}
  %a = pk.matmul %g, %w1 : ({g}, {w1}) -> {y1}
  %b = pk.matmul %g, %w2 : ({g}, {w2}) -> {y2}
  func.return %a, %b{extra_v} : {y1}, {y2}{extra_t}
}}"""


def _fused(W, **kw):
    m = parse_module(_ir(W, **kw), "gather_many.mlir")
    run_pipeline("default{force=true}", m)
    return m


def _kernels(m):
    return [op for op in m.walk() if isinstance(op, KernelOp)]


def test_split_into_a_gather_kernel_and_matmuls():
    m = _fused(2)
    (fused,) = _kernels(m)
    assert fused.attributes["pk.fusion"].data["pattern"].data == "all_gather_mm"
    run_pipeline("schedule", m)
    (gather,) = _kernels(m)
    assert gather.schedule() is not None and gather.kernel_name.data.startswith("all_gather")
    mms = [op for op in m.walk() if op.name == "pk.matmul"]
    assert len(mms) == 2
    text = str(m)
    assert "one gather kernel, then one GEMM per weight" in text


def test_gathered_result_is_kept():
    m = _fused(3, gathered=True)
    run_pipeline("schedule", m)
    ret = [op for op in m.walk() if op.name == "func.return"][0]
    assert len(ret.operands) == 3


def test_interpreter_equivalence():
    for gathered in (False, True):
        check_transform(lambda W: _fused(W, gathered=gathered), "schedule",
                        world_sizes=(2, 3, 4), seeds=(0,))
