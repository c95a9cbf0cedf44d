"""The kernel-parameter space a launch needs, checked against what the driver accepts
before the launch (issue 17: a fused GEMM + reduce-scatter at W = 72 passes 74 tensor maps
and ~80 pointers, about 10 KB, by value).

The limit: 4096 bytes of parameters per launch, raised to 32764 bytes by CUDA 12.1 for
devices of compute capability 7.0 and up when the kernel's PTX declares it (PTX ISA 8.1
or later: ptxas then lays out the larger parameter space) and the driver is 12.1 or
later. Past the limit the driver's launch fails with an unspecific error (or the PTX
does not load), so :func:`check` raises :class:`KernelParamsTooLarge` first, naming the
kernel, its parameter bytes and the limit with the reason for it.

Nothing here needs a GPU: the layout is read from the PTX text (or from the packed
argument values), the limit from three numbers (tests/unit/test_param_space.py)."""

from __future__ import annotations

import re

OLD_LIMIT = 4096          # bytes: before CUDA 12.1, or PTX ISA < 8.1, or sm < 7.0
LARGE_LIMIT = 32764       # bytes: CUDA 12.1+, PTX ISA 8.1+, sm_70+
LARGE_PTX = (8, 1)
LARGE_DRIVER = 12010      # cuDriverGetVersion of CUDA 12.1
LARGE_CAPABILITY = (7, 0)

_SIZES = {"u8": 1, "s8": 1, "b8": 1, "u16": 2, "s16": 2, "b16": 2, "f16": 2,
          "u32": 4, "s32": 4, "b32": 4, "f32": 4, "u64": 8, "s64": 8, "b64": 8, "f64": 8}
_PARAM = re.compile(r"\.param\s+(?:\.align\s+(\d+)\s+)?\.(\w+)\s+[\w$%]+(?:\[(\d+)\])?")


class KernelParamsTooLarge(ValueError):
    """A kernel's parameters exceed what a launch may pass (named kernel, bytes, limit)."""

    def __init__(self, kernel: str, nbytes: int, limit: int, why: str):
        super().__init__(
            f"kernel {kernel}: its parameters take {nbytes} bytes, more than the {limit} "
            f"bytes a launch may pass ({why}); pass the per-peer values through a device "
            "array instead, or run on a driver / PTX version with the larger limit")
        self.kernel, self.nbytes, self.limit = kernel, nbytes, limit


def ptx_version(ptx: str) -> tuple[int, int]:
    m = re.search(r"^\s*\.version\s+(\d+)\.(\d+)", ptx, re.M)
    if m is None:
        raise ValueError("PTX text without a .version directive")
    return int(m.group(1)), int(m.group(2))


def ptx_param_bytes(ptx: str, entry: str) -> int:
    """Bytes of the parameter space of ``.entry entry(...)`` in ``ptx``: each parameter
    at its alignment (the element size, or ``.align N``), in declaration order."""
    m = re.search(r"\.entry\s+" + re.escape(entry) + r"\s*\((.*?)\)", ptx, re.S)
    if m is None:
        raise ValueError(f"no .entry {entry} in the PTX")
    off = 0
    for align, ty, count in _PARAM.findall(m.group(1)):
        if ty not in _SIZES:
            raise ValueError(f".entry {entry}: parameter type .{ty} is not known here")
        size = _SIZES[ty] * (int(count) if count else 1)
        a = int(align) if align else _SIZES[ty]
        off = -(-off // a) * a + size
    return off


def args_bytes(values) -> int:
    """Bytes of a packed argument list (ctypes scalars, or bytes: a by-value blob such as a
    tensor map, 64-byte aligned), laid out as :func:`ptx_param_bytes` lays out the PTX."""
    import ctypes

    off = 0
    for v in values:
        if isinstance(v, (bytes, bytearray)):
            size, a = len(v), 64
        else:
            size = a = ctypes.sizeof(v)
        off = -(-off // a) * a + size
    return off


def limit(ptx_ver: tuple[int, int] | None, capability: tuple[int, int], driver: int) -> tuple[int, str]:
    """(bytes a launch may pass, why) for a kernel of PTX ISA ``ptx_ver`` (None: a cubin
    whose PTX is unknown: the old limit) on a device of ``capability`` under a driver of
    version ``driver`` (cuDriverGetVersion: 12010 is CUDA 12.1)."""
    if tuple(capability) < LARGE_CAPABILITY:
        return OLD_LIMIT, f"compute capability {capability[0]}.{capability[1]} < 7.0"
    if driver < LARGE_DRIVER:
        return OLD_LIMIT, f"driver {driver // 1000}.{driver % 1000 // 10} < 12.1"
    if ptx_ver is None:
        return OLD_LIMIT, "a cubin whose PTX version is unknown"
    if tuple(ptx_ver) < LARGE_PTX:
        return OLD_LIMIT, f"PTX ISA {ptx_ver[0]}.{ptx_ver[1]} < 8.1"
    return LARGE_LIMIT, (f"CUDA 12.1+ limit: driver {driver // 1000}.{driver % 1000 // 10}, "
                         f"PTX ISA {ptx_ver[0]}.{ptx_ver[1]}, sm_{capability[0]}{capability[1]}")


def check(kernel: str, nbytes: int, lim: tuple[int, str]) -> None:
    """Raise :class:`KernelParamsTooLarge` if ``nbytes`` exceed the limit ``lim``."""
    if nbytes > lim[0]:
        raise KernelParamsTooLarge(kernel, nbytes, lim[0], lim[1])


def device_limit(ptx: str | None, dev) -> tuple[int, str]:
    """The limit for ``ptx`` (None: a cubin) on the CUdevice ``dev`` under this driver."""
    from pkc.runtime.driver import attribute, call

    cap = (attribute("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR", dev),
           attribute("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR", dev))
    return limit(None if ptx is None else ptx_version(ptx), cap, int(call("cuDriverGetVersion")))
