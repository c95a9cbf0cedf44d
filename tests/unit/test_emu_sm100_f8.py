"""``tcgen05.mma .kind::f8f6f4`` (8-bit float operands) on hand-built ptx-dialect kernels:
the instruction descriptor's fields (PTX ISA 9.7.16.4.2, the kind's type codes E4M3 = 0,
E5M2 = 1), the emulator's product (every byte decoded exactly, K = 32 per instruction,
each step summed exactly and rounded once to f32) for e4m3 / e5m2 pairs through a 128-byte
swizzle (four MMAs per 128-element k-block, the descriptor advanced 32 bytes each, as the
GEMM's lowering does) and without swizzle; a descriptor whose type code is no f8f6f4 format
is a named error, a 6- / 4-bit format is unsupported (not modelled); the kernels assemble
with ``ptxas -arch=sm_100a`` and their SASS has the fp8 MMA (``UTCQMMA``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pkc.codegen import ptx, ptx_sm90
from pkc.codegen import ptx_sm100 as t5
from pkc.codegen.builder import Builder
from pkc.codegen.printer import print_module
from pkc.codegen.ptxas import assemble, find_ptxas
from pkc.codegen.sass import find_tool, instructions, sass
from pkc.emu import GlobalMemory, run_entry
from pkc.emu.errors import EmuTensorMemoryError, EmuUnsupported
from pkc.emu.fp8 import fp8_to_f32
from pkc.emu.ops_sm100 import decode_instr_desc

E4, E5 = "f8E4M3FN", "f8E5M2"
TORCH = {E4: torch.float8_e4m3fn, E5: torch.float8_e5m2}
M, N = 128, 48
SMEM = 65536
BAR0, BAR1, SLOT = 49152, 49160, 49168


def _swizzled(X: np.ndarray) -> np.ndarray:
    """Bytes [rows, 128] in the 128-byte-swizzle K-major layout (what a TMA load with
    CU_TENSOR_MAP_SWIZZLE_128B writes: 16-byte chunk c of row r at chunk c ^ (r % 8))."""
    rows = X.shape[0]
    out = np.zeros(rows * 128, dtype=np.uint8)
    for r in range(rows):
        for c in range(8):
            d = r * 128 + 16 * (c ^ (r % 8))
            out[d:d + 16] = X[r, 16 * c:16 * c + 16]
    return out


def _plain(X: np.ndarray) -> np.ndarray:
    """Bytes [rows, 32] in the no-swizzle K-major layout (8 x 16-byte core matrices; the
    two K chunks 128 bytes apart (LBO), 8-row groups 256 bytes apart (SBO))."""
    rows = X.shape[0]
    out = np.zeros(rows * 32, dtype=np.uint8)
    for i in range(rows):
        for kc in range(2):
            a = (i // 8) * 256 + kc * 128 + (i % 8) * 16
            out[a:a + 16] = X[i, 16 * kc:16 * kc + 16]
    return out


def _fp8_bytes(rng, rows, cols, name) -> np.ndarray:
    """Random finite bytes of format ``name`` (no NaN / infinity)."""
    x = rng.integers(0, 256, size=(rows, cols), dtype=np.uint8)
    v = fp8_to_f32(x, name)
    return np.where(np.isfinite(v), x, 0x38).astype(np.uint8)


def _kernel(K, idesc, swizzle=True, a_off=0):
    """One CTA: thread 0 copies A ([M, K] bytes) and B ([N, K]) to shared memory, issues
    K / 32 MMAs (each a 32-byte step along K) and commits; every warp reads its 32 lanes x
    N columns and thread t writes row t of out."""
    e = ptx.EntryOp("f8mma", [("inp", "u64"), ("out", "u64")], 128, SMEM)
    b = Builder(e.block)
    inp, out = list(e.block.args)
    tid = b.sreg("%tid.x")
    base = b.r(ptx.SmemBaseOp())
    warp = b.bin("shr", "u32", tid, 5)

    def at(off):
        return b.add32(base, off) if off else base

    def sync():
        b.add(t5.Tcgen05FenceOp("before"))
        b.add(ptx.BarSyncOp(0))
        b.add(t5.Tcgen05FenceOp("after"))

    t0 = b.setp("eq", "u32", tid, 0)
    with b.if_(t0):
        for off in (BAR0, BAR1):
            b.add(ptx.MbarrierOp("init", at(off), b.u32(1)))
        b.fence("mbarrier_init.release.cluster")
    sync()
    with b.if_(b.setp("eq", "u32", warp, 0)):
        b.add(t5.Tcgen05AllocOp(at(SLOT), 64))
        b.add(t5.Tcgen05RelinquishOp())
    sync()
    row = 128 if swizzle else 32
    nbytes = (M + N) * K                    # one byte per element
    b_off = M * row
    with b.if_(t0):
        b.add(ptx.MbarrierOp("arrive_expect_tx", at(BAR0), b.u32(nbytes)))
        b.add(ptx.CpAsyncBulkLoadOp(at(0), inp, b.u32(nbytes), at(BAR0)))
        b.add(ptx_sm90.MbarrierWaitParityOp(at(BAR0), b.u32(0)))
        hi = t5.DESC_KMAJOR if swizzle else t5.smem_desc_hi(128, 256, 0)
        taddr = b.ld("shared", "b32", at(SLOT))
        first = b.setp("ne", "u32", b.u32(0), 0)
        always = b.setp("eq", "u32", b.u32(0), 0)
        for k in range(K // 32):
            # 128-element k-blocks follow each other (A's rows, then B's); 32 bytes per MMA
            kb = (k % 4) * 32 + (k // 4) * (M + N) * 128
            da = b.imm(hi | ((a_off + kb) >> 4), "b64")
            db = b.imm(hi | ((b_off + kb) >> 4), "b64")
            b.add(t5.Tcgen05MmaOp(taddr, da, db, b.u32(idesc), first if k == 0 else always,
                                  kind=t5.MmaKind.F8F6F4))
        b.add(t5.Tcgen05CommitOp(at(BAR1)))
    b.add(ptx_sm90.MbarrierWaitParityOp(at(BAR1), b.u32(0)))
    b.add(t5.Tcgen05FenceOp("after"))
    lane_addr = b.add32(b.ld("shared", "b32", at(SLOT)), b.bin("shl", "b32", warp, 21))
    vals = list(b.add(t5.Tcgen05LdOp(lane_addr, 32)).res)
    vals += list(b.add(t5.Tcgen05LdOp(b.add32(lane_addr, 32), 16)).res)
    b.add(t5.Tcgen05WaitOp("ld"))
    orow = b.add64(out, b.mul64(b.cvt("u64", "u32", tid), 4 * N))
    for j, v in enumerate(vals):
        b.st("global", "b32", b.add64(orow, 4 * j), v)
    sync()
    with b.if_(b.setp("eq", "u32", warp, 0)):
        b.add(t5.Tcgen05DeallocOp(b.ld("shared", "b32", at(SLOT)), 64))
    b.add(ptx.YieldOp())
    return e


def _layout(A: np.ndarray, B: np.ndarray, swizzle: bool) -> np.ndarray:
    """The input bytes: per 128-element k-block, A's then B's swizzled rows (or, without
    swizzle, the one 32-element block of each)."""
    if not swizzle:
        return np.concatenate([_plain(A), _plain(B)])
    parts = []
    for k0 in range(0, A.shape[1], 128):
        parts += [_swizzled(A[:, k0:k0 + 128]), _swizzled(B[:, k0:k0 + 128])]
    return np.concatenate(parts)


def _run(e, inp: np.ndarray) -> np.ndarray:
    gm = GlobalMemory()
    a = gm.alloc(inp.size, "inp", 0)
    o = gm.alloc(4 * M * N, "out", 0)
    gm.finalize()
    gm.write_words(a, inp, dtype=np.uint8)
    run_entry(e, gm, [[a, o]], ctas=1, target="sm_100a")
    return gm.read_words(o, M * N).view(np.float32).reshape(M, N)


def _stepwise(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """The emulator's model: each K = 32 step's exact sum added to the f32 accumulator and
    rounded once to f32."""
    acc = np.zeros((A.shape[0], B.shape[0]), dtype=np.float32)
    for k0 in range(0, A.shape[1], 32):
        s = A[:, k0:k0 + 32].astype(np.float64) @ B[:, k0:k0 + 32].astype(np.float64).T
        acc = (acc.astype(np.float64) + s).astype(np.float32)
    return acc


def test_instr_desc_f8f6f4_fields_match_the_isa_table():
    d = t5.instr_desc_f8f6f4(E4, E5, 128, 240)
    f = decode_instr_desc(d)
    assert (f["dtype"], f["atype"], f["btype"], f["m"], f["n"]) == (1, 0, 1, 128, 240)
    assert not (f["trans_a"] or f["trans_b"] or f["sparse"] or f["neg_a"] or f["neg_b"])
    # the same shape of kind::f16 bf16 differs only in the type codes
    assert d ^ t5.instr_desc_f16("bf16", 128, 240) == (1 << 7)
    assert decode_instr_desc(t5.instr_desc_f8f6f4(E5, E4, 256, 64, cta_group=2))["m"] == 256
    with pytest.raises(ValueError, match="kind::f8f6f4 A is e4m3 or e5m2 .*, not bf16"):
        t5.instr_desc_f8f6f4("bf16", E4, 128, 64)
    with pytest.raises(ValueError, match="kind::f8f6f4 cta_group::1: no shape m128n40k32"):
        t5.instr_desc_f8f6f4(E4, E4, 128, 40)


@pytest.mark.parametrize("at,bt", [(E4, E4), (E4, E5), (E5, E4)])
def test_f8f6f4_mma_through_the_128_byte_swizzle(at, bt):
    rng = np.random.default_rng(7)
    K = 256                                     # two 128-element k-blocks, 8 MMAs
    A, B = _fp8_bytes(rng, M, K, at), _fp8_bytes(rng, N, K, bt)
    out = _run(_kernel(K, t5.instr_desc_f8f6f4(at, bt, M, N)), _layout(A, B, True))
    fa, fb = fp8_to_f32(A, at), fp8_to_f32(B, bt)
    np.testing.assert_array_equal(out, _stepwise(fa, fb))
    # and what torch computes (f32 accumulation in another order): within f32 rounding
    ref = torch._scaled_mm(torch.from_numpy(A).view(TORCH[at]),
                           torch.from_numpy(B).view(TORCH[bt]).T,
                           torch.ones(1), torch.ones(1), out_dtype=torch.float32)
    np.testing.assert_allclose(out, ref.numpy(), rtol=1e-5,
                               atol=1e-5 * np.abs(fa).max() * np.abs(fb).max() * K)


def test_f8f6f4_mma_without_swizzle():
    rng = np.random.default_rng(8)
    A, B = _fp8_bytes(rng, M, 32, E4), _fp8_bytes(rng, N, 32, E5)
    out = _run(_kernel(32, t5.instr_desc_f8f6f4(E4, E5, M, N), swizzle=False),
               _layout(A, B, False))
    np.testing.assert_array_equal(out, _stepwise(fp8_to_f32(A, E4), fp8_to_f32(B, E5)))


def test_every_byte_of_both_formats_reaches_the_product_exactly():
    # row r of A holds byte 128 h + r in column 0 (zeros elsewhere), B's row 0 is 1.0 at
    # column 0 (0x38 in e4m3): D[r, 0] is the byte's value (NaN and infinities included)
    for at in (E4, E5):
        for h in (0, 1):
            A = np.zeros((M, 32), dtype=np.uint8)
            A[:, 0] = np.arange(128) + 128 * h
            B = np.zeros((N, 32), dtype=np.uint8)
            B[0, 0] = 0x38
            out = _run(_kernel(32, t5.instr_desc_f8f6f4(at, E4, M, N), swizzle=False),
                       _layout(A, B, False))
            want = torch.from_numpy(A[:, 0].copy()).view(TORCH[at]).float().numpy()
            np.testing.assert_array_equal(out[:, 0], want)     # NaN == NaN here


def test_a_type_code_of_no_f8f6f4_format_is_an_error():
    rng = np.random.default_rng(9)
    inp = _layout(_fp8_bytes(rng, M, 32, E4), _fp8_bytes(rng, N, 32, E4), False)
    bad = t5.instr_desc_f8f6f4(E4, E4, M, N) | (2 << 7)     # atype 2: TF32's code
    with pytest.raises(EmuTensorMemoryError, match="atype = 2 is no .kind::f8f6f4 format"):
        _run(_kernel(32, bad, swizzle=False), inp)
    sub = t5.instr_desc_f8f6f4(E4, E4, M, N) | (5 << 10)    # btype E2M1: not modelled
    with pytest.raises(EmuUnsupported, match="btype E2M1"):
        _run(_kernel(32, sub, swizzle=False), inp)


def test_the_printed_instruction_names_the_kind():
    text = print_module([_kernel(128, t5.instr_desc_f8f6f4(E4, E4, M, N))], "sm_100a")
    assert text.count("tcgen05.mma.cta_group::1.kind::f8f6f4 [") == 4
    assert ".kind::f16" not in text


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
def test_f8f6f4_kernel_assembles_and_its_sass_has_the_fp8_mma():
    text = print_module([_kernel(128, t5.instr_desc_f8f6f4(E4, E5, M, N))], "sm_100a")
    cubin, reports, _ = assemble(text, "sm_100a")
    (rep,) = reports.values()
    assert rep.spill_stores == 0 and rep.spill_loads == 0
    if find_tool("cuobjdump") is None:
        pytest.skip("cuobjdump not installed")
    ins = instructions(sass(cubin))
    mma = [i for i in ins if "UTC" in i and "MMA" in i]
    assert len(mma) == 4 and all("UTCQMMA" in i for i in mma), mma
