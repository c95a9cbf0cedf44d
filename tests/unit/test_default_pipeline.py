"""The default pipeline (overlap, buffer-elision, lower-collectives, sm-partition) keeps
the meaning of every pattern it rewrites, for W = 1, 2, 3, 4, 8, whether the cost model
fuses (forced here, as test shapes are tiny) or leaves the collective to be lowered."""

import pytest

from pkc.ir import parse_module
from pkc.passes.pipelines import DEFAULT
from pkc.passes.registry import parse_pipeline
from pkc.testing import check_transform
from tests.unit.test_overlap import ag_ir, ar_ir, moe_ir, rs_ir, tolerance

WORLDS = (1, 2, 3, 4, 8)
K = 40  # not a multiple of the 64-wide k tiles


def tp_mlp_ir(W, T=12, D=24, F=20):
    return f"""
func.func @main(%x: tensor<{T}x{D}xf32>, %w1: tensor<{D}x{F}xf32>, %w2: tensor<{F}x{D}xf32>) -> tensor<{T}x{D}xf32> {{
  %h = pk.matmul %x, %w1 : (tensor<{T}x{D}xf32>, tensor<{D}x{F}xf32>) -> tensor<{T}x{F}xf32>
  %a = pk.map "gelu" %h : (tensor<{T}x{F}xf32>) -> tensor<{T}x{F}xf32>
  %p = pk.matmul %a, %w2 : (tensor<{T}x{F}xf32>, tensor<{F}x{D}xf32>) -> tensor<{T}x{D}xf32>
  %y = pk.all_reduce %p {{reduce = "sum", world = {W} : i64}} : tensor<{T}x{D}xf32> -> tensor<{T}x{D}xf32>
  func.return %y : tensor<{T}x{D}xf32>
}}"""


def sp_block_ir(W, S=6, D=24, F=20):
    M = S * W
    return f"""
func.func @main(%x: tensor<{S}x{D}xf32>, %w1: tensor<{D}x{F}xf32>, %w2: tensor<{F}x{D}xf32>) -> tensor<{S}x{D}xf32> {{
  %g = pk.all_gather %x {{dim = 0 : i64, world = {W} : i64}} : tensor<{S}x{D}xf32> -> tensor<{M}x{D}xf32>
  %h = pk.matmul %g, %w1 : (tensor<{M}x{D}xf32>, tensor<{D}x{F}xf32>) -> tensor<{M}x{F}xf32>
  %a = pk.map "silu" %h : (tensor<{M}x{F}xf32>) -> tensor<{M}x{F}xf32>
  %p = pk.matmul %a, %w2 : (tensor<{M}x{F}xf32>, tensor<{F}x{D}xf32>) -> tensor<{M}x{D}xf32>
  %y = pk.reduce_scatter %p {{dim = 0 : i64, reduce = "sum", world = {W} : i64}} : tensor<{M}x{D}xf32> -> tensor<{S}x{D}xf32>
  func.return %y : tensor<{S}x{D}xf32>
}}"""


CASES = {
    "mm_rs": (lambda W: rs_ir(W, 9 * W, 36, K), "rs", K),
    "mm_ar": (lambda W: ar_ir(W, 20, 36, K), "ar", K),
    "ag_mm2": (lambda W: ag_ir(W, 7, (30, 12), K), "ag", K),
    "moe": (lambda W: moe_ir(W, "a", 2, 3, K, 20), "moe", K),
    "tp_mlp": (tp_mlp_ir, "ar", 24),
    "sp_block": (sp_block_ir, "rs", 24),
}


def _pipeline(text: str):
    passes = parse_pipeline(text)

    def run(module):
        one_rank = all(op.world_size == 1 for op in module.walk()
                       if op.name in ("pk.all_reduce", "pk.all_gather", "pk.reduce_scatter",
                                      "pk.all_to_all"))
        for p in passes:
            p.apply(None, module)
        names = {op.name for op in module.walk()}
        assert not names & {"pk.all_reduce", "pk.all_gather", "pk.reduce_scatter", "pk.all_to_all"}
        # Over one rank an unfused collective is removed (the identity), not a kernel.
        assert "pk.kernel" in names or one_rank
        for op in module.walk():  # sm-partition gave every worker its SMs
            if op.name == "pk.worker":
                assert op.sm_count is not None and op.sm_count >= 1
    return run


@pytest.mark.parametrize("fuse", ["default{force=true}", "default"])
@pytest.mark.parametrize("name", list(CASES))
def test_default_pipeline_preserves_meaning(name, fuse):
    make, pattern, k = CASES[name]
    for w in WORLDS:
        tol = tolerance({"K": k, "pattern": pattern, "ot": "f32"}, w)
        check_transform(lambda _w: parse_module(make(_w), f"{name}.mlir"), _pipeline(fuse),
                        world_sizes=(w,), seeds=(0,), tolerance=tol)


def test_default_pipeline_is_the_documented_one():
    assert DEFAULT == ("collective-views", "dce", "overlap", "buffer-elision",
                       "lower-collectives", "sm-partition")
    names = [p.name for p in parse_pipeline("default{target=b200}")]
    assert names == list(DEFAULT)
    assert all(getattr(p, "target", "b200") == "b200" for p in parse_pipeline("default{target=b200}"))
