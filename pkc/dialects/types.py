"""Types of the pk dialect and the element-type helpers shared by its ops.

* ``!pk.tile<128x64xbf16>``: a tile, an immutable value held by one worker (in registers
  or shared memory once lowered). Kernel-level loads produce tiles; MMAs, maps and puts
  consume them.
* ``!pk.buffer<1024x512xbf16>``: a rank's private global-memory buffer.
  ``!pk.buffer<1024x512xbf16, symmetric>``: a symmetric buffer, allocated at the same
  offset on every rank, so that any rank can put into any peer's copy.
* ``!pk.signals<16>``: a symmetric array of 16 unsigned 32-bit counters on every rank,
  zero at kernel entry; peers add to them (release) and their owner waits on them
  (acquire).

Graph-level values are builtin ``tensor<...>`` types: one per-rank tensor each.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence

from xdsl.dialects.builtin import (
    ArrayAttr,
    BFloat16Type,
    Float16Type,
    Float32Type,
    Float64Type,
    Float8E4M3FNType,
    Float8E5M2Type,
    IndexType,
    IntAttr,
    IntegerType,
    StringAttr,
    TensorType,
)
from xdsl.ir import Attribute, ParametrizedAttribute, TypeAttribute
from xdsl.irdl import irdl_attr_definition
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

FLOAT_TYPES = (BFloat16Type, Float16Type, Float32Type, Float64Type)
# 8-bit floats (MLIR's f8E4M3FN and f8E5M2, torch's float8_e4m3fn / float8_e5m2). They are
# storage types only: no arithmetic runs on them. pk.scaled_matmul multiplies them (exactly,
# into f32), pk.map "cast" converts them, and ops that only move data (views, concat, slice,
# all_gather, all_to_all; loads, stores and puts of tiles) carry them. Kept out of
# FLOAT_TYPES so that every op that computes on floats refuses them by default.
FP8_TYPES = (Float8E4M3FNType, Float8E5M2Type)
# Element types a tile or a buffer may hold.
SUPPORTED_ELEMENT_TYPES = "bf16, f16, f32, f64, i1, i8, i32, i64"
FP8_ELEMENT_TYPES = "f8E4M3FN, f8E5M2"
_INT_WIDTHS = (1, 8, 32, 64)


def is_float(element_type: Attribute) -> bool:
    return isinstance(element_type, FLOAT_TYPES)


def is_fp8(element_type: Attribute) -> bool:
    return isinstance(element_type, FP8_TYPES)


def mma_operands_problem(a: Attribute, b: Attribute) -> str | None:
    """Why tiles of ``a`` and ``b`` cannot be multiplied into an f32 accumulator, if so:
    they need one float type, or two 8-bit floats (f8E4M3FN and f8E5M2 mix, as the tensor
    cores' fp8 MMAs take them; two f8E5M2 they do not)."""
    if is_fp8(a) and is_fp8(b):
        if isinstance(a, Float8E5M2Type) and isinstance(b, Float8E5M2Type):
            return "of two f8E5M2 tiles is not supported (make one of them f8E4M3FN)"
        return None
    if a != b or not is_float(a):
        return f"a and b need one float element type, got {a} and {b}"
    return None


def is_supported_element(element_type: Attribute) -> bool:
    if is_float(element_type):
        return True
    return isinstance(element_type, IntegerType) and element_type.width.data in _INT_WIDTHS


def float_fits(value: float, element_type: Attribute) -> bool:
    """Whether ``value`` rounds to a finite number of the float type (infinities and NaN
    fit: they are values of every float type; 1e39 does not fit f32)."""
    if math.isinf(value) or math.isnan(value) or isinstance(element_type, Float64Type):
        return True
    try:
        if isinstance(element_type, Float16Type):
            struct.pack("<e", value)
            return True
        f32 = struct.unpack("<I", struct.pack("<f", value))[0]
    except OverflowError:
        return False
    if isinstance(element_type, BFloat16Type):  # round to nearest even into bf16
        return (((f32 + 0x7FFF + ((f32 >> 16) & 1)) >> 16) & 0x7F80) != 0x7F80
    return True


def int_fits(value: int, element_type: IntegerType) -> bool:
    """Whether ``value`` is a ``width``-bit integer, signed or unsigned (MLIR's rule for
    signless integers: -2^(w-1) <= value < 2^w)."""
    width = element_type.width.data
    return -(1 << (width - 1)) <= value < (1 << width)


def shape_str(shape: Sequence[int]) -> str:
    return "x".join(str(d) for d in shape)


def _parse_shape_and_element(parser: AttrParser) -> tuple[list[int], Attribute]:
    pos = parser.pos
    dims, element_type = parser.parse_ranked_shape()
    if any(d < 0 for d in dims):
        parser.raise_error("pk types need static shapes ('?' is not allowed)", pos, parser.pos)
    return dims, element_type


def _verify_shape_and_element(kind: str, shape: Sequence[int], element_type: Attribute):
    if len(shape) == 0:
        raise VerifyException(f"{kind} must have rank >= 1")
    if any(d <= 0 for d in shape):
        raise VerifyException(f"{kind} dimensions must be positive, got {shape_str(shape)}")
    if not is_supported_element(element_type) and not is_fp8(element_type):
        raise VerifyException(
            f"{kind} element type {element_type} is not supported "
            f"(expected one of {SUPPORTED_ELEMENT_TYPES}, {FP8_ELEMENT_TYPES})"
        )


class _ShapedPkType:
    """Shape accessors shared by tiles and buffers."""

    shape: ArrayAttr[IntAttr]
    element_type: Attribute

    def get_shape(self) -> tuple[int, ...]:
        return tuple(d.data for d in self.shape.data)

    @property
    def rank(self) -> int:
        return len(self.shape.data)

    def numel(self) -> int:
        n = 1
        for d in self.get_shape():
            n *= d
        return n


@irdl_attr_definition
class TileType(_ShapedPkType, ParametrizedAttribute, TypeAttribute):
    """A tile: a small dense block of elements held by one worker."""

    name = "pk.tile"

    shape: ArrayAttr[IntAttr]
    element_type: Attribute

    def __init__(self, shape: Sequence[int], element_type: Attribute):
        super().__init__(ArrayAttr([IntAttr(d) for d in shape]), element_type)

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> list[Attribute]:
        with parser.in_angle_brackets():
            dims, element_type = _parse_shape_and_element(parser)
        return [ArrayAttr([IntAttr(d) for d in dims]), element_type]

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            printer.print_string(shape_str(self.get_shape()) + "x")
            printer.print_attribute(self.element_type)

    def verify(self) -> None:
        _verify_shape_and_element("!pk.tile", self.get_shape(), self.element_type)


LOCAL = "local"
SYMMETRIC = "symmetric"


@irdl_attr_definition
class BufferType(_ShapedPkType, ParametrizedAttribute, TypeAttribute):
    """A buffer in global memory: private to a rank (local) or symmetric across ranks."""

    name = "pk.buffer"

    shape: ArrayAttr[IntAttr]
    element_type: Attribute
    space: StringAttr

    def __init__(self, shape: Sequence[int], element_type: Attribute, space: str = LOCAL):
        super().__init__(ArrayAttr([IntAttr(d) for d in shape]), element_type, StringAttr(space))

    @property
    def symmetric(self) -> bool:
        return self.space.data == SYMMETRIC

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> list[Attribute]:
        with parser.in_angle_brackets():
            dims, element_type = _parse_shape_and_element(parser)
            space = LOCAL
            if parser.parse_optional_punctuation(",") is not None:
                pos = parser.pos
                space = parser.parse_identifier()
                if space not in (LOCAL, SYMMETRIC):
                    parser.raise_error(
                        f"buffer memory space must be 'local' or 'symmetric', got '{space}'",
                        pos,
                        parser.pos,
                    )
        return [ArrayAttr([IntAttr(d) for d in dims]), element_type, StringAttr(space)]

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            printer.print_string(shape_str(self.get_shape()) + "x")
            printer.print_attribute(self.element_type)
            if self.symmetric:
                printer.print_string(", symmetric")

    def verify(self) -> None:
        _verify_shape_and_element("!pk.buffer", self.get_shape(), self.element_type)
        if self.space.data not in (LOCAL, SYMMETRIC):
            raise VerifyException(f"!pk.buffer space must be local or symmetric, got {self.space.data}")


@irdl_attr_definition
class SignalsType(ParametrizedAttribute, TypeAttribute):
    """A symmetric array of 32-bit signal counters (one array on every rank)."""

    name = "pk.signals"

    count: IntAttr

    def __init__(self, count: int):
        super().__init__(IntAttr(count))

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> list[Attribute]:
        with parser.in_angle_brackets():
            count = parser.parse_integer(allow_boolean=False, allow_negative=False)
        return [IntAttr(count)]

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<{self.count.data}>")

    def verify(self) -> None:
        if self.count.data <= 0:
            raise VerifyException(f"!pk.signals needs at least one counter, got {self.count.data}")


def tensor_shape(t: Attribute) -> tuple[int, ...]:
    assert isinstance(t, TensorType)
    return tuple(t.get_shape())


def index_type() -> IndexType:
    return IndexType()
