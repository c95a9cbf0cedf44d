"""Encoding of torch calls that pkc does not compile (``pk.opaque``).

The format of the op's ``spec`` attribute, so it lives with the dialect: the frontend
encodes with it, the interpreter and the runtime decode (this module imports torch; the
rest of :mod:`pkc.dialects` does not, and does not import it).

A ``pk.opaque`` op names its torch op (``target = "aten::cumsum.default"``, see
:func:`qualified_name` / :func:`resolve_target`) and carries its arguments as JSON
(``spec``)::

    {"args": [{"operand": 0}, 1], "kwargs": {"dtype": {"dtype": "float32"}}}

Tensor operands appear as ``{"operand": i}`` (the op's i-th operand); lists of tensors as
lists of those. Other values: ``null``/bool/int/str as themselves, finite floats as JSON
numbers, ``{"float": "inf" | "-inf" | "nan"}``, ``{"dtype": "bfloat16"}``,
``{"device": "cpu"}``, ``{"layout": "strided"}``, ``{"memory_format": "contiguous_format"}``,
``{"complex": [re, im]}``. The interpreter decodes the spec with :func:`decode_call` and
calls the op once per rank.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

__all__ = ["encode_call", "decode_call", "resolve_target", "qualified_name", "OpaqueEncodingError"]


class OpaqueEncodingError(TypeError):
    """An argument that has no JSON encoding (a generator, a symbolic int, ...)."""


_DTYPES = {str(d).removeprefix("torch."): d for d in vars(torch).values() if isinstance(d, torch.dtype)}
_LAYOUTS = {str(v).removeprefix("torch."): v for v in vars(torch).values() if isinstance(v, torch.layout)}
_MEMORY_FORMATS = {
    str(v).removeprefix("torch."): v for v in vars(torch).values() if isinstance(v, torch.memory_format)
}


def _default_is_tensor(x: object) -> bool:
    return isinstance(x, (torch.Tensor, torch.fx.Node))


def encode_call(
    args: Sequence[Any],
    kwargs: dict[str, Any] | None = None,
    is_tensor: Callable[[object], bool] = _default_is_tensor,
) -> tuple[list[Any], str]:
    """``(tensors, spec)``: the tensor operands in order of appearance, and the JSON spec.

    ``is_tensor`` says which objects are operands (by default torch tensors and fx nodes,
    so the importer can encode a node's arguments directly)."""
    tensors: list[Any] = []

    def enc(x: Any) -> Any:
        if is_tensor(x):
            tensors.append(x)
            return {"operand": len(tensors) - 1}
        if x is None or isinstance(x, (bool, str)):
            return x
        if isinstance(x, int) and not isinstance(x, torch.SymInt):
            return x
        if isinstance(x, float):
            if math.isfinite(x):
                return x
            return {"float": "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")}
        if isinstance(x, complex):
            return {"complex": [enc(x.real), enc(x.imag)]}
        if isinstance(x, torch.dtype):
            return {"dtype": str(x).removeprefix("torch.")}
        if isinstance(x, torch.device):
            return {"device": str(x)}
        if isinstance(x, torch.layout):
            return {"layout": str(x).removeprefix("torch.")}
        if isinstance(x, torch.memory_format):
            return {"memory_format": str(x).removeprefix("torch.")}
        if isinstance(x, (list, tuple)):
            return [enc(v) for v in x]
        raise OpaqueEncodingError(f"cannot encode argument {x!r} of type {type(x).__name__}")

    spec = {"args": [enc(a) for a in args], "kwargs": {k: enc(v) for k, v in (kwargs or {}).items()}}
    return tensors, json.dumps(spec, separators=(",", ":"))


def decode_call(spec: str, tensors: Sequence[Any]) -> tuple[list[Any], dict[str, Any]]:
    """Inverse of :func:`encode_call`: ``{"operand": i}`` becomes ``tensors[i]``."""
    data = json.loads(spec)

    def dec(x: Any) -> Any:
        if isinstance(x, list):
            return [dec(v) for v in x]
        if isinstance(x, dict):
            if len(x) != 1:
                raise ValueError(f"malformed opaque spec entry {x!r}")
            (key, value), = x.items()
            if key == "operand":
                return tensors[value]
            if key == "float":
                return float(value)
            if key == "complex":
                return complex(dec(value[0]), dec(value[1]))
            if key == "dtype":
                return _DTYPES[value]
            if key == "device":
                return torch.device(value)
            if key == "layout":
                return _LAYOUTS[value]
            if key == "memory_format":
                return _MEMORY_FORMATS[value]
            raise ValueError(f"unknown opaque spec entry {x!r}")
        return x

    return [dec(a) for a in data.get("args", [])], {k: dec(v) for k, v in data.get("kwargs", {}).items()}


def qualified_name(op: torch._ops.OpOverload) -> str:
    """``aten::cumsum.default``: the schema name and the overload."""
    return f"{op._schema.name}.{op._overloadname}"


def resolve_target(name: str) -> torch._ops.OpOverload:
    """The OpOverload named ``ns::op.overload`` (``ns.op.overload`` is accepted too)."""
    if "::" in name:
        ns, rest = name.split("::", 1)
    else:
        ns, _, rest = name.partition(".")
    opname, _, overload = rest.partition(".")
    try:
        packet = getattr(getattr(torch.ops, ns), opname)
        return getattr(packet, overload or "default")
    except (AttributeError, RuntimeError) as err:
        raise ValueError(f"unknown torch op '{name}'") from err
