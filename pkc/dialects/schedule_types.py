"""The types of the schedule-level dialect ``pks`` (:mod:`pkc.dialects.schedule`):
``!pks.tmap`` (a TMA tensor map), ``!pks.smem`` (shared-memory slots), ``!pks.mbarriers``,
``!pks.acc`` (a warpgroup's or CTA's f32 accumulator) and ``!pks.scales`` (a tile's
epilogue scales loaded ahead into registers), with the enums of role kinds and
B-operand layouts, the hardware limits the verifiers check, and ``_fail`` (a verifier error
naming the op) that the op modules share.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

from xdsl.dialects.builtin import ArrayAttr, IntAttr, StringAttr
from xdsl.ir import Attribute, ParametrizedAttribute, TypeAttribute
from xdsl.irdl import irdl_attr_definition
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

ELEMENT_BYTES = {"bf16": 2, "f16": 2, "f32": 4, "e4m3": 1, "e5m2": 1}
# 8-bit floats (f8E4M3FN, f8E5M2: PTX's .e4m3 / .e5m2) of the fp8 GEMM's operands
FP8_ELEMENTS = ("e4m3", "e5m2")
# the element types an MMA multiplies: 16-bit floats, or fp8 (A and B may differ)
MMA_ELEMENTS = ("bf16", "f16", *FP8_ELEMENTS)
SWIZZLES = (0, 32, 64, 128)
MAX_SMEM = 232448            # dynamic shared memory per CTA on sm_90 / sm_100 (227 KiB)


class RoleKind(Enum):
    PRODUCER = "producer"
    CONSUMER = "consumer"
    MMA = "mma"              # issues the MMAs of an accumulator the epilogue role reads
    EPILOGUE = "epilogue"    # reads a shared (tensor-memory) accumulator and stores it


class BMajor(Enum):
    """How the B operand's stage is laid out: K contiguous (``[N, K]`` given) or N."""

    K = "k"
    N = "n"


def _fail(op: str, msg: str) -> None:
    raise VerifyException(f"'{op}' {msg}")


# ----------------------------------------------------------------------------------------
# Types


@irdl_attr_definition
class TmapType(ParametrizedAttribute, TypeAttribute):
    """A TMA tensor map of a kernel buffer: element type, box (innermost dimension first),
    swizzle in bytes (0, 32, 64, 128). Out-of-bounds loads fill zeros; stores clip."""

    name = "pks.tmap"
    element: StringAttr
    box: ArrayAttr[IntAttr]
    swizzle: IntAttr

    def __init__(self, element: str, box: Sequence[int], swizzle: int):
        super().__init__(StringAttr(element), ArrayAttr([IntAttr(b) for b in box]), IntAttr(swizzle))

    @property
    def box_dims(self) -> list[int]:
        return [b.data for b in self.box.data]

    @property
    def box_bytes(self) -> int:
        n = ELEMENT_BYTES[self.element.data]
        for b in self.box_dims:
            n *= b
        return n

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> list[Attribute]:
        with parser.in_angle_brackets():
            el = parser.parse_identifier()
            parser.parse_punctuation(",")
            dims = parser.parse_dimension_list()
            parser.parse_punctuation(",")
            parser.parse_keyword("swizzle")
            sw = parser.parse_integer()
        return [StringAttr(el), ArrayAttr([IntAttr(d) for d in dims]), IntAttr(sw)]

    def print_parameters(self, printer: Printer) -> None:
        dims = "x".join(str(d) for d in self.box_dims)
        printer.print_string(f"<{self.element.data}, {dims}, swizzle {self.swizzle.data}>")

    def verify(self) -> None:
        el, box, sw = self.element.data, self.box_dims, self.swizzle.data
        if el not in ELEMENT_BYTES:
            raise VerifyException(f"!pks.tmap element {el!r} not in {sorted(ELEMENT_BYTES)}")
        if not 2 <= len(box) <= 3:
            raise VerifyException(f"!pks.tmap box has rank {len(box)}; pkc uses rank 2-3")
        if any(not 1 <= b <= 256 for b in box):
            raise VerifyException(f"!pks.tmap box {box}: each dimension must be 1..256 (TMA)")
        inner = box[0] * ELEMENT_BYTES[el]
        if inner % 16:
            raise VerifyException(f"!pks.tmap box inner dimension is {inner} bytes, not a multiple of 16")
        if sw not in SWIZZLES:
            raise VerifyException(f"!pks.tmap swizzle {sw} not in {SWIZZLES}")
        if sw and inner > sw:
            raise VerifyException(f"!pks.tmap box inner dimension is {inner} bytes, more than "
                                  f"its {sw}-byte swizzle span")


