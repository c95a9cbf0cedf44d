"""The schedule-level interpreter on fused GEMM + collective kernels: GEMM +
reduce-scatter (W = 1..4), GEMM + all-reduce (W = 2 fused; W = 3, 4 the reduce-scatter and
pull all-gather pair) and all-gather + GEMM (W = 1..4, put CTAs as a side role) compute
what the kernel-level IR computes (check_transform, within a stated tolerance: the
partials' reduce-adds land in any order and are rounded once more than at the kernel
level); three launches in a row; and broken protocols (an add before the owner's store,
an owner that does not wait for its peers, a shard loaded before its signal, a put side
that skips the peers' announcements) are errors naming op, rank, CTA and role."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from pkc.codegen.emit import kernels_of
from pkc.dialects import schedule_comm as c
from pkc.interp import InterpError, interpret, random_inputs
from pkc.interp.schedule import run_schedule_launches
from pkc.ir import make_context, parse_module
from pkc.passes.registry import parse_pipeline
from pkc.passes.remarks import plan_of
from pkc.testing import check_transform
from tests.unit.test_interp_schedule_comm import _launch_inputs, _ops, check_launches

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from fused_ag_ir import module_text as ag_text  # noqa: E402
from fused_ir import module_text as fused_text  # noqa: E402


def fused_module(W: int, Mc: int, N: int, K: int, layout: str):
    """The GEMM + reduce-scatter kernel as overlap fused it (kernel level)."""
    m = parse_module(fused_text(W, Mc, N, K, layout), "fused.mlir")
    for p in parse_pipeline("default{force=true}"):
        p.apply(make_context(), m)
    return m


# odd chunk rows; N, K multiples of 8 (TMA row strides)
FUSED = {1: (37, 40, 24, "nk"), 2: (45, 40, 24, "kn"), 3: (29, 72, 40, "nk"),
         4: (19, 48, 24, "kn")}


def test_schedule_fused_gemm_reduce_scatter_w1_to_4():
    # Each rank's partial is rounded to bf16 before it is summed (once more than the
    # kernel-level reduction, in any order): half an ulp of a partial (|p| < 16 here) per
    # rank, so an absolute tolerance of 2^-4 per rank on top of the relative one.
    for W, (Mc, N, K, layout) in FUSED.items():
        check_transform(lambda w: fused_module(w, Mc, N, K, layout), "schedule-fused,dce",
                        world_sizes=(W,), seeds=(W,), func="mm_rs",
                        tolerance={torch.bfloat16: (2e-2, W / 16)})

def mm_all_reduce(W: int, Mc: int = 19, N: int = 40, K: int = 24):
    M = W * Mc
    a, b, y = f"tensor<{M}x{K}xbf16>", f"tensor<{K}x{N}xbf16>", f"tensor<{M}x{N}xbf16>"
    m = parse_module(f"func.func @mm_ar(%x: {a}, %w: {b}) -> {y} {{\n"
                     f"  %c = pk.matmul %x, %w : ({a}, {b}) -> {y}\n"
                     f"  %o = pk.all_reduce %c {{world = {W} : i64, reduce = \"sum\"}} : {y} -> {y}\n"
                     f"  func.return %o : {y}\n}}\n", "mm_ar.mlir")
    for p in parse_pipeline("default{force=true}"):
        p.apply(make_context(), m)
    return m


@pytest.mark.parametrize("W", [2, 3, 4])
def test_schedule_fused_gemm_all_reduce(W):
    """W = 2: one fused kernel (the peer's chunk summed in the epilogue); W > 2: the
    GEMM + reduce-scatter then the pull all-gather (agp) of its symmetric output."""
    m = mm_all_reduce(W)
    for p in parse_pipeline("schedule-fused,dce"):
        p.apply(make_context(), m)
    kinds = sorted(plan_of(k).get("fused_kind") or plan_of(k).get("comm_kind")
                   for k in kernels_of(m) if k.schedule() is not None)
    assert kinds == (["ar"] if W == 2 else ["agp", "rs"]), kinds
    check_transform(mm_all_reduce, "schedule-fused,dce", world_sizes=(W,), seeds=(W,),
                    func="mm_ar", tolerance={torch.bfloat16: (2e-2, W / 16)})

# the role whose epilogue moves the tiles: wgmma's consumers (h200), the tensor-memory
# GEMM's epilogue warpgroup (b200)
EPILOGUE_ROLE = {"h200": r"consumer warpgroup \d", "b200": r"epilogue warpgroup \d"}


@pytest.mark.parametrize("target", sorted(EPILOGUE_ROLE))
def test_three_launches_fused_gemm_reduce_scatter(target):
    W, (Mc, N, K, layout) = 4, FUSED[4]
    assert layout == "kn"           # the kernel's operands are the graph's
    before = fused_module(W, Mc, N, K, layout)
    _, kop = _fused_scheduled(W, Mc, N, K, layout, target)
    check_launches(before, kop, W, "mm_rs", tolerance={torch.bfloat16: (2e-2, W / 16)})

def _fused_scheduled(W, Mc, N, K, layout, target="h200"):
    m = fused_module(W, Mc, N, K, layout)
    for p in parse_pipeline(f"schedule-fused{{target={target}}},dce"):
        p.apply(make_context(), m)
    (kop,) = [k for k in kernels_of(m) if k.schedule() is not None]
    return m, kop


@pytest.mark.parametrize("target", sorted(EPILOGUE_ROLE))
def test_fused_add_before_the_owners_store(target):
    W, (Mc, N, K, layout) = 3, FUSED[3]
    m, kop = _fused_scheduled(W, Mc, N, K, layout, target)
    waits = [w for w in _ops(kop, c.SignalWaitOp)
             if c.WaitSite(w.site.data) is c.WaitSite.ARRIVAL]
    assert waits
    for w in waits:
        w.detach()
        w.erase()
    with pytest.raises(InterpError, match=r"'pks.tma_store_or_add' on rank \d, CTA \d, "
                       + EPILOGUE_ROLE[target] + r": reduce-adds into word \d+ of .* of rank \d"):
        interpret(m, random_inputs(m, W, 0, "mm_rs"), W, "mm_rs")


@pytest.mark.parametrize("target", sorted(EPILOGUE_ROLE))
def test_fused_owner_that_does_not_wait_for_the_peers(target):
    W, (Mc, N, K, layout) = 3, FUSED[3]
    m, kop = _fused_scheduled(W, Mc, N, K, layout, target)
    for w in _ops(kop, c.SignalWaitOp):
        if c.WaitSite(w.site.data) is c.WaitSite.EXIT:
            w.detach()
            w.erase()
    with pytest.raises(InterpError, match=r"is read by the host after the kernel, but the "
                       r"reduce-add 'pks.tma_store_or_add' on rank \d"):
        interpret(m, random_inputs(m, W, 0, "mm_rs"), W, "mm_rs")

# ---- all-gather + GEMM (a side role of put CTAs, bulk copies) ---------------------------

AG = {1: (37, 40, 24, "nk", True), 2: (37, 40, 24, "nk", False), 3: (29, 48, 40, "kn", True),
      4: (19, 40, 24, "kn", False)}


def ag_module(W: int, Mc: int, N: int, K: int, layout: str, gathered: bool):
    m = parse_module(ag_text(W, Mc, N, K, layout, gathered), "ag_mm.mlir")
    pipe = "default{force=true keep-single-rank=true}" if W == 1 else "default{force=true}"
    for p in parse_pipeline(pipe):
        p.apply(make_context(), m)
    return m


def _ag_scheduled(W):
    m = ag_module(W, *AG[W])
    for p in parse_pipeline("schedule-fused,dce"):
        p.apply(make_context(), m)
    (kop,) = [k for k in kernels_of(m) if k.schedule() is not None]
    assert plan_of(kop)["fused_kind"] == "ag"
    return m, kop


@pytest.mark.parametrize("W", [1, 2, 3, 4])
def test_schedule_fused_all_gather_gemm(W):
    check_transform(lambda w: ag_module(w, *AG[W]), "schedule-fused,dce", world_sizes=(W,),
                    seeds=(W,), func="ag_mm", tolerance={torch.bfloat16: (2e-2, 2e-2)})


def _in_role(op) -> bool:
    from pkc.dialects import schedule as s
    p = op.parent_op()
    while p is not None and not isinstance(p, s.RoleOp):
        p = p.parent_op()
    return p is not None


def test_all_gather_gemm_producer_loading_a_shard_before_its_signal():
    m, kop = _ag_scheduled(3)
    for w in [w for w in _ops(kop, c.SignalWaitOp) if _in_role(w)]:
        w.detach()
        w.erase()
    with pytest.raises(InterpError, match=r"'pks.tma_load' on rank \d, CTA \d, producer "
                       r"warpgroup 0: reads word \d+ .* of rank \d"):
        interpret(m, random_inputs(m, 3, 0, "ag_mm"), 3, "ag_mm")


def test_all_gather_gemm_put_side_must_wait_for_the_peers_next_launch():
    """Without the announcements' waits one launch is right, but a put CTA's next launch
    overwrites a peer's gathered A that the peer (or its host) may still read."""
    m, kop = _ag_scheduled(3)
    for w in [w for w in _ops(kop, c.SignalWaitOp) if not _in_role(w)]:
        w.detach()
        w.erase()
    before = ag_module(3, *AG[3])
    run_schedule_launches(kop, _launch_inputs(before, kop, 3, 1, "ag_mm"), 3)
    with pytest.raises(InterpError, match=r"'pks.bulk_store' on rank \d, CTA \d, warpgroup 0 "
                       r"\(outside any role\), launch 2: overwrites word"):
        run_schedule_launches(kop, _launch_inputs(before, kop, 3, 2, "ag_mm"), 3)


def test_three_launches_all_gather_gemm():
    shape = (29, 48, 40, "kn", False)      # the gathered A not a result (the graph negates it)
    m = ag_module(3, *shape)
    for p in parse_pipeline("schedule-fused,dce"):
        p.apply(make_context(), m)
    (kop,) = [k for k in kernels_of(m) if k.schedule() is not None]
    check_launches(ag_module(3, *shape), kop, 3, "ag_mm",
                   tolerance={torch.bfloat16: (2e-2, 2e-2)})
