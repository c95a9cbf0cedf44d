"""Cluster launch control for the fused kernels on sm_100a (``schedule-fused{clc=...}``,
:mod:`pkc.passes.fused_clc`, ``pks.clc_chunk_tile_loop``): the GEMM + reduce-scatter's
chunked tile loop with one CTA per work index, work indices from a per-rank ticket counter
in the static loop's (chunk, tile) order.

* the decision per kind: the reduce-scatter takes it past one wave of SMs (auto), the
  all-gather + GEMM and MoE never (the reason in the remark);
* the interpreter: the CLC kernel means the kernel-level IR (check_transform) and computes
  bitwise what the static kernel computes, also over two launches (the second launch's
  tickets start past the first's: the epoch and the cancelled CTAs' done count);
* the emulator: every work index's CTA launched, 3 run at a time and cancel the rest;
  bitwise equal to the interpreter without CLC (deterministic adds; K = 16, one MMA step,
  so the emulator's per-step rounding does not enter);
* ``ptxas -arch=sm_100a``: 0 spills; SASS has the CLC request (``UGETNEXTWORKID``), the
  ticket atomic, and passes ``check_sm100_gemm``.

No Blackwell GPU ran any of this."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import pytest
import torch

from pkc.codegen import compile_kernel
from pkc.codegen import ptx_sm100_ext as x5
from pkc.codegen.emit import kernels_of
from pkc.codegen.ptxas import assemble, find_ptxas
from pkc.dialects.schedule_clc_chunk import ClcChunkTileLoopOp
from pkc.emu import emulate, registry
from pkc.interp import random_inputs
from pkc.interp.schedule import run_schedule_launches
from pkc.ir import make_context, parse_module
from pkc.passes.fused_clc import ClcChoice, ClcKind, clc_decision
from pkc.passes.registry import parse_pipeline
from pkc.passes.remarks import plan_of
from pkc.testing import check_transform
from tests.unit.test_interp_schedule_fused import fused_module

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from fused_ir import module_text as rs_text  # noqa: E402

# W: (Mc, N, K): odd chunk rows and columns, several tiles per chunk (bn = 64), so the
# interpreter's 4 CTAs and the emulator's 3 resident ones cancel the rest
SHAPES = {1: (200, 200, 16), 3: (130, 72, 16), 4: (130, 80, 16)}


@functools.cache
def _rs(W: int, clc: str, Mc: int, N: int, K: int, deterministic: bool = True):
    m = parse_module(rs_text(W, Mc, N, K, "kn"), "mm_rs.mlir")
    det = "true" if deterministic else "false"
    for p in parse_pipeline(f"default{{force=true}},schedule-fused{{target=b200 clc={clc} "
                            f"deterministic={det}}},dce"):
        p.apply(make_context(), m)
    (kop,) = [k for k in kernels_of(m) if k.schedule() is not None]
    return kop


def _per_rank(inputs, W):
    return [[x[r] for r in range(W)] for x in zip(*inputs)]


def _counting(monkeypatch) -> dict:
    """Counts the emulator's try_cancel requests and the CTAs they cancelled."""
    import pkc.emu.ops_sm100_ext  # noqa: F401  (its handlers registered)

    h = registry.HANDLERS[x5.ClcTryCancelOp]
    stats = {"requests": 0, "cancelled": 0}

    def counted(m, ins, g):
        before = sum(len(q) for q in m.pending.values())
        h(m, ins, g)
        stats["requests"] += g.n
        stats["cancelled"] += before - sum(len(q) for q in m.pending.values())

    monkeypatch.setitem(registry.HANDLERS, x5.ClcTryCancelOp, counted)
    return stats


# ---- the decision ------------------------------------------------------------------------

def test_decision_per_kind():
    assert clc_decision(ClcKind.RS, 200, 148, "sm_100a")[0]
    on, why = clc_decision(ClcKind.RS, 100, 148, "sm_100a")
    assert not on and "fit the 148 SMs" in why
    for kind, words in ((ClcKind.AG, "put CTA"), (ClcKind.MOE, "dispatches its share")):
        on, why = clc_decision(kind, 10_000, 148, "sm_100a")
        assert not on and words in why
        with pytest.raises(ValueError, match="not built under cluster launch control"):
            clc_decision(kind, 10_000, 148, "sm_100a", ClcChoice.ON)
    assert clc_decision(ClcKind.RS, 10_000, 148, "sm_100a", ClcChoice.OFF)[0] is False
    with pytest.raises(ValueError, match="sm_100a feature"):
        clc_decision(ClcKind.RS, 10, 132, "sm_90a", ClcChoice.ON)


