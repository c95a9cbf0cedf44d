"""Rules shared by graph-level ops (on tensors) and kernel-level ops (on tiles).

Elementwise maps, reductions and splat constants mean the same thing on a whole per-rank
tensor and on a tile, so their function tables, shape rules and checks live here once.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import (
    ArrayAttr,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    i1,
    i64,
)
from xdsl.ir import Attribute
from xdsl.utils.exceptions import VerifyException

from pkc.dialects.types import float_fits, int_fits, is_float, shape_str

# Elementwise functions: name -> number of operands.
UNARY_FNS = (
    "neg", "exp", "log", "tanh", "relu", "gelu", "gelu_tanh", "silu", "sigmoid",
    "sqrt", "rsqrt", "abs", "reciprocal", "cast",
)
BINARY_FNS = ("add", "sub", "mul", "div", "maximum", "minimum", "pow")
COMPARE_FNS = ("eq", "ne", "lt", "le", "gt", "ge")
TERNARY_FNS = ("where",)
MAP_ARITY = {
    **{f: 1 for f in UNARY_FNS},
    **{f: 2 for f in BINARY_FNS + COMPARE_FNS},
    **{f: 3 for f in TERNARY_FNS},
}
# Functions defined only on floating-point elements.
FLOAT_ONLY_FNS = frozenset(UNARY_FNS) - {"neg", "abs", "relu", "cast"} | {"div", "pow"}

# Sanity bounds, so that a typo (world = 2^40, sms = 100000) is an error naming the op
# rather than a plan with billions of buffers or a grid that can never be resident.
# The largest NVLink domain pkc plans for is 72 GPUs (NVL72) and the largest GPU it
# targets has 148 SMs; the bounds leave room for bigger machines. Codegen checks a
# kernel's SMs against its target's real count.
MAX_WORLD = 1024
MAX_SMS = 1024


def verify_world(op_name: str, world: int) -> None:
    if not 1 <= world <= MAX_WORLD:
        raise VerifyException(
            f"'{op_name}' world size must be between 1 and {MAX_WORLD}, got {world}"
        )


REDUCE_FNS = ("sum", "max", "min", "mean")
COLLECTIVE_REDUCE_FNS = ("sum", "max", "min")


def broadcast_shapes(op_name: str, shapes: Sequence[Sequence[int]]) -> tuple[int, ...]:
    """Numpy broadcasting of several shapes; raises a VerifyException naming the op."""
    rank = max((len(s) for s in shapes), default=0)
    out = [1] * rank
    for s in shapes:
        for i, d in enumerate(s):
            j = rank - len(s) + i
            if d != 1 and out[j] not in (1, d):
                raise VerifyException(
                    f"'{op_name}' operand shapes {', '.join(shape_str(x) or '()' for x in shapes)} "
                    "do not broadcast"
                )
            if d != 1:
                out[j] = d
    return tuple(out)


def verify_map(
    op_name: str,
    fn: str,
    operands: Sequence[tuple[tuple[int, ...], Attribute]],
    result: tuple[tuple[int, ...], Attribute],
) -> None:
    """Checks an elementwise map: known fn, arity, broadcasting, element types."""
    if fn not in MAP_ARITY:
        raise VerifyException(
            f"'{op_name}' unknown function \"{fn}\" (known: {', '.join(sorted(MAP_ARITY))})"
        )
    if len(operands) != MAP_ARITY[fn]:
        raise VerifyException(
            f"'{op_name}' function \"{fn}\" takes {MAP_ARITY[fn]} operand(s), got {len(operands)}"
        )
    shapes = [s for s, _ in operands]
    expected = broadcast_shapes(op_name, shapes)
    result_shape, result_elem = result
    if tuple(result_shape) != expected:
        raise VerifyException(
            f"'{op_name}' result shape {shape_str(result_shape) or '()'} does not match the "
            f"broadcast operand shape {shape_str(expected) or '()'}"
        )
    _verify_map_elements(op_name, fn, [e for _, e in operands], result_elem)


def _verify_map_elements(op_name: str, fn: str, elems: list[Attribute], result: Attribute):
    if fn == "cast":
        return
    if fn == "where":
        if elems[0] != i1:
            raise VerifyException(f"'{op_name}' \"where\" condition must be i1, got {elems[0]}")
        elems = elems[1:]
    if any(e != elems[0] for e in elems):
        raise VerifyException(
            f"'{op_name}' function \"{fn}\" needs operands of one element type, got "
            f"{', '.join(str(e) for e in elems)} (insert a \"cast\")"
        )
    if fn in COMPARE_FNS:
        if result != i1:
            raise VerifyException(f"'{op_name}' comparison \"{fn}\" must produce i1, got {result}")
        return
    if fn in FLOAT_ONLY_FNS and not is_float(elems[0]):
        raise VerifyException(f"'{op_name}' function \"{fn}\" needs float operands, got {elems[0]}")
    if result != elems[0]:
        raise VerifyException(
            f"'{op_name}' result element type {result} differs from operand element type "
            f"{elems[0]} (use \"cast\" to convert)"
        )


def reduced_shape(shape: Sequence[int], dims: Sequence[int], keepdim: bool) -> tuple[int, ...]:
    if keepdim:
        return tuple(1 if i in dims else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in dims)


def verify_reduce(
    op_name: str,
    fn: str,
    dims: Sequence[int],
    keepdim: bool,
    operand: tuple[tuple[int, ...], Attribute],
    result: tuple[tuple[int, ...], Attribute],
) -> None:
    shape, elem = operand
    if fn not in REDUCE_FNS:
        raise VerifyException(f"'{op_name}' unknown reduction \"{fn}\" (known: {', '.join(REDUCE_FNS)})")
    if not dims:
        raise VerifyException(f"'{op_name}' needs at least one dimension to reduce")
    for d in dims:
        if not 0 <= d < len(shape):
            raise VerifyException(
                f"'{op_name}' dimension {d} is out of range for rank {len(shape)} "
                f"(dims are non-negative in pk IR)"
            )
    if len(set(dims)) != len(dims):
        raise VerifyException(f"'{op_name}' repeats a dimension in {list(dims)}")
    expected = reduced_shape(shape, dims, keepdim)
    if tuple(result[0]) != expected:
        raise VerifyException(
            f"'{op_name}' result shape {shape_str(result[0]) or '()'} should be "
            f"{shape_str(expected) or '()'} (operand {shape_str(shape)}, dims {list(dims)}, "
            f"keepdim={keepdim})"
        )
    if result[1] != elem:
        raise VerifyException(f"'{op_name}' result element type {result[1]} differs from operand {elem}")
    if fn == "mean" and not is_float(elem):
        raise VerifyException(f"'{op_name}' \"mean\" needs float elements, got {elem}")


def scalar_attr(value: float | int | bool, element_type: Attribute) -> Attribute:
    """The attribute that holds a splat scalar of the given element type."""
    if is_float(element_type):
        return FloatAttr(float(value), element_type)
    assert isinstance(element_type, IntegerType)
    return IntegerAttr(int(value), element_type)


def verify_scalar(op_name: str, value: Attribute, element_type: Attribute) -> None:
    """A splat value must be a float for float elements and an integer for integer ones
    (as MLIR's constants: no implicit conversion), within the element type's range."""
    if is_float(element_type):
        ok = isinstance(value, FloatAttr) and float_fits(value.value.data, element_type)
    else:
        ok = (isinstance(value, IntegerAttr) and isinstance(element_type, IntegerType)
              and int_fits(value.value.data, element_type))
    if not ok:
        raise VerifyException(f"'{op_name}' value {value} does not fit element type {element_type}")


def int_array(values: Sequence[int]) -> ArrayAttr[IntegerAttr]:
    return ArrayAttr([IntegerAttr(v, i64) for v in values])


def int_list(attr: ArrayAttr) -> list[int]:
    return [a.value.data for a in attr.data]
