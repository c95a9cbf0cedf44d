"""Shared-memory plan of one worker: where every tile lives.

On the portable path every tile is a block of shared memory (row-major, natural element
size; i1 as one byte) that the CTA's threads fill and read cooperatively. Tiles that are
never live at the same time share memory: each tile value gets a live interval over the
worker's ops in program order (a use inside a loop that does not define the tile keeps it
alive to the loop's end, since the next iteration reads it again) and intervals are packed
first-fit. A loop-carried tile (``scf.for`` iter_arg) has one slot for the block argument
and the loop's result.

Offsets are relative to the tile area, which starts after the kernel's header
(:data:`HEADER_BYTES`: timeout flag, barrier generation, mbarrier).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects import scf
from xdsl.ir import Block, Operation, SSAValue

from pkc.dialects import kernel as k
from pkc.dialects.types import TileType

ALIGN = 128  # bulk copies need 16; 128 keeps later TMA/swizzled layouts possible
HEADER_BYTES = 128
# Header layout (bytes from the start of the arena).
HDR_TIMEOUT_FLAG = 0   # u32: a thread of this CTA saw a timeout
HDR_BARRIER_GEN = 4    # u32: worker barriers this CTA has passed
HDR_MBARRIER = 8       # b64: mbarrier for bulk loads


def element_bytes(t) -> int:
    name = str(t)
    return {"bf16": 2, "f16": 2, "f32": 4, "f64": 8, "i1": 1, "i8": 1, "i32": 4, "i64": 8,
            "f8E4M3FN": 1, "f8E5M2": 1}[name]


def tile_bytes(t: TileType) -> int:
    return t.numel() * element_bytes(t.element_type)


@dataclass
class Slot:
    offset: int  # from the start of the arena (header included)
    size: int


@dataclass
class _Interval:
    values: list[SSAValue]
    size: int
    start: int
    end: int


class SmemPlan:
    """Slots for every tile value of one worker; ``bytes`` is the arena size it needs."""

    def __init__(self, worker: k.WorkerOp):
        self.pos: dict[Operation, int] = {}
        self.last: dict[Operation, int] = {}
        self._number(worker.body.blocks[0], 0)
        self.slots: dict[SSAValue, Slot] = {}
        self.tile_bytes = self._allocate(self._intervals(worker))
        self.bytes = HEADER_BYTES + self.tile_bytes

    def __getitem__(self, v: SSAValue) -> Slot:
        return self.slots[v]

    # -- numbering ---------------------------------------------------------------------

    def _number(self, block: Block, n: int) -> int:
        for op in block.ops:
            self.pos[op] = n
            n += 1
            for region in op.regions:
                for b in region.blocks:
                    n = self._number(b, n)
            self.last[op] = n - 1
        return n

    def _use_pos(self, use_op: Operation, def_op: Operation | None) -> int:
        """Position of a use, extended to the end of the outermost loop around the use
        that does not contain the definition."""
        p = self.pos[use_op]
        op = use_op.parent_op()
        while op is not None and not isinstance(op, k.WorkerOp):
            if isinstance(op, (scf.ForOp, k.ForeachOp)) and not _contains(op, def_op):
                p = max(p, self.last[op])
            op = op.parent_op()
        return p

    def _intervals(self, worker: k.WorkerOp) -> list[_Interval]:
        out = []
        for op in worker.walk():
            if isinstance(op, scf.ForOp):
                args = op.body.blocks[0].args[1:]
                for arg, res in zip(args, op.results):
                    if isinstance(arg.type, TileType):
                        vals = [arg, res]
                        end = max([self.last[op]] + [self._end(v, op) for v in vals])
                        out.append(_Interval(vals, tile_bytes(arg.type), self.pos[op], end))
                continue
            for r in op.results:
                if isinstance(r.type, TileType):
                    out.append(_Interval([r], tile_bytes(r.type), self.pos[op], self._end(r, op)))
        return out

    def _end(self, v: SSAValue, def_op: Operation) -> int:
        end = self.pos[def_op]
        for use in v.uses:
            end = max(end, self._use_pos(use.operation, def_op))
        return end

    # -- packing -----------------------------------------------------------------------

    def _allocate(self, intervals: list[_Interval]) -> int:
        live: list[tuple[int, int, int]] = []  # (offset, size, end)
        top = 0
        for iv in sorted(intervals, key=lambda i: (i.start, -i.size)):
            live = [x for x in live if x[2] >= iv.start]
            size = _round(iv.size)
            offset = 0
            for o, s, _ in sorted(live):
                if offset + size <= o:
                    break
                offset = max(offset, o + s)
            live.append((offset, size, iv.end))
            top = max(top, offset + size)
            for v in iv.values:
                self.slots[v] = Slot(HEADER_BYTES + offset, iv.size)
        return top

    def describe(self) -> str:
        return f"{self.tile_bytes} bytes of tiles ({len(self.slots)} tile values)"


def _round(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _contains(op: Operation, inner: Operation | None) -> bool:
    while inner is not None:
        if inner is op:
            return True
        inner = inner.parent_op()
    return False
