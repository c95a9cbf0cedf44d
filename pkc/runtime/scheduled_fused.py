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

The result of a GEMM + reduce-scatter is each rank's reduced chunk in the symmetric output
(persistent: the next launch overwrites it; copy it to keep it).
"""

from __future__ import annotations

import ctypes

import torch

from pkc.codegen.abi import ScheduledKernelMeta
from pkc.codegen.hopper.fused import encode_tmap
from pkc.codegen.hopper.launch import KernelArgs, launch, load_kernel

_TORCH = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32, "i32": torch.int32}
ERR_FIELDS = ("flag", "kind", "rank", "peer", "seen", "wanted", "cta", "epoch")
WAIT_SITES = {1: "the owner's own chunk stored (before adding into it)",
              2: "every peer's contributions to this rank's chunk (exit)"}


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
        key = ("scheduled-fused", meta.name, tuple(map(tuple, fz.shapes)), owner)
        self.syms, self.locals = [], []
        for i, b in enumerate(fz.buffers):
            if b.symmetric:
                self.syms.append(peers.symmetric(key + (i,), [b.elements], _TORCH[b.dtype], zero=b.zero))
            else:
                self.locals.append(peers.local(key + (i,), [b.elements], _TORCH[b.dtype], zero=b.zero))
        self.sym_out = {i: peers.symmetric(key + ("out", i), fz.shapes[i], self.tdt)
                        for i in fz.sym_outputs}
        self.n_in = len(fz.shapes) - len(fz.sym_outputs)
        self.err = peers.local(key + ("err",), [8], torch.int32, zero=True)
        self.mbox = {r: peers.mailbox.slot(meta.name, r, WAIT_SITES) for r in peers.ranks}
        self.timeout_ns = int(timeout_ns)
        self._args: dict = {}

    def _map(self, tm, ptr: int) -> bytes:
        shape = self.fz.shapes[tm.buffer]
        es = self.tdt.itemsize
        rows, cols = shape
        return encode_tmap(ptr, tm.element, [cols, rows], [cols * es], tm.box, tm.swizzle)

    def _bind(self, rank: int, inputs: list[torch.Tensor]) -> KernelArgs:
        key = (rank, *(t.data_ptr() for t in inputs))
        hit = self._args.get(key)
        if hit is not None:
            return hit
        for i, t in enumerate(inputs):
            want = tuple(self.fz.shapes[i])
            if tuple(t.shape) != want or t.dtype != self.tdt or not t.is_contiguous() \
                    or t.data_ptr() % 16 or t.device != self.peers.device:
                raise ValueError(f"{self.meta.name}: rank {rank}'s input {i} must be a contiguous, "
                                 f"16-byte aligned {self.tdt} tensor {list(want)} on "
                                 f"{self.peers.device}, got {list(t.shape)} {t.dtype}")
        ptrs = [t.data_ptr() for t in inputs] + [self.sym_out[i].ptrs[rank] for i in self.fz.sym_outputs]
        vals: list = []
        for tm in self.meta.tmaps:
            if tm.peer >= 0:
                vals.append(self._map(tm, self.sym_out[tm.buffer].ptrs[tm.peer]))
            else:
                vals.append(self._map(tm, ptrs[tm.buffer]))
        u32, u64 = ctypes.c_uint32, ctypes.c_uint64
        vals += [u64(p) for p in ptrs]
        vals += [u64(p) for s in self.syms for p in s.ptrs]
        vals += [u64(s.ptrs[rank]) for s in self.syms]
        vals += [u64(loc[rank].data_ptr()) for loc in self.locals]
        vals += [u32(rank), u64(self.err[rank].data_ptr()), u64(self.timeout_ns),
                 u64(self.mbox[rank]), u32(int(self.peers.trap))]
        if len(self._args) >= 64:
            self._args.pop(next(iter(self._args)))
        hit = self._args[key] = KernelArgs(vals)
        return hit

    def run(self, *inputs, ranks=None) -> dict:
        """Launch every driven rank (``ranks``: only these, to test a missing peer) on its
        inputs (each argument per rank: a dict by rank or a list indexed by rank). Returns
        ``{rank: output}`` (the symmetric output's tensor of the rank)."""
        if len(inputs) != self.n_in:
            raise ValueError(f"{self.meta.name} takes {self.n_in} inputs per rank, got {len(inputs)}")
        todo = list(self.peers.ranks if ranks is None else ranks)
        bound = [(r, self._bind(r, [x[r] for x in inputs])) for r in todo]
        self.peers.begin()
        for r, args in bound:
            launch(self.kernel, self.grid, self.meta.threads, args, self.peers.stream(r))
        self.peers.end()
        out = self.sym_out[self.fz.sym_outputs[0]]
        return {r: out.tensors[r] for r in todo}

    def check(self) -> None:
        """Raise :class:`ScheduledFusedTimeout` if a rank recorded an expired wait."""
        for r in self.peers.ranks:
            rec = self.err[r].tolist()
            if rec[0]:
                d = dict(zip(ERR_FIELDS, rec))
                raise ScheduledFusedTimeout(
                    f"kernel {self.meta.name}: rank {d['rank']} (CTA {d['cta']}, epoch "
                    f"{d['epoch']}) timed out waiting for rank {d['peer']}: "
                    f"{WAIT_SITES.get(d['kind'], d['kind'])}; its signal was {d['seen']}, "
                    f"wanted {d['wanted']}")
