"""The loads of a scaled GEMM's epilogue (``pks.acc_scale``): per element, shared by the
wgmma (sm_90a) and tensor-memory (sm_100a) lowerings (an f32 scale and a bias element,
each widened to f32 and 0.0 past the problem's edge: an element that is never stored);
and on sm_90a ``pks.scale_prefetch``, which loads a tile's scales into registers before
its main loop, and the shuffles by which ``pks.acc_scale`` reads them there.

The prefetch's layout (wgmma fragments: thread ``l`` of a warp holds columns
``8 j + 2 (l % 4) + c`` of every 8-column block ``j``): lane ``l`` loads columns
``2 l + 64 g + c`` (g < cols / 64, c < 2) of the tile, i.e. block ``j = l / 4 + 8 g``'s pair
of quad ``l % 4``; the pair a thread needs in block ``j`` is then in lane
``4 (j % 8) + l % 4``, register ``(g = j / 8, c)``: one ``shfl.sync.idx`` per value, the
same register name in every lane. Why: loading every column a thread needs would take
``cols / 4`` registers beside the accumulator (64 at 256 columns); loading them per piece
in the epilogue left each piece waiting for global memory (docs/PERF_NOTES.md
2026-12-02 (e), (n))."""

from __future__ import annotations

from typing import TYPE_CHECKING

from xdsl.dialects.builtin import BFloat16Type, Float16Type, Float32Type

from pkc.codegen.errors import CodegenError

if TYPE_CHECKING:
    from pkc.codegen.lower_schedule import Lowering

__all__ = ["f32_at", "bias_at", "Prefetched", "lower_scale_prefetch", "prefetched_col"]


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


class Prefetched:
    """What a ``!pks.scales`` value lowered to: the tensor-wise scales (``sa``, ``sb``;
    None where row-wise), A's row scales by (slice, i) (None: not prefetched), and B's
    column scales and the bias in the lane-spread layout ([g * 2 + c]; None: none)."""

    def __init__(self):
        self.sa = self.sb = None
        self.rows: dict | None = None
        self.cols: list | None = None
        self.bias: list | None = None


def lower_scale_prefetch(L: "Lowering", op) -> None:
    """``pks.scale_prefetch`` (sm_90a): the loads, guarded, into registers."""
    if L.target != "sm_90a":
        raise CodegenError(f"pks.scale_prefetch: lowered on sm_90a (wgmma fragments) only, "
                           f"not {L.target}")
    b = L.b
    acc = op.acc.type
    n, slices = acc.cols.data, acc.rows.data // 64
    row_a, row_b = op.row_wise()
    p = Prefetched()
    zero = b.u32(0)
    if not row_a:
        p.sa = f32_at(L, op.scale_a, zero, None)
    if not row_b:
        p.sb = f32_at(L, op.scale_b, zero, None)
    if op.with_rows is not None:
        rows, r0 = L.v(op.rows), L.geo["row"]
        p.rows = {}
        for mi in range(slices):
            for i in range(2):
                row = b.add32(b.add32(L.v(op.row), r0), 64 * mi + 8 * i)
                p.rows[mi, i] = f32_at(L, op.scale_a, row, rows)
    if row_b or op.bias is not None:
        cols = L.v(op.cols)
        lane2 = b.bin("shl", "b32", b.bin("and", "b32", L.tid, 31), 1)
        base = b.add32(L.v(op.col), lane2)
        p.cols = [] if row_b else None
        p.bias = [] if op.bias is not None else None
        for g in range(-(-n // 64)):
            for c in range(2):
                col = b.add32(base, 64 * g + c) if 64 * g + c else base
                if row_b:
                    p.cols.append(f32_at(L, op.scale_b, col, cols))
                if op.bias is not None:
                    p.bias.append(bias_at(L, op.bias, col, cols))
    L.vals[op.result] = p


def prefetched_col(L: "Lowering", regs: list, j: int, c: int):
    """Column ``8 j + 2 (lane % 4) + c`` of the tile from the lane-spread ``regs``."""
    from pkc.codegen import ptx

    b = L.b
    src = b.add32(L.geo["quad"], 4 * (j % 8)) if j % 8 else L.geo["quad"]
    return b.r(ptx.ShflIdxOp(regs[(j // 8) * 2 + c], src))
