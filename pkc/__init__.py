"""pkc: a compiler for PyTorch layers that mix computation with collective communication.

    prog = pkc.compile(fn_or_module, example_inputs, world_size=4)
    print(prog.ir())                      # graph-level pk IR
    outs = prog.run_simulated(inputs)     # W simulated ranks on the CPU interpreter

    model = torch.compile(model, backend=pkc.backend())

See README.md and the design notes for the pipeline (frontend -> passes -> codegen).
"""

from pkc.api import CompiledProgram, backend, compile
from pkc.frontend.errors import PkcFrontendError

__all__ = ["compile", "backend", "CompiledProgram", "PkcFrontendError"]
__version__ = "0.1.0"
