"""The SASS checks for sm_100a (:func:`pkc.codegen.sass.check_sm100_gemm`): the tcgen05
GEMM that schedule-matmul builds for b200, assembled by ``ptxas -arch=sm_100a``, shows its
pipeline in SASS (4 UTCHMMA per k-block, .2CTA exactly where the PTX has cta_group::2,
UTMALDG, LDTM, UTCBAR, UTMASTG for the TMA epilogue, no HGMMA, no LDL / STL); the sm_90a
(wgmma) GEMM does not pass it. Skipped with a reason where ptxas or cuobjdump is missing
(``pkc.codegen.sass.find_tool`` looks in the nvidia-cuda wheels too). The collectives'
check (check_collective) runs in tests/unit/test_emu_comm_sm100.py and test_multimem.py."""

from __future__ import annotations

import pytest

from pkc.codegen import compile_kernel
from pkc.codegen.emit import kernels_of
from pkc.codegen.ptxas import assemble_one, find_ptxas
from pkc.codegen.sass import check_sm100_gemm, find_tool, opcodes, sass
from pkc.ir import parse_module
from pkc.passes.registry import run_pipeline

pytestmark = [pytest.mark.skipif(find_ptxas() is None, reason="ptxas not found"),
              pytest.mark.skipif(find_tool("cuobjdump") is None,
                                 reason="cuobjdump not found (nvidia-cuda-cuobjdump wheel or CUDA)")]


def _mm(M, N, K, dt="bf16"):
    return (f"func.func @mm(%x: tensor<{M}x{K}x{dt}>, %w: tensor<{K}x{N}x{dt}>) -> tensor<{M}x{N}x{dt}> {{\n"
            f"  %y = pk.matmul %x, %w : (tensor<{M}x{K}x{dt}>, tensor<{K}x{N}x{dt}>) -> tensor<{M}x{N}x{dt}>\n"
            f"  func.return %y : tensor<{M}x{N}x{dt}>\n}}\n")


def _sass(M, N, K, target, arch, dt="bf16"):
    m = parse_module(_mm(M, N, K, dt), "mm.mlir")
    run_pipeline(f"schedule-matmul{{target={target}}},dce", m)
    (kop,) = kernels_of(m)
    ptx = compile_kernel(kop, arch).ptx
    cubin, rep = assemble_one(ptx, arch)
    assert rep.spill_stores == 0 and rep.spill_loads == 0, rep.line()
    return ptx, sass(cubin)


@pytest.mark.parametrize("shape", [(256, 384, 128, "bf16"), (1024, 1024, 512, "bf16"),
                                   (200, 320, 136, "f16")])
def test_sm100_gemm_sass_shows_the_tcgen05_pipeline(shape):
    M, N, K, dt = shape
    ptx, text = _sass(M, N, K, "b200", "sm_100a", dt)
    pair = "cta_group::2" in ptx
    assert check_sm100_gemm(text, cta_pair=pair, tma_store="cp.async.bulk.tensor" in ptx
                            and "global.shared::cta" in ptx) == []
    assert any(o.startswith("UTCHMMA") for o in opcodes(text))


def test_sm90_gemm_fails_the_sm100_check():
    _, text = _sass(256, 384, 128, "h200", "sm_90a")
    bad = check_sm100_gemm(text)
    assert any("0 UTCHMMA" in b for b in bad) and any("HGMMA" in b for b in bad), bad
