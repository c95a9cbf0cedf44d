"""The schedule level's MMA and accumulator ops on sm_90a: ``pks.mma_async`` as
``wgmma.mma_async`` from shared-memory descriptors, and the accumulator's epilogue
(``pks.acc_store_smem``, ``pks.acc_store_global``) in wgmma's register fragment layout.

wgmma fragment layout (PTX ISA 9.7.15.5.1.1, m64nNk16 f32 accumulator): in a 64-row slice,
thread ``t`` of the warpgroup (warp ``w = t / 32``, lane ``l``) holds, for each 8-column
block ``j``, registers ``q = 4j + 2i + c`` = row ``16w + l/4 + 8i``, column
``8j + 2(l % 4) + c``. A warpgroup's ``rows / 64`` slices follow each other in the block.

Shared-memory descriptors (PTX ISA 9.7.15.5.1.2): start address >> 4 in bits 0-13, leading
byte offset >> 4 in 16-29, stride byte offset >> 4 in 32-45, swizzle mode in 62-63
(1 = 128-byte). Operands are stored as 128-byte rows, 8-row groups 1024 bytes apart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pkc.codegen import ptx, ptx_sm90
from pkc.codegen.lower_scale_loads import bias_at, f32_at, prefetched_col

if TYPE_CHECKING:
    from pkc.codegen.lower_schedule import Lowering

BK = 64
ROW_BYTES = 128


def desc_hi(lbo: int, sbo: int) -> int:
    """High bits of a wgmma descriptor with 128-byte swizzle (the start address is added
    per use): LBO, SBO and the swizzle mode."""
    return (1 << 62) | (((sbo >> 4) & 0x3FFF) << 32) | (((lbo >> 4) & 0x3FFF) << 16)


# K-major operand: 8-row core groups 1024 bytes apart (SBO); LBO unused when swizzled (1).
DESC_HI_KMAJOR = desc_hi(16, 1024)
# N-major B: 64-column blocks of 64 K-rows x 128 bytes = 8192 bytes apart (LBO); 8-row K
# groups 1024 bytes apart (SBO).
DESC_HI_NMAJOR = desc_hi(8192, 1024)
_SWIZZLE_MASK = {128: 7, 64: 3, 32: 1}    # 16-byte chunks that the swizzle permutes - 1


def _desc_lo(L: "Lowering", addr, hi: int):
    """The descriptor's low word: start address >> 4 (bits 0-13) with the fixed bits of
    ``hi`` below bit 32 (LBO). Shared-memory addresses stay below 2^18, so an offset added
    to this word never carries out of the start-address field."""
    b = L.b
    lo = b.bin("shr", "u32", addr, 4)
    fixed = hi & 0xFFFFFFFF
    return b.bin("or", "b32", lo, b.imm(fixed, "u32")) if fixed else lo


def _desc(L: "Lowering", lo, hi: int, off: int):
    """The 64-bit descriptor at ``off`` bytes (a multiple of 16) past ``lo``'s address: one
    32-bit add and a pack with the constant high word, which ptxas keeps in a uniform
    register (a 64-bit add here cost a carry chain and two moves to uniform registers per
    wgmma)."""
    b = L.b
    word = b.add32(lo, off >> 4) if off else lo
    return b.r(ptx.PackOp(word, b.imm(hi >> 32, "u32"), wide=True))


def lower_mma(L: "Lowering", op) -> None:
    """One k-block of 128-byte rows: 4 steps of 32 bytes (k16 of 16-bit types, k32 of fp8)
    x (rows / 64) slices of wgmma, after a fence."""
    b = L.b
    acc = op.acc.type
    n, slices = acc.cols.data, acc.rows.data // 64
    frag = L.v(op.acc)
    a_addr = L.slot_addr(op.a, op.a_slot, b.mul32(L.v(op.a_row), ROW_BYTES))
    b_addr = L.slot_addr(op.b, op.b_slot)
    n_major = op.b_major.data == "n"
    hi_b = DESC_HI_NMAJOR if n_major else DESC_HI_KMAJOR
    la, lb = _desc_lo(L, a_addr, DESC_HI_KMAJOR), _desc_lo(L, b_addr, hi_b)
    scale = L.v(op.accumulate)
    ta, tb = op.types
    b.add(ptx_sm90.WgmmaSyncOp("fence"))
    for k in range(BK // 16):
        dbk = _desc(L, lb, hi_b, k * 16 * ROW_BYTES if n_major else k * 32)
        for mi in range(slices):
            dak = _desc(L, la, DESC_HI_KMAJOR, mi * 64 * ROW_BYTES + k * 32)
            b.add(ptx_sm90.WgmmaOp(frag, dak, dbk, n, ta, int(n_major),
                                   scale if k == 0 else None, first=mi * n // 2, b_dtype=tb))


def _frag_pair(L: "Lowering", op, mi: int, q: int):
    b = L.b
    frag = L.v(op.acc)
    base = mi * (op.acc.type.cols.data // 2)
    lo = b.r(ptx_sm90.FragGetOp(frag, base + q))
    hi = b.r(ptx_sm90.FragGetOp(frag, base + q + 1))
    return b.r(ptx_sm90.CvtPackOp(op.dtype.data, lo, hi))


def thread_geometry(L: "Lowering", widths: set[int]) -> None:
    """Once per kernel (entry block): the thread's fragment row in a 64-row slice
    (16 w + l / 4) and l % 4, and for each epilogue piece width its two rows' byte offsets
    in a swizzled 64 x width box and their swizzle XOR terms."""
    b, g = L.b, L.geo
    lane = b.bin("and", "b32", L.tid, 31)
    warp = b.bin("shr", "u32", L.lane_in_wg(), 5)
    g["row"] = b.add32(b.bin("shl", "b32", warp, 4), b.bin("shr", "u32", lane, 2))
    g["quad"] = b.bin("and", "b32", lane, 3)
    col_bytes = b.bin("shl", "b32", g["quad"], 2)
    for w in sorted(widths):
        rowb = 2 * w
        for i in range(2):
            ro = b.mul32(b.add32(g["row"], 8 * i), rowb)
            g[f"xor{w}_{i}"] = b.bin("shl", "b32", b.bin("and", "b32", b.bin("shr", "u32", ro, 7),
                                                        _SWIZZLE_MASK[rowb]), 4)
            g[f"off{w}_{i}"] = b.add32(ro, col_bytes)


def lower_acc_store_smem(L: "Lowering", op) -> None:
    """Rows 64 x ``width`` columns of one slice into a swizzled box: the 16-byte chunk
    index of a row is XORed with the row's position in the swizzle period."""
    b = L.b
    w = op.width.data
    buf = L.slot_addr(op.dst, op.slot)
    for i in range(2):
        xo = L.geo[f"xor{w}_{i}"]
        row_addr = b.add32(buf, L.geo[f"off{w}_{i}"])
        for jj in range(w // 8):
            j = op.col.data // 8 + jj
            v = _frag_pair(L, op, op.slice.data, 4 * j + 2 * i)
            x = b.bin("xor", "b32", xo, 16 * jj) if jj else xo
            b.st("shared", "b32", b.add32(row_addr, x), v)


def lower_acc_store_global(L: "Lowering", op) -> None:
    """Predicated ``st.global.b32`` of column pairs straight from the fragments."""
    b = L.b
    acc = op.acc.type
    slices, n = acc.rows.data // 64, acc.cols.data
    r0, quad = L.geo["row"], L.geo["quad"]
    rows, cols = L.v(op.rows), L.v(op.cols)
    col = b.add32(L.v(op.col), b.bin("shl", "b32", quad, 1))
    crem = b.bin("sub", "s32", cols, col)
    ptr = L.v(op.buffer)
    for mi in range(slices):
        for i in range(2):
            row = b.add32(b.add32(L.v(op.row), r0), 64 * mi + 8 * i)
            prow = b.setp("lt", "u32", row, rows)
            off = b.bin("mul.wide", "u32", row, cols, "b64")
            off = b.add64(off, b.cvt("u64", "u32", col))
            addr = b.add64(ptr, b.bin("shl", "b64", off, b.imm(1, "u32")))
            for j in range(n // 8):
                v = _frag_pair(L, op, mi, 4 * j + 2 * i)
                pst = b.pand(b.setp("gt", "s32", crem, 8 * j), prow)
                b.st("global", "b32", b.add64(addr, 16 * j) if j else addr, v, guard=pst)


def lower_acc_scale(L: "Lowering", op) -> None:
    """``pks.acc_scale`` on wgmma's register fragments: each thread loads the scales of its
    rows (2 per 64-row slice) and, 8-column block by block, of its columns (2 per block;
    all at once would not fit beside a 128-register accumulator), multiplies its
    accumulator registers with ``mul.rn`` (no contraction into an FMA: each product is
    rounded as the op says) and adds the bias, in place. With ``prefetched`` the values
    its ``pks.scale_prefetch`` holds come from registers (the columns' by shuffles:
    :mod:`pkc.codegen.lower_scale_loads`) instead of loads."""
    b = L.b
    n = op.acc.type.cols.data
    frag = L.v(op.acc)
    r0, quad = L.geo["row"], L.geo["quad"]
    rows, cols = L.v(op.rows), L.v(op.cols)
    row_a, row_b = op.row_wise()
    slices, blocks = op.region()
    pf = L.v(op.prefetched) if op.prefetched is not None else None
    same_a = pf is not None and op.prefetch().scale_a == op.scale_a
    zero = b.u32(0)
    sa = None if row_a else (pf.sa if same_a else f32_at(L, op.scale_a, zero, None))
    sb = None if row_b else (pf.sb if pf else f32_at(L, op.scale_b, zero, None))
    alpha = b.bin("mul.rn", "f32", sa, sb) if not row_a and not row_b else None
    col0 = b.add32(L.v(op.col), b.bin("shl", "b32", quad, 1))
    ras = {}
    pf_rows = pf.rows if pf is not None and op.rows_prefetched() else None
    for mi in slices:
        for i in range(2):
            ras[mi, i] = sa
            if row_a and pf_rows is not None:
                ras[mi, i] = pf_rows[mi, i]
            elif row_a:
                row = b.add32(b.add32(L.v(op.row), r0), 64 * mi + 8 * i)
                ras[mi, i] = f32_at(L, op.scale_a, row, rows)
    for j in blocks:
        cs, bs = {}, {}
        for c in range(2):
            col = None
            if pf is None:
                col = b.add32(col0, 8 * j + c) if 8 * j + c else col0
            if row_b:
                cs[c] = (prefetched_col(L, pf.cols, j, c) if pf is not None
                         else f32_at(L, op.scale_b, col, cols))
            else:
                cs[c] = sb
            if op.bias is not None:
                bs[c] = (prefetched_col(L, pf.bias, j, c) if pf is not None
                         else bias_at(L, op.bias, col, cols))
        for mi in slices:
            for i in range(2):
                for c in range(2):
                    q = mi * (n // 2) + 4 * j + 2 * i + c
                    v = b.r(ptx_sm90.FragGetOp(frag, q))
                    if alpha is not None:
                        v = b.bin("mul.rn", "f32", v, alpha)
                    else:
                        v = b.bin("mul.rn", "f32", v, ras[mi, i])
                        v = b.bin("mul.rn", "f32", v, cs[c])
                    if op.bias is not None:
                        v = b.bin("add.rn", "f32", v, bs[c])
                    b.add(ptx_sm90.FragSetOp(frag, q, v))


__all__ = ["lower_mma", "lower_acc_scale", "lower_acc_store_smem", "lower_acc_store_global", "DESC_HI_KMAJOR",
           "DESC_HI_NMAJOR", "desc_hi", "ptx"]
