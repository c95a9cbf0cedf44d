"""The per-element loads of a scaled GEMM's epilogue (``pks.acc_scale``), shared by the
wgmma (sm_90a) and tensor-memory (sm_100a) lowerings: an f32 scale and a bias element,
each widened to f32 and 0.0 past the problem's edge (an element that is never stored)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from xdsl.dialects.builtin import BFloat16Type, Float16Type, Float32Type

from pkc.codegen.errors import CodegenError

if TYPE_CHECKING:
    from pkc.codegen.lower_schedule import Lowering

__all__ = ["f32_at", "bias_at"]


def _base(L: "Lowering", buf):
    """``buf``'s address: a kernel argument's, or the own copy of a fused kernel's
    symmetric ``pk.alloc`` (the gathered row scales of an fp8 all-gather + GEMM,
    pkc/passes/fused_fp8_ag.py)."""
    comm = getattr(L, "comm", None)
    if buf not in L.vals and comm is not None and buf in comm.own:
        return comm.own[buf]
    return L.v(buf)


def f32_at(L: "Lowering", buf, index, bound):
    """f32 ``buf[index]`` (``ld.global.nc``), 0.0 where ``index >= bound`` (``bound`` None:
    unguarded)."""
    b = L.b
    addr = b.add64(_base(L, buf), b.bin("mul.wide", "u32", index, b.u32(4), "b64"))
    if bound is None:
        return b.ld("global", "f32", addr, cache="nc")
    return b.ld("global", "f32", addr, cache="nc", guard=b.setp("lt", "u32", index, bound),
                other=b.imm(0.0, "f32"))


def bias_at(L: "Lowering", buf, index, bound):
    """``bias[index]`` as f32 (a bf16 / f16 / f32 buffer), 0.0 where ``index >= bound``."""
    b = L.b
    et = buf.type.element_type
    if isinstance(et, Float32Type):
        return f32_at(L, buf, index, bound)
    kind = "bf16" if isinstance(et, BFloat16Type) else "f16" if isinstance(et, Float16Type) else None
    if kind is None:
        raise CodegenError(f"pks.acc_scale: bias of {et} (bf16, f16 or f32)")
    addr = b.add64(L.v(buf), b.bin("mul.wide", "u32", index, b.u32(2), "b64"))
    raw = b.ld("global", "b16", addr, cache="nc", guard=b.setp("lt", "u32", index, bound),
               other=b.imm(0, "b16"))
    return b.cvt("f32", kind, raw)
