"""Races between ranks, found with vector clocks (as pkc/interp does for pk ops).

Each rank has a clock (a vector over ranks; its own entry starts at 1). A release
(``red``/``st``/``atom`` with ``.release`` or ``.acq_rel``, or a relaxed one after a
``fence.acq_rel``/``fence.sc`` of the same thread, PTX ISA 8.8 release patterns)
publishes the rank's clock (for a fence: its clock at the fence) at the address and then
advances the rank's own entry; an
acquire (``ld.acquire``, the bounded spin, ``atom.acquire``, or a relaxed read followed by
a fence) joins the published clock into the reader's.

Every heap byte remembers the rank and epoch of its last writer and whether the write was
atomic. A weak (plain) access by rank r to a byte that rank p != r wrote at epoch e is a
race unless r has acquired p's clock at e or later (PTX ISA 8.9.3: conflicting accesses
not ordered by causality); atomic writes do not race with each other. A byte also
remembers its last weak reader (rank and epoch): a write by another rank that has not
acquired the reader's clock at that epoch is a race too (the reader read before the data
arrived, or the writer overwrote data still in use). Not modelled: races between CTAs
of one rank, and reads before the last one (one reader is remembered per byte)."""

from __future__ import annotations

import numpy as np

from pkc.emu.errors import EmuRaceError


class Clocks:
    def __init__(self, world: int):
        self.vc = np.eye(world, dtype=np.int64)
        self.published: dict[int, np.ndarray] = {}
        self.fenced: dict[int, np.ndarray] = {}   # thread -> its clock at its last fence
        self.seen: dict[int, np.ndarray] = {}     # thread -> clock seen by a relaxed read

    def release(self, ranks: np.ndarray, offs: np.ndarray) -> None:
        for r, off in zip(ranks.tolist(), offs.tolist()):
            cur = self.published.get(off)
            self.published[off] = self.vc[r].copy() if cur is None else np.maximum(cur, self.vc[r])
            self.vc[r, r] += 1

    def acquire(self, ranks: np.ndarray, offs: np.ndarray) -> None:
        for r, off in zip(ranks.tolist(), offs.tolist()):
            pub = self.published.get(off)
            if pub is not None:
                np.maximum(self.vc[r], pub, out=self.vc[r])

    def fence(self, threads: np.ndarray, ranks: np.ndarray) -> None:
        """A fence.acq_rel / sc: completes pending relaxed-read acquires, and makes the
        thread's later relaxed writes releases of what came before the fence (the clock
        is snapshot here and the rank's epoch advances)."""
        for t, r in zip(threads.tolist(), ranks.tolist()):
            pub = self.seen.pop(t, None)
            if pub is not None:
                np.maximum(self.vc[r], pub, out=self.vc[r])
            self.fenced[t] = self.vc[r].copy()
            self.vc[r, r] += 1

    def relaxed_write(self, threads: np.ndarray, ranks: np.ndarray, offs: np.ndarray) -> None:
        if not self.fenced:
            return
        for t, off in zip(threads.tolist(), offs.tolist()):
            snap = self.fenced.get(t)
            if snap is not None:
                cur = self.published.get(off)
                self.published[off] = snap.copy() if cur is None else np.maximum(cur, snap)

    def relaxed_read(self, threads: np.ndarray, offs: np.ndarray) -> None:
        for t, off in zip(threads.tolist(), offs.tolist()):
            pub = self.published.get(off)
            if pub is not None:
                cur = self.seen.get(t)
                self.seen[t] = pub.copy() if cur is None else np.maximum(cur, pub)


def clocks(m) -> Clocks:
    c = m.state.get("clocks")
    if c is None:
        c = m.state["clocks"] = Clocks(m.world)
    return c


def check(m, ins, g, off: np.ndarray, size: int, write: bool, atomic: bool = False,
          owner: np.ndarray | None = None) -> None:
    """Checks (and, for writes, records) ``size``-byte accesses at heap offsets ``off`` by
    the threads of ``g`` (``owner``: for byte offsets of copies, the index in ``g`` of the
    thread that accesses each byte; ``size`` is then 1)."""
    if not m.check_races or off.size == 0:
        return
    gm = m.gmem
    c = clocks(m)
    byt = (off[:, None] + np.arange(size)[None, :]).reshape(-1)
    who = np.repeat(np.arange(g.n), size) if owner is None else owner
    rank = g.rank[who]
    wr = gm.writer_rank[byt].astype(np.int64)
    ep = gm.writer_epoch[byt]
    other = (wr >= 0) & (wr != rank)
    if other.any():
        seen = c.vc[rank, np.maximum(wr, 0)]
        bad = other & (seen < ep)
        if atomic:
            bad &= ~gm.writer_atomic[byt]
        if bad.any():
            j = int(np.flatnonzero(bad)[0])
            i = int(who[j])
            kind = "atomic" if gm.writer_atomic[byt[j]] else "plain"
            verb = "writes" if write else "reads"
            from pkc.emu.memory import GLOBAL_BASE
            m.fail(EmuRaceError,
                   f"race between ranks: rank {int(rank[j])} {verb} global memory "
                   f"{gm.locate(GLOBAL_BASE + int(byt[j]))} that rank {int(wr[j])} wrote "
                   f"({kind}, at its epoch {int(ep[j])}) with no release/acquire ordering "
                   f"them (rank {int(rank[j])} has acquired rank {int(wr[j])}'s clock only up "
                   f"to {int(seen[j])}): a missing pk.signal / pk.wait?", g, ins, i)
    if write:
        # the write must come after the last other rank's read of these bytes
        rd = gm.reader_rank[byt].astype(np.int64)
        rep = gm.reader_epoch[byt]
        other = (rd >= 0) & (rd != rank)
        if other.any():
            seen = c.vc[rank, np.maximum(rd, 0)]
            bad = other & (seen < rep)
            if bad.any():
                j = int(np.flatnonzero(bad)[0])
                from pkc.emu.memory import GLOBAL_BASE
                m.fail(EmuRaceError,
                       f"race between ranks: rank {int(rank[j])} writes global memory "
                       f"{gm.locate(GLOBAL_BASE + int(byt[j]))} that rank {int(rd[j])} read (at "
                       f"its epoch {int(rep[j])}) with no release/acquire ordering the read "
                       "before the write: the reader read before the data arrived (a missing "
                       "pk.wait?) or the writer overwrote data still in use", g, ins, int(who[j]))
        gm.writer_rank[byt] = rank
        gm.writer_epoch[byt] = c.vc[rank, rank]
        gm.writer_atomic[byt] = atomic
    else:
        gm.reader_rank[byt] = rank
        gm.reader_epoch[byt] = c.vc[rank, rank]
