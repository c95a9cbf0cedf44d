"""The scheduled pull all-gather (agp) and all-to-all (a2a) of schedule-collectives, and
the GEMM + all-reduce at W > 2 that schedule-fused turns into two scheduled kernels (the
fused GEMM + reduce-scatter, then the pull all-gather of its symmetric output): the
passes' decisions, the verifier's rule for symmetric inputs, the grid rule the kernels
were measured with, ptxas with no spills, check_transform through the schedule-level
interpreter, and every kernel run in the emulator for W = 2, 3, 4 on small odd sizes
against torch (bitwise where the kernel only moves data)."""

from __future__ import annotations

import re

import pytest
import torch

from pkc.codegen import compile_kernel
from pkc.codegen.emit import kernels_of
from pkc.codegen.ptxas import check, find_ptxas
from pkc.emu import emulate
from pkc.ir import PkcDiagnostic, make_context, parse_module, print_module, verify_module
from pkc.passes.registry import parse_pipeline, run_pipeline
from pkc.passes.remarks import plan_of, remarks_of

DT = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


def _a2a(W, rows, cols, dt="bf16"):
    t = f"tensor<{rows}x{cols}x{dt}>"
    m = parse_module(f"func.func @f(%x: {t}) -> {t} {{\n  %y = pk.all_to_all %x {{world = {W} : i64, "
                     f"split_dim = 0 : i64, concat_dim = 0 : i64}} : {t} -> {t}\n"
                     f"  func.return %y : {t}\n}}\n", "a2a.mlir")
    run_pipeline("lower-collectives,schedule-collectives", m)
    (kop,) = kernels_of(m)
    return kop


def _agp(W, rows, cols, dt="bf16"):
    """An all-gather whose input buffer is symmetric (as a producer kernel would leave it):
    lowered, its input made symmetric behind a producer kernel, then scheduled."""
    tin, tout = f"tensor<{rows}x{cols}x{dt}>", f"tensor<{W * rows}x{cols}x{dt}>"
    m = parse_module(f"func.func @g(%x: {tin}) -> {tout} {{\n  %y = pk.all_gather %x {{world = {W} : i64, "
                     f"dim = 0 : i64}} : {tin} -> {tout}\n  func.return %y : {tout}\n}}\n", "ag.mlir")
    run_pipeline("lower-collectives{all_gather=direct}", m)
    n = rows * cols
    buf = f"!pk.buffer<1x1x{n}x{dt}>"
    text = print_module(m).replace(buf, f"!pk.buffer<1x1x{n}x{dt}, symmetric>")
    # the view feeding the gather comes from a producer kernel with a symmetric output
    producer = (f'%made = pk.kernel "produce"(%view) {{world = {W} : i64}} : (tensor<1x1x{n}x{dt}>) -> '
                f"tensor<1x1x{n}x{dt}> {{\n  ^bb0(%pi: !pk.buffer<1x1x{n}x{dt}>, %po: "
                f"!pk.buffer<1x1x{n}x{dt}, symmetric>):\n    pk.worker \"compute\" {{\n      pk.yield\n"
                f"    }}\n    pk.yield\n  }}\n")
    text = re.sub(r'(%lowered = pk.kernel "all_gather_direct")\(%view\)',
                  lambda mt: producer + mt.group(1) + "(%made)", text)
    m = parse_module(text, "ag2.mlir")
    run_pipeline("schedule-collectives", m)
    return [k for k in kernels_of(m) if k.kernel_name.data.startswith("all_gather")][0]


def _mm_ar_text(W, M, N, K, dt="bf16"):
    return (f"func.func @mm_ar(%x: tensor<{M}x{K}x{dt}>, %w: tensor<{K}x{N}x{dt}>) -> tensor<{M}x{N}x{dt}> {{\n"
            f"  %c = pk.matmul %x, %w : (tensor<{M}x{K}x{dt}>, tensor<{K}x{N}x{dt}>) -> tensor<{M}x{N}x{dt}>\n"
            f"  %o = pk.all_reduce %c {{world = {W} : i64, reduce = \"sum\"}} : tensor<{M}x{N}x{dt}> -> tensor<{M}x{N}x{dt}>\n"
            f"  func.return %o : tensor<{M}x{N}x{dt}>\n}}\n")


def _fused_module(W, M, N, K, passes="default{force=true},schedule-fused,dce"):
    m = parse_module(_mm_ar_text(W, M, N, K), "mm_ar.mlir")
    ctx = make_context()
    for p in parse_pipeline(passes):
        p.apply(ctx, m)
    verify_module(m)
    return m


def _mm_ar(W, Mc, N, K):
    return _fused_module(W, W * Mc, N, K)


# ---- passes ----------------------------------------------------------------------------------


