"""Running compiled kernels under ``torch.distributed`` (one process per GPU, ``torchrun``).

Symmetric buffers and signal pads come from ``torch.distributed._symmetric_memory``:
``empty`` + ``rendezvous`` give every rank's address of each (``buffer_ptrs``), which
become the device pointer arrays of the kernel ABI. They are allocated once per
(kernel, buffer) and reused across calls, so a compiled graph's calls are CUDA-graph
friendly. One launch, on torch's current stream:

1. zero signal pads, workspace, error record and ``zero`` allocs; poison the rest;
2. a device-side barrier over the group (``handle.barrier``): every rank's zeroing is
   done before any rank's kernel can signal into it;
3. the kernel, with CTA counts fitted to the GPU's SMs;
4. another barrier, so that no rank re-zeroes (next call) while a peer still writes;
5. the error record is checked: a timeout raises, naming kernel, rank and signal.

NVLink multicast stays off (``TORCH_SYMM_MEM_DISABLE_MULTICAST=1``, set on import of
:mod:`pkc.runtime.driver`). Tested on several GPUs later; on one GPU a 1-rank group runs it.
"""

from __future__ import annotations

import torch

from pkc.codegen.abi import ERROR_WORDS, BufferOrigin
from pkc.codegen.emit import CompiledKernel
from pkc.runtime import driver  # noqa: F401  (sets the no-multicast environment first)
from pkc.runtime import launch as L
from pkc.runtime.driver import attribute, device, stream_handle
from pkc.runtime.errors import PeerTimeoutError, decode_error
from pkc.runtime.world import DEFAULT_TIMEOUT_S, dtype_of, poison_


class DistributedRunner:
    """The general codegen path's kernels under torch.distributed. Its symmetric buffers
    come from the group's :class:`~pkc.runtime.peers.DistributedPeers` (``peers``), which
    the fast kernels use too: one place that allocates and rendezvous."""

    def __init__(self, group=None, device_index: int | None = None):
        import torch.distributed as dist

        from pkc.runtime.peers import DistributedPeers

        self.dist = dist
        self.group = group or dist.group.WORLD
        self.rank = dist.get_rank(self.group)
        self.world = dist.get_world_size(self.group)
        self.device = torch.device("cuda", torch.cuda.current_device() if device_index is None else device_index)
        self.capability = torch.cuda.get_device_capability(self.device)
        self.sms = attribute("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT", device(self.device.index))
        self.peers = DistributedPeers(self.group, self.device)
        self._barrier_handle = self._symmetric(("__barrier__",), [1], torch.int32)[1]

    def _symmetric(self, key, shape, dtype):
        """(this rank's tensor, the rendezvous handle, the device array of all ranks'
        addresses) of the persistent symmetric buffer ``key``."""
        s = self.peers.symmetric(("runner",) + tuple(key), shape, dtype)
        return s.tensors[self.rank], s.keep[0], s.ptrs_dev

    def _scratch(self, key, shape, dtype):
        return self.peers.local(("runner",) + tuple(key), shape, dtype)[self.rank]

    def run(self, ck: CompiledKernel, inputs: list[torch.Tensor],
            timeout_s: float = DEFAULT_TIMEOUT_S) -> list[torch.Tensor]:
        """This rank's inputs -> this rank's outputs (fresh tensors)."""
        meta = ck.meta
        if meta.world != self.world:
            raise ValueError(f"kernel @{meta.name} is compiled for {meta.world} ranks, the group has {self.world}")
        kernel = L.load(ck, self.device.index, self.capability)
        bufs, outputs = [], {}
        for i, b in enumerate(meta.buffers):
            dt = dtype_of(b.dtype)
            key = (ck.ptx, "buf", i)
            if b.origin is BufferOrigin.INPUT:
                t = inputs[b.index].to(self.device, dt).contiguous()
                bufs.append(t.data_ptr())
                continue
            if b.symmetric:
                t, _, ptrs = self._symmetric(key, b.shape, dt)
                bufs.append(ptrs.data_ptr())
            else:
                t = self._scratch(key, b.shape, dt)
                bufs.append(t.data_ptr())
            t.zero_() if b.zero else poison_(t)
            if b.origin is BufferOrigin.OUTPUT:
                outputs[b.index] = t
        sigs = []
        for i, s in enumerate(meta.signals):
            t, _, ptrs = self._symmetric((ck.ptx, "sig", i), [s.count], torch.int32)
            t.zero_()
            sigs.append(ptrs.data_ptr())
        error = self._scratch((ck.ptx, "error"), [ERROR_WORDS], torch.int32).zero_()
        workspace = self._scratch((ck.ptx, "ws"), [meta.workspace_words], torch.int32).zero_()
        ctas = L.fit_ctas(meta, self.sms)
        ps = L.params(meta, bufs, sigs, self.rank, self.world, error.data_ptr(), workspace.data_ptr(),
                      timeout_s, ctas)
        # Bounded: a rank that never arrives (it raised before this kernel) turns into a
        # device-side error here, not a hang.
        bound_ms = max(1, int(timeout_s * 1000))
        self._barrier_handle.barrier(channel=0, timeout_ms=bound_ms)
        kernel.launch(sum(ctas), meta.threads, stream_handle(torch.cuda.current_stream(self.device)), ps)
        self._barrier_handle.barrier(channel=0, timeout_ms=bound_ms)
        try:
            torch.cuda.current_stream(self.device).synchronize()
        except RuntimeError as err:  # the barrier's bound expired: a device-side fault
            raise PeerTimeoutError(
                f"kernel @{meta.name} on rank {self.rank}: the other ranks of the group did not "
                f"reach the launch barrier within {bound_ms} ms (did a rank fail or skip this "
                f"call?); CUDA said: {str(err).splitlines()[0]}") from err
        err = decode_error(meta, self.rank, [x & 0xFFFFFFFF for x in error.cpu().tolist()], timeout_s)
        if err is not None:
            raise err
        return [outputs[i].clone() for i in sorted(outputs)]
