"""The row-chunked fused kinds on CTA pairs that share B by TMA multicast (a forced
``cluster_m = 2`` variant of schedule-fused: the cooperative 128 x 256 and the ping-pong
128 x 128 tiles): GEMM + reduce-scatter (fp8, bf16 with rank-ordered adds) and all-gather +
fp8 GEMM (tensor- and row-wise scales, the put CTAs a whole number of pairs; one
gather feeding several matmuls too, on pairs and on ping-pong consumers), W in
{1, 2, 3, 4, 8}, chunks with an odd number of row tiles so that a pair's second tile lies
wholly past its chunk (counted, its stores clipped). The interpreter's run equals the
kernel-level kernel and the graph program, the emulator runs the PTX equal to the
interpreter, ptxas has no spills; parts not built for pairs refuse with an error at the
kernel."""

from __future__ import annotations

import pytest

from pkc.codegen import compile_kernel
from pkc.codegen.ptxas import find_ptxas
from pkc.passes.remarks import plan_of
from tests.unit.test_fp8_fused import check_levels
from tests.unit.test_fp8_overlap import ag_ir, red_ir
from tests.unit.test_fused_pingpong import _bf16_rs_ir, _scheduled

COOP, PP = "128x256_s4_cl2", "128x128_pp_cl2"

# (W, M = W x chunk rows, N, K, row-wise, variant, emulate); chunk rows 136 / 72 / 40 / 24:
# 2 or 1 row tiles of 128 (an odd count for 72, 40, 24: a pair's second tile is past it)
RS_CASES = [(1, 200, 272, 128, True, COOP, False), (2, 2 * 136, 528, 128, False, PP, True),
            (3, 3 * 72, 272, 256, True, COOP, True), (4, 4 * 40, 272, 128, False, PP, False),
            (8, 8 * 24, 528, 64, True, COOP, False)]   # (K 64: W = 8 bf16 partials within atol)


def _cluster(kop) -> int:
    return kop.schedule().cluster.data


@pytest.mark.parametrize("W,M,N,K,row,variant,emulate", RS_CASES,
                         ids=[f"W{c[0]}-{c[5]}" for c in RS_CASES])
def test_fp8_reduce_scatter_on_cta_pairs(W, M, N, K, row, variant, emulate):
    text = red_ir(W, M, N, K, row, "bf16")
    kernel_level, sched, kop = _scheduled(text, variant)
    assert _cluster(kop) == 2 and plan_of(kop)["fused_kind"] == "rs"
    assert plan_of(kop)["tiles_per_chunk"] % 2 == 0      # whole pairs of row tiles
    check_levels(text, kernel_level, sched, W, seed=8, emulate=emulate)


def test_bf16_ordered_reduce_scatter_on_cta_pairs():
    text = _bf16_rs_ir(3, 3 * 72, 272, 96)
    kernel_level, sched, kop = _scheduled(text, PP, deterministic=True)
    assert _cluster(kop) == 2 and plan_of(kop)["add_order"] == "rank-ring"
    check_levels(text, kernel_level, sched, 3, seed=9, emulate=True)


# all_gather -> fp8 scaled matmul: (W, shard rows, N, K, row-wise, G returned, variant, emulate)
AG_CASES = [(2, 136, 528, 128, False, False, COOP, True), (3, 72, 272, 128, True, True, PP, True),
            (4, 40, 272, 128, True, False, COOP, False),
            (8, 24, 528, 128, False, True, PP, False)]


@pytest.mark.parametrize("W,Ms,N,K,row,gathered,variant,emulate", AG_CASES,
                         ids=[f"W{c[0]}-{c[6]}" for c in AG_CASES])
def test_fp8_all_gather_on_cta_pairs(W, Ms, N, K, row, gathered, variant, emulate):
    text = ag_ir(W, Ms, N, K, row, "bf16", gathered)
    kernel_level, sched, kop = _scheduled(text, variant)
    assert _cluster(kop) == 2 and plan_of(kop)["comm_ctas"] % 2 == 0
    check_levels(text, kernel_level, sched, W, seed=10, emulate=emulate)


# one gather feeding several fp8 matmuls (pkc/passes/gather_many.py) on forced tiles: a
# tile column is one weight's, so a pair shares that weight's B: (W, shard rows, widths,
# K, row-wise, variant, emulate)
MANY_CASES = [(2, 72, (272, 144), 128, True, COOP, True),
              (3, 136, (144, 272, 144), 128, False, PP, True),
              (4, 40, (272, 144), 128, True, "128x128_pp_s6", False)]


@pytest.mark.parametrize("W,Ms,ns,K,row,variant,emulate", MANY_CASES,
                         ids=[f"W{c[0]}-{c[5]}" for c in MANY_CASES])
def test_fp8_several_weights_on_forced_tiles(W, Ms, ns, K, row, variant, emulate):
    from tests.unit.test_fp8_gather_many import many_ir

    text = many_ir(W, Ms, ns, K, row, "bf16", True)
    kernel_level, sched, kop = _scheduled(text, variant)
    assert plan_of(kop)["weights"] == len(ns)
    assert _cluster(kop) == (2 if variant.endswith("cl2") else 1)
    assert bool(plan_of(kop).get("pingpong")) == ("_pp_" in variant)
    check_levels(text, kernel_level, sched, W, seed=11, emulate=emulate)


def test_parts_not_built_for_pairs_refuse_at_the_kernel():
    from pkc.ir import PkcDiagnostic
    from tests.unit.test_fp8_gather_kinds import agk_ir

    with pytest.raises(PkcDiagnostic, match="CTA pairs .* not built for AgKParts"):
        _scheduled(agk_ir(3, (137,), 64, 144, True, "bf16", True), COOP)


def test_the_grid_keeps_whole_pairs_beside_the_put_ctas():
    from pkc.codegen.abi import ScheduledKernelMeta

    _, _, kop = _scheduled(ag_ir(4, 1000, 2048, 128, True, "bf16"), COOP)
    meta = compile_kernel(kop, "sm_90a").meta
    side = meta.fused.side_ctas
    for sms in (132, 33, 8):
        grid = ScheduledKernelMeta.grid(meta, sms)
        assert grid % 2 == 0 and side % 2 == 0 and grid - side >= 2, (sms, grid, side)


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
@pytest.mark.parametrize("variant", [COOP, PP])
def test_cta_pair_fused_kernels_assemble_without_spills(variant):
    from pkc.codegen.ptxas import assemble_one

    for text in (red_ir(4, 4 * 1000, 1024, 1024, True, "bf16"),
                 ag_ir(4, 1000, 1024, 1024, True, "bf16")):
        _, _, kop = _scheduled(text, variant)
        _, res = assemble_one(compile_kernel(kop, "sm_90a").ptx)
        assert res.spill_stores == 0 and res.spill_loads == 0 and res.stack_bytes == 0
