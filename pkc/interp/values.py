"""Element types to torch dtypes, errors, and the numeric rules shared by both IR levels.

The interpreter is the oracle for every pass and for codegen, so its arithmetic is plain
and documented: floating-point math runs in f32 (f64 for f64 data) and is rounded once to
the result type, which is also what the generated kernels do (f32 accumulators).
"""

from __future__ import annotations

import math

import torch
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    Float64Type,
    Float8E4M3FNType,
    Float8E5M2Type,
    IntegerType,
)
from xdsl.ir import Attribute, Operation

from pkc.dialects.types import is_float
from pkc.ir import op_where


class InterpError(Exception):
    """A program that cannot run: a protocol bug, an out-of-range peer, a bad input."""


def where(op: Operation) -> str:
    """``'pk.wait' at file:line:col`` when the op came from a file, else just the name."""
    return op_where(op)


def torch_dtype(t: Attribute) -> torch.dtype:
    if isinstance(t, BFloat16Type):
        return torch.bfloat16
    if isinstance(t, Float16Type):
        return torch.float16
    if isinstance(t, Float32Type):
        return torch.float32
    if isinstance(t, Float64Type):
        return torch.float64
    if isinstance(t, Float8E4M3FNType):
        return torch.float8_e4m3fn
    if isinstance(t, Float8E5M2Type):
        return torch.float8_e5m2
    if isinstance(t, IntegerType):
        return {1: torch.bool, 8: torch.int8, 32: torch.int32, 64: torch.int64}[t.width.data]
    raise InterpError(f"element type {t} has no torch equivalent")


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The precision floating-point math runs in: f32, or f64 for f64 data."""
    if dtype == torch.float64:
        return torch.float64
    if dtype.is_floating_point:
        return torch.float32
    return dtype


def poison(shape, dtype: torch.dtype) -> torch.Tensor:
    """Contents of memory nobody wrote: NaN for floats, a sentinel for integers, so a read
    of uninitialized data shows in the result instead of passing as zero."""
    if dtype.is_floating_point:
        return torch.full(shape, math.nan, dtype=dtype)
    if dtype == torch.bool:
        return torch.ones(shape, dtype=dtype)
    return torch.full(shape, torch.iinfo(dtype).min, dtype=dtype)


# pk.map functions by name, as torch calls on operands already in the compute type
# (public: the Inductor path of the runtime lowers pk.map with the same table).
UNARY_FNS = {
    "neg": torch.neg,
    "exp": torch.exp,
    "log": torch.log,
    "tanh": torch.tanh,
    "relu": torch.relu,
    "gelu": lambda x: torch.nn.functional.gelu(x),
    "gelu_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
    "silu": torch.nn.functional.silu,
    "sigmoid": torch.sigmoid,
    "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt,
    "abs": torch.abs,
    "reciprocal": torch.reciprocal,
    "cast": lambda x: x,
}
BINARY_FNS = {
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "div": torch.div,
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "pow": torch.pow,
    "eq": torch.eq,
    "ne": torch.ne,
    "lt": torch.lt,
    "le": torch.le,
    "gt": torch.gt,
    "ge": torch.ge,
}


def apply_map(fn: str, inputs: list[torch.Tensor], out_shape, out_dtype: torch.dtype) -> torch.Tensor:
    """An elementwise map with broadcasting, computed in f32 (or wider) and rounded once."""
    if fn == "cast":
        return inputs[0].to(out_dtype).broadcast_to(out_shape).clone()
    if fn == "where":
        cond, a, b = inputs
        ct = compute_dtype(a.dtype)
        r = torch.where(cond, a.to(ct), b.to(ct))
    else:
        ct = compute_dtype(inputs[0].dtype)
        xs = [x.to(ct) for x in inputs]
        r = UNARY_FNS[fn](*xs) if fn in UNARY_FNS else BINARY_FNS[fn](*xs)
    return r.to(out_dtype).broadcast_to(out_shape).clone()


def apply_reduce(fn: str, x: torch.Tensor, dims: list[int], keepdim: bool) -> torch.Tensor:
    xc = x.to(compute_dtype(x.dtype))
    if fn == "sum":
        r = xc.sum(dim=dims, keepdim=keepdim)
    elif fn == "mean":
        r = xc.mean(dim=dims, keepdim=keepdim)
    elif fn == "max":
        r = xc.amax(dim=dims, keepdim=keepdim)
    else:
        r = xc.amin(dim=dims, keepdim=keepdim)
    return r.to(x.dtype)


def matmul(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    ct = compute_dtype(a.dtype)
    return torch.matmul(a.to(ct), b.to(ct)).to(out_dtype)


def scaled_matmul(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor,
                  scale_b: torch.Tensor, bias: torch.Tensor | None,
                  out_dtype: torch.dtype) -> torch.Tensor:
    """torch's ``_scaled_mm`` as its CPU kernel computes it (bitwise): dequantize each fp8
    operand to f32 with its scale (broadcast: [1], [M, 1] or [1, N]), multiply in f32, add
    the bias in f32, round once. A kernel that scales its f32 accumulator in the epilogue
    instead (as cuBLASLt does) differs by f32 rounding only."""
    ct = torch.float32
    y = torch.matmul(a.to(ct) * scale_a.to(ct), b.to(ct) * scale_b.to(ct))
    if bias is not None:
        y = y + bias.to(ct)
    return y.to(out_dtype)


def reduce_ranks(fn: str, xs: list[torch.Tensor]) -> torch.Tensor:
    """Reduces W per-rank tensors in rank order, in f32 (or wider), rounded once."""
    ct = compute_dtype(xs[0].dtype)
    acc = xs[0].to(ct)
    for x in xs[1:]:
        x = x.to(ct)
        acc = acc + x if fn == "sum" else torch.maximum(acc, x) if fn == "max" else torch.minimum(acc, x)
    return acc.to(xs[0].dtype)


def scalar_value(attr: Attribute) -> float | int:
    v = attr.value.data
    return v
