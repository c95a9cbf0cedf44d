"""``pk.tile_fill`` / ``pk.tile_map`` / ``pk.tile_reduce`` and tile copies: CTA-
cooperative loops over a tile's elements in shared memory.

Maps broadcast like numpy (an operand dimension of size 1 is read at index 0) and
compute in the interpreter's precision (f32 for bf16/f16/f32), rounding once into the
result type. A reduction gives each thread whole output elements and runs the reduced
extent serially in f32 (sum/mean) or with NaN-propagating max/min.
"""

from __future__ import annotations

import math
import struct

from pkc.codegen import ptx
from pkc.codegen.context import TileRef, WorkerCtx, lowers
from pkc.codegen.elements import Val, convert, narrow, store_raw, widen
from pkc.codegen.errors import CodegenError
from pkc.codegen.scalar_math import apply_fn
from pkc.dialects import kernel as k
from pkc.dialects.common import int_list


def copy_tile(ctx: WorkerCtx, src: TileRef, dst: TileRef) -> None:
    """dst <- src (same type), e.g. for a loop-carried tile."""
    b = ctx.b
    b.bar()
    with ctx.for_elements(src.numel) as e:
        raw = b.ld("shared", src.elem.mem, ctx.tile_addr(src, e))
        b.st("shared", dst.elem.mem, ctx.tile_addr(dst, e), raw)
    b.bar()


def bf16_bits(value: float) -> int:
    """The bf16 bit pattern of ``value``, rounded to nearest even as torch rounds (through
    f32); computed here rather than with torch so that emitting PTX does not import torch."""
    if math.isnan(value):
        return 0x7FC0
    try:
        f32 = struct.unpack("<I", struct.pack("<f", value))[0]
    except OverflowError:  # beyond f32: infinity, as a cast gives
        return 0x7F80 if value > 0 else 0xFF80
    return ((f32 + 0x7FFF + ((f32 >> 16) & 1)) >> 16) & 0xFFFF


def f16_bits(value: float) -> int:
    """The f16 bit pattern of ``value`` (beyond the f16 range: infinity, as a cast gives)."""
    try:
        return struct.unpack("<H", struct.pack("<e", value))[0]
    except OverflowError:
        return 0x7C00 if value > 0 else 0xFC00


def raw_constant(b, e, value) -> object:
    """A register holding ``value`` in element type e's memory form."""
    if e.name == "f32":
        return b.imm(float(value), "f32")
    if e.name == "f64":
        return b.imm(float(value), "f64")
    if e.name == "bf16":
        return b.imm(bf16_bits(float(value)), "b16")
    if e.name == "f16":
        return b.imm(f16_bits(float(value)), "b16")
    if e.name == "i1":
        return b.imm(1 if value else 0, "u16")
    if e.name == "i8":
        return b.imm(int(value) & 0xFFFF, "b16")
    return b.imm(int(value), e.mem)


@lowers(k.TileFillOp)
def _fill(ctx: WorkerCtx, op: k.TileFillOp) -> None:
    b = ctx.b
    t = ctx.tile(op.result)
    value = op.value.value.data
    b.comment(f"pk.tile_fill {value} -> {t.type}")
    raw = raw_constant(b, t.elem, value)
    with ctx.for_elements(t.numel) as e:
        store_raw(b, t.elem, "shared", ctx.tile_addr(t, e), raw)
    b.bar()


def _broadcast_index(ctx: WorkerCtx, idx, in_shape, out_shape):
    """Linear index into an operand of ``in_shape`` broadcast to ``out_shape``."""
    lead = len(out_shape) - len(in_shape)
    sub = [0 if in_shape[d] == 1 else idx[lead + d] for d in range(len(in_shape))]
    return ctx.ravel(sub, in_shape)


@lowers(k.TileMapOp)
def _map(ctx: WorkerCtx, op: k.TileMapOp) -> None:
    b = ctx.b
    out = ctx.tile(op.result)
    ins = [ctx.tile(v) for v in op.inputs]
    fn = op.fn.data
    b.comment(f"pk.tile_map \"{fn}\" -> {out.type}")
    shape = out.shape
    with ctx.for_elements(out.numel) as e:
        idx = None
        args = []
        for t in ins:
            if t.shape == shape:
                i = e
            else:
                if idx is None:
                    idx = ctx.unravel(e, shape)
                i = _broadcast_index(ctx, idx, t.shape, shape)
            raw = b.ld("shared", t.elem.mem, ctx.tile_addr(t, i))
            args.append(widen(b, t.elem, raw))
        res = apply_fn(b, fn, args, out.elem.ctype)
        store_raw(b, out.elem, "shared", ctx.tile_addr(out, e), narrow(b, out.elem, res))
    b.bar()


@lowers(k.TileReduceOp)
def _reduce(ctx: WorkerCtx, op: k.TileReduceOp) -> None:
    b = ctx.b
    src = ctx.tile(op.input)
    out = ctx.tile(op.result)
    fn = op.fn.data
    dims = int_list(op.dims)
    shape = src.shape
    kept = [d for d in range(len(shape)) if d not in dims]
    red_shape = tuple(shape[d] for d in dims)
    kept_shape = tuple(shape[d] for d in kept)
    count = 1
    for s in red_shape:
        count *= s
    b.comment(f"pk.tile_reduce \"{fn}\" over dims {dims} of {src.type}")
    ct = src.elem.ctype
    if ct == "pred":
        raise CodegenError(f"'pk.tile_reduce' of i1 tiles has no lowering ({op.name})")
    n_out = 1
    for s in kept_shape:
        n_out *= s
    with ctx.for_elements(n_out) as e:
        kidx = ctx.unravel(e, kept_shape) if kept_shape else []

        def element(ridx):
            full = [0] * len(shape)
            for d, i in zip(kept, kidx):
                full[d] = i
            for d, i in zip(dims, ridx):
                full[d] = i
            lin = ctx.ravel(full, shape)
            return widen(b, src.elem, b.ld("shared", src.elem.mem, ctx.tile_addr(src, lin)))

        first = element([0] * len(dims))
        loop, block = b.for_carried(b.u32(1), b.u32(count), b.u32(1), [first.reg], type="s32")
        with b.at(block):
            r, acc = block.args
            x = element(ctx.unravel(r, red_shape))
            x = convert(b, x, first.ctype)
            if fn in ("sum", "mean"):
                nxt = b.bin("add", first.ctype, acc, x.reg)
            else:
                nxt = apply_fn(b, "maximum" if fn == "max" else "minimum",
                               [Val(acc, first.ctype), x], first.ctype).reg
            b.add(ptx.YieldOp([nxt]))
        res = Val(loop.res[0], first.ctype)
        if fn == "mean":
            res = Val(b.bin("div.rn", ct, res.reg, b.imm(float(count), ct)), ct)
        store_raw(b, out.elem, "shared", ctx.tile_addr(out, e), narrow(b, out.elem, res))
    b.bar()
