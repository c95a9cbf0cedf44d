"""Clusters of two CTA pairs with TMA multicast (sm_100a, issue 17), checked without a
Blackwell GPU: the schedule's attributes and their verifiers, the tuning rule and its
remark, the interpreter (check_transform) and the emulator (equal to the interpreter and
within one output ulp of the exact product) for the 2x2 (A multicast) and 4x1 (B
multicast) clusters with the static and the cluster-launch-control tile loops on small odd
shapes, a broken release protocol caught by the emulator, and ptxas -arch=sm_100a with the
SASS of a multicast 2-CTA TMA load and UTCHMMA.2CTA. No Blackwell hardware has run any of
it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from xdsl.dialects.builtin import IntAttr
from xdsl.rewriter import Rewriter
from xdsl.utils.exceptions import VerifyException

from pkc.codegen import compile_kernel
from pkc.codegen.emit import kernels_of
from pkc.codegen.ptxas import assemble, find_ptxas
from pkc.dialects import schedule as s
from pkc.emu import emulate
from pkc.emu.errors import EmuAsyncProxyError
from pkc.ir import make_context, parse_module, verify_module
from pkc.passes.schedule_matmul import ScheduleMatmul
from pkc.target.gemm_tuning_sm100 import PairCluster, TmemGemmConfig, choose_tmem_config

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_emu_sm100 import _inputs, _kernel, _text, _within_one_ulp  # noqa: E402

# 300 x 96: 3 row blocks (the last pair's odd CTA past M), 3 column blocks of 32 (a 2x2
# cluster's second pair past N in the last column block); K = 136: 3 k-blocks over a
# 2-stage ring (it wraps); the static loop takes several cluster tiles per cluster
SHAPE = (300, 96, 136)


def _cfg(pc: str, clc: bool = False, **kw) -> TmemGemmConfig:
    return TmemGemmConfig(bn=32, stages=2, pair=True, pair_cluster=pc, clc=clc, **kw)


CASES = {f"{pc}{'_clc' if clc else ''}": _cfg(pc, clc)
         for pc in ("2x2", "4x1") for clc in (False, True)}
# the epilogue from registers (pks.acc_store_global, clipped at M and N)
CASES["2x2_global"] = _cfg("2x2", epilogue="global")


def _scheduled(cfg, monkeypatch, shape=SHAPE):
    from pkc.passes import schedule_matmul as sm

    monkeypatch.setattr(sm, "choose_tmem_config", lambda *a: cfg)
    m = parse_module(_text(*shape, "nk", "bf16"), "t.mlir")
    ScheduleMatmul(target="b200").apply(make_context(), m)
    verify_module(m)
    return m


@pytest.mark.parametrize("case", sorted(CASES))
def test_emulated_cluster_gemm_equals_the_interpreter_and_the_product(case, monkeypatch):
    from pkc.emu.check import check_module

    cfg = CASES[case]
    m = _scheduled(cfg, monkeypatch)
    M, N, K = SHAPE
    x, w, ref = _inputs(M, N, K, "nk", "bf16")
    # sms = 4: one cluster runs (under CLC it cancels the others and takes their tiles)
    res = check_module(m, [[x, w]], 1, target="sm_100a", func_name="mm", sms=4)
    assert res.ok, res.difference
    kop, ck = _kernel(M, N, K, "nk", "bf16", cfg, monkeypatch)
    assert ".reqnctapercluster 4" in ck.ptx
    assert ck.ptx.count("multicast::cluster [") >= 1        # the multicast TMA load
    (out,), = emulate(ck, [[x, w]], kop=kop, sms=4)
    assert not torch.isnan(out).any(), "an element no tile wrote"
    assert _within_one_ulp(out, ref).all()


@pytest.mark.parametrize("pc", ["2x2", "4x1"])
def test_interpreter_runs_the_cluster_schedule_as_the_graph(pc, monkeypatch):
    from pkc.passes import schedule_matmul as sm
    from pkc.testing import check_transform

    monkeypatch.setattr(sm, "choose_tmem_config", lambda *a: _cfg(pc))
    check_transform(lambda w: parse_module(_text(*SHAPE, "nk", "bf16"), "t.mlir"),
                    "schedule-matmul{target=b200}", world_sizes=(1,), seeds=(0,), func="mm")


def _schedule_ops(m):
    (kop,) = kernels_of(m)
    return kop, kop.schedule()


@pytest.mark.parametrize("pc, operand, cn", [("2x2", "a", 2), ("4x1", "b", 1)])
def test_the_schedule_carries_the_cluster_and_the_multicast(pc, operand, cn, monkeypatch):
    kop, sched = _schedule_ops(_scheduled(_cfg(pc), monkeypatch))
    assert sched.cluster.data == 4
    loops = [o for o in sched.walk() if isinstance(o, s.TileLoopOp)]
    assert len(loops) == 3 and all(
        (o.cluster_n.data if o.cluster_n is not None else 1) == cn for o in loops)
    loads = [o for o in sched.walk() if isinstance(o, s.TmaLoadOp)]
    mc = [o for o in loads if o.pair_multicast is not None]
    assert len(mc) == 1 and mc[0].pair_multicast.data == 0b11
    assert mc[0].tmap.owner.buffer == kop.block.args[0 if operand == "a" else 1]
    commits = [o for o in sched.walk() if isinstance(o, s.MmaCommitArriveOp)]
    assert sum(o.pair_multicast is not None for o in commits) == 1     # the stage release
    plan = kop.attributes["pk.plan"].data
    assert plan["cluster_shape"].data == pc and plan["multicast"].data == operand
    assert plan["cluster"].value.data == 4


def test_verifiers_refuse_a_bad_cluster_n_and_multicast_masks(monkeypatch):
    kop, sched = _schedule_ops(_scheduled(_cfg("2x2"), monkeypatch))
    loop = next(o for o in sched.walk() if isinstance(o, s.TileLoopOp))
    loop.attributes["cluster_n"] = IntAttr(3)
    with pytest.raises(VerifyException, match="cluster_n = 3 does not divide the cluster of 4"):
        loop.verify()
    loop.attributes["cluster_n"] = IntAttr(2)
    load = next(o for o in sched.walk() if isinstance(o, s.TmaLoadOp)
                and o.pair_multicast is not None)
    load.attributes["pair_multicast"] = IntAttr(0b111)
    with pytest.raises(VerifyException, match="names pairs outside the cluster's 2 pair"):
        load.verify()
    load.attributes["pair_multicast"] = IntAttr(0b11)
    load.attributes["multicast"] = IntAttr(4)
    with pytest.raises(VerifyException, match="multicast and pair_multicast together"):
        load.verify()
    # a cluster of single CTAs (no CTA accumulators) has no pairs to multicast to
    m2 = parse_module(_text(256, 256, 128, "nk", "bf16"), "t.mlir")
    ScheduleMatmul(target="h200", variant="128x128_s6_cl2").apply(make_context(), m2)
    _, sched2 = _schedule_ops(m2)
    load2 = next(o for o in sched2.walk() if isinstance(o, s.TmaLoadOp))
    load2.attributes["pair_multicast"] = IntAttr(0b1)
    with pytest.raises(VerifyException, match="outside a schedule of CTA pairs"):
        load2.verify()


def test_tuning_takes_the_2x2_cluster_for_large_gemms_and_says_why():
    big = choose_tmem_config(4096, 4096, 4096, "bf16", "nk", 148)
    assert big.pair and big.pair_cluster is PairCluster.A2X2 and big.multicast == "a"
    # too few cluster tiles to fill the SMs: one pair
    assert choose_tmem_config(2048, 512, 128, "bf16", "nk", 148).pair_cluster is PairCluster.X2
    # one column block of 64: a 2x2 would idle half its CTAs; 4x1 (B multicast) shares B
    tall = choose_tmem_config(65536, 64, 1024, "bf16", "nk", 148)
    assert tall.pair_cluster is PairCluster.B4X1, tall.tag()
    # fp8 keeps one pair (its epilogue is not built on the cluster schedule)
    assert choose_tmem_config(4096, 4096, 4096, "bf16", "nk", 148,
                              in_types=("e4m3", "e4m3")).pair_cluster is PairCluster.X2
    m = parse_module(_text(4096, 4096, 512, "nk", "bf16"), "t.mlir")
    ScheduleMatmul(target="b200").apply(make_context(), m)
    (kop,) = kernels_of(m)
    assert kop.schedule().cluster.data == 4
    remarks = str(kop.attributes.get("pk.remarks", ""))
    assert "2x2, A multicast" in remarks and "L2-to-SM traffic per SM halves" in remarks, remarks


def _break_release(kop) -> None:
    """The stage release of the pair only (no pair_multicast on empty's commit, empty of
    one arrival): a CTA may refill the other pair's stage that pair has not released."""
    sched = kop.schedule()
    (commit,) = [o for o in sched.walk() if isinstance(o, s.MmaCommitArriveOp)
                 and o.pair_multicast is not None]
    del commit.attributes["pair_multicast"]
    alloc = commit.bars.owner
    Rewriter.replace_value_with_new_type(alloc.result, s.MbarriersType(2, 1))


