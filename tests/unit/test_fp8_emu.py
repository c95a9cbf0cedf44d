"""fp8 on the portable lowering, run by the emulator: every fp8 byte widens to the f32
torch gives it (NaN, infinities, subnormals, signed zeros), and the fused fp8 kernels
(all_gather -> scaled matmul with the row-wise scale gathered alongside, scaled matmul ->
reduce_scatter) compute what the interpreter computes, bit for bit; their PTX assembles
for sm_90a."""

from __future__ import annotations

import pytest
import torch

from pkc.codegen import compile_module
from pkc.codegen.ptxas import assemble, find_ptxas
from pkc.emu.check import check_module
from pkc.interp import random_inputs
from pkc.ir import parse_module
from pkc.passes.pipelines import schedule_for_target
from pkc.passes.registry import run_pipeline
from tests.unit.test_fp8_overlap import ag_ir, red_ir

WIDEN = """
func.func @main(%x: tensor<16x16x{t}>) -> tensor<16x16xf32> {{
  %y = pk.kernel "widen" (%x) {{world = 1 : i64}} : (tensor<16x16x{t}>) -> tensor<16x16xf32> {{
  ^bb0(%in: !pk.buffer<16x16x{t}>, %out: !pk.buffer<16x16xf32>):
    pk.worker "compute" attributes {{sms = 1 : i64}} {{
      %c0 = arith.constant 0 : index
      %a = pk.load %in[%c0, %c0] : !pk.buffer<16x16x{t}> -> !pk.tile<16x16x{t}>
      %f = pk.tile_map "cast" %a : (!pk.tile<16x16x{t}>) -> !pk.tile<16x16xf32>
      pk.store %f, %out[%c0, %c0] : !pk.tile<16x16xf32>, !pk.buffer<16x16xf32>
      pk.yield
    }}
    pk.yield
  }}
  func.return %y : tensor<16x16xf32>
}}"""


@pytest.mark.parametrize("t,dtype", [("f8E4M3FN", torch.float8_e4m3fn),
                                     ("f8E5M2", torch.float8_e5m2)])
def test_every_fp8_byte_widens_as_torch_does(t, dtype) -> None:
    x = torch.arange(256, dtype=torch.uint8).view(dtype).reshape(16, 16)
    res = check_module(parse_module(WIDEN.format(t=t)), [[x]], 1, exact=True)
    assert res.ok, res.difference


def _fused(text: str) -> object:
    module = parse_module(text)
    run_pipeline("default{force=true}", module)
    module, _ = schedule_for_target(module, "h200")
    kernels = [o for o in module.walk() if o.name == "pk.kernel"]
    assert len(kernels) == 1 and kernels[0].schedule() is None  # the portable path runs it
    return module


@pytest.mark.parametrize("name,W,text", [
    ("ag-row", 2, ag_ir(2, 5, 24, 40, True)),
    ("rs-tensor", 3, red_ir(3, 15, 24, 40, False, "bf16")),
], ids=["ag-row", "rs-tensor"])
def test_fused_fp8_kernels_on_the_emulator(name, W, text) -> None:
    module = _fused(text)
    res = check_module(module, random_inputs(parse_module(text), W, 0), W, exact=True)
    assert res.ok, res.difference
    assert res.kernels and all(k.exact for k in res.kernels)


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not found")
def test_fused_fp8_kernel_assembles() -> None:
    """The portable kernels' rule (test_codegen_ptxas): assembled, at most 64 bytes of
    stack. (N = 24, K = 40 keep it portable: with N and K multiples of 16 the row-wise
    gather is scheduled, tests/unit/test_fp8_fused_ar_ag.py.)"""
    module = _fused(ag_ir(2, 8, 24, 40, True))
    (ck,) = compile_module(module, "sm_90a").values()
    _, reports, _ = assemble(ck.ptx, "sm_90a")
    rep = reports[ck.entry]
    assert rep.registers > 0 and rep.stack_bytes <= 64, rep.line()
