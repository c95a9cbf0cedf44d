"""overlap fuses fp8 scaled matmuls with their collectives: all_gather -> scaled matmul (A's
row-wise scale gathered with A by the same kernel) and scaled matmul -> reduce_scatter /
all_reduce (every scatter layout), tensor-wise and row-wise scales; each checked by the
interpreter (check_transform) for W in {2, 3, 4, 8} on odd shapes, staged and elided."""

from __future__ import annotations

import math

import pytest
import torch

from pkc.dialects import graph as g
from pkc.dialects import kernel as k
from pkc.interp.equivalence import DEFAULT_TOLERANCE
from pkc.ir import make_context, parse_module
from pkc.passes.overlap import Overlap
from pkc.passes.registry import run_pipeline
from pkc.passes.remarks import remarks_of
from pkc.testing import check_transform

CTX = make_context()
E4, E5 = "f8E4M3FN", "f8E5M2"


def _scales(M: int, N: int, row: bool) -> tuple[str, str]:
    return (f"{M}x1", f"1x{N}") if row else ("1", "1")


def ag_ir(W, Ms, N, K, row=True, out="bf16", gathered=False):
    """all_gather of an fp8 [Ms, K] shard (and, row-wise, of its [Ms, 1] scale) feeding a
    scaled matmul; ``gathered`` also returns the gathered fp8 tensor."""
    M = W * Ms
    sa, sb = _scales(M, N, row)
    shard_sa = f"{Ms}x1" if row else "1"
    gs = (f"  %gs = pk.all_gather %sa {{dim = 0 : i64, world = {W} : i64}} : "
          f"tensor<{Ms}x1xf32> -> tensor<{M}x1xf32>\n") if row else ""
    ret, rtype = (", %g", f", tensor<{M}x{K}x{E4}>") if gathered else ("", "")
    return f"""
func.func @main(%x: tensor<{Ms}x{K}x{E4}>, %b: tensor<{K}x{N}x{E5}>, %sa: tensor<{shard_sa}xf32>, %sb: tensor<{sb}xf32>) -> (tensor<{M}x{N}x{out}>{rtype}) {{
  %g = pk.all_gather %x {{dim = 0 : i64, world = {W} : i64}} : tensor<{Ms}x{K}x{E4}> -> tensor<{M}x{K}x{E4}>
{gs}  %y = pk.scaled_matmul %g, %b scales({"%gs" if row else "%sa"}, %sb) : (tensor<{M}x{K}x{E4}>, tensor<{K}x{N}x{E5}>, tensor<{sa}xf32>, tensor<{sb}xf32>) -> tensor<{M}x{N}x{out}>
  func.return %y{ret} : tensor<{M}x{N}x{out}>{rtype}
}}"""


def red_ir(W, M, N, K, row=True, out="f32", coll="rs", dim=0, view=None):
    """A scaled matmul [M, K] x [K, N] reduce-scattered along ``dim`` (of ``view`` if given,
    a reshape of the product) or all-reduced."""
    sa, sb = _scales(M, N, row)
    shape = view or [M, N]
    vt = f"tensor<{'x'.join(map(str, shape))}x{out}>"
    rshape = list(shape)
    if coll == "rs":
        rshape[dim] //= W
    rt = f"tensor<{'x'.join(map(str, rshape))}x{out}>"
    v = (f"  %v = pk.reshape %c : tensor<{M}x{N}x{out}> -> {vt}\n" if view else "")
    src = "%v" if view else "%c"
    op = (f'pk.reduce_scatter {src} {{dim = {dim} : i64, reduce = "sum", world = {W} : i64}}'
          if coll == "rs" else f'pk.all_reduce {src} {{reduce = "sum", world = {W} : i64}}')
    return f"""
func.func @main(%a: tensor<{M}x{K}x{E4}>, %b: tensor<{K}x{N}x{E4}>, %sa: tensor<{sa}xf32>, %sb: tensor<{sb}xf32>) -> {rt} {{
  %c = pk.scaled_matmul %a, %b scales(%sa, %sb) : (tensor<{M}x{K}x{E4}>, tensor<{K}x{N}x{E4}>, tensor<{sa}xf32>, tensor<{sb}xf32>) -> tensor<{M}x{N}x{out}>
{v}  %o = {op} : {vt} -> {rt}
  func.return %o : {rt}
}}"""


