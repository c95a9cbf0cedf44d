"""Cluster launch control for the fused kernels on sm_100a (``schedule-fused{clc=...}``,
:mod:`pkc.passes.fused_clc`, ``pks.clc_chunk_tile_loop``): the chunked tile loop of the
GEMM + reduce-scatter (persistent, and the W = 2 fresh-output one) and of the GEMM +
all-reduce by broadcast with one CTA per work index, work indices from a per-rank ticket
counter in the static loop's (chunk, tile) order.

* the decision per kind: those take it past one wave of SMs (auto); the all-gather + GEMM,
  MoE and the fresh-output all-reduce never (plan ``scheduler = "static"`` and the reason
  in the remark);
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

import numpy as np
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
from tests.unit.test_interp_schedule_fused import fused_module, mm_all_reduce

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from fused_ir import module_text as rs_text  # noqa: E402

# (kind, W): (Mc, N, K): odd chunk rows and columns, several tiles per chunk (bn = 64),
# so the interpreter's 4 CTAs and the emulator's 3 resident ones cancel the rest. "rs":
# the persistent reduce-scatter (deterministic adds: one order, bitwise), "rs_out": the
# W = 2 fresh-output reduce-scatter (peer's chunk first, own chunk summed), "ar": the
# all-reduce by broadcast (W = 1; at W = 2 the fresh-output all-reduce never takes CLC)
CASES = {("rs", 1): (200, 200, 16), ("rs", 3): (130, 72, 16), ("rs", 4): (130, 80, 16),
         ("rs_out", 2): (130, 80, 16), ("ar", 1): (200, 136, 16)}
IDS = [f"{k}-w{w}" for k, w in CASES]
FUNC = {"rs": "mm_rs", "rs_out": "mm_rs", "ar": "mm_ar"}


def _graph(kind: str, W: int):
    """The graph-level module of a case."""
    Mc, N, K = CASES[kind, W]
    if kind == "ar":
        return mm_all_reduce(W, Mc, N, K)
    return parse_module(rs_text(W, Mc, N, K, "kn"), "mm_rs.mlir")


def _pipeline(kind: str, clc: str) -> str:
    pre = "" if kind == "ar" else "default{force=true},"
    return f"{pre}schedule-fused{{target=b200 clc={clc} deterministic=true}},dce"


@functools.cache
def _kernel(kind: str, W: int, clc: str):
    m = _graph(kind, W)
    for p in parse_pipeline(_pipeline(kind, clc)):
        p.apply(make_context(), m)
    (kop,) = [k for k in kernels_of(m) if k.schedule() is not None]
    return kop


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
    assert clc_decision(ClcKind.RS, 200, 148)[0]
    on, why = clc_decision(ClcKind.RS, 100, 148)
    assert not on and "fit the 148 SMs" in why
    for kind in (ClcKind.RS_OUT, ClcKind.AR):
        assert clc_decision(kind, 200, 148)[0] and clc_decision(kind, 2, 148, ClcChoice.ON)[0]
    for kind, words in ((ClcKind.AG, "put CTA"), (ClcKind.MOE, "dispatches its share"),
                        (ClcKind.AR_OUT, "slice of the own chunk")):
        on, why = clc_decision(kind, 10_000, 148)
        assert not on and words in why
        on, why = clc_decision(kind, 10_000, 148, ClcChoice.ON)
        assert not on and "clc=on does not apply" in why
    assert clc_decision(ClcKind.RS, 10_000, 148, ClcChoice.OFF)[0] is False


def test_schedule_fused_chooses_clc_past_one_wave_and_says_so():
    # 4 chunks of 16 x 16 tiles (bn 256 or less): far more work indices than 148 SMs
    m = fused_module(4, 2048, 4096, 512, "kn")
    for p in parse_pipeline("schedule-fused{target=b200},dce"):
        p.apply(make_context(), m)
    (kop,) = [k for k in kernels_of(m) if k.schedule() is not None]
    assert plan_of(kop)["scheduler"] == "clc"
    assert any(isinstance(o, ClcChunkTileLoopOp) for o in kop.walk())
    assert "cluster launch control:" in str(kop.attributes["pk.remarks"])
    small = _rs(4, "auto", *CASES["rs", 4])
    assert plan_of(small)["scheduler"] == "static"
    assert "fit the 148 SMs" in str(small.attributes["pk.remarks"])
    # the wgmma target has no CLC: clc=on refused by the pass
    with pytest.raises(ValueError, match="schedule-fused: clc=on: cluster launch control is an "
                                         "sm_100a feature"):
        for p in parse_pipeline("schedule-fused{target=h200 clc=on}"):
            p.apply(make_context(), fused_module(4, *CASES["rs", 4], "kn"))


def test_kinds_that_never_take_clc_say_why_in_plan_and_remark():
    from tests.unit.test_sm100_fused import _ag, _ar, _moe

    for m, words in ((_ag(2), "put CTA"), (_moe(2), "dispatches its share"),
                     (_ar(2), "slice of the own chunk")):
        (kop,) = [k for k in kernels_of(m) if k.schedule() is not None
                  and plan_of(k).get("acc") == "tmem"]
        assert plan_of(kop)["scheduler"] == "static"
        assert words in str(kop.attributes["pk.remarks"])
        assert not any(isinstance(o, ClcChunkTileLoopOp) for o in kop.walk())


# ---- the interpreter ---------------------------------------------------------------------

@pytest.mark.parametrize("kind,W", list(CASES), ids=IDS)
def test_interpreter_clc_kernel_means_the_kernel_and_equals_the_static_one(kind, W):
    Mc, N, K = CASES[kind, W]
    # from the kernel level (the fused kernel overlap made)
    make = ((lambda w: mm_all_reduce(w, Mc, N, K)) if kind == "ar" else
            (lambda w: fused_module(w, Mc, N, K, "kn")))
    check_transform(make, "schedule-fused{target=b200 clc=on deterministic=true},dce",
                    world_sizes=(W,), seeds=(W,), func=FUNC[kind],
                    tolerance={torch.bfloat16: (2e-2, W / 16)})
    kop, static = _kernel(kind, W, "on"), _kernel(kind, W, "off")
    assert plan_of(kop)["scheduler"] == "clc" and plan_of(static)["scheduler"] == "static"
    # two launches: the second's tickets start at the first's total (epoch 2), which the
    # first's epoch publication (cancelled CTAs counted done) makes possible
    launches = [_per_rank(random_inputs(_graph(kind, W), W, seed, FUNC[kind]), W)
                for seed in (1, 2)]
    got = run_schedule_launches(kop, launches, W)
    want = run_schedule_launches(static, launches, W)
    for k in range(2):
        for r in range(W):
            assert torch.equal(got[k][0][r], want[k][0][r]), (k, r)


# ---- the emulator ------------------------------------------------------------------------

@pytest.mark.parametrize("kind,W", list(CASES), ids=IDS)
def test_emulator_clc_kernel_cancels_and_equals_the_interpreter_without_clc(kind, W,
                                                                          monkeypatch):
    kop, static = _kernel(kind, W, "on"), _kernel(kind, W, "off")
    inputs = random_inputs(_graph(kind, W), W, 1, FUNC[kind])
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


def test_all_reduce_pair_w4_runs_its_reduce_scatter_under_clc():
    """GEMM + all-reduce at W = 4 is two kernels (the reduce-scatter, then the pull
    all-gather); with clc=on the first runs under cluster launch control, and the emulator
    runs the pair (each kernel) bitwise equal to the interpreter (deterministic adds)."""
    from pkc.emu.check import check_module

    m = mm_all_reduce(4, 130, 80, 16)
    for p in parse_pipeline("schedule-fused{target=b200 clc=on deterministic=true},dce"):
        p.apply(make_context(), m)
    kops = [k for k in kernels_of(m) if k.schedule() is not None]
    rs = [k for k in kops if plan_of(k).get("fused_kind") == "rs"]
    assert len(kops) == 2 and len(rs) == 1 and plan_of(rs[0])["scheduler"] == "clc"
    res = check_module(m, random_inputs(m, 4, 0, "mm_ar"), 4, target="sm_100a",
                       func_name="mm_ar", exact=True, sms=3)
    assert res.ok, str(res.difference)
    assert [k.kernel for k in res.kernels] == ["matmul_reduce_scatter", "all_gather_agp"]


def test_emulated_launch_leaves_the_ticket_counter_and_epoch_ready_for_the_next(monkeypatch):
    """After one emulated launch of the W = 3 reduce-scatter (12 work indices, 3 CTAs
    running): every rank's ticket word is the total (one ticket per CTA of the grid) and
    its control word is [1, 0]: the epoch published and the done count reset, which
    happens only if the issuers' cancel counts and the running CTAs' own counts sum to the
    grid exactly (the next launch's tickets then start at 1 x total)."""
    import pkc.emu.launch as launch
    from pkc.dialects.kernel import AllocOp

    kop = _kernel("rs", 3, "on")
    seen = {}
    orig = launch._comm_errors

    def capture(meta, gm, named, W):
        seen.update(gm=gm, named=named)
        return orig(meta, gm, named, W)

    monkeypatch.setattr(launch, "_comm_errors", capture)
    ck = compile_kernel(kop, "sm_100a")
    emulate(ck, random_inputs(_graph("rs", 3), 3, 1, "mm_rs"), kop=kop, sms=3)
    allocs = [op for op in kop.block.ops if isinstance(op, AllocOp)]
    shape = {i: tuple(a.result.type.get_shape()) for i, a in enumerate(allocs)
             if not a.result.type.symmetric}
    (ctl,) = [i for i, sh in shape.items() if sh == (2,)]
    (tick,) = [i for i, sh in shape.items() if sh == (1,)]
    work = 3 * plan_of(kop)["tiles_per_chunk"]
    gm, named = seen["gm"], seen["named"]
    for r in range(3):
        assert gm.read_words(named[r][f"alloc{tick}"], 1, np.uint32).tolist() == [work]
        assert gm.read_words(named[r][f"alloc{ctl}"], 2, np.uint32).tolist() == [1, 0]


# ---- ptxas and SASS ----------------------------------------------------------------------

def _big(kind: str, W: int, deterministic: bool):
    """A larger kernel of each CLC kind for ptxas (333 x 264 x 136 per chunk, kn B)."""
    if kind == "rs":
        return _rs(W, "on", 333, 264, 136, deterministic)
    m = (mm_all_reduce(W, 333, 264, 136) if kind == "ar" else
         parse_module(rs_text(W, 333, 264, 136, "kn"), "mm_rs.mlir"))
    pre = "" if kind == "ar" else "default{force=true},"
    for p in parse_pipeline(f"{pre}schedule-fused{{target=b200 clc=on}},dce"):
        p.apply(make_context(), m)
    (kop,) = [k for k in kernels_of(m) if k.schedule() is not None]
    return kop


# (kind, W, deterministic adds, SASS of its communication where it has its own: the
# reduce-adds; the others' stores / loads are TMA ops the GEMM has too)
ASM = [("rs", 4, False, "UTMAREDG"), ("rs", 4, True, "UTMAREDG"), ("rs_out", 2, False, None),
       ("ar", 1, False, None)]


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
@pytest.mark.parametrize("kind,W,deterministic,comm", ASM,
                         ids=[f"{k}-w{w}{'-det' if d else ''}" for k, w, d, _ in ASM])
def test_clc_fused_kernel_assembles_without_spills(kind, W, deterministic, comm):
    from pkc.codegen.sass import check_sm100_gemm, find_tool, opcodes, sass

    kop = _big(kind, W, deterministic)
    assert plan_of(kop)["scheduler"] == "clc"
    cubin, reports, _ = assemble(compile_kernel(kop, "sm_100a").ptx, "sm_100a")
    (rep,) = reports.values()
    assert rep.spill_stores == 0 and rep.spill_loads == 0 and rep.stack_bytes == 0, rep.line()
    if not find_tool("cuobjdump"):
        pytest.skip("cuobjdump not found (SASS check)")
    text = sass(cubin)
    assert check_sm100_gemm(text) == []
    ops = opcodes(text)
    assert any(o.startswith("UGETNEXTWORKID") for o in ops), "try_cancel"
    assert comm is None or any(o.startswith(comm) for o in ops), comm
    assert any(o.startswith(("ATOMG", "ATOM", "RED")) for o in ops), "the ticket atomic"
