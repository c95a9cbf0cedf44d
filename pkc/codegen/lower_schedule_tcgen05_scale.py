"""fp8 on the sm_100a lowering: the scaled GEMM's ``pks.acc_scale`` on a tensor-memory
accumulator, and the ``tcgen05.mma`` kind of a ``pks.mma_async``.

A tensor-memory accumulator is read by the epilogue's ``tcgen05.ld`` into registers and
converted there; scaling it in place (ld, multiply, ``tcgen05.st``, ld again) would move
every element through tensor memory twice. So ``pks.acc_scale`` lowers to nothing at its
place but what every thread needs once (the tensor-wise scales, or their product; the
row-wise scale of the thread's row: thread t of the epilogue warpgroup reads lane t =
accumulator row t), and the readers of that accumulator (``pks.acc_store_smem``,
``pks.acc_add_smem``, ``pks.acc_store_global``) apply it to the registers right after
``tcgen05.wait::ld``, before they round: ``v * scale_a[row] * scale_b[col] (+ bias[col])``
with ``mul.rn`` / ``add.rn`` in the op's order (tensor-wise both: ``v * (sa * sb)``), the
column scales and bias loaded as 16-byte vectors (``ld.global.nc.v4``, 0 past ``cols``;
every kernel buffer is 16-byte aligned: the scheduled launcher refuses others,
``pkc/runtime/scheduled.py``). The result
is the op's in-place semantics: every read of the scaled region after the op sees the
scaled values, once. The pending scale is keyed by the accumulator value (one per tile:
the ``pks.acc_select`` result), so it ends with the tile.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from xdsl.dialects.builtin import BFloat16Type, Float32Type

from pkc.codegen import ptx_sm100 as t5
from pkc.codegen.errors import CodegenError
from pkc.codegen.lower_scale_loads import bias_at, f32_at

if TYPE_CHECKING:
    from pkc.codegen.lower_schedule import Lowering


def mma_kind_and_desc(op, m: int, n: int, n_major: bool, group: int) -> tuple[t5.MmaKind, int]:
    """The ``.kind`` and instruction descriptor of ``pks.mma_async`` ``op`` as an ``m x n``
    tcgen05 MMA (``m`` of the whole MMA; ValueError for a shape or type it has none for):
    ``kind::f8f6f4`` with the kind's type codes for fp8 operands (K = 32 per instruction,
    K-major), ``kind::f16`` otherwise (K = 16). Either way 4 instructions of 32 bytes of
    K cover the 128-byte k-block row."""
    if op.fp8:
        ta, tb = op.types
        return t5.MmaKind.F8F6F4, t5.instr_desc_f8f6f4(ta, tb, m, n, group)
    return t5.MmaKind.F16, t5.instr_desc_f16(op.dtype.data, m, n, False, n_major, group)


@dataclass
class _Pending:
    """An ``acc_scale`` not yet applied: its op, the 64-row slices and columns it covers,
    and the registers computed at its place."""

    op: object
    slices: range
    cols: range
    alpha: object = None        # sa * sb (both tensor-wise)
    row_scale: object = None    # sa[row] of the thread's row, or the tensor-wise sa
    col_scale: object = None    # the tensor-wise sb (None: per column)
    loaded: dict = field(default_factory=dict)


def _key(acc) -> tuple:
    return ("acc_scale", id(acc))


def lower_acc_scale(L: "Lowering", op) -> None:
    """``pks.acc_scale`` of a CTA (tensor-memory) accumulator: the per-thread scales now,
    the rest where the accumulator is read (see the module docstring)."""
    acc = op.acc.type
    if acc.rows.data != 128 or L.role is None or L.role.warpgroups.data != 1:
        raise CodegenError(f"{op.name}: one warpgroup scales a 128-lane accumulator (sm_100a)")
    if op.prefetched is not None:
        raise CodegenError(f"{op.name}: prefetched scales (pks.scale_prefetch) are lowered on "
                           "sm_90a only")
    slices, blocks = op.region()
    p = _Pending(op, slices, range(8 * blocks.start, 8 * blocks.stop))
    pend = L.geo.setdefault(_key(op.acc), [])
    for q in pend:
        if set(q.slices) & set(slices) and set(q.cols) & set(p.cols):
            raise CodegenError(f"{op.name}: scales a region of the accumulator that an earlier "
                               "pks.acc_scale already scaled and no store has read (not lowered)")
    b = L.b
    zero = b.u32(0)
    row_a, row_b = op.row_wise()
    if not row_a and not row_b:
        p.alpha = b.bin("mul.rn", "f32", f32_at(L, op.scale_a, zero, None),
                        f32_at(L, op.scale_b, zero, None))
    else:
        if row_a:
            row = b.add32(L.v(op.row), L.lane_in_wg())        # lane t = row t of the tile
            p.row_scale = f32_at(L, op.scale_a, row, L.v(op.rows))
        else:
            p.row_scale = f32_at(L, op.scale_a, zero, None)
        if not row_b:
            p.col_scale = f32_at(L, op.scale_b, zero, None)
    pend.append(p)


def _const(v) -> int | None:
    """The value of an i32 ``arith.constant`` (None for anything else)."""
    from xdsl.dialects import arith
    op = v.owner
    return op.value.value.data if isinstance(op, arith.ConstantOp) else None


def _column_values(L: "Lowering", q: _Pending, c0: int, n: int) -> tuple[list | None, list | None]:
    """(column scales, bias) of accumulator columns ``c0 .. c0 + n`` as f32 registers
    (None: not needed). Loaded as 16-byte vectors (4 f32 scales, 8 16-bit biases) when
    ``cols`` is a constant multiple of 8 (then a vector is all in or all out; the fp8 GEMM
    needs N % 16 == 0 anyway), else one element at a time: the vectors keep the epilogue's
    registers in bounds (scalar loads, which ptxas hoists above the tcgen05.ld, made the
    row-wise epilogue spill)."""
    from pkc.codegen.ptx_comm import LdV4Op
    from pkc.codegen.lower_schedule_comm import _widen
    b, op = L.b, q.op
    need_s = q.alpha is None and q.col_scale is None
    if not need_s and op.bias is None:
        return None, None
    cols_n = _const(op.cols)
    vec = cols_n is not None and cols_n % 8 == 0 and c0 % 8 == 0 and n % 8 == 0

    def col(c):
        return b.add32(L.v(op.col), c) if c else L.v(op.col)

    def v4(buf, c, esize, per):
        # 16 bytes from element c of buf: all of them exist where col + per - 1 < cols
        addr = b.add64(L.v(buf), b.bin("mul.wide", "u32", col(c), b.u32(esize), "b64"))
        ok = b.setp("lt", "u32", col(c + per - 1), L.v(op.cols))
        return list(b.add(LdV4Op(addr, guard=ok, cache="nc")).res)

    scales = bias = None
    if need_s:
        if vec:
            scales = [f for c in range(c0, c0 + n, 4)
                      for w in v4(op.scale_b, c, 4, 4) for f in _widen(L, w, "f32")]
        else:
            scales = [f32_at(L, op.scale_b, col(c), L.v(op.cols)) for c in range(c0, c0 + n)]
    if op.bias is not None:
        et = op.bias.type.element_type
        dt = ("f32" if isinstance(et, Float32Type) else "bf16" if isinstance(et, BFloat16Type)
              else "f16")
        per = 4 if dt == "f32" else 8
        if vec:
            bias = [f for c in range(c0, c0 + n, per)
                    for w in v4(op.bias, c, 16 // per, per) for f in _widen(L, w, dt)]
        else:
            bias = [bias_at(L, op.bias, col(c), L.v(op.cols)) for c in range(c0, c0 + n)]
    return scales, bias


def scale_loaded(L: "Lowering", acc_val, vals: list, col0: int, slices: range) -> list:
    """The registers ``vals`` of accumulator columns ``col0 ..`` (read by ``tcgen05.ld``
    after ``tcgen05.wait::ld``, rows in ``slices``) with the pending scales applied (the
    same registers where none covers them)."""
    pend = L.geo.get(_key(acc_val))
    if not pend:
        return vals
    b = L.b
    out = list(vals)
    for q in pend:
        js = [j for j in range(len(vals)) if col0 + j in q.cols]
        if not js or not set(slices) & set(q.slices):
            continue
        if not set(slices) <= set(q.slices):
            raise CodegenError(f"{q.op.name}: scales rows {64 * q.slices.start}.."
                               f"{64 * q.slices.stop - 1} of an accumulator a store reads "
                               "whole (not lowered)")
        if js != list(range(js[0], js[-1] + 1)):
            raise CodegenError(f"{q.op.name}: a scaled region that is not one column range")
        scales, bias = _column_values(L, q, col0 + js[0], len(js))
        for i, j in enumerate(js):
            v = out[j]
            if q.alpha is not None:
                v = b.bin("mul.rn", "f32", v, q.alpha)
            else:
                v = b.bin("mul.rn", "f32", v, q.row_scale)
                v = b.bin("mul.rn", "f32", v, q.col_scale if scales is None else scales[i])
            if bias is not None:
                v = b.bin("add.rn", "f32", v, bias[i])
            out[j] = v
    return out


__all__ = ["mma_kind_and_desc", "lower_acc_scale", "scale_loaded"]
