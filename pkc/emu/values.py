"""Register values as numpy arrays over threads, and the PTX types they are read as.

A register of kind ``pred b16 b32 b64 f32 f64`` is stored as ``bool uint16 uint32 uint64
float32 float64``; an instruction type reinterprets the bits (a view: ``.s32`` of a b32 is
``view(int32)``), as PTX reads one register as ``.u32`` in one instruction and ``.s32`` in
the next. ``bf16`` has no numpy type: its bits stay uint16 and the helpers here convert
(round-to-nearest-even, as ``cvt.rn.bf16.f32``, PTX ISA 9.7.9.21)."""

from __future__ import annotations

import numpy as np

KIND_DTYPE = {"pred": np.dtype(bool), "b16": np.dtype(np.uint16), "b32": np.dtype(np.uint32),
              "b64": np.dtype(np.uint64), "f32": np.dtype(np.float32), "f64": np.dtype(np.float64)}

# numpy dtype of each PTX type (bf16: raw bits; 8-bit types live in 16-bit registers).
TYPE_DTYPE = {
    "pred": np.dtype(bool),
    "b8": np.dtype(np.uint8), "u8": np.dtype(np.uint8), "s8": np.dtype(np.int8),
    "b16": np.dtype(np.uint16), "u16": np.dtype(np.uint16), "s16": np.dtype(np.int16),
    "f16": np.dtype(np.float16), "bf16": np.dtype(np.uint16),
    "b32": np.dtype(np.uint32), "u32": np.dtype(np.uint32), "s32": np.dtype(np.int32),
    "f32": np.dtype(np.float32),
    "b64": np.dtype(np.uint64), "u64": np.dtype(np.uint64), "s64": np.dtype(np.int64),
    "f64": np.dtype(np.float64),
    "bf16x2": np.dtype(np.uint32), "f16x2": np.dtype(np.uint32),
}


def size_of(t: str) -> int:
    """Bytes a value of PTX type ``t`` takes in memory."""
    return TYPE_DTYPE[t].itemsize


def as_type(x: np.ndarray, t: str) -> np.ndarray:
    """The register bits ``x`` read as PTX type ``t`` (8-bit types: the low byte of a
    16-bit register, sign- or zero-extended by the caller's arithmetic)."""
    dt = TYPE_DTYPE[t]
    if x.dtype == dt:
        return x
    if x.dtype.itemsize == dt.itemsize:
        return x.view(dt)
    if dt.itemsize == 1:
        return (x.astype(np.uint16) & 0xFF).astype(np.uint8).view(dt)
    raise TypeError(f"a {x.dtype} register cannot be read as .{t}")


def to_kind(x: np.ndarray, kind: str) -> np.ndarray:
    """Bits of ``x`` (of any width up to the kind's) stored in a register of ``kind``:
    same width is a view; a narrower integer is zero-/sign-extended by its own type."""
    dt = KIND_DTYPE[kind]
    if x.dtype == dt:
        return x
    if kind == "pred":
        return x.astype(bool)
    if x.dtype.itemsize == dt.itemsize:
        return x.view(dt)
    if x.dtype.kind in "iu" and dt.kind in "iu":
        signed = {2: np.int16, 4: np.int32, 8: np.int64}[dt.itemsize]
        return x.astype(signed if x.dtype.kind == "i" else dt).view(dt)
    raise TypeError(f"{x.dtype} does not fit a {kind} register")


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """Round to nearest, ties to even; NaN becomes the canonical 0x7FFF."""
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    bias = ((b >> np.uint32(16)) & np.uint32(1)) + np.uint32(0x7FFF)
    out = ((b + bias) >> np.uint32(16)).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FFF), out)


def f32_to_f16(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        h = np.asarray(x, dtype=np.float32).astype(np.float16)
    return np.where(np.isnan(x), np.float16(np.nan), h).view(np.uint16)


def fma_f32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``fma.rn.f32``: a*b+c rounded once. The product is exact in f64; the sum is made
    exact with TwoSum, and the one case where rounding the f64 sum to f32 rounds twice
    (the f64 sum lies exactly halfway between two f32) is corrected by the sign of the
    residual."""
    a64, b64, c64 = (np.asarray(v, dtype=np.float64) for v in (a, b, c))
    p = a64 * b64
    with np.errstate(invalid="ignore", over="ignore"):
        s = p + c64
        bb = s - p
        err = (p - (s - bb)) + (c64 - bb)
        r = s.astype(np.float32)
        lo = np.nextafter(r, np.float32(-np.inf))
        hi = np.nextafter(r, np.float32(np.inf))
        r64 = r.astype(np.float64)
        # halfway between r and a neighbour, with a residual that pushes away from r
        up = (s == (r64 + hi.astype(np.float64)) / 2) & (err > 0)
        down = (s == (r64 + lo.astype(np.float64)) / 2) & (err < 0)
        r = np.where(up, hi, np.where(down, lo, r))
    ok = np.isfinite(s)
    return np.where(ok, r, s.astype(np.float32)).astype(np.float32)
