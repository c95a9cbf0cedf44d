"""The 128 x 224 tile, one of choose_config's candidates since docs/PERF_NOTES.md 2026-12-02
(u): 3584 = 16 x 224 (Llama-3 70B's gate and up projections per rank at TP = 8) fills whole
waves where 128 x 160 or 128 x 256 leave a partial last one. Which shapes take it (and which
keep their tile, where it measured no faster), and the fused kinds on it: GEMM +
reduce-scatter (bf16, W = 2 on the emulator; fp8 W = 3 in the interpreter), all-gather +
fp8 GEMM, the MoE kernel (one gather feeding several matmuls: test_gather_many.py); 224
columns are seven 32-column epilogue pieces; a partial last column tile in every case."""

from __future__ import annotations

import pytest

from pkc.passes.remarks import plan_of
from pkc.target.gemm_tuning import choose_config
from tests.unit.test_fp8_fused import check_levels
from tests.unit.test_fp8_overlap import ag_ir, red_ir
from tests.unit.test_fused_pingpong import _scheduled
from tests.unit.test_schedule_fused_layouts import rs_text

TILE = "128x224_s4_tma"


@pytest.mark.parametrize("M,N,K,bn", [
    (1024, 3584, 8192, 224),     # 128 smaller tiles in one wave, not 112 of 128 x 256
    (2048, 3584, 8192, 224),     # two whole waves where 128 x 160 takes three
    (1024, 7168, 8192, 224),
    (8192, 3584, 8192, 256),     # 128 x 256: as many waves, the bigger tile wins the tie
    (8192, 8192, 8192, 256),
    (512, 3584, 8192, 128),      # 128 x 128: one wave of a smaller tile
    (8192, 1280, 8192, 160)])    # a near-tie by the model; 160 measured 1-3% faster
def test_which_shapes_take_the_tile(M, N, K, bn):
    c = choose_config(M, N, K)
    assert (c.bm, c.bn) == (128, bn), c
    assert choose_config(M, N, K, in_types=("e4m3", "e4m3")).bn == bn


def test_bf16_reduce_scatter_on_the_tile_emulated():
    W = 2
    # W [N, K], nn.Linear's (a B [K, N] takes 128-column tiles: 64-column boxes)
    text = rs_text(W, (W * 72,), 0, 456, 64, "nk")      # 456 = 2 x 224 + 8
    kernel_level, sched, kop = _scheduled(text, TILE)
    assert (plan_of(kop)["bn"], plan_of(kop)["fused_kind"]) == (224, "rs")
    check_levels(text, kernel_level, sched, W, seed=7, emulate=True)


def test_fp8_reduce_scatter_on_the_tile():
    W = 3
    text = red_ir(W, W * 40, 240, 128, True, "bf16")
    kernel_level, sched, kop = _scheduled(text, TILE)
    assert plan_of(kop)["bn"] == 224
    check_levels(text, kernel_level, sched, W, seed=8, emulate=False)


def test_fp8_all_gather_on_the_tile_emulated():
    W = 2
    text = ag_ir(W, 67, 240, 128, True, "bf16", True)
    kernel_level, sched, kop = _scheduled(text, TILE)
    assert (plan_of(kop)["bn"], plan_of(kop)["fused_kind"]) == (224, "ag")
    check_levels(text, kernel_level, sched, W, seed=9, emulate=True)


def test_moe_kernel_on_the_tile():
    """schedule-moe's grouped GEMM on 224 columns (an expert's 240 columns: a whole tile
    and a 16-column one): interp(kernel level) == interp(scheduled), W = 2."""
    from pkc.ir import parse_module
    from pkc.passes.registry import run_pipeline
    from pkc.testing import check_transform
    from tests.unit.test_schedule_moe import module_text

    def make(W):
        mod = parse_module(module_text(W, 2, 40, 240, 64), "moe.mlir")
        run_pipeline("default{force=true}", mod)
        return mod
    check_transform(make, f"schedule-moe{{variant={TILE}}}", world_sizes=[2], func="moe")
    m = make(2)
    run_pipeline(f"schedule-moe{{variant={TILE}}}", m)
    (kop,) = [o for o in m.walk() if o.name == "pk.kernel"]
    assert plan_of(kop)["bn"] == 224
