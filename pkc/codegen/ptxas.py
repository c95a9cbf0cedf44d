"""Runs ``ptxas`` on emitted PTX: the check that every kernel assembles, and its resource
report (registers, shared memory, spills, stack) kept for inspection.

ptxas is looked up as ``$PKC_PTXAS``, then the copy that the ``nvidia-cuda-nvcc`` wheel
ships (a declared dependency of pkc, pinned in pyproject.toml: the same ptxas on every
machine), then ``ptxas`` on PATH and in /usr/local/cuda; :func:`find_ptxas` returns None
where none exists (the runtime then hands PTX to the driver, which compiles it itself).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pkc.codegen.errors import PtxasError


# Where the nvidia-cuda-nvcc wheel puts ptxas under site-packages: CUDA 13 wheels in
# nvidia/cu13/bin, CUDA 12 wheels in nvidia/cuda_nvcc/bin.
WHEEL_LAYOUTS = ("nvidia/cu13/bin/ptxas", "nvidia/cuda_nvcc/bin/ptxas", "nvidia/cu12/bin/ptxas")


def wheel_ptxas(search_path: list[str] | None = None) -> str | None:
    """The ptxas of the nvidia-cuda-nvcc wheel, looked for in every ``sys.path`` entry
    (without importing the ``nvidia`` namespace package)."""
    import sys

    for entry in search_path if search_path is not None else sys.path:
        for layout in WHEEL_LAYOUTS:
            p = Path(entry or ".") / layout
            if p.is_file() and os.access(p, os.X_OK):
                return str(p)
    return None


def find_ptxas() -> str | None:
    env = os.environ.get("PKC_PTXAS")
    if env and Path(env).exists():
        return env
    found = wheel_ptxas() or shutil.which("ptxas")
    if found:
        return found
    for cand in ("/usr/local/cuda/bin/ptxas",):
        if Path(cand).exists():
            return cand
    return None


def ptxas_version(ptxas: str | None = None) -> str:
    ptxas = ptxas or find_ptxas()
    if not ptxas:
        return "none"
    out = subprocess.run([ptxas, "--version"], capture_output=True, text=True).stdout
    m = re.search(r"release [\d.]+, V[\d.]+", out)
    return m.group(0) if m else out.strip().splitlines()[-1]


@dataclass
class PtxasReport:
    """What ``ptxas -v`` says about one kernel."""

    kernel: str
    target: str
    registers: int = 0
    shared_bytes: int = 0      # static shared memory (dynamic is the launch's)
    stack_bytes: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    cmem: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        return (f"{self.kernel} [{self.target}]: {self.registers} registers, "
                f"{self.shared_bytes} bytes smem, {self.stack_bytes} bytes stack, "
                f"{self.spill_stores} bytes spill stores, {self.spill_loads} bytes spill loads")


def parse_report(text: str, target: str) -> dict[str, PtxasReport]:
    """Parses ``ptxas -v`` output (stderr) into one report per kernel."""
    reports: dict[str, PtxasReport] = {}
    current: PtxasReport | None = None
    for line in text.splitlines():
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            current = reports.setdefault(m.group(1), PtxasReport(m.group(1), target))
            continue
        m = re.search(r"Function properties for (\S+)", line)
        if m:
            current = reports.setdefault(m.group(1), PtxasReport(m.group(1), target))
            continue
        if current is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            current.stack_bytes, current.spill_stores, current.spill_loads = map(int, m.groups())
        m = re.search(r"Used (\d+) registers", line)
        if m:
            current.registers = int(m.group(1))
            sm = re.search(r"(\d+) bytes smem", line)
            if sm:
                current.shared_bytes = int(sm.group(1))
            current.cmem = re.findall(r"\d+ bytes cmem\[\d+\]", line)
        if "warning" in line.lower():
            current.warnings.append(line.strip())
    return reports


def assemble(ptx_text: str, target: str, *, ptxas: str | None = None,
             output: str | Path | None = None, opt_level: int = 3) -> tuple[bytes, dict[str, PtxasReport], str]:
    """Assembles PTX for ``target`` (``sm_90a`` ...). Returns (cubin bytes, per-kernel
    report, raw ``-v`` log); raises :class:`PtxasError` with ptxas's messages on failure."""
    ptxas = ptxas or find_ptxas()
    if ptxas is None:
        raise PtxasError("ptxas not found (set PKC_PTXAS, install the CUDA toolkit or the "
                         "nvidia-cuda-nvcc wheel)")
    with tempfile.TemporaryDirectory(prefix="pkc-ptxas-") as tmp:
        src = Path(tmp) / "kernel.ptx"
        out = Path(output) if output else Path(tmp) / "kernel.cubin"
        src.write_text(ptx_text)
        proc = subprocess.run(
            [ptxas, "-v", f"-O{opt_level}", f"-arch={target}", str(src), "-o", str(out)],
            capture_output=True, text=True,
        )
        log = proc.stdout + proc.stderr
        if proc.returncode != 0:
            raise PtxasError(f"ptxas -arch={target} failed:\n{_with_context(log, ptx_text)}")
        return out.read_bytes(), parse_report(log, target), log


def assemble_one(ptx_text: str, target: str = "sm_90a") -> tuple[bytes, PtxasReport]:
    """Assembles a module of one kernel: (cubin, that kernel's report)."""
    cubin, reports, _ = assemble(ptx_text, target)
    if len(reports) != 1:
        raise PtxasError(f"expected one kernel in the module, ptxas reported {sorted(reports)}")
    return cubin, next(iter(reports.values()))


def _with_context(log: str, ptx_text: str) -> str:
    """ptxas's messages, each followed by the PTX line it names."""
    lines = ptx_text.splitlines()
    out = []
    for msg in log.splitlines():
        out.append(msg)
        m = re.search(r"line (\d+)", msg)
        if m and 0 < int(m.group(1)) <= len(lines):
            out.append(f"    > {lines[int(m.group(1)) - 1].strip()}")
    return "\n".join(out)


def check(ptx_text: str, target: str) -> dict[str, PtxasReport]:
    """Assembles and returns only the per-kernel report."""
    return assemble(ptx_text, target)[1]
