"""World sizes up to 72 (an NVL72 domain, issue 17): the collectives lower and schedule at
W = 72 with no cap below it, their W-dependent parts stay within registers (sums over the
slots in a loop, pushes and copy-outs in groups of peers), the results are right (the
interpreter and the emulator at W = 19, past every threshold: more than 16 slots summed,
more than 8 destinations per push, a remainder in the slot loop) and ptxas assembles the
W = 72 kernels with no spills (skipped without ptxas)."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import pytest
import torch

from pkc.codegen.emit import kernels_of
from pkc.codegen.ptxas import check, find_ptxas
from pkc.dialects import schedule_comm as c
from pkc.dialects.schedule_comm_sum import VecSumSlotsOp
from pkc.ir import parse_module
from pkc.passes import comm_schedule as cs
from pkc.passes.pipelines import kernel_lines
from pkc.passes.registry import run_pipeline
from pkc.passes.remarks import plan_of
from pkc.target import comm_tuning as t
from pkc.target.fused_tuning import RS_MAX_WORLD
from pkc.testing import check_transform

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from collectives_ir import module_text  # noqa: E402

needs_ptxas = pytest.mark.skipif(find_ptxas() is None, reason="ptxas not found")


def lowered(coll: str, algo: str, W: int, vecs: int = 3):
    """One bf16 collective of ``vecs`` 16-byte vectors per rank chunk, after
    lower-collectives planned for nvl72 (h200's domain stops at 8)."""
    text, _, _ = module_text(coll, W, 16 * vecs * W, "bf16")
    m = parse_module(text, "w72.mlir")
    run_pipeline(f"lower-collectives{{target=nvl72 {coll}={algo} keep-single-rank=true}}", m)
    return m


def scheduled(coll: str, algo: str, W: int, vecs: int = 3):
    m = lowered(coll, algo, W, vecs)
    run_pipeline("schedule-collectives", m)
    (kop,) = kernels_of(m)
    return m, kop


# ---- the choice at large W -------------------------------------------------------------


def test_tuning_at_72_avoids_the_kinds_that_hold_w_vectors():
    # LL polls and holds all W packets of a vector: not above LL_MAX_WORLD
    assert t.choose("all_reduce", "one_shot", 72, "bf16", 64).kind is t.CommKind.AR1
    assert t.choose("all_gather", "direct", 72, "bf16", 64).kind is t.CommKind.AG
    assert t.choose("reduce_scatter", "direct", 72, "bf16", 64 * 72).kind is t.CommKind.RS
    assert t.choose("all_reduce", "one_shot", 8, "bf16", 64).kind is t.CommKind.LL
    # the two-shot's push gather stores to W peers per vector: pull above 32
    assert t.choose("all_reduce", "two_shot", 72, "bf16", 72 * 64).gather is t.Gather.PULL
    assert t.choose("all_reduce", "two_shot", 32, "bf16", 32 * 64).gather is t.Gather.PUSH


# ---- the IR at W = 72: nothing in a loop grows with W ----------------------------------


def _peer_stores(loop: c.VecLoopOp) -> int:
    """Distinct peer addresses a vector loop stores to (registers live across it)."""
    return len({op.ptr for op in loop.walk() if isinstance(op, c.VecStoreOp)
                and isinstance(op.ptr.owner, c.BufferPtrOp) and op.ptr.owner.peer is not None})


def _loads_in(loop: c.VecLoopOp, ptrs) -> int:
    return len({op.ptr for op in loop.walk() if isinstance(op, c.VecLoadOp)} & ptrs)


@pytest.mark.parametrize("coll,algo,kind", [
    ("all_reduce", "one_shot", "ar1"), ("all_reduce", "two_shot", "ar2"),
    ("all_gather", "direct", "ag"), ("reduce_scatter", "direct", "rs"),
])
def test_w72_scheduled_ir_keeps_loops_small(coll, algo, kind):
    m, kop = scheduled(coll, algo, 72)
    assert plan_of(kop)["comm_kind"] == kind
    ops = list(kop.walk())
    assert not any(isinstance(op, c.LlWaitOp) for op in ops)
    assert all(len(op.values) <= cs.SUM_UNROLLED_MAX for op in ops if isinstance(op, c.VecSumOp))
    sums = [op for op in ops if isinstance(op, VecSumSlotsOp)]
    if kind in ("ar1", "ar2", "rs"):
        assert sums and all(op.count.data == 72 for op in sums)
    loops = [op for op in ops if isinstance(op, c.VecLoopOp)]
    assert loops and max(_peer_stores(lp) for lp in loops) <= cs.PUSH_DESTS
    if kind == "ar2":   # the copy-out pulls from at most GATHER_SOURCES peers per loop
        peers = {op.result for op in ops if isinstance(op, c.BufferPtrOp) and op.peer is not None}
        assert max(_loads_in(lp, peers) for lp in loops) <= cs.GATHER_SOURCES
        assert plan_of(kop)["gather"] == "pull"


# ---- right answers past every threshold (W = 19) ----------------------------------------


@pytest.mark.parametrize("coll,algo,push", [
    ("reduce_scatter", "direct", None), ("all_reduce", "two_shot", False),
    ("all_reduce", "two_shot", True),
])
def test_scheduled_collectives_bitwise_at_19(coll, algo, push, monkeypatch):
    """Interpreter: the scheduled kernel computes what the lowered one does, bitwise (both
    sum in rank order). W = 19: 19 slots summed by the slot loop (a 2-slot remainder before
    it), pushes in loops of 8 + 8 + 3 peers, the two-shot's copy-out in groups of 8."""
    if push is False:
        monkeypatch.setattr(t, "AR2_PUSH_MAX_WORLD", 8)
    m, kop = scheduled(coll, algo, 19)
    assert any(isinstance(op, VecSumSlotsOp) for op in kop.walk())
    if push is not None:
        assert plan_of(kop)["gather"] == ("push" if push else "pull")
    check_transform(lambda W: lowered(coll, algo, W), "schedule-collectives", world_sizes=(19,),
                    seeds=(1,), exact=True, func="f")


def test_emulated_slot_sum_is_the_rank_order_sum():
    """The PTX of pks.vec_sum_slots on the emulator: a one-shot all-reduce of 19 ranks
    (the ar1 kernel) equals the f32 sum in rank order rounded once, bitwise."""
    from pkc.codegen import compile_kernel
    from pkc.emu import emulate

    m, kop = scheduled("all_reduce", "one_shot", 19, vecs=2)
    assert plan_of(kop)["comm_kind"] == "ar1"
    ck = compile_kernel(kop, "sm_90a")
    shape = tuple(kop.inputs[0].type.get_shape())
    gen = torch.Generator().manual_seed(19)
    x = [torch.randn(shape, generator=gen).to(torch.bfloat16) for _ in range(19)]
    out = emulate(ck, [[xi] for xi in x], kop=kop)
    want = functools.reduce(lambda a, b: a + b, [xi.float() for xi in x]).to(torch.bfloat16)
    for r in range(19):
        assert torch.equal(out[r][0].reshape(want.shape), want), r


# ---- fused kernels at W = 72 ---------------------------------------------------------------


FUSED_72 = """
func.func @mm_rs(%a: tensor<9216x256xbf16>, %b: tensor<256x256xbf16>) -> tensor<128x256xbf16> {
  %p = pk.matmul %a, %b : (tensor<9216x256xbf16>, tensor<256x256xbf16>) -> tensor<9216x256xbf16>
  %y = pk.reduce_scatter %p {dim = 0 : i64, reduce = "sum", world = 72 : i64} : tensor<9216x256xbf16> -> tensor<128x256xbf16>
  func.return %y : tensor<128x256xbf16>
}
func.func @ag_mm(%a: tensor<128x256xbf16>, %b: tensor<256x256xbf16>) -> tensor<9216x256xbf16> {
  %g = pk.all_gather %a {dim = 0 : i64, world = 72 : i64} : tensor<128x256xbf16> -> tensor<9216x256xbf16>
  %y = pk.matmul %g, %b : (tensor<9216x256xbf16>, tensor<256x256xbf16>) -> tensor<9216x256xbf16>
  func.return %y : tensor<9216x256xbf16>
}
"""


def test_fused_kernels_at_72_schedule_or_say_why():
    m = parse_module(FUSED_72, "fused72.mlir")
    run_pipeline("default{target=nvl72 force=true},schedule", m)
    lines = kernel_lines(m, "fused72.mlir")
    ag = [ln for ln in lines if "@all_gather_matmul" in ln]
    rs = [ln for ln in lines if "@matmul_reduce_scatter" in ln]
    assert ag and "scheduled all-gather + GEMM W=72" in ag[0], lines
    assert RS_MAX_WORLD >= 72
    assert rs and "scheduled GEMM + reduce-scatter W=72" in rs[0], lines


def test_fused_rs_above_the_cap_says_why(monkeypatch):
    from pkc.target import fused_tuning

    monkeypatch.setattr(fused_tuning, "RS_MAX_WORLD", 64)
    monkeypatch.setattr("pkc.passes.schedule_fused.RS_MAX_WORLD", 64)
    m = parse_module(FUSED_72, "fused72.mlir")
    run_pipeline("default{target=nvl72 force=true},schedule", m)
    rs = [ln for ln in kernel_lines(m, "fused72.mlir") if "@matmul_reduce_scatter" in ln]
    assert rs and "portable path" in rs[0] and "checked up to W = 64" in rs[0], rs


# ---- the fused GEMM + reduce-scatter past 32 ranks ------------------------------------


def _fused_rs(W: int, Mc: int, N: int, K: int):
    """The kernel-level GEMM + reduce-scatter (overlap's fusion) planned for nvl72."""
    from fused_ir import module_text as fused_text

    m = parse_module(fused_text(W, Mc, N, K, "nk"), "fused.mlir")
    run_pipeline("default{target=nvl72 force=true}", m)
    return m


def _fused_rs_scheduled(W: int, Mc: int, N: int, K: int, deterministic: bool = False):
    m = _fused_rs(W, Mc, N, K)
    run_pipeline(f"schedule-fused{{deterministic={str(deterministic).lower()}}},"
                 "dce", m)
    (kop,) = [k for k in kernels_of(m) if k.schedule() is not None]
    return m, kop


def test_fused_rs_at_33_matches_the_kernel_level():
    # past the old cap of 32 (a 32-bit mask of owners known ready): the wait for a chunk's
    # owner comes when the tile loop enters the chunk; odd chunk rows, 33 chunks
    W, Mc, N, K = 33, 3, 16, 8
    _, kop = _fused_rs_scheduled(W, Mc, N, K)
    assert plan_of(kop)["schedule"] == "fused"
    check_transform(lambda w: _fused_rs(w, Mc, N, K), "schedule-fused,dce",
                    world_sizes=(W,), seeds=(W,), func="mm_rs",
                    tolerance={torch.bfloat16: (2e-2, W / 16)})


def test_fused_rs_emulated_past_the_select_chain():
    """W = 9 (> SELECT_CHAIN_MAX): the owner's tensor map is the first peer map's address
    plus 128 bytes per chunk; the emulator lays the maps out as the parameters lie and
    rejects an address that is not a map."""
    from pkc.codegen import compile_kernel, lower_schedule  # noqa: F401 (registers first)
    from pkc.codegen.lower_schedule_fused import SELECT_CHAIN_MAX
    from pkc.emu import emulate

    W, Mc, N, K = 9, 5, 40, 24
    assert W > SELECT_CHAIN_MAX
    _, kop = _fused_rs_scheduled(W, Mc, N, K)
    ck = compile_kernel(kop, "sm_90a")
    g = torch.Generator().manual_seed(0)
    a = [torch.randn(W * Mc, K, generator=g).to(torch.bfloat16) for _ in range(W)]
    w = [(torch.randn(N, K, generator=g) / K ** 0.5).to(torch.bfloat16) for _ in range(W)]
    out = emulate(ck, [[a[r], w[r]] for r in range(W)], kop=kop)
    full = sum(a[r].float() @ w[r].float().t() for r in range(W))
    tol = 2 ** -7 * float(full.abs().max()) * (W + 1)    # a bf16 rounding per add
    for r in range(W):
        got = out[r][0].float()
        assert not torch.isnan(got).any()
        assert float((got - full[r * Mc:(r + 1) * Mc]).abs().max()) <= tol, r


# ---- ptxas at W = 72 ---------------------------------------------------------------------


def _ptx_reports(m, arch: str = "sm_90a"):
    from pkc.codegen import emit_ptx

    return {name: check(ptx, arch) for name, ptx in emit_ptx(m, arch).items()}


@needs_ptxas
@pytest.mark.parametrize("coll,algo,kind", [
    # the slot sum and 72 push loops; pushes to 72 peers in groups (the two-shot's pull
    # copy-out at 72 assembled without spills too, but takes ptxas ~20 s: not run here)
    ("reduce_scatter", "direct", "rs"), ("all_gather", "direct", "ag"),
])
def test_w72_scheduled_collective_assembles_without_spills(coll, algo, kind):
    m, kop = scheduled(coll, algo, 72, vecs=1)
    assert plan_of(kop)["comm_kind"] == kind
    for name, reports in _ptx_reports(m).items():
        for rep in reports.values():
            assert rep.spill_stores == rep.spill_loads == rep.stack_bytes == 0, rep.line()


@needs_ptxas
@pytest.mark.parametrize("deterministic", [False, True])
def test_w72_fused_rs_assembles_without_spills(deterministic):
    # 452 bytes spilled while the owner's map was a 72-way selp chain (72 live addresses)
    m, kop = _fused_rs_scheduled(72, 3, 256, 256, deterministic)
    reports = _ptx_reports(m)
    assert reports
    for reps in reports.values():
        for rep in reps.values():
            assert rep.spill_stores == rep.spill_loads == rep.stack_bytes == 0, rep.line()


@needs_ptxas
@pytest.mark.parametrize("coll,algo", [("all_reduce", "two_shot"), ("reduce_scatter", "direct")])
def test_w72_portable_collective_assembles_without_spills(coll, algo):
    m = lowered(coll, algo, 72, vecs=1)      # not scheduled: the portable kernel-level path
    run_pipeline("sm-partition{target=nvl72}", m)
    reports = _ptx_reports(m)
    assert reports
    for reps in reports.values():
        for rep in reps.values():
            assert rep.spill_stores == rep.spill_loads == 0, rep.line()
