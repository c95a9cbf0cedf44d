"""collective-views moves reshapes across collectives exactly, and lets overlap fuse the
graphs the frontend really produces (3-d linear layers)."""

import warnings

import pytest
import torch

from pkc.ir import parse_module
from pkc.passes.registry import parse_pipeline
from pkc.testing import check_transform

WORLDS = (1, 2, 3, 4, 8)


def views_ir(W: int) -> str:
    B, S, H = 2 * W, 3, 8
    return f"""
func.func @main(%x: tensor<{B * S}x{H}xf32>, %s: tensor<{S}x2x{H}xf32>) -> (tensor<{B}x{S}x{H}xf32>, tensor<2x{S}x{H}xf32>, tensor<{W * S * 2}x{H}xf32>) {{
  %v = pk.reshape %x : tensor<{B * S}x{H}xf32> -> tensor<{B}x{S}x{H}xf32>
  %ar = pk.all_reduce %v {{reduce = "sum", world = {W} : i64}} : tensor<{B}x{S}x{H}xf32> -> tensor<{B}x{S}x{H}xf32>
  %rs = pk.reduce_scatter %v {{dim = 0 : i64, reduce = "sum", world = {W} : i64}} : tensor<{B}x{S}x{H}xf32> -> tensor<2x{S}x{H}xf32>
  %ag = pk.all_gather %s {{dim = 0 : i64, world = {W} : i64}} : tensor<{S}x2x{H}xf32> -> tensor<{W * S}x2x{H}xf32>
  %flat = pk.reshape %ag : tensor<{W * S}x2x{H}xf32> -> tensor<{W * S * 2}x{H}xf32>
  func.return %ar, %rs, %flat : tensor<{B}x{S}x{H}xf32>, tensor<2x{S}x{H}xf32>, tensor<{W * S * 2}x{H}xf32>
}}"""


def _views(module):
    for p in parse_pipeline("collective-views,dce"):
        p.apply(None, module)
    for op in module.walk():  # every collective now takes/gives the un-reshaped value
        if op.name in ("pk.all_reduce", "pk.reduce_scatter"):
            assert getattr(op.input.owner, "name", None) != "pk.reshape"
        if op.name == "pk.all_gather":
            assert all(u.operation.name != "pk.reshape" for u in op.result.uses)


def test_moving_reshapes_is_exact():
    check_transform(lambda w: parse_module(views_ir(w), "views.mlir"), _views,
                    world_sizes=WORLDS, exact=True)


def test_frontend_tp_mlp_fuses_after_the_views_move():
    from pkc.frontend import fake_process_group, run_eager
    from tests.unit.models import all_cases

    case = next(c for c in all_cases() if c.name == "tp_mlp_inplace")
    for world in (2, 4):
        with fake_process_group(world), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pkc

            prog = pkc.compile(case.make(0, world), case.inputs(world)[0],
                               pipeline="default{force=true}")
        names = [op.name for op in prog.module.walk()]
        kernels = [op.kernel_name.data for op in prog.module.walk() if op.name == "pk.kernel"]
        assert kernels == ["matmul_all_reduce"] and "pk.all_reduce" not in names
        inputs = case.inputs(world)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = run_eager(lambda r: case.make(r, world), inputs, world_size=world)
        got = prog.run_simulated(inputs, params=case.params(world))
        for r in range(world):
            torch.testing.assert_close(got[r][0], expected[r][0], rtol=1e-4, atol=1e-4)
