"""Loads and launches the scheduled MoE kernel (all-to-all dispatch + grouped GEMM +
all-to-all combine, built by ``schedule-moe``) over a :class:`~pkc.runtime.peers.Peers`
world.

No choice is made here: the PTX, the tensor maps, the parameters and the grid rule come
from the compiler's :class:`~pkc.codegen.abi.ScheduledKernelMeta` (its ``fused`` part,
kind ``moe``). This module allocates what the metadata lists (the symmetric result and
expert operand, persistent on the peers; the signal pad and count array, zeroed once; the
epoch control word; the error record), encodes the tensor maps (a map with ``peer >= 0``
over that rank's copy of the symmetric result), binds the parameters in the ABI's order
and launches every driven rank on its stream. Epochs make the persistent buffers
reusable: a launch needs no allocation, no barrier and no host synchronization.

Inputs per rank: the tokens ``[W*E*C, K]`` (block (q, e): rows for expert e of rank q),
the stacked expert weights ``[E*N, K]`` and the valid rows per block ``[W*E]`` int32 (a
device tensor, read by the kernel; a count above C is clipped to C). The result of rank r
is its ``[W*E, C, N]`` symmetric output: rows ``[0, counts[b])`` of block b are the
expert's output for those tokens; the rows after them are not part of the result. It is
persistent: the next launch overwrites it (copy it to keep it).
"""

from __future__ import annotations

import ctypes

import torch

from pkc.codegen.abi import FusedLaunchKind, ScheduledKernelMeta, describe_record
from pkc.runtime.tma_launch import KernelArgs, encode_tmap, load_kernel
from pkc.runtime.scheduled_fused import launch_ranks

_TORCH = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32, "i32": torch.int32}
WAIT_SITES = {1: "the source's counts / tokens of a block (dispatch)",
              2: "every rank's results written into this rank (combine)"}


class ScheduledMoeTimeout(RuntimeError):
    """A bounded wait of the MoE kernel ran out: names kernel, rank, CTA and peer."""


