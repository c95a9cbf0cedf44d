"""The chunked persistent tile loop of a fused kernel under cluster launch control (sm_100a).

``pks.clc_chunk_tile_loop`` visits the tiles of ``pks.chunk_tile_loop`` - ``chunks``
copies of the ``ceil(M / bm) x ceil(N / bn)`` tile space, work index ``t`` in slot
``t / tiles``, chunk ``(first + slot) mod chunks``, grouped order inside the chunk - but
the grid has one CTA per work index and a running CTA takes more work by cancelling CTAs
that have not started (``clusterlaunchcontrol.try_cancel``, PTX ISA 9.7.13.17).

Why a ticket and not the cancelled CTA's id: the fused kernels wait for other ranks'
earlier work (a reduce-scatter adds into a peer's chunk only after the owner stored it,
the deterministic one after the previous rank's adds), and the work a wait depends on
must be held by a running CTA, or every SM may end up waiting for work no CTA runs. The
PTX ISA does not say which not-started CTA a request cancels (nor in which order the
hardware starts CTAs), so the work index is not the cancelled CTA's id: every CTA that
starts, and every successful cancel, takes the next index from a counter in global
memory (``tick``, one u32 per rank, zeroed once, never reset: launch e hands out
``(e - 1) x total .. e x total - 1``, ``epoch`` is e). Indices are taken in time order by
running CTAs, so the lowest unfinished index is always being worked on, which makes the
static loop's argument for freedom from deadlock (every wait is for an earlier slot) hold
whatever the hardware's order. The cancel only stops the CTA from running (its index is
taken by whoever cancelled it).

The roles share the indices through a ring of two slots of ``ring`` (``!pks.smem<2 x 32>``:
bytes 0..15 the raw CLC response, 16..19 the work index) and three pairs of mbarriers:

* trip i's index is in slot ``i % 2``, published on ``full[i % 2]`` in phase ``(i / 2) %
  2``; the issuer (one thread) takes trip 0's index at the start and writes it to slot 0;
* on trip i the issuer waits until every reader read slot ``(i + 1) % 2`` two trips ago
  (``empty``), announces 16 bytes on ``got[(i + 1) % 2]`` and asks for a cancel into it;
  after the body it waits on ``got``, and if a CTA was cancelled takes the next ticket
  (else the index is the total: the loop ends), writes it and arrives on ``full``;
* every other role (a reader) reads trip 0's index before its loop and trip i + 1's
  after trip i's body (wait on ``full``, read, arrive once on ``empty``: ``empty``
  expects one arrival per reader role).

A cancelled CTA never runs, so it cannot count itself done for ``pks.epoch_publish``: at
its loop's end the issuer adds the CTAs it cancelled to ``ctl``'s done count, so the
count still reaches the grid exactly when the last CTA publishes.

The body gets the tile's first row inside its chunk, its first column, the chunk, and the
loop-carried values, as ``pks.chunk_tile_loop``'s does.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import IntAttr, i32
from xdsl.ir import Block, Region, SSAValue
from xdsl.irdl import (IRDLOperation, attr_def, irdl_op_definition, operand_def, region_def,
                       var_operand_def, var_result_def)

from pkc.dialects.schedule_structure import check_tile_loop
from pkc.dialects.schedule_types import MbarriersType, SmemType, _fail
from pkc.dialects.types import BufferType

RING = 2
SLOT_BYTES = 32          # 16-byte CLC response, then the 4-byte work index
INDEX_OFFSET = 16
RESPONSE_BYTES = 16
MAX_CHUNKS = 128


@irdl_op_definition
class ClcChunkTileLoopOp(IRDLOperation):
    """The chunked persistent tile loop of a cluster-launch-control grid, work indices
    from a ticket counter (module docstring)."""

    name = "pks.clc_chunk_tile_loop"
    m = operand_def(i32)
    n = operand_def(i32)
    first = operand_def(i32)
    epoch = operand_def(i32)
    tick = operand_def(BufferType)
    ctl = operand_def(BufferType)
    ring = operand_def(SmemType)
    got = operand_def(MbarriersType)
    full = operand_def(MbarriersType)
    empty = operand_def(MbarriersType)
    inits = var_operand_def()
    bm = attr_def(IntAttr)
    bn = attr_def(IntAttr)
    group_m = attr_def(IntAttr)
    chunks = attr_def(IntAttr)
    issuer = attr_def(IntAttr)
    res = var_result_def()
    body = region_def("single_block")

    def __init__(self, m: SSAValue, n: SSAValue, first: SSAValue, epoch: SSAValue,
                 tick: SSAValue, ctl: SSAValue, ring: Sequence[SSAValue],
                 inits: Sequence[SSAValue], bm: int, bn: int, group_m: int, chunks: int,
                 issuer: bool):
        block = Block(arg_types=[i32, i32, i32, *[v.type for v in inits]])
        smem, got, full, empty = ring
        super().__init__(operands=[m, n, first, epoch, tick, ctl, smem, got, full, empty,
                                   list(inits)],
                         result_types=[[v.type for v in inits]], regions=[Region(block)],
                         attributes={"bm": IntAttr(bm), "bn": IntAttr(bn),
                                     "group_m": IntAttr(group_m), "chunks": IntAttr(chunks),
                                     "issuer": IntAttr(int(issuer))})

    @property
    def block(self) -> Block:
        return self.body.blocks[0]

    def verify_(self) -> None:
        check_tile_loop(self)
        if not 1 <= self.chunks.data <= MAX_CHUNKS:
            _fail(self.name, f"chunks = {self.chunks.data}: 1..{MAX_CHUNKS}")
        r = self.ring.type
        if r.count.data != RING or r.bytes.data < SLOT_BYTES:
            _fail(self.name, f"ring {r}: {RING} slots of at least {SLOT_BYTES} bytes")
        for what, bar, arrivals in (("got", self.got.type, 1), ("full", self.full.type, 1)):
            if bar.count.data != RING or bar.arrivals.data != arrivals:
                _fail(self.name, f"{what} {bar}: {RING} mbarriers of 1 arrival (the issuer's)")
        if self.empty.type.count.data != RING:
            _fail(self.name, f"empty {self.empty.type}: {RING} mbarriers (one arrival per "
                  "reader role)")
        for what, v, shape in (("tick", self.tick, (1,)), ("ctl", self.ctl, (2,))):
            t = v.type
            if t.symmetric or t.get_shape() != shape or str(t.element_type) != "i32":
                _fail(self.name, f"{what} {t}: a local !pk.buffer<{shape[0]}xi32>")
        if self.issuer.data not in (0, 1):
            _fail(self.name, f"issuer {self.issuer.data}: 0 or 1")


CLC_CHUNK_OPS = [ClcChunkTileLoopOp]

__all__ = ["ClcChunkTileLoopOp", "CLC_CHUNK_OPS", "RING", "SLOT_BYTES", "INDEX_OFFSET",
           "RESPONSE_BYTES"]
