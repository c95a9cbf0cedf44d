"""pkc.mlir_ints: plain integers (IntAttr) print as MLIR's `N : i64` in the generic form
and read back as IntAttr where an op's definition asks for one, nowhere else."""

import shutil
import subprocess

import pytest
from xdsl.dialects.builtin import (
    ArrayAttr, DictionaryAttr, IntAttr, IntegerAttr, StringAttr, UnregisteredOp, i64,
)

from pkc.ir import PkcDiagnostic, make_context, parse_module, print_module, verify_module
from pkc.mlir_ints import retype_integer_attributes, to_mlir_integers

# A pks op with optional IntAttr attributes, an ArrayAttr[IntAttr] one, an arith constant
# (an IntegerAttr by definition) and an unregistered op, in MLIR's generic form.
GENERIC = """\
"builtin.module"() ({
  "func.func"() <{function_type = (!pk.buffer<256x64xbf16>, i32) -> (), sym_name = "f"}> ({
  ^bb0(%b: !pk.buffer<256x64xbf16>, %p: i32):
    %m = "pks.mbarrier_alloc"() {count = 6 : i64, arrivals = 1 : i64} : () -> !pks.mbarriers<6, 1>
    "pks.mbarrier_arrive"(%m, %p) <{operandSegmentSizes = array<i32: 1, 1, 0>}> {tx_bytes = 32768 : i64} : (!pks.mbarriers<6, 1>, i32) -> ()
    %t = "pks.tmap_view"(%b) {dims = [4, 64, 64]} : (!pk.buffer<256x64xbf16>) -> !pks.tmap<bf16, 64x128x1, swizzle 128>
    %c = "arith.constant"() <{value = 7 : i64}> : () -> i64
    "mystery.op"() {level = 3 : i64} : () -> ()
    "func.return"() : () -> ()
  }) : () -> ()
}) : () -> ()
"""


def _ops(module, name):
    def name_of(op):
        return op.op_name.data if isinstance(op, UnregisteredOp) else op.name
    return [op for op in module.walk() if name_of(op) == name]


def test_generic_text_reads_back_as_int_attr_where_defined():
    module = parse_module(GENERIC, "t.mlir", ctx=make_context(allow_unregistered=True))
    verify_module(module)
    (arrive,) = _ops(module, "pks.mbarrier_arrive")
    assert arrive.attributes["tx_bytes"] == IntAttr(32768)
    (view,) = _ops(module, "pks.tmap_view")
    assert view.attributes["dims"] == ArrayAttr([IntAttr(4), IntAttr(64), IntAttr(64)])
    # Integers an op's definition wants as IntegerAttr, and those of an op pkc does not
    # know, are left as they are.
    (const,) = _ops(module, "arith.constant")
    assert const.properties["value"] == IntegerAttr(7, i64)
    (opaque,) = _ops(module, "mystery.op")
    assert opaque.attributes["level"] == IntegerAttr(3, i64)


def test_generic_print_has_no_builtin_int_and_custom_print_is_unchanged():
    module = parse_module(GENERIC, "t.mlir", ctx=make_context(allow_unregistered=True))
    generic = print_module(module, generic=True)
    assert "#builtin.int" not in generic
    assert "{tx_bytes = 32768 : i64}" in generic
    assert "{dims = [4 : i64, 64 : i64, 64 : i64]}" in generic
    custom = print_module(module)
    assert "{tx_bytes = #builtin.int<32768>}" in custom
    # Printing the generic form did not change the IR itself.
    assert _ops(module, "pks.mbarrier_arrive")[0].attributes["tx_bytes"] == IntAttr(32768)
    # The generic text reads back to the same IR (same text again).
    again = parse_module(generic, "t2.mlir", ctx=make_context(allow_unregistered=True))
    assert print_module(again, generic=True) == generic


def test_a_wrong_kind_of_value_is_left_to_the_verifier():
    text = GENERIC.replace("{tx_bytes = 32768 : i64}", '{tx_bytes = "many"}')
    module = parse_module(text, "t.mlir", ctx=make_context(allow_unregistered=True))
    with pytest.raises(PkcDiagnostic, match="pks.mbarrier_arrive"):
        verify_module(module)
    # A float where dims wants integers: a diagnostic, not pkc's internal error.
    text = GENERIC.replace("{dims = [4, 64, 64]}", "{dims = [4.0 : f32]}")
    module = parse_module(text, "t.mlir", ctx=make_context(allow_unregistered=True))
    with pytest.raises(PkcDiagnostic, match="pks.tmap_view"):
        verify_module(module)


def test_to_mlir_integers_nests_and_refuses_what_i64_cannot_hold():
    attr = DictionaryAttr({"a": ArrayAttr([IntAttr(1), StringAttr("x")]), "b": IntAttr(-2)})
    assert to_mlir_integers(attr) == DictionaryAttr(
        {"a": ArrayAttr([IntegerAttr(1, i64), StringAttr("x")]), "b": IntegerAttr(-2, i64)})
    same = ArrayAttr([StringAttr("x")])
    assert to_mlir_integers(same) is same
    with pytest.raises(ValueError, match="'pks.x' attribute 'n'.*i64"):
        to_mlir_integers(IntAttr(2**63), "'pks.x' attribute 'n'")


def test_retype_counts_only_what_it_changed():
    module = parse_module(GENERIC, "t.mlir", ctx=make_context(allow_unregistered=True))
    assert retype_integer_attributes(module) == 0  # parse_module already did it


@pytest.mark.skipif(shutil.which("mlir-opt-22") is None, reason="needs mlir-opt-22")
def test_ptx_level_ir_round_trips_through_mlir_opt():
    """The ptx-dialect IR that --dump-kernels writes (CompiledKernel.ptx_ir) is read by
    upstream mlir-opt and, with the ptx dialect loaded, by pkc again, unchanged."""
    from pkc.codegen import compile_module
    from pkc.codegen.ptx import PTX
    from pkc.passes.registry import run_pipeline

    src = """
    func.func @linear(%x: tensor<256x128xbf16>, %w: tensor<128x256xbf16>) -> tensor<256x256xbf16> {
      %y = pk.matmul %x, %w : (tensor<256x128xbf16>, tensor<128x256xbf16>) -> tensor<256x256xbf16>
      func.return %y : tensor<256x256xbf16>
    }"""
    module = parse_module(src)
    run_pipeline("schedule-matmul,dce", module)
    (kernel,) = compile_module(module, "sm_90a").values()
    text = kernel.ptx_ir()
    assert "#builtin.int" not in text

    def mlir_opt(t):
        done = subprocess.run(["mlir-opt-22", "--allow-unregistered-dialect",
                               "--mlir-print-op-generic"], input=t, capture_output=True,
                              text=True, check=False)
        assert done.returncode == 0, done.stderr
        return done.stdout

    ref = mlir_opt(text)
    back = parse_module(ref, "ptx.mlir", ctx=make_context(extra_dialects=[PTX]))
    verify_module(back)
    assert mlir_opt(print_module(back, generic=True)) == ref
