"""The compute ops of the schedule-level dialect ``pks`` (:mod:`pkc.dialects.schedule`):
accumulators (a warpgroup's registers, or a CTA's tensor memory on sm_100a) and their
selection, the asynchronous MMA with its commit and wait, and the epilogue's stores of an
accumulator to shared or global memory.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import DenseArrayBase, IntAttr, StringAttr, UnitAttr, i1, i32, i64
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    attr_def,
    irdl_op_definition,
    operand_def,
    opt_attr_def,
    opt_operand_def,
    result_def,
    var_operand_def,
)
from xdsl.ir import SSAValue
from xdsl.utils.exceptions import VerifyException

from pkc.dialects.schedule_structure import ScheduleOp
from pkc.dialects.schedule_tma import check_pair_multicast
from pkc.dialects.schedule_types import (ELEMENT_BYTES, FP8_ELEMENTS, MMA_ELEMENTS, AccType,
                                        BMajor, MbarriersType, ScalesType, SmemType, _fail)
from pkc.dialects.types import BufferType, is_float

# ----------------------------------------------------------------------------------------
# Compute


TMEM_COLUMNS = 512          # tensor memory per CTA on sm_100: 128 lanes x 512 32-bit columns


def _cta_pair_split(op) -> int:
    """2 when ``op`` is in a cluster of 2 (or 4: two pairs) whose accumulators are the CTA's (tensor memory):
    a CTA pair, each CTA holding half of B's rows (sm_100a cta_group::2); else 1."""
    p = op.parent_op()
    while p is not None and p.name != "pks.schedule":
        p = p.parent_op()
    if p is None or p.cluster.data not in (2, 4):    # one pair, or two
        return 1
    return 2 if any(o.name == "pks.acc_alloc" for o in p.block.ops) else 1


@irdl_op_definition
class AccAllocOp(IRDLOperation):
    """An accumulator; contents undefined until an MMA writes. Inside a ``pks.role``: the
    warpgroup's own (registers, wgmma on sm_90a). At the top of a ``pks.schedule``: one
    accumulator of the CTA, which one role's MMAs write and another role reads (tensor
    memory on sm_100a: ``rows`` lanes x ``cols`` 32-bit columns, allocated before the roles
    start and freed after they end); all of them together at most 512 columns."""

    name = "pks.acc_alloc"
    result = result_def(AccType)

    def __init__(self, rows: int, cols: int):
        super().__init__(result_types=[AccType(rows, cols)])

    def verify_(self) -> None:
        parent = self.parent_op()
        if isinstance(parent, ScheduleOp):
            if self.result.type.rows.data != 128:
                _fail(self.name, f"a CTA accumulator has 128 rows (tensor-memory lanes), got "
                      f"{self.result.type.rows.data}")
            cols = sum(o.result.type.cols.data for o in parent.block.ops
                       if isinstance(o, AccAllocOp))
            if cols > TMEM_COLUMNS:
                _fail(self.name, f"the CTA accumulators take {cols} columns of tensor memory "
                      f"(at most {TMEM_COLUMNS})")
        else:
            try:
                self.result.type.check_registers()
            except VerifyException as e:
                _fail(self.name, str(e))


@irdl_op_definition
class AccSelectOp(IRDLOperation):
    """Accumulator ``index`` of ``accs`` (CTA accumulators of one type: a ring the MMA role
    fills while the epilogue role drains another)."""

    name = "pks.acc_select"
    index = operand_def(i32)
    accs = var_operand_def(AccType)
    result = result_def(AccType)

    def __init__(self, index: SSAValue, accs: Sequence[SSAValue]):
        super().__init__(operands=[index, list(accs)], result_types=[accs[0].type])

    def verify_(self) -> None:
        if not self.accs:
            _fail(self.name, "needs at least one accumulator")
        for a in self.accs:
            if a.type != self.result.type:
                _fail(self.name, f"accumulators of different types ({a.type} vs {self.result.type})")
            if not isinstance(a.owner, AccAllocOp) or not isinstance(a.owner.parent_op(), ScheduleOp):
                _fail(self.name, "selects among CTA accumulators (pks.acc_alloc at the top of "
                      "the pks.schedule)")


