"""Ops of the schedule level (dialect ``pks``) for fused GEMM + collective kernels.

A fused kernel is the scheduled GEMM of :mod:`pkc.passes.gemm_schedule` whose tile space,
epilogue and C tensor maps are replaced (``schedule-fused``): tiles are visited chunk by
chunk, starting with the rank's own, and each output tile goes through TMA to its chunk's
owner (a store into the own copy, a reduce-add into a peer's copy of the symmetric
output); per-chunk counts signalled after the bulk copies completed tell the owner when
its chunk is whole. These are the ops that needs beyond the GEMM's and the collectives'
(:mod:`pkc.dialects.schedule`, :mod:`pkc.dialects.schedule_comm`):

* ``pks.peer_tmap``: a tensor map of rank ``peer``'s copy of a symmetric kernel buffer
  (encoded by the runtime from the peer's address, passed by value like ``pks.tmap``);
  ``pks.tmap_select``: one of several maps by a run-time index (the chunk's owner);
  ``pks.scale_select``: one of several f32 scale buffers by a run-time index (an fp8
  kernel over several weights: the tile's weight's B scale).
* ``pks.chunk_tile_loop``: the persistent tile loop over ``chunks`` copies of an ``M x N``
  tile space, slot s visiting chunk ``(first + s) mod chunks``; the body gets the tile's
  row inside its chunk, its column and the chunk.
* ``pks.tma_store_or_add``: a TMA store of an epilogue piece where ``add`` is false, a
  TMA reduce-add where it holds (the own chunk is stored first, the peers' partials add
  into it).
* ``pks.fence_async_global``: ``fence.proxy.async.global``: bulk (async-proxy) writes that
  completed are ordered before this thread's later generic-proxy operations (the signal).
* ``pks.signal_add``: add a run-time count to a pad slot (release / relaxed, sys / gpu).

This module imports nothing from :mod:`pkc.dialects.schedule` (which imports it to build
the dialect); types are checked by name in the verifiers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from xdsl.dialects.builtin import ArrayAttr, IntAttr, StringAttr, i1, i32
from xdsl.ir import Attribute, Block, Region, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    attr_def,
    irdl_op_definition,
    opt_attr_def,
    operand_def,
    region_def,
    result_def,
    var_operand_def,
    var_result_def,
)
from xdsl.utils.exceptions import VerifyException

from pkc.dialects.schedule_comm import PtrType
from pkc.dialects.schedule_mma import AccPieceOp
from pkc.dialects.schedule_structure import check_tile_loop
from pkc.dialects.types import BufferType

# chunks of a chunked tile loop / peers of a tensor map: one per rank of the largest
# NVLink domain pkc plans for (nvl72), with room
MAX_CHUNKS = 128


def _fail(op: str, msg: str) -> None:
    raise VerifyException(f"'{op}' {msg}")


def _is(t: Attribute, name: str) -> bool:
    return getattr(t, "name", None) == name


@irdl_op_definition
class PeerTmapOp(IRDLOperation):
    """A TMA tensor map of rank ``peer``'s copy of symmetric kernel buffer ``buffer``; the
    runtime encodes it (the buffer's shape, the peer's address) and passes it by value.
    ``dims`` (outermost first): the map sees the buffer as that row-major array (the same
    elements, e.g. ``[B, Sc, N]`` of a ``[B*Sc, N]`` output, so a box never spills into
    the next block); absent: the buffer's shape."""

    name = "pks.peer_tmap"
    buffer = operand_def(BufferType)
    peer = attr_def(IntAttr)
    dims = opt_attr_def(ArrayAttr[IntAttr])
    result = result_def()

    def __init__(self, buffer: SSAValue, peer: int, t: Attribute,
                 dims: Sequence[int] | None = None):
        attrs = {"peer": IntAttr(peer)}
        if dims is not None:
            attrs["dims"] = ArrayAttr([IntAttr(d) for d in dims])
        super().__init__(operands=[buffer], result_types=[t], attributes=attrs)

    @property
    def dim_list(self) -> list[int] | None:
        return None if self.dims is None else [d.data for d in self.dims.data]

    def verify_(self) -> None:
        if not self.buffer.type.symmetric:
            _fail(self.name, f"a peer's copy of {self.buffer.type}: only symmetric buffers "
                  "have copies on the peers")
        if not _is(self.result.type, "pks.tmap"):
            _fail(self.name, f"result must be a !pks.tmap, got {self.result.type}")
        if not 0 <= self.peer.data < MAX_CHUNKS:
            _fail(self.name, f"peer {self.peer.data}: 0..{MAX_CHUNKS - 1}")
        dims, shape = self.dim_list, list(self.buffer.type.get_shape())
        if dims is not None and (len(dims) != len(self.result.type.box_dims)
                                 or math.prod(dims) != math.prod(shape)
                                 or dims[-1] != shape[-1]):
            _fail(self.name, f"dims {dims} are not a rank-{len(self.result.type.box_dims)} "
                  f"view of {self.buffer.type} (same elements, same last dim)")


