"""The fused fp8 kinds on the scheduled fp8 GEMM (sm_90a), W in {1, 2, 3, 4} with odd
rows: scaled matmul -> reduce_scatter of row chunks (tensor-wise and row-wise scales;
``scaled_matmul_reduce_scatter``, every partial tile scaled by its rank's scales before it
travels) and all_gather -> scaled matmul with tensor-wise scales
(``all_gather_scaled_matmul``, the put side moving fp8 bytes); the interpreter's schedule
run equals the kernel-level kernel and the graph program, the emulator equals the
interpreter, ptxas has no spills; overlap fuses them on the cost model
(pipelines.SCALED_FUSED_PATTERNS) and leaves the forms without a scheduled kernel (A's
row-wise scale gathered with A, an f32 result, ...) unfused with the reason.

Tolerances: the scheduled kernel rounds each rank's partial tile to bf16 before the
reduce-adds (as the bf16 kernel does), the references sum in f32 and round once: outputs
that cancel differ by up to about W x one bf16 step of a partial (partials here up to
~40: 0.25 each), hence the absolute 0.5 beside the bf16 relative tolerance."""

from __future__ import annotations

import pytest
import torch

from pkc.codegen import compile_kernel
from pkc.codegen.ptxas import find_ptxas
from pkc.emu.check import check_module
from pkc.interp import interpret, random_inputs
from pkc.interp.equivalence import compare_outputs
from pkc.ir import parse_module
from pkc.passes.pipelines import schedule_for_target
from pkc.passes.registry import run_pipeline
from pkc.passes.remarks import plan_of, remarks_of
from tests.unit.test_fp8_overlap import red_ir

TOL = {torch.bfloat16: (2e-2, 0.5)}


def check_levels(text: str, kernel_level, sched, W: int, seed: int, emulate: bool = True,
                 forward_emulated: bool = False):
    """On random inputs (``seed``: ``random_inputs(graph, W, seed)``): the interpreter's run
    of the scheduled module equals the kernel-level module and the graph program ``text``;
    with ``emulate``, the emulator runs the scheduled PTX equal to the interpreter (its
    result is returned; ``forward_emulated``: its outputs are the emulator's own)."""
    graph = parse_module(text)
    ins = random_inputs(graph, W, seed)
    want = interpret(graph, [list(x) for x in ins], W)
    ref = interpret(kernel_level, [list(x) for x in ins], W)
    got = interpret(sched, [list(x) for x in ins], W)
    compare_outputs(ref, got, tolerance=TOL, context="kernel level vs scheduled")
    compare_outputs(want, got, tolerance=TOL, context="graph vs scheduled")
    if not emulate:
        return None
    res = check_module(sched, ins, W, tolerance=TOL, forward_emulated=forward_emulated)
    assert res.ok, res.difference
    return res
# (W, M = W x odd chunk rows, N, K, row-wise)
CASES = [(1, 40, 48, 64, True), (2, 2 * 13, 32, 128, False), (3, 3 * 13, 48, 64, True),
         (4, 4 * 7, 32, 96, False)]


def _scheduled(W, M, N, K, row, out="bf16"):
    text = red_ir(W, M, N, K, row, out)
    kernel_level = parse_module(text)
    run_pipeline("default{force=true}", kernel_level)
    sched, _ = schedule_for_target(kernel_level, "h200")
    return text, kernel_level, sched


@pytest.mark.parametrize("W,M,N,K,row", CASES, ids=[f"W{c[0]}-{'row' if c[4] else 'tensor'}"
                                                     for c in CASES])
def test_scheduled_fp8_reduce_scatter_equals_references(W, M, N, K, row):
    text, kernel_level, sched = _scheduled(W, M, N, K, row)
    (kop,) = [o for o in sched.walk() if o.name == "pk.kernel"]
    assert kop.kernel_name.data == "scaled_matmul_reduce_scatter" and kop.schedule() is not None
    assert plan_of(kop)["fused_kind"] == "rs"
    assert any("scheduled fp8 GEMM (e4m3 x e4m3 -> bf16, scales in the epilogue) + "
               f"reduce-scatter W={W}" in r for r in remarks_of(kop))
    names = [o.name for o in kop.walk()]
    assert "pks.acc_scale" in names and "pks.tma_store_or_add" in names
    res = check_levels(text, kernel_level, sched, W, seed=1)
    assert len(res.kernels) == 1


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
def test_scheduled_fp8_reduce_scatter_assembles_without_spills():
    from pkc.codegen.ptxas import assemble_one

    _, _, sched = _scheduled(4, 4 * 256, 512, 512, True)
    (kop,) = [o for o in sched.walk() if o.name == "pk.kernel"]
    ck = compile_kernel(kop, "sm_90a")
    assert "k32.f32.e4m3.e4m3" in ck.ptx and "cp.reduce.async.bulk.tensor" in ck.ptx
    _, res = assemble_one(ck.ptx)
    assert res.spill_stores == 0 and res.spill_loads == 0 and res.stack_bytes == 0


