"""The pk dialect: graph-level ops on per-rank tensors and kernel-level ops on tiles,
symmetric buffers and signals. ``PK`` is the xDSL dialect to load into a context; ``PKS``
the schedule level (:mod:`pkc.dialects.schedule`).

The names here are made on first use (PEP 562): importing this package imports none of
its dialects, so that ``pkc-opt`` pays only for the dialects its input uses
(:func:`pkc.ir.make_context` registers each to be loaded when the parser first meets it).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from xdsl.ir import Dialect

    from pkc.dialects.types import BufferType, SignalsType, TileType

    PK: Dialect
    PKS: Dialect

__all__ = ["PK", "PKS", "TileType", "BufferType", "SignalsType"]

_TYPES = ("TileType", "BufferType", "SignalsType")


def _make_pk() -> Any:
    from xdsl.ir import Dialect

    from pkc.dialects.graph import GRAPH_OPS
    from pkc.dialects.graph_scaled import SCALED_OPS
    from pkc.dialects.kernel import KERNEL_OPS
    from pkc.dialects.types import BufferType, SignalsType, TileType

    return Dialect("pk", [*GRAPH_OPS, *SCALED_OPS, *KERNEL_OPS], [TileType, BufferType, SignalsType])


def __getattr__(name: str) -> Any:
    if name == "PK":
        value = _make_pk()
    elif name == "PKS":
        value = importlib.import_module("pkc.dialects.schedule").PKS
    elif name in _TYPES:
        value = getattr(importlib.import_module("pkc.dialects.types"), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # made once: later lookups find it without coming here
    return value
