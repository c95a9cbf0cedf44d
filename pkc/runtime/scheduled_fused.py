"""Loads and launches a scheduled fused GEMM + collective (a ``pk.kernel`` built by
``schedule-fused``) over a :class:`~pkc.runtime.peers.Peers` world.

No choice is made here: the PTX, the tensor maps, the parameters and the grid rule come
from the compiler's :class:`~pkc.codegen.abi.ScheduledKernelMeta` (its ``fused`` part).
This module allocates what the metadata lists (the symmetric output and the signal pad,
persistent on the peers, the pad and the epoch control words zeroed once; the error
records), encodes the tensor maps (a map with ``peer >= 0`` over that rank's copy of the
symmetric output), binds the parameters in the ABI's order and launches every driven rank
on its stream. Epochs make the persistent buffers reusable: a launch needs no allocation,
no barrier and no host synchronization.

The result is where the metadata says: a symmetric output (``sym_outputs``: persistent, the
next launch overwrites it; copy it to keep it), or a fresh output (an output that is not
symmetric: a new tensor per call, or the caller's ``out``). Row-window maps (``rows``) and
maps over the kernel's own allocations (``alloc``: a broadcast's accumulator, a staging
buffer) are encoded over the addresses this module allocated.
"""

from __future__ import annotations

import ctypes

import torch

from pkc.codegen.abi import ScheduledKernelMeta, describe_record
from pkc.runtime.tma_launch import KernelArgs, encode_tmap, launch, load_kernel

_TORCH = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32, "i32": torch.int32,
          # fp8 kernel buffers (their IR names) and tensor maps (PTX's names)
          "f8E4M3FN": torch.float8_e4m3fn, "f8E5M2": torch.float8_e5m2,
          "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
WAIT_SITES = {1: "the peer's data here (its own chunk stored before adding into it; a fresh "
                 "output's staged partial)",
              2: "every peer's contributions to this rank's chunk (exit)"}


def launch_ranks(kernel, grid: int, threads: int, bound: list, peers, world: int) -> None:
    """Launch ``bound`` (``[(rank, KernelArgs)]``): one rank on torch's stream over the whole
    GPU (the grid is sized for it; a virtual world's lane is a green context of fewer SMs),
    several on their lanes' streams, all begun together."""
    if world == 1:
        st = torch.cuda.current_stream(peers.device).cuda_stream
        for _, args in bound:
            launch(kernel, grid, threads, args, st)
        return
    peers.begin()
    for r, args in bound:
        launch(kernel, grid, threads, args, peers.stream(r))
    peers.end()


class ScheduledFusedTimeout(RuntimeError):
    """A fused kernel's bounded wait ran out: names kernel, rank, CTA and peer."""


