"""The GEMM on sm_100a (Blackwell), checked without a Blackwell GPU: schedule-matmul for an
sm_100a target builds the tensor-memory form (producer / single-thread MMA / epilogue roles,
two CTA accumulators), the sm_100a lowering prints tcgen05, ``ptxas -arch=sm_100a``
assembles it without spills, and its SASS shows UTCHMMA, UTMALDG, LDTM and no local memory
(where cuobjdump exists). No Blackwell hardware has run any of it."""

from __future__ import annotations

import re

import pytest

from pkc.codegen import compile_kernel
from pkc.codegen.emit import kernels_of
from pkc.codegen.errors import CodegenError
from pkc.codegen.ptx_sm100 import DESC_KMAJOR, instr_desc_f16, smem_desc_hi
from pkc.codegen.ptxas import assemble, find_ptxas
from pkc.dialects import schedule as s
from pkc.ir import make_context, parse_module, verify_module
from pkc.passes import schedule_matmul as sm
from pkc.passes.schedule_matmul import ScheduleMatmul
from pkc.target.gemm_tuning_sm100 import TmemGemmConfig, choose_tmem_config

needs_ptxas = pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")


def module_text(M: int, N: int, K: int, layout: str, dt: str = "bf16") -> str:
    if layout == "nk":
        return (f"func.func @mm(%x: tensor<{M}x{K}x{dt}>, %w: tensor<{N}x{K}x{dt}>) -> tensor<{M}x{N}x{dt}> {{\n"
                f"  %wt = pk.transpose %w {{perm = [1, 0]}} : tensor<{N}x{K}x{dt}> -> tensor<{K}x{N}x{dt}>\n"
                f"  %y = pk.matmul %x, %wt : (tensor<{M}x{K}x{dt}>, tensor<{K}x{N}x{dt}>) -> tensor<{M}x{N}x{dt}>\n"
                f"  func.return %y : tensor<{M}x{N}x{dt}>\n}}\n")
    return (f"func.func @mm(%x: tensor<{M}x{K}x{dt}>, %w: tensor<{K}x{N}x{dt}>) -> tensor<{M}x{N}x{dt}> {{\n"
            f"  %y = pk.matmul %x, %w : (tensor<{M}x{K}x{dt}>, tensor<{K}x{N}x{dt}>) -> tensor<{M}x{N}x{dt}>\n"
            f"  func.return %y : tensor<{M}x{N}x{dt}>\n}}\n")


def scheduled(M, N, K, layout="nk", dt="bf16", target="b200", bn=None, epilogue="tma",
              monkeypatch=None):
    m = parse_module(module_text(M, N, K, layout, dt), "t.mlir")
    if bn is not None:
        monkeypatch.setattr(sm, "choose_tmem_config",
                            lambda *a: TmemGemmConfig(bn=bn, stages=4 if bn == 256 else 6,
                                                      dtype=dt, b_layout=layout,
                                                      epilogue=epilogue))
    ScheduleMatmul(target=target).apply(make_context(), m)
    verify_module(m)
    return m


def compiled(M, N, K, layout="nk", dt="bf16", bn=None, epilogue="tma", monkeypatch=None):
    (kop,) = kernels_of(scheduled(M, N, K, layout, dt, bn=bn, epilogue=epilogue,
                                  monkeypatch=monkeypatch))
    return compile_kernel(kop, "sm_100a")


def test_descriptors_match_the_ptx_isa_tables():
    # instruction descriptor (PTX ISA 9.7.16.4.2): the value the assembled probe
    # (/work/shared/sm100/tcgen05_poc.ptx) used for m128n128 bf16 -> f32, K-major
    assert instr_desc_f16("bf16", 128, 128) == 0x08200490
    assert instr_desc_f16("f16", 128, 256, b_mn_major=True) == (1 << 4) | (1 << 16) | (32 << 17) | (8 << 24)
    # shared-memory descriptor (9.7.16.4.1): version 0b001 at bit 46, 128B swizzle = 2 at 61
    assert DESC_KMAJOR >> 61 == 2 and (DESC_KMAJOR >> 46) & 7 == 1
    assert (DESC_KMAJOR >> 32) & 0x3FFF == 1024 >> 4
    assert smem_desc_hi(0, 0, 32) >> 61 == 6
    with pytest.raises(ValueError, match="m128n72k16"):
        instr_desc_f16("bf16", 128, 72)


def test_sm100_schedule_has_mma_and_epilogue_roles_over_two_tmem_accumulators():
    m = scheduled(256, 384, 128)
    (kop,) = kernels_of(m)
    sched = kop.schedule()
    roles = [op.kind.data for op in sched.block.ops if isinstance(op, s.RoleOp)]
    assert roles == ["producer", "mma", "epilogue"]
    accs = [op for op in sched.block.ops if isinstance(op, s.AccAllocOp)]
    assert len(accs) == 2 and all(a.result.type.rows.data == 128 for a in accs)
    ops = {type(o) for o in sched.walk()}
    assert s.MmaCommitArriveOp in ops and s.AccSelectOp in ops and s.MmaWaitOp not in ops
    plan = kop.attributes["pk.plan"].data
    assert plan["acc"].data == "tmem" and plan["acc_bufs"].value.data == 2


