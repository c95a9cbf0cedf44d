"""The fused fp8 kind on sm_100a: scaled matmul -> reduce_scatter (row chunks) for a b200
target, built by schedule-fused on the tensor-memory GEMM (tcgen05 ``kind::f8f6f4``, every
partial piece scaled after ``tcgen05.ld`` before its TMA store / reduce-add), the sm_90a
kernel's communication (:mod:`pkc.passes.fused_fp8`, ``RsParts``). No Blackwell GPU has run
it: W in {1, 2, 3, 4} with odd chunk rows, tensor-wise and row-wise scales, the
interpreter's schedule run equals the kernel-level kernel and the emulator equals the
interpreter; ptxas -arch=sm_100a has no spills; overlap fuses the kind for b200 on the
cost model. Tolerances as tests/unit/test_fp8_fused.py (each rank's partial is rounded
to bf16 before the reduce-adds)."""

from __future__ import annotations

import pytest
import torch

from pkc.codegen import compile_kernel
from pkc.codegen.ptxas import assemble, find_ptxas
from pkc.codegen.sass import check_sm100_gemm, find_tool, sass
from pkc.emu.check import check_module
from pkc.interp import interpret, random_inputs
from pkc.interp.equivalence import compare_outputs
from pkc.ir import parse_module
from pkc.passes.pipelines import schedule_for_target, unscheduled_fp8
from pkc.passes.registry import run_pipeline
from pkc.passes.remarks import plan_of, remarks_of
from pkc.target.cost import Pattern
from tests.unit.test_fp8_overlap import red_ir

TOL = {torch.bfloat16: (2e-2, 0.5)}
# (W, M = W x odd chunk rows, N, K, row-wise)
CASES = [(1, 40, 48, 64, True), (2, 2 * 13, 32, 128, False), (3, 3 * 13, 48, 64, True),
         (4, 4 * 7, 32, 96, False)]


def _scheduled(W, M, N, K, row):
    text = red_ir(W, M, N, K, row, "bf16")
    kernel_level = parse_module(text)
    run_pipeline("default{force=true}", kernel_level)
    sched, _ = schedule_for_target(kernel_level, "b200")
    (kop,) = [o for o in sched.walk() if o.name == "pk.kernel"]
    return text, kernel_level, sched, kop


@pytest.mark.parametrize("W,M,N,K,row", CASES, ids=[f"W{c[0]}-{'row' if c[4] else 'tensor'}"
                                                     for c in CASES])
def test_sm100_fp8_reduce_scatter_equals_the_references(W, M, N, K, row):
    text, kernel_level, sched, kop = _scheduled(W, M, N, K, row)
    assert kop.kernel_name.data == "scaled_matmul_reduce_scatter" and kop.schedule() is not None
    plan = plan_of(kop)
    assert plan["fused_kind"] == "rs" and plan["acc"] == "tmem"
    assert any("scheduled fp8 GEMM (e4m3 x e4m3 -> bf16, scales in the epilogue) + "
               f"reduce-scatter W={W}" in r and "sm_100a kernel: tcgen05 MMAs" in r
               for r in remarks_of(kop))
    roles = [o.kind.data for o in kop.walk() if o.name == "pks.role"]
    assert roles == ["producer", "mma", "epilogue"]
    ins = random_inputs(parse_module(text), W, 1)
    ref = interpret(kernel_level, [list(x) for x in ins], W)
    got = interpret(sched, [list(x) for x in ins], W)
    compare_outputs(ref, got, tolerance=TOL, context="kernel level vs scheduled (b200)")
    res = check_module(sched, ins, W, tolerance=TOL, target="sm_100a")
    assert res.ok, res.difference
    assert len(res.kernels) == 1


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
def test_sm100_fp8_reduce_scatter_assembles_without_spills():
    *_, kop = _scheduled(4, 4 * 256, 512, 512, True)
    ck = compile_kernel(kop, "sm_100a")
    assert ck.ptx.count("tcgen05.mma.cta_group::1.kind::f8f6f4 [") == 4
    assert "cp.reduce.async.bulk.tensor" in ck.ptx and "wgmma" not in ck.ptx
    cubin, reports, _ = assemble(ck.ptx, "sm_100a")
    (rep,) = reports.values()
    assert (rep.spill_stores, rep.spill_loads, rep.stack_bytes) == (0, 0, 0), rep.line()
    if find_tool("cuobjdump") is None:
        pytest.skip("cuobjdump not installed")
    assert check_sm100_gemm(sass(cubin), fp8=True, tma_store=False) == []


def test_overlap_fuses_the_fp8_reduce_scatter_for_b200():
    assert unscheduled_fp8("b200", Pattern.MM_REDUCE_SCATTER) is None
    assert unscheduled_fp8("b200", Pattern.ALL_GATHER_MM) is None
    assert unscheduled_fp8("b200", Pattern.MM_ALL_REDUCE) is None     # but W = 2: its remark
    assert "no scheduled fp8 kernel for sm_100a" in unscheduled_fp8("b200", Pattern.MOE)
    m = parse_module(red_ir(8, 8 * 1024, 8192, 8192, True, "bf16"))
    run_pipeline("overlap{target=b200}", m)
    assert [o.name for o in m.walk() if o.name in ("pk.kernel", "pk.reduce_scatter")] == \
        ["pk.kernel"]


AG_CASES = [(2, 13, 32, 64), (4, 7, 48, 128)]     # (W, odd shard rows, N, K), tensor-wise


@pytest.mark.parametrize("W,Ms,N,K", AG_CASES, ids=[f"W{c[0]}" for c in AG_CASES])
def test_sm100_fp8_all_gather_matmul_equals_the_interpreter(W, Ms, N, K):
    # all-gather + scaled matmul (tensor-wise scales; one weight) on the tensor-memory GEMM
    from tests.unit.test_fp8_overlap import ag_ir

    text = ag_ir(W, Ms, N, K, False)
    kernel_level = parse_module(text)
    run_pipeline("default{force=true}", kernel_level)
    sched, _ = schedule_for_target(kernel_level, "b200")
    (kop,) = [o for o in sched.walk() if o.name == "pk.kernel"]
    assert kop.kernel_name.data == "all_gather_scaled_matmul" and kop.schedule() is not None
    assert plan_of(kop)["acc"] == "tmem"
    ins = random_inputs(parse_module(text), W, 1)
    res = check_module(sched, ins, W, tolerance=TOL, target="sm_100a")
    assert res.ok, res.difference
    assert len(res.kernels) == 1
    ptx = compile_kernel(kop, "sm_100a").ptx
    assert ptx.count("kind::f8f6f4 [") == 4 and "wgmma" not in ptx
