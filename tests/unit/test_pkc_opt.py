"""pkc-opt, pkc.ir and the pass registry, tested in-process through ``main([...])``."""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap
import types
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from xdsl.dialects.builtin import FileLineColLoc, ModuleOp, StringAttr
from xdsl.dialects.func import FuncOp
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import VerifyException

import pkc.passes
from pkc import ir
from pkc.ir import PkcDiagnostic, make_context, parse_module, print_module, verify_module
from pkc.passes import registry
from pkc.passes.registry import (
    PassLoadError,
    PipelineError,
    available_passes,
    parse_pipeline,
    register_pass,
)
from pkc.tools import pkc_opt
from pkc.tools.pkc_opt import main

REPO = Path(__file__).resolve().parents[2]

ADD = """\
func.func @f(%a: i32, %b: i32) -> i32 {
  %c = arith.addi %a, %b : i32
  %d = arith.addi %a, %b : i32
  %e = arith.muli %c, %d : i32
  func.return %e : i32
}
"""

BAD_RETURN = """\
func.func @f() -> i32 {
  func.return
}
"""


@pytest.fixture
def clean_registry():
    """Register throw-away passes in a test without leaking them into other tests."""
    saved = dict(registry._PK_PASSES)
    saved_loaded = registry._loaded
    yield
    registry._PK_PASSES.clear()
    registry._PK_PASSES.update(saved)
    registry._loaded = saved_loaded


@pytest.fixture
def write(tmp_path):
    def write(text: str, name: str = "input.mlir") -> str:
        path = tmp_path / name
        path.write_text(text)
        return str(path)

    return write


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# --------------------------------------------------------------------------------------
# Printing and parsing
# --------------------------------------------------------------------------------------


def test_round_trip_is_stable(capsys, write):
    code, out, err = run(capsys, write(ADD))
    assert code == 0 and err == ""
    assert "%e = arith.muli %c, %d : i32" in out
    code, out2, _ = run(capsys, write(out, "again.mlir"))
    assert code == 0 and out2 == out


def test_generic_form_and_back(capsys, write):
    code, out, _ = run(capsys, write(ADD), "--print-op-generic")
    assert code == 0
    assert out.startswith('"builtin.module"() ({')
    assert '"arith.addi"(%a, %b)' in out
    assert "loc(" not in out
    code, custom, _ = run(capsys, write(out, "generic.mlir"))
    assert code == 0
    assert "%c = arith.addi %a, %b : i32" in custom


def test_locations_recorded_but_not_printed():
    module = parse_module(ADD, "a.mlir")
    func = next(iter(module.ops))
    assert func.location == FileLineColLoc(StringAttr("a.mlir"), *_ints(1, 1))
    ret = list(func.body.block.ops)[-1]
    assert ir.op_position(ret) == ("a.mlir", 5, 3)
    assert "loc(" not in print_module(module)
    assert "loc(" not in print_module(module, generic=True)


def _ints(*values):
    from xdsl.dialects.builtin import IntAttr

    return [IntAttr(v) for v in values]


def test_explicit_source_location_wins():
    text = 'func.func @f() {\n  func.return loc("model.py":12:5)\n}\n'
    module = parse_module(text, "a.mlir")
    ret = list(next(iter(module.ops)).body.block.ops)[0]
    assert ir.op_position(ret) == ("model.py", 12, 5)


def test_first_line_offsets_positions():
    module = parse_module("func.func @f() {\n  func.return\n}\n", "a.mlir", first_line=10)
    ret = list(next(iter(module.ops)).body.block.ops)[0]
    assert ir.op_position(ret) == ("a.mlir", 11, 3)


def test_empty_input_is_empty_module(capsys, write):
    module = parse_module("// only a comment\n", "e.mlir")
    assert isinstance(module, ModuleOp) and not list(module.ops)
    code, out, _ = run(capsys, write("\n"))
    assert code == 0 and out.startswith("builtin.module {")


def test_verify_module_names_op_and_position():
    module = parse_module(BAD_RETURN, "bad.mlir")
    with pytest.raises(PkcDiagnostic) as info:
        verify_module(module, source=BAD_RETURN, filename="bad.mlir")
    diag = info.value
    assert (diag.file, diag.line, diag.col) == ("bad.mlir", 2, 3)
    assert diag.message.startswith("'func.return' op Expected arguments")
    assert str(diag).splitlines() == [
        "bad.mlir:2:3: error: 'func.return' op Expected arguments to have the same types "
        "as the function output types: expected [i32], got []",
        "  func.return",
        "  ^",
    ]


