"""The sm_100a GEMM's persistent tile scheduler under cluster launch control
(``pks.clc_tile_loop``), for single CTAs and CTA pairs, checked without a Blackwell GPU:
the tuning rule picks it when there are more (pair) tiles than fit at once (plan attribute
scheduler = clc and a remark); the emulator, which launches one CTA (pair) per tile but
runs only ``sms`` CTAs at a time, runs it with the running ones cancelling and taking the
others' tiles, equal to the exact product within one output ulp and to the interpreter; a
copy without the wait on the response's mbarrier is caught; ptxas -arch=sm_100a assembles
it with 0 spills (SASS: UGETNEXTWORKID, UTCHMMA.2CTA in a pair, where cuobjdump exists);
sm_90a refuses the loop by name. No Blackwell hardware has run it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from pkc.codegen import compile_kernel, ptx_sm90
from pkc.codegen import ptx_sm100_ext as x5
from pkc.codegen.emit import kernels_of
from pkc.codegen.errors import CodegenError
from pkc.codegen.ptxas import assemble, find_ptxas
from pkc.emu import emulate, registry
from pkc.emu.errors import EmuAsyncProxyError
from pkc.ir import make_context, parse_module, verify_module
from pkc.passes import schedule_matmul as sm
from pkc.passes.schedule_matmul import ScheduleMatmul
from pkc.target.gemm_tuning_sm100 import TmemGemmConfig, choose_tmem_config

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_emu_sm100 import _inputs, _kernel, _text, _within_one_ulp  # noqa: E402

CASES = {   # M, N, K, layout, config, CTAs launched (sms = 2 run at a time), cancelled
    # 6 tiles on 2 resident CTAs: 4 taken by cancelling
    "nk_tma": (200, 96, 72, "nk", TmemGemmConfig(bn=32, stages=2, clc=True), 6, 4),
    "kn_global": (136, 192, 136, "kn", TmemGemmConfig(bn=64, stages=2, clc=True,
                                                      b_layout="kn", epilogue="global"), 6, 4),
    # CTA pairs: 6 pair tiles (odd M), one resident pair takes the other 5 (multicast
    # responses, both CTAs' readers free each slot on the even CTA's empty)
    "pair_tma": (300, 96, 136, "nk", TmemGemmConfig(bn=32, stages=2, pair=True, clc=True), 12, 5),
}


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


@pytest.mark.parametrize("case", sorted(CASES))
def test_emulated_clc_gemm_takes_cancelled_tiles_and_equals_the_product(case, monkeypatch):
    M, N, K, layout, cfg, ctas, cancelled = CASES[case]
    stats = _counting(monkeypatch)
    kop, ck = _kernel(M, N, K, layout, "bf16", cfg, monkeypatch)
    assert "clusterlaunchcontrol.try_cancel" in ck.ptx and ck.meta.clc
    assert ck.meta.grid(2) == ctas                    # one CTA per tile, whatever the SMs
    x, w, ref = _inputs(M, N, K, layout, "bf16")
    (out,), = emulate(ck, [[x, w]], kop=kop, sms=2)
    assert not torch.isnan(out).any(), "an element no tile wrote"
    assert _within_one_ulp(out, ref).all()
    assert (out == ref.to(out.dtype)).float().mean() > 0.99
    # the running CTAs (pairs) took the other tiles; each then had one request fail
    assert stats == {"requests": ctas // cfg.cluster, "cancelled": cancelled}


def test_clc_gemm_without_the_response_wait_is_caught(monkeypatch):
    M, N, K, layout, cfg, _, _ = CASES["nk_tma"]
    kop, ck = _kernel(M, N, K, layout, "bf16", cfg, monkeypatch)
    queries = [o for o in ck.entry_op.walk() if isinstance(o, x5.ClcQueryOp)]
    assert len(queries) == 3                          # one per role
    for q in queries:
        wait = q.prev_op
        assert isinstance(wait, ptx_sm90.MbarrierWaitParityOp)
        wait.detach()
        wait.erase()
    x, w, _ = _inputs(M, N, K, layout, "bf16")
    with pytest.raises(EmuAsyncProxyError, match="a CLC response read before its mbarrier "
                       "completed"):
        emulate(ck, [[x, w]], kop=kop, sms=2)


@pytest.mark.parametrize("case", ["nk_tma", "pair_tma"])
def test_interpreter_runs_the_clc_schedule_as_the_graph(case, monkeypatch):
    # the interpreter's 4 CTAs (2 pairs) on 6 (pair) tiles: some requests cancel, then fail
    from pkc.testing import check_transform

    M, N, K, layout, cfg, _, _ = CASES[case]
    monkeypatch.setattr(sm, "choose_tmem_config", lambda *a: cfg)
    check_transform(lambda w: parse_module(_text(M, N, K, layout, "bf16"), "t.mlir"),
                    "schedule-matmul{target=b200}", world_sizes=(1,), seeds=(0, 1), func="mm")


def test_emulated_clc_kernel_equals_the_interpreter(monkeypatch):
    from pkc.emu.check import check_module

    monkeypatch.setattr(sm, "choose_tmem_config", lambda *a: CASES["nk_tma"][4])
    m = parse_module(_text(200, 96, 72, "nk", "bf16"), "t.mlir")
    ScheduleMatmul(target="b200").apply(make_context(), m)
    x, w, _ = _inputs(200, 96, 72, "nk", "bf16")
    res = check_module(m, [[x, w]], 1, target="sm_100a", func_name="mm", sms=2)
    assert res.ok, res.difference


def test_tuning_picks_clc_past_one_wave_and_says_so():
    assert choose_tmem_config(2048, 4096, 512, "bf16", "kn", 148).clc       # 512 tiles
    assert not choose_tmem_config(384, 256, 320, "bf16", "nk", 148).clc    # one wave
    big = choose_tmem_config(4096, 4096, 4096, "bf16", "nk", 148)
    assert big.pair and big.clc                       # 512 pair tiles on 74 pairs
    assert not choose_tmem_config(2048, 512, 128, "bf16", "nk", 148).clc   # 64 pair tiles
    m = parse_module(_text(2048, 4096, 128, "kn", "bf16"), "t.mlir")
    ScheduleMatmul(target="b200").apply(make_context(), m)
    verify_module(m)
    (kop,) = kernels_of(m)
    assert kop.attributes["pk.plan"].data["scheduler"].data == "clc"
    assert "cluster launch control" in str(kop.attributes.get("pk.remarks", ""))


def test_sm90a_refuses_the_clc_loop(monkeypatch):
    monkeypatch.setattr(sm, "choose_tmem_config", lambda *a: CASES["nk_tma"][4])
    m = parse_module(_text(200, 96, 72, "nk", "bf16"), "t.mlir")
    ScheduleMatmul(target="b200").apply(make_context(), m)
    with pytest.raises(CodegenError, match="needs sm_100a|no sm_90a lowering for 'pks.clc_tile_loop'"):
        compile_kernel(kernels_of(m)[0], "sm_90a")


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
@pytest.mark.parametrize("pair", [False, True])
def test_clc_gemm_assembles_without_spills(pair, monkeypatch):
    from pkc.codegen.sass import check_sm100_gemm, find_tool, opcodes, sass

    cfg = TmemGemmConfig(bn=64, stages=6, clc=True, pair=pair)
    kop, ck = _kernel(2048, 4096, 256, "nk", "bf16", cfg, monkeypatch)
    cubin, reports, _ = assemble(ck.ptx, "sm_100a")
    (rep,) = reports.values()
    assert rep.spill_stores == 0 and rep.spill_loads == 0 and rep.stack_bytes == 0, rep.line()
    if not find_tool("cuobjdump"):
        pytest.skip("cuobjdump not found (SASS check)")
    text = sass(cubin)
    # UTCHMMA x 4 (.2CTA in a pair), TMA, LDTM, UTCBAR, no spills
    assert check_sm100_gemm(text, cta_pair=pair) == []
    assert any(o.startswith("UGETNEXTWORKID") for o in opcodes(text)), "try_cancel"