def test_forms_without_a_scheduled_kernel_stay_with_the_reason():
    # an f32 result: the fused kernel (forced) stays on the portable path, with the reason
    _, _, sched = _scheduled(2, 32, 32, 64, False, out="f32")
    (kop,) = [o for o in sched.walk() if o.name == "pk.kernel"]
    assert kop.schedule() is None
    assert any("stores bf16 or f16" in r for r in remarks_of(kop))
    # overlap without force: fused only where the scheduled kernel exists
    from pkc.passes.pipelines import unscheduled_fp8
    from pkc.target.cost import Pattern

    assert unscheduled_fp8("h200", Pattern.MM_REDUCE_SCATTER) is None
    assert unscheduled_fp8("h200", Pattern.ALL_GATHER_MM) is None
    assert unscheduled_fp8("h200", Pattern.MM_ALL_REDUCE) is None      # test_fp8_fused_ar_ag
    assert "no scheduled fp8 kernel for sm_90a" in unscheduled_fp8("h200", Pattern.MOE)
    assert "stores bf16 or f16" in unscheduled_fp8("h200", Pattern.MM_REDUCE_SCATTER,
                                                   "result f32: the scheduled fp8 GEMM "
                                                   "stores bf16 or f16")
    m = parse_module(red_ir(8, 8 * 1024, 8192, 8192, True, "f32"))
    run_pipeline("overlap", m)
    (rs,) = [o for o in m.walk() if o.name == "pk.reduce_scatter"]
    assert any("no scheduled fp8 kernel for this mm_reduce_scatter" in r for r in remarks_of(rs))
    m = parse_module(red_ir(8, 8 * 1024, 8192, 8192, True, "bf16"))
    run_pipeline("overlap", m)
    assert [o.name for o in m.walk() if o.name in ("pk.kernel", "pk.reduce_scatter")] == \
        ["pk.kernel"]


# all_gather -> scaled matmul, tensor-wise scales: (W, shard rows (odd), N, K, G returned)
AG_CASES = [(1, 24, 32, 128, False), (2, 40, 48, 64, False), (3, 13, 32, 64, True),
            (4, 7, 48, 96, False)]


@pytest.mark.parametrize("W,Ms,N,K,gathered", AG_CASES, ids=[f"W{c[0]}" for c in AG_CASES])
def test_scheduled_fp8_all_gather_matmul_equals_references(W, Ms, N, K, gathered):
    """The scheduled all-gather + fp8 GEMM (the put side moves fp8 bytes, the GEMM reads
    the gathered shards by TMA, tensor-wise scales in the epilogue): interpreter equal to the
    kernel-level kernel and the graph, emulator equal to the interpreter (G bitwise)."""
    from tests.unit.test_fp8_overlap import ag_ir

    text = ag_ir(W, Ms, N, K, False, "bf16", gathered)
    kernel_level = parse_module(text)
    run_pipeline("default{force=true}", kernel_level)
    sched, _ = schedule_for_target(kernel_level, "h200")
    (kop,) = [o for o in sched.walk() if o.name == "pk.kernel"]
    assert kop.kernel_name.data == "all_gather_scaled_matmul" and kop.schedule() is not None
    assert any(f"scheduled all-gather + fp8 GEMM (e4m3 x e5m2 -> bf16, scales in the "
               f"epilogue) W={W}" in r for r in remarks_of(kop))
    check_levels(text, kernel_level, sched, W, seed=2)


def test_fp8_all_gather_forms_and_fusion_decisions():
    from tests.unit.test_fp8_overlap import ag_ir

    # an f32 result: portable, with the reason (A's row-wise scale gathered with A is
    # scheduled: tests/unit/test_fp8_fused_ar_ag.py)
    kernel_level = parse_module(ag_ir(2, 40, 48, 64, True, "f32"))
    run_pipeline("default{force=true}", kernel_level)
    sched, _ = schedule_for_target(kernel_level, "h200")
    (kop,) = [o for o in sched.walk() if o.name == "pk.kernel"]
    assert kop.schedule() is None
    assert any("stores bf16 or f16" in r for r in remarks_of(kop))
    # overlap on the cost model: the tensor-wise form fuses (W = 8, 1024 x 8192 shards)
    m = parse_module(ag_ir(8, 1024, 8192, 8192, False))
    run_pipeline("overlap", m)
    assert [o.name for o in m.walk() if o.name in ("pk.kernel", "pk.all_gather")] == \
        ["pk.kernel"]


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
def test_scheduled_fp8_all_gather_matmul_assembles_without_spills():
    from pkc.codegen.ptxas import assemble_one
    from tests.unit.test_fp8_overlap import ag_ir

    kernel_level = parse_module(ag_ir(4, 256, 512, 512, False))
    run_pipeline("default{force=true}", kernel_level)
    sched, _ = schedule_for_target(kernel_level, "h200")
    (kop,) = [o for o in sched.walk() if o.name == "pk.kernel"]
    ck = compile_kernel(kop, "sm_90a")
    assert "k32.f32.e4m3.e5m2" in ck.ptx and "cp.async.bulk.global" in ck.ptx
    _, res = assemble_one(ck.ptx)
    assert res.spill_stores == 0 and res.spill_loads == 0 and res.stack_bytes == 0
