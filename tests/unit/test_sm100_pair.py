"""The sm_100a GEMM's CTA-pair variant (cta_group::2, 256 x bn tiles, B split over the
pair), checked without a Blackwell GPU: the tuning rule picks it for large [N, K] GEMMs
(plan attribute cta_group = 2 and a remark) and not for small ones; the emulator runs it
equal to the exact product within one output ulp (odd M, several tiles per pair, both
epilogues); a broken copy (a dealloc left at cta_group::1) is caught by name; ptxas
-arch=sm_100a assembles it with 0 spills and the SASS has UTCHMMA.2CTA (where cuobjdump
exists). No Blackwell hardware has run any of it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from pkc.codegen import ptx_sm100 as t5
from pkc.codegen.emit import kernels_of
from pkc.codegen.ptxas import assemble, find_ptxas
from pkc.emu import emulate
from pkc.emu.errors import EmuTensorMemoryError
from pkc.ir import make_context, parse_module, verify_module
from pkc.passes.schedule_matmul import ScheduleMatmul
from pkc.target.gemm_tuning_sm100 import TmemGemmConfig, choose_tmem_config

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_emu_sm100 import _inputs, _kernel, _text, _within_one_ulp  # noqa: E402

CASES = {   # M, N, K, config: odd M (the odd CTA's rows past M), 3 x 2 pair tiles on one
    # pair (both accumulators reused, the 2-stage ring wraps over 3 k-blocks); the register
    # epilogue
    "tma_odd_m_many_tiles": (300, 96, 136, TmemGemmConfig(bn=32, stages=2, pair=True)),
    "global_epilogue": (136, 80, 72, TmemGemmConfig(bn=32, stages=2, pair=True,
                                                    epilogue="global")),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_emulated_cta_pair_gemm_equals_the_exact_product(case, monkeypatch):
    M, N, K, cfg = CASES[case]
    kop, ck = _kernel(M, N, K, "nk", "bf16", cfg, monkeypatch)
    assert "tcgen05.mma.cta_group::2.kind::f16" in ck.ptx
    assert "multicast::cluster" in ck.ptx and ".reqnctapercluster 2" in ck.ptx
    x, w, ref = _inputs(M, N, K, "nk", "bf16")
    (out,), = emulate(ck, [[x, w]], kop=kop, sms=2)
    assert not torch.isnan(out).any(), "an element no tile wrote"
    assert _within_one_ulp(out, ref).all()
    assert (out == ref.to(out.dtype)).float().mean() > 0.99


def test_a_pair_kernel_with_a_cta_group_1_dealloc_is_caught(monkeypatch):
    M, N, K, cfg = CASES["global_epilogue"]
    kop, ck = _kernel(M, N, K, "nk", "bf16", cfg, monkeypatch)
    (dealloc,) = [o for o in ck.entry_op.walk() if isinstance(o, t5.Tcgen05DeallocOp)]
    del dealloc.attributes["cta_group"]          # prints .cta_group::1; ptxas would take it
    x, w, _ = _inputs(M, N, K, "nk", "bf16")
    with pytest.raises(EmuTensorMemoryError, match="wrong cta_group pairing: this is "
                       r"\.cta_group::1, but .*tcgen05.alloc.cta_group::2"):
        emulate(ck, [[x, w]], kop=kop, sms=2)


def test_tuning_picks_pairs_for_large_nk_gemms_and_says_so():
    assert choose_tmem_config(4096, 4096, 4096, "bf16", "nk", 148).pair
    assert not choose_tmem_config(200, 136, 72, "bf16", "nk", 148).pair      # 2 row blocks
    assert not choose_tmem_config(4096, 4096, 4096, "bf16", "kn", 148).pair  # [K, N] B
    m = parse_module(_text(2048, 512, 128, "nk", "bf16"), "t.mlir")
    ScheduleMatmul(target="b200").apply(make_context(), m)
    verify_module(m)
    (kop,) = kernels_of(m)
    plan = kop.attributes["pk.plan"].data
    assert plan["cta_group"].value.data == 2 and plan["cluster"].value.data == 2
    assert kop.schedule().cluster.data == 2
    remarks = str(kop.attributes.get("pk.remarks", ""))
    assert "CTA pairs (cta_group::2" in remarks, remarks


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
def test_cta_pair_gemm_assembles_without_spills_with_2cta_mmas_in_sass(monkeypatch):
    from pkc.codegen.sass import check_sm100_gemm, find_tool, opcodes, sass

    cfg = TmemGemmConfig(bn=64, stages=6, pair=True)
    kop, ck = _kernel(2048, 512, 256, "nk", "bf16", cfg, monkeypatch)
    cubin, reports, _ = assemble(ck.ptx, "sm_100a")
    (rep,) = reports.values()
    assert rep.spill_stores == 0 and rep.spill_loads == 0 and rep.stack_bytes == 0, rep.line()
    if not find_tool("cuobjdump"):
        pytest.skip("cuobjdump not found (SASS check)")
    text = sass(cubin)
    # the 4 k16 MMAs of a k-block are pair MMAs (UTCHMMA.2CTA); TMA, LDTM, UTCBAR, no spills
    assert check_sm100_gemm(text, cta_pair=True) == []
    assert any(o.startswith("UTCBAR") and "MULTICAST" in o for o in opcodes(text))


def test_interpreter_runs_the_pair_schedule_as_the_graph(monkeypatch):
    # interp(graph-level matmul) == interp(the pair schedule): the pair rules of the
    # interpreter (loads counted on the even CTA's mbarrier, the MMA of both CTAs' halves
    # by the even CTA, commits on both CTAs' mbarriers)
    from pkc.passes import schedule_matmul as sm
    from pkc.testing import check_transform

    monkeypatch.setattr(sm, "choose_tmem_config", lambda *a: CASES["tma_odd_m_many_tiles"][3])
    check_transform(lambda w: parse_module(_text(300, 96, 136, "nk", "bf16"), "t.mlir"),
                    "schedule-matmul{target=b200}", world_sizes=(1,), seeds=(0, 1), func="mm")


def test_emulated_pair_kernel_equals_the_interpreter(monkeypatch):
    from pkc.emu.check import check_module
    from pkc.passes import schedule_matmul as sm

    monkeypatch.setattr(sm, "choose_tmem_config", lambda *a: CASES["global_epilogue"][3])
    m = parse_module(_text(136, 80, 72, "nk", "bf16"), "t.mlir")
    ScheduleMatmul(target="b200").apply(make_context(), m)
    x, w, _ = _inputs(136, 80, 72, "nk", "bf16")
    res = check_module(m, [[x, w]], 1, target="sm_100a", func_name="mm", sms=2)
    assert res.ok, res.difference
    assert len(res.kernels) == 1


def test_a_pair_commit_without_the_multicast_is_a_deadlock_naming_the_odd_cta(monkeypatch):
    # the commits arrive on the even CTA's mbarriers only: the odd CTA's producer waits on
    # its empty[s] (and its epilogue on acc_full) forever, and so the pair stalls
    from pkc.codegen import ptx_sm100 as t5
    from pkc.emu.errors import EmuDeadlock

    M, N, K, cfg = CASES["global_epilogue"]
    kop, ck = _kernel(M, N, K, "nk", "bf16", cfg, monkeypatch)
    commits = [o for o in ck.entry_op.walk() if isinstance(o, t5.Tcgen05CommitOp)]
    assert commits and all(c.mask is not None for c in commits)
    for c in commits:
        c.operands = [c.mbar]
        c.properties["operandSegmentSizes"] = type(c.properties["operandSegmentSizes"]).from_list(
            c.properties["operandSegmentSizes"].elt_type, [1, 0])
    x, w, _ = _inputs(M, N, K, "nk", "bf16")
    with pytest.raises(EmuDeadlock, match=r"(?s)waiting:.*CTA 1, warp \d+ .*mbarrier_wait_parity"):
        emulate(ck, [[x, w]], kop=kop, sms=2)
