"""Tensor maps in the emulator and the swizzle modes.

A real CUtensorMap is 128 opaque bytes made by the driver (``cuTensorMapEncodeTiled``).
The emulator's launcher writes its own 128-byte record instead, at the address the kernel
gets for the by-value parameter (what ``cvta.param`` gives it): global address, element
size, rank, swizzle, out-of-bounds fill, dimensions and byte strides (innermost first),
box. TMA handlers (:mod:`pkc.emu.ops_sm90`) read it back; a record without the magic word
is an error (a pointer that is not a tensor map).

Swizzle (PTX ISA 5.5.4, tensor-map swizzling modes; the same pattern in wgmma's
shared-memory layouts, 9.7.15.5.1.2): in each 1024-byte-aligned atom, the 16-byte chunk
index (address bits 4-6) is XORed with the row of 128 bytes (bits 7-9), masked to the
mode's span: 128B -> 3 bits, 64B -> 2, 32B -> 1, none -> 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAGIC = 0x504B454D55544D50  # "PKEMUTMP"
RECORD_BYTES = 128
FILL_ZERO, FILL_NAN = 0, 1
_ELEMS = ("", "bf16", "f16", "f32")

_RECORD = np.dtype([("magic", "<u8"), ("addr", "<u8"), ("esize", "<u4"), ("rank", "<u4"),
                    ("swizzle", "<u4"), ("fill", "<u4"), ("elem", "<u4"), ("dims", "<u4", 5),
                    ("strides", "<u8", 5), ("box", "<u4", 5)])
assert _RECORD.itemsize <= RECORD_BYTES


@dataclass
class TensorMap:
    addr: int                 # global address of element 0
    esize: int                # bytes per element
    dims: list[int]           # innermost first
    strides: list[int]        # bytes, innermost first (strides[0] = esize)
    box: list[int]            # innermost first
    swizzle: int = 0          # 0, 32, 64, 128 bytes
    fill: int = FILL_ZERO
    element: str = ""         # bf16 / f16 / f32 (what a reduce-add adds), "" unknown

    def encode(self) -> np.ndarray:
        r = np.zeros(1, dtype=_RECORD)
        n = len(self.dims)
        r["magic"], r["addr"], r["esize"], r["rank"] = MAGIC, self.addr, self.esize, n
        r["swizzle"], r["fill"] = self.swizzle, self.fill
        r["elem"] = _ELEMS.index(self.element) if self.element in _ELEMS else 0
        r["dims"][0, :n] = self.dims
        r["strides"][0, :n] = self.strides
        r["box"][0, :n] = self.box
        out = np.zeros(RECORD_BYTES, dtype=np.uint8)
        out[:_RECORD.itemsize] = r.view(np.uint8)
        return out

    @staticmethod
    def decode(raw: np.ndarray) -> "TensorMap | None":
        r = raw[:_RECORD.itemsize].copy().view(_RECORD)[0]
        if int(r["magic"]) != MAGIC:
            return None
        n = int(r["rank"])
        return TensorMap(int(r["addr"]), int(r["esize"]), [int(x) for x in r["dims"][:n]],
                         [int(x) for x in r["strides"][:n]], [int(x) for x in r["box"][:n]],
                         int(r["swizzle"]), int(r["fill"]), _ELEMS[int(r["elem"]) % len(_ELEMS)])

    @property
    def box_bytes(self) -> int:
        n = self.esize
        for b in self.box:
            n *= b
        return n

    def describe(self) -> str:
        return (f"tensor map over 0x{self.addr:x}: dims {self.dims}, box {self.box}, "
                f"{self.esize}-byte elements, swizzle {self.swizzle or 'none'}")


def swizzle(addr: np.ndarray, mode: int) -> np.ndarray:
    """Physical shared address of logical ``addr`` under swizzle ``mode`` (bytes)."""
    if not mode:
        return addr
    mask = mode // 16 - 1
    a = addr.astype(np.int64)
    return a ^ (((a >> 7) & mask) << 4)


def box_elements(tm: TensorMap, coords: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For a box at ``coords`` (innermost first): each element's byte offset in the box
    (row-major, innermost fastest), its global address, and whether it is inside the
    tensor (outside: filled on load, skipped on store)."""
    n = len(tm.box)
    grids = np.meshgrid(*[np.arange(b) for b in reversed(tm.box)], indexing="ij")
    idx = [g.reshape(-1) for g in reversed(grids)]          # innermost first
    inside = np.ones(idx[0].size, dtype=bool)
    gaddr = np.full(idx[0].size, tm.addr, dtype=np.int64)
    for d in range(n):
        pos = idx[d] + coords[d]
        inside &= (pos >= 0) & (pos < tm.dims[d])
        gaddr += pos * tm.strides[d]
    linear = np.zeros(idx[0].size, dtype=np.int64)
    scale = 1
    for d in range(n):
        linear += idx[d] * scale
        scale *= tm.box[d]
    return linear * tm.esize, gaddr, inside
