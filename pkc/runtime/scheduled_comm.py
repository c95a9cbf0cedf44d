"""Loads and launches a scheduled collective (a ``pk.kernel`` built by schedule-collectives)
over a :class:`~pkc.runtime.peers.Peers` world.

No choice is made here: the PTX, the parameters and the grid rule come from the compiler's
:class:`~pkc.codegen.abi.ScheduledKernelMeta` (its ``comm`` part). This module allocates
what the metadata lists (persistent symmetric buffers and pads, zeroed once where asked;
the control words; the error records), binds the parameters in the ABI's order and
launches every driven rank on its stream. Epochs make the persistent buffers reusable, so
a launch needs no allocation, no barrier and no host synchronization.

A symmetric *input* (the pull all-gather ``agp``: it reads every rank's chunk where a
producer kernel left it) takes the peers' addresses of the symmetric allocation the
input tensors lie in (:meth:`~pkc.runtime.peers.Peers.symmetric_holding`; in a virtual
world driving every rank, the inputs themselves). :class:`ScheduledPair` runs the GEMM +
all-reduce that schedule-fused makes above W = 2: the fused GEMM + reduce-scatter, then
the pull all-gather of its symmetric output (an executable that runs the two kernels as
two steps, the first's output handed to the second, does the same).
"""

from __future__ import annotations

import ctypes
import itertools

import torch

from pkc.codegen.abi import ScheduledKernelMeta, describe_record
from pkc.runtime.tma_launch import KernelArgs, launch, load_kernel
from pkc.runtime.driver import call

_TORCH = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32, "i32": torch.int32,
          # 1-byte data of the all-gather / all-to-all kinds (moved as bytes)
          "f8E4M3FN": torch.float8_e4m3fn, "f8E5M2": torch.float8_e5m2, "ui8": torch.uint8,
          "i8": torch.int8}
WAIT_SITES = {1: "arrival of the rank's CTA (its data is ready / its kernel started)",
              2: "the rank's results written into this rank (exit)",
              3: "this rank's CTA of the previous group done with its exchange"}


_RUNNERS = itertools.count()


class ScheduledCollectiveTimeout(RuntimeError):
    """A scheduled collective's bounded wait ran out: names kernel, rank, CTA and peer."""


