"""One all-gather of a 3-d activation feeding several matmuls (through equal 2-d views)
is gathered once: collective-views makes one gather, overlap one kernel for all the
matmuls; the result computes what the program does (interpreter, W in {2, 3, 4})."""

from __future__ import annotations

from pkc.dialects import graph as g
from pkc.dialects import kernel as k
from pkc.ir import parse_module
from pkc.passes.registry import run_pipeline
from pkc.testing import check_transform


def _qkv(W: int) -> str:
    S, D, F = 3, 20, 9  # odd rows per rank and widths
    return f"""
func.func @main(%x: tensor<2x{S}x{D}xf32>, %wq: tensor<{D}x{F}xf32>, %wk: tensor<{D}x{F}xf32>, %wv: tensor<{D}x{F}xf32>) -> (tensor<{2 * W * S}x{F}xf32>, tensor<{2 * W * S}x{F}xf32>) {{
  %g = pk.all_gather %x {{dim = 0 : i64, world = {W} : i64}} : tensor<2x{S}x{D}xf32> -> tensor<{2 * W}x{S}x{D}xf32>
  %a = pk.reshape %g : tensor<{2 * W}x{S}x{D}xf32> -> tensor<{2 * W * S}x{D}xf32>
  %q = pk.matmul %a, %wq : (tensor<{2 * W * S}x{D}xf32>, tensor<{D}x{F}xf32>) -> tensor<{2 * W * S}x{F}xf32>
  %b = pk.reshape %g : tensor<{2 * W}x{S}x{D}xf32> -> tensor<{2 * W * S}x{D}xf32>
  %k = pk.matmul %b, %wk : (tensor<{2 * W * S}x{D}xf32>, tensor<{D}x{F}xf32>) -> tensor<{2 * W * S}x{F}xf32>
  func.return %q, %k : tensor<{2 * W * S}x{F}xf32>, tensor<{2 * W * S}x{F}xf32>
}}"""


def test_one_gather_for_several_matmuls() -> None:
    m = parse_module(_qkv(4))
    run_pipeline("collective-views,dce", m)
    assert sum(isinstance(o, g.AllGatherOp) for o in m.walk()) == 1
    run_pipeline("overlap{force=true}", m)
    kernels = [o for o in m.walk() if isinstance(o, k.KernelOp)]
    assert [kop.kernel_name.data for kop in kernels] == ["all_gather_matmul"]
    assert len(kernels[0].inputs) == 3  # x and both weights: gathered once for both
    assert not any(isinstance(o, (g.AllGatherOp, g.MatmulOp)) for o in m.walk())


def test_gathered_once_is_equivalent() -> None:
    check_transform(lambda W: parse_module(_qkv(W)), "default{force=true tile=8 tile-k=8}",
                    world_sizes=(2, 3, 4), seeds=(0,))
