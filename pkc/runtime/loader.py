"""Loads a kernel image and launches it through the CUDA driver.

Kernels are loaded as context-independent libraries (``cuLibraryLoadData`` +
``cuLibraryGetKernel``): a ``CUkernel`` cast to ``CUfunction`` launches in the context of
the stream it is given, which is what the virtual world needs (each rank's stream lives
in its own green context). Where that is not available the image is loaded with
``cuModuleLoadData`` into the current (primary) context, usable on its streams. The
parameters are checked against the driver's parameter-space limit
(:mod:`pkc.runtime.param_space`) at load and at each launch.
"""

from __future__ import annotations

import ctypes

from pkc.runtime import param_space
from pkc.runtime.driver import call, cu
from pkc.runtime.errors import CudaDriverError


class LoadedKernel:
    def __init__(self, image: bytes, entry: str, smem_bytes: int, dev):
        d = cu()
        self.entry, self.smem_bytes = entry, smem_bytes
        ptx = image.decode(errors="replace") if b".version" in image[:4096] else None
        self.param_limit = param_space.device_limit(ptx, dev)
        if ptx is not None:
            param_space.check(entry, param_space.ptx_param_bytes(ptx, entry), self.param_limit)
        attr = d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        try:
            self.library = call("cuLibraryLoadData", image, None, None, 0, None, None, 0)
            self.kernel = call("cuLibraryGetKernel", self.library, entry.encode())
            if smem_bytes > 48 * 1024:
                call("cuKernelSetAttribute", attr, smem_bytes, self.kernel, dev)
            self.function = d.CUfunction(int(self.kernel))
            self.kind = "library"
        except CudaDriverError as e:
            self.load_error = str(e)
            self.module = call("cuModuleLoadData", image)
            self.function = call("cuModuleGetFunction", self.module, entry.encode())
            if smem_bytes > 48 * 1024:
                call("cuFuncSetAttribute", self.function, attr, smem_bytes)
            self.kind = "module"

    def launch(self, grid: int, block: int, stream, params: list[tuple[str, int]]) -> None:
        """``params``: (PTX type, value) in ABI order; ``stream``: a CUstream."""
        values = [ctypes.c_uint64(v & 0xFFFFFFFFFFFFFFFF) if t == "u64" else ctypes.c_uint32(v & 0xFFFFFFFF)
                  for t, v in params]
        param_space.check(self.entry, param_space.args_bytes(values), self.param_limit)
        ptrs = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
        call("cuLaunchKernel", self.function, grid, 1, 1, block, 1, 1, self.smem_bytes, stream,
             ctypes.addressof(ptrs), 0)