class ScheduledCollective:
    """``run({rank: input}, outs=None) -> {rank: output}`` for the compiled collective
    ``ptx`` / ``meta`` whose kernel buffers are (input, output) of the given shapes."""

    def __init__(self, ptx: str, meta: ScheduledKernelMeta, peers, in_shape, out_shape,
                 dtype: str, timeout_ns: int = 2_000_000_000):
        comm = meta.comm
        if comm is None:
            raise ValueError(f"kernel {meta.name} is not a scheduled collective (no comm launch)")
        if comm.world != peers.world:
            raise ValueError(f"{meta.name} is built for {comm.world} ranks, the peers are {peers.world}")
        if getattr(comm, "multicast", None):
            # an NVLS kernel needs CUDA multicast objects: never made here (the lent machines
            # keep NVLink multicast off, DESIGN.md "Runtime"); it runs in the emulator only
            raise ValueError(f"{meta.name} is an NVLS (multimem) kernel over multicast objects "
                             f"{comm.multicast}: pkc's runtime makes no multicast objects; "
                             "schedule for a target without NVLS (h100, h200) to run it here")
        self.meta, self.comm, self.peers = meta, comm, peers
        self.tdt = _TORCH[dtype]
        self.in_shape, self.out_shape = tuple(in_shape), tuple(out_shape)
        self.kernel = load_kernel(ptx, meta.name, 0, peers.device)
        fit = int(call("cuOccupancyMaxActiveBlocksPerMultiprocessor", self.kernel.func,
                       meta.threads, 0))
        per_sm = min(fit, comm.ctas_per_sm)
        max_ctas = per_sm * min(peers.sms_of(r) for r in peers.ranks)
        self.slice, self.grid, self.threads = comm.launch(max_ctas, meta.threads)
        # a number of its own per runner (an id() is reused once a runner is freed, and the
        # peers keep the allocations: a later runner of another size would find them)
        key = ("scheduled-collective", meta.name, next(_RUNNERS))
        self.syms, self.locals = [], []
        for i, b in enumerate(comm.buffers):
            if b.symmetric:
                self.syms.append(peers.symmetric(key + (i,), [b.elements], _TORCH[b.dtype], zero=b.zero))
            else:
                self.locals.append(peers.local(key + (i,), [b.elements], _TORCH[b.dtype], zero=b.zero))
        # a symmetric output (the direct all-gather's result) is persistent, like the hand
        # kernel's: the next launch overwrites it; a symmetric input (index 0) is a producer's
        self.sym_in = 0 in comm.sym_outputs
        self.sym_out = {i: peers.symmetric(key + ("out", i), list(self.out_shape), self.tdt)
                        for i in comm.sym_outputs if i > 0}
        self.err = peers.local(key + ("err",), [8], torch.int32, zero=True)
        self.mbox = {r: peers.mailbox.slot(meta.name, r, WAIT_SITES) for r in peers.ranks}
        self.timeout_ns = int(timeout_ns)
        self._args: dict = {}

    @property
    def fresh_output(self) -> bool:
        return not self.sym_out

    def _bind(self, rank: int, src: torch.Tensor, out: torch.Tensor,
              src_peers: tuple[int, ...] = ()) -> KernelArgs:
        key = (rank, src.data_ptr(), out.data_ptr(), src_peers)
        hit = self._args.get(key)
        if hit is not None:
            return hit
        u32, u64 = ctypes.c_uint32, ctypes.c_uint64
        vals = [u64(src.data_ptr()), u64(out.data_ptr())]
        peers_of = [s.ptrs for s in self.syms] + [
            list(src_peers) if i == 0 else self.sym_out[i].ptrs for i in self.comm.sym_outputs]
        vals += [u64(p) for ptrs in peers_of for p in ptrs]
        vals += [u64(s.ptrs[rank]) for s in self.syms]
        vals += [u64(loc[rank].data_ptr()) for loc in self.locals]
        vals += [u32(self.comm.vecs), u32(self.comm.chunk_vecs), u32(self.slice), u32(rank), u64(self.err[rank].data_ptr()), u64(self.timeout_ns),
                 u64(self.mbox[rank]), u32(int(self.peers.trap))]
        if len(self._args) >= 64:
            self._args.pop(next(iter(self._args)))
        hit = self._args[key] = KernelArgs(vals)
        return hit

    def run(self, inputs: dict, outs: dict | None = None, ranks=None) -> dict:
        """Launch every driven rank (``ranks``: only these, to test a missing peer);
        ``outs[rank]``: where a fresh output goes (default a new tensor per rank). Returns
        ``{rank: output}``."""
        todo = list(self.peers.ranks if ranks is None else ranks)
        src_peers = self._source(inputs, todo) if self.sym_in else ()
        self.peers.begin()
        res = {}
        for r in todo:
            x = inputs[r]
            if x.dtype != self.tdt or x.numel() != _numel(self.in_shape) or not x.is_contiguous() \
                    or x.data_ptr() % 16:
                raise ValueError(f"{self.meta.name}: rank {r}'s input must be a contiguous, 16-byte "
                                 f"aligned {self.tdt} tensor of {_numel(self.in_shape)} elements")
            if self.sym_out:
                o = next(iter(self.sym_out.values())).tensors[r]
            elif outs is not None:
                o = outs[r]
            else:
                o = torch.empty(self.out_shape, dtype=self.tdt, device=self.peers.device)
            res[r] = o
            launch(self.kernel, self.grid, self.threads, self._bind(r, x, o, src_peers),
                   self.peers.stream(r))
        self.peers.end()
        return res

    def _source(self, inputs: dict, ranks: list[int]) -> tuple[int, ...]:
        """The W addresses of the symmetric allocation the inputs lie in (each driven rank's
        input must be its own copy), or, in a world driven entirely here, the inputs'."""
        W = self.comm.world
        r0 = ranks[0]
        sym = self.peers.symmetric_holding(r0, inputs[r0])
        if sym is not None:
            bad = [r for r in ranks if inputs[r].data_ptr() != sym.ptrs[r]]
            if not bad:
                return tuple(sym.ptrs)
        elif sorted(inputs) == list(range(W)) and sorted(self.peers.ranks) == list(range(W)):
            return tuple(inputs[r].data_ptr() for r in range(W))
        raise ValueError(f"{self.meta.name}: its input is read by the peers, so it must be every "
                         f"rank's copy of one symmetric allocation (a kernel's symmetric output); "
                         f"rank {r0}'s input is not")

    def check(self) -> None:
        """Raise :class:`ScheduledCollectiveTimeout` if a rank recorded an expired wait."""
        for r in self.peers.ranks:
            rec = self.err[r].tolist()
            if rec[0]:
                raise ScheduledCollectiveTimeout(describe_record(self.meta.name, rec, WAIT_SITES))


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


class ScheduledPair:
    """The two kernels schedule-fused makes of a GEMM + all-reduce above W = 2
    (``pk.plan.pair = "mm_all_reduce"``): ``run(a, b) -> {rank: [M, N] result}`` launches
    the fused GEMM + reduce-scatter (``rs``: its ``pk.kernel`` ``rs_op`` and compiled
    kernel ``rs_ck``), then the pull all-gather (``ag_op`` / ``ag_ck``) of the reduced
    chunks it left in its symmetric output, into a fresh output (``outs[rank]`` or new
    tensors). Nothing is chosen here: the compiler made both kernels."""

    def __init__(self, rs_op, rs_ck, ag_op, ag_ck, peers, owner=None,
                 timeout_ns: int = 2_000_000_000):
        from pkc.runtime.scheduled_fused import ScheduledFused

        x, y = ag_op.inputs[0].type, ag_op.results[0].type
        dtype = str(x.element_type)
        if dtype not in ("bf16", "f16") or ag_op.inputs[0] is not rs_op.results[0]:
            raise ValueError(f"kernels @{rs_op.kernel_name.data} and @{ag_op.kernel_name.data} "
                             "are not a GEMM + reduce-scatter and the pull all-gather of its result")
        self.rs = ScheduledFused(rs_ck.ptx, rs_ck.meta, peers, owner=owner, timeout_ns=timeout_ns)
        self.ag = ScheduledCollective(ag_ck.ptx, ag_ck.meta, peers, x.get_shape(), y.get_shape(),
                                      dtype, timeout_ns=timeout_ns)

    def run(self, a, b, outs: dict | None = None, ranks=None) -> dict:
        chunks = self.rs.run(a, b, ranks=ranks)
        return self.ag.run(chunks, outs=outs, ranks=ranks)

    def check(self) -> None:
        self.rs.check()
        self.ag.check()