@irdl_op_definition
class MmaAsyncOp(IRDLOperation):
    """Issue acc (+)= A @ B for one k-block of 128 bytes per operand row, asynchronously:
    A is rows ``a_row`` .. ``a_row + acc.rows`` of slot ``a_slot`` of ``a`` (K-major,
    128-byte rows, 128-byte swizzle), B is slot ``b_slot`` of ``b`` (``b_major``: K- or
    N-major); ``accumulate`` false overwrites. ``dtype``: A's elements, bf16 / f16 (a
    64-deep k-block) or fp8 e4m3 / e5m2 (128-deep; both operands K-major); ``b_dtype``:
    B's where it differs (fp8 only: e4m3 x e5m2). Completes at a later ``pks.mma_wait``;
    lowered to wgmma (sm_90a) or tcgen05 (sm_100a)."""

    name = "pks.mma_async"
    acc = operand_def(AccType)
    a = operand_def(SmemType)
    a_slot = operand_def(i32)
    a_row = operand_def(i32)
    b = operand_def(SmemType)
    b_slot = operand_def(i32)
    accumulate = operand_def(i1)
    dtype = attr_def(StringAttr)
    b_major = attr_def(StringAttr)
    b_dtype = opt_attr_def(StringAttr)

    def __init__(self, acc: SSAValue, a: SSAValue, a_slot: SSAValue, a_row: SSAValue, b: SSAValue,
                 b_slot: SSAValue, accumulate: SSAValue, dtype: str, b_major: BMajor,
                 b_dtype: str = ""):
        attrs = {"dtype": StringAttr(dtype), "b_major": StringAttr(b_major.value)}
        if b_dtype and b_dtype != dtype:
            attrs["b_dtype"] = StringAttr(b_dtype)
        super().__init__(operands=[acc, a, a_slot, a_row, b, b_slot, accumulate],
                         attributes=attrs)

    @property
    def types(self) -> tuple[str, str]:
        """(A's, B's) element types."""
        a = self.dtype.data
        return a, (self.b_dtype.data if self.b_dtype is not None else a)

    @property
    def fp8(self) -> bool:
        return self.dtype.data in FP8_ELEMENTS

    @property
    def k_depth(self) -> int:
        """Elements of K in the k-block: one 128-byte row of each operand."""
        return 128 // ELEMENT_BYTES[self.dtype.data]

    def verify_(self) -> None:
        ta, tb = self.types
        if ta not in MMA_ELEMENTS:
            _fail(self.name, f"dtype {ta!r}: one of {', '.join(MMA_ELEMENTS)}")
        if (ta in FP8_ELEMENTS) != (tb in FP8_ELEMENTS) or (ta not in FP8_ELEMENTS and ta != tb):
            _fail(self.name, f"A of {ta} with B of {tb}: one 16-bit type for both, or two "
                  "fp8 types (e4m3 / e5m2)")
        try:
            major = BMajor(self.b_major.data)
        except ValueError:
            _fail(self.name, f"b_major {self.b_major.data!r} not k / n")
        if ta in FP8_ELEMENTS and major is not BMajor.K:
            _fail(self.name, "fp8 MMAs read B K-major (b_major = k; wgmma / tcgen05 have no "
                  "transposed 8-bit operand)")
        cols = self.acc.type.cols.data
        need_b = cols * 128 // _cta_pair_split(self)
        if self.b.type.bytes.data < need_b:
            _fail(self.name, f"B slot of {self.b.type.bytes.data} bytes < {need_b} for {cols} columns")
        if major is BMajor.N and cols % 64:
            _fail(self.name, f"N-major B needs acc columns a multiple of 64, got {cols}")


@irdl_op_definition
class MmaCommitOp(IRDLOperation):
    """Close the group of MMAs issued since the last commit."""

    name = "pks.mma_commit"

    def __init__(self):
        super().__init__()


