"""schedule-fused for the GEMM + all-reduce at W <= 2 and the W = 2 fresh-output GEMM +
reduce-scatter (pkc/passes/fused_ar_build.py, fused_ar_schedule.py): the decisions in
pk.plan and the remark (variant from the tuning table, the link-bound 128 x 128 tile),
the ops' verifiers, the launch metadata (row-window and alloc maps, fresh outputs) and
the PTX (ptxas, no spills). The kernels run in tests/unit/test_emu_fused_ar.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from xdsl.dialects import arith
from xdsl.dialects.builtin import IntegerAttr, bf16, i32
from xdsl.ir import Block
from xdsl.utils.exceptions import VerifyException

from pkc.codegen.abi import ScheduledKernelMeta
from pkc.codegen.ptxas import find_ptxas
from pkc.dialects import schedule as s
from pkc.dialects import schedule_fused as f
from pkc.dialects.types import SYMMETRIC, BufferType
from pkc.passes.remarks import plan_of, remarks_of
from pkc.target import fused_tuning as ft

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from fused_ar_ir import compile_ir, module_text  # noqa: E402


def _scheduled(kind, W, M, N, K, layout="nk", dt="bf16"):
    from pkc.dialects.kernel import KernelOp
    from pkc.ir import make_context, parse_module
    from pkc.passes.registry import parse_pipeline

    m = parse_module(module_text(kind, W, M, N, K, layout, dt), "t.mlir")
    ctx = make_context()
    for p in parse_pipeline("default{force=true},schedule-fused,dce"):
        p.apply(ctx, m)
    return [op for op in m.walk() if isinstance(op, KernelOp) and "pk.fusion" in op.attributes]


def test_w2_all_reduce_goes_to_a_fresh_output_with_chunk_windows():
    (kop,) = _scheduled("ar", 2, 137, 136, 72)
    plan = plan_of(kop)
    assert (plan["schedule"], plan["fused_kind"], plan["fresh_output"]) == ("fused", "ar", True)
    assert plan["chunk_rows"] == 69 and plan["comm_ctas"] == 0
    assert "rows 69/68" in remarks_of(kop)[-1] and "fresh output" in remarks_of(kop)[-1]
    out = kop.block.args[2]
    assert not out.type.symmetric
    maps = [op for op in kop.block.ops if isinstance(op, f.RowsTmapOp)]
    assert [(m.peer.data, m.first.data, m.rows.data) for m in maps] == [
        (-1, 0, 69), (-1, 69, 68), (0, 0, 69), (0, 69, 68), (1, 0, 69), (1, 69, 68)]
    assert sum(isinstance(op, f.AccAddSmemOp) for op in kop.walk()) == 2   # 2 pieces


def test_table_says_no_fresh_output_then_the_persistent_broadcast(monkeypatch):
    monkeypatch.setattr(ft, "AR_INTO_OUTPUT", False)
    monkeypatch.setattr(ft, "RS_INTO_OUTPUT", False)
    (ar,) = _scheduled("ar", 2, 137, 136, 72)
    assert plan_of(ar)["fresh_output"] is False and ar.block.args[2].type.symmetric
    assert any(isinstance(op, f.TmaStoreOrAddOp) for op in ar.walk())
    assert not any(isinstance(op, f.AccAddSmemOp) for op in ar.walk())
    (rs,) = _scheduled("rs", 2, 198, 136, 72)
    assert plan_of(rs)["fresh_output"] is False and "own chunk first" in remarks_of(rs)[-1]


def test_link_bound_shape_takes_the_128x128_tile():
    # 8192 x 8192 x 512 at W = 2: the partial's bytes take longer on the link than the GEMM
    (kop,) = _scheduled("ar", 2, 8192, 8192, 512)
    plan = plan_of(kop)
    assert plan["link_over_gemm"] >= ft.LINK_BOUND and plan["link_bound_tile"] is True
    assert (plan["bm"], plan["bn"]) == (128, 128)
    assert "link-bound" in remarks_of(kop)[-1]
    (gemm_bound,) = _scheduled("ar", 2, 4096, 4096, 4096)
    assert plan_of(gemm_bound)["link_bound_tile"] is False


@pytest.mark.parametrize("M,N,K,why", [
    (1, 136, 72, "1 rows cannot be split into 2 chunks"),
    (64, 100, 64, "N = 100 and K = 64 must be multiples of 8"),
])
def test_unschedulable_all_reduce_keeps_its_kernel_with_a_remark(M, N, K, why):
    (kop,) = _scheduled("ar", 2, M, N, K, "kn")
    assert kop.schedule() is None
    assert any(why in r for r in remarks_of(kop))


def test_verifiers_name_the_op():
    blk = Block(arg_types=[BufferType([64, 64], bf16), BufferType([64, 64], bf16, SYMMETRIC),
                           BufferType([64], bf16)])
    loc, sym, flat = blk.args
    t = s.TmapType("bf16", [64, 64], 128)
    f.RowsTmapOp(sym, 1, 0, 64, t).verify()
    f.RowsTmapOp(loc, -1, 32, 32, t).verify()
    with pytest.raises(VerifyException, match="'pks.rows_tmap' a peer's copy"):
        f.RowsTmapOp(loc, 0, 0, 64, t).verify()
    with pytest.raises(VerifyException, match="'pks.rows_tmap' rows 32..96 outside the 64 rows"):
        f.RowsTmapOp(sym, 0, 32, 64, t).verify()
    with pytest.raises(VerifyException, match="'pks.rows_tmap' rows of a 2-D buffer"):
        f.RowsTmapOp(flat, -1, 0, 1, t).verify()
    zero = arith.ConstantOp(IntegerAttr(0, i32)).result
    acc = s.AccAllocOp(64, 128)
    smem = s.SmemAllocOp(2, 8192)
    f.AccAddSmemOp(acc.result, smem.result, zero, 0, 64, 64, "bf16").verify()
    with pytest.raises(VerifyException, match="'pks.acc_add_smem' slice 0 columns 128..192"):
        f.AccAddSmemOp(acc.result, smem.result, zero, 0, 128, 64, "bf16").verify()
    with pytest.raises(VerifyException, match="'pks.acc_add_smem' dtype 'f32'"):
        f.AccAddSmemOp(acc.result, smem.result, zero, 0, 0, 64, "f32").verify()
    small = s.SmemAllocOp(2, 4096)
    with pytest.raises(VerifyException, match="'pks.acc_add_smem' a 64x64 piece does not fit"):
        f.AccAddSmemOp(acc.result, small.result, zero, 0, 0, 64, "bf16").verify()


def test_launch_metadata_of_the_fresh_output_kernels():
    ck, kop = compile_ir("ar", 2, 137, 136, 72, "nk")
    fz = ck.meta.fused
    assert fz.inputs == 2 and fz.sym_outputs == [] and fz.shapes[2] == [137, 136]
    rows = [(t.buffer, t.peer, t.alloc, t.rows) for t in ck.meta.tmaps[2:]]
    assert rows == [(2, -1, False, [0, 69, 136]), (2, -1, False, [69, 68, 136]),
                    (2, 0, True, [0, 69, 136]), (2, 0, True, [69, 68, 136]),
                    (2, 1, True, [0, 69, 136]), (2, 1, True, [69, 68, 136])]
    # the accumulator: alloc 2, symmetric, never zeroed (every element is stored first)
    assert [(b.elements, b.symmetric, b.zero) for b in fz.buffers] == [
        (4, True, True), (2, False, True), (137 * 136, True, False)]
    assert ScheduledKernelMeta.from_json(ck.meta.to_json()) == ck.meta
    ck, kop = compile_ir("rs", 2, 198, 136, 72, "kn")
    assert ck.meta.fused.sym_outputs == [] and ck.meta.tiles == 2 * plan_of(kop)["tiles_per_chunk"]
    assert [t.rows for t in ck.meta.tmaps if t.alloc] == [[0, 99, 136], [99, 99, 136]] * 2


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
@pytest.mark.parametrize("kind,W,M,N,K,layout,dt", [
    ("ar", 1, 137, 136, 72, "nk", "bf16"), ("ar", 2, 333, 264, 136, "kn", "bf16"),
    ("rs", 2, 198, 200, 136, "nk", "f16"), ("ar", 2, 4096, 4096, 4096, "nk", "bf16"),
], ids=["ar1", "ar2_kn", "rs2_f16", "ar2_128x256"])
def test_assembles_without_spills(kind, W, M, N, K, layout, dt):
    from pkc.codegen.ptxas import assemble_one

    ck, kop = compile_ir(kind, W, M, N, K, layout, dt)
    _, res = assemble_one(ck.ptx)
    assert res.spill_stores == 0 and res.spill_loads == 0 and res.stack_bytes == 0
    if plan_of(kop)["fresh_output"]:
        assert f"cvt.rn.{dt}x2.f32" in ck.ptx and "add.rn.f32" in ck.ptx
