"""The sm_90a collective kernels (pkc/codegen/hopper/collectives.py) without a GPU: every
kind, world and dtype assembles with ptxas (no spills from W = 2 on); the PTX carries the
protocol (release signals to every rank, bounded acquire waits, the f32 rank-order sum and
one rounding); the grid plan splits sizes as documented and rejects sizes that are not
whole 16-byte vectors."""

from __future__ import annotations

import re

import pytest

from pkc.codegen.hopper import tools
from pkc.codegen.hopper.collectives import (KINDS, CollectiveConfig, emit_collective_ptx,
                                            plan_grid)

needs_ptxas = pytest.mark.skipif(tools.find_tool("ptxas") is None, reason="ptxas not found")


@needs_ptxas
@pytest.mark.parametrize("W", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("kind", KINDS)
def test_assembles(kind, W):
    for dtype in ("bf16", "f16", "f32"):
        for copy_in, gather in ([(False, "push"), (True, "push"), (True, "pull")]
                                if kind == "ar2" else [(False, "push")]):
            cfg = CollectiveConfig(kind, W, dtype, copy_in=copy_in, gather=gather)
            a = tools.assemble(emit_collective_ptx(cfg))
            assert a.registers <= 128, cfg
            if W >= 2:
                assert a.spill_stores == 0, (cfg, a.log)


@pytest.mark.parametrize("kind", KINDS)
def test_protocol_in_ptx(kind):
    W = 4
    ptx = emit_collective_ptx(CollectiveConfig(kind, W, "bf16"))
    # loops over chunks start at rank+1 (or rank): no incast on rank 0
    assert ("selp.u64 %rotp" in ptx) == (kind in ("llrs", "rs", "ar2", "agp"))
    if kind.startswith("ll"):   # flags travel with the data: volatile 16-byte pairs, no signals
        assert "red." not in ptx and "fence" not in ptx and "ld.global.nc.u64" not in ptx
        assert ptx.count("st.volatile.global.v4.b32") == 2 * W
        assert ptx.count("ld.volatile.global.v4.b32") == 2 * W and "%globaltimer" in ptx
        assert ("add.rn.f32" in ptx) == (kind != "llag")        # all-gather copies, no sum
        # ll / llag keep their own vector in registers: the own slot is not stored or polled
        assert ("!%llself" in ptx) == (kind != "llrs")
        return
    phases = 1 if kind in ("ar1", "rs") else 2
    assert ptx.count("red.relaxed.sys.global.add.u32") == W * phases
    assert ptx.count("ld.acquire.sys.global.u32") == phases
    assert "%globaltimer" in ptx and "atom.global.cas.b32" in ptx   # bounded waits
    assert ptx.count("fence.acq_rel.sys") == phases
    if kind == "agp":
        # W pulls (peer loads through L2, no sum), sources chosen by rank: rank+0, rank+1, ..
        assert len(re.findall(r"ld\.global\.cg\.v4\.b32", ptx)) == W * 4   # unroll 4
        assert "add.rn.f32" not in ptx
        assert ptx.count("selp.u64 %rotp") == W * (W - 1)
    elif kind != "ag":
        # W peer loads per vector through L2, the sum in f32, one rounding per word pair
        assert re.search(r"ld\.global\.cg\.v4\.b32", ptx)
        assert "add.rn.f32" in ptx and "cvt.rn.bf16x2.f32" in ptx
    else:
        assert "add.rn.f32" not in ptx


def test_plan_grid():
    ar1 = CollectiveConfig("ar1", 2, "bf16")
    assert plan_grid(ar1, 2048, 132) == (256, 256, 256, 1)          # 4 KiB: one CTA
    nv, cv, per, G = plan_grid(ar1, 1 << 29, 132)                   # 1 GiB: every SM
    assert (nv, cv, G) == (1 << 26, 1 << 26, 132) and per * G >= cv
    rs = CollectiveConfig("rs", 4, "bf16")
    assert plan_grid(rs, 4 * 8 * 10, 132)[:2] == (40, 10)
    with pytest.raises(ValueError, match="4 chunks"):
        plan_grid(rs, 8 * 10, 132)
    with pytest.raises(ValueError, match="16 bytes"):
        plan_grid(ar1, 1001, 132)
    ar2 = CollectiveConfig("ar2", 3, "f32")
    nv, cv, per, G = plan_grid(ar2, 4 * 10, 8)
    assert (nv, cv) == (10, 4)                  # chunks of ceil(10 / 3); the last is short
    ll = CollectiveConfig("ll", 2, "bf16")
    assert plan_grid(ll, 2048, 132, 512) == (256, 256, 256, 1)       # one CTA
    assert plan_grid(ll, 2048, 132, 64) == (256, 256, 64, 4)         # spread over 4 SMs
    assert plan_grid(ll, 1 << 17, 132, 64)[2:] == (128, 128)        # <= max_ctas, whole warps
    for cv in range(1, 400):           # every CTA gets a non-empty slice (LL publishes in it)
        _, _, per, G = plan_grid(ll, 8 * cv, 132, 3)
        assert (G - 1) * per < cv <= G * per
    with pytest.raises(ValueError, match="LL takes"):
        plan_grid(ll, 2048, 132, 1024)


@pytest.mark.parametrize("W", [2, 4, 8])
def test_ll_issues_every_slots_poll_before_checking_a_flag(W):
    """One load latency per vector, not W in a row: the 2W polls of the W slots all come
    before the first flag comparison of the wait loop."""
    ptx = emit_collective_ptx(CollectiveConfig("ll", W, "bf16"))
    body = ptx[ptx.index("$L_llw_"):]
    first_check = body.index("setp.eq.u32 %llok")
    assert body[:first_check].count("ld.volatile.global.v4.b32") == 2 * W


@pytest.mark.parametrize("kind", KINDS)
def test_timeout_reports_to_the_mailbox_and_may_trap(kind):
    ptx = emit_collective_ptx(CollectiveConfig(kind, 2, "bf16"))
    assert "st.volatile.global.u32 [%mbox], 1;" in ptx and "membar.sys;" in ptx
    assert "trap;" in ptx


def test_config_errors():
    with pytest.raises(ValueError, match="kind"):
        CollectiveConfig("bcast").validate()
    with pytest.raises(ValueError, match="copy_in"):
        CollectiveConfig("ar1", copy_in=True).validate()


@pytest.mark.parametrize("kind", KINDS)
def test_epoch_lives_on_the_device(kind):
    ptx = emit_collective_ptx(CollectiveConfig(kind, 2, "bf16"))
    first_bar = ptx.index("bar.sync 0;")
    assert ptx.index("ld.global.u32 %epoch, [%ctl];") < first_bar
    assert first_bar < ptx.index("atom.global.add.u32 %fin_old, [%ctl+4], 1;")
    assert "st.global.u32 [%ctl], %epoch;" in ptx


@pytest.mark.parametrize("W", [2, 4, 8])
def test_two_shot_copy_in_gathers_by_push_or_pull(W):
    push = emit_collective_ptx(CollectiveConfig("ar2", W, "bf16", copy_in=True))
    pull = emit_collective_ptx(CollectiveConfig("ar2", W, "bf16", copy_in=True, gather="pull"))
    # push: the reduced chunk is stored into the own output and every peer's R, then the
    # W - 1 peers' chunks are copied from the own R; pull: stored once (own R), then read
    # from the W ranks'
    ends = [ptx.rsplit("ld.acquire.sys.global.u32", 1)[1] for ptx in (push, pull)]  # after the exit wait
    assert "%mysym" in ends[0] and "%rotp" not in ends[0]
    assert ends[0].count("ld.global.cg.v4.b32") == W - 1          # not the own chunk
    assert push.count("selp.u64 %rdst") == W                        # own chunk -> %out
    assert "%rotp" in ends[1] and ends[1].count("ld.global.cg.v4.b32") == W - 1
    with pytest.raises(ValueError, match="gather"):
        CollectiveConfig("ar2", W, "bf16", copy_in=True, gather="ring").validate()
    if tools.find_tool("ptxas") is not None:
        for ptx in (push, pull):
            a = tools.assemble(ptx)
            assert a.spill_stores == 0 and a.registers <= 64, a.log


@pytest.mark.parametrize("copy_in,gather", [(False, "push"), (True, "push"), (True, "pull")])
def test_two_shot_groups_pass_and_wait_once(copy_in, gather):
    """ar2 groups: every CTA signals its turn once after the exchange (in place too, or
    the next group would wait for ever); CTAs of later groups wait for it before theirs."""
    ptx = emit_collective_ptx(CollectiveConfig("ar2", 4, "bf16", copy_in=copy_in, gather=gather,
                                               groups=2))
    assert ptx.count("red.release.gpu.global.add.u32 [%grp_addr], 1;") == 1
    wait = ptx.index("ld.acquire.gpu.global.u32")
    assert wait < ptx.index("fence.acq_rel.sys;") < ptx.index("red.release.gpu.global.add.u32 [%grp_addr]")
    assert "%grp_addr" not in emit_collective_ptx(CollectiveConfig("ar2", 4, "bf16"))
    with pytest.raises(ValueError, match="groups"):
        CollectiveConfig("ar1", 2, "bf16", groups=2).validate()