def test_empty_block_is_rejected_like_xdsl_full_verify():
    module = parse_module("func.func @f() {\n^bb0:\n}\n", "e.mlir")
    with pytest.raises(VerifyException, match="contains empty block"):
        module.verify()  # xDSL's own check, which verify_nested_ops=False skips
    with pytest.raises(PkcDiagnostic, match="'func.func' op contains empty block"):
        verify_module(module)


def test_diagnostic_at_names_the_op_once():
    module = parse_module(BAD_RETURN, "d.mlir")
    func = next(iter(module.ops))
    assert ir.diagnostic_at(func, "bad thing").message == "'func.func' op bad thing"
    # A verifier that already names its op is not prefixed a second time.
    assert ir.diagnostic_at(func, "'func.func' bad thing").message == "'func.func' bad thing"
    assert (
        ir.diagnostic_at(func, "line one\n  line two").message == "'func.func' op line one line two"
    )


def test_parse_error_is_a_diagnostic_with_caret():
    with pytest.raises(PkcDiagnostic) as info:
        parse_module("func.func @f(%a: i32) {\n  %c = arith.addi %a : i32\n}\n", "s.mlir")
    diag = info.value
    assert (diag.line, diag.col, diag.message) == (2, 22, "Expected ','")
    assert diag.snippet == "  %c = arith.addi %a : i32\n                     ^"


def test_make_context_dialects():
    ctx = make_context()
    for name in ("builtin", "func", "arith", "scf"):
        assert name in ctx.registered_dialect_names
    assert not ctx.allow_unregistered
    assert make_context(allow_unregistered=True).allow_unregistered


def test_missing_pk_dialect_is_tolerated(monkeypatch):
    monkeypatch.setitem(sys.modules, "pkc.dialects", types.ModuleType("pkc.dialects"))
    assert ir.load_pk_dialect() is None
    ctx = make_context()
    assert "pk" not in ctx.registered_dialect_names
    with pytest.raises(PkcDiagnostic, match="dialect 'pk' is not registered"):
        parse_module('"pk.matmul"() : () -> ()\n', "p.mlir", ctx=ctx)


def test_broken_pk_dialect_is_not_hidden(monkeypatch):
    class Broken(types.ModuleType):
        def __getattr__(self, name):
            raise RuntimeError("dialect definition bug")

    monkeypatch.setitem(sys.modules, "pkc.dialects", Broken("pkc.dialects"))
    with pytest.raises(RuntimeError, match="dialect definition bug"):
        make_context()


# --------------------------------------------------------------------------------------
# Diagnostics from the tool
# --------------------------------------------------------------------------------------


def test_syntax_error_one_diagnostic(capsys, write):
    path = write("func.func @f(%a: i32) {\n  %c = arith.addi %a : i32\n}\n")
    code, out, err = run(capsys, path)
    assert code == 1 and out == ""
    lines = err.splitlines()
    assert lines[0] == f"{path}:2:22: error: Expected ','"
    assert lines[1:] == ["  %c = arith.addi %a : i32", "                     ^"]
    assert "Traceback" not in err


def test_unknown_op_and_unknown_dialect(capsys, write):
    code, _, err = run(capsys, write("func.func @f() {\n  arith.frob\n}\n"))
    assert code == 1
    assert ":2:3: error: unknown operation 'arith.frob': dialect 'arith' has no such op" in err
    code, _, err = run(capsys, write('"foo.bar"() : () -> ()\n'))
    assert code == 1
    assert ":1:1: error: unknown operation 'foo.bar': dialect 'foo' is not registered" in err
    assert err.count("error:") == 1


def test_allow_unregistered_dialect(capsys, write):
    path = write('"foo.bar"() {x = 1 : i64} : () -> ()\n')
    code, out, _ = run(capsys, path, "--allow-unregistered-dialect")
    assert code == 0 and '"foo.bar"() {x = 1 : i64} : () -> ()' in out