@irdl_op_definition
class TmapSelectOp(IRDLOperation):
    """``tmaps[index]`` (an index outside the list is undefined), all of one map type."""

    name = "pks.tmap_select"
    index = operand_def(i32)
    tmaps = var_operand_def()
    result = result_def()

    def __init__(self, index: SSAValue, tmaps: Sequence[SSAValue]):
        super().__init__(operands=[index, list(tmaps)], result_types=[tmaps[0].type])

    def verify_(self) -> None:
        if not self.tmaps:
            _fail(self.name, "selects among no maps")
        t = self.tmaps[0].type
        if not _is(t, "pks.tmap") or any(m.type != t for m in self.tmaps) or self.result.type != t:
            _fail(self.name, f"maps and result must be one !pks.tmap type, got "
                  f"{[str(m.type) for m in self.tmaps]} -> {self.result.type}")


@irdl_op_definition
class ScaleSelectOp(IRDLOperation):
    """``scales[index]`` (an index outside the list is undefined): f32 scale buffers, all
    tensor-wise ``[1]`` or all row-wise ``[1, N_i]`` (B's column scales); the result is
    ``[1]`` or ``[1, max N_i]`` (a reader bounds its columns by the selected buffer's
    width, which it is given: ``pks.acc_scale``'s ``cols``). An fp8 kernel over several
    weights picks the tile's weight's B scale with it, as ``pks.tmap_select`` picks its
    B and C maps (pkc/passes/gather_many.py)."""

    name = "pks.scale_select"
    index = operand_def(i32)
    scales = var_operand_def(BufferType)
    result = result_def(BufferType)

    def __init__(self, index: SSAValue, scales: Sequence[SSAValue]):
        shapes = [tuple(v.type.get_shape()) for v in scales]
        shape = [1] if all(sh == (1,) for sh in shapes) else [1, max(sh[-1] for sh in shapes)]
        super().__init__(operands=[index, list(scales)],
                         result_types=[BufferType(shape, scales[0].type.element_type)])

    def verify_(self) -> None:
        if not self.scales:
            _fail(self.name, "selects among no scales")
        shapes = [tuple(v.type.get_shape()) for v in self.scales]
        ets = {str(v.type.element_type) for v in self.scales}
        tensor = all(sh == (1,) for sh in shapes)
        if ets != {"f32"} or not (tensor or all(len(sh) == 2 and sh[0] == 1 for sh in shapes)):
            _fail(self.name, "scales must be f32 buffers, all [1] (tensor-wise) or all "
                  f"[1, cols] (row-wise), got {[str(v.type) for v in self.scales]}")
        want = [1] if tensor else [1, max(sh[1] for sh in shapes)]
        if list(self.result.type.get_shape()) != want:
            _fail(self.name, f"result must be f32 {want}, got {self.result.type}")


