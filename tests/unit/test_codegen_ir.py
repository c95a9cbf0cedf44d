"""The ptx dialect, the printer, shared-memory planning and the lowering's errors (no
ptxas needed)."""

from __future__ import annotations

import io

import pytest
from xdsl.context import Context
from xdsl.dialects.builtin import Builtin
from xdsl.parser import Parser

from pkc.codegen import CodegenError, compile_kernel, emit_ptx
from pkc.codegen.emit import kernels_of
from pkc.codegen.lower import default_sms
from pkc.codegen.ptx import PTX
from pkc.codegen.smem import HEADER_BYTES, SmemPlan
from pkc.ir import parse_module, verify_module
from pkc.mlir_ints import GenericPrinter, retype_integer_attributes
from tests.gpu import kernels as K
from tests.gpu.irgen import kernel_function, tile


def _module(text, name="t.mlir"):
    m = parse_module(text, name)
    verify_module(m)
    return m


def test_ptx_ir_verifies_and_round_trips_in_generic_form():
    ck = compile_kernel(kernels_of(_module(K.unit_all_reduce(2, "bf16").ir))[0], "sm_90a")
    ck.entry_op.verify()
    text = ck.ptx_ir()
    assert '"ptx.spin_wait"' in text and '"ptx.red"' in text
    ctx = Context()
    ctx.load_dialect(Builtin)
    ctx.load_dialect(PTX)
    op = Parser(ctx, text).parse_op()
    # The generic form's plain integers are MLIR's `N : i64` (so that mlir-opt reads it);
    # pkc's boundary reads them back as the IntAttr the ops define (pkc.mlir_ints).
    assert "#builtin.int" not in text and "maxntid = 128 : i64" in text
    assert retype_integer_attributes(op) > 0
    op.verify()
    s = io.StringIO()
    GenericPrinter(stream=s, print_generic_format=True).print_op(op)
    assert s.getvalue() == text


def test_emit_ptx_gives_one_module_per_kernel_with_unique_names():
    m = _module(K.unit_all_reduce(2, "f16").ir + K.unit_all_reduce(2, "f32").ir.replace("@main", "@other"))
    out = emit_ptx(m, "sm_80")
    assert list(out) == ["all_reduce_one_shot", "all_reduce_one_shot_1"]
    for name, text in out.items():
        assert ".target sm_80" in text and f".visible .entry {name}(" in text
        # every register kind used is declared
        assert ".reg .b32 %r<" in text and ".reg .pred %p<" in text


def test_targets_differ_where_they_should():
    kop = kernels_of(_module(K.put_add(2, 40, 96, "bf16").ir))[0]
    assert "cp.reduce.async.bulk" in compile_kernel(kop, "sm_90a").ptx
    assert "cp.reduce.async.bulk" in compile_kernel(kop, "sm_100a").ptx
    portable = compile_kernel(kop, "sm_80").ptx
    assert "cp.async.bulk" not in portable and "atom.relaxed.sys.global.cas.b32" in portable
    assert "red.relaxed.sys.global.add.noftz.bf16" in compile_kernel(kop, "sm_90a", bulk=False).ptx


def test_smem_plan_reuses_dead_tiles():
    def body(ir, ins, outs):
        with ir.worker("compute"):
            tt = tile([32, 32], "f32")
            a = ir.load(ins[0], "!pk.buffer<32x32xf32>", [0, 0], tt)
            b = ir.map("neg", [a], [tt], tt)        # a dies here
            c = ir.map("abs", [b], [tt], tt)        # can take a's slot
            ir.store(c, tt, outs[0], "!pk.buffer<32x32xf32>", [0, 0])

    m = _module(kernel_function("reuse", 1, [([32, 32], "f32")], [([32, 32], "f32", False)], body))
    worker = kernels_of(m)[0].workers()[0]
    plan = SmemPlan(worker)
    offs = {v.name_hint: s.offset for v, s in plan.slots.items()}
    assert len(set(offs.values())) == 2, offs
    assert plan.bytes == HEADER_BYTES + 2 * 32 * 32 * 4


def test_loop_carried_tile_shares_one_slot():
    m = _module(K.all_reduce(2, 64, 64, "bf16").ir)
    for w in kernels_of(m)[0].workers():
        plan = SmemPlan(w)
        from xdsl.dialects import scf

        for op in w.walk():
            if isinstance(op, scf.ForOp) and op.results:
                arg = op.body.blocks[0].args[1]
                assert plan[arg].offset == plan[op.results[0]].offset


def test_default_sm_split():
    m = _module(K.gemm_rs(2, 72, 80, 96, "bf16").ir.replace(" attributes {sms = 24 : i64}", "")
                .replace(" attributes {sms = 8 : i64}", ""))
    split = default_sms(kernels_of(m)[0].workers(), 132)
    assert split == [(116, False), (16, False)]


def test_too_much_shared_memory_is_a_clear_error():
    def body(ir, ins, outs):
        with ir.worker("compute"):
            tt = tile([256, 256], "f32")
            t = ir.load(ins[0], "!pk.buffer<256x256xf32>", [0, 0], tt)
            ir.store(t, tt, outs[0], "!pk.buffer<256x256xf32>", [0, 0])

    m = _module(kernel_function("too_big", 1, [([256, 256], "f32")], [([256, 256], "f32", False)], body))
    with pytest.raises(CodegenError, match=r"kernel @too_big needs 262272 bytes of shared memory.*sm_90a allows \(232448\)"):
        emit_ptx(m, "sm_90a")


def test_op_without_lowering_names_the_op():
    def body(ir, ins, outs):
        with ir.worker("compute"):
            tt = tile([4, 4], "i1")
            t = ir.load(ins[0], "!pk.buffer<4x4xi1>", [0, 0], tt)
            r = ir.reduce("sum", t, tt, [1], True, tile([4, 1], "i1"))
            ir.store(r, tile([4, 1], "i1"), outs[0], "!pk.buffer<4x1xi1>", [0, 0])

    m = _module(kernel_function("bools", 1, [([4, 4], "i1")], [([4, 1], "i1", False)], body))
    with pytest.raises(CodegenError, match="pk.tile_reduce"):
        emit_ptx(m, "sm_80")


def test_unknown_target():
    m = _module(K.unit_all_reduce(2, "f32").ir)
    with pytest.raises(CodegenError, match="unknown PTX target 'sm_75'"):
        emit_ptx(m, "sm_75")
