"""The frontend: capture PyTorch programs with torch.fx and import them into pk IR.

- :mod:`~pkc.frontend.capture`: dynamo + aot_autograd -> aten-level functional fx graph.
- :mod:`~pkc.frontend.importer`: fx graph -> graph-level pk IR (``func.func @main``).
- :mod:`~pkc.frontend.simulate`: eager torch over W simulated ranks (threaded process group).
- :mod:`~pkc.frontend.errors`: :class:`PkcFrontendError`.
"""

from pkc.frontend.capture import (
    CapturedGraph,
    GraphInput,
    GraphOutput,
    capture,
    capture_backend,
    fake_process_group,
)
from pkc.frontend.errors import PkcFrontendError
from pkc.frontend.importer import ImportedGraph, PkcNotCompiledWarning, import_graph
from pkc.frontend.simulate import SimulationError, run_eager, run_ranks

__all__ = [
    "CapturedGraph",
    "GraphInput",
    "GraphOutput",
    "ImportedGraph",
    "PkcFrontendError",
    "PkcNotCompiledWarning",
    "SimulationError",
    "capture",
    "capture_backend",
    "fake_process_group",
    "import_graph",
    "run_eager",
    "run_ranks",
]
