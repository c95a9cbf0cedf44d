"""schedule-fused on an all-gather + GEMM (pattern all_gather_mm, one matmul): the pass's
decisions and remarks (put CTAs from sm-partition's plan, the GEMM's predicted time), the
side-role ops' verifiers, the launch metadata (grid rule with the put CTAs, 3-D map views,
the gathered operand's peer pointers), the PTX through ptxas, and the kernel run in the
emulator for W = 1, 2, 3 on odd shapes against torch (C within a bf16 step of its scale,
the gathered A exact)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from xdsl.dialects import arith
from xdsl.dialects.builtin import IntegerAttr, bf16, i32
from xdsl.ir import Block
from xdsl.utils.exceptions import VerifyException

from pkc.codegen.abi import ScheduledKernelMeta
from pkc.codegen.ptxas import find_ptxas
from pkc.dialects import schedule as s
from pkc.dialects import schedule_ag as ag
from pkc.dialects import schedule_comm as c
from pkc.dialects.kernel import KernelOp
from pkc.dialects.types import SYMMETRIC, BufferType
from pkc.passes.ag_gemm_schedule import why_not_ag
from pkc.passes.remarks import plan_of, remarks_of
from pkc.target.fused_tuning import ag_put_ctas, fused_gemm_config

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from fused_ag_ir import compile_ir, module_text, scheduled_module  # noqa: E402


def _kernels(m) -> list[KernelOp]:
    return [op for op in m.walk() if isinstance(op, KernelOp)]


def _ops(kop, cls) -> list:
    return [op for op in kop.walk() if isinstance(op, cls)]


def test_pass_writes_the_kernel_with_its_decisions_and_remarks():
    W, Mc, N, K = 3, 101, 200, 136
    (kop,) = _kernels(scheduled_module(W, Mc, N, K, "nk"))
    plan = plan_of(kop)
    want = fused_gemm_config("ag", W * Mc, N, K, W, "bf16", "nk", 132)
    side, _ = ag_put_ctas(W * Mc, N, K, W)
    assert (plan["schedule"], plan["fused_kind"]) == ("fused", "ag")
    assert (plan["bm"], plan["bn"], plan["stages"]) == (want.bm, want.bn, want.stages)
    # sm-partition planned the put CTAs; the pass followed that plan
    assert plan["put_ctas"] == side and plan["comm_ctas"] == side
    assert plan["chunk_rows"] == Mc and plan["gathered_output"] is False
    assert plan["row_blocks"] == -(-(-(-Mc // want.bm)) // want.group_m)
    texts = remarks_of(kop)
    assert any(t.startswith("sm-partition: all-gather + GEMM in one grid") and
               "predicted" in t for t in texts)
    assert "scheduled all-gather + GEMM W=3" in texts[-1]
    assert f"{side} put CTAs from sm-partition's plan" in texts[-1]
    # the grid split: the put side, and the GEMM's roles in the main region
    (part,) = _ops(kop, ag.CtaPartitionOp)
    assert part.side.data == side
    assert any(isinstance(op, s.RoleOp) for op in part.main.walk())
    assert not any(isinstance(op, s.RoleOp) for op in part.side_block.walk())
    assert len(_ops(part, ag.BulkLoadOp)) == 2 and len(_ops(part, ag.BulkStoreOp)) == 1
    views = [op.dim_list for op in kop.block.ops if isinstance(op, ag.TmapViewOp)]
    assert views == [[1, Mc, K], [W, Mc, K], [W, Mc, N]]
    # waits: the producer's per row block, the put side's per peer announcement
    sites = [op for op in kop.walk() if isinstance(op, c.SignalWaitOp)]
    assert len(sites) == 1 + (W - 1)
    # the gathered operand is a symmetric kernel output, C a local (fresh) one
    args = kop.block.args
    assert args[3].type.symmetric and not args[2].type.symmetric


def test_w1_is_the_gemm_with_no_put_side():
    (kop,) = _kernels(scheduled_module(1, 101, 200, 136, "kn"))
    plan = plan_of(kop)
    assert plan["fused_kind"] == "ag" and plan["comm_ctas"] == 0
    assert not _ops(kop, ag.CtaPartitionOp) and not _ops(kop, c.SignalWaitOp)
    assert not _ops(kop, c.EpochOp)
    assert "W = 1: nothing to put" in remarks_of(kop)[-1]


def test_gathered_output_asked_copies_the_own_shard_too():
    (kop,) = _kernels(scheduled_module(1, 101, 200, 136, "nk", gathered=True))
    plan = plan_of(kop)
    assert plan["gathered_output"] is True and plan["comm_ctas"] == ag_put_ctas(101, 200, 136, 1)[0]
    assert "the gathered A is returned" in remarks_of(kop)[-1]
    assert _ops(kop, ag.CtaPartitionOp)


def test_two_matmuls_are_one_kernel_of_this_builder():
    from pkc.ir import make_context, parse_module
    from pkc.passes.registry import parse_pipeline

    text = ("func.func @f(%x: tensor<64x64xbf16>, %a: tensor<64x64xbf16>, %b: tensor<64x32xbf16>)"
            " -> (tensor<128x64xbf16>, tensor<128x32xbf16>) {\n"
            "  %g = pk.all_gather %x {dim = 0 : i64, world = 2 : i64} : tensor<64x64xbf16> -> tensor<128x64xbf16>\n"
            "  %p = pk.matmul %g, %a : (tensor<128x64xbf16>, tensor<64x64xbf16>) -> tensor<128x64xbf16>\n"
            "  %q = pk.matmul %g, %b : (tensor<128x64xbf16>, tensor<64x32xbf16>) -> tensor<128x32xbf16>\n"
            "  func.return %p, %q : tensor<128x64xbf16>, tensor<128x32xbf16>\n}\n")
    m = parse_module(text, "t.mlir")
    for p in parse_pipeline("overlap{force=true}"):         # the fused kernel, 2 weights
        p.apply(make_context(), m)
    (kop,) = [k for k in _kernels(m) if "pk.fusion" in k.attributes]
    # several weights: one kernel over them (pkc.passes.gather_many's parts)
    assert why_not_ag(kop) is None


def test_verifiers_name_the_op():
    blk = Block(arg_types=[BufferType([64, 64], bf16), BufferType([128, 64], bf16, SYMMETRIC)])
    part = ag.CtaPartitionOp(0)
    with pytest.raises(VerifyException, match="'pks.cta_partition' side = 0"):
        part.verify()
    t3 = s.TmapType("bf16", [64, 64, 1], 128)
    with pytest.raises(VerifyException, match="'pks.tmap_view' dims \\[3, 64, 64\\] are not a view"):
        ag.TmapViewOp(blk.args[1], [3, 64, 64], t3).verify()
    ag.TmapViewOp(blk.args[1], [2, 64, 64], t3).verify()
    sched = Block()
    st = s.SmemAllocOp(2, 16384)
    sched.add_op(st)
    too_big = ag.SmemOverlayOp(st.result, 2, 32768, s.SmemType(2, 32768))
    sched.add_op(too_big)
    with pytest.raises(VerifyException, match="'pks.smem_overlay' 2 x 32768 bytes do not fit"):
        too_big.verify()
    zero = arith.ConstantOp(IntegerAttr(0, i32)).result
    ptr = Block(arg_types=[c.PTR]).args[0]
    bars = s.MbarrierAllocOp(2, 1).result
    with pytest.raises(VerifyException, match="'pks.bulk_load' copies through a !pks.smem"):
        ag.BulkLoadOp(ptr, zero, zero, bars, zero, bars, zero).verify()


def test_launch_metadata_lists_side_ctas_views_and_peer_pointers():
    W, Mc, N, K = 3, 101, 200, 136
    ck, kop = compile_ir(W, Mc, N, K, "kn", gathered=True)
    meta, fz = ck.meta, ck.meta.fused
    side = plan_of(kop)["comm_ctas"]
    assert fz.kind == "ag" and fz.side_ctas == side and fz.inputs == 2
    assert fz.peer_outputs == [3] and fz.sym_outputs == [3]
    assert fz.shapes == [[Mc, K], [K, N], [W * Mc, N], [W * Mc, K]]
    assert [t.dims for t in meta.tmaps] == [[1, Mc, K], [W, Mc, K], [], [W, Mc, N]]
    names = [n for n, _ in meta.params()]
    assert [f"out3_p{d}" for d in range(W)] == [n for n in names if n.startswith("out3_p")]
    assert names.index("out3_p0") > names.index("alloc0_p2") and names[-5:] == [
        "rank", "err", "timeout", "mbox", "trap"]
    # the grid rule: the GEMM's CTAs on the SMs the put CTAs leave, then the put CTAs
    tiles = W * plan_of(kop)["tiles_per_chunk"]
    assert meta.tiles == tiles
    assert meta.grid(132) == min(132 - side, tiles) + side and meta.grid(side + 2) == 2 + side
    assert ScheduledKernelMeta.from_json(meta.to_json()) == meta


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
@pytest.mark.parametrize("case", [(2, 199, 136, 72, "nk", False), (4, 67, 264, 72, "kn", True),
                                  (3, 101, 200, 136, "nk", False, "f16")],
                         ids=["W2_nk", "W4_kn_gathered", "W3_f16"])
def test_assembles_without_spills(case):
    from pkc.codegen.ptxas import assemble_one

    ck, _ = compile_ir(*case)
    ptx = ck.ptx
    assert ck.meta.fused.dtype == (case[6] if len(case) > 6 else "bf16")
    assert "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes" in ptx
    assert "cp.async.bulk.global.shared::cta.bulk_group" in ptx
    assert "cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group" in ptx
    _, res = assemble_one(ptx)
    assert res.spill_stores == 0 and res.spill_loads == 0 and res.stack_bytes == 0


@pytest.mark.parametrize("W,Mc,N,K,layout,gathered", [
    (1, 101, 136, 72, "nk", False),
    (1, 67, 136, 72, "kn", True),
    (2, 67, 136, 72, "nk", True),
    (3, 101, 200, 136, "kn", False),
])
def test_emulated_against_torch(W, Mc, N, K, layout, gathered):
    """The kernel itself (PTX through the emulator: put CTAs, bulk copies into the peers'
    gathered buffers, epoch signals, the GEMM's roles) for W ranks, against torch."""
    from pkc.emu import emulate

    ck, kop = compile_ir(W, Mc, N, K, layout, gathered)
    gen = torch.Generator().manual_seed(W)
    a = [torch.randn(Mc, K, generator=gen).to(torch.bfloat16) for _ in range(W)]
    w = [(torch.randn(N, K, generator=gen) / K ** 0.5).to(torch.bfloat16) for _ in range(W)]
    b = [x if layout == "nk" else x.t().contiguous() for x in w]
    out = emulate(ck, [[a[r], b[r]] for r in range(W)], kop=kop,
                  sms=2 + ck.meta.fused.side_ctas)
    full = torch.cat(a).float()
    for r in range(W):
        ref = full @ w[r].float().t()
        got = out[r][0].float()
        assert not torch.isnan(got).any()
        assert float((got - ref).abs().max()) <= 2 ** -7 * float(ref.abs().max())
        if gathered:
            assert torch.equal(out[r][1], torch.cat(a))


def test_module_text_is_the_graph_the_pass_sees():
    assert "pk.all_gather %x {dim = 0 : i64, world = 2" in module_text(2, 8, 16, 16, "nk")


def test_a_silent_peer_is_a_deadlock_naming_the_wait(monkeypatch):
    """Rank 1 never signals (its ``red`` instructions dropped): rank 0's put side waits for
    its announcement and its producer for its shard; the emulator names the wait."""
    from pkc.codegen import ptx
    from pkc.emu import EmuDeadlock, emulate, launch, registry

    ck, kop = compile_ir(2, 67, 136, 72, "nk")
    x = [[torch.randn(67, 72).to(torch.bfloat16), torch.randn(136, 72).to(torch.bfloat16)]
         for _ in range(2)]
    real = registry.HANDLERS[ptx.RedOp]

    def rank1_silent(m, ins, g):
        keep = g.rank != 1
        return real(m, ins, g.sub(keep)) if keep.any() else None
    monkeypatch.setitem(registry.HANDLERS, ptx.RedOp, rank1_silent)
    launch._PROGRAMS.clear()          # programs bind handlers once; rebuild this one
    try:
        with pytest.raises(EmuDeadlock) as ei:
            emulate(ck, x, kop=kop, sms=2 + ck.meta.fused.side_ctas)
    finally:
        launch._PROGRAMS.clear()
    msg = str(ei.value)
    assert "epoch wait" in msg and "rank 0" in msg


def test_put_ctas_rule_keeps_the_measured_picks():
    """The put CTAs the hand path picked on these shapes (the rule was measured on 2 and 4
    H200s: few for compute-bound GEMMs, 16 where A's bytes outrun the GEMM)."""
    picks = [(303, 136, 72, 3, 4), (8192, 8192, 8192, 2, 4), (4096, 7168, 8192, 4, 8),
             (8192, 1024, 8192, 4, 16), (16384, 4096, 16384, 8, 12)]
    for M, N, K, W, want in picks:
        n, why = ag_put_ctas(M, N, K, W)
        assert n == want and n % 4 == 0 and 4 <= n <= 16
        assert f"{n} put CTAs" in why and "predicted" in why