def fuse(overlap: str = "intra"):
    def run(module) -> k.KernelOp:
        Overlap(force=True, tile=16, tile_k=32, overlap=overlap).apply(CTX, module)
        module.verify()
        (kernel,) = [o for o in module.walk() if isinstance(o, k.KernelOp)]
        left = [o.name for o in module.walk() if isinstance(o, (*g.COLLECTIVE_OPS,))]
        assert not left, f"collectives left unfused: {left}\n{module}"
        assert kernel.attributes["pk.fusion"].data["scaled"].value.data
        assert any("fp8 scaled matmul" in r for r in remarks_of(kernel))
        return kernel
    return run


def tolerance(K: int, W: int, reduces: bool, scale: float = 9.0) -> dict:
    """The default tolerance, widened where the kernel legitimately rounds otherwise: it
    scales the f32 product tile (the graph dequantizes the operands first: f32 rounding
    only), and a reduction sums f32 partials where the graph sums partials rounded to a
    16-bit result (half an ulp of each, |partial| < 5 sqrt(K) |scale_a scale_b|, and the
    N(0, 1) scales of random_inputs are under 3 each)."""
    tol = dict(DEFAULT_TOLERANCE)
    rtol, atol = tol[torch.float32]
    tol[torch.float32] = (rtol, max(atol, 4 * 2.0 ** -24 * K * W * scale))
    if reduces:
        rtol, atol = tol[torch.bfloat16]
        tol[torch.bfloat16] = (rtol, max(atol, 2.0 ** -8 * W * 5 * math.sqrt(K) * scale))
    return tol


# Odd shapes: 5-row shards (a 16-row tile does not divide them), K = 40 (a 32-wide K step
# overhangs), N = 24 (a 16-wide column tile overhangs); smaller at W = 8 to keep it quick.
AG_CASES = [  # (W, row-wise, overlap, gathered)
    (2, True, "intra", False), (3, True, "inter", True), (4, True, "intra", False),
    (8, True, "inter", False), (3, False, "intra", False), (4, False, "inter", True),
]


@pytest.mark.parametrize("W,row,overlap,gathered", AG_CASES)
def test_all_gather_scaled_matmul(W, row, overlap, gathered) -> None:
    Ms, N = (3, 12) if W == 8 else (5, 24)
    check_transform(lambda w: parse_module(ag_ir(w, Ms, N, 40, row, gathered=gathered)),
                    fuse(overlap), world_sizes=(W,), seeds=(0,), tolerance=tolerance(40, W, False))


RED_CASES = [  # (W, row-wise, result, collective, dim, view, overlap)
    (2, True, "f32", "rs", 0, None, "intra"),
    (3, True, "f32", "rs", 1, None, "inter"),        # columns
    (4, False, "f32", "rs", 0, None, "inter"),
    (8, True, "f32", "rs", 0, None, "intra"),
    (3, True, "bf16", "rs", 0, None, "intra"),       # 16-bit partials: widened tolerance
    (2, True, "f32", "rs", 1, [2, 12, 24], "intra"),  # Shard(1) of a 3-d linear's result
    (2, False, "f32", "ar", 0, None, "inter"),
    (3, True, "bf16", "ar", 0, None, "intra"),
]


@pytest.mark.parametrize("W,row,out,coll,dim,view,overlap", RED_CASES)
def test_scaled_matmul_reduction(W, row, out, coll, dim, view, overlap) -> None:
    M = 24 if view else (6 * W if W < 8 else 16)
    check_transform(lambda w: parse_module(red_ir(w, M, 24, 40, row, out, coll, dim, view)),
                    fuse(overlap), world_sizes=(W,), seeds=(0,), tolerance=tolerance(40, W, True))


