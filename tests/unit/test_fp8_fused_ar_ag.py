"""The fused fp8 kinds added to the scheduled sm_90a set (issue 20): scaled matmul ->
all_reduce (``scaled_matmul_all_reduce`` at W <= 2, above the GEMM + reduce-scatter / pull
all-gather pair) and all_gather -> scaled matmul with A's ROW-WISE scale gathered with A
(``all_gather_scaled_matmul`` whose put side moves each shard's scale rows:
pkc/passes/fused_fp8_ag.py); on sm_100a the all-reduce at W = 1 and above 2. W in
{1, 2, 3, 4} on odd shapes: the interpreter's run of
the scheduled kernels equals the kernel-level kernel and the graph program (torch's
``_scaled_mm`` semantics), the emulator runs the scheduled PTX equal to the interpreter;
W = 8 on the interpreter; ptxas without spills; overlap fuses both on the cost model.

Tolerances as in test_fp8_fused.py: each rank's partial is rounded to bf16 before it is
summed (the unfused sequence rounds each rank's _scaled_mm too, but sums in another order)."""

from __future__ import annotations

import pytest

from pkc.codegen import compile_kernel
from pkc.codegen.ptxas import find_ptxas
from pkc.emu.check import check_module
from pkc.interp import interpret, random_inputs
from pkc.interp.equivalence import compare_outputs
from pkc.ir import parse_module
from pkc.passes.fused_fp8_ag import line_rows
from pkc.passes.pipelines import schedule_for_target, unscheduled_fp8
from pkc.passes.registry import run_pipeline
from pkc.passes.remarks import plan_of, remarks_of
from pkc.target.cost import Pattern
from tests.unit.test_fp8_fused import TOL, check_levels
from tests.unit.test_fp8_overlap import ag_ir, red_ir



def _kernels(text: str, target: str = "h200"):
    kernel_level = parse_module(text)
    run_pipeline("default{force=true}", kernel_level)
    sched, _ = schedule_for_target(kernel_level, target)
    return kernel_level, sched, [o for o in sched.walk() if o.name == "pk.kernel"]


# (W, M (odd chunks), N, K, row-wise, emulate)
AR_CASES = [(1, 40, 48, 64, True, True), (2, 27, 32, 128, False, True),
            (2, 26, 48, 64, True, True), (3, 39, 48, 64, True, True),
            (4, 28, 32, 96, False, True), (8, 40, 32, 64, True, False)]


@pytest.mark.parametrize("W,M,N,K,row,emulate", AR_CASES,
                         ids=[f"W{c[0]}-{'row' if c[4] else 'tensor'}" for c in AR_CASES])
def test_scheduled_fp8_all_reduce_equals_references(W, M, N, K, row, emulate):
    text = red_ir(W, M, N, K, row, "bf16", coll="ar")
    kernel_level, sched, kops = _kernels(text)
    assert all(kop.schedule() is not None for kop in kops)
    if W <= 2:          # one kernel: every scaled partial piece to every rank
        (kop,) = kops
        assert kop.kernel_name.data == "scaled_matmul_all_reduce"
        assert plan_of(kop)["fused_kind"] == "ar" and plan_of(kop)["fresh_output"] == (W == 2)
        assert any(f"scheduled fp8 GEMM (e4m3 x e4m3 -> bf16, scales in the epilogue) + "
                   f"all-reduce W={W}" in r for r in remarks_of(kop))
        names = [o.name for o in kop.walk()]
        assert "pks.acc_scale" in names and "pks.mma_async" in names
        if W == 2:      # the summed epilogue scales the piece before it adds the peer's
            assert "pks.acc_add_smem" in names
    else:               # GEMM + reduce-scatter (scaled), then the pull all-gather
        assert [kop.kernel_name.data for kop in kops] == ["scaled_matmul_reduce_scatter",
                                                          "all_gather_agp"]
        assert plan_of(kops[0])["pair"] == "mm_all_reduce"
    check_levels(text, kernel_level, sched, W, 1, emulate)


# all_gather -> scaled matmul, A's row-wise scale: (W, shard rows (odd), N, K, G returned, emulate)
AG_CASES = [(1, 24, 32, 128, False, True), (2, 40, 48, 64, False, True),
            (3, 13, 32, 64, True, True), (4, 7, 48, 96, False, True),
            (8, 5, 32, 64, False, False)]


@pytest.mark.parametrize("W,Ms,N,K,gathered,emulate", AG_CASES,
                         ids=[f"W{c[0]}" for c in AG_CASES])
def test_scheduled_fp8_all_gather_row_scale_equals_references(W, Ms, N, K, gathered, emulate):
    text = ag_ir(W, Ms, N, K, True, "bf16", gathered)
    kernel_level, sched, kops = _kernels(text)
    (kop,) = kops
    assert kop.kernel_name.data == "all_gather_scaled_matmul" and kop.schedule() is not None
    assert line_rows(Ms) % 32 == 0 and line_rows(Ms) >= Ms      # whole 128-byte lines
    names = [o.name for o in kop.walk()]
    if W > 1:   # the put side moves the scale words; the own shard reads SX, a peer's SG
        assert any("A's row scales gathered with A by the put side" in r
                   for r in remarks_of(kop))
        # whole 16-byte vectors of scales (Ms % 4 == 0) go as vectors, else as u32 words;
        # stored to each of the W - 1 peers
        store = "pks.vec_store" if Ms % 4 == 0 else "pks.word_store"
        assert names.count(store) == 8 * (W - 1) and names.count("pks.acc_scale") >= 2
        (sg,) = [o for o in kop.body.blocks[0].ops if o.name == "pk.alloc"
                 and tuple(o.result.type.get_shape()) == (W * line_rows(Ms), 1)]
        assert sg.result.type.symmetric
    check_levels(text, kernel_level, sched, W, 2, emulate)