def chunk_tiles(m: int, n: int, bm: int, bn: int, cluster: int = 1) -> tuple[int, int]:
    """(row tiles, column tiles) of one chunk of ``pks.chunk_tile_loop`` over ``m x n``: row
    tiles in whole clusters of ``cluster`` (a pair's second tile may lie past the chunk's
    rows and is a tile like any other). The one count the loop's interpreter, its grid and
    the fused kernels' signal counts share."""
    return -(-(-(-m // bm)) // cluster) * cluster, -(-n // bn)


@irdl_op_definition
class ChunkTileLoopOp(IRDLOperation):
    """The persistent tile loop over ``chunks`` chunks of ``ceil(M / bm) x ceil(N / bn)``
    tiles each: tile ``t`` (this CTA's ``id, id + grid, ...``) is in slot ``s = t / tiles``,
    chunk ``(first + s) mod chunks``; inside a chunk the grouped rasterization of
    ``pks.tile_loop``. Slot order is the same on every CTA, so a CTA finishes its tiles
    of one chunk before it starts the next (every rank starts with its own chunk when
    ``first`` is the rank). In a schedule of CTA pairs (``cluster`` 2) the unit is a
    cluster's tile, as in ``pks.tile_loop``: the pair takes two vertically adjacent tiles
    of one chunk (the second may lie wholly past the chunk's rows). The body gets the
    tile's first row inside its chunk, its first column, the chunk, and the loop-carried
    values."""

    name = "pks.chunk_tile_loop"
    m = operand_def(i32)
    n = operand_def(i32)
    first = operand_def(i32)
    inits = var_operand_def()
    bm = attr_def(IntAttr)
    bn = attr_def(IntAttr)
    group_m = attr_def(IntAttr)
    chunks = attr_def(IntAttr)
    res = var_result_def()
    body = region_def("single_block")
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, m: SSAValue, n: SSAValue, first: SSAValue, inits: Sequence[SSAValue],
                 bm: int, bn: int, group_m: int, chunks: int):
        block = Block(arg_types=[i32, i32, i32, *[v.type for v in inits]])
        super().__init__(operands=[m, n, first, list(inits)],
                         result_types=[[v.type for v in inits]], regions=[Region(block)],
                         attributes={"bm": IntAttr(bm), "bn": IntAttr(bn),
                                     "group_m": IntAttr(group_m), "chunks": IntAttr(chunks)})

    @property
    def block(self) -> Block:
        return self.body.blocks[0]

    def verify_(self) -> None:
        check_tile_loop(self)
        if not 1 <= self.chunks.data <= MAX_CHUNKS:
            _fail(self.name, f"chunks = {self.chunks.data}: 1..{MAX_CHUNKS}")


@irdl_op_definition
class TmaStoreOrAddOp(IRDLOperation):
    """The TMA store of slot ``slot`` of ``src`` to ``tmap``'s box at ``coords`` where
    ``add`` is false, the TMA reduce-add where it holds; issued by the warpgroup's first
    thread into its bulk group."""

    name = "pks.tma_store_or_add"
    src = operand_def()
    slot = operand_def(i32)
    tmap = operand_def()
    coords = var_operand_def(i32)
    add = operand_def(i1)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, src: SSAValue, slot: SSAValue, tmap: SSAValue, coords: Sequence[SSAValue],
                 add: SSAValue):
        super().__init__(operands=[src, slot, tmap, list(coords), add])

    def verify_(self) -> None:
        if not _is(self.src.type, "pks.smem") or not _is(self.tmap.type, "pks.tmap"):
            _fail(self.name, f"stores a !pks.smem slot through a !pks.tmap, got "
                  f"{self.src.type}, {self.tmap.type}")
        rank = len(self.tmap.type.box_dims)
        if len(self.coords) != rank:
            _fail(self.name, f"{len(self.coords)} coordinates for a rank-{rank} map")


@irdl_op_definition
class FenceAsyncGlobalOp(IRDLOperation):
    """``fence.proxy.async.global``: completed bulk writes before later generic-proxy
    operations of this thread (a signal that announces them)."""

    name = "pks.fence_async_global"

    def __init__(self):
        super().__init__()


@irdl_op_definition
class SignalAddOp(IRDLOperation):
    """Add ``value`` to u32 slot ``slot`` of the pad at ``pad``: a release (orders this
    thread's earlier writes, after a ``pks.fence_async_global`` its bulk writes too) or
    relaxed, at system scope (a peer's pad) or GPU scope (the own)."""

    name = "pks.signal_add"
    pad = operand_def(PtrType)
    slot = operand_def(i32)
    value = operand_def(i32)
    scope = attr_def(StringAttr)
    sem = attr_def(StringAttr)

    def __init__(self, pad: SSAValue, slot: SSAValue, value: SSAValue, scope: str = "sys",
                 sem: str = "release"):
        super().__init__(operands=[pad, slot, value], attributes={"scope": StringAttr(scope),
                                                                 "sem": StringAttr(sem)})

    def verify_(self) -> None:
        if self.scope.data not in ("sys", "gpu"):
            _fail(self.name, f"scope {self.scope.data!r}: sys (peers) or gpu (this rank)")
        if self.sem.data not in ("relaxed", "release"):
            _fail(self.name, f"sem {self.sem.data!r}: relaxed or release")


# ---- GEMM + all-reduce and the fresh-output variants (pkc.passes.fused_ar_schedule) -----


@irdl_op_definition
class RowsTmapOp(IRDLOperation):
    """A TMA tensor map of rows ``[first, first + rows)`` of a 2-D kernel buffer or
    ``pk.alloc``: this rank's (``peer`` = -1: a local buffer, the own copy of a symmetric
    one) or rank ``peer``'s copy of a symmetric one. A chunk's map: a box that starts in
    the chunk is clipped at its last row, so a tile never spills into the next chunk (the
    chunks of an all-reduce need not be equal). Encoded by the runtime, passed by value."""

    name = "pks.rows_tmap"
    buffer = operand_def(BufferType)
    peer = attr_def(IntAttr)
    first = attr_def(IntAttr)
    rows = attr_def(IntAttr)
    result = result_def()

    def __init__(self, buffer: SSAValue, peer: int, first: int, rows: int, t: Attribute):
        super().__init__(operands=[buffer], result_types=[t],
                         attributes={"peer": IntAttr(peer), "first": IntAttr(first),
                                     "rows": IntAttr(rows)})

    def verify_(self) -> None:
        bt = self.buffer.type
        shape = bt.get_shape()
        if len(shape) != 2:
            _fail(self.name, f"rows of a 2-D buffer, got {bt}")
        p, a, n = self.peer.data, self.first.data, self.rows.data
        if p >= 0 and not bt.symmetric:
            _fail(self.name, f"a peer's copy of {bt}: only symmetric buffers have copies on "
                  "the peers")
        if not -1 <= p < MAX_CHUNKS:
            _fail(self.name, f"peer {p}: -1 (this rank) or 0..{MAX_CHUNKS - 1}")
        if a < 0 or n < 1 or a + n > shape[0]:
            _fail(self.name, f"rows {a}..{a + n} outside the {shape[0]} rows of {bt}")
        if not _is(self.result.type, "pks.tmap") or len(self.result.type.box_dims) != 2:
            _fail(self.name, f"result must be a rank-2 !pks.tmap, got {self.result.type}")


@irdl_op_definition
class AccAddSmemOp(AccPieceOp):
    """Slot ``slot`` of ``dst`` holds a 64 x ``width`` piece in the swizzled layout that
    ``pks.acc_store_smem`` writes (a partial TMA-loaded there): add ``acc``'s columns
    ``col .. col + width`` of row slice ``slice`` in f32, round once to ``dtype`` and write
    the sum back in place (each thread reads exactly the elements it writes)."""

    name = "pks.acc_add_smem"
    acc = operand_def()
    dst = operand_def()
    slot = operand_def(i32)
    slice = attr_def(IntAttr)
    col = attr_def(IntAttr)
    width = attr_def(IntAttr)
    dtype = attr_def(StringAttr)

    def verify_(self) -> None:
        a, d = self.acc.type, self.dst.type
        if not _is(a, "pks.acc") or not _is(d, "pks.smem"):
            _fail(self.name, f"adds a !pks.acc into a !pks.smem slot, got {a}, {d}")
        self.check_piece()
        if self.dtype.data not in ("bf16", "f16"):
            _fail(self.name, f"dtype {self.dtype.data!r}: bf16 or f16 (16-bit pieces)")
        self.check_slot()


FUSED_OPS = [PeerTmapOp, TmapSelectOp, ScaleSelectOp, ChunkTileLoopOp, TmaStoreOrAddOp, FenceAsyncGlobalOp,
             SignalAddOp, RowsTmapOp, AccAddSmemOp]

__all__ = ["FUSED_OPS", "MAX_CHUNKS", *[c.__name__ for c in FUSED_OPS]]
