"""The pk dialect: graph-level ops on per-rank tensors and kernel-level ops on tiles,
symmetric buffers and signals. ``PK`` is the xDSL dialect to load into a context; ``PKS``
the schedule level (:mod:`pkc.dialects.schedule`)."""

from xdsl.ir import Dialect

from pkc.dialects.graph import GRAPH_OPS
from pkc.dialects.kernel import KERNEL_OPS
from pkc.dialects.schedule import PKS
from pkc.dialects.types import BufferType, SignalsType, TileType

PK = Dialect("pk", [*GRAPH_OPS, *KERNEL_OPS], [TileType, BufferType, SignalsType])

__all__ = ["PK", "PKS", "TileType", "BufferType", "SignalsType"]
