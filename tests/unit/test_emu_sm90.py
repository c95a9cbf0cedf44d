"""The emulator's Hopper instructions: the IR-built GEMM (TMA loads into 128-byte-swizzled
slots, wgmma from shared-memory descriptors, the accumulator's fragment layout in the
epilogue, TMA stores, warp roles with setmaxnreg, clusters with multicast) against the
reference interpreter, TMA boxes (swizzle, out-of-bounds fill) against their definition,
and the GEMM broken on purpose (a missing mbarrier wait, wgmma wait, proxy fence or
bulk-group wait) caught with the named error."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from pkc.codegen import compile_kernel, ptx, ptx_sm90
from pkc.codegen.builder import Builder
from pkc.codegen.emit import kernels_of
from pkc.emu import EmuAsyncProxyError, EmuError, GlobalMemory, emulate, run_entry
from pkc.emu.check import check_module
from pkc.emu.memory import GLOBAL_BASE
from pkc.emu.tensormap import TensorMap, swizzle
from pkc.interp import random_inputs
from pkc.ir import make_context, parse_module
from pkc.passes.schedule_matmul import ScheduleMatmul

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from gemm_ir import module_text  # noqa: E402


def _gemm(M, N, K, variant="", layout="nk"):
    m = parse_module(module_text(M, N, K, layout), "gemm.mlir")
    ScheduleMatmul(variant=variant).apply(make_context(), m)
    return m


@pytest.mark.parametrize("shape,variant,layout,exact", [
    ((128, 128, 64), "", "nk", True),               # one k-block: bitwise
    ((200, 136, 72), "128x128_s6_tma", "nk", False),  # tails: TMA zero fill, clipped stores
    ((256, 256, 128), "128x256_s4_kn", "kn", False),  # N-major B (transposed descriptor)
    ((256, 256, 128), "128x128_s6_cl2", "nk", False),  # cluster of 2, multicast loads
    ((136, 456, 136), "128x224_s4_tma", "nk", False),  # 224 columns: 7 epilogue pieces
])
def test_ir_built_gemm_matches_the_interpreter(shape, variant, layout, exact):
    m = _gemm(*shape, variant, layout)
    res = check_module(m, random_inputs(m, 1, 0, "mm"), 1, func_name="mm")
    assert res.ok, str(res.difference)
    (k,) = res.kernels
    # the kernel rounds the f32 accumulator after each k16 step, the interpreter sums
    # exactly: at most one bf16 ulp apart, equal where K fits one wgmma chain
    assert k.exact == exact or (not exact and k.max_abs < 1e-2)


def _broken_gemm(match, nth: int = 1, M: int = 128):
    """The Mx128x64 GEMM with the ``nth`` instruction that ``match`` accepts erased."""
    (kop,) = kernels_of(_gemm(M, 128, 64, "128x128_s6_tma"))
    ck = compile_kernel(kop, "sm_90a")
    hits = [op for op in ck.entry_op.walk() if match(op)]
    assert len(hits) >= nth, f"{len(hits)} matching instructions"
    hits[nth - 1].detach()
    hits[nth - 1].erase()
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(M, 64, generator=gen).to(torch.bfloat16)
    w = torch.randn(128, 64, generator=gen).to(torch.bfloat16)
    return ck, kop, [[x, w]]


def test_gemm_without_the_consumer_wait_reads_a_tma_slot_too_early():
    ck, kop, x = _broken_gemm(lambda op: isinstance(op, ptx_sm90.MbarrierWaitParityOp), 2)
    with pytest.raises(EmuAsyncProxyError, match="wgmma reads shared memory that a TMA") as ei:
        emulate(ck, x, kop=kop)
    assert "ptx.wgmma" in ei.value.where.instruction and ei.value.where.warp >= 4


def test_gemm_without_wgmma_wait_reads_an_accumulator_in_flight():
    ck, kop, x = _broken_gemm(lambda op: isinstance(op, ptx_sm90.WgmmaSyncOp)
                              and op.kind.data == "wait" and op.pending.data == 0)
    with pytest.raises(EmuError, match="accumulator read while a wgmma") as ei:
        emulate(ck, x, kop=kop)
    assert "ptx.frag_get" in ei.value.where.instruction


def test_gemm_without_the_fence_before_its_tma_store():
    ck, kop, x = _broken_gemm(lambda op: isinstance(op, ptx.FenceOp)
                              and op.kind.data.startswith("proxy.async"), 2)
    with pytest.raises(EmuAsyncProxyError, match="fence.proxy.async") as ei:
        emulate(ck, x, kop=kop)
    assert "ptx.tma_store" in ei.value.where.instruction


def test_gemm_without_the_read_wait_overwrites_a_staging_buffer():
    """Two tiles on one CTA: the second tile's second epilogue piece rewrites the staging
    buffer that the first tile's last TMA store may still read."""
    ck, kop, x = _broken_gemm(lambda op: isinstance(op, ptx.BulkGroupOp)
                              and op.read is not None, 2, M=256)
    with pytest.raises(EmuAsyncProxyError, match="still reads") as ei:
        emulate(ck, x, kop=kop, sms=1)
    assert "ptx.st" in ei.value.where.instruction