@pytest.mark.parametrize("pc", ["2x2", "4x1"])
def test_a_multicast_without_the_remote_release_is_caught_by_the_emulator(pc, monkeypatch):
    M, N, K = SHAPE
    m = _scheduled(_cfg(pc), monkeypatch)
    (kop,) = kernels_of(m)
    _break_release(kop)
    ck = compile_kernel(kop, "sm_100a")
    x, w, _ = _inputs(M, N, K, "nk", "bf16")
    with pytest.raises(EmuAsyncProxyError, match=r"a multicast from CTA rank \d refills a stage "
                       r"of CTA rank \d that a tcgen05.mma read, before the issuing thread "
                       "waited for the stage's release"):
        emulate(ck, [[x, w]], kop=kop, sms=4)
    # the interpreter's rule (an overwrite of an MMA's operand not ordered after its commit)
    from pkc.interp.kernel import run_kernel
    from pkc.interp.values import InterpError
    with pytest.raises(InterpError, match=r"pks.tma_load.*overwrites bytes .* of CTA \d (while "
                       r"|that )the MMA 'pks.mma_async' on rank 0, CTA \d, mma warpgroup 0 "
                       "(still reads|read, with no mbarrier ordering)"):
        run_kernel(kop, [[x], [w]], 1, 0)


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
@pytest.mark.parametrize("pc, clc", [("2x2", False), ("4x1", True)])
def test_cluster_gemm_assembles_without_spills_with_multicast_2cta_loads(pc, clc, monkeypatch):
    from pkc.codegen.sass import check_sm100_gemm, find_tool, opcodes, sass

    cfg = TmemGemmConfig(bn=128, stages=6, pair=True, pair_cluster=pc, clc=clc)
    _, ck = _kernel(4096, 2048, 512, "nk", "bf16", cfg, monkeypatch)
    cubin, reports, _ = assemble(ck.ptx, "sm_100a")
    (rep,) = reports.values()
    assert rep.spill_stores == 0 and rep.spill_loads == 0 and rep.stack_bytes == 0, rep.line()
    if not find_tool("cuobjdump"):
        pytest.skip("cuobjdump not found (SASS check)")
    text = sass(cubin)
    assert check_sm100_gemm(text, cta_pair=True, multicast=True) == []
    ops = opcodes(text)
    assert any(o.startswith("UTMALDG") and "MULTICAST" in o and "2CTA" in o for o in ops), \
        sorted({o for o in ops if o.startswith("UTMALDG")})
    assert any(o.startswith("UTCHMMA") and "2CTA" in o for o in ops)
    assert any(o.startswith("UTCBAR") and "MULTICAST" in o for o in ops)
    if pc != "2x2":
        return
    # a single pair has no multicast TMA load: the check says so
    _, ck1 = _kernel(4096, 2048, 512, "nk", "bf16", cfg.with_(pair_cluster="2x1"), monkeypatch)
    text1 = sass(assemble(ck1.ptx, "sm_100a")[0])
    assert any("UTMALDG...MULTICAST.2CTA" in p
               for p in check_sm100_gemm(text1, cta_pair=True, multicast=True))


def test_a_grid_that_is_not_whole_clusters_is_refused(monkeypatch):
    from pkc.emu.errors import EmuError
    from pkc.emu.launch import run_entry
    from pkc.emu.memory import GlobalMemory

    _, ck = _kernel(*SHAPE, "nk", "bf16", _cfg("2x2"), monkeypatch)
    with pytest.raises(EmuError, match="a grid of 6 CTAs is not a whole number of clusters of 4"):
        run_entry(ck.entry_op, GlobalMemory(), [[0] * 16], ctas=6, target="sm_100a")
