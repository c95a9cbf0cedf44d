"""Global memory of W simulated ranks for the schedule-level interpreter: every rank's copy
of every kernel buffer as 32-bit words that remember who wrote, reduce-added and read them,
the per-thread values of a warpgroup (lanes), and pointers into a rank's copy.

Ordering uses the vector clocks of :mod:`pkc.interp.schedule_state`: a clock maps a key to
a count; an actor's own key is its id (its epoch: raised at each release), a warpgroup's
completed-and-fenced bulk (TMA) writes are key ``("bulk", id)``, and the host's read of a
rank's outputs after launch k is ``("host", rank, k)``. A write or read is recorded as
(key, count); an access by actor ``a`` is ordered after it when ``a.clock[key] >= count``.

* a read must find every word written (a store, an input, a ``pk.alloc {zero}``) and
  every write and reduce-add of it ordered before (else: read before the data arrived / no
  signal orders the store before the read);
* a store must come after every earlier write, reduce-add and read of its words (else: a
  peer's buffer overwritten while its reader may still read it);
* a reduce-add (TMA ``.add``) must come after the last store of its words and the reads,
  not after other reduce-adds (they are atomic with each other).

Releases: ``pks.fence_sys`` snapshots the clock that a later relaxed ``pks.signal``
publishes (stores after the fence are not covered); a release signal publishes the clock
itself; a satisfied ``pks.signal_wait`` joins the clocks published into its pad slot. An
LL store publishes the writer's clock with its flags; an ``pks.ll_wait`` that saw the
flags joins it (the data and flag are one store).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from xdsl.ir import SSAValue

from pkc.interp.schedule_state import Actor, Clock, join
from pkc.interp.values import InterpError

INIT = 0          # key of data the host wrote before the first launch (ordered before all)
NONE = -1         # no write yet (poison)
POISON_WORD = 0x7FC07FC0      # a NaN as f32 and as each bf16 half (never a valid result)
Lanes = torch.Tensor          # a per-thread value: int64 / bool, one entry per lane


def lanes(x, n: int) -> torch.Tensor:
    """``x`` (a scalar or per-lane tensor) as an int64 tensor of ``n`` lanes."""
    if isinstance(x, torch.Tensor):
        return x.to(torch.int64) if x.dtype != torch.int64 else x
    return torch.full((n,), int(x), dtype=torch.int64)


def active(a: Actor, *conds) -> torch.Tensor:
    """The lanes of ``a`` that run an op: its mask and every given condition."""
    m = a.mask.clone() if a.mask is not None else torch.ones(a.lanes, dtype=torch.bool)
    for c in conds:
        if c is None:
            continue
        m &= c.bool() if isinstance(c, torch.Tensor) else torch.tensor(bool(c))
    return m


def uniform(a: Actor, op, x, what: str) -> int:
    """A scalar, or a per-lane value equal on the active lanes (else an error naming op)."""
    if not isinstance(x, torch.Tensor):
        return int(x)
    vals = x[active(a)] if x.dim() else x.view(1)
    u = torch.unique(vals)
    if u.numel() != 1:
        raise InterpError(f"{a.at(op)}: {what} differs between the threads of the warpgroup "
                          f"({u.tolist()[:8]}): the interpreter models one per warpgroup")
    return int(u[0])


@dataclass
class Ptr:
    """An address: rank ``rank``'s copy of kernel buffer ``buf``, ``off`` bytes in (a scalar
    or per lane)."""

    buf: SSAValue
    rank: int
    off: Any = 0

    def plus(self, nbytes) -> Ptr:
        return Ptr(self.buf, self.rank, self.off + nbytes)


class World:
    """Key interning and release snapshots shared by every buffer of one interpreter run."""

    def __init__(self):
        self.keys: list = ["init"]
        self.ids: dict = {"init": INIT}
        self.who: dict = {"init": "the host (before the first launch)"}
        self.sites: dict[tuple[str, int, int], str] = {}   # (kind, key, count) -> where
        self.snapshots: dict[tuple[int, int], Clock] = {}

    def kid(self, key, who: str = "") -> int:
        i = self.ids.get(key)
        if i is None:
            i = self.ids[key] = len(self.keys)
            self.keys.append(key)
            self.who[key] = who
        return i

    def actor_key(self, a: Actor) -> int:
        return self.kid(a.aid, f"rank {a.rank}, CTA {a.cta}, warpgroup {a.wg}"
                        + (f" of launch {a.launch + 1}" if a.launch else ""))

    def describe(self, kind: str, kid: int, count: int) -> str:
        site = self.sites.get((kind, kid, count))
        return site or f"{self.who[self.keys[kid]]} ({kind})"


class GlobalBuf:
    """One rank's copy of one kernel buffer, as 32-bit words with their access records."""

    def __init__(self, world: World, name: str, data: torch.Tensor, written: bool):
        if data.numel() * data.element_size() % 4:
            raise InterpError(f"{name}: {data.numel() * data.element_size()} bytes: buffers "
                              "the communication ops touch are whole 32-bit words")
        self.world, self.name, self.data = world, name, data
        self.words = data.view(-1).view(torch.int32)
        n = self.words.numel()
        self.nbytes = 4 * n
        self.wk = torch.full((n,), INIT if written else NONE, dtype=torch.int64)
        self.wv = torch.zeros(n, dtype=torch.int64)
        self.reads: dict[int, torch.Tensor] = {}
        self.adds: dict[int, torch.Tensor] = {}
        self.signal_clocks: dict[int, Clock] = {}

    # -- addressing ------------------------------------------------------------------
    def word_index(self, a: Actor, op, byte_off: torch.Tensor, nbytes: int) -> torch.Tensor:
        """The words of ``nbytes`` bytes at each byte offset (one row per offset)."""
        if byte_off.numel():
            lo, hi = int(byte_off.min()), int(byte_off.max())
            if lo < 0 or hi + nbytes > self.nbytes or lo % 4 or bool((byte_off % 4 != 0).any()):
                bad = lo if lo < 0 or lo % 4 else hi
                raise InterpError(f"{a.at(op)}: accesses bytes {bad}..{bad + nbytes} of "
                                  f"{self.name} ({self.nbytes} bytes, 4-byte aligned words): "
                                  "out of bounds or misaligned")
        return (byte_off // 4).unsqueeze(-1) + torch.arange(nbytes // 4)

    # -- checks ----------------------------------------------------------------------
    def _ordered(self, a: Actor, at: str, idx: torch.Tensor, kids: torch.Tensor,
                 counts: torch.Tensor, own: int, what: str, kind: str) -> None:
        W = self.world
        for k in torch.unique(kids).tolist():
            if k in (INIT, NONE, own):
                continue
            need = int(counts[kids == k].max())
            if need > 0 and a.clock.get(W.keys[k], 0) < need:
                first = int(idx[(kids == k) & (counts == need)][0])
                raise InterpError(
                    f"{at}: {what} word {first} ({4 * first}..{4 * first + 4}) of "
                    f"{self.name}, after {W.describe(kind, k, need)}, with nothing (no "
                    "signal, wait, barrier or end of kernel) ordering that before this access")

    def check_read(self, a: Actor, at: str, idx: torch.Tensor) -> None:
        idx = idx.reshape(-1)
        kids = self.wk[idx]
        if bool((kids == NONE).any()):
            first = int(idx[kids == NONE][0])
            raise InterpError(f"{at}: reads word {first} (bytes {4 * first}..{4 * first + 4}) "
                              f"of {self.name}, which no store wrote yet (read before the "
                              "data arrived)")
        own = self.world.actor_key(a)
        self._ordered(a, at, idx, kids, self.wv[idx], own, "reads", "write")
        for k, vals in self.adds.items():
            self._ordered(a, at, idx, torch.full_like(idx, k), vals[idx], own, "reads", "add")

    def read(self, a: Actor, at: str, idx: torch.Tensor) -> torch.Tensor:
        self.check_read(a, at, idx)
        k = self.world.actor_key(a)
        self.world.sites.setdefault(("read", k, a.epoch), f"the read {at}")
        r = self.reads.get(k)
        if r is None:
            r = self.reads[k] = torch.zeros(self.wk.numel(), dtype=torch.int64)
        flat = idx.reshape(-1)
        r[flat] = torch.clamp(r[flat], min=a.epoch)
        return self.words[idx]

    def _check_overwrite(self, a: Actor, at: str, idx: torch.Tensor, key: int,
                         adding: bool) -> None:
        own = self.world.actor_key(a)
        what = "reduce-adds into" if adding else "overwrites"
        if adding:
            kids = self.wk[idx]
            if bool((kids == NONE).any()):
                first = int(idx[kids == NONE][0])
                raise InterpError(f"{at}: reduce-adds into word {first} of {self.name}, which "
                                  "no store wrote yet (an add before the owner's store)")
        self._ordered(a, at, idx, self.wk[idx], self.wv[idx], own, what, "write")
        for k, vals in list(self.reads.items()):
            if k != own:
                self._ordered(a, at, idx, torch.full_like(idx, k), vals[idx], own, what, "read")
            if not adding:
                vals[idx] = 0
        if not adding:
            for k, vals in self.adds.items():
                if k != key:
                    self._ordered(a, at, idx, torch.full_like(idx, k), vals[idx], own, what, "add")
                vals[idx] = 0

    def write(self, a: Actor, at: str, idx: torch.Tensor, values: torch.Tensor,
              key: int, count: int) -> None:
        """Words ``idx`` := ``values`` by ``a``, recorded as (key, count)."""
        flat = idx.reshape(-1)
        self._check_overwrite(a, at, flat, key, adding=False)
        self.world.sites.setdefault(("write", key, count), f"the store {at}")
        self.words[flat] = values.reshape(-1).to(torch.int32)
        self.wk[flat] = key
        self.wv[flat] = count

    def note_add(self, a: Actor, at: str, idx: torch.Tensor, key: int, count: int) -> None:
        """Records a reduce-add of words ``idx`` (the caller changes the data)."""
        flat = idx.reshape(-1)
        self._check_overwrite(a, at, flat, key, adding=True)
        self.world.sites.setdefault(("add", key, count), f"the reduce-add {at}")
        r = self.adds.get(key)
        if r is None:
            r = self.adds[key] = torch.zeros(self.wk.numel(), dtype=torch.int64)
        r[flat] = torch.clamp(r[flat], min=count)

    def host_read(self, key: int) -> None:
        """The host reads every word (after a launch): later stores must be ordered after."""
        self.reads[key] = torch.ones(self.wk.numel(), dtype=torch.int64)

    def check_final(self, end_clock: Clock, at: str) -> None:
        """Every write and add of the buffer is ordered before ``end_clock`` (the end of
        the rank's kernel: what the host then reads is complete)."""
        W = self.world
        for kind, kids, counts in [("write", self.wk, self.wv)] + [
                ("add", torch.full_like(v, k), v) for k, v in self.adds.items()]:
            for k in torch.unique(kids).tolist():
                if k in (INIT, NONE):
                    continue
                need = int(counts[kids == k].max())
                if need > 0 and end_clock.get(W.keys[k], 0) < need:
                    raise InterpError(
                        f"{at}: {self.name} is read by the host after the kernel, but "
                        f"{W.describe(kind, k, need)} wrote it, with nothing ordering that before "
                        "the kernel's end on this rank (a missing wait for a peer's signal)")


def release(a: Actor) -> None:
    """A release of ``a``: what it did so far is in its clock at the current epoch."""
    a.clock[a.aid] += 1


def snapshot(world: World, a: Actor, key: int) -> int:
    """Publishes ``a``'s clock with a record made now (an LL store) and starts a new epoch."""
    count = a.epoch
    world.snapshots[(key, count)] = dict(a.clock)
    release(a)
    return count


def acquire(world: World, a: Actor, kids: torch.Tensor, counts: torch.Tensor) -> None:
    for k, c in set(zip(kids.reshape(-1).tolist(), counts.reshape(-1).tolist())):
        snap = world.snapshots.get((k, c))
        if snap is not None:
            join(a.clock, snap)


__all__ = ["World", "GlobalBuf", "Ptr", "lanes", "active", "uniform", "release", "snapshot",
           "acquire", "INIT", "NONE", "POISON_WORD"]