@pytest.mark.parametrize("swz", [0, 32, 64, 128])
def test_tma_box_swizzle_and_out_of_bounds_fill(swz):
    """A 2-d box half outside a 20 x 24 bf16 tensor, loaded into shared memory and copied
    out raw: every element where the swizzle formula puts it, zeros outside the tensor."""
    rows, cols = 20, 24
    box = [swz // 2 if swz else 16, 8]                   # inner box = the swizzle span
    e = ptx.EntryOp("tma_box", [("tmap", "tmap"), ("out", "u64")], 32, 2048)
    b = Builder(e.block)
    tmap, out = e.block.args
    tid = b.sreg("%tid.x")
    base = b.r(ptx.SmemBaseOp())
    with b.if_(b.setp("eq", "u32", tid, 0)):
        b.add(ptx.MbarrierOp("init", base, b.u32(1)))
        dst = b.add32(base, 1024)
        c0, c1 = b.u32((cols - box[0] // 2) & 0xFFFFFFFF), b.u32(rows - 4)  # past both edges
        b.add(ptx_sm90.TmaLoadOp(dst, tmap, [c0, c1], base))
        b.add(ptx_sm90.MbarrierArriveOp(base, b.u32(box[0] * box[1] * 2)))
        b.add(ptx_sm90.MbarrierWaitParityOp(base, b.u32(0)))
        with b.for_(0, box[0] * box[1] // 2, 1, "s32") as i:
            v = b.ld("shared", "u32", b.add32(dst, b.mul32(i, 4)))
            b.st("global", "u32", b.add64(out, b.mul64(b.cvt("u64", "u32", i), 4)), v)
    b.add(ptx.YieldOp())
    gm = GlobalMemory()
    data = torch.arange(rows * cols, dtype=torch.int16).to(torch.bfloat16).reshape(rows, cols)
    x = gm.alloc(rows * cols * 2, "x", 0)
    rec = gm.alloc(128, "tmap", 0)
    o = gm.alloc(box[0] * box[1] * 2, "out", 0)
    gm.finalize()
    gm.write_tensor(x, data)
    tm = TensorMap(x, 2, [cols, rows], [2, 2 * cols], box, swz, element="bf16")
    gm.heap[rec - GLOBAL_BASE: rec - GLOBAL_BASE + 128] = tm.encode()
    run_entry(e, gm, [[rec, o]])
    raw = gm.read_tensor(o, [box[0] * box[1]], torch.bfloat16)
    want = torch.zeros(box[0] * box[1], dtype=torch.bfloat16)
    for r in range(box[1]):
        for c in range(box[0]):
            gr, gc = rows - 4 + r, cols - box[0] // 2 + c
            phys = int(swizzle(np.array([1024 + 2 * (r * box[0] + c)]), swz)[0]) - 1024
            want[phys // 2] = data[gr, gc] if 0 <= gr < rows and 0 <= gc < cols else 0
    assert torch.equal(raw, want)
    if swz == 128:   # the pattern itself: row 1's first 16-byte chunk lands in chunk 1
        assert int(swizzle(np.array([128]), 128)[0]) == 128 + 16


def test_wgmma_step_truncates_as_the_h200():
    """1 + 1.5 * 2^-24: rounding to nearest gives 1 + 2^-23, the H200's truncating sum
    1.0 (the model the device run fitted and then confirmed bitwise on fresh inputs)."""
    from pkc.emu.ops_sm90 import accumulate_exact, accumulate_h200

    A, B, C = np.zeros((64, 16)), np.zeros((16, 8)), np.zeros((64, 8))
    A[0, 0], B[0, 0], C[0, 0] = 1.5, 2.0 ** -24, 1.0
    assert accumulate_h200(A, B, C)[0, 0] == np.float32(1.0)
    assert accumulate_exact(A, B, C)[0, 0] == np.float32(1 + 2 ** -23)
    # small terms far below the largest are truncated away before the sum
    A[0, 1], B[1, 0] = 1.0, 2.0 ** -30
    assert accumulate_h200(A, B, C)[0, 0] == np.float32(1.0)


def _k_steps(A, B, step):
    """C = A @ B.T by k16 steps of ``step`` (rows x 16, 16 x n, acc) -> f32."""
    C = None
    for k0 in range(0, A.shape[1], 16):
        C = step(A[:, k0:k0 + 16], B[:, k0:k0 + 16].T, C)
    return C


def test_wgmma_step_is_bitwise_the_h200_on_the_probe_rows():
    """The rows of a device probe (tests/gpu/wgmma_probe.py: 2.9 M outputs of pkc's GEMM on
    the H200, K = 16-128, magnitudes spread over 2^-8..2^8) where candidate models
    differed: the model matches every output bit; aligning at the renormalized product
    exponent (the model before this probe) misses some."""
    import torch

    from pkc.emu.ops_sm90 import accumulate_h200

    def renormalized(A, B, C, bits=26):
        P = A[:, None, :] * B.T[None, :, :]
        T = P if C is None else np.concatenate([P, C[:, :, None]], axis=2)
        _, ex = np.frexp(T)
        emax = np.where(T == 0, -100000, ex).max(axis=2, keepdims=True)
        ulp = np.ldexp(1.0, np.maximum(emax - bits, -1074))
        s = (np.trunc(T / ulp) * ulp).sum(axis=2)
        f = s.astype(np.float32)
        away = np.abs(f.astype(np.float64)) > np.abs(s)
        return np.where(away, np.nextafter(f, np.float32(0)), f).astype(np.float32)

    data = torch.load(Path(__file__).parent / "data" / "wgmma_h200_probe.pt")
    assert len(data) == 4
    old_misses = 0
    for name, d in data.items():
        A = d["a"].float().numpy().astype(np.float64)
        B = d["b"].float().numpy().astype(np.float64)
        want = d["c"].view(torch.int16)
        got = torch.from_numpy(_k_steps(A, B, accumulate_h200)).to(torch.bfloat16)
        assert torch.equal(got.view(torch.int16), want), name
        old = torch.from_numpy(_k_steps(A, B, renormalized)).to(torch.bfloat16)
        old_misses += int((old.view(torch.int16) != want).sum())
    assert old_misses > 0
