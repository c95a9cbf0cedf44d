"""The kernel-parameter space check (pkc/runtime/param_space.py, issue 17): the layout of
a kernel's parameters read from its PTX and from packed arguments, the driver's limit
(4096 bytes, 32764 bytes from CUDA 12.1 with PTX ISA 8.1+ on sm_70+), and an error naming
the kernel and the size before a launch that would fail. The W = 72 fused GEMM +
reduce-scatter (74 tensor maps by value) is the kernel that needs the larger limit."""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import pytest

from pkc.runtime import param_space as ps

sys.path.insert(0, str(Path(__file__).resolve().parent))

PTX = """.version 8.7
.target sm_90a
.address_size 64

.visible .entry k(
  .param .u32 n,
  .param .align 64 .b8 tmap0[128],
  .param .u64 p,
  .param .u32 rank
) .maxntid 128, 1, 1
{
  ret;
}
"""


def test_layout_of_the_ptx_parameters():
    # n at 0 (4 bytes), the map aligned to 64 (64..192), p at 192 (8), rank at 200 (4)
    assert ps.ptx_param_bytes(PTX, "k") == 204
    assert ps.ptx_version(PTX) == (8, 7)
    with pytest.raises(ValueError, match="no .entry other"):
        ps.ptx_param_bytes(PTX, "other")


def test_packed_arguments_lay_out_as_the_ptx_declares():
    vals = [ctypes.c_uint32(1), bytes(128), ctypes.c_uint64(2), ctypes.c_uint32(3)]
    assert ps.args_bytes(vals) == ps.ptx_param_bytes(PTX, "k") == 204


@pytest.mark.parametrize("ptx_ver,cap,driver,want", [
    ((8, 7), (9, 0), 12080, ps.LARGE_LIMIT),      # the H200 machines: 580 driver, PTX 8.7
    ((8, 1), (7, 0), 12010, ps.LARGE_LIMIT),      # the first combination with 32764
    ((8, 0), (9, 0), 12080, ps.OLD_LIMIT),        # PTX before 8.1
    ((8, 7), (9, 0), 12000, ps.OLD_LIMIT),        # driver 12.0
    ((8, 7), (6, 1), 12080, ps.OLD_LIMIT),        # pre-Volta
    (None, (9, 0), 12080, ps.OLD_LIMIT),          # a cubin of unknown PTX version
])
def test_limit(ptx_ver, cap, driver, want):
    got, why = ps.limit(ptx_ver, cap, driver)
    assert got == want and why


def test_w72_fused_rs_needs_the_large_limit_and_is_refused_below_it():
    """The W = 72 fused GEMM + reduce-scatter: ~10 KB of parameters (74 tensor maps of
    128 bytes, 72 peer pointers of the pad, ...). Under the 32764-byte limit it passes;
    under 4096 (an older driver) the check raises naming the kernel and its size."""
    from test_world72 import _fused_rs_scheduled

    from pkc.codegen import compile_kernel

    _, kop = _fused_rs_scheduled(72, 3, 256, 256)
    ck = compile_kernel(kop, "sm_90a")
    n = ps.ptx_param_bytes(ck.ptx, ck.meta.name)
    maps = len(ck.meta.tmaps)
    assert maps >= 72 and n >= 128 * maps + 8 * 72
    assert 4096 < n < ps.LARGE_LIMIT
    ps.check(ck.meta.name, n, ps.limit(ps.ptx_version(ck.ptx), (9, 0), 12080))
    with pytest.raises(ps.KernelParamsTooLarge) as e:
        ps.check(ck.meta.name, n, ps.limit(ps.ptx_version(ck.ptx), (9, 0), 12000))
    msg = str(e.value)
    assert ck.meta.name in msg and f"{n} bytes" in msg and "4096" in msg and "driver 12.0" in msg


def test_too_many_parameters_even_for_the_large_limit():
    params = ",\n".join(f"  .param .u64 p{i}" for i in range(4096))     # 32768 bytes
    ptx = f".version 8.7\n.target sm_90a\n.address_size 64\n.visible .entry big(\n{params}\n)\n{{\n ret;\n}}\n"
    n = ps.ptx_param_bytes(ptx, "big")
    assert n == 8 * 4096
    with pytest.raises(ps.KernelParamsTooLarge, match=r"kernel big: .* 32768 bytes, more than the 32764"):
        ps.check("big", n, ps.limit((8, 7), (9, 0), 12080))