def test_a2a_plan_and_remark():
    kop = _a2a(3, 9, 40)
    p = plan_of(kop)
    assert (p["comm_kind"], p["vecs"], p["chunk_vecs"], p["fresh_output"]) == ("a2a", 45, 15, False)
    assert kop.outputs[0].type and kop.block.args[1].type.symmetric
    assert any("scheduled collective a2a W=3" in r for r in remarks_of(kop))


def test_a2a_with_chunks_of_partial_vectors_says_why():
    kop = _a2a(4, 4, 6)            # 6 bf16 per chunk: not whole 16-byte vectors
    assert kop.schedule() is None
    assert any("not whole 16-byte vectors" in r for r in remarks_of(kop))


def test_agp_plan_reads_a_symmetric_input_into_a_fresh_output():
    kop = _agp(3, 5, 24)
    p = plan_of(kop)
    assert (p["comm_kind"], p["fresh_output"], p["ctas_per_sm"]) == ("agp", True, 2)
    assert kop.block.args[0].type.symmetric and not kop.block.args[1].type.symmetric


def test_symmetric_input_must_be_a_kernels_symmetric_output():
    text = ("func.func @f(%x: tensor<64xbf16>) -> tensor<64xbf16> {\n"
            '  %y = pk.kernel "k"(%x) {world = 2 : i64} : (tensor<64xbf16>) -> tensor<64xbf16> {\n'
            "  ^bb0(%a: !pk.buffer<64xbf16, symmetric>, %b: !pk.buffer<64xbf16>):\n"
            '    pk.worker "compute" {\n      pk.yield\n    }\n    pk.yield\n  }\n'
            "  func.return %y : tensor<64xbf16>\n}\n")
    with pytest.raises(PkcDiagnostic, match="input buffers are local unless the value is a "
                                            "pk.kernel's symmetric output"):
        verify_module(parse_module(text, "bad.mlir"))


def test_mm_all_reduce_w3_becomes_rs_then_pull_gather():
    m = _mm_ar(3, 33, 40, 72)
    rs, ag = kernels_of(m)
    assert plan_of(rs)["fused_kind"] == "rs" and plan_of(rs)["pair_role"] == "reduce_scatter"
    assert plan_of(ag)["comm_kind"] == "agp" and plan_of(ag)["pair_role"] == "all_gather"
    assert ag.inputs[0] is rs.results[0]
    assert tuple(rs.results[0].type.get_shape()) == (33, 40) and rs.block.args[2].type.symmetric
    assert tuple(ag.results[0].type.get_shape()) == (99, 40)
    assert "pk.fusion" not in ag.attributes
    assert any("sends 1.33x its product (2(W-1)/W) where the one-kernel broadcast sends 2x"
               in r for r in remarks_of(ag))


def test_mm_all_reduce_pair_refuses_rows_that_do_not_split():
    m = _fused_module(3, 100, 40, 72)
    (kop,) = kernels_of(m)
    assert kop.schedule() is None and kop.workers()
    assert any("M = 100 rows do not split into 3 chunks" in r for r in remarks_of(kop))


# ---- launch rule, assembly -------------------------------------------------------------------


# (vectors per CTA, CTAs) of the pull all-gather of 1001 x 24 bf16 at W = 3 for a budget of
# (1, 7, 66, 264) CTAs: the launches the IR kernel was timed with at parity with the hand
# kernel (benchmarks/results/h200_2026-12-01b, PERF_NOTES); a change of the rule is a
# change of what was measured
AGP_GRID = [(3003, 1), (1502, 2), (1502, 2), (1502, 2)]


def test_agp_grid_rule_is_the_measured_one():
    W = 3
    kop = _agp(W, 1001, 24)
    meta = compile_kernel(kop).meta
    for max_ctas, want in zip((1, 7, 66, 264), AGP_GRID):
        assert meta.comm.launch(max_ctas, 512)[:2] == want, max_ctas
    assert meta.comm.sym_outputs == [0]          # the input's peers are parameters


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
@pytest.mark.parametrize("W,dt", [(2, "bf16"), (4, "f16"), (8, "f32")])
def test_agp_and_a2a_assemble_without_spills(W, dt):
    for kop in (_agp(W, 64, 64, dt), _a2a(W, 8 * W, 64, dt)):
        ck = compile_kernel(kop)
        (rep,) = check(ck.ptx, "sm_90a").values()
        assert rep.spill_stores == 0 and rep.spill_loads == 0 and rep.registers <= 64, rep.line()


# ---- the emulator ----------------------------------------------------------------------------


@pytest.mark.parametrize("W,rows,cols", [(2, 6, 24), (3, 9, 40), (4, 12, 8)])
def test_a2a_runs_in_the_emulator(W, rows, cols):
    kop = _a2a(W, rows, cols)
    ck = compile_kernel(kop, "sm_90a")
    gen = torch.Generator().manual_seed(W)
    xs = [torch.randn(tuple(kop.inputs[0].type.get_shape()), generator=gen).to(torch.bfloat16)
          for _ in range(W)]
    out = emulate(ck, [[x] for x in xs], kop=kop)
    for r in range(W):           # slot p of rank r = chunk r of rank p
        want = torch.stack([xs[p].reshape(W, -1)[r] for p in range(W)])
        assert torch.equal(out[r][0].reshape(W, -1), want), r