@irdl_op_definition
class MmaCommitArriveOp(IRDLOperation):
    """Close the group of MMAs this thread issued since the last commit and arrive once on
    mbarrier ``index`` of ``bars`` when all of them have completed (their shared-memory
    operands may then be overwritten, their accumulator read). Lowered to
    ``tcgen05.commit`` (sm_100a). In a CTA pair the arrival is on the mbarrier of both
    CTAs of the pair; ``pair_multicast`` (a cluster of pairs): on both CTAs of each pair of
    the mask instead (a stage's release to every CTA that multicasts into it)."""

    name = "pks.mma_commit_arrive"
    bars = operand_def(MbarriersType)
    index = operand_def(i32)
    pair_multicast = opt_attr_def(IntAttr)

    def __init__(self, bars: SSAValue, index: SSAValue, pair_multicast: int = 0):
        super().__init__(operands=[bars, index],
                         attributes={"pair_multicast": IntAttr(pair_multicast)}
                         if pair_multicast else {})

    def verify_(self) -> None:
        if self.pair_multicast is not None:
            check_pair_multicast(self, self.pair_multicast.data)


@irdl_op_definition
class MmaWaitOp(IRDLOperation):
    """Wait until at most ``pending`` MMA groups are in flight."""

    name = "pks.mma_wait"
    pending = attr_def(IntAttr)

    def __init__(self, pending: int):
        super().__init__(attributes={"pending": IntAttr(pending)})


class AccPieceOp(IRDLOperation):
    """What the ops on one 64 x ``width`` piece of an accumulator have in common (their
    operands acc, dst, slot and attributes slice, col, width, dtype are declared by each):
    the builder and the check that the piece is a swizzle span of the accumulator that fits
    a slot."""

    def __init__(self, acc: SSAValue, dst: SSAValue, slot: SSAValue, slice: int, col: int,
                 width: int, dtype: str):
        super().__init__(operands=[acc, dst, slot],
                         attributes={"slice": IntAttr(slice), "col": IntAttr(col),
                                     "width": IntAttr(width), "dtype": StringAttr(dtype)})

    def check_piece(self) -> None:
        a = self.acc.type
        w, c = self.width.data, self.col.data
        if w not in (16, 32, 64):
            _fail(self.name, f"width {w}: 16, 32 or 64 columns (one swizzle span)")
        if c % w or c + w > a.cols.data or self.slice.data >= a.rows.data // 64:
            _fail(self.name, f"slice {self.slice.data} columns {c}..{c + w} outside !pks.acc<"
                  f"{a.rows.data}x{a.cols.data}>")

    def check_slot(self) -> None:
        w, d = self.width.data, self.dst.type
        if 64 * w * 2 > d.bytes.data:
            _fail(self.name, f"a 64x{w} piece does not fit a {d.bytes.data}-byte slot")


@irdl_op_definition
class AccStoreSmemOp(AccPieceOp):
    """Round ``acc``'s columns ``col .. col + width`` of row slice ``slice`` (64 rows) to
    ``dtype`` and write them to slot ``slot`` of ``dst`` as a 64 x ``width`` row-major box,
    swizzled for a TMA store (row bytes = swizzle span)."""

    name = "pks.acc_store_smem"
    acc = operand_def(AccType)
    dst = operand_def(SmemType)
    slot = operand_def(i32)
    slice = attr_def(IntAttr)
    col = attr_def(IntAttr)
    width = attr_def(IntAttr)
    dtype = attr_def(StringAttr)

    def verify_(self) -> None:
        self.check_piece()
        self.check_slot()


@irdl_op_definition
class AccStoreGlobalOp(IRDLOperation):
    """Round ``acc`` to ``dtype`` and store it to the row-major ``rows x cols`` matrix at
    ``ptr`` (a buffer argument) from row ``row`` and column ``col``, each thread writing its
    fragments straight from registers; rows >= ``rows`` / columns >= ``cols`` are skipped."""

    name = "pks.acc_store_global"
    acc = operand_def(AccType)
    buffer = operand_def()
    row = operand_def(i32)
    col = operand_def(i32)
    rows = operand_def(i32)
    cols = operand_def(i32)
    dtype = attr_def(StringAttr)

    def __init__(self, acc: SSAValue, buffer: SSAValue, row: SSAValue, col: SSAValue,
                 rows: SSAValue, cols: SSAValue, dtype: str):
        super().__init__(operands=[acc, buffer, row, col, rows, cols],
                         attributes={"dtype": StringAttr(dtype)})


