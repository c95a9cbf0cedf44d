"""The fused fp8 kinds on forced tiles (schedule-fused ``variant``) on the GPU in the
virtual world, against torch._scaled_mm (cuBLASLt) + the collective's sum on the same data:
ping-pong consumers (the two consumer warpgroups on alternate tiles, each its own fused
epilogue) and CTA pairs sharing B by TMA multicast (cooperative 128 x 256 and ping-pong
128 x 128; odd row-tile counts per chunk, so a pair's second tile can lie past its chunk),
and schedule-fused's own pick where that is CTA pairs (fp8, >= 8 tiles of 128 x 256 a CTA,
ping-pong consumers on them where a tile's main loop is <= 32 k-blocks);
one gather feeding several matmuls on the same forced tiles.
The shapes give every CTA several tiles (more tiles per rank than SMs), so both warpgroups
work, their per-warpgroup chunk counts and signals included; the interpreter equality of
these kernels is tests/unit/test_fused_pingpong.py's and test_fused_cluster_pairs.py's."""

from __future__ import annotations

import pytest
import torch

from tests.gpu.helpers import TIMEOUT_S
from tests.gpu.test_gpu_fp8 import _torch_reference
from tests.unit.test_fp8_gather_kinds import agk_ir
from tests.unit.test_fp8_overlap import ag_ir, red_ir

PP, PP2, COOP2 = "128x128_pp_s6", "128x128_pp_cl2", "128x256_s4_cl2"
# (name, W, graph IR, variant): 180-288 tiles per rank, odd shard rows where the kind allows
CASES = [
    ("rs-row-w2", 2, red_ir(2, 2 * 1024, 2304, 256, True, "bf16"), PP),
    ("rs-tensor-w4", 4, red_ir(4, 4 * 520, 1152, 128, False, "bf16"), PP),
    ("ag-row-w2", 2, ag_ir(2, 1031, 2304, 256, True), PP),
    ("ag-tensor-w4", 4, ag_ir(4, 517, 1152, 128, False, gathered=True), PP),
    ("agk-row-w3", 3, agk_ir(3, (1031,), 64, 2304, True), PP),
    ("rs-row-w2-pairs", 2, red_ir(2, 2 * 1100, 2304, 256, True, "bf16"), COOP2),
    ("rs-tensor-w3-pp-pairs", 3, red_ir(3, 3 * 1100, 1152, 128, False, "bf16"), PP2),
    ("ag-row-w2-pp-pairs", 2, ag_ir(2, 1100, 2304, 256, True, gathered=True), PP2),
    ("ag-tensor-w4-pairs", 4, ag_ir(4, 600, 2304, 128, False), COOP2),
    # no variant: schedule-fused's own pick is CTA pairs here (>= 8 tiles of 128 x 256 a CTA),
    # with ping-pong consumers (K 256: 2 k-blocks a tile)
    ("ag-row-w2-default-pairs", 2, ag_ir(2, 4100, 4352, 256, True), ""),
    ("rs-row-w2-default-pairs", 2, red_ir(2, 2 * 4100, 4352, 256, True, "bf16"), ""),
]


def _scheduled(text: str, name: str, variant: str):
    from pkc.ir import make_context, parse_module
    from pkc.passes.registry import parse_pipeline, run_pipeline
    from pkc.passes.remarks import plan_of

    module = parse_module(text, name)
    run_pipeline("default{force=true}", module)
    opts = f"{{variant={variant}}}" if variant else ""
    for p in parse_pipeline(f"schedule-fused{opts},schedule-collectives"):
        p.apply(make_context(), module)
    kernels = [o for o in module.walk() if o.name == "pk.kernel"]
    assert kernels and all(k.schedule() is not None for k in kernels), name
    # no variant: these cases' K (256) is short, so the default pairs run ping-pong
    want_pp, want_pairs = "_pp_" in variant or not variant, variant.endswith("cl2") or not variant
    assert any(bool(plan_of(k).get("pingpong")) == want_pp
               and (k.schedule().cluster.data == 2) == want_pairs for k in kernels), name
    return module


@pytest.mark.parametrize("name,W,text,variant", CASES, ids=[c[0] for c in CASES])
def test_forced_tile_fused_fp8_against_scaled_mm(name, W, text, variant):
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("the scheduled fp8 kernels need sm_90a")
    from pkc.interp import random_inputs
    from pkc.ir import parse_module
    from pkc.runtime.execute import run_kernel_module

    inputs = random_inputs(parse_module(text, name), W, 7)
    module = _scheduled(text, name, variant)
    got = run_kernel_module(module, inputs, W, target="sm_90a", timeout_s=TIMEOUT_S)
    want = _torch_reference(name, W, inputs, got[0][0].dtype)
    for r in range(W):
        g, e = got[r][0].float(), want[r][0].float()
        assert not torch.isnan(g).any(), f"{name}: rank {r} has NaN (a tile never written)"
        # cuBLASLt sums in another order; a reduce-scatter rounds each partial to bf16
        tol = 2e-2 * e.abs().max().item() + 1e-3
        assert (g - e).abs().max().item() <= tol, f"{name}: rank {r}"


# one gather feeding several fp8 matmuls (pkc/passes/gather_many.py) on forced tiles: a
# tile column is one weight's, so a pair shares that weight's B; 88-184 row tiles of the
# gathered A, odd shard rows: (name, W, (shard rows, widths, K, row-wise), variant)
MANY_CASES = [("many-row-w2-pairs", 2, (1100, (2304, 1152), 256, True), COOP2),
              ("many-tensor-w3-pp-pairs", 3, (1031, (1152, 1152, 640), 128, False), PP2),
              ("many-row-w2-pp", 2, (1031, (1152, 2304), 128, True), PP)]


@pytest.mark.parametrize("name,W,shape,variant", MANY_CASES, ids=[c[0] for c in MANY_CASES])
def test_several_weights_on_forced_tiles_against_scaled_mm(name, W, shape, variant):
    from tests.gpu.test_gpu_fp8 import check_several_weights

    check_several_weights(name, W, shape, variant)