def test_verifier_error(capsys, write):
    path = write(BAD_RETURN)
    code, out, err = run(capsys, path)
    assert code == 1 and out == ""
    assert err.startswith(f"{path}:2:3: error: 'func.return' op Expected arguments")
    assert err.count("error:") == 1


def test_missing_file(capsys, tmp_path):
    code, out, err = run(capsys, str(tmp_path / "nope.mlir"))
    assert code == 1 and out == ""
    assert (
        err
        == f"pkc-opt: error: could not open input file '{tmp_path / 'nope.mlir'}': no such file\n"
    )


def test_bad_flag_exits_1(capsys):
    code, _, err = run(capsys, "--bogus")
    assert code == 1
    assert err.startswith("pkc-opt: error: unrecognized arguments: --bogus")


def test_unknown_pass(capsys, write):
    code, out, err = run(capsys, write(ADD), "-p", "cse,nosuch")
    assert code == 1 and out == ""
    assert err.startswith(
        "pkc-opt: error: unknown pass 'nosuch'; available passes: canonicalize, cse, dce"
    )
    assert err.count("\n") == 1


def test_bad_pass_option(capsys, write):
    code, _, err = run(capsys, write(ADD), "-p", "cse{bogus=1}")
    assert code == 1
    assert "bad options for pass 'cse'" in err and "bogus" in err


def test_internal_error_exit_2(capsys, write, monkeypatch):
    def boom(*args, **kwargs):
        raise ZeroDivisionError("oops")

    monkeypatch.setattr(pkc_opt, "emit_output", boom)
    monkeypatch.delenv("PKC_DEBUG", raising=False)
    code, _, err = run(capsys, write(ADD))
    assert code == 2
    assert err.startswith("pkc-opt: internal error: ZeroDivisionError: oops\n")
    assert "Traceback" not in err
    monkeypatch.setenv("PKC_DEBUG", "1")
    code, _, err = run(capsys, write(ADD))
    assert code == 2 and "Traceback" in err


# --------------------------------------------------------------------------------------
# Flags
# --------------------------------------------------------------------------------------


def test_stdin_and_output_file(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "stdin", io.StringIO(ADD))
    out_path = tmp_path / "out.mlir"
    code, out, err = run(capsys, "-", "-o", str(out_path))
    assert code == 0 and out == "" and err == ""
    assert "arith.muli" in out_path.read_text()
    monkeypatch.setattr(sys, "stdin", io.StringIO(BAD_RETURN))
    code, out, err = run(capsys, "-o", str(tmp_path / "not-written.mlir"))
    assert code == 1 and err.startswith("<stdin>:2:3: error:")
    assert not (tmp_path / "not-written.mlir").exists()


def test_split_input_file(capsys, write):
    text = "func.func @a() {\n  func.return\n}\n// -----\nfunc.func @b() {\n  func.return\n}\n"
    code, out, _ = run(capsys, write(text), "--split-input-file")
    assert code == 0
    chunks = out.split("// -----\n")
    assert len(chunks) == 2
    assert "@a" in chunks[0] and "@b" not in chunks[0]
    assert "@b" in chunks[1] and chunks[1].startswith("builtin.module {")
    code, out, _ = run(capsys, write(text))  # without the flag: one module
    assert code == 0 and "// -----" not in out and "@a" in out and "@b" in out


def test_split_input_file_errors_use_file_lines(capsys, write):
    text = "func.func @a() {\n  func.return\n}\n// -----\n" + BAD_RETURN
    path = write(text)
    code, out, err = run(capsys, path, "--split-input-file")
    assert code == 1
    assert err.startswith(f"{path}:6:3: error: 'func.return' op")
    assert "@a" in out  # the good chunk is still printed to stdout


def test_print_ir_after_all(capsys, write):
    code, out, err = run(capsys, write(ADD), "-p", "cse,dce", "--print-ir-after-all")
    assert code == 0
    assert "IR Dump" not in out
    headers = [line for line in err.splitlines() if "IR Dump" in line]
    assert headers == [
        "// -----// IR Dump After cse //----- //",
        "// -----// IR Dump After dce //----- //",
    ]
    after_cse = err.split("// -----// IR Dump After dce //----- //\n")[0]
    assert "%d = arith.addi" not in after_cse and "%e = arith.muli %c, %c" in after_cse


