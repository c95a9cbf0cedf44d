"""pkc-opt: parse a .mlir file, run named passes, print the IR (in the style of mlir-opt).

    pkc-opt input.mlir -p 'canonicalize,cse' --print-ir-after-all -o out.mlir
    pkc-opt --split-input-file --verify-diagnostics invalid.mlir
    pkc-opt --help          # lists every registered pass with its options

Exit status: 0 on success, 1 on bad input (one diagnostic per failing input chunk, with
file:line:col where there is a position), 2 on an internal error (a bug in pkc: the
message starts with ``pkc-opt: internal error:``; set PKC_DEBUG=1 for the traceback).

The work is split into small functions (read input, split, parse, run the pipeline,
emit) so that later flags (``--remarks``, ``--emit=ptx``) each hook into one of them.
"""

# The parts live in modules of their own, re-exported here: the command line and the errors
# in pkc_opt_args, input / output / timing in pkc_opt_io, --verify-diagnostics in
# pkc_opt_verify, the emit / dump actions in pkc_opt_emit; this module runs the pipeline on
# each chunk and drives the whole.

from __future__ import annotations

import importlib
import os
import sys
import traceback
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from pkc.tools.fast_start import exit_now, light_imports

# The command line, --help, input / output and timing need no xDSL: they are imported
# here. What needs xDSL (parsing, passes, emitting) is imported by _load_ir_tools once the
# command line asks for IR work, inside light_imports (xDSL's import is most of pkc-opt's
# start-up, see fast_start); --help and a bad command line never pay for it (issue 19).
from pkc.tools.pkc_opt_args import (
    PROG,
    SPLIT_MARKER,
    InternalError,
    UserError,
    build_arg_parser,
    cost_target_for,
    format_pass_list,
    load_pass_plugins,
    pipeline_text,
    print_after_names,
    print_help,
)
from pkc.tools.pkc_opt_io import (
    Chunk,
    Timer,
    _Clock,
    process_age,
    read_input,
    split_input,
    write_output,
)

if TYPE_CHECKING:
    from xdsl.context import Context
    from xdsl.dialects.builtin import ModuleOp
    from xdsl.passes import ModulePass
    from xdsl.utils.exceptions import DiagnosticException

    from pkc.ir import (
        PkcDiagnostic,
        deep_recursion,
        load_dialects_named_in,
        make_context,
        parse_module,
        print_module,
        verify_module,
    )
    from pkc.passes.registry import PipelineError, parse_pipeline
    from pkc.tools.pkc_opt_emit import (
        Options,
        emit_output,
        format_kernels,
        format_remarks,
        gpu_program,
        module_diagnostic,
        write_trace,
    )
    from pkc.tools.pkc_opt_verify import Expected, check_diagnostics, parse_expectations

# The names bound by _load_ir_tools, by the module they come from.
_IR_TOOLS = {
    "xdsl.context": ("Context",),
    "xdsl.dialects.builtin": ("ModuleOp",),
    "xdsl.passes": ("ModulePass",),
    "xdsl.utils.exceptions": ("DiagnosticException",),
    "pkc.ir": ("PkcDiagnostic", "deep_recursion", "load_dialects_named_in", "make_context",
               "parse_module", "print_module", "verify_module"),
    "pkc.passes.registry": ("PipelineError", "parse_pipeline"),
    "pkc.tools.pkc_opt_emit": ("Options", "emit_output", "format_kernels", "format_remarks",
                               "gpu_program", "module_diagnostic", "write_trace"),
    "pkc.tools.pkc_opt_verify": ("Expected", "check_diagnostics", "parse_expectations"),
}
_IR_TOOL_NAMES = {name: module for module, names in _IR_TOOLS.items() for name in names}


def _load_ir_tools() -> None:
    """Import what IR work needs (once) and bind its names in this module. A name already
    bound stays (a test that replaced ``emit_output`` keeps its replacement)."""
    here = globals()
    if here.get("_ir_tools_loaded"):
        return
    with light_imports():
        for module, names in _IR_TOOLS.items():
            loaded = importlib.import_module(module)
            for name in names:
                here.setdefault(name, getattr(loaded, name))
    here["_ir_tools_loaded"] = True


