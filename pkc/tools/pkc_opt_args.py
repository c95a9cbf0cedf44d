"""pkc-opt's command line (:mod:`pkc.tools.pkc_opt`): the argument parser and --help with
its list of passes, pass plugins, the pipeline text from ``-p`` / ``--pass-pipeline``,
``--print-ir-after`` names and the scheduling passes' target for ``--target``; and the two
errors the tool reports (a user's: exit 1; pkc's: exit 2).

This module imports no xDSL and no pass (the pass registry is imported inside the
functions that need it): ``pkc-opt --help`` and a bad command line are answered without
them (issue 19: start-up).
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn, TextIO

PROG = "pkc-opt"
SPLIT_MARKER = "// -----"


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
    """The 'Passes' section of --help: one line per pass, then its options.

    Listing the passes from the registry imports every pass module (most of a second);
    unless this process has imported the registry already (a pass plugin, a program that
    registered passes), the list is the copy :mod:`pkc.tools.pkc_opt_passes` keeps of it
    (a unit test checks that it is current)."""
    if "pkc.passes.registry" not in sys.modules:
        from pkc.tools.pkc_opt_passes import PASS_LIST

        return PASS_LIST
    return registry_pass_list()


def registry_pass_list() -> str:
    """The 'Passes' section of --help, from the registry (imports every pass module)."""
    from pkc.passes.registry import available_passes, describe_pass, pass_options

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
    from pkc.passes.registry import available_passes

    unknown = sorted(names - set(available_passes()))
    if unknown:
        raise UserError(
            f"--print-ir-after: unknown pass '{unknown[0]}'; available passes: "
            + ", ".join(available_passes())
        )
    return names


# --target=sm_100a: every pass that takes a cost target (overlap, lower-collectives,
# sm-partition, the schedule passes: the ``target`` option) plans for this one unless the
# pipeline names a target for that pass (``pass{target=...}``, or ``default{target=...}``,
# which hands it to each of its passes): a Blackwell kernel is planned with Blackwell
# figures (148 SMs, NVLink 5), and a wgmma-form GEMM has no sm_100a lowering
_COST_TARGET_FOR = {"sm_100a": "b200"}


def cost_target_for(pipeline: list, text: str, codegen_target: str) -> list:
    """``pipeline`` (parsed from ``text``) with ``target`` set for ``codegen_target`` on
    every pass that has the option and was not given one in ``text``."""
    target = _COST_TARGET_FOR.get(codegen_target)
    if target is None or not any(hasattr(p, "target") for p in pipeline):
        return pipeline
    import dataclasses

    named = _names_target(text)
    return [dataclasses.replace(p, target=target) if hasattr(p, "target") and not given else p
            for p, given in zip(pipeline, named)]


def _names_target(text: str) -> list[bool]:
    """Per pass of the pipeline ``text`` (named pipelines expanded, as parse_pipeline
    does: one entry per pass), whether its options name a ``target``."""
    from xdsl.utils.arg_spec import parse_pipeline as parse_specs

    from pkc.passes.registry import _expand_named_pipelines, available_passes

    specs = _expand_named_pipelines(list(parse_specs(text)), available_passes())
    return ["target" in {k.replace("_", "-") for k in spec.parameters} for spec in specs]
