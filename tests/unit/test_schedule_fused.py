"""schedule-fused (GEMM + reduce-scatter at the schedule level): the pass's decisions and
remarks, the ops' verifiers, the lowering's ABI and launch metadata, and the PTX (ptxas
with no spills for W = 2, 3, 4 and the fused kernels' SASS pipeline check where
cuobjdump exists)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from xdsl.dialects import arith
from xdsl.dialects.builtin import IntegerAttr, bf16, i32
from xdsl.ir import Block
from xdsl.utils.exceptions import VerifyException

from pkc.codegen import compile_kernel
from pkc.codegen.abi import ScheduledKernelMeta
from pkc.codegen.ptxas import find_ptxas
from pkc.dialects import schedule as s
from pkc.dialects import schedule_fused as f
from pkc.dialects.kernel import KernelOp
from pkc.dialects.types import SYMMETRIC, BufferType
from pkc.passes.remarks import plan_of, remarks_of
from pkc.target.fused_tuning import fused_gemm_config

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from fused_ir import compile_ir, gemm_config_of, module_text, scheduled_module  # noqa: E402

# (W, Mc, N, K, layout): odd shapes (Mc, N, K not multiples of 16 or of W)
SMALL = [(2, 199, 136, 72, "nk"), (3, 101, 200, 136, "kn"), (4, 67, 264, 72, "nk")]


def _kernels(m) -> list[KernelOp]:
    return [op for op in m.walk() if isinstance(op, KernelOp)]


def test_pass_writes_the_fused_kernel_with_its_decisions_and_remark():
    W, Mc, N, K = 3, 101, 200, 136
    (kop,) = _kernels(scheduled_module(W, Mc, N, K, "nk"))
    plan = plan_of(kop)
    want = fused_gemm_config("rs", W * Mc, N, K, W, "bf16", "nk", 132)
    assert (plan["schedule"], plan["fused_kind"]) == ("fused", "rs")
    assert (plan["bm"], plan["bn"], plan["stages"]) == (want.bm, want.bn, want.stages)
    assert plan["chunk_rows"] == Mc and plan["b_layout"] == "nk"
    assert plan["tiles_per_chunk"] == -(-Mc // want.bm) * -(-N // want.bn)
    assert plan["scheduled_overlap"] == "intra" and plan["comm_ctas"] == 0
    assert plan["fresh_output"] is False
    text = remarks_of(kop)[-1]
    assert "scheduled GEMM + reduce-scatter W=3" in text and "own chunk first" in text
    # the kernel-level plan asked for communicate SMs: the remark says it is not followed
    assert "inter-SM plan" in text and "not followed" in text
    # W peer maps of the symmetric output, a chunk loop per role, store-or-add pieces
    peer = [op for op in kop.block.ops if isinstance(op, f.PeerTmapOp)]
    assert [op.peer.data for op in peer] == [0, 1, 2]
    assert all(op.buffer.type.symmetric for op in peer)
    loops = [op for op in kop.walk() if isinstance(op, f.ChunkTileLoopOp)]
    assert len(loops) == 2 and all(op.chunks.data == W for op in loops)
    assert any(isinstance(op, f.TmaStoreOrAddOp) for op in kop.walk())
    assert not any(isinstance(op, s.TmaStoreOp) for op in kop.walk())


def test_w2_is_the_fresh_output_variant_and_kn_layout():
    (kop,) = _kernels(scheduled_module(2, 199, 136, 72, "kn"))
    plan = plan_of(kop)
    assert plan["b_layout"] == "kn" and plan["fresh_output"] is True     # RS_INTO_OUTPUT
    assert "result in a fresh output" in remarks_of(kop)[-1]
    assert not kop.block.args[2].type.symmetric


def test_patterns_not_scheduled_keep_their_kernel_with_a_remark():
    from pkc.ir import make_context, parse_module
    from pkc.passes.registry import parse_pipeline

    text = ("func.func @mm_ar(%x: tensor<256x64xf32>, %w: tensor<64x128xf32>) -> tensor<256x128xf32> {\n"
            "  %c = pk.matmul %x, %w : (tensor<256x64xf32>, tensor<64x128xf32>) -> tensor<256x128xf32>\n"
            "  %o = pk.all_reduce %c {reduce = \"sum\", world = 2 : i64} : tensor<256x128xf32> -> tensor<256x128xf32>\n"
            "  func.return %o : tensor<256x128xf32>\n}\n")
    m = parse_module(text, "t.mlir")
    for p in parse_pipeline("default{force=true},schedule-fused"):
        p.apply(make_context(), m)
    (kop,) = [k for k in _kernels(m) if "pk.fusion" in k.attributes]
    assert kop.schedule() is None
    assert any("fused kernel left unscheduled: mm_all_reduce: operands and result must all be "
               "bf16 or f16" in r for r in remarks_of(kop))


def test_unaligned_n_is_left_with_a_remark():
    from pkc.ir import make_context, parse_module
    from pkc.passes.registry import parse_pipeline

    m = parse_module(module_text(2, 64, 100, 64, "kn"), "t.mlir")
    for p in parse_pipeline("default{force=true},schedule-fused"):
        p.apply(make_context(), m)
    (kop,) = [k for k in _kernels(m) if "pk.fusion" in k.attributes]
    assert kop.schedule() is None
    assert any("N = 100 and K = 64 must be multiples of 8" in r for r in remarks_of(kop))


def test_verifiers_name_the_op():
    local = Block(arg_types=[BufferType([64, 64], bf16), BufferType([64, 64], bf16, SYMMETRIC)])
    tmap = s.TmapType("bf16", [64, 64], 128)
    with pytest.raises(VerifyException, match="'pks.peer_tmap' a peer's copy"):
        f.PeerTmapOp(local.args[0], 0, tmap).verify()
    f.PeerTmapOp(local.args[1], 1, tmap).verify()
    a = f.PeerTmapOp(local.args[1], 0, tmap)
    b = f.PeerTmapOp(local.args[1], 1, s.TmapType("bf16", [32, 64], 64))
    idx = arith.ConstantOp(IntegerAttr(0, i32))
    with pytest.raises(VerifyException, match="'pks.tmap_select' maps and result must be one"):
        f.TmapSelectOp(idx.result, [a.result, b.result]).verify()
    zero = arith.ConstantOp(IntegerAttr(0, i32)).result
    too_many = f.MAX_CHUNKS + 1               # a chunk per rank of the largest domain, and room
    loop = f.ChunkTileLoopOp(zero, zero, zero, [], 128, 128, 8, too_many)
    loop.block.add_op(s.YieldOp([]))
    with pytest.raises(VerifyException, match=f"'pks.chunk_tile_loop' chunks = {too_many}"):
        loop.verify()
    with pytest.raises(VerifyException, match="'pks.signal_add' scope"):
        from pkc.dialects.schedule_comm import PTR

        ptr = Block(arg_types=[PTR]).args[0]
        f.SignalAddOp(ptr, zero, zero, scope="cta").verify()


def test_launch_metadata_lists_peer_maps_pads_and_every_chunk_tile():
    W, Mc, N, K = 3, 101, 200, 136
    ck, kop = compile_ir(W, Mc, N, K, "kn")
    meta = ck.meta
    assert [t.peer for t in meta.tmaps] == [-1, -1, 0, 1, 2]
    assert [t.buffer for t in meta.tmaps][2:] == [2, 2, 2]
    fz = meta.fused
    assert fz.world == W and fz.sym_outputs == [2] and fz.shapes == [[W * Mc, K], [K, N], [Mc, N]]
    assert [(b.elements, b.symmetric, b.zero) for b in fz.buffers] == [(W, True, True), (2, False, True)]
    assert meta.tiles == W * plan_of(kop)["tiles_per_chunk"]
    names = [n for n, _ in meta.params()]
    assert names[-5:] == ["rank", "err", "timeout", "mbox", "trap"]
    assert names.count("alloc0_own") == 1 and "alloc0_p2" in names
    assert ScheduledKernelMeta.from_json(meta.to_json()) == meta


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
@pytest.mark.parametrize("case", SMALL, ids=lambda c: f"W{c[0]}_{c[4]}")
def test_assembles_without_spills_and_keeps_the_fused_pipeline(case):
    from pkc.codegen.ptxas import assemble_one
    from pkc.codegen.sass import check_reduce_scatter_pipeline, find_tool, sass

    W = case[0]
    ck, kop = compile_ir(*case)
    ptx = ck.ptx
    if W == 2:      # the fresh-output variant: stores into the peer's staging, no adds
        assert "cp.reduce.async" not in ptx and "add.rn.f32" in ptx
    else:
        assert "cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group" in ptx
    assert "red.release.sys.global.add.u32" in ptx and "ld.acquire.sys.global.u32" in ptx
    cubin, res = assemble_one(ptx)
    assert res.spill_stores == 0 and res.spill_loads == 0 and res.stack_bytes == 0
    if find_tool("cuobjdump"):
        assert check_reduce_scatter_pipeline(gemm_config_of(kop), W, W == 2, sass(cubin)) == []


def test_link_bound_tile_rule():
    from pkc.target import fused_tuning as ft

    # 128 x 128 at W = 2 where the partials outrun the GEMM; the GEMM's own pick where not
    cfg = ft.fused_gemm_config("rs", 8192, 4096, 512, 2, "bf16", "nk", 132)
    assert (cfg.bm, cfg.bn) == (ft.LINK_BOUND_TILE["bm"], ft.LINK_BOUND_TILE["bn"]) == (128, 128)
    assert ft.fused_gemm_config("rs", 8192, 8192, 8192, 2, "bf16", "nk", 132).bn == 256


def test_compile_kernel_refuses_another_target():
    from pkc.codegen.errors import CodegenError

    (kop,) = _kernels(scheduled_module(2, 199, 136, 72, "nk"))
    with pytest.raises(CodegenError, match="scheduled fused kernels lower to sm_90a and sm_100a"):
        compile_kernel(kop, "sm_80")
    # built for an sm_90a target (wgmma's register accumulators): sm_100a names the fix
    with pytest.raises(CodegenError, match=r"no sm_100a lowering; build the schedule for an "
                       r"sm_100a target"):
        compile_kernel(kop, "sm_100a")


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
def test_f16_kernel_assembles_without_spills():
    from pkc.codegen.ptxas import assemble_one

    ck, kop = compile_ir(3, 101, 200, 136, "nk", dt="f16")
    assert ck.meta.fused.dtype == "f16" and all(t.element == "f16" for t in ck.meta.tmaps)
    _, res = assemble_one(ck.ptx)
    assert res.spill_stores == 0 and res.spill_loads == 0 and res.stack_bytes == 0


def test_count_scopes_and_no_protocol_at_w1():
    """The own chunk's count is released at GPU scope (its stores and pad are this GPU's:
    the hand kernel's choice), a peer's at system scope; at W = 1 no peer reads a pad, so
    the kernel has no epoch, count or publication (the fixed cost measured in
    docs/PERF_NOTES.md 2026-12-02 (d))."""
    from pkc.dialects import schedule_comm as c

    (k3,) = _kernels(scheduled_module(3, 101, 200, 136, "kn"))
    scopes = sorted(op.scope.data for op in k3.walk() if isinstance(op, f.SignalAddOp))
    assert scopes == ["gpu", "gpu", "sys", "sys"]       # per tile and at the end
    assert any(isinstance(op, c.EpochOp) for op in k3.walk())
    (k1,) = _kernels(scheduled_module(1, 101, 200, 136, "nk"))
    assert not [op for op in k1.walk()
                if isinstance(op, (f.SignalAddOp, c.SignalWaitOp, c.EpochOp, c.EpochPublishOp))]
    assert any(isinstance(op, f.TmaStoreOrAddOp) for op in k1.walk())
