"""Global and shared memory of an emulated launch.

Global memory is one byte array (the heap). Every allocation (a rank's buffer, a
pointer array, a signal pad, an error record) gets an address ``GLOBAL_BASE + offset``,
256-aligned, with a 256-byte gap after it, so that an access that leaves its allocation
falls outside every one and is caught (:class:`~pkc.emu.errors.EmuMemoryError`), not
silently served from a neighbour.

Shared memory is one byte array per CTA; a ``.shared::cta`` address is the offset into
the CTA's dynamic shared memory (``pk_smem`` is at 0, so address bits are what the
swizzle modes see). A ``.shared::cluster`` address of another CTA of the cluster carries
``(cluster rank + 1) << 24`` (what ``mapa`` returns).

Each heap byte remembers who wrote it last, for the race check between ranks
(:mod:`pkc.emu.race`); each shared byte remembers which thread wrote it through the
generic proxy and has not fenced since, and which mbarrier an async-proxy write into it
completes on, for the proxy checks (:mod:`pkc.emu.ops_async`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

GLOBAL_BASE = 1 << 40
ALIGN = 256
GAP = 256
CLUSTER_SHIFT = 24
MAX_HEAP = 256 << 20
SMEM_OFFSET_MASK = (1 << CLUSTER_SHIFT) - 1

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


@dataclass
class Allocation:
    name: str
    rank: int | None
    offset: int
    size: int

    def describe(self) -> str:
        who = f" of rank {self.rank}" if self.rank is not None else ""
        return f"'{self.name}'{who} ({self.size} bytes at 0x{GLOBAL_BASE + self.offset:x})"


class GlobalMemory:
    """Allocate everything first (:meth:`alloc`), then :meth:`finalize`, then access."""

    def __init__(self):
        self.allocs: list[Allocation] = []
        self._top = 0
        self.heap: np.ndarray | None = None

    def alloc(self, nbytes: int, name: str, rank: int | None = None) -> int:
        off = self._top
        self.allocs.append(Allocation(name, rank, off, nbytes))
        self._top = off + ((max(nbytes, 1) + ALIGN - 1) // ALIGN) * ALIGN + GAP
        return GLOBAL_BASE + off

    def finalize(self) -> None:
        if self._top > MAX_HEAP:
            from pkc.emu.errors import EmuError
            raise EmuError(f"the launch needs {self._top >> 20} MiB of global memory, more than "
                           f"the emulator's {MAX_HEAP >> 20} MiB: emulate small shapes")
        self.heap = np.zeros(self._top + 16, dtype=np.uint8)
        self.starts = np.array([a.offset for a in self.allocs], dtype=np.int64)
        self.ends = np.array([a.offset + a.size for a in self.allocs], dtype=np.int64)
        self.writer_rank = np.full(self.heap.size, -1, dtype=np.int16)
        self.writer_epoch = np.zeros(self.heap.size, dtype=np.int32)
        self.writer_atomic = np.zeros(self.heap.size, dtype=bool)
        self.reader_rank = np.full(self.heap.size, -1, dtype=np.int16)
        self.reader_epoch = np.zeros(self.heap.size, dtype=np.int32)

    # ---- host side ----------------------------------------------------------------
    def write_tensor(self, addr: int, t: torch.Tensor) -> None:
        raw = _tensor_bytes(t)
        off = addr - GLOBAL_BASE
        self.heap[off:off + raw.size] = raw

    def read_tensor(self, addr: int, shape, dtype: torch.dtype) -> torch.Tensor:
        n = int(np.prod(shape)) if len(shape) else 1
        nbytes = n * torch.empty((), dtype=dtype).element_size()
        off = addr - GLOBAL_BASE
        raw = torch.from_numpy(self.heap[off:off + nbytes].copy())
        return raw.view(dtype).reshape(tuple(shape)).clone()

    def write_words(self, addr: int, values, dtype=np.uint64) -> None:
        arr = np.asarray(values, dtype=dtype)
        off = addr - GLOBAL_BASE
        self.heap[off:off + arr.nbytes] = arr.view(np.uint8)

    def read_words(self, addr: int, n: int, dtype=np.uint32) -> np.ndarray:
        off = addr - GLOBAL_BASE
        return self.heap[off:off + n * np.dtype(dtype).itemsize].view(dtype).copy()

    # ---- device side --------------------------------------------------------------
    def offsets(self, addr: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
        """Heap offsets of ``size``-byte accesses at ``addr``, and a mask of the bad ones
        (outside every allocation, or misaligned)."""
        off = addr.astype(np.uint64).view(np.int64) - GLOBAL_BASE
        i = np.searchsorted(self.starts, off, side="right") - 1
        ic = np.maximum(i, 0)
        bad = (i < 0) | (off + size > self.ends[ic]) | (off % size != 0)
        return off, bad

    def locate(self, addr: int) -> str:
        """Words for an address: which allocation it is in or next to."""
        off = int(addr) - GLOBAL_BASE
        best = None
        for a in self.allocs:
            if a.offset <= off < a.offset + a.size:
                return f"inside {a.describe()}, byte {off - a.offset}"
            if off >= a.offset + a.size and (best is None or a.offset > best.offset):
                best = a
        if best is not None and off >= best.offset + best.size:
            return f"{off - best.offset - best.size} bytes past the end of {best.describe()}"
        return "outside every allocation"

    def load(self, off: np.ndarray, size: int) -> np.ndarray:
        return self.heap.view(_UINT[size])[off // size]

    def store(self, off: np.ndarray, size: int, bits: np.ndarray) -> None:
        self.heap.view(_UINT[size])[off // size] = bits.view(_UINT[size])

    def view(self, dtype) -> np.ndarray:
        return self.heap.view(dtype)


class SharedMemory:
    """``nctas`` arenas of ``size`` bytes, flattened: CTA c's byte i is ``c * size + i``."""

    def __init__(self, nctas: int, size: int):
        self.size = max(16, ((size + 15) // 16) * 16)
        self.declared = size
        self.data = np.zeros(nctas * self.size, dtype=np.uint8)
        # generic-proxy writes not yet fenced: local thread id + 1 of the writer, 0 none
        self.dirty = np.zeros(nctas * self.size, dtype=np.int16)
        # async-proxy writes whose mbarrier a reader has not waited on: mbarrier offset + 1
        self.pending = np.zeros(nctas * self.size, dtype=np.int32)
        # bytes a bulk / TMA store still reads (its group not waited on): issuing thread
        # (over the launch) + 1
        self.reading = np.zeros(nctas * self.size, dtype=np.int64)

    def flat(self, cta: np.ndarray, addr: np.ndarray, size: int,
             cluster_base: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Flat byte index of ``size``-byte accesses, the CTA each lands in, and a mask of
        the bad ones. ``cta``: the accessing thread's CTA; an address carrying a cluster
        rank goes to that CTA of the cluster (``cluster_base``: the cluster's first CTA)."""
        a = addr.astype(np.int64)
        target = cta.astype(np.int64)
        rank = a >> CLUSTER_SHIFT
        remote = rank > 0
        if remote.any():
            if cluster_base is None:
                cluster_base = cta
            target = np.where(remote, cluster_base.astype(np.int64) + rank - 1, target)
        off = a & SMEM_OFFSET_MASK
        bad = (off + size > self.declared) | (off % size != 0) | (target >= len(self.data) // self.size)
        return target * self.size + off, target, bad


def _tensor_bytes(t: torch.Tensor) -> np.ndarray:
    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bool:
        t = t.to(torch.uint8)
    return t.view(torch.uint8).reshape(-1).numpy()


def ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The concatenation of ``arange(s, s + n)`` for each (s, n): byte indices of many
    variable-length copies at once."""
    lengths = lengths.astype(np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.cumsum(lengths)
    out = np.ones(total, dtype=np.int64)
    out[0] = starts[0]
    nz = lengths > 0
    s, e = starts.astype(np.int64)[nz], ends[nz]
    ln = lengths[nz]
    # at each copy's first byte, jump from the previous copy's last byte
    out[e[:-1]] = s[1:] - (s[:-1] + ln[:-1] - 1)
    out[0] = s[0]
    return np.cumsum(out)
