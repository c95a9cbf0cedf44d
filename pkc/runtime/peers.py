"""Peer groups: the ranks one process drives and their persistent symmetric allocations.

The scheduled kernels (fused GEMM + collective, collectives, MoE) see peers only
through device arrays of W base addresses, one array per symmetric allocation. Two worlds
provide them:

* :class:`VirtualPeers`: all W ranks in this process on one GPU (W copies of every
  allocation, each rank's kernels on its own stream; green contexts when available, so
  that every rank's CTAs are resident at once). Traffic goes through HBM, every pointer
  and signal is real. This is how the scheduled kernels are tested on one GPU.
* :class:`DistributedPeers`: this process is one rank of a torch.distributed group
  (``torchrun``); allocations come from ``torch.distributed._symmetric_memory`` (``empty``
  + ``rendezvous``), whose ``buffer_ptrs`` become the device arrays.

Allocations are made once per key and reused on every call (so launches need no
allocation, no barrier and no host synchronization, and can be captured in a CUDA graph).
Signal pads are zeroed once, at allocation; kernels compare monotonic counters with the
launch's epoch (1, 2, ...), so every rank must launch a kernel the same number of times.

NVLink multicast is never used here (``TORCH_SYMM_MEM_DISABLE_MULTICAST=1`` is set on import
of :mod:`pkc.runtime.driver`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from pkc.runtime import driver  # noqa: F401  (sets the no-multicast environment first)


@dataclass
class Symmetric:
    """One symmetric allocation: ``tensors[r]`` for the ranks driven here, ``ptrs`` the W
    base addresses (a host list, in rank order) and ``ptrs_dev`` the same as a device
    ``int64`` array (what kernels take)."""

    tensors: dict[int, torch.Tensor]
    ptrs: list[int]
    ptrs_dev: torch.Tensor
    keep: list = field(default_factory=list)


class Mailbox:
    """Host-mapped pinned error slots (8 u32 each) that kernels write when a bounded wait
    expires (the ``mbox`` parameter of :mod:`pkc.codegen.abi`'s error record): the host reads them with no CUDA call, so
    a timeout is reported even when the kernel trapped and the context is gone."""

    SLOTS = 4096

    def __init__(self) -> None:
        import ctypes

        from pkc.runtime.driver import call, cu

        d = cu()
        flags = d.CU_MEMHOSTALLOC_DEVICEMAP | d.CU_MEMHOSTALLOC_PORTABLE
        nbytes = self.SLOTS * 32
        self.host = int(call("cuMemHostAlloc", nbytes, flags))
        self.dev = int(call("cuMemHostGetDevicePointer", self.host, 0))
        self.words = (ctypes.c_uint32 * (self.SLOTS * 8)).from_address(self.host)
        ctypes.memset(self.host, 0, nbytes)
        import numpy as np

        self._flags = np.ctypeslib.as_array(self.words)[0::8]   # a view: no copy per check
        self.owners: list[tuple[str, int, dict]] = []     # slot -> (kernel, rank, kinds)

    def slot(self, kernel: str, rank: int, kinds: dict) -> int:
        """A fresh slot's device address for ``kernel`` on ``rank`` (``kinds``: the meaning
        of the record's ``kind`` field)."""
        i = len(self.owners)
        if i >= self.SLOTS:
            raise RuntimeError("pkc: out of error mailbox slots")
        self.owners.append((kernel, rank, kinds))
        return self.dev + 32 * i

    def reports(self, clear: bool = False) -> list[str]:
        """One line per slot whose kernel recorded a timeout (host memory only)."""
        from pkc.codegen.abi import describe_record

        out = []
        if not self._flags[:len(self.owners)].any():   # the common case, every call: one scan
            return out
        for i, (kernel, rank, kinds) in enumerate(self.owners):
            rec = list(self.words[8 * i: 8 * i + 8])
            if not rec[0]:
                continue
            out.append(describe_record(kernel, rec, kinds))
            if clear:
                self.words[8 * i] = 0
        return out


_ALL_PEERS: list = []


def describe_timeouts() -> list[str]:
    """Every timeout any pkc kernel of this process reported (host-mapped records: works
    after a trap has taken the CUDA context down)."""
    return [line for P in _ALL_PEERS for line in P.mailbox.reports()]


class Peers:
    """Base: ``world`` ranks, of which ``ranks`` are driven by this process on ``device``.
    ``trap``: kernels trap after reporting an expired wait (the launch fails instead of
    returning outputs a missing peer never wrote)."""

    world: int
    ranks: list[int]
    device: torch.device
    trap: bool = False

    def __init__(self) -> None:
        from pkc.runtime.tma_launch import ensure_context

        ensure_context(self.device)     # driver calls below need the primary context
        self.mailbox = Mailbox()
        _ALL_PEERS.append(self)
        self._sym: dict[object, Symmetric] = {}
        self._local: dict[object, dict[int, torch.Tensor]] = {}
        self.sms = torch.cuda.get_device_properties(self.device).multi_processor_count

    # ---- allocations ---------------------------------------------------------------
    def symmetric(self, key, shape, dtype: torch.dtype, zero: bool = False) -> Symmetric:
        """The persistent symmetric allocation named ``key`` (zeroed once if ``zero``)."""
        hit = self._sym.get(key)
        if hit is None:
            hit = self._sym[key] = self._make_symmetric(tuple(shape), dtype)
            if zero:
                for t in hit.tensors.values():
                    t.zero_()
                self.sync_all()
        elif tuple(next(iter(hit.tensors.values())).shape) != tuple(shape):
            raise ValueError(f"symmetric allocation {key!r} exists with another shape")
        return hit

    def symmetric_holding(self, rank: int, t: torch.Tensor) -> "Symmetric | None":
        """The symmetric allocation whose rank-``rank`` tensor ``t`` lies in (starting at
        the same address: a view of a kernel's symmetric output), or None."""
        p = t.data_ptr()
        for s in self._sym.values():
            own = s.tensors.get(rank)
            if own is not None and own.data_ptr() <= p < own.data_ptr() + own.numel() * own.element_size():
                return s if p == own.data_ptr() else None
        return None

    def local(self, key, shape, dtype: torch.dtype, zero: bool = False) -> dict[int, torch.Tensor]:
        """A persistent per-rank (not symmetric) allocation."""
        hit = self._local.get(key)
        if hit is None:
            hit = self._local[key] = {
                r: (torch.zeros if zero else torch.empty)(tuple(shape), dtype=dtype, device=self.device)
                for r in self.ranks}
        return hit

    def _make_symmetric(self, shape, dtype) -> Symmetric:
        raise NotImplementedError

    # ---- launching -----------------------------------------------------------------
    def stream(self, rank: int) -> int:
        """The CUstream handle (an int) rank ``rank``'s kernels launch on."""
        raise NotImplementedError

    def sms_of(self, rank: int) -> int:
        """SMs rank ``rank``'s kernel may occupy (all of its CTAs must be resident)."""
        return self.sms

    def check_coresident(self, name: str, func, grid: int, threads: int, smem: int,
                         whole_gpu: bool = False) -> None:
        """Every driven rank's ``grid`` CTAs of kernel ``name`` (a CUfunction) must be resident
        at once: their spin-waits wait for each other, so a CTA that cannot start would leave
        its peers waiting until their bounded waits expire. Raise instead where the
        occupancy (CTAs of ``threads`` threads and ``smem`` bytes per SM) times the SMs a
        rank runs on (``whole_gpu``: all of them) cannot hold the grid. (72 ranks on plain
        streams get ``132 // 72 = 1`` SM's worth each.)"""
        from pkc.runtime.driver import call
        from pkc.runtime.errors import CudaDriverError

        try:
            fit = int(call("cuOccupancyMaxActiveBlocksPerMultiprocessor", func, threads, smem))
        except CudaDriverError:     # a kernel the query cannot judge (e.g. a cluster size)
            return
        if fit <= 0:
            return
        for r in self.ranks:
            sms = self.sms if whole_gpu else self.sms_of(r)
            if grid > fit * sms:
                raise RuntimeError(
                    f"kernel {name}: {grid} CTAs per rank cannot all be resident on rank {r}'s "
                    f"{sms} SMs ({fit} CTA(s) of {threads} threads and {smem} B of shared memory "
                    f"per SM; {len(self.ranks)} ranks on this GPU): its waits would time out")

    def begin(self) -> None:
        """Order the ranks' streams after the work queued so far on torch's stream."""

    def end(self) -> None:
        """Order torch's stream after the ranks' streams."""

    def sync_all(self) -> None:
        """Host-side: every rank's allocations and queued work are complete everywhere."""
        torch.cuda.synchronize(self.device)

    def raise_timeouts(self) -> None:
        """Raise PeerTimeoutError if a kernel launched here reported an expired wait (a
        host-memory read: cheap enough for every call; reports launches that finished)."""
        lines = self.mailbox.reports(clear=True)
        if lines:
            from pkc.runtime.errors import PeerTimeoutError

            raise PeerTimeoutError("; ".join(lines) + " (did a rank fail, exit or skip a call?)")


class VirtualPeers(Peers):
    """W ranks on one GPU, rank r's kernels on lane r's stream (own SM partition)."""

    def __init__(self, world: int, device: int | torch.device | None = None, green: bool = True):
        from pkc.runtime.green import lanes

        self.world = world
        self.ranks = list(range(world))
        self.device = torch.device("cuda", torch.cuda.current_device() if device is None
                                   else torch.device(device).index or 0)
        super().__init__()
        self.lanes, self.mode = lanes(world, self.device.index, green)
        from pkc.runtime.driver import new_event

        self._start = new_event()

    def _make_symmetric(self, shape, dtype) -> Symmetric:
        ts = {r: torch.empty(shape, dtype=dtype, device=self.device) for r in self.ranks}
        ptrs = [ts[r].data_ptr() for r in self.ranks]
        return Symmetric(ts, ptrs, torch.tensor(ptrs, dtype=torch.int64, device=self.device))

    def stream(self, rank: int) -> int:
        return int(self.lanes[rank].stream)

    def sms_of(self, rank: int) -> int:
        return self.lanes[rank].sm_count

    def begin(self) -> None:
        from pkc.runtime.driver import call, stream_handle

        torch_stream = stream_handle(torch.cuda.current_stream(self.device))
        call("cuEventRecord", self._start, torch_stream)
        for lane in self.lanes:
            call("cuStreamWaitEvent", lane.stream, self._start, 0)

    def end(self) -> None:
        from pkc.runtime.driver import call, stream_handle

        torch_stream = stream_handle(torch.cuda.current_stream(self.device))
        for lane in self.lanes:
            call("cuEventRecord", lane.done, lane.stream)
            call("cuStreamWaitEvent", torch_stream, lane.done, 0)


class DistributedPeers(Peers):
    """This process is rank ``dist.get_rank(group)`` of a torch.distributed group; kernels
    launch on torch's current stream."""

    def __init__(self, group=None, device: int | torch.device | None = None):
        import torch.distributed as dist
        import torch.distributed._symmetric_memory as symm_mem

        self._symm_mem = symm_mem
        self.group = group or dist.group.WORLD
        self.rank = dist.get_rank(self.group)
        self.world = dist.get_world_size(self.group)
        self.ranks = [self.rank]
        self.device = torch.device("cuda", torch.cuda.current_device() if device is None
                                   else torch.device(device).index or 0)
        import os

        # a peer that never arrives fails the launch (PKC_TRAP_ON_TIMEOUT=0: record only)
        self.trap = os.environ.get("PKC_TRAP_ON_TIMEOUT", "1") != "0"
        super().__init__()
        self._barrier = None

    def _make_symmetric(self, shape, dtype) -> Symmetric:
        t = self._symm_mem.empty(*shape, dtype=dtype, device=self.device)
        h = self._symm_mem.rendezvous(t, self.group.group_name)
        ptrs = [int(p) for p in h.buffer_ptrs]
        if self._barrier is None:
            self._barrier = h
        return Symmetric({self.rank: t}, ptrs,
                         torch.tensor(ptrs, dtype=torch.int64, device=self.device), [h])

    def stream(self, rank: int) -> int:
        return torch.cuda.current_stream(self.device).cuda_stream

    def sync_all(self, timeout_ms: int = 10_000) -> None:
        """Device barrier over the group (bounded), then a host synchronize."""
        if self._barrier is not None:
            self._barrier.barrier(channel=0, timeout_ms=timeout_ms)
        torch.cuda.synchronize(self.device)
