"""An all-gather feeding several matmuls (overlap fuses them into one kernel): schedule-fused
makes it ONE scheduled kernel that gathers once and computes every product
(pkc/passes/gather_many.py: one tile space over every weight's tiles, B and C maps
selected per tile). The kernel-level form and the scheduled kernel are
interpreter-equivalent to the graph for W in {1, 2, 3, 4, 8} on odd shapes; the sm_90a PTX
runs on the emulator equal to torch (W = 1, 2, 3; the sm_100a tensor-memory kernel W =
2); ptxas takes it without spills. Where the one kernel cannot be built (f32, weights in
both layouts) the kernel is split into a gather kernel and a matmul per weight, with a
remark saying why."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from pkc.codegen.ptxas import find_ptxas
from pkc.dialects import graph as g
from pkc.dialects import schedule_fused as sf
from pkc.dialects.kernel import KernelOp
from pkc.ir import parse_module
from pkc.passes.registry import run_pipeline
from pkc.passes.remarks import plan_of, remarks_of
from pkc.target.cost import Pattern, plan_fusion
from pkc.testing import check_transform

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from fused_ag_many import compile_ir, module_text, scheduled_module  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore::FutureWarning")]


def _kernels(m):
    return [op for op in m.walk() if isinstance(op, KernelOp)]


def test_one_kernel_over_the_weights():
    W, Mc, K, ns = 2, 40, 64, (48, 24, 136)
    (kop,) = _kernels(scheduled_module(W, Mc, K, ns))
    plan = plan_of(kop)
    assert (plan["schedule"], plan["fused_kind"], plan["weights"]) == ("fused", "ag", 3)
    assert [tuple(v.type.get_shape()) for v in kop.inputs] == [(Mc, K), *[(n, K) for n in ns]]
    assert [tuple(v.type.get_shape()) for v in kop.outputs] == [*[(W * Mc, n) for n in ns],
                                                                (W * Mc, K)]
    # 128-column tiles: 1 + 1 + 2 column tiles (each weight padded), 1 row tile per shard
    assert (plan["bn"], plan["tiles_per_chunk"]) == (128, 4)
    remark = remarks_of(kop)[-1]
    assert "scheduled all-gather + 3 GEMMs W=2 80x(48+24+136)x64 bf16" in remark
    assert "one kernel over 3 weights, gathering once" in remark
    # a map per weight: B by TmaOp, C by a 3-D view; the producer selects B and the rows'
    # map (own / gathered), the epilogue selects C
    assert len([o for o in kop.block.ops if o.name == "pks.tmap"]) == 3
    assert len([o for o in kop.block.ops if o.name == "pks.tmap_view"]) == 2 + 3
    assert len([o for o in kop.walk() if isinstance(o, sf.TmapSelectOp)]) == 3
    text = str(kop.parent)
    assert "pk.all_gather" not in text and "pk.matmul" not in text


def test_cost_model_remark_names_the_weights():
    plan = plan_fusion("h200", Pattern.ALL_GATHER_MM, (8192, (3584, 3584), 8192), 4)
    assert plan.fuse and "one kernel over 2 weights, gathering once" in plan.remark()


# (W, Mc, K, the weights' N, gathered): odd shapes (Mc not a multiple of anything; the
# weights' widths are not multiples of the tile, so each weight's last tile is clipped)
CASES = [(1, 37, 48, (24, 40), True), (2, 21, 64, (40, 8, 24), False),
         (3, 13, 56, (16, 48), True), (4, 9, 40, (8, 32, 16, 24), False),
         (8, 5, 32, (24, 8), True)]


@pytest.mark.parametrize("W,Mc,K,ns,gathered", CASES,
                         ids=[f"W{c[0]}-{len(c[3])}w{'-G' if c[4] else ''}" for c in CASES])
def test_kernel_level_and_scheduled_are_equivalent(W, Mc, K, ns, gathered):
    """interp(graph) == interp(kernel level: overlap, then the default pipeline) ==
    interp(scheduled kernel) on random bf16 inputs: the schedule-level interpreter runs the
    tile space over the weights, the put side and the waits."""
    text = module_text(W, Mc, K, ns, gathered, layouts="nk"[W % 2] * len(ns))
    single = " keep-single-rank=true" if W == 1 else ""
    for pipe in ("overlap{force=true}", f"default{{force=true{single}}}",
                 f"default{{force=true{single}}},schedule-fused"):
        check_transform(lambda w: parse_module(text), pipe, world_sizes=(W,), seeds=(W,))
    m = parse_module(text)
    run_pipeline(f"default{{force=true{single}}},schedule-fused", m)
    (kop,) = _kernels(m)
    assert kop.schedule() is not None and plan_of(kop)["weights"] == len(ns)


@pytest.mark.parametrize("case,why", [
    (dict(dt="f32"), "must all be bf16 or f16"),
    (dict(layouts="nk"), "weights in both layouts")])
def test_split_where_one_kernel_cannot_be_built(case, why):
    """f32 operands, or a transposed weight beside a [K, N] one: the gather kernel, then one
    matmul per weight, the remark saying why (interpreter-equal to the graph)."""
    text = module_text(2, 24, 32, (16, 8), **case)
    m = parse_module(text)
    run_pipeline("default{force=true},schedule", m)
    (gather,) = _kernels(m)
    assert gather.schedule() is not None and gather.kernel_name.data.startswith("all_gather")
    assert len([op for op in m.walk() if isinstance(op, g.MatmulOp)]) == 2
    lines = [r for op in m.walk() for r in remarks_of(op)]
    assert any("one gather kernel, then one GEMM per weight" in r and why in r for r in lines)
    check_transform(lambda w: parse_module(text), "default{force=true},schedule",
                    world_sizes=(2,), seeds=(0,))


def _emulate(W, Mc, K, ns, gathered, target="h200", arch="sm_90a", variant=""):
    from pkc.emu import emulate

    ck, kop = compile_ir(W, Mc, K, ns, gathered, target=target, arch=arch, variant=variant)
    gen = torch.Generator().manual_seed(W)
    a = [torch.randn(Mc, K, generator=gen).to(torch.bfloat16) for _ in range(W)]
    ws = [(torch.randn(n, K, generator=gen) / K ** 0.5).to(torch.bfloat16) for n in ns]
    out = emulate(ck, [[a[r], *ws] for r in range(W)], kop=kop,
                  sms=2 + ck.meta.fused.side_ctas)
    full = torch.cat(a).float()
    for r in range(W):
        for i, w in enumerate(ws):
            ref = full @ w.float().t()
            got = out[r][i].float()
            assert not torch.isnan(got).any(), (r, i)
            assert float((got - ref).abs().max()) <= 2 ** -7 * float(ref.abs().max()), (r, i)
        if gathered:
            assert torch.equal(out[r][-1], torch.cat(a))
    return kop


@pytest.mark.parametrize("W,Mc,K,ns,gathered", [
    (1, 67, 64, (48, 24, 136), True),
    (2, 40, 64, (48, 24), False),
    (3, 33, 72, (40, 8, 16), True)])
def test_emulated_sm90_against_torch(W, Mc, K, ns, gathered):
    """The PTX (the put side, the producer's wait per remote row block, the B and C maps
    picked per tile) for W ranks against torch; two CTAs stride over the tile space."""
    _emulate(W, Mc, K, ns, gathered)


def test_emulated_on_the_224_column_tile():
    """The 128 x 224 tile (gate + up's pick at T = 1024, 2048): a weight of 232 columns is
    a whole tile and an 8-column one, the other weight one partial tile."""
    kop = _emulate(2, 45, 64, (232, 40), True, variant="128x224_s4_tma")
    assert plan_of(kop)["bn"] == 224


def test_emulated_sm100_tensor_memory():
    """sm_100a: the tensor-memory GEMM shares the producer and takes the same epilogue
    hook, so the same parts give it."""
    kop = _emulate(2, 40, 64, (48, 24), True, target="b200", arch="sm_100a")
    assert plan_of(kop)["acc"] == "tmem"


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
@pytest.mark.parametrize("case,target,arch", [
    ((2, 1024, 8192, (3584, 3584), False), "h200", "sm_90a"),
    ((4, 301, 1024, (1024, 128, 128), True), "h200", "sm_90a"),
    ((1, 512, 4096, (512, 128, 128), False), "h200", "sm_90a"),
    ((3, 67, 264, (72, 136), True), "b200", "sm_100a")],
    ids=["W2_gate_up", "W4_qkv_gathered", "W1_qkv", "W3_sm100a"])
def test_assembles_without_spills(case, target, arch):
    from pkc.codegen.ptxas import assemble_one

    ck, _ = compile_ir(*case, target=target, arch=arch)
    _, res = assemble_one(ck.ptx, arch)
    assert res.spill_stores == 0 and res.spill_loads == 0 and res.stack_bytes == 0


def test_tile_of_the_padded_tile_space():
    """q, k, v of Llama-3 70B TP-8 at T = 2048: the fused table's tile for N = 1280 (160
    columns) pads the weights to 7 + 1 + 1 tiles, 144 tiles: two waves on 132 SMs; 192
    columns make 6 + 1 + 1, 128 tiles: one wave (gather_many.many_config; under Nsight
    Compute 63.5 us against 224 columns' 5 + 1 + 1 tiles' 73.4 us, PERF_NOTES 2026-12-02
    (u)). Gate + up (3584 = 16 x 224) takes 224
    columns at T = 1024 and 2048 (whole waves, measured 6-9% faster than 128 x 160) and
    keeps 256 at T = 4096 (224 within 1% there); q, k, v of 8B at T = 4096 take 128
    columns (no padding, two waves: measured 1.37x faster than 256 columns' one padded
    wave)."""
    from pkc.passes.fused_schedule import fused_config
    from pkc.target.fused_tuning import FusedKind
    from pkc.target.gemm_tuning import BLayout

    assert fused_config(FusedKind.AG, 2048, 1280, 8192, 1, "bf16", BLayout.NK, "h200").bn == 160
    (kop,) = _kernels(scheduled_module(1, 2048, 8192, (1024, 128, 128)))
    assert (plan_of(kop)["bn"], plan_of(kop)["tiles_per_chunk"]) == (192, 128)
    for T, bn in ((1024, 224), (2048, 224), (4096, 256)):
        (kop,) = _kernels(scheduled_module(1, T, 8192, (3584, 3584)))
        assert plan_of(kop)["bn"] == bn, T
    (kop,) = _kernels(scheduled_module(1, 4096, 4096, (512, 128, 128)))
    assert plan_of(kop)["bn"] == 128


@pytest.mark.parametrize("W,arch", [(2, "sm_90a"), (3, "sm_90a"), (2, "sm_100a")])
def test_blocks_of_rows_emulated(W, arch):
    """A gather along dim 1 of [B, Sc, H] (blocks of rows per shard, Shard(1)) feeding two
    weights: the blocks' parts under the weights' (one tile space per (shard, block) over
    both weights' tiles), on the emulator against torch."""
    from pkc.codegen import compile_kernel
    from pkc.codegen.emit import kernels_of
    from pkc.emu import emulate

    from tests.unit.test_gather_blocks import run, text

    B, Sc, H, ns = 3, 13, 24, (40, 24)
    m = run(text(W, B, Sc, H, ns, gathered=True),
            f"default{{force=true target={'h200' if arch == 'sm_90a' else 'b200'}}},"
            f"schedule-fused{{target={'h200' if arch == 'sm_90a' else 'b200'}}},dce")
    (kop,) = kernels_of(m)
    assert (plan_of(kop)["batches"], plan_of(kop)["weights"]) == (B, 2)
    ck = compile_kernel(kop, arch)
    gen = torch.Generator().manual_seed(W)
    x = [torch.randn(B, Sc, H, generator=gen).to(torch.bfloat16) for _ in range(W)]
    ws = [(torch.randn(H, n, generator=gen) / H ** 0.5).to(torch.bfloat16) for n in ns]
    out = emulate(ck, [[x[r].reshape(B * Sc, H), *ws] for r in range(W)], kop=kop,
                  sms=2 + ck.meta.fused.side_ctas)
    full = torch.cat(x, dim=1).reshape(B * W * Sc, H)
    for r in range(W):
        for i, w in enumerate(ws):
            ref = full.float() @ w.float()
            got = out[r][i].float()
            assert not torch.isnan(got).any()
            assert float((got - ref).abs().max()) <= 2 ** -7 * float(ref.abs().max()), (r, i)
        assert torch.equal(out[r][-1], full)