def test_without_the_scale_rows_the_peers_tiles_read_nothing(monkeypatch):
    """The scale rows travel only by the put side's stores: without them the
    interpreter finds the peers' tiles scaled by memory nobody wrote."""
    from pkc.interp.equivalence import EquivalenceError
    from pkc.passes import fused_fp8_ag

    monkeypatch.setattr(fused_fp8_ag.AgRowScaleParts, "put_extra", lambda *a: None)
    text = ag_ir(2, 40, 48, 64, True)
    kernel_level, sched, _ = _kernels(text)
    with pytest.raises(EquivalenceError, match="never written|NaN"):
        check_levels(text, kernel_level, sched, 2, 1, emulate=False)


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
def test_new_fp8_kinds_assemble_without_spills():
    from pkc.codegen.ptxas import assemble_one

    for text in (ag_ir(4, 256, 512, 512, True), red_ir(2, 512, 512, 512, True, "bf16", "ar")):
        _, _, kops = _kernels(text)
        ck = compile_kernel(kops[0], "sm_90a")
        assert ".e4m3" in ck.ptx and "ld.global.nc.f32" in ck.ptx
        _, res = assemble_one(ck.ptx)
        assert res.spill_stores == 0 and res.spill_loads == 0 and res.stack_bytes == 0


def test_overlap_fuses_them_on_the_cost_model():
    assert unscheduled_fp8("h200", Pattern.MM_ALL_REDUCE) is None
    for text in (ag_ir(8, 1024, 8192, 8192, True), red_ir(8, 8192, 8192, 8192, True, "bf16",
                                                          "ar")):
        m = parse_module(text)
        run_pipeline("overlap", m)
        assert [o.name for o in m.walk() if o.name in ("pk.kernel", "pk.all_gather",
                                                        "pk.all_reduce")] == ["pk.kernel"]
    # an f32 result has no scheduled form: left unfused with the reason
    m = parse_module(red_ir(8, 8192, 8192, 8192, True, "f32", "ar"))
    run_pipeline("overlap", m)
    (ar,) = [o for o in m.walk() if o.name == "pk.all_reduce"]
    assert any("no scheduled fp8 kernel for this mm_all_reduce on sm_90a: result f32" in r
               for r in remarks_of(ar))


def test_sm100_leaves_them_with_the_reason():
    # b200: the W = 2 fresh-output all-reduce and the row-wise gather scale a piece in one
    # of two branches, which the tcgen05 scale lowering refuses: portable, with the reason
    _, _, kops = _kernels(red_ir(2, 26, 32, 64, True, "bf16", "ar"), "b200")
    (kop,) = kops
    assert kop.schedule() is None
    assert any("GEMM + all-reduce at W = 2 on sm_100a" in r for r in remarks_of(kop))
    _, _, kops = _kernels(ag_ir(2, 40, 48, 64, True), "b200")
    assert kops[0].schedule() is None
    assert any("A's row-wise scale (gathered with A): scheduled on sm_90a only" in r
               for r in remarks_of(kops[0]))
    m = parse_module(red_ir(2, 8192, 8192, 8192, True, "bf16", "ar"))
    run_pipeline("overlap{target=b200}", m)
    assert [o.name for o in m.walk() if o.name == "pk.all_reduce"] == ["pk.all_reduce"]
    m = parse_module(red_ir(8, 8192, 8192, 8192, True, "bf16", "ar"))
    run_pipeline("overlap{target=b200}", m)      # W = 8: the pair, scheduled
    assert [o.name for o in m.walk() if o.name in ("pk.kernel", "pk.all_reduce")] == \
        ["pk.kernel"]


@pytest.mark.parametrize("W,M", [(1, 40), (3, 39)], ids=["W1", "W3-pair"])
def test_sm100_fp8_all_reduce_on_the_emulator(W, M):
    """sm_100a (b200): the fp8 GEMM + all-reduce at W = 1 (the broadcast kernel) and above
    W = 2 (the scaled GEMM + reduce-scatter and the pull all-gather) on the tensor-memory
    GEMM, tcgen05 kind::f8f6f4, emulated equal to the interpreter."""
    text = red_ir(W, M, 48, 64, True, "bf16", "ar")
    kernel_level, sched, kops = _kernels(text, "b200")
    assert all(k.schedule() is not None for k in kops)
    assert any(o.name == "pks.acc_scale" for o in kops[0].walk())
    graph = parse_module(text)
    ins = random_inputs(graph, W, 4)
    want = interpret(graph, [list(x) for x in ins], W)
    got = interpret(sched, [list(x) for x in ins], W)
    compare_outputs(want, got, tolerance=TOL, context="graph vs scheduled (b200)")
    res = check_module(sched, ins, W, tolerance=TOL, target="sm_100a")
    assert res.ok, res.difference