def __getattr__(name: str) -> Any:
    """The re-exported IR names (``from pkc.tools.pkc_opt import Options``) load on first
    use (PEP 562)."""
    if name in _IR_TOOL_NAMES:
        _load_ir_tools()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# Re-exported names: tests and tools import them from here (process_chunk looks
# emit_output up here, so that a test can replace it).
__all__ = [
    "PROG", "InternalError", "UserError", "build_arg_parser", "cost_target_for",
    "format_pass_list", "load_pass_plugins", "pipeline_text", "print_after_names", "print_help",
    "Options", "emit_output", "format_kernels", "format_remarks", "gpu_program",
    "module_diagnostic", "write_trace", "SPLIT_MARKER", "Chunk", "Timer", "_Clock",
    "process_age", "read_input", "split_input", "write_output", "Expected",
    "check_diagnostics", "parse_expectations", "dump_header", "timing_labels", "run_pipeline",
    "process_chunk", "run", "main",
]


# --------------------------------------------------------------------------------------
# Processing one chunk
# --------------------------------------------------------------------------------------


def dump_header(pass_name: str, failed: bool = False) -> str:
    suffix = " Failed" if failed else ""
    return f"// -----// IR Dump After {pass_name}{suffix} //----- //\n"


def timing_labels(pipeline: Sequence[ModulePass]) -> list[str]:
    """A row name per pass: its name, with ' (2)', ' (3)'... for repeated passes."""
    seen: dict[str, int] = {}
    labels = []
    for pass_ in pipeline:
        seen[pass_.name] = seen.get(pass_.name, 0) + 1
        n = seen[pass_.name]
        labels.append(pass_.name if n == 1 else f"{pass_.name} ({n})")
    return labels


def run_pipeline(
    module: ModuleOp,
    ctx: Context,
    opts: Options,
    timer: Timer,
    *,
    source: str,
    filename: str,
    err: TextIO,
) -> None:
    """Run each pass, verify after it, print the IR after it if asked."""
    _load_ir_tools()
    for pass_, label in zip(opts.pipeline, timing_labels(opts.pipeline), strict=True):
        name = pass_.name
        wanted = opts.print_after_all or name in opts.print_after
        with _Clock(timer, label):
            try:
                pass_.apply(ctx, module)
            except PkcDiagnostic:
                raise
            except DiagnosticException as exc:
                raise module_diagnostic(module, filename, f"pass '{name}' failed: {exc}") from None
            except Exception as exc:
                raise InternalError(f"pass '{name}' crashed: {type(exc).__name__}: {exc}") from exc
        try:
            with _Clock(timer, "Verifier"):
                verify_module(module, source=source, filename=filename)
        except PkcDiagnostic:
            if wanted:
                err.write(dump_header(name, failed=True))
                err.write(print_module(module, generic=True))
            raise
        if wanted:
            err.write(dump_header(name))
            err.write(print_module(module, generic=opts.generic))


def process_chunk(
    chunk: Chunk, filename: str, ctx: Context, opts: Options, timer: Timer, err: TextIO
) -> tuple[str | None, list[PkcDiagnostic]]:
    """Parse, verify, run the pipeline, print. Returns (output or None, diagnostics)."""
    _load_ir_tools()
    # Positions name lines of the whole file: pad the chunk with its preceding lines.
    source = "\n" * (chunk.first_line - 1) + chunk.text
    try:
        with _Clock(timer, "Parser"):
            module = parse_module(chunk.text, filename, ctx=ctx, first_line=chunk.first_line)
        with _Clock(timer, "Verifier"):
            verify_module(module, source=source, filename=filename)
        run_pipeline(module, ctx, opts, timer, source=source, filename=filename, err=err)
        if opts.remarks:
            err.write(format_remarks(module, filename))
        if opts.kernels:
            err.write(format_kernels(module, filename, opts.target))
        if opts.trace:
            write_trace(module, opts.trace, err)
        with _Clock(timer, "Output"):
            return emit_output(module, opts, filename), []
    except PkcDiagnostic as diag:
        return None, [diag]
    except RecursionError:
        # check_nesting refuses deep brackets before parsing; this catches what nests
        # deeply some other way (a pass building deep IR, long chains of nested types).
        return None, [PkcDiagnostic(
            filename, chunk.first_line, 1,
            "the IR is nested too deeply for pkc-opt (Python's recursion limit was reached)",
        )]


