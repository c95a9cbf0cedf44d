"""pkc: a compiler for PyTorch layers that mix computation with collective communication.

    prog = pkc.compile(fn_or_module, example_inputs, world_size=4)
    print(prog.ir())                      # graph-level pk IR
    outs = prog.run_simulated(inputs)     # W simulated ranks on the CPU interpreter

    model = torch.compile(model, backend=pkc.backend())

See README.md and the design notes for the pipeline (frontend -> passes -> codegen).

The public names are loaded on first use (PEP 562 ``__getattr__``): importing a submodule
for IR-only work (``pkc.ir``, ``pkc.passes``, the ``pkc-opt`` tool) must not import torch,
which takes seconds.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for type checkers and IDEs; at run time these load lazily
    from pkc.api import CompiledProgram, compile
    from pkc.torch_backend import backend
    from pkc.frontend.errors import PkcFrontendError
    from pkc.aot import aot_compile

__all__ = ["compile", "backend", "aot_compile", "CompiledProgram", "PkcFrontendError"]
__version__ = "0.1.0"

_LAZY = {
    "compile": "pkc.api",
    "backend": "pkc.torch_backend",
    "CompiledProgram": "pkc.api",
    "PkcFrontendError": "pkc.frontend.errors",
    "aot_compile": "pkc.aot",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        # ``pkc.api``, ``pkc.frontend`` ...: a submodule, imported on first use (as the
        # eager imports made them reachable before).
        try:
            return importlib.import_module(f"pkc.{name}")
        except ModuleNotFoundError as err:
            if err.name != f"pkc.{name}":
                raise
            raise AttributeError(f"module 'pkc' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