def test_print_ir_after_name(capsys, write):
    code, _, err = run(capsys, write(ADD), "-p", "cse,dce,cse", "--print-ir-after=dce")
    assert code == 0
    assert err.count("IR Dump After") == 1 and "IR Dump After dce" in err
    code, _, err = run(capsys, write(ADD), "-p", "cse", "--print-ir-after=nosuch")
    assert code == 1 and "--print-ir-after: unknown pass 'nosuch'" in err


def test_timing(capsys, write):
    code, out, err = run(capsys, write(ADD), "-p", "cse,cse", "--timing")
    assert code == 0 and "Execution time report" not in out
    names = [line.split("%)")[-1].strip() for line in err.splitlines() if "%)" in line]
    assert names == [
        "Start-up (Python, imports)",  # the time before main ran counts too (issue 19)
        "Context (dialect loading)",
        "Parser",
        "Verifier",
        "cse",
        "cse (2)",
        "Output",
        "Rest",
        "Total",
    ]
    assert "Total Execution Time:" in err
    assert err.splitlines()[-1].strip().endswith("(100.0%)  Total")


def test_help_lists_passes_and_options(capsys, clean_registry):
    @register_pass
    @dataclass(frozen=True)
    class HelpProbe(ModulePass):
        """Probe pass for the --help test.

        Second paragraph, not shown."""

        name = "help-probe"
        width: int = 4
        label: str | None = None

        def apply(self, ctx, op):
            pass

    code, out, _ = run(capsys, "--help")
    assert code == 0
    assert "--print-ir-after-all" in out and "--verify-diagnostics" in out
    lines = out.splitlines()
    [probe] = [i for i, line in enumerate(lines) if line.strip().startswith("help-probe")]
    assert lines[probe].split(None, 1)[1] == "Probe pass for the --help test."
    assert lines[probe + 1].strip() == "option width: int = 4"
    assert lines[probe + 2].strip() == "option label: str | None = none"
    assert any(line.strip().startswith("cse ") for line in lines)


# --------------------------------------------------------------------------------------
# --verify-diagnostics
# --------------------------------------------------------------------------------------

VERIFY_OK = """\
func.func @next() -> i32 {
  // expected-error @+1 {{'func.return' op Expected arguments}}
  func.return
}
// -----
func.func @prev() -> i32 {
  func.return
  // expected-error@-1 {{expected [i32], got []}}
}
// -----
func.func @above() -> i32 {
  func.return
  // expected-error @above {{'func.return' op}}
  // expected-remark @above {{annotations of other severities are parsed too}}
}
// -----
// expected-error @below {{dialect 'foo' is not registered}}
"foo.bar"() : () -> ()
// -----
func.func @same(%a: i32) {
  %c = arith.addi %a : i32 // expected-error {{Expected ','}}
}
// -----
// expected-error-re @+1 {{unknown operation 'arith.{{fro+b}}'}}
arith.froob
// -----
func.func @fine() {
  func.return
}
"""


def test_verify_diagnostics_pass(capsys, write):
    text = VERIFY_OK.replace(
        "  // expected-remark @above {{annotations of other severities are parsed too}}\n", ""
    )
    code, out, err = run(capsys, write(text), "--split-input-file", "--verify-diagnostics")
    assert (code, err) == (0, "")
    # Output of the one good chunk only; separators for all seven chunks.
    assert out.count("// -----") == 6 and out.count("builtin.module") == 1 and "@fine" in out


def test_verify_diagnostics_missing_remark_fails(capsys, write):
    path = write(VERIFY_OK)
    code, _, err = run(capsys, path, "--split-input-file", "--verify-diagnostics")
    assert code == 1
    assert err == (
        f'{path}:14:6: error: expected remark "annotations of other severities are parsed '
        'too" was not produced on line 12\n'
    )


def test_verify_diagnostics_missing_error_fails(capsys, write):
    path = write("func.func @f() {\n  // expected-error @+1 {{never}}\n  func.return\n}\n")
    code, out, err = run(capsys, path, "--verify-diagnostics")
    assert code == 1
    assert err == f'{path}:2:6: error: expected error "never" was not produced on line 3\n'
    assert "func.func @f()" in out


