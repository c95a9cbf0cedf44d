"""The graph-level layout of a lowered collective: the 3-d views around its kernel.

:func:`layout_of` gives the :class:`Layout` (``rows x slots x cols``, see
lower_collectives.py's docstring) that lower-collectives lowers one collective on, and
:meth:`Layout.pre` / :meth:`Layout.post` place the ``pk.reshape`` / ``pk.transpose`` ops
that move the tensor into and out of it; also the tile-size constants and the element /
accumulation type helpers. Separate from the pass because it is pure shape arithmetic on
graph-level types: the pass (the choice of algorithm, the records) and the kernel builders
(collective_kernels.py) both read it, and it imports neither.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    Float64Type,
    IntegerType,
    TensorType,
    f32,
)
from xdsl.ir import Attribute, Operation, SSAValue

from pkc.dialects import graph as g
from pkc.dialects.types import is_fp8
from pkc.target.collectives import Collective

TILE_ELEMENTS = 8192  # elements per tile at most (16 KiB of bf16)
TILE_MAX_ROWS = 128


# ----------------------------------------------------------------------------------------
# Graph-level layout: the 3-d views around the kernel


@dataclass
class Layout:
    """How one collective is viewed: chunks of rows x cols, W or 1 of them per buffer."""

    collective: Collective
    world: int
    element: Attribute
    rows: int          # rows of one chunk
    cols: int          # columns of one chunk
    in_slots: int      # middle axis of the input view (1 or W)
    out_slots: int     # middle axis of the output view
    in_perm: Sequence[int] | None = None    # all_to_all across dims: the transposes
    in_split: Sequence[int] | None = None
    out_chunk: Sequence[int] | None = None
    out_perm: Sequence[int] | None = None

    @property
    def in_view(self) -> tuple[int, int, int]:
        return (self.rows, self.in_slots, self.cols)

    @property
    def out_view(self) -> tuple[int, int, int]:
        return (self.rows, self.out_slots, self.cols)

    @property
    def element_bytes(self) -> int:
        return element_bytes_of(self.element)

    @property
    def message_bytes(self) -> int:
        """The size the cost model is given: the tensor on each rank (all_reduce), the full
        gathered / scattered tensor (all_gather / reduce_scatter), all a rank sends
        (all_to_all)."""
        slots = max(self.in_slots, self.out_slots)
        return self.rows * slots * self.cols * self.element_bytes

    def pre(self, glue: list[Operation], x: SSAValue) -> SSAValue:
        if self.in_perm is not None:
            x = _reshape(glue, x, self.in_split)
            x = _transpose(glue, x, self.in_perm)
        return _reshape(glue, x, self.in_view)

    def post(self, glue: list[Operation], y: SSAValue, result_type: TensorType) -> SSAValue:
        if self.out_perm is not None:
            y = _reshape(glue, y, (self.world, *self.out_chunk))
            y = _transpose(glue, y, self.out_perm)
        return _reshape(glue, y, result_type.get_shape())


def layout_of(op: Operation) -> "Layout":
    """The 3-d views (rows x slots x cols) a collective is lowered on; see the module doc."""
    S = list(op.input.type.get_shape())
    W, elem = op.world_size, op.input.type.element_type
    if isinstance(op, g.AllReduceOp):
        d = _widest_rows(S)
        return Layout(Collective.ALL_REDUCE, W, elem, _prod(S[:d]), _prod(S[d:]), 1, 1)
    if isinstance(op, g.AllGatherOp):
        d = op.dim.value.data
        return Layout(Collective.ALL_GATHER, W, elem, _prod(S[:d]), _prod(S[d:]), 1, W)
    if isinstance(op, g.ReduceScatterOp):
        d = op.dim.value.data
        return Layout(Collective.REDUCE_SCATTER, W, elem, _prod(S[:d]), _prod(S[d:]) // W, W, 1)
    sd, cd = op.split_dim.value.data, op.concat_dim.value.data
    if sd == cd:
        return Layout(Collective.ALL_TO_ALL, W, elem, _prod(S[:sd]), _prod(S[sd:]) // W, W, W)
    return _all_to_all_across_dims(W, elem, S, sd, cd)


def _widest_rows(S: Sequence[int]) -> int:
    """An elementwise collective may split its shape anywhere: rows of the trailing dims
    whose product fits one tile's width (at least the last dim), so tiles are large."""
    d = len(S) - 1
    while d > 0 and _prod(S[d - 1:]) <= TILE_ELEMENTS:
        d -= 1
    return d


def _all_to_all_across_dims(W: int, elem, S: list[int], sd: int, cd: int) -> Layout:
    """Chunk axis to the front (x as S[:sd] + (W, S[sd]/W) + S[sd+1:], transposed), the
    kernel on 1 x W x chunk, then the source axis moved in front of concat_dim."""
    chunk = [*S[:sd], S[sd] // W, *S[sd + 1:]]
    split = [*S[:sd], W, S[sd] // W, *S[sd + 1:]]
    in_perm = [sd, *[i for i in range(len(split)) if i != sd]]
    out_perm = [*range(1, cd + 1), 0, *range(cd + 1, len(chunk) + 1)]
    def moved(perm):  # None when the transpose would not move anything
        return None if perm == sorted(perm) else perm

    return Layout(Collective.ALL_TO_ALL, W, elem, 1, _prod(chunk), W, W,
                  in_perm=moved(in_perm), in_split=split, out_chunk=chunk,
                  out_perm=moved(out_perm))


def _prod(xs: Sequence[int]) -> int:
    return math.prod(xs) if xs else 1


def _reshape(glue: list[Operation], v: SSAValue, shape: Sequence[int]) -> SSAValue:
    t = v.type
    if tuple(t.get_shape()) == tuple(shape):
        return v
    op = g.ReshapeOp(v, TensorType(t.element_type, list(shape)))
    glue.append(op)
    return op.result


def _transpose(glue: list[Operation], v: SSAValue, perm: Sequence[int]) -> SSAValue:
    if list(perm) == sorted(perm):
        return v
    op = g.TransposeOp(v, list(perm))
    glue.append(op)
    return op.result


def element_bytes_of(t: Attribute) -> int:
    if isinstance(t, (BFloat16Type, Float16Type)):
        return 2
    if isinstance(t, Float32Type):
        return 4
    if isinstance(t, Float64Type):
        return 8
    if is_fp8(t):
        return 1
    assert isinstance(t, IntegerType)
    return max(1, t.width.data // 8)


def accumulation_type(t: Attribute) -> Attribute:
    """Where sums happen: f32 for 16/32-bit floats, f64 for f64, integers as they are."""
    return f32 if isinstance(t, (BFloat16Type, Float16Type)) else t
