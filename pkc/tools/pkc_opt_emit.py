"""pkc-opt's actions on a module after its passes (:mod:`pkc.tools.pkc_opt`): its options,
the ``--remarks`` / ``--kernels`` reports, the ``--trace`` file, and the output - the IR, or
(``--emit=ptx`` / ``--dump-kernels``) the kernels the GPU runs, taken to the schedule level
and through codegen (imported only then).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TextIO

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass

from pkc.ir import PkcDiagnostic, op_position, print_module
from pkc.passes.remarks import format_remarks as remarks_lines
from pkc.tools.pkc_opt_args import PROG, UserError


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
_ARCH_TARGET = {"sm_90a": "h200", "sm_100a": "b200"}


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
