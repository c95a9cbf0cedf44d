"""The machine state that schedule-level (``pks``) IR runs on: actors, mbarriers, and shared
memory that remembers who wrote and read every byte range.

Ordering is checked with vector clocks, as in :mod:`pkc.interp.kernel`. A clock maps an
actor id to that actor's epoch, and an mbarrier key to the number of the barrier's phases
the holder has observed. An arrival publishes the arriver's clock into the barrier's open
phase (release) and starts a new epoch of the arriver; a successful ``pks.mbarrier_wait``
joins the clock of the completed phase into the waiter's (acquire).

Shared memory keeps, per slot, the byte ranges written (by a TMA load, tagged with the
mbarrier phase its bytes completed; or by a warpgroup, tagged with its epoch and whether a
``pks.fence_async_shared`` followed) and the byte ranges read (by an MMA or a TMA store,
in flight until ``pks.mma_wait`` / ``pks.bulk_wait`` completes them, then tagged with the
reader's epoch). A read must see completed writes that are ordered before it; a write
must come after every earlier read of its bytes completed and was ordered before it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import torch
from xdsl.ir import Operation

from pkc.interp.values import InterpError, where

Clock = dict[Any, int]


def join(a: Clock, b: Clock) -> None:
    for key, t in b.items():
        if a.get(key, 0) < t:
            a[key] = t


@dataclass(eq=False)
class Actor:
    """One warpgroup of one CTA of one rank (a role's single thread is its warpgroup)."""

    aid: int
    rank: int
    cta: int
    wg: int                      # warpgroup index in the CTA
    clock: Clock
    role: str | None = None      # kind of the role it runs now, None outside roles
    role_wg: int = 0             # index among its role's warpgroups
    gen: Any = None
    blocked: tuple[Operation, str] | None = None   # (op, what it waits for)
    seen_version: int = -1
    seen: dict[tuple, int] = field(default_factory=dict)      # barrier key -> phases observed
    mma_open: list = field(default_factory=list)              # MMAs since the last commit
    mma_groups: list[list] = field(default_factory=list)      # committed, not yet waited
    bulk_open: list = field(default_factory=list)             # TMA stores since the last commit
    bulk_groups: list[list] = field(default_factory=list)
    unfenced: list = field(default_factory=list)              # generic smem writes, no fence yet
    # threads (pkc.interp.schedule_comm): the warpgroup's threads run in lockstep; values
    # derived from the thread index are per-lane tensors, ``mask`` the lanes that run now
    lanes: int = 128
    mask: Any = None             # None: every lane; else a bool tensor of ``lanes``
    launch: int = 0              # which launch of the kernel (pkc.interp.schedule_world)
    fenced: Clock | None = None  # the clock a relaxed signal publishes (last pks.fence_sys)
    bulk_issued: int = 0         # TMA writes to global memory issued / completed (bulk_wait)
    bulk_done: int = 0
    bulk_writes: list = field(default_factory=list)   # groups' writes a read-only wait left
    loop_ctas: int = 0           # CTAs a tile loop strides over (0: the grid; a partition's)

    @property
    def epoch(self) -> int:
        return self.clock[self.aid]

    def describe(self) -> str:
        who = (f"{self.role} warpgroup {self.role_wg}" if self.role is not None
               else f"warpgroup {self.wg} (outside any role)")
        launch = f", launch {self.launch + 1}" if self.launch else ""
        return f"rank {self.rank}, CTA {self.cta}, {who}{launch}"

    def at(self, op: Operation) -> str:
        return f"{where(op)} on {self.describe()}"


# ----------------------------------------------------------------------------------------
# mbarriers


@dataclass(eq=False)
class Mbarrier:
    """One mbarrier: a phase completes when ``expected`` arrivals came and the announced
    transaction bytes (expect-tx) were all delivered (complete-tx)."""

    key: tuple                   # (rank, cta, alloc number, index): its clock component
    name: str
    expected: int
    completed: int = 0           # phases completed so far
    arrived: int = 0             # arrivals in the open phase
    tx: int = 0                  # announced minus delivered bytes of the open phase
    pending_clock: Clock = field(default_factory=dict)
    done_clock: Clock = field(default_factory=dict)

    def status(self) -> str:
        return (f"{self.completed} phases completed; the open phase has {self.arrived} of "
                f"{self.expected} arrivals and {self.tx} announced bytes not yet delivered")

    def arrive(self, actor: Actor, op: Operation, tx_bytes: int) -> bool:
        if self.arrived >= self.expected:
            raise InterpError(
                f"{actor.at(op)}: arrival on {self.name} over its expected count "
                f"{self.expected}: phase {self.completed} already had {self.arrived} arrivals "
                f"and waits for {self.tx} bytes (too many arrivals)")
        join(self.pending_clock, actor.clock)
        self.arrived += 1
        self.tx += tx_bytes
        return self._maybe_complete(actor.at(op))

    def complete_tx(self, nbytes: int, who: str) -> bool:
        self.tx -= nbytes
        return self._maybe_complete(who)

    def _maybe_complete(self, who: str) -> bool:
        if self.arrived < self.expected:
            return False
        if self.tx < 0:
            raise InterpError(
                f"{who}: {self.name} received {-self.tx} more bytes than its arrivals "
                f"announced in phase {self.completed} (expect-tx too small)")
        if self.tx > 0:
            return False
        self.completed += 1
        join(self.done_clock, self.pending_clock)
        self.done_clock[self.key] = self.completed
        self.pending_clock = {}
        self.arrived = 0
        return True


# ----------------------------------------------------------------------------------------
# Shared memory


@dataclass(eq=False)
class Write:
    start: int
    end: int
    op: Operation
    who: str
    pending: bool = False        # a TMA load in flight
    bar: Mbarrier | None = None  # TMA: the barrier whose phase ``phase`` its bytes completed
    phase: int = -1
    actor: int = -1              # generic write: the writing actor and its epoch
    epoch: int = 0
    fenced: bool = True

    def describe(self) -> str:
        if self.bar is not None or self.pending:
            return f"the TMA load {self.who}"
        return f"the write {self.who}"


@dataclass(eq=False)
class Read:
    start: int
    end: int
    op: Operation
    who: str
    actor: int
    what: str                    # "MMA" / "TMA store"
    epoch: int | None = None     # None while in flight


def _overlaps(recs, start: int, end: int):
    return [r for r in recs if r.start < end and start < r.end]


def _cut(recs, start: int, end: int) -> list:
    """``recs`` with the byte range [start, end) removed (records split where needed)."""
    out = []
    for r in recs:
        if r.end <= start or end <= r.start:
            out.append(r)
            continue
        if r.start < start:
            out.append(replace(r, end=start))
        if end < r.end:
            out.append(replace(r, start=end))
    return out


@dataclass(eq=False)
class Slot:
    writes: list[Write] = field(default_factory=list)
    reads: list[Read] = field(default_factory=list)


class Smem:
    """``count`` slots of ``nbytes`` bytes of one CTA, with their access history."""

    def __init__(self, name: str, count: int, nbytes: int):
        self.name, self.count, self.nbytes = name, count, nbytes
        self.data = torch.zeros(count, nbytes, dtype=torch.uint8)
        self.slots = [Slot() for _ in range(count)]

    def where(self, slot: int, start: int, end: int) -> str:
        return f"bytes {start}..{end} of slot {slot} of {self.name}"

    def check_range(self, at: str, slot: int, start: int, end: int) -> None:
        if not 0 <= slot < self.count:
            raise InterpError(f"{at}: slot {slot} is outside 0..{self.count - 1} of {self.name}")
        if start < 0 or end > self.nbytes:
            raise InterpError(f"{at}: bytes {start}..{end} fall outside the {self.nbytes}-byte "
                              f"slot {slot} of {self.name}")

    def check_read(self, actor: Actor, at: str, slot: int, start: int, end: int,
                   async_proxy: bool) -> None:
        """Raises unless every byte was filled by a completed write ordered before ``actor``
        (and, for an async-proxy reader, fenced after a warpgroup's generic write)."""
        writes = sorted(_overlaps(self.slots[slot].writes, start, end), key=lambda w: w.start)
        for w in writes:
            if w.pending:
                raise InterpError(
                    f"{at}: reads {self.where(slot, start, end)} while {w.describe()} into "
                    "them is still in flight (read before the data arrived: no completed "
                    "mbarrier phase orders the load before this read)")
        pos = start
        for w in writes:
            if w.start > pos:
                break
            pos = max(pos, w.end)
        if pos < end:
            raise InterpError(
                f"{at}: reads {self.where(slot, start, end)}, but no completed load or store "
                f"filled bytes {pos}.. of them (read before the data arrived)")
        for w in writes:
            if w.bar is not None:
                if actor.clock.get(w.bar.key, 0) < w.phase + 1:
                    raise InterpError(
                        f"{at}: reads {self.where(slot, start, end)} that {w.describe()} "
                        f"filled in phase {w.phase} of {w.bar.name}, a phase this warpgroup "
                        "has not waited for (read before the data arrived)")
            elif w.actor != actor.aid and actor.clock.get(w.actor, 0) < w.epoch:
                raise InterpError(
                    f"{at}: reads {self.where(slot, start, end)} that {w.describe()} wrote "
                    "with no mbarrier ordering that write before this read")
            elif async_proxy and not w.fenced:
                raise InterpError(
                    f"{at}: the async proxy reads {self.where(slot, start, end)} that "
                    f"{w.describe()} wrote with no pks.fence_async_shared in between")

    def check_write(self, actor: Actor, at: str, slot: int, start: int, end: int) -> None:
        """Raises unless every earlier read of the bytes completed and is ordered before
        this write of ``actor`` (who issued it), and no TMA load into them is in flight."""
        s = self.slots[slot]
        for r in _overlaps(s.reads, start, end):
            if r.epoch is None:
                fix = "pks.mma_wait" if r.what == "MMA" else "pks.bulk_wait"
                raise InterpError(
                    f"{at}: overwrites {self.where(slot, start, end)} while the {r.what} "
                    f"{r.who} still reads them (the slot was released or reused before a "
                    f"{fix} completed that read)")
            if r.actor != actor.aid and actor.clock.get(r.actor, 0) < r.epoch:
                raise InterpError(
                    f"{at}: overwrites {self.where(slot, start, end)} that the {r.what} "
                    f"{r.who} read, with no mbarrier ordering that read before this write "
                    "(the slot was released before its reader was done)")
        for w in _overlaps(s.writes, start, end):
            if w.pending:
                raise InterpError(
                    f"{at}: writes {self.where(slot, start, end)} while {w.describe()} into "
                    "them is still in flight")

    def add_read(self, slot: int, rec: Read) -> None:
        self.slots[slot].reads.append(rec)

    def begin_write(self, slot: int, rec: Write) -> None:
        s = self.slots[slot]
        s.reads = _cut(s.reads, rec.start, rec.end)
        s.writes.append(rec)

    def finish_write(self, slot: int, rec: Write, payload: torch.Tensor) -> None:
        s = self.slots[slot]
        others = [w for w in s.writes if w is not rec]
        s.writes = _cut(others, rec.start, rec.end) + [rec]
        s.reads = _cut(s.reads, rec.start, rec.end)
        self.data[slot, rec.start:rec.end] = payload
        rec.pending = False

    def bytes(self, slot: int, start: int, end: int) -> torch.Tensor:
        return self.data[slot, start:end]


# ----------------------------------------------------------------------------------------
# Asynchronous work


@dataclass(eq=False)
class Acc:
    """A warpgroup's accumulator: exact sums (f64 holds every bf16 / f16 product and the
    sums of a tile's k-blocks exactly), rounded to f32 and then to the output type when
    read, i.e. an f32 accumulator whose value does not depend on the order of the sums."""

    rows: int
    cols: int
    data: torch.Tensor | None = None
    in_flight: int = 0


@dataclass(eq=False)
class Mma:
    acc: Acc
    reads: list[tuple[Smem, int, Read]]


@dataclass(eq=False)
class TmaLoad:
    """A TMA load in flight: the box lands and its bytes are counted when the copy engine
    completes it (the scheduler decides when)."""

    op: Operation
    who: str
    box: Any                     # () -> torch.Tensor of the box, read at completion
    targets: list[tuple[Smem, int, Write, Mbarrier]]
