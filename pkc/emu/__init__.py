"""The emulator: runs ``ptx`` dialect kernels (what pkc prints as PTX) on the CPU for W
ranks, threads vectorized with numpy, and reports misuse (out-of-bounds accesses,
deadlocks, proxy-ordering bugs, register budgets, races between ranks) as errors naming
kernel, rank, CTA, warp and instruction. See docs/emulator.md.

* :func:`emulate`: a :class:`~pkc.codegen.emit.CompiledKernel` on per-rank inputs, bound
  with the runtime's ABI (outputs per rank);
* :func:`run_entry`: a bare ``ptx.entry`` on caller-allocated memory;
* ``python -m pkc.emu FILE.mlir``: every kernel of a file against the interpreter.
"""

from pkc.emu.errors import (
    EmuAsyncProxyError,
    EmuDeadlock,
    EmuError,
    EmuMemoryError,
    EmuRaceError,
    EmuRegisterBudgetError,
    EmuStepLimit,
    EmuTensorMemoryError,
    EmuTimeoutRecord,
    EmuUnsupported,
    EmuWarpError,
)
from pkc.emu.launch import emulate, run_entry
from pkc.emu.memory import GlobalMemory

__all__ = [
    "emulate", "run_entry", "GlobalMemory", "EmuError", "EmuAsyncProxyError", "EmuDeadlock",
    "EmuMemoryError", "EmuRaceError", "EmuRegisterBudgetError", "EmuStepLimit",
    "EmuTimeoutRecord", "EmuUnsupported", "EmuWarpError", "EmuTensorMemoryError",
]
