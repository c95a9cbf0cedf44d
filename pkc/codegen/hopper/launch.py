"""Loads and launches pkc's sm_90a GEMM through ``cuda.bindings.driver`` on torch's current
stream.

    g = HopperGemm(GemmConfig(bm=128, bn=256))        # or gemm(a, b) with a config picked
    c = g(a, b)                                        # a [M,K]; b [N,K] ("nk") or [K,N] ("kn")

* modules: ``cuModuleLoadData`` on the PTX (the driver JIT-compiles it; ``cubin=`` loads a
  ptxas output instead), ``cuModuleGetFunction``, ``cuFuncSetAttribute`` for the dynamic
  shared memory; cached in-process by (device, PTX).
* tensor maps: ``cuTensorMapEncodeTiled`` for A, B and C (128-byte swizzle for A and B, the
  epilogue's swizzle for C), passed by value as 128-byte kernel parameters; the packed
  argument block is cached per (pointers, shapes) so that a repeated call only launches.
* launch: ``cuLaunchKernelEx`` with grid = min(#SMs, #tiles) (pairs for ``cluster_m=2``,
  whose cluster shape the PTX fixes with ``.reqnctapercluster``), the config's block and
  shared memory, on ``torch.cuda.current_stream()``.
"""

from __future__ import annotations

import ctypes
import hashlib
from collections import OrderedDict

import torch

from pkc.codegen.hopper.gemm import BK, GemmConfig, emit_gemm_ptx
from pkc.target.gemm_tuning import AUTO_CANDIDATES, choose_config  # noqa: F401

_DTYPES = {torch.bfloat16: "bf16", torch.float16: "f16"}


def _cu():
    from cuda.bindings import driver as cu
    return cu


class CudaDriverError(RuntimeError):
    pass


def _check(result, what: str):
    cu = _cu()
    err = result[0] if isinstance(result, tuple) else result
    if err != cu.CUresult.CUDA_SUCCESS:
        try:
            msg = cu.cuGetErrorString(err)[1]
            msg = msg.decode() if isinstance(msg, bytes) else str(msg)
        except Exception:   # pragma: no cover - only on broken drivers
            msg = "?"
        raise CudaDriverError(f"{what} failed: {err} ({msg})")
    if isinstance(result, tuple):
        return result[1] if len(result) == 2 else result[1:]
    return None


