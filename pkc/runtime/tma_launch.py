"""Loading and launching the scheduled (schedule-level) kernels through the CUDA driver:
modules, by-value tensor-map parameters and ``cuLaunchKernelEx`` on a given stream.

* ``load_kernel``: ``cuModuleLoadData`` on the PTX (the driver JIT) or a ptxas cubin,
  ``cuModuleGetFunction``, the dynamic shared-memory limit raised; cached in-process by
  (device, entry, PTX, shared memory). A module loaded in the primary context launches on
  the virtual world's green-context streams too.
* ``encode_tmap`` / ``encode_tensor_map_2d``: ``cuTensorMapEncodeTiled`` (128-byte blobs
  passed by value as kernel parameters; out-of-bounds loads read zeros, stores and
  reductions are clipped).
* ``KernelArgs``: the packed ``void**`` block, built once per binding so that a repeated
  call only launches; ``launch``: ``cuLaunchKernelEx`` with a cached launch config.
* The parameter space (:mod:`pkc.runtime.param_space`): the PTX's declared parameters are
  checked against the driver's limit (4096 or 32764 bytes) before the module loads, the
  packed arguments at each launch, so an oversized launch is an error naming the kernel.
"""

from __future__ import annotations

import ctypes
import hashlib

import torch

from pkc.runtime import param_space
from pkc.runtime.driver import call, cu
from pkc.runtime.errors import CudaDriverError

# fp8 operands are moved as bytes (the MMA reads their type from its instruction)
_TMAP_DTYPES = {"bf16": "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16", "f16": "CU_TENSOR_MAP_DATA_TYPE_FLOAT16",
                "f32": "CU_TENSOR_MAP_DATA_TYPE_FLOAT32", "e4m3": "CU_TENSOR_MAP_DATA_TYPE_UINT8",
                "e5m2": "CU_TENSOR_MAP_DATA_TYPE_UINT8"}
_TORCH_DTYPES = {torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32",
                 torch.float8_e4m3fn: "e4m3", torch.float8_e5m2: "e5m2"}


def ensure_context(device: torch.device) -> None:
    """Makes torch's primary context current on this thread (torch creates it lazily)."""
    torch.cuda.init()
    with torch.cuda.device(device):
        torch.empty(1, device=device)   # forces the runtime to bind the primary context
    ctx = call("cuCtxGetCurrent")
    if int(ctx) == 0:
        dev = call("cuDeviceGet", device.index or 0)
        call("cuCtxSetCurrent", call("cuDevicePrimaryCtxRetain", dev))


class LoadedModule:
    """A module and its one entry, with the dynamic shared memory limit raised."""

    def __init__(self, ptx: str | None, name: str, smem_bytes: int, device: torch.device,
                 cubin: bytes | None = None):
        d = cu()
        ensure_context(device)
        # the parameter space the driver accepts (4096 or 32764 bytes): the PTX's declared
        # parameters before the load, the packed arguments at each launch (one compare)
        self.param_limit = param_space.device_limit(ptx, call("cuDeviceGet", device.index or 0))
        if ptx is not None:
            param_space.check(name, param_space.ptx_param_bytes(ptx, name), self.param_limit)
        image = cubin if cubin is not None else ptx.encode() + b"\0"
        self.module = call("cuModuleLoadData", image)
        self.func = call("cuModuleGetFunction", self.module, name.encode())
        attr = d.CUfunction_attribute
        call("cuFuncSetAttribute", self.func, attr.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
             smem_bytes)
        self.num_regs = call("cuFuncGetAttribute", attr.CU_FUNC_ATTRIBUTE_NUM_REGS, self.func)
        self.name = name
        self.smem_bytes = smem_bytes


_MODULES: dict[tuple, LoadedModule] = {}


def load_kernel(ptx: str, name: str, smem_bytes: int, device: torch.device | None = None,
                cubin: bytes | None = None) -> LoadedModule:
    device = device or torch.device("cuda", torch.cuda.current_device())
    key = (device.index, name, hashlib.sha1(ptx.encode()).hexdigest(), smem_bytes,
           cubin is not None)
    k = _MODULES.get(key)
    if k is None:
        k = _MODULES[key] = LoadedModule(ptx, name, smem_bytes, device, cubin)
    return k