class ScheduledFused:
    """``run(a, b) -> {rank: output}``: the compiled fused kernel ``ptx`` / ``meta`` over
    ``peers`` (inputs per rank: a dict by rank or a list indexed by rank). ``owner``
    separates the persistent buffers of two kernels of the same name and shape."""

    def __init__(self, ptx: str, meta: ScheduledKernelMeta, peers, owner=None,
                 timeout_ns: int = 2_000_000_000):
        fz = meta.fused
        if fz is None:
            raise ValueError(f"kernel {meta.name} is not a scheduled fused kernel (no fused launch)")
        if fz.world != peers.world:
            raise ValueError(f"{meta.name} is built for {fz.world} ranks, the peers are {peers.world}")
        self.meta, self.fz, self.peers = meta, fz, peers
        self.tdt = _TORCH[fz.dtype]
        self.kernel = load_kernel(ptx, meta.name, meta.smem_bytes, peers.device)
        sms = peers.sms if fz.world == 1 else min(peers.sms_of(r) for r in peers.ranks)
        self.grid = meta.grid(sms)
        if not getattr(meta, "clc", False):    # cluster launch control: CTAs past the SMs wait
            peers.check_coresident(meta.name, self.kernel.func, self.grid, meta.threads,
                                   meta.smem_bytes, whole_gpu=fz.world == 1)
        key = ("scheduled-fused", meta.name, tuple(map(tuple, fz.shapes)), owner)
        self.syms, self.locals = [], []
        self.alloc_ptrs: list[dict[int, int]] = []       # per pk.alloc: rank -> address
        for i, b in enumerate(fz.buffers):
            if b.symmetric:
                sym = peers.symmetric(key + (i,), [b.elements], _TORCH[b.dtype], zero=b.zero)
                self.syms.append(sym)
                self.alloc_ptrs.append(dict(enumerate(sym.ptrs)))
            else:
                loc = peers.local(key + (i,), [b.elements], _TORCH[b.dtype], zero=b.zero)
                self.locals.append(loc)
                self.alloc_ptrs.append({r: t.data_ptr() for r, t in loc.items()})
        self.sym_out = {i: peers.symmetric(key + ("out", i), fz.shapes[i], self._dt(i))
                        for i in fz.sym_outputs}
        self.n_in = fz.inputs if fz.inputs >= 0 else len(fz.shapes) - len(fz.sym_outputs)
        outs = range(self.n_in, len(fz.shapes))
        # per kernel output: persistent (a symmetric output) or fresh per call
        self.persistent = [i in self.sym_out for i in outs]
        self.fresh = [i for i in outs if i not in self.sym_out]
        self.err = peers.local(key + ("err",), [8], torch.int32, zero=True)
        self.mbox = {r: peers.mailbox.slot(meta.name, r, WAIT_SITES) for r in peers.ranks}
        self.timeout_ns = int(timeout_ns)
        self._args: dict = {}

    def _map(self, tm, ptr: int) -> bytes:
        es = _TORCH[tm.element].itemsize
        if getattr(tm, "dims", None):           # a row-major view: [outer, ..., innermost]
            dims = list(reversed(tm.dims))
            strides, acc = [], es
            for d in dims[:-1]:
                acc *= d
                strides.append(acc)
            return encode_tmap(ptr, tm.element, dims, strides, tm.box, tm.swizzle)
        if getattr(tm, "rows", None):           # a window of rows: [first, count, cols]
            first, rows, cols = tm.rows
            ptr += first * cols * es
        else:
            rows, cols = self.fz.shapes[tm.buffer]
        return encode_tmap(ptr, tm.element, [cols, rows], [cols * es], tm.box, tm.swizzle)

    def _map_ptr(self, tm, rank: int, ptrs: list[int]) -> int:
        """The address a map covers: a kernel buffer's (the symmetric output's copy of rank
        ``tm.peer``) or a pk.alloc's (``tm.alloc``: this rank's or ``tm.peer``'s copy)."""
        owner = rank if tm.peer < 0 else tm.peer
        if getattr(tm, "alloc", False):
            return self.alloc_ptrs[tm.buffer][owner]
        if tm.peer >= 0:
            return self.sym_out[tm.buffer].ptrs[tm.peer]
        return ptrs[tm.buffer]

    def _bind(self, rank: int, inputs: list[torch.Tensor], fresh: list[torch.Tensor]) -> KernelArgs:
        key = (rank, *(t.data_ptr() for t in inputs), *(t.data_ptr() for t in fresh))
        hit = self._args.get(key)
        if hit is not None:
            return hit
        for i, t in enumerate(inputs):
            want = tuple(self.fz.shapes[i])
            dt = self._dt(i)
            if tuple(t.shape) != want or t.dtype != dt or not t.is_contiguous() \
                    or t.data_ptr() % 16 or t.device != self.peers.device:
                raise ValueError(f"{self.meta.name}: rank {rank}'s input {i} must be a contiguous, "
                                 f"16-byte aligned {dt} tensor {list(want)} on "
                                 f"{self.peers.device}, got {list(t.shape)} {t.dtype}")
        fresh_of = dict(zip(self.fresh, fresh))
        ptrs = [t.data_ptr() for t in inputs] + [
            self.sym_out[i].ptrs[rank] if i in self.sym_out else fresh_of[i].data_ptr()
            for i in range(self.n_in, len(self.fz.shapes))]
        vals: list = [self._map(tm, self._map_ptr(tm, rank, ptrs)) for tm in self.meta.tmaps]
        u32, u64 = ctypes.c_uint32, ctypes.c_uint64
        vals += [u64(p) for p in ptrs]
        vals += [u64(p) for s in self.syms for p in s.ptrs]
        vals += [u64(p) for i in getattr(self.fz, "peer_outputs", []) for p in self.sym_out[i].ptrs]
        vals += [u64(s.ptrs[rank]) for s in self.syms]
        vals += [u64(loc[rank].data_ptr()) for loc in self.locals]
        vals += [u32(rank), u64(self.err[rank].data_ptr()), u64(self.timeout_ns),
                 u64(self.mbox[rank]), u32(int(self.peers.trap))]
        if len(self._args) >= 64:
            self._args.pop(next(iter(self._args)))
        hit = self._args[key] = KernelArgs(vals)
        return hit

    def _dt(self, i: int) -> torch.dtype:
        """Kernel buffer ``i``'s element type (the first's unless the metadata lists each:
        an fp8 kernel's f32 scales and bf16 output)."""
        return _TORCH[self.fz.dtypes[i]] if getattr(self.fz, "dtypes", None) else self.tdt

    def _fresh(self, rank: int, out) -> list[torch.Tensor]:
        """The fresh outputs of one launch: the caller's ``out`` (checked; a list or tuple
        of them for a kernel with several: one per weight of an all-gather), else new."""
        if out is None:
            return [torch.empty(self.fz.shapes[i], dtype=self._dt(i), device=self.peers.device)
                    for i in self.fresh]
        outs = list(out) if isinstance(out, (list, tuple)) else [out]
        if len(outs) != len(self.fresh):
            raise ValueError(f"{self.meta.name}: {len(outs)} outputs given for a kernel with "
                             f"{len(self.fresh)} fresh outputs")
        for i, o in zip(self.fresh, outs):
            want, odt = tuple(self.fz.shapes[i]), self._dt(i)
            if tuple(o.shape) != want or o.dtype != odt or not o.is_contiguous() \
                    or o.data_ptr() % 16 or o.device != self.peers.device:
                raise ValueError(f"{self.meta.name}: rank {rank}'s out must be a contiguous, "
                                 f"16-byte aligned {odt} tensor {list(want)} on "
                                 f"{self.peers.device}, got {list(o.shape)} {o.dtype}")
        return outs

    def _launch(self, inputs, ranks, out, what: str = "") -> tuple[list[int], dict]:
        """Bind and launch every driven rank on ``inputs`` (each per rank); returns the ranks
        and their fresh outputs (``out[rank]`` where given). ``what``: the inputs' names for
        the error."""
        if len(inputs) != self.n_in:
            raise ValueError(f"{self.meta.name} takes {self.n_in} inputs per rank{what}, "
                             f"got {len(inputs)}")
        todo = list(self.peers.ranks if ranks is None else ranks)
        fresh = {r: self._fresh(r, None if out is None else out[r]) for r in todo}
        bound = [(r, self._bind(r, [x[r] for x in inputs], fresh[r])) for r in todo]
        launch_ranks(self.kernel, self.grid, self.meta.threads, bound, self.peers, self.fz.world)
        return todo, fresh

    def run(self, *inputs, ranks=None, out=None) -> dict:
        """Launch every driven rank (``ranks``: only these, to test a missing peer) on its
        inputs (each argument per rank: a dict by rank or a list indexed by rank). Returns
        ``{rank: output}``: the symmetric output's tensor of the rank (persistent), or a
        fresh output (new per call, or ``out[rank]`` where the caller gives one)."""
        todo, fresh = self._launch(inputs, ranks, out)
        first = self.n_in
        if first in self.sym_out:
            return {r: self.sym_out[first].tensors[r] for r in todo}
        return {r: fresh[r][0] for r in todo}

    def check(self) -> None:
        """Raise :class:`ScheduledFusedTimeout` if a rank recorded an expired wait."""
        for r in self.peers.ranks:
            rec = self.err[r].tolist()
            if rec[0]:
                raise ScheduledFusedTimeout(describe_record(self.meta.name, rec, WAIT_SITES))
