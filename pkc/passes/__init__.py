"""Optimization passes: one pass per file in this package, registered by name.

Import only the registry here: pass modules are imported lazily by
:func:`available_passes`, so importing ``pkc.passes`` stays cheap and cycle-free.
"""

from pkc.passes.registry import (
    PassLoadError,
    PipelineError,
    available_passes,
    parse_pipeline,
    register_pass,
)

__all__ = [
    "PassLoadError",
    "PipelineError",
    "available_passes",
    "parse_pipeline",
    "register_pass",
]