# ---- tensor maps --------------------------------------------------------------------
def _swizzle(row_bytes: int):
    S = cu().CUtensorMapSwizzle
    return {128: S.CU_TENSOR_MAP_SWIZZLE_128B, 64: S.CU_TENSOR_MAP_SWIZZLE_64B,
            32: S.CU_TENSOR_MAP_SWIZZLE_32B, 0: S.CU_TENSOR_MAP_SWIZZLE_NONE}[row_bytes]


def encode_tmap(ptr: int, dtype: str, dims: list[int], strides: list[int], box: list[int],
                swizzle_bytes: int) -> bytes:
    """A tiled tensor map (128 bytes) over ``ptr``: ``dims`` innermost first, ``strides``
    in bytes of dims 1.., ``box`` elements per dim."""
    d = cu()
    n = len(dims)
    tm = call("cuTensorMapEncodeTiled",
              getattr(d.CUtensorMapDataType, _TMAP_DTYPES[dtype]), n, ptr,
              [d.cuuint64_t(x) for x in dims], [d.cuuint64_t(s) for s in strides],
              [d.cuuint32_t(b) for b in box], [d.cuuint32_t(1)] * n,
              d.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, _swizzle(swizzle_bytes),
              d.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
              d.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    return ctypes.string_at(tm.getPtr(), 128)


def encode_tensor_map_2d(t: torch.Tensor, box_inner: int, box_outer: int,
                         swizzle_bytes: int) -> bytes:
    """A 2-D tiled tensor map over a contiguous row-major ``t`` (rows x cols): dimension 0
    is the column (contiguous) one."""
    rows, cols = t.shape
    return encode_tmap(t.data_ptr(), _TORCH_DTYPES[t.dtype], [cols, rows],
                       [cols * t.element_size()], [box_inner, box_outer], swizzle_bytes)


# ---- arguments and launch -----------------------------------------------------------
class KernelArgs:
    """A packed ``void**`` argument block for cuLaunchKernelEx; keeps its buffers alive."""

    def __init__(self, values: list):
        self._bufs = []
        ptrs = []
        for v in values:
            if isinstance(v, bytes):          # by-value blob (a tensor map): 64-byte aligned
                raw = (ctypes.c_ubyte * (len(v) + 64))()
                addr = (ctypes.addressof(raw) + 63) & ~63
                ctypes.memmove(addr, v, len(v))
                self._bufs.append(raw)
                ptrs.append(addr)
            else:
                self._bufs.append(v)
                ptrs.append(ctypes.addressof(v))
        self._array = (ctypes.c_void_p * len(ptrs))(*ptrs)
        self.nbytes = param_space.args_bytes(values)

    @property
    def address(self) -> int:
        return ctypes.addressof(self._array)


_CONFIGS: dict = {}


def launch(kernel: LoadedModule, grid: int, block: int, args: KernelArgs,
           stream: int | None = None) -> None:
    d = cu()
    if args.nbytes > kernel.param_limit[0]:
        param_space.check(kernel.name, args.nbytes, kernel.param_limit)
    if stream is None:
        stream = torch.cuda.current_stream().cuda_stream
    key = (id(kernel), grid, block, stream)
    cfg = _CONFIGS.get(key)
    if cfg is None:     # built once: the per-call host cost is the launch itself
        cfg = d.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid, 1, 1
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = block, 1, 1
        cfg.sharedMemBytes = kernel.smem_bytes
        cfg.hStream = d.CUstream(stream)
        cfg.numAttrs = 0
        if len(_CONFIGS) > 4096:
            _CONFIGS.clear()
        _CONFIGS[key] = cfg
    err, = d.cuLaunchKernelEx(cfg, kernel.func, args.address, 0)
    if err != d.CUresult.CUDA_SUCCESS:
        raise CudaDriverError(f"cuLaunchKernelEx({kernel.name})", int(err), getattr(err, "name", str(err)))