def test_verify_diagnostics_wrong_line_and_unexpected(capsys, write):
    path = write(
        "func.func @f() -> i32 {\n  // expected-error {{Expected arguments}}\n  func.return\n}\n"
    )
    code, _, err = run(capsys, path, "--verify-diagnostics")
    assert code == 1
    lines = err.splitlines()
    assert lines[0].startswith(f"{path}:3:3: error: unexpected error: 'func.return' op Expected")
    assert (
        lines[1]
        == f'{path}:2:6: error: expected error "Expected arguments" was not produced on line 2'
    )


def test_verify_diagnostics_below_at_end(capsys, write):
    path = write("func.func @f() {\n  func.return\n}\n// expected-error @below {{x}}\n")
    code, _, err = run(capsys, path, "--verify-diagnostics")
    assert code == 1 and f"{path}:4:4: @below with no line below it" in err


def test_expectation_parsing():
    chunk = pkc_opt.Chunk(
        "a\n// expected-error@+2 {{m1}}\n// expected-warning @below {{m2}}\nb\n", 10
    )
    expected, problems = pkc_opt.parse_expectations(chunk)
    assert problems == []
    assert [(e.severity, e.message, e.line, e.at_line) for e in expected] == [
        ("error", "m1", 13, 11),
        ("warning", "m2", 13, 12),
    ]


# --------------------------------------------------------------------------------------
# Pass registry and pipelines
# --------------------------------------------------------------------------------------


def test_generic_passes_available():
    passes = available_passes()
    for name in ("canonicalize", "cse", "dce"):
        assert passes[name]().name == name


def test_parse_pipeline_with_options(clean_registry):
    @register_pass
    @dataclass(frozen=True)
    class OptProbe(ModulePass):
        name = "opt-probe"
        opt: int = 0
        other: str = "a"
        sizes: tuple[int, ...] = ()

        def apply(self, ctx, op):
            pass

    a, b, c = parse_pipeline("cse,opt-probe{opt=1 other=x},opt-probe{sizes=1,2,3}")
    assert a.name == "cse"
    assert (b.opt, b.other) == (1, "x")
    assert c.sizes == (1, 2, 3) and c.opt == 0
    with pytest.raises(
        PipelineError, match=r"bad options for pass 'opt-probe'.*its options: opt: int = 0"
    ):
        parse_pipeline("opt-probe{opt=notanint}")
    with pytest.raises(
        PipelineError,
        match=r"unknown pass 'opt-prob' \(did you mean 'opt-probe'\?\); available passes: .*opt-probe",
    ):
        parse_pipeline("opt-prob")
    with pytest.raises(PipelineError, match=r"invalid pass pipeline 'cse dce' at column 4"):
        parse_pipeline("cse dce")
    assert parse_pipeline("") == []


def test_register_pass_validation(clean_registry):
    class NotKebab(ModulePass):
        name = "NotKebab"

        def apply(self, ctx, op):
            pass

    with pytest.raises(ValueError, match="kebab-case"):
        register_pass(NotKebab)

    class NotADataclass(ModulePass):
        name = "not-a-dataclass"
        opt: int = 1

        def apply(self, ctx, op):
            pass

    with pytest.raises(TypeError, match="not a dataclass"):
        register_pass(NotADataclass)

    class TakesXdslName(ModulePass):
        name = "cse"

        def apply(self, ctx, op):
            pass

    with pytest.raises(ValueError, match="taken by the generic xDSL pass"):
        register_pass(TakesXdslName)

    class First(ModulePass):
        name = "dup-probe"

        def apply(self, ctx, op):
            pass

    class Second(ModulePass):
        name = "dup-probe"

        def apply(self, ctx, op):
            pass

    register_pass(First)
    register_pass(First)  # idempotent
    with pytest.raises(ValueError, match="registered twice"):
        register_pass(Second)
    with pytest.raises(TypeError):
        register_pass(int)  # type: ignore[arg-type]


