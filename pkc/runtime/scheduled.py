"""Loads and launches a scheduled kernel (a ``pk.kernel`` lowered from the schedule level).

The runtime makes no choice here: the PTX, the grid rule, the threads, the cluster and
the shared memory come from the compiler's :class:`~pkc.codegen.abi.ScheduledKernelMeta`;
this module encodes the tensor maps it lists over the caller's buffers and launches.
"""

from __future__ import annotations

import ctypes
from collections import OrderedDict

import torch

from pkc.codegen.abi import ScheduledKernelMeta
from pkc.runtime.tma_launch import KernelArgs, encode_tensor_map_2d, launch, load_kernel

_TORCH_DTYPE = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32,
                "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


class ScheduledKernel:
    """``k(buffers)`` launches the kernel on ``buffers`` (the kernel's inputs then its
    outputs, contiguous CUDA tensors of the shapes it was compiled for)."""

    def __init__(self, ptx: str, meta: ScheduledKernelMeta, device: torch.device | None = None):
        self.meta = meta
        self.device = device or torch.device("cuda", torch.cuda.current_device())
        self.kernel = load_kernel(ptx, meta.name, meta.smem_bytes, self.device)
        sms = torch.cuda.get_device_properties(self.device).multi_processor_count
        self.grid = meta.grid(sms)
        self._args: OrderedDict[tuple, KernelArgs] = OrderedDict()

    def pack(self, buffers: list[torch.Tensor]) -> KernelArgs:
        key = tuple(t.data_ptr() for t in buffers)
        hit = self._args.get(key)
        if hit is not None:
            return hit
        if len(buffers) != len(self.meta.buffers):
            raise ValueError(f"kernel {self.meta.name} takes {len(self.meta.buffers)} buffers, "
                             f"got {len(buffers)}")
        for i, t in enumerate(buffers):
            if not t.is_contiguous() or t.data_ptr() % 16 or t.device != self.device:
                raise ValueError(f"kernel {self.meta.name}: buffer {i} must be a contiguous, "
                                 f"16-byte aligned tensor on {self.device}")
        values: list = []
        for tm in self.meta.tmaps:
            t = buffers[tm.buffer]
            if t.dtype != _TORCH_DTYPE[tm.element] or t.dim() != 2 or len(tm.box) != 2:
                raise ValueError(f"kernel {self.meta.name}: tensor map over buffer {tm.buffer} "
                                 f"needs a 2-D {tm.element} tensor (got {tuple(t.shape)} {t.dtype})")
            values.append(encode_tensor_map_2d(t, tm.box[0], tm.box[1], tm.swizzle))
        values += [ctypes.c_uint64(t.data_ptr()) for t in buffers]
        args = KernelArgs(values)
        self._args[key] = args
        if len(self._args) > 64:
            self._args.popitem(last=False)
        return args

    def __call__(self, buffers: list[torch.Tensor]) -> None:
        launch(self.kernel, self.grid, self.meta.threads, self.pack(buffers))