def ensure_context(device: torch.device) -> None:
    """Makes torch's primary context current on this thread (torch creates it lazily).
    Public for the runtime's peers, whose driver calls need it; it stays here with the
    module loading below while the hand kernels' host code in pkc/codegen/hopper uses it
    (that code cannot import pkc/runtime)."""
    cu = _cu()
    torch.cuda.init()
    with torch.cuda.device(device):
        torch.empty(1, device=device)   # forces the runtime to bind the primary context
    _check(cu.cuInit(0), "cuInit")
    ctx = _check(cu.cuCtxGetCurrent(), "cuCtxGetCurrent")
    if int(ctx) == 0:
        dev = _check(cu.cuDeviceGet(device.index or 0), "cuDeviceGet")
        ctx = _check(cu.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
        _check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")


class LoadedKernel:
    """A module and its one entry, with the dynamic shared memory limit raised."""

    def __init__(self, ptx: str | None, name: str, smem_bytes: int, device: torch.device,
                 cubin: bytes | None = None):
        cu = _cu()
        ensure_context(device)
        image = cubin if cubin is not None else ptx.encode() + b"\0"
        self.module = _check(cu.cuModuleLoadData(image), "cuModuleLoadData")
        self.func = _check(cu.cuModuleGetFunction(self.module, name.encode()),
                           f"cuModuleGetFunction({name})")
        _check(cu.cuFuncSetAttribute(
            self.func, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            smem_bytes), "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)")
        self.num_regs = _check(cu.cuFuncGetAttribute(
            cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NUM_REGS, self.func), "cuFuncGetAttribute")
        self.name = name
        self.smem_bytes = smem_bytes


_MODULES: dict[tuple, LoadedKernel] = {}


def load_kernel(ptx: str, name: str, smem_bytes: int, device: torch.device | None = None,
                cubin: bytes | None = None) -> LoadedKernel:
    device = device or torch.device("cuda", torch.cuda.current_device())
    key = (device.index, name, hashlib.sha1(ptx.encode()).hexdigest(), smem_bytes,
           cubin is not None)
    k = _MODULES.get(key)
    if k is None:
        k = _MODULES[key] = LoadedKernel(ptx, name, smem_bytes, device, cubin)
    return k


# ---- tensor maps --------------------------------------------------------------------
def _tmap_dtype(dtype: torch.dtype):
    cu = _cu()
    return {torch.bfloat16: cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
            torch.float16: cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16}[dtype]


def _swizzle(row_bytes: int):
    cu = _cu()
    S = cu.CUtensorMapSwizzle
    return {128: S.CU_TENSOR_MAP_SWIZZLE_128B, 64: S.CU_TENSOR_MAP_SWIZZLE_64B,
            32: S.CU_TENSOR_MAP_SWIZZLE_32B, 0: S.CU_TENSOR_MAP_SWIZZLE_NONE}[row_bytes]


def encode_tensor_map_2d(t: torch.Tensor, box_inner: int, box_outer: int,
                         swizzle_bytes: int) -> bytes:
    """A 2-D tiled tensor map over a contiguous row-major ``t`` (rows x cols): dimension 0
    is the column (contiguous) one. Out-of-bounds loads read zeros; stores are clipped."""
    cu = _cu()
    rows, cols = t.shape
    esize = t.element_size()
    tm = _check(cu.cuTensorMapEncodeTiled(
        _tmap_dtype(t.dtype), 2, t.data_ptr(),
        [cu.cuuint64_t(cols), cu.cuuint64_t(rows)], [cu.cuuint64_t(cols * esize)],
        [cu.cuuint32_t(box_inner), cu.cuuint32_t(box_outer)], [cu.cuuint32_t(1), cu.cuuint32_t(1)],
        cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        _swizzle(swizzle_bytes),
        cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
        f"cuTensorMapEncodeTiled({tuple(t.shape)}, box {box_inner}x{box_outer})")
    return ctypes.string_at(tm.getPtr(), 128)


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
                buf = v
                self._bufs.append(buf)
                ptrs.append(ctypes.addressof(buf))
        self._array = (ctypes.c_void_p * len(ptrs))(*ptrs)

    @property
    def address(self) -> int:
        return ctypes.addressof(self._array)


_CONFIGS: dict = {}


def launch(kernel: LoadedKernel, grid: int, block: int, args: KernelArgs,
           stream: int | None = None) -> None:
    cu = _cu()
    if stream is None:
        stream = torch.cuda.current_stream().cuda_stream
    key = (id(kernel), grid, block, stream)
    cfg = _CONFIGS.get(key)
    if cfg is None:     # built once: the per-call host cost is the launch itself
        cfg = cu.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid, 1, 1
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = block, 1, 1
        cfg.sharedMemBytes = kernel.smem_bytes
        cfg.hStream = cu.CUstream(stream)
        cfg.numAttrs = 0
        if len(_CONFIGS) > 4096:
            _CONFIGS.clear()
        _CONFIGS[key] = cfg
    err, = cu.cuLaunchKernelEx(cfg, kernel.func, args.address, 0)
    if err != cu.CUresult.CUDA_SUCCESS:
        _check((err,), f"cuLaunchKernelEx({kernel.name})")


# ---- the GEMM -----------------------------------------------------------------------
class HopperGemm:
    """One compiled GEMM variant; call it as ``g(a, b, out=None)``."""

    def __init__(self, cfg: GemmConfig, device: torch.device | int | None = None,
                 cubin: bytes | None = None):
        cfg.validate()
        self.cfg = cfg
        if device is None:
            device = torch.cuda.current_device()
        self.device = torch.device("cuda", device) if isinstance(device, int) else device
        self.ptx = emit_gemm_ptx(cfg)
        self.kernel = load_kernel(self.ptx, cfg.kernel_name, cfg.smem_bytes, self.device, cubin)
        self.num_sms = torch.cuda.get_device_properties(self.device).multi_processor_count
        self._args: OrderedDict[tuple, tuple[KernelArgs, int]] = OrderedDict()

    def grid(self, M: int, N: int) -> int:
        c = self.cfg
        num_m = -(-M // c.bm)
        num_n = -(-N // c.bn)
        if c.cluster_m == 1:
            return max(1, min(self.num_sms, num_m * num_n))
        clusters = -(-num_m // c.cluster_m) * num_n
        return c.cluster_m * max(1, min(self.num_sms // c.cluster_m, clusters))

    def _check_operands(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None):
        c = self.cfg
        if a.dtype not in _DTYPES or _DTYPES[a.dtype] != c.dtype:
            raise TypeError(f"A is {a.dtype}; this kernel takes {c.dtype}")
        if b.dtype != a.dtype:
            raise TypeError(f"B is {b.dtype}, A is {a.dtype}")
        if a.dim() != 2 or b.dim() != 2:
            raise ValueError("A and B must be 2-D")
        M, K = a.shape
        if c.b_layout == "nk":
            N, Kb = b.shape
        else:
            Kb, N = b.shape
        if Kb != K:
            raise ValueError(f"K mismatch: A {tuple(a.shape)}, B {tuple(b.shape)} ({c.b_layout})")
        if K % 8 or N % 8:
            raise ValueError(f"K ({K}) and N ({N}) must be multiples of 8 (16-byte TMA rows)")
        for name, t in (("A", a), ("B", b), ("C", out)):
            if t is None:
                continue
            if not t.is_contiguous():
                raise ValueError(f"{name} must be contiguous (row-major)")
            if t.data_ptr() % 16:
                raise ValueError(f"{name} must be 16-byte aligned")
            if t.device != self.device:
                raise ValueError(f"{name} is on {t.device}, kernel on {self.device}")
        if out is not None and (tuple(out.shape) != (M, N) or out.dtype != a.dtype):
            raise ValueError(f"out must be {a.dtype} [{M}, {N}]")
        return M, N, K

    def pack(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> tuple[KernelArgs, int]:
        """The argument block and grid for (a, b, out); cached by pointers and shapes."""
        c = self.cfg
        M, K = a.shape
        N = out.shape[1]
        key = (a.data_ptr(), b.data_ptr(), out.data_ptr(), M, N, K)
        hit = self._args.get(key)
        if hit is not None:
            self._args.move_to_end(key)
            return hit
        tma = encode_tensor_map_2d(a, BK, c.bm, 128)
        if c.b_layout == "nk":
            tmb = encode_tensor_map_2d(b, BK, c.bn // c.cluster_m, 128)
        else:
            tmb = encode_tensor_map_2d(b, 64, BK, 128)
        if c.epilogue == "tma":
            w = c.epi_width
            tmc = encode_tensor_map_2d(out, w, 64, 2 * w)
        else:
            tmc = bytes(128)
        args = KernelArgs([tma, tmb, tmc, ctypes.c_uint64(out.data_ptr()),
                           ctypes.c_uint32(M), ctypes.c_uint32(N), ctypes.c_uint32(K)])
        packed = (args, self.grid(M, N))
        self._args[key] = packed
        if len(self._args) > 64:
            self._args.popitem(last=False)
        return packed

    def __call__(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None
                 ) -> torch.Tensor:
        M, N, K = self._check_operands(a, b, out)
        if out is None:
            out = torch.empty((M, N), dtype=a.dtype, device=a.device)
        if M == 0 or N == 0:
            return out
        if K == 0:
            return out.zero_()
        args, grid = self.pack(a, b, out)
        launch(self.kernel, grid, self.cfg.threads, args)
        return out


_GEMMS: dict[tuple, HopperGemm] = {}


def get_gemm(cfg: GemmConfig, device: torch.device | int | None = None) -> HopperGemm:
    """The compiled kernel of ``cfg`` on ``device``, built once per process."""
    if device is None:
        device = torch.cuda.current_device()
    idx = device if isinstance(device, int) else device.index
    key = (cfg, idx)
    g = _GEMMS.get(key)
    if g is None:
        g = _GEMMS[key] = HopperGemm(cfg, idx)
    return g


def gemm(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None, *,
         b_layout: str = "nk", cfg: GemmConfig | None = None) -> torch.Tensor:
    """C = A @ B on pkc's Hopper GEMM. ``b_layout="nk"``: b is [N, K] (B transposed, an
    nn.Linear weight); ``"kn"``: b is [K, N]."""
    M, K = a.shape
    N = b.shape[0] if b_layout == "nk" else b.shape[1]
    if cfg is None:
        num_sms = torch.cuda.get_device_properties(a.device).multi_processor_count
        cfg = choose_config(M, N, K, _DTYPES[a.dtype], b_layout, num_sms)
    return get_gemm(cfg, a.device)(a, b, out)