def test_pass_modules_are_discovered_lazily(clean_registry, tmp_path, monkeypatch):
    (tmp_path / "probe_discovered.py").write_text(
        textwrap.dedent('''
        from dataclasses import dataclass
        from xdsl.passes import ModulePass
        from pkc.passes.registry import register_pass

        @register_pass
        @dataclass(frozen=True)
        class Discovered(ModulePass):
            """Found by scanning the package."""
            name = "probe-discovered"
            def apply(self, ctx, op):
                pass
    ''')
    )
    monkeypatch.setattr(pkc.passes, "__path__", [*pkc.passes.__path__, str(tmp_path)])
    monkeypatch.delitem(sys.modules, "pkc.passes.probe_discovered", raising=False)
    registry._loaded = False
    assert "probe-discovered" in available_passes()
    assert registry.describe_pass("probe-discovered", available_passes()["probe-discovered"]()) == (
        "Found by scanning the package."
    )
    sys.modules.pop("pkc.passes.probe_discovered", None)


def test_broken_pass_module_is_an_error(clean_registry, tmp_path, monkeypatch, capsys, write):
    (tmp_path / "probe_broken.py").write_text("raise ImportError('half-written pass')\n")
    monkeypatch.setattr(pkc.passes, "__path__", [*pkc.passes.__path__, str(tmp_path)])
    registry._loaded = False
    with pytest.raises(PassLoadError, match="pkc.passes.probe_broken.*half-written pass"):
        available_passes()
    # A pipeline imports the modules of the passes it names (probe-broken: probe_broken.py);
    # a name not found so imports every module: either way the broken file is the error.
    for pipeline in ("probe-broken", "no-such-pass"):
        registry._loaded = False
        code, _, err = run(capsys, write(ADD), "-p", pipeline)
        assert code == 2, pipeline
        assert (
            "internal error: PassLoadError: failed to import pass module 'pkc.passes.probe_broken'"
            in err
        ), pipeline
    # ... and a pipeline of passes found without it does not import it
    registry._loaded = False
    code, out, _ = run(capsys, write(ADD), "-p", "cse")
    assert code == 0 and "func.func" in out


def test_pass_reports_error_at_op(capsys, write, clean_registry):
    @register_pass
    @dataclass(frozen=True)
    class RejectProbe(ModulePass):
        name = "reject-probe"

        def apply(self, ctx, op):
            for f in op.walk():
                if isinstance(f, FuncOp):
                    raise ir.diagnostic_at(f, "nope")

    path = write(ADD)
    code, _, err = run(capsys, path, "-p", "reject-probe")
    assert code == 1
    assert err.splitlines()[0] == f"{path}:1:1: error: 'func.func' op nope"


def test_pass_crash_is_internal_error(capsys, write, clean_registry, monkeypatch):
    @register_pass
    @dataclass(frozen=True)
    class CrashProbe(ModulePass):
        name = "crash-probe"

        def apply(self, ctx, op):
            raise KeyError("boom")

    monkeypatch.delenv("PKC_DEBUG", raising=False)
    code, _, err = run(capsys, write(ADD), "-p", "crash-probe")
    assert code == 2
    assert err.startswith("pkc-opt: internal error: pass 'crash-probe' crashed: KeyError: 'boom'")


def test_pass_that_breaks_ir_is_reported(capsys, write, clean_registry):
    @register_pass
    @dataclass(frozen=True)
    class BreakProbe(ModulePass):
        """Drops the operand of func.return, so the function no longer verifies."""

        name = "break-probe"

        def apply(self, ctx, op):
            from xdsl.dialects.func import ReturnOp

            for r in list(op.walk()):
                if isinstance(r, ReturnOp):
                    r.operands = ()

    code, _, err = run(capsys, write(ADD), "-p", "break-probe", "--print-ir-after-all")
    assert code == 1
    assert "// -----// IR Dump After break-probe Failed //----- //" in err
    assert ":5:3: error: 'func.return' op Expected arguments" in err


# --------------------------------------------------------------------------------------
# Entry points
# --------------------------------------------------------------------------------------


def test_python_dash_m_and_console_script(tmp_path):
    path = tmp_path / "in.mlir"
    path.write_text(ADD)
    proc = subprocess.run(
        [sys.executable, "-m", "pkc.tools.pkc_opt", str(path), "-p", "cse"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    assert "%e = arith.muli %c, %c : i32" in proc.stdout
    scripts = {ep.name: ep.value for ep in entry_points(group="console_scripts")}
    assert scripts.get("pkc-opt") == "pkc.tools.pkc_opt:main"