def test_schedule_fused_chooses_clc_past_one_wave_and_says_so():
    # 4 chunks of 16 x 16 tiles (bn 256 or less): far more work indices than 148 SMs
    m = fused_module(4, 2048, 4096, 512, "kn")
    for p in parse_pipeline("schedule-fused{target=b200},dce"):
        p.apply(make_context(), m)
    (kop,) = [k for k in kernels_of(m) if k.schedule() is not None]
    assert plan_of(kop)["scheduler"] == "clc"
    assert any(isinstance(o, ClcChunkTileLoopOp) for o in kop.walk())
    assert "cluster launch control:" in str(kop.attributes["pk.remarks"])
    small = _rs(4, "auto", *SHAPES[4])
    assert plan_of(small)["scheduler"] == "static"
    assert "fit the 148 SMs" in str(small.attributes["pk.remarks"])
    # the wgmma target has no CLC: no scheduler entry, clc=on refused
    with pytest.raises(ValueError, match="sm_100a feature"):
        for p in parse_pipeline("schedule-fused{target=h200 clc=on}"):
            p.apply(make_context(), fused_module(4, *SHAPES[4], "kn"))


# ---- the interpreter ---------------------------------------------------------------------

@pytest.mark.parametrize("W", [1, 3, 4])
def test_interpreter_clc_kernel_means_the_kernel_and_equals_the_static_one(W):
    Mc, N, K = SHAPES[W]
    check_transform(lambda w: fused_module(w, Mc, N, K, "kn"),
                    "schedule-fused{target=b200 clc=on deterministic=true},dce",
                    world_sizes=(W,), seeds=(W,), func="mm_rs",
                    tolerance={torch.bfloat16: (2e-2, W / 16)})
    kop, static = _rs(W, "on", Mc, N, K), _rs(W, "off", Mc, N, K)
    assert plan_of(kop)["scheduler"] == "clc" and plan_of(static)["scheduler"] == "static"
    # two launches: the second's tickets start at the first's total (epoch 2), which the
    # first's epoch publication (cancelled CTAs counted done) makes possible
    launches = [_per_rank(random_inputs(_rs_module(W), W, seed, "mm_rs"), W) for seed in (1, 2)]
    got = run_schedule_launches(kop, launches, W)
    want = run_schedule_launches(static, launches, W)
    for k in range(2):
        for r in range(W):
            assert torch.equal(got[k][0][r], want[k][0][r]), (k, r)


@functools.cache
def _rs_module(W: int):
    return parse_module(rs_text(W, *SHAPES[W], "kn"), "mm_rs.mlir")


# ---- the emulator ------------------------------------------------------------------------

@pytest.mark.parametrize("W", [1, 3, 4])
def test_emulator_clc_kernel_cancels_and_equals_the_interpreter_without_clc(W, monkeypatch):
    Mc, N, K = SHAPES[W]
    kop, static = _rs(W, "on", Mc, N, K), _rs(W, "off", Mc, N, K)
    inputs = random_inputs(_rs_module(W), W, 1, "mm_rs")
    ref = run_schedule_launches(static, [_per_rank(inputs, W)], W)[0]
    ck = compile_kernel(kop, "sm_100a")
    assert ck.meta.clc and "clusterlaunchcontrol.try_cancel" in ck.ptx
    work = W * plan_of(kop)["tiles_per_chunk"]
    assert ck.meta.grid(3) == work                  # one CTA per work index
    stats = _counting(monkeypatch)
    got = emulate(ck, inputs, kop=kop, sms=3)
    for r in range(W):
        assert torch.equal(got[r][0], ref[0][r]), r
    # every rank: 3 CTAs start, the other work indices' CTAs are cancelled
    assert stats["cancelled"] == W * (work - 3), stats


# ---- ptxas and SASS ----------------------------------------------------------------------

@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
@pytest.mark.parametrize("deterministic", [False, True])
def test_clc_fused_kernel_assembles_without_spills(deterministic):
    from pkc.codegen.sass import check_sm100_gemm, find_tool, opcodes, sass

    kop = _rs(4, "on", 333, 264, 136, deterministic)
    cubin, reports, _ = assemble(compile_kernel(kop, "sm_100a").ptx, "sm_100a")
    (rep,) = reports.values()
    assert rep.spill_stores == 0 and rep.spill_loads == 0 and rep.stack_bytes == 0, rep.line()
    if not find_tool("cuobjdump"):
        pytest.skip("cuobjdump not found (SASS check)")
    text = sass(cubin)
    assert check_sm100_gemm(text) == []
    ops = opcodes(text)
    assert any(o.startswith("UGETNEXTWORKID") for o in ops), "try_cancel"
    assert any(o.startswith("UTMAREDG") for o in ops), "the reduce-adds"
    assert any(o.startswith(("ATOMG", "ATOM", "RED")) for o in ops), "the ticket atomic"
