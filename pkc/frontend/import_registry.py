"""The importer's handler registry and the helpers its handlers share: the table from an aten /
c10d op to the function that imports it (:func:`handles`), argument binding by schema,
dimension normalization, element types, and the collective's group."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    Float64Type,
    Float8E4M3FNType,
    Float8E5M2Type,
    IntegerType,
    bf16,
    f16,
    f32,
    f64,
    i1,
    i32,
    i64,
)
from xdsl.ir import Attribute, SSAValue

aten = torch.ops.aten

_ELEMENTS: dict[torch.dtype, Attribute] = {
    torch.float32: f32,
    torch.bfloat16: bf16,
    torch.float16: f16,
    torch.float64: f64,
    torch.int64: i64,
    torch.int32: i32,
    torch.int8: IntegerType(8),
    torch.bool: i1,
    torch.float8_e4m3fn: Float8E4M3FNType(),
    torch.float8_e5m2: Float8E5M2Type(),
}


def element_type(dtype: torch.dtype) -> Attribute | None:
    return _ELEMENTS.get(dtype)


def torch_dtype_of(elem: Attribute) -> torch.dtype:
    for d, e in _ELEMENTS.items():
        if e == elem:
            return d
    raise KeyError(elem)


def is_float(elem: Attribute) -> bool:
    return isinstance(elem, (BFloat16Type, Float16Type, Float32Type, Float64Type))


def wide_type(elem: Attribute) -> Attribute:
    """The element type torch computes normalizations in: f32 for 16-bit floats."""
    return f32 if isinstance(elem, (BFloat16Type, Float16Type)) else elem


Value = SSAValue
Handler = Callable[["_Importer", torch.fx.Node, dict[str, Any]], Any]
HANDLERS: dict[Any, Handler] = {}


def handles(*packets: Any) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        for p in packets:
            if p is not None:
                HANDLERS[p] = fn
        return fn

    return register


def op_or_none(ns: str, name: str) -> Any:
    """``torch.ops.ns.name`` if this torch has it, else None."""
    try:
        return getattr(getattr(torch.ops, ns), name)
    except (AttributeError, RuntimeError):
        return None


class Unsupported(Exception):
    """A handler's way of saying: keep this node as pk.opaque."""


def bind_args(node: torch.fx.Node) -> dict[str, Any]:
    """The node's arguments by schema name, defaults filled in."""
    schema = node.target._schema  # type: ignore[union-attr]
    out: dict[str, Any] = {}
    pos = 0
    for a in schema.arguments:
        if not a.kwarg_only and pos < len(node.args):
            out[a.name] = node.args[pos]
            pos += 1
        elif a.name in node.kwargs:
            out[a.name] = node.kwargs[a.name]
        elif a.has_default_value():
            out[a.name] = a.default_value
        else:
            out[a.name] = None
    return out


def norm_dim(d: int, rank: int) -> int:
    return d + rank if d < 0 else d


def norm_dims(dims: Any, rank: int) -> list[int]:
    if dims is None:
        return list(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    dims = list(dims)
    if not dims:
        return list(range(rank))
    return sorted({norm_dim(int(d), max(rank, 1)) for d in dims})


@dataclass(frozen=True)
class Group:
    """The ranks one collective spans: ``size`` ranks; ``groups`` lists every group of its
    mesh dimension (None: the whole world)."""

    size: int
    groups: list[list[int]] | None