@irdl_attr_definition
class SmemType(ParametrizedAttribute, TypeAttribute):
    """``count`` shared-memory slots of ``bytes`` each (a ring's stages, epilogue buffers)."""

    name = "pks.smem"
    count: IntAttr
    bytes: IntAttr

    def __init__(self, count: int, nbytes: int):
        super().__init__(IntAttr(count), IntAttr(nbytes))

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> list[Attribute]:
        with parser.in_angle_brackets():
            c = parser.parse_integer()
            parser.parse_keyword("x")
            b = parser.parse_integer()
        return [IntAttr(c), IntAttr(b)]

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<{self.count.data} x {self.bytes.data}>")

    def verify(self) -> None:
        if self.count.data < 1 or self.bytes.data < 16 or self.bytes.data % 16:
            raise VerifyException(f"!pks.smem<{self.count.data} x {self.bytes.data}>: needs >= 1 "
                                  "slot of a positive multiple of 16 bytes")


@irdl_attr_definition
class MbarriersType(ParametrizedAttribute, TypeAttribute):
    """``count`` mbarriers, each completing a phase after ``arrivals`` arrivals (and the
    transaction bytes announced with them)."""

    name = "pks.mbarriers"
    count: IntAttr
    arrivals: IntAttr

    def __init__(self, count: int, arrivals: int):
        super().__init__(IntAttr(count), IntAttr(arrivals))

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> list[Attribute]:
        with parser.in_angle_brackets():
            c = parser.parse_integer()
            parser.parse_punctuation(",")
            a = parser.parse_integer()
        return [IntAttr(c), IntAttr(a)]

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<{self.count.data}, {self.arrivals.data}>")

    def verify(self) -> None:
        if self.count.data < 1 or self.arrivals.data < 1:
            raise VerifyException(f"!pks.mbarriers<{self.count.data}, {self.arrivals.data}>: "
                                  "count and arrivals must be >= 1")


@irdl_attr_definition
class AccType(ParametrizedAttribute, TypeAttribute):
    """A warpgroup's f32 accumulator tile: ``rows`` (a multiple of 64: one MMA row slice
    each) x ``cols`` (a multiple of 8 up to 256)."""

    name = "pks.acc"
    rows: IntAttr
    cols: IntAttr

    def __init__(self, rows: int, cols: int):
        super().__init__(IntAttr(rows), IntAttr(cols))

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> list[Attribute]:
        with parser.in_angle_brackets():
            dims = parser.parse_dimension_list()
        if len(dims) != 2:
            parser.raise_error("!pks.acc takes rows x cols")
        return [IntAttr(dims[0]), IntAttr(dims[1])]

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<{self.rows.data}x{self.cols.data}>")

    def verify(self) -> None:
        r, c = self.rows.data, self.cols.data
        if r % 64 or not 64 <= r <= 128:
            raise VerifyException(f"!pks.acc<{r}x{c}>: rows must be 64 or 128 per warpgroup")
        if c % 8 or not 8 <= c <= 256:
            raise VerifyException(f"!pks.acc<{r}x{c}>: cols must be a multiple of 8 in 8..256")

    def check_registers(self) -> None:
        """A warpgroup's accumulator in registers (an ``acc_alloc`` inside a role) holds
        ``rows / 64 * cols / 2`` f32 registers per thread: at most 128."""
        r, c = self.rows.data, self.cols.data
        if r // 64 * c // 2 > 128:
            raise VerifyException(f"!pks.acc<{r}x{c}>: {r // 64 * c // 2} f32 registers per "
                                  "thread (at most 128)")


@irdl_attr_definition
class ScalesType(ParametrizedAttribute, TypeAttribute):
    """The scales (and bias) of one accumulator tile's epilogue, loaded into registers by
    ``pks.scale_prefetch`` before the tile's main loop and read by its ``pks.acc_scale``
    ops (no memory access left in the epilogue for what it holds)."""

    name = "pks.scales"
