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

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn, TextIO

from pkc.tools.fast_start import exit_now, light_imports

with light_imports():  # xDSL's import is most of pkc-opt's start-up (see fast_start)
    from xdsl.context import Context
    from xdsl.dialects.builtin import ModuleOp
    from xdsl.ir import Operation
    from xdsl.passes import ModulePass
    from xdsl.utils.exceptions import DiagnosticException

    from pkc.ir import (
        PkcDiagnostic,
        deep_recursion,
        op_position,
        make_context,
        parse_module,
        print_module,
        verify_module,
    )
    from pkc.passes.remarks import format_remarks as remarks_lines
    from pkc.passes.registry import (
        PipelineError,
        available_passes,
        describe_pass,
        parse_pipeline,
        pass_options,
    )
    import pkc.dialects  # noqa: F401 - every input needs pk; loaded here with the rest

PROG = "pkc-opt"
SPLIT_MARKER = "// -----"
_SPLIT_LINE = re.compile(r"^[ \t]*// -----[ \t]*$")


class UserError(Exception):
    """A problem with the command line or the environment: ``pkc-opt: error: ...``."""


class InternalError(Exception):
    """A bug in pkc (or in a pass): exit status 2."""


# --------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------


class _ArgumentParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, exit 1 (argparse's default is usage + exit 2, our internal-error code).
        raise UserError(f"{message} (see {PROG} --help)")


def build_arg_parser() -> argparse.ArgumentParser:
    p = _ArgumentParser(
        prog=PROG,
        usage=f"{PROG} [options] [input.mlir | -]",
        description="Parse pk IR, run passes on it and print the result (like mlir-opt).",
        add_help=False,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("input", nargs="?", default="-", help="input file; '-' or none: stdin")
    p.add_argument("-h", "--help", action="store_true", help="show this help and the passes")
    p.add_argument(
        "-o",
        dest="output",
        default="-",
        metavar="FILE",
        help="output file ('-': stdout, the default)",
    )
    p.add_argument(
        "-p",
        "--passes",
        default="",
        metavar="PIPELINE",
        help="passes to run, e.g. 'canonicalize,cse' or 'my-pass{opt=1 other=x}'",
    )
    p.add_argument(
        "--pass-pipeline",
        default="",
        metavar="PIPELINE",
        help="mlir-opt's spelling: 'builtin.module(a,b{opt=1})' (the same as -p 'a,b{opt=1}')",
    )
    p.add_argument(
        "--print-ir-after-all",
        "--mlir-print-ir-after-all",
        action="store_true",
        help="print the IR to stderr after every pass",
    )
    p.add_argument(
        "--print-ir-after",
        "--mlir-print-ir-after",
        action="append",
        default=[],
        metavar="NAME",
        help="print the IR to stderr after each pass named NAME (repeatable, or comma-separated)",
    )
    p.add_argument(
        "--timing",
        "--mlir-timing",
        action="store_true",
        help="print a time report (start-up, parse, verify, each pass, output) to stderr",
    )
    p.add_argument(
        "--print-op-generic",
        "--mlir-print-op-generic",
        action="store_true",
        help="print operations in MLIR's generic form",
    )
    p.add_argument(
        "--split-input-file",
        action="store_true",
        help=f"process chunks separated by '{SPLIT_MARKER}' independently; "
        f"join the outputs with '{SPLIT_MARKER}'",
    )
    p.add_argument(
        "--verify-diagnostics",
        action="store_true",
        help="check the errors against '// expected-error {{...}}' annotations "
        "(with @+N, @-N, @above, @below) instead of printing them",
    )
    p.add_argument(
        "--allow-unregistered-dialect",
        action="store_true",
        help="accept operations of unknown dialects (kept opaque)",
    )
    p.add_argument(
        "--emit",
        choices=("mlir", "ptx"),
        default="mlir",
        help="what to print: the IR (default) or the PTX of every pk.kernel, one module "
        "per kernel, each under a '// pk.kernel @NAME (TARGET)' line",
    )
    p.add_argument(
        "--target",
        default="sm_90a",
        help="GPU architecture for --emit=ptx: sm_90a (Hopper, default), sm_100a "
        "(Blackwell) or sm_80 (portable mma.sync path)",
    )
    p.add_argument(
        "--dump-kernels",
        metavar="DIR",
        help="also write each kernel's PTX, lowered PTX-dialect IR and ptxas report "
        "(registers, shared memory, spills) into DIR",
    )
    p.add_argument(
        "--trace",
        metavar="FILE.json",
        help="write the predicted schedule of every fused kernel as a Chrome trace "
        "(open it in Perfetto or chrome://tracing)",
    )
    p.add_argument(
        "--remarks",
        action="store_true",
        help="print the decisions the passes recorded (what was fused, predicted times, "
        "SM splits, what was left alone and why) to stderr",
    )
    p.add_argument(
        "--kernels",
        action="store_true",
        help="print, for every pk.kernel of what the GPU runs for --target (after the "
        "schedule stage), the kernel it becomes and why, or why it takes the portable path, "
        "to stderr",
    )
    p.add_argument("--fast-path", action="store_true", help=argparse.SUPPRESS)
    p.add_argument(
        "--load-pass-plugin",
        action="append",
        default=[],
        metavar="FILE.py",
        help="import a Python file whose @register_pass passes become available",
    )
    return p


def format_pass_list() -> str:
    """The 'Passes' section of --help: one line per pass, then its options."""
    passes = available_passes()
    width = max((len(n) for n in passes), default=0) + 2
    lines = ["Passes (run them with -p 'a,b{option=value other=value}'):"]
    for name, get_cls in passes.items():
        cls = get_cls()
        lines.append(f"  {name.ljust(width)}{describe_pass(name, cls)}")
        for option in pass_options(cls):
            lines.append(f"  {' ' * width}  option {option}")
    return "\n".join(lines)


def print_help(parser: argparse.ArgumentParser, out: TextIO) -> None:
    out.write(parser.format_help())
    out.write("\n" + format_pass_list() + "\n")


def load_pass_plugins(paths: Sequence[str]) -> None:
    """Import each Python file (its @register_pass decorators register its passes).

    pkc's own passes register first, so that a plugin pass whose name is taken is the
    plugin's error (exit 1), not a failure to import pkc's pass later."""
    if paths:
        from pkc.passes.registry import load_pass_modules

        load_pass_modules()
    for i, path in enumerate(paths):
        if not Path(path).is_file():
            raise UserError(f"could not open pass plugin '{path}': no such file")
        spec = importlib.util.spec_from_file_location(f"_pkc_pass_plugin_{i}", path)
        if spec is None or spec.loader is None:
            raise UserError(f"could not load pass plugin '{path}'")
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Exception as err:
            raise UserError(
                f"failed to load pass plugin '{path}': {type(err).__name__}: {err}"
            ) from err


_ANCHOR = re.compile(r"^\s*(builtin\.module|any)\s*\((.*)\)\s*$", re.S)


def pipeline_text(args: argparse.Namespace) -> str:
    """The pass pipeline from -p, or from --pass-pipeline='builtin.module(...)'."""
    if not args.pass_pipeline:
        return args.passes
    if args.passes:
        raise UserError("give the passes with -p or with --pass-pipeline, not both")
    m = _ANCHOR.match(args.pass_pipeline)
    if m is None:
        raise UserError(
            f"--pass-pipeline '{args.pass_pipeline}': expected 'builtin.module(a,b{{opt=1}})' "
            "(pkc's passes all run on the module)"
        )
    inner = m.group(2)
    if re.search(r"[\w.]+\s*\(", re.sub(r"\{[^}]*\}", "", inner)):
        raise UserError(
            f"--pass-pipeline '{args.pass_pipeline}': nested pass managers (like "
            "'func.func(...)') are not supported; every pkc pass runs on the whole module"
        )
    return inner


def print_after_names(args: argparse.Namespace) -> set[str]:
    names = {n.strip() for item in args.print_ir_after for n in item.split(",") if n.strip()}
    if not names:
        return names
    unknown = sorted(names - set(available_passes()))
    if unknown:
        raise UserError(
            f"--print-ir-after: unknown pass '{unknown[0]}'; available passes: "
            + ", ".join(available_passes())
        )
    return names


# --------------------------------------------------------------------------------------
# Input
# --------------------------------------------------------------------------------------


def read_input(path: str) -> tuple[str, str]:
    """(text, name used in diagnostics) of a file, or of stdin for '-'."""
    if path == "-":
        return sys.stdin.read(), "<stdin>"
    try:
        return Path(path).read_text(encoding="utf-8"), path
    except FileNotFoundError:
        raise UserError(f"could not open input file '{path}': no such file") from None
    except IsADirectoryError:
        raise UserError(f"could not open input file '{path}': is a directory") from None
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"could not read input file '{path}': {err}") from None


@dataclass
class Chunk:
    text: str
    first_line: int  # line of the input file on which this chunk starts (1-based)


def split_input(text: str, split: bool) -> list[Chunk]:
    """The input as chunks separated by lines '// -----' (one chunk unless ``split``)."""
    if not split:
        return [Chunk(text, 1)]
    chunks: list[Chunk] = []
    current: list[str] = []
    start = 1
    for number, line in enumerate(text.splitlines(keepends=True), start=1):
        if _SPLIT_LINE.match(line.rstrip("\r\n")):
            chunks.append(Chunk("".join(current), start))
            current, start = [], number + 1
        else:
            current.append(line)
    chunks.append(Chunk("".join(current), start))
    return chunks


# --------------------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------------------


def process_age() -> float:
    """Seconds since this process started (interpreter start-up and imports included),
    from /proc on Linux; elsewhere, since this module was imported."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return time.perf_counter() - _IMPORTED


_IMPORTED = time.perf_counter()


@dataclass
class Timer:
    """Wall time per phase, in first-seen order (like mlir-opt's -mlir-timing); the first
    row is the start-up before the timer existed (Python, imports), so that the total is
    what the user waited for."""

    enabled: bool = False
    start: float = field(default_factory=time.perf_counter)
    phases: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.enabled:
            startup = process_age()
            self.start -= startup
            self.phases["Start-up (Python, imports)"] = startup

    def add(self, name: str, seconds: float) -> None:
        self.phases[name] = self.phases.get(name, 0.0) + seconds

    def report(self) -> str:
        total = time.perf_counter() - self.start
        rows = dict(self.phases)
        rows["Rest"] = max(0.0, total - sum(self.phases.values()))
        bar = "===" + "-" * 73 + "==="
        lines = [
            bar,
            "... Execution time report ...".center(len(bar)).rstrip(),
            bar,
            f"  Total Execution Time: {total:.4f} seconds",
            "",
            "  ----Wall Time----  ----Name----",
        ]
        for name, seconds in list(rows.items()) + [("Total", total)]:
            pct = 100.0 * seconds / total if total > 0 else 0.0
            lines.append(f"  {seconds:10.4f} ({pct:5.1f}%)  {name}")
        return "\n".join(lines) + "\n"


class _Clock:
    def __init__(self, timer: Timer, name: str) -> None:
        self.timer, self.name = timer, name

    def __enter__(self) -> None:
        self.t0 = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.timer.add(self.name, time.perf_counter() - self.t0)


# --------------------------------------------------------------------------------------
# Processing one chunk
# --------------------------------------------------------------------------------------


@dataclass
class Options:
    pipeline: list[ModulePass]
    generic: bool
    print_after_all: bool
    print_after: set[str]
    allow_unregistered: bool
    remarks: bool = False
    kernels: bool = False
    emit: str = "mlir"
    target: str = "sm_90a"
    dump_kernels: str | None = None
    trace: str | None = None


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


def write_trace(module: ModuleOp, path: str, err: TextIO | None = None) -> None:
    import json

    from pkc.tools.trace import module_trace

    trace = module_trace(module)
    if not trace["traceEvents"] and err is not None:
        err.write(f"{PROG}: warning: --trace: the module has no fused kernel (made by the "
                  f"overlap pass), so '{path}' holds no events\n")
    try:
        with open(path, "w") as f:
            json.dump(trace, f, indent=1)
    except OSError as e:
        raise UserError(f"could not write trace file '{path}': {e}") from None


def format_remarks(module: ModuleOp, filename: str) -> str:
    """One ``file:line:col: remark: text`` line per recorded decision, in program order."""
    lines = remarks_lines(module, filename)
    return "".join(line + "\n" for line in lines) or f"{filename}: remark: no decisions recorded\n"


def format_kernels(module: ModuleOp, filename: str, target: str) -> str:
    """Per pk.kernel of what the GPU runs for ``target``, the scheduled kernel it becomes
    (the schedule pass's remark) or the portable path and why; a line saying so when the
    module has no kernel."""
    from pkc.passes.pipelines import kernel_lines

    default = "" if target in _ARCH_TARGET else f"no schedule-level lowering of this kernel for {target}"
    lines = kernel_lines(gpu_program(module, target), filename, default)
    return "".join(line + "\n" for line in lines) or f"{filename}: remark: no pk.kernel\n"


def module_diagnostic(op: Operation, filename: str, message: str) -> PkcDiagnostic:
    """An error about ``op`` as a whole (a module, a kernel), at its position or, for an
    op that has none (an empty input), at line 1."""
    file, line, col = op_position(op)
    return PkcDiagnostic(file or filename, line or 1, col or 1, message)


# the cost target whose tuning tables schedule a kernel for an architecture
_ARCH_TARGET = {"sm_90a": "h200"}


def gpu_program(module: ModuleOp, arch: str) -> ModuleOp:
    """What the GPU runtime launches for ``module`` on ``arch``: its kernels taken to the
    schedule level by the ``schedule`` pipeline (as :attr:`pkc.CompiledProgram.kernel_module`
    does), so that ``--emit=ptx`` / ``--dump-kernels`` print the kernels that run."""
    if arch not in _ARCH_TARGET:
        return module
    from pkc.passes.pipelines import schedule_for_target

    return schedule_for_target(module, _ARCH_TARGET[arch])[0]


def emit_output(module: ModuleOp, opts: Options, filename: str = "-") -> str:
    """The text written for one chunk: its IR, or the PTX of its kernels."""
    if opts.emit == "mlir" and not opts.dump_kernels:
        return print_module(module, generic=opts.generic)  # codegen not even imported
    from pkc.codegen import CodegenError, dump_kernels, emit_ptx

    try:
        module = gpu_program(module, opts.target)
        if opts.dump_kernels:
            dump_kernels(module, opts.dump_kernels, targets=(opts.target,))
        if opts.emit == "mlir":
            return print_module(module, generic=opts.generic)
        kernels = emit_ptx(module, opts.target)
    except CodegenError as err:
        # At the kernel that failed (compile_module records it), else at the module.
        where = getattr(err, "op", None) or module
        raise module_diagnostic(where, filename, f"codegen ({opts.target}): {err}") from None
    if not kernels:
        raise module_diagnostic(module, filename, "--emit=ptx: the module has no pk.kernel "
                                "(run passes that make kernels, e.g. -p overlap,lower-collectives)")
    return "".join(f"// pk.kernel @{name} ({opts.target})\n{ptx}\n" for name, ptx in kernels.items())


def process_chunk(
    chunk: Chunk, filename: str, ctx: Context, opts: Options, timer: Timer, err: TextIO
) -> tuple[str | None, list[PkcDiagnostic]]:
    """Parse, verify, run the pipeline, print. Returns (output or None, diagnostics)."""
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
# --verify-diagnostics
# --------------------------------------------------------------------------------------

_EXPECTED = re.compile(
    r"expected-(?P<sev>error|warning|remark|note)(?P<re>-re)?"
    r"[ \t]*(?:@(?P<where>[+-]\d+|above|below|unknown))?"
    r"[ \t]*\{\{(?P<msg>.*)\}\}[ \t]*$"
)


@dataclass
class Expected:
    severity: str
    message: str
    regex: bool
    line: int | None  # None: @unknown
    at_line: int  # where the annotation is written
    at_col: int
    matched: bool = False

    def matches(self, text: str) -> bool:
        if not self.regex:
            return self.message in text
        # -re: {{...}} parts are regexes, the rest is literal (as in MLIR).
        parts = re.split(r"\{\{(.*?)\}\}", self.message)
        pattern = "".join(p if i % 2 else re.escape(p) for i, p in enumerate(parts))
        return re.search(pattern, text) is not None


def parse_expectations(chunk: Chunk) -> tuple[list[Expected], list[str]]:
    """The expected-* annotations of a chunk, and errors about the annotations."""
    expected: list[Expected] = []
    problems: list[str] = []
    below: list[Expected] = []
    last_plain_line: int | None = None
    for offset, line in enumerate(chunk.text.splitlines()):
        number = chunk.first_line + offset
        m = _EXPECTED.search(line)
        if m is None:
            for e in below:
                e.line = number
            below.clear()
            last_plain_line = number
            continue
        where = m.group("where")
        e = Expected(
            m.group("sev"), m.group("msg"), m.group("re") is not None, number, number, m.start() + 1
        )
        if where is None:
            pass
        elif where == "unknown":
            e.line = None
        elif where == "above":
            if last_plain_line is None:
                problems.append(f"{number}:{e.at_col}: @above with no line above it")
                continue
            e.line = last_plain_line
        elif where == "below":
            below.append(e)
        else:
            e.line = number + int(where)
        expected.append(e)
    for e in below:
        problems.append(f"{e.at_line}:{e.at_col}: @below with no line below it")
    return expected, problems


def check_diagnostics(chunk: Chunk, filename: str, diagnostics: list[PkcDiagnostic]) -> list[str]:
    """Failures (as printable lines) of matching ``diagnostics`` with the annotations."""
    expected, problems = parse_expectations(chunk)
    failures = [f"{filename}:{p}" for p in problems]
    for diag in diagnostics:
        line = diag.line if diag.file in (filename, None) else -1
        for e in expected:
            if (
                not e.matched
                and e.severity == diag.severity
                and e.line == line
                and e.matches(diag.message)
            ):
                e.matched = True
                break
        else:
            failures.append(f"{diag.where}error: unexpected {diag.severity}: {diag.message}")
    for e in expected:
        if not e.matched:
            where = "" if e.line is None else f" on line {e.line}"
            failures.append(
                f"{filename}:{e.at_line}:{e.at_col}: error: expected {e.severity} "
                f'"{e.message}" was not produced{where}'
            )
    return failures


# --------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------


def write_output(text: str, path: str) -> None:
    if path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as err:
        raise UserError(f"could not write output file '{path}': {err}") from None


# --target=sm_100a: the passes that build a kernel's schedule for a cost target build it
# for this one unless the pipeline names a target (a wgmma-form GEMM has no sm_100a lowering)
_COST_TARGET_FOR = {"sm_100a": "b200"}
_SCHEDULING_PASSES = ("schedule-matmul",)


def cost_target_for(pipeline: list, text: str, codegen_target: str) -> list:
    """``pipeline`` with the scheduling passes' ``target`` set for ``codegen_target`` where
    the pipeline text gives none."""
    target = _COST_TARGET_FOR.get(codegen_target)
    if target is None or "target=" in text:
        return pipeline
    import dataclasses

    return [dataclasses.replace(p, target=target) if p.name in _SCHEDULING_PASSES else p
            for p in pipeline]


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
    try:
        pipeline = parse_pipeline(pipeline_text(args))
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
        with deep_recursion():
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
