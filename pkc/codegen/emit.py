"""Entry points of code generation.

* :func:`emit_ptx` (``module, target -> {kernel name: PTX text}``): what ``pkc-opt
  --emit=ptx`` prints.
* :func:`compile_kernel`: one ``pk.kernel`` to a :class:`CompiledKernel` (PTX, the ptx
  dialect IR it was printed from, and the :class:`~pkc.codegen.abi.KernelMeta` that the
  runtime launches it with).
* :func:`dump_kernels`: writes, per kernel, the PTX, the metadata (JSON), the ptx-dialect
  IR and the ``ptxas -v`` report (registers, shared memory, spills) into a folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation

from pkc.codegen import ptx
from pkc.codegen.abi import KernelMeta, ScheduledKernelMeta, _ident
from pkc.codegen.errors import CodegenError
from pkc.codegen.printer import print_module
from pkc.codegen.targets import CodegenTarget, get_codegen_target
from pkc.dialects.kernel import KernelOp

DEFAULT_TARGET = "sm_90a"


@dataclass
class CompiledKernel:
    name: str          # the pk.kernel's name
    entry: str         # the PTX .entry name
    target: str
    ptx: str
    meta: KernelMeta | ScheduledKernelMeta
    entry_op: ptx.EntryOp

    def ptx_ir(self) -> str:
        """The ptx dialect IR in MLIR's generic form (plain integers as ``N : i64``, so
        that upstream mlir-opt reads it: pkc.mlir_ints)."""
        import io

        from pkc.mlir_ints import GenericPrinter

        s = io.StringIO()
        GenericPrinter(stream=s, print_generic_format=True).print_op(self.entry_op)
        return s.getvalue()


def kernels_of(module: Operation) -> list[KernelOp]:
    return [op for op in module.walk() if isinstance(op, KernelOp)]


def compile_kernel(kop: KernelOp, target: str | CodegenTarget = DEFAULT_TARGET, *,
                   bulk: bool | None = None, entry_name: str | None = None) -> CompiledKernel:
    """Lowers one pk.kernel for ``target`` (``bulk`` overrides the target's use of
    ``cp.async.bulk``)."""
    from pkc.codegen.lower import lower_kernel

    t = get_codegen_target(target)
    if bulk is not None:
        t = t.with_bulk(bulk)
    name = kop.kernel_name.data
    entry_name = entry_name or _ident(name)
    if kop.schedule() is not None:
        from pkc.codegen.lower_schedule import lower_scheduled_kernel

        entry, meta = lower_scheduled_kernel(kop, t.name, entry_name)
        comments = [f"pkc: pk.kernel @{name} for {t.name} (schedule level)",
                    f"pkc: ABI {', '.join(f'{n}:{ty}' for n, ty in meta.params())}"]
        return CompiledKernel(name, entry_name, t.name, print_module([entry], t.name, comments),
                              meta, entry)
    entry, meta = lower_kernel(kop, t, entry_name)
    comments = [f"pkc: pk.kernel @{name} for {t.name}" + (" (bulk copies)" if t.bulk_copies else ""),
                f"pkc: ABI {', '.join(f'{n}:{ty}' for n, ty in meta.params())}"]
    text = print_module([entry], t.name, comments)
    return CompiledKernel(name, entry_name, t.name, text, meta, entry)


def compile_module(module: ModuleOp, target: str | CodegenTarget = DEFAULT_TARGET, *,
                   bulk: bool | None = None) -> dict[str, CompiledKernel]:
    """Every pk.kernel of a module, keyed by a unique name (``name``, ``name_1`` ...)."""
    out: dict[str, CompiledKernel] = {}
    for kop in kernels_of(module):
        key = kop.kernel_name.data
        n = 1
        while key in out:
            key = f"{kop.kernel_name.data}_{n}"
            n += 1
        try:
            out[key] = compile_kernel(kop, target, bulk=bulk, entry_name=_ident(key))
        except CodegenError as err:
            err.op = err.op or kop  # where the error is reported (pkc-opt: file:line:col)
            raise
    return out


def emit_ptx(module: ModuleOp, target: str = DEFAULT_TARGET) -> dict[str, str]:
    """``{kernel name: PTX module text}`` for every pk.kernel in ``module``."""
    return {k: c.ptx for k, c in compile_module(module, target).items()}


def dump_kernels(module: ModuleOp, folder: str | Path, targets=("sm_90a",), *,
                 check: bool = True) -> dict[str, dict]:
    """Writes ``<kernel>.<target>.ptx``, ``.meta.json``, ``.ptx.mlir`` and, with ptxas,
    ``.ptxas.txt`` for every kernel and target. Returns the parsed ptxas reports
    ``{kernel: {target: report dict}}``."""
    from pkc.codegen.ptxas import PtxasError, assemble, find_ptxas

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    reports: dict[str, dict] = {}
    for target in targets:
        for key, ck in compile_module(module, target).items():
            stem = folder / f"{key}.{target}"
            Path(f"{stem}.ptx").write_text(ck.ptx)
            Path(f"{stem}.meta.json").write_text(ck.meta.to_json())
            Path(f"{stem}.ptx.mlir").write_text(ck.ptx_ir())
            if check and find_ptxas():
                try:
                    _, rep, log = assemble(ck.ptx, target)
                except PtxasError as e:
                    Path(f"{stem}.ptxas.txt").write_text(str(e))
                    raise
                Path(f"{stem}.ptxas.txt").write_text(
                    "\n".join(r.line() for r in rep.values()) + "\n\n" + log)
                reports.setdefault(key, {})[target] = {n: r.to_dict() for n, r in rep.items()}
    return reports


__all__ = ["CompiledKernel", "CodegenError", "compile_kernel", "compile_module", "emit_ptx",
           "dump_kernels", "kernels_of"]