# --------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------


def run(argv: Sequence[str] | None) -> int:
    parser = build_arg_parser()
    args = parser.parse_args(argv)
    load_pass_plugins(args.load_pass_plugin)
    if args.help:
        print_help(parser, sys.stdout)
        return 0
    if args.fast_path:
        raise UserError("--fast-path was removed: the runtime no longer chooses kernels; the "
                        "schedule passes do, and --kernels prints what each pk.kernel becomes")
    _load_ir_tools()
    with deep_recursion():
        return _run_ir(args)


def _run_ir(args: Any) -> int:
    """Everything after the command line: the pipeline, the input, each chunk, the output."""
    try:
        with light_imports():  # the pass modules the pipeline names
            pipeline = parse_pipeline(pipeline_text(args))
            if args.emit == "ptx" or args.dump_kernels or args.kernels:
                # what these take the kernels through (the schedule pipeline, codegen),
                # imported here where importing is cheap
                parse_pipeline("schedule")
                if args.emit == "ptx" or args.dump_kernels:
                    importlib.import_module("pkc.codegen")
    except PipelineError as err:
        raise UserError(str(err)) from None
    pipeline = cost_target_for(pipeline, pipeline_text(args), args.target)
    opts = Options(
        pipeline=pipeline,
        generic=args.print_op_generic,
        print_after_all=args.print_ir_after_all,
        print_after=print_after_names(args),
        allow_unregistered=args.allow_unregistered_dialect,
        remarks=args.remarks,
        kernels=args.kernels,
        emit=args.emit,
        target=args.target,
        dump_kernels=args.dump_kernels,
        trace=args.trace,
    )
    timer = Timer(enabled=args.timing)
    text, filename = read_input(args.input)
    with _Clock(timer, "Context (dialect loading)"):
        ctx = make_context(allow_unregistered=opts.allow_unregistered)
        # The parser would load each dialect on first use; loading the ones the input
        # names here imports them inside light_imports (fast_start: the code cache, no
        # garbage collection), which is faster.
        with light_imports():
            load_dialects_named_in(ctx, text)

    outputs: list[str] = []
    ok = True
    for chunk in split_input(text, args.split_input_file):
        output, diagnostics = process_chunk(chunk, filename, ctx, opts, timer, sys.stderr)
        outputs.append(output or "")
        if args.verify_diagnostics:
            failures = check_diagnostics(chunk, filename, diagnostics)
            for line in failures:
                sys.stderr.write(line + "\n")
            ok = ok and not failures
        else:
            for diag in diagnostics:
                sys.stderr.write(str(diag) + "\n")
            ok = ok and not diagnostics

    result = (SPLIT_MARKER + "\n").join(outputs)
    if ok or args.output == "-":
        # As mlir-opt: an output file is written only on success; stdout gets what
        # succeeded (the outputs of the good chunks of a split file).
        write_output(result, args.output)
    if timer.enabled:
        sys.stderr.write(timer.report())
    return 0 if ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``pkc-opt`` and ``python -m pkc.tools.pkc_opt``; returns the status."""
    try:
        return run(argv)
    except UserError as err:
        sys.stderr.write(f"{PROG}: error: {err}\n")
        return 1
    except BrokenPipeError:
        # `pkc-opt ... | head`: the reader went away; nothing left to say.
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - avoid a second error at exit
        except OSError:
            pass
        return 1
    except SystemExit as exc:  # argparse --help/--version style exits
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except Exception as err:  # a bug in pkc: say so, never a bare traceback
        if os.environ.get("PKC_DEBUG"):
            traceback.print_exc()
        detail = str(err) if isinstance(err, InternalError) else f"{type(err).__name__}: {err}"
        sys.stderr.write(
            f"{PROG}: internal error: {detail}\n"
            f"{PROG}: this is a bug in pkc; rerun with PKC_DEBUG=1 for the traceback\n"
        )
        return 2


if __name__ == "__main__":
    exit_now(main())  # every file is closed; skip the interpreter's teardown
