"""overlap_hoist: a later matmul of a gathered tensor whose weight is computed after the
gathered tensor's first use joins the fused kernel once its independent producers move
before that use; the interpreter checks the meaning (W in {1, 2, 3, 4, 8}); producers that
read the gathered tensor, collectives and opaque ops never move."""

from __future__ import annotations

from pkc.dialects import graph as g
from pkc.dialects import kernel as k
from pkc.ir import make_context, parse_module
from pkc.passes.overlap import Overlap
from pkc.passes.overlap_hoist import hoist_gather_operands
from pkc.passes.remarks import remarks_of
from pkc.testing import check_transform

CTX = make_context()


def late_weight_ir(W: int, Mc=5, K=8, N1=6, N2=7, w2_from_gather=False, collective=False) -> str:
    """g = all_gather(a); y1 = g @ w1; w2 = transpose(v) * 2 (after y1); y2 = g @ w2."""
    M = W * Mc
    src = "%g" if w2_from_gather else "%v"
    vt = f"tensor<{M}x{K}xf32>" if w2_from_gather else f"tensor<{N2}x{K}xf32>"
    pre = ""
    if collective:  # the weight comes out of an all_reduce issued after y1
        pre = (f"  %vr = pk.all_reduce %v {{reduce = \"sum\", world = {W} : i64}} : "
               f"tensor<{N2}x{K}xf32> -> tensor<{N2}x{K}xf32>\n")
        src = "%vr"
    w2t = (f"  %w2t = pk.transpose {src} {{perm = [1, 0]}} : {vt} -> tensor<{K}x{M if w2_from_gather else N2}xf32>\n")
    n2 = M if w2_from_gather else N2
    return f"""
func.func @main(%a: tensor<{Mc}x{K}xf32>, %w1: tensor<{K}x{N1}xf32>, %v: tensor<{N2}x{K}xf32>) -> (tensor<{M}x{N1}xf32>, tensor<{M}x{n2}xf32>) {{
  %g = pk.all_gather %a {{dim = 0 : i64, world = {W} : i64}} : tensor<{Mc}x{K}xf32> -> tensor<{M}x{K}xf32>
  %y1 = pk.matmul %g, %w1 : (tensor<{M}x{K}xf32>, tensor<{K}x{N1}xf32>) -> tensor<{M}x{N1}xf32>
{pre}{w2t}  %w2 = pk.map "neg" %w2t : (tensor<{K}x{n2}xf32>) -> tensor<{K}x{n2}xf32>
  %y2 = pk.matmul %g, %w2 : (tensor<{M}x{K}xf32>, tensor<{K}x{n2}xf32>) -> tensor<{M}x{n2}xf32>
  func.return %y1, %y2 : tensor<{M}x{N1}xf32>, tensor<{M}x{n2}xf32>
}}"""


def _kernels(module):
    return [op for op in module.walk() if isinstance(op, k.KernelOp)]


def _gather(module):
    return next(op for op in module.walk() if isinstance(op, g.AllGatherOp))


def test_late_weight_joins_the_fused_kernel():
    m = parse_module(late_weight_ir(2), CTX)
    Overlap(force=True).apply(CTX, m)
    m.verify()
    kernels = _kernels(m)
    assert len(kernels) == 1 and len(kernels[0].outputs) == 2, m   # one kernel, both matmuls
    assert not [op for op in m.walk() if isinstance(op, (g.AllGatherOp, g.MatmulOp))]
    assert any("moved 2 op(s)" in r for r in remarks_of(kernels[0])), remarks_of(kernels[0])


def test_hoisting_and_fusing_keep_the_meaning():
    check_transform(lambda W: parse_module(late_weight_ir(W), CTX),
                    lambda mod: Overlap(force=True).apply(CTX, mod), world_sizes=(1, 2, 3, 4, 8))


def test_producers_reading_the_gather_or_a_collective_stay():
    for kwargs in (dict(w2_from_gather=True), dict(collective=True)):
        m = parse_module(late_weight_ir(2, **kwargs), CTX)
        before = [op.name for op in m.walk()]
        assert hoist_gather_operands(_gather(m)) == 0
        assert [op.name for op in m.walk()] == before
        Overlap(force=True).apply(CTX, m)
        m.verify()
        # the first matmul fuses; the second stays a matmul of the gathered tensor
        assert len(_kernels(m)) == 1 and len([o for o in m.walk() if isinstance(o, g.MatmulOp)]) == 1