class ScheduledMoe:
    """``run(x, w, counts) -> {rank: output}``: the compiled MoE kernel ``ptx`` / ``meta``
    over ``peers`` (each argument per rank: a dict by rank or a list indexed by rank)."""

    def __init__(self, ptx: str, meta: ScheduledKernelMeta, peers, owner=None,
                 timeout_ns: int = 2_000_000_000):
        fz = meta.fused
        if fz is None or fz.kind is not FusedLaunchKind.MOE:
            raise ValueError(f"kernel {meta.name} is not a scheduled MoE kernel")
        if fz.world != peers.world:
            raise ValueError(f"{meta.name} is built for {fz.world} ranks, the peers are {peers.world}")
        self.meta, self.fz, self.peers = meta, fz, peers
        self.tdt = _TORCH[fz.dtype]
        self.kernel = load_kernel(ptx, meta.name, meta.smem_bytes, peers.device)
        # W > 1: the SMs of the ranks' partitions (a green context may hold fewer than the
        # GPU): the kernel's CTAs wait on each other's dispatch, so all must be resident.
        # One rank: no waits; torch's stream over the whole GPU (as ScheduledFused)
        self.grid = meta.grid(peers.sms if fz.world == 1 else
                              min(peers.sms_of(r) for r in peers.ranks))
        key = ("scheduled-moe", meta.name, tuple(map(tuple, fz.shapes)), owner)
        self.syms, self.locals = [], []
        for i, b in enumerate(fz.buffers):
            if b.symmetric:
                self.syms.append(peers.symmetric(key + (i,), [b.elements], _TORCH[b.dtype], zero=b.zero))
            else:
                self.locals.append(peers.local(key + (i,), [b.elements], _TORCH[b.dtype], zero=b.zero))
        self.sym_out = {i: peers.symmetric(key + ("out", i), fz.shapes[i], self.tdt)
                        for i in fz.sym_outputs}
        self.n_in = fz.inputs
        self.in_dtypes = [self.tdt, self.tdt, torch.int32]
        self.err = peers.local(key + ("err",), [8], torch.int32, zero=True)
        self.mbox = {r: peers.mailbox.slot(meta.name, r, WAIT_SITES) for r in peers.ranks}
        self.timeout_ns = int(timeout_ns)
        self._args: dict = {}

    def _map(self, tm, ptr: int) -> bytes:
        """A map over the buffer's shape, or (``tm.dims``) over a row-major view of it."""
        shape = tm.dims or self.fz.shapes[tm.buffer]
        es = self.tdt.itemsize
        dims = list(reversed(shape))
        strides, acc = [], es
        for d in dims[:-1]:
            acc *= d
            strides.append(acc)
        return encode_tmap(ptr, tm.element, dims, strides, tm.box, tm.swizzle)

    def _bind(self, rank: int, inputs: list[torch.Tensor]) -> KernelArgs:
        key = (rank, *(t.data_ptr() for t in inputs))
        hit = self._args.get(key)
        if hit is not None:
            return hit
        for i, t in enumerate(inputs):
            want = tuple(self.fz.shapes[i])
            if tuple(t.shape) != want or t.dtype != self.in_dtypes[i] or not t.is_contiguous() \
                    or t.data_ptr() % 16 or t.device != self.peers.device:
                raise ValueError(f"{self.meta.name}: rank {rank}'s input {i} must be a contiguous, "
                                 f"16-byte aligned {self.in_dtypes[i]} tensor {list(want)} on "
                                 f"{self.peers.device}, got {list(t.shape)} {t.dtype} on {t.device}")
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
        vals += [u64(p) for i in self.fz.peer_outputs for p in self.sym_out[i].ptrs]
        vals += [u64(s.ptrs[rank]) for s in self.syms]
        vals += [u64(loc[rank].data_ptr()) for loc in self.locals]
        vals += [u32(rank), u64(self.err[rank].data_ptr()), u64(self.timeout_ns),
                 u64(self.mbox[rank]), u32(int(self.peers.trap))]
        if len(self._args) >= 64:
            self._args.pop(next(iter(self._args)))
        hit = self._args[key] = KernelArgs(vals)
        return hit

    def run(self, *inputs, ranks=None) -> dict:
        """Launch every driven rank (``ranks``: only these) on its inputs (tokens, weights,
        counts; each per rank). Returns ``{rank: [W*E, C, N] output}`` (symmetric,
        persistent)."""
        if len(inputs) != self.n_in:
            raise ValueError(f"{self.meta.name} takes {self.n_in} inputs per rank (tokens, "
                             f"weights, counts), got {len(inputs)}")
        todo = list(self.peers.ranks if ranks is None else ranks)
        bound = [(r, self._bind(r, [x[r] for x in inputs])) for r in todo]
        launch_ranks(self.kernel, self.grid, self.meta.threads, bound, self.peers, self.fz.world)
        out = self.sym_out[self.fz.sym_outputs[0]]
        return {r: out.tensors[r] for r in todo}

    def check(self) -> None:
        """Raise :class:`ScheduledMoeTimeout` if a rank recorded an expired wait."""
        for r in self.peers.ranks:
            rec = self.err[r].tolist()
            if rec[0]:
                raise ScheduledMoeTimeout(describe_record(self.meta.name, rec, WAIT_SITES))


def moe_step(op, ck, peers, timeout_ns: int):
    """The executable's step (:class:`pkc.runtime.scheduled_step.ScheduledStep`) of a
    compiled MoE kernel ``ck`` of ``op``: inputs (tokens, weights, counts) per rank ->
    (the result[, the expert operand with W > 1]), in the kernel's persistent symmetric
    buffers."""
    from pkc.runtime.scheduled_step import ScheduledStep, StepKind

    moe = ScheduledMoe(ck.ptx, ck.meta, peers, owner=id(op), timeout_ns=timeout_ns)
    extra = moe.fz.sym_outputs[1:]          # the expert operand (W > 1)

    def run(vals):
        outs = moe.run(*[{r: v[i].contiguous() for r, v in vals.items()} for i in range(moe.n_in)],
                       ranks=list(vals))
        return {r: [outs[r], *[moe.sym_out[i].tensors[r] for i in extra]] for r in outs}
    return ScheduledStep(run, [True] * (1 + len(extra)), StepKind.MOE)


__all__ = ["ScheduledMoe", "ScheduledMoeTimeout", "moe_step"]