def test_tmem_config_choice_and_limits():
    assert choose_tmem_config(8192, 8192, 4096, "bf16", "nk", 148).bn == 256
    cfg = choose_tmem_config(256, 384, 128, "bf16", "nk", 148)
    assert cfg.bn in (64, 128, 256) and cfg.stages >= 2
    with pytest.raises(ValueError, match="tensor-memory columns"):
        TmemGemmConfig(bn=256, acc_bufs=3, stages=2).validate()
    with pytest.raises(ValueError, match="multiple of 64"):
        TmemGemmConfig(bn=96, b_layout="kn").validate()


def test_sm100_ptx_is_tcgen05_and_differs_from_sm90_in_the_mma_path():
    ptx100 = compiled(256, 384, 128).ptx
    for needle in ("tcgen05.alloc.cta_group::1", "tcgen05.relinquish_alloc_permit",
                   "tcgen05.mma.cta_group::1.kind::f16", "tcgen05.commit.cta_group::1.mbarrier",
                   "tcgen05.ld.sync.aligned.32x32b.x32.b32", "tcgen05.wait::ld.sync.aligned",
                   "tcgen05.dealloc.cta_group::1", "cp.async.bulk.tensor.2d", ".target sm_100a"):
        assert needle in ptx100, needle
    assert "wgmma" not in ptx100 and "setmaxnreg.dec.sync.aligned.u32 40" in ptx100
    # 4 MMAs (K = 16 each) per 64-deep k-block, issued once in the code
    assert len(re.findall(r"tcgen05\.mma\.", ptx100)) == 4
    m90 = scheduled(256, 384, 128, target="h200")
    ptx90 = compile_kernel(kernels_of(m90)[0], "sm_90a").ptx
    assert "wgmma.mma_async" in ptx90 and "tcgen05" not in ptx90


def test_each_target_refuses_the_others_accumulator_form():
    with pytest.raises(CodegenError, match="needs sm_100a"):
        compile_kernel(kernels_of(scheduled(256, 384, 128))[0], "sm_90a")
    with pytest.raises(CodegenError, match="no sm_100a lowering"):
        compile_kernel(kernels_of(scheduled(256, 384, 128, target="h200"))[0], "sm_100a")
    with pytest.raises(ValueError, match="variant=128x256_s4_tma names a wgmma tile"):
        ScheduleMatmul(target="b200", variant="128x256_s4_tma").apply(
            make_context(), parse_module(module_text(256, 384, 128, "nk"), "t.mlir"))


CASES = {   # name: (M, N, K, layout, dtype, forced bn, epilogue)
    "nk_bf16_chosen": (256, 384, 128, "nk", "bf16", None, "tma"),
    "nk_bf16_bn256": (1000, 512, 200, "nk", "bf16", 256, "tma"),
    "kn_f16_bn128_global": (200, 320, 136, "kn", "f16", 128, "global"),
}


@needs_ptxas
@pytest.mark.parametrize("case", sorted(CASES))
def test_sm100_gemm_assembles_without_spills_and_keeps_tcgen05_in_sass(case, monkeypatch):
    from pkc.codegen.sass import find_tool, sass

    M, N, K, layout, dt, bn, epi = CASES[case]
    ck = compiled(M, N, K, layout, dt, bn=bn, epilogue=epi, monkeypatch=monkeypatch)
    cubin, reports, _ = assemble(ck.ptx, "sm_100a")
    (rep,) = reports.values()
    assert rep.spill_stores == 0 and rep.spill_loads == 0 and rep.stack_bytes == 0, rep.line()
    if not find_tool("cuobjdump"):
        pytest.skip("cuobjdump not found (SASS check)")
    text = sass(cubin)
    ins = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", text)
    names = [i.split(".")[0] for i in ins]
    assert names.count("UTCHMMA") == 4, "the 4 k16 MMAs of a k-block are tcgen05 (UTCHMMA)"
    assert names.count("UTMALDG") >= 2                         # A and B tensor loads
    assert names.count("LDTM") >= 1                            # epilogue reads tensor memory
    assert "UTCBAR" in names                                   # tcgen05.commit -> mbarrier
    assert "LDL" not in names and "STL" not in names           # no local memory
    if epi == "tma":
        assert "UTMASTG" in names                              # the TMA-store epilogue
    assert not any(n.startswith("HGMMA") for n in names)


def test_interpreter_runs_the_tensor_memory_schedule_as_the_graph():
    # interp(graph-level matmul) == interp(schedule-level tensor-memory GEMM): the CTA
    # accumulators, acc_select and mma_commit_arrive have the interpreter's semantics
    from pkc.testing import check_transform

    def make(w):
        return parse_module(module_text(136, 192, 136, "kn"), "t.mlir")

    check_transform(make, "schedule-matmul{target=b200}", world_sizes=(1,), seeds=(0, 1),
                    func="mm")