@pytest.mark.parametrize("text", [ag_ir(3, 5, 24, 40, True), red_ir(4, 20, 24, 40, True)],
                         ids=["ag", "rs"])
def test_elided_form(text) -> None:
    """overlap then buffer-elision (peers put straight into the GEMM operand / output)."""
    def run(module):
        run_pipeline("overlap{force=true tile=16 tile-k=32},buffer-elision", module)
        (kernel,) = [o for o in module.walk() if isinstance(o, k.KernelOp)]
        assert kernel.attributes["pk.fusion"].data["stage"].data == "elided"

    W = 3 if "world = 3" in text else 4
    check_transform(lambda w: parse_module(text), run, world_sizes=(W,), seeds=(0,),
                    tolerance=tolerance(40, W, True))


def test_one_kernel_gathers_a_and_its_row_wise_scale() -> None:
    module = parse_module(ag_ir(4, 5, 24, 40, True))
    kernel = fuse("inter")(module)
    assert not any(isinstance(o, g.AllGatherOp) for o in module.walk())  # both gathers went
    names = [a.name_hint for a in kernel.block.args]
    assert names == ["X", "SX", "B0", "SB0", "Y0"]
    allocs = {o.result.name_hint: o.result.type for o in kernel.walk() if isinstance(o, k.AllocOp)}
    assert str(allocs["gathered_scale"]) == "!pk.buffer<20x1xf32, symmetric>"
    puts = [o for o in kernel.walk() if isinstance(o, k.PutOp)]
    assert any(o.buffer.name_hint == "gathered_scale" and
               o.tile.type.get_shape() == (5, 1) for o in puts)
    assert any("A's row-wise scale is gathered with A" in r for r in remarks_of(kernel))


def test_left_unfused_with_reasons() -> None:
    # A's row-wise scale comes in whole (not gathered with A): the kernel cannot gather it
    text = ag_ir(2, 5, 24, 40, True).replace(
        "  %gs = pk.all_gather %sa {dim = 0 : i64, world = 2 : i64} : tensor<5x1xf32> -> "
        "tensor<10x1xf32>\n", "").replace("%sa: tensor<5x1xf32>", "%gs: tensor<10x1xf32>")
    module = parse_module(text)
    Overlap(force=True).apply(CTX, module)
    (ag,) = [o for o in module.walk() if isinstance(o, g.AllGatherOp)]
    assert any("A's row-wise scale is not the all_gather of the shard's scale" in r
               for r in remarks_of(ag))
    # a bias: added once per rank, it cannot be summed W times
    text = red_ir(2, 12, 24, 40, False).replace(
        "scales(%sa, %sb) :", "scales(%sa, %sb) bias %sb2 : tensor<24xf32> :").replace(
        "%sb: tensor<1xf32>)", "%sb: tensor<1xf32>, %sb2: tensor<24xf32>)")
    module = parse_module(text)
    Overlap(force=True).apply(CTX, module)
    (rs,) = [o for o in module.walk() if isinstance(o, g.ReduceScatterOp)]
    assert any("a scaled matmul with a bias" in r for r in remarks_of(rs))


def test_schedule_leaves_fp8_kernels_with_a_remark() -> None:
    """The schedule pipeline's fp8 GEMM (sm_90a, tests/unit/test_fp8_fused.py) has no
    f32-result form: that kernel stays at kernel level with a remark (not split into an
    fp8 pk.matmul, not scheduled as bf16)."""
    module = parse_module(ag_ir(2, 8, 32, 64, True, "f32"))
    run_pipeline("default{force=true},schedule", module)
    module.verify()
    (kernel,) = [o for o in module.walk() if isinstance(o, k.KernelOp)]
    assert kernel.schedule() is None
    assert any("fp8 scaled matmul: result f32: the scheduled fp8 GEMM stores bf16 or f16"
               in r for r in remarks_of(kernel)), remarks_of(kernel)
