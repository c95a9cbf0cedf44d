"""Thin, checked access to ``cuda.bindings.driver`` (cuda-python).

Every driver call returns ``(CUresult, values...)``; :func:`call` raises
:class:`~pkc.runtime.errors.CudaDriverError` on failure and returns the values. The
import is lazy so that pkc imports (and CI runs) without cuda-bindings or a GPU.
"""

from __future__ import annotations

import os
from functools import lru_cache

from pkc.runtime.errors import CudaDriverError, RuntimeUnavailable

# Never NVLink multicast / NVLS on shared machines (DESIGN.md, Runtime).
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")


@lru_cache(maxsize=1)
def cu():
    try:
        from cuda.bindings import driver
    except ImportError as e:  # pragma: no cover - depends on the machine
        raise RuntimeUnavailable("cuda-bindings is not installed (pip install 'pkc[cuda]')") from e
    err, = driver.cuInit(0)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeUnavailable(f"cuInit failed: {err}")
    return driver


def call(fn_name: str, *args):
    d = cu()
    out = getattr(d, fn_name)(*args)
    err, rest = out[0], out[1:]
    if err != d.CUresult.CUDA_SUCCESS:
        _, name = d.cuGetErrorName(err)
        raise CudaDriverError(fn_name, int(err), name.decode() if isinstance(name, bytes) else str(name))
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest


def device(ordinal: int):
    return call("cuDeviceGet", ordinal)


def attribute(name: str, dev) -> int:
    return call("cuDeviceGetAttribute", getattr(cu().CUdevice_attribute, name), dev)


def stream_handle(torch_stream):
    """A CUstream for a torch stream."""
    return cu().CUstream(int(torch_stream.cuda_stream))


def new_event(ctx=None):
    """An event without timing, created in ``ctx`` (a CUcontext) when given."""
    d = cu()
    if ctx is not None:
        call("cuCtxPushCurrent", ctx)
    try:
        return call("cuEventCreate", int(d.CUevent_flags.CU_EVENT_DISABLE_TIMING))
    finally:
        if ctx is not None:
            call("cuCtxPopCurrent")
