"""The schedule level and the IR-built GEMM: the dialect's verifiers, the schedule-matmul
pass, the sm_90a lowering (ptxas, and the SASS pipeline check where cuobjdump exists)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from xdsl.utils.exceptions import VerifyException

from pkc.codegen import compile_kernel
from pkc.codegen.emit import kernels_of
from pkc.codegen.ptxas import find_ptxas
from pkc.dialects import schedule as s
from pkc.ir import make_context, parse_module, print_module, verify_module
from pkc.passes.remarks import remarks_of
from pkc.passes.schedule_matmul import ScheduleMatmul
from pkc.target.gemm_tuning import VARIANTS

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from gemm_ir import module_text  # noqa: E402


def _scheduled(M, N, K, variant="", layout="nk"):
    m = parse_module(module_text(M, N, K, layout), "t.mlir")
    ScheduleMatmul(variant=variant).apply(make_context(), m)
    verify_module(m)
    return m


def test_types_reject_bad_boxes_swizzles_and_accumulators():
    with pytest.raises(VerifyException, match="more than its 64-byte swizzle"):
        s.TmapType("bf16", [64, 128], 64).verify()
    with pytest.raises(VerifyException, match="swizzle 48"):
        s.TmapType("bf16", [16, 8], 48).verify()
    with pytest.raises(VerifyException, match="1..256"):
        s.TmapType("bf16", [64, 512], 128).verify()
    with pytest.raises(VerifyException, match="rows must be 64 or 128"):
        s.AccType(96, 64).verify()
    role = s.RoleOp(s.RoleKind.CONSUMER, 1, 1, 0)    # a warpgroup's register accumulator
    acc = s.AccAllocOp(128, 256)
    role.block.add_ops([acc, s.YieldOp()])
    with pytest.raises(VerifyException, match="registers per thread"):
        acc.verify()


def test_role_and_schedule_verifiers_name_the_op():
    role = s.RoleOp(s.RoleKind.CONSUMER, 1, 2, 230)
    role.block.add_op(s.YieldOp())
    with pytest.raises(VerifyException, match="'pks.role' regs = 230"):
        role.verify()
    sched = s.ScheduleOp(384)
    sched.block.add_op(s.SmemAllocOp(16, 16384))
    with pytest.raises(VerifyException, match="'pks.schedule' needs 262144 bytes"):
        sched.verify()


def test_schedule_matmul_writes_the_gemm_at_the_schedule_level():
    m = _scheduled(200, 136, 72)
    (kop,) = kernels_of(m)
    text = print_module(m)
    assert kop.schedule() is not None and not kop.workers()
    # B is read in its [N, K] layout: the kernel takes %w, not the transpose
    assert re.search(r'pk.kernel "matmul"\(%x, %w\)', text)
    for op in ("pks.role", "pks.tile_loop", "pks.mbarrier_wait", "pks.tma_load", "pks.mma_async",
               "pks.mma_wait", "pks.acc_store_smem", "pks.tma_store"):
        assert op in text, op
    roles = [o for o in kop.walk() if isinstance(o, s.RoleOp)]
    assert [(r.role, r.regs.data) for r in roles] == [(s.RoleKind.PRODUCER, 40),
                                                     (s.RoleKind.CONSUMER, 232)]
    assert any("scheduled GEMM 200x136x72 bf16: 128x128 s6" in r for r in remarks_of(kop))


def test_schedule_matmul_leaves_unaligned_matmuls_with_a_remark():
    m = parse_module(module_text(64, 36, 64, "kn"), "t.mlir")
    ScheduleMatmul().apply(make_context(), m)
    assert not kernels_of(m)
    mm = [o for o in m.walk() if o.name == "pk.matmul"][0]
    assert "N = 36 and K = 64 must be multiples of 8" in remarks_of(mm)[0]


def test_wgmma_slices_use_their_own_accumulator_registers():
    # 256 x 128: each consumer owns two 64-row slices, registers 0..63 and 64..127
    ck = compile_kernel(kernels_of(_scheduled(512, 256, 128, "256x128_s4_tma"))[0], "sm_90a")
    firsts = [re.search(r"\{%acc0_(\d+),", l).group(1) for l in ck.ptx.splitlines()
              if "wgmma.mma_async" in l]
    assert firsts == ["0", "64"] * 4


def test_tile_configs_validate_fit_and_reject_bad_ones():
    from pkc.target.gemm_tuning import GemmConfig

    for name, cfg in VARIANTS.items():
        cfg.validate()
        assert cfg.smem_bytes <= 232448, name
        assert cfg.stages >= 3, f"{name}: the pipeline must be at least 3 deep"
    with pytest.raises(ValueError, match="shared memory"):
        GemmConfig(bm=128, bn=256, stages=6).validate()
    with pytest.raises(ValueError, match="accumulator"):
        GemmConfig(bm=128, bn=256, consumers=1).validate()
    with pytest.raises(ValueError, match="kn"):
        GemmConfig(bn=160, b_layout="kn").validate()


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
def test_sass_check_catches_a_lost_stage():
    """The SASS check must fail a kernel that has fewer stages than its configuration says
    (what it exists to catch): the 3-stage kernel checked against the 4-stage tile."""
    from pkc.codegen.ptxas import assemble_one
    from pkc.codegen.sass import check_pipeline, find_tool, sass

    if not find_tool("cuobjdump"):
        pytest.skip("cuobjdump not found (SASS check)")
    want, got = VARIANTS["128x256_s4_global"], VARIANTS["128x256_s3_global"]
    assert (want.stages, got.stages) == (4, 3) and want.with_(stages=3) == got
    ck = compile_kernel(kernels_of(_scheduled(1000, 512, 200, "128x256_s3_global"))[0], "sm_90a")
    problems = check_pipeline(want, sass(assemble_one(ck.ptx)[0]))
    assert any("mbarrier inits" in p for p in problems), problems
    assert any("mbarriers at" in p for p in problems), problems


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_variant_assembles_without_spills_and_keeps_its_pipeline(variant):
    from pkc.codegen.ptxas import assemble_one
    from pkc.codegen.sass import check_pipeline, find_tool, sass

    layout = VARIANTS[variant].b_layout
    ck = compile_kernel(kernels_of(_scheduled(1000, 512, 200, variant, layout))[0], "sm_90a")
    assert "wgmma.mma_async.sync.aligned" in ck.ptx and "cp.async.bulk.tensor" in ck.ptx
    cubin, res = assemble_one(ck.ptx)
    assert res.spill_stores == 0 and res.spill_loads == 0 and res.stack_bytes == 0
    if find_tool("cuobjdump"):
        assert check_pipeline(VARIANTS[variant], sass(cubin)) == []