@pytest.mark.parametrize("W,rows,cols,dt", [(2, 3, 24, "bf16"), (3, 5, 40, "f32"), (4, 7, 8, "f16")])
def test_agp_runs_in_the_emulator(W, rows, cols, dt):
    kop = _agp(W, rows, cols, dt)
    ck = compile_kernel(kop, "sm_90a")
    gen = torch.Generator().manual_seed(W)
    xs = [torch.randn(tuple(kop.inputs[0].type.get_shape()), generator=gen).to(DT[dt])
          for _ in range(W)]
    out = emulate(ck, [[x] for x in xs], kop=kop)
    for r in range(W):
        assert torch.equal(out[r][0].reshape(-1), torch.cat([x.reshape(-1) for x in xs])), r


@pytest.mark.parametrize("W,Mc,N,K", [(3, 33, 40, 72), (4, 21, 24, 40)])
def test_mm_all_reduce_pair_runs_in_the_emulator(W, Mc, N, K):
    """The two kernels in order, the all-gather on the GEMM kernel's symmetric outputs:
    every rank's result is the W reduced chunks bitwise, and within the bf16 error of W - 1
    reduce-adds of the torch product sum."""
    rs, ag = kernels_of(_mm_ar(W, Mc, N, K))
    ck_rs, ck_ag = compile_kernel(rs, "sm_90a"), compile_kernel(ag, "sm_90a")
    gen = torch.Generator().manual_seed(W)
    A = [torch.randn(W * Mc, K, generator=gen).to(torch.bfloat16) for _ in range(W)]
    B = [(torch.randn(K, N, generator=gen) / K ** 0.5).to(torch.bfloat16) for _ in range(W)]
    chunks = emulate(ck_rs, [[A[r], B[r]] for r in range(W)], kop=rs)
    out = emulate(ck_ag, [[chunks[r][0]] for r in range(W)], kop=ag)
    full = sum(A[r].float() @ B[r].float() for r in range(W))
    gathered = torch.cat([chunks[r][0] for r in range(W)])
    scale = float(full.abs().max())
    for r in range(W):
        assert torch.equal(out[r][0], gathered), r
        assert torch.allclose(out[r][0].float(), full, rtol=0, atol=W * 2 ** -7 * scale)


# ---- the schedule-level interpreter: interp(before) == interp(after) ----------------------


def test_check_transform_a2a_bitwise_w1_to_8():
    from pkc.testing import check_transform

    def make(W):
        t = f"tensor<{3 * W}x40xbf16>"
        m = parse_module(f"func.func @f(%x: {t}) -> {t} {{\n  %y = pk.all_to_all %x {{world = {W} : i64, "
                         f"split_dim = 0 : i64, concat_dim = 0 : i64}} : {t} -> {t}\n"
                         f"  func.return %y : {t}\n}}\n", "a2a.mlir")
        run_pipeline("lower-collectives{keep-single-rank=true}", m)
        return m
    check_transform(make, "schedule-collectives", world_sizes=(1, 2, 3, 4, 8), seeds=(1,),
                    exact=True, func="f")


@pytest.mark.parametrize("W", [3, 4])
def test_check_transform_mm_all_reduce_pair(W):
    """The pair computes what the fused kernel-level GEMM + all-reduce computes (the
    partials rounded to bf16 and reduce-added in any order: the fused kernels' tolerance)."""
    from pkc.testing import check_transform

    def make(w):
        return _fused_module(w, w * 19, 48, 24, "default{force=true}")
    check_transform(make, "schedule-fused,dce", world_sizes=(W,), seeds=(W,), func="mm_ar",
                    tolerance={torch.bfloat16: (2e-2, W / 16)})


def test_agp_three_launches_on_two_ctas_in_the_interpreter():
    """Launches in a row reuse the pads by epoch; a peer's next launch may start while this
    rank still pulls (its source is its own per launch here); 2 CTAs per rank."""
    from pkc.interp.schedule import run_schedule_launches

    W = 3
    kop = _agp(W, 7, 24)
    shape = tuple(kop.inputs[0].type.get_shape())
    gen = torch.Generator().manual_seed(0)
    launches = [[[torch.randn(shape, generator=gen).to(torch.bfloat16) for _ in range(W)]]
                for _ in range(3)]
    outs = run_schedule_launches(kop, launches, W, seed=0, ctas=2)
    for k in range(3):
        want = torch.cat([x.reshape(-1) for x in launches[k][0]])
        for r in range(W):
            assert torch.equal(outs[k][0][r].reshape(-1), want), (k, r)
