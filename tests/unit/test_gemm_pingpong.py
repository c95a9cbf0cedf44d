"""The GEMM's ping-pong consumers (``GemmConfig.pingpong``, pkc/passes/gemm_schedule_pingpong.py):
the two consumer warpgroups take alternate tiles of the CTA, ordered by two mbarriers.
Checked: the schedule (each stage released by one warpgroup, the order barriers, one
accumulator per warpgroup of the whole tile), the interpreter's run equal to the graph
(fp8 and bf16), the emulator's run of the kernel bitwise equal to the cooperative kernel's
with several tiles per CTA (so that both warpgroups alternate and the ring wraps between
tiles; fp8 row-wise with a bias, 64 x 256 tiles, CTA pairs, bf16), the config checks, and
ptxas without spills."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from pkc.codegen import compile_kernel
from pkc.codegen.emit import kernels_of
from pkc.codegen.ptxas import find_ptxas
from pkc.dialects import schedule as s
from pkc.emu import emulate
from pkc.ir import make_context, parse_module, verify_module
from pkc.passes.schedule_matmul import ScheduleMatmul
from pkc.target.gemm_tuning import VARIANTS, GemmConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from fp8_gemm import module_text  # noqa: E402
from test_fp8_scale_prefetch import _inputs  # noqa: E402


def _bf16_text(M, N, K):
    return (f"func.func @mm(%x: tensor<{M}x{K}xbf16>, %w: tensor<{N}x{K}xbf16>) -> "
            f"tensor<{M}x{N}xbf16> {{\n"
            f"  %wt = pk.transpose %w {{perm = [1, 0]}} : tensor<{N}x{K}xbf16> -> "
            f"tensor<{K}x{N}xbf16>\n"
            f"  %y = pk.matmul %x, %wt : (tensor<{M}x{K}xbf16>, tensor<{K}x{N}xbf16>) -> "
            f"tensor<{M}x{N}xbf16>\n  func.return %y : tensor<{M}x{N}xbf16>\n}}\n")


def _kernel(text, variant):
    m = parse_module(text, "pp.mlir")
    ScheduleMatmul(variant=variant).apply(make_context(), m)
    verify_module(m)
    (kop,) = kernels_of(m)
    return kop


def test_the_pingpong_schedule():
    kop = _kernel(module_text(300, 272, 640, True, True), "128x128_pp_s6")
    bars = [o for o in kop.walk() if isinstance(o, s.MbarrierAllocOp)]
    # full (one arrival), empty (one consumer warpgroup per stage), order (2 x 1)
    assert [(b.result.type.count.data, b.result.type.arrivals.data) for b in bars] == \
        [(6, 1), (6, 1), (2, 1)]
    (acc,) = [o for o in kop.walk() if isinstance(o, s.AccAllocOp)]
    assert (acc.result.type.rows.data, acc.result.type.cols.data) == (128, 128)
    mmas = [o for o in kop.walk() if isinstance(o, s.MmaAsyncOp)]
    assert len(mmas) == 1 and mmas[0].a_row.owner.value.value.data == 0   # the whole stage
    # the scale prefetch per tile of the warpgroup, read by every piece (4: 2 slices x 2)
    (pf,) = [o for o in kop.walk() if isinstance(o, s.ScalePrefetchOp)]
    scales = [o for o in kop.walk() if isinstance(o, s.AccScaleOp)]
    assert len(scales) == 4 and all(o.rows_prefetched() for o in scales)
    assert pf.with_rows is not None


@pytest.mark.parametrize("variant", ["128x128_pp_s6", "64x256_pp_s4"])
def test_interpreted_pingpong_schedule_equals_the_graph(variant):
    from pkc.testing import check_transform

    check_transform(lambda w: parse_module(module_text(200, 272, 384, True, True), "t.mlir"),
                    f"schedule-matmul{{variant={variant}}}", world_sizes=(1,), seeds=(0,),
                    func="mm")
    check_transform(lambda w: parse_module(_bf16_text(136, 144, 192), "t.mlir"),
                    f"schedule-matmul{{variant={variant}}}", world_sizes=(1,), seeds=(0,),
                    func="mm", tolerance={torch.bfloat16: (1.6e-2, 1e-2)})


def _emulated(kop, ins, sms):
    (got,) = emulate(compile_kernel(kop, "sm_90a"), [ins], kop=kop, sms=sms)[0]
    return got


@pytest.mark.parametrize("shape,row,bias,variant,coop,sms", [
    ((300, 272, 640), True, True, "128x128_pp_s6", "128x128_s6_tma", 2),   # 9 tiles, kb 5
    ((200, 528, 384), True, False, "64x256_pp_s4", "64x256_c1_s5", 2),     # 12 tiles
    ((300, 272, 640), False, True, "128x128_pp_cl2", "128x128_s6_tma", 4),  # CTA pairs
])
def test_emulated_pingpong_equals_the_cooperative_kernel_bitwise(shape, row, bias, variant,
                                                                 coop, sms):
    ins = _inputs(*shape, row, bias)
    text = module_text(*shape, row, bias)
    got = _emulated(_kernel(text, variant), ins, sms)
    ref = _emulated(_kernel(text, coop), ins, sms)
    assert torch.equal(got.view(torch.int16), ref.view(torch.int16))


def test_emulated_bf16_pingpong_equals_the_cooperative_kernel_bitwise():
    g = torch.Generator().manual_seed(1)
    M, N, K = 260, 200, 192
    ins = [torch.randn(M, K, generator=g).to(torch.bfloat16),
           torch.randn(N, K, generator=g).to(torch.bfloat16)]
    got = _emulated(_kernel(_bf16_text(M, N, K), "128x128_pp_s6"), ins, 2)
    ref = _emulated(_kernel(_bf16_text(M, N, K), "128x128_s6_tma"), ins, 2)
    assert torch.equal(got.view(torch.int16), ref.view(torch.int16))


def test_pingpong_config_checks():
    cfg = VARIANTS["128x128_pp_s6"]
    assert cfg.wg_m == 128 and cfg.acc_regs == 128 and "pingpong" in cfg.tag()
    with pytest.raises(ValueError, match="pingpong needs 2 consumers"):
        GemmConfig(bm=64, bn=256, stages=4, consumers=1, pingpong=True).validate()
    with pytest.raises(ValueError, match="even number of pieces"):
        GemmConfig(bm=64, bn=192, stages=4, pingpong=True).validate()     # 3 pieces
    from pkc.passes.moe_schedule import MoeParts
    from pkc.passes.gemm_schedule_pingpong import check_pingpong_parts
    with pytest.raises(ValueError, match="not for MoeParts: the MoE kernel's blocks"):
        check_pingpong_parts(MoeParts.__new__(MoeParts))    # (fused kinds: test_fused_pingpong)


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
@pytest.mark.parametrize("variant", ["128x128_pp_s6", "64x256_pp_s4", "128x128_pp_cl2"])
def test_pingpong_kernels_assemble_without_spills(variant):
    from pkc.codegen.ptxas import assemble_one

    from pkc.codegen.sass import check_pipeline, find_tool, sass

    kop = _kernel(module_text(1000, 512, 256, True, True, "e4m3", "e5m2"), variant)
    cubin, res = assemble_one(compile_kernel(kop, "sm_90a").ptx)
    assert res.spill_stores == 0 and res.spill_loads == 0 and res.stack_bytes == 0
    if find_tool("cuobjdump"):      # the pipeline as designed (QGMMA per stage, barriers, TMA)
        cfg = VARIANTS[variant].with_(a_type="e4m3", b_type="e5m2")
        assert check_pipeline(cfg, sass(cubin)) == []


def test_fp8_auto_tile_is_pingpong_where_a_cta_has_enough_work():
    from pkc.target.gemm_tuning import PINGPONG_MIN_KBLOCKS, choose_config, pingpong_kblocks

    from pkc.target.gemm_tuning import MULTICAST_MIN_TILES, multicast_tiles

    fp8 = ("e4m3", "e4m3")
    for M, N, K in [(16384, 8192, 4096), (8192, 8192, 8192), (4096, 28672, 8192),
                    (8192, 1280, 8192)]:
        assert pingpong_kblocks(M, N, K) >= PINGPONG_MIN_KBLOCKS
        c = choose_config(M, N, K, "bf16", "nk", 132, fp8, pingpong=True)
        # many tiles a CTA: CTA pairs (multicast B) come first (test_fused_pingpong)
        assert c.pingpong == (multicast_tiles(M, N) < MULTICAST_MIN_TILES)
        assert c.pingpong or c.cluster_m == 2
        # only where asked (the fused kinds' callers do not), and fp8 only
        assert not choose_config(M, N, K, "bf16", "nk", 132, fp8).pingpong
        assert not choose_config(M, N, K, "bf16", "nk", 132, pingpong=True).pingpong
    for M, N, K in [(4096, 4096, 4096), (1000, 1040, 2000)]:       # measured slower there
        assert not choose_config(M, N, K, "bf16", "nk", 132, fp8, pingpong=True).pingpong
    kop = _kernel(module_text(8192, 1280, 8192, True), "")
    assert "pingpong" in " ".join(str(a) for a in kop.attributes.values())
    m = parse_module(module_text(8192, 1280, 8192, True), "pp.mlir")
    ScheduleMatmul(pingpong=False).apply(make_context(), m)
    (kop,) = kernels_of(m)
    assert "pingpong" not in " ".join(str(a) for a in kop.attributes.values())