@irdl_op_definition
class AccScaleOp(IRDLOperation):
    """The scaled GEMM's epilogue step (fp8: torch's ``_scaled_mm``), in place on the f32
    accumulator whose element (i, j) is C's (``row + i``, ``col + j``):
    ``acc[i, j] = acc[i, j] * scale_a[row + i] * scale_b[col + j] (+ bias[col + j])``,
    multiplied in that order and rounded to f32 at each step. The scales are f32 kernel
    buffers, each tensor-wise ``[1]`` or row-wise: ``[rows, 1]`` (one per row of A),
    ``[1, cols]`` (one per column of B); when both are tensor-wise their product is formed
    first (one f32 multiply of the accumulator, as cuBLASLt's alpha). ``bias``: a float
    ``[cols]`` buffer, added in f32. Elements outside ``rows`` x ``cols`` read no scale
    (they are never stored). ``piece`` = [slice, first column, width]: only that 64-row
    slice's columns (an epilogue that scales each piece just before it stores it, so that
    the scales of one piece are live at a time); absent: the whole accumulator.
    ``prefetched``: the tile's ``pks.scale_prefetch`` (same accumulator, B's scale, bias,
    ``col`` and ``cols``): B's scales and the bias come from its registers, and A's scale
    too where it is the same buffer (tensor-wise, or the rows it loaded for this op's
    ``row`` and ``rows``); the rest is read from memory here."""

    name = "pks.acc_scale"
    acc = operand_def(AccType)
    scale_a = operand_def(BufferType)
    scale_b = operand_def(BufferType)
    bias = opt_operand_def(BufferType)
    row = operand_def(i32)
    col = operand_def(i32)
    rows = operand_def(i32)
    cols = operand_def(i32)
    prefetched = opt_operand_def(ScalesType)
    piece = opt_attr_def(DenseArrayBase)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, acc: SSAValue, scale_a: SSAValue, scale_b: SSAValue,
                 bias: SSAValue | None, row: SSAValue, col: SSAValue, rows: SSAValue,
                 cols: SSAValue, piece: tuple[int, int, int] | None = None,
                 prefetched: SSAValue | None = None):
        attrs = {"piece": DenseArrayBase.from_list(i64, list(piece))} if piece else {}
        super().__init__(operands=[acc, scale_a, scale_b, [bias] if bias is not None else [],
                                   row, col, rows, cols,
                                   [prefetched] if prefetched is not None else []],
                         attributes=attrs)

    def prefetch(self) -> "ScalePrefetchOp | None":
        """The ``pks.scale_prefetch`` this op reads its registers from (None: none)."""
        return self.prefetched.owner if self.prefetched is not None else None

    def rows_prefetched(self) -> bool:
        """Whether A's row scales of this op come from the prefetch's registers: it loaded
        them, for the same ``row`` and ``rows`` values."""
        pf = self.prefetch()
        return (pf is not None and pf.with_rows is not None and pf.scale_a == self.scale_a
                and pf.row == self.row and pf.rows == self.rows)

    def row_wise(self) -> tuple[bool, bool]:
        """(A's scale per row, B's per column)."""
        return (len(self.scale_a.type.get_shape()) == 2,
                len(self.scale_b.type.get_shape()) == 2)

    def region(self) -> tuple[range, range]:
        """(64-row slices, 8-column blocks) of the accumulator the op scales."""
        a = self.acc.type
        if self.piece is None:
            return range(a.rows.data // 64), range(a.cols.data // 8)
        sl, c, w = self.piece.get_values()
        return range(sl, sl + 1), range(c // 8, (c + w) // 8)

    def verify_(self) -> None:
        _check_scales(self)
        pf = self.prefetch()
        if self.prefetched is not None:
            if not isinstance(pf, ScalePrefetchOp):
                _fail(self.name, "prefetched must be a pks.scale_prefetch result")
            same = (pf.acc == self.acc and pf.scale_b == self.scale_b
                    and pf.bias == self.bias and pf.col == self.col and pf.cols == self.cols)
            if not same:
                _fail(self.name, "prefetched: its pks.scale_prefetch must name the same "
                      "accumulator, scale_b, bias, col and cols")
        if self.piece is not None:
            a = self.acc.type
            vals = self.piece.get_values()
            if len(vals) != 3:
                _fail(self.name, f"piece {list(vals)}: [slice, first column, width]")
            sl, c, w = vals
            if not (0 <= sl < a.rows.data // 64 and c % 8 == 0 and w % 8 == 0 and w > 0
                    and c + w <= a.cols.data):
                _fail(self.name, f"piece [{sl}, {c}, {w}] outside !pks.acc<{a.rows.data}x"
                      f"{a.cols.data}> (64-row slices, 8-column blocks)")


def _check_scales(op) -> None:
    """The scale and bias operands of ``pks.acc_scale`` / ``pks.scale_prefetch``."""
    from xdsl.dialects.builtin import Float32Type

    for what, v, row_shape in (("scale_a", op.scale_a, "[rows, 1]"),
                               ("scale_b", op.scale_b, "[1, cols]")):
        t = v.type
        shape = tuple(t.get_shape())
        ok = shape == (1,) or (len(shape) == 2 and (shape[1] == 1 if what == "scale_a"
                                                    else shape[0] == 1))
        if not isinstance(t.element_type, Float32Type) or not ok:
            _fail(op.name, f"{what} must be an f32 buffer of shape [1] (tensor-wise) or "
                  f"{row_shape} (row-wise), got {t}")
    if op.bias is not None:
        t = op.bias.type
        if len(t.get_shape()) != 1 or not is_float(t.element_type):
            _fail(op.name, f"bias must be a 1-d float buffer [cols], got {t}")


@irdl_op_definition
class ScalePrefetchOp(IRDLOperation):
    """Loads the epilogue scales of the accumulator tile whose element (i, j) is C's
    (``row + i``, ``col + j``) into registers, ahead of the tile's main loop, so that their
    latency hides behind the MMAs: B's column scales and the bias (f32) of the tile's
    columns, the tensor-wise scales, and (``with_rows``) A's row scales of the thread's
    rows; 0.0 past ``rows`` x ``cols``. The tile's ``pks.acc_scale`` ops name the result
    (``prefetched``) and read these instead of memory. sm_90a (wgmma's register
    fragments): a warp holds the tile's column values spread over its lanes (``cols / 32``
    per lane), and each 8-column block's pair is fetched from its lane by a shuffle, so a
    tile of 256 columns costs 8 registers, not the 64 of every column a thread needs.
    Why: the row-wise epilogue's per-piece global loads were its cost (docs/PERF_NOTES.md
    2026-12-02 (e), (n))."""

    name = "pks.scale_prefetch"
    acc = operand_def(AccType)
    scale_a = operand_def(BufferType)
    scale_b = operand_def(BufferType)
    bias = opt_operand_def(BufferType)
    row = operand_def(i32)
    col = operand_def(i32)
    rows = operand_def(i32)
    cols = operand_def(i32)
    with_rows = opt_attr_def(UnitAttr)
    result = result_def(ScalesType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, acc: SSAValue, scale_a: SSAValue, scale_b: SSAValue,
                 bias: SSAValue | None, row: SSAValue, col: SSAValue, rows: SSAValue,
                 cols: SSAValue, with_rows: bool = True):
        super().__init__(operands=[acc, scale_a, scale_b, [bias] if bias is not None else [],
                                   row, col, rows, cols], result_types=[ScalesType()],
                         attributes={"with_rows": UnitAttr()} if with_rows else {})

    def row_wise(self) -> tuple[bool, bool]:
        """(A's scale per row, B's per column)."""
        return (len(self.scale_a.type.get_shape()) == 2,
                len(self.scale_b.type.get_shape()) == 2)

    def verify_(self) -> None:
        _check_scales(self)
        if self.with_rows is not None and not self.row_wise()[0]:
            _fail(self.name, "with_rows: scale_a is tensor-wise (no row scales to load)")
