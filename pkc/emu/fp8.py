"""8-bit floats as the tensor cores read them: every byte of f8E4M3FN and f8E5M2 decoded
to its exact f32 value (a 256-entry table per format, built from the formats' definitions,
not from torch), for the emulator's fp8 MMAs (``tcgen05.mma .kind::f8f6f4``).

* f8E4M3FN (OCP "E4M3", ``.e4m3`` in PTX): sign, 4 exponent bits (bias 7), 3 mantissa
  bits; exponent 0 is subnormal (``m / 8 * 2^-6``); no infinities, ``S.1111.111`` is NaN.
* f8E5M2 (``.e5m2``): sign, 5 exponent bits (bias 15), 2 mantissa bits (the top byte of an
  IEEE f16): subnormals ``m / 4 * 2^-14``, exponent 31 is infinity (m = 0) or NaN.

Every value is exact in f32, and so is the product of two of them (at most 4 x 4
significant bits, exponents within f32's range).
"""

from __future__ import annotations

import numpy as np


def _table(exp_bits: int, man_bits: int, ieee_specials: bool) -> np.ndarray:
    bias = (1 << (exp_bits - 1)) - 1
    out = np.empty(256, dtype=np.float64)
    for b in range(256):
        sign = -1.0 if b >> 7 else 1.0
        e = (b >> man_bits) & ((1 << exp_bits) - 1)
        m = b & ((1 << man_bits) - 1)
        top = e == (1 << exp_bits) - 1
        if ieee_specials and top:
            out[b] = sign * np.inf if m == 0 else np.nan
        elif not ieee_specials and top and m == (1 << man_bits) - 1:
            out[b] = np.nan                     # E4M3FN: only S.1111.111 is special
        elif e == 0:
            out[b] = sign * m / (1 << man_bits) * 2.0 ** (1 - bias)
        else:
            out[b] = sign * (1 + m / (1 << man_bits)) * 2.0 ** (e - bias)
    return out.astype(np.float32)


FP8_TABLES = {"f8E4M3FN": _table(4, 3, False), "f8E5M2": _table(5, 2, True)}


def fp8_to_f32(data: np.ndarray, name: str) -> np.ndarray:
    """The bytes ``data`` (uint8, any shape) of fp8 format ``name`` as f32, exactly."""
    return FP8_TABLES[name][np.asarray(data, dtype=np.uint8)]


__all__ = ["FP8_TABLES", "fp8_to_f32"]
