"""A deliberately broken kernel of each misuse class is caught by the emulator with the
named error (kernel, rank, CTA, warp, instruction), and the same kernel done right runs:
out-of-bounds global / shared accesses, a deadlock (a signal never sent), a wait that
never ends (step bound), shared memory read before the async copy's mbarrier completed or
handed to the async proxy without fence.proxy.async, a register budget over the CTA's,
a race between ranks, a warp-collective op issued by part of a warp."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from pkc.codegen import ptx, ptx_sm90
from pkc.codegen.builder import Builder
from pkc.codegen.emit import compile_kernel, kernels_of
from pkc.emu import (EmuAsyncProxyError, EmuDeadlock, EmuMemoryError, EmuRaceError,
                     EmuRegisterBudgetError, EmuStepLimit, EmuWarpError, GlobalMemory, emulate,
                     run_entry)
from pkc.ir import parse_module

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernels import all_reduce_ir  # noqa: E402


def _entry(name, params, threads=128, smem=256):
    e = ptx.EntryOp(name, params, threads, smem)
    return e, Builder(e.block), list(e.block.args)


def _done(b):
    b.add(ptx.YieldOp())


def _buffer(gm, n_words, name="x"):
    return gm.alloc(4 * n_words, name, 0)


def test_out_of_bounds_global_load_names_kernel_cta_warp_and_instruction():
    e, b, (buf,) = _entry("oob_global", [("x", "u64")])
    tid = b.sreg("%tid.x")
    addr = b.add64(buf, b.mul64(b.cvt("u64", "u32", tid), 4))
    b.ld("global", "u32", addr)
    _done(b)
    gm = GlobalMemory()
    x = _buffer(gm, 64)                       # 64 words, 128 threads read one each
    with pytest.raises(EmuMemoryError) as ei:
        run_entry(e, gm, [[x]])
    w = ei.value.where
    assert (w.kernel, w.rank, w.cta, w.warp, w.lane) == ("oob_global", 0, 0, 2, 0)
    assert "ptx.ld" in w.instruction
    assert "0 bytes past the end of 'x'" in str(ei.value)


def test_out_of_bounds_shared_store():
    e, b, () = _entry("oob_shared", [], smem=256)
    tid = b.sreg("%tid.x")
    b.st("shared", "u32", b.add32(b.r(ptx.SmemBaseOp()), b.mul32(tid, 4)), tid)
    _done(b)
    with pytest.raises(EmuMemoryError, match="256 bytes of dynamic shared memory") as ei:
        run_entry(e, GlobalMemory(), [[]])
    assert ei.value.where.warp == 2 and "ptx.st" in ei.value.where.instruction


def _compiled(text):
    (kop,) = kernels_of(parse_module(text, "t.mlir"))
    return compile_kernel(kop, "sm_90a")


def _inputs(world, rows=8, cols=16):
    return [[torch.randn(rows, cols)] for _ in range(world)]


def test_signal_never_sent_is_a_deadlock_naming_the_wait():
    ck = _compiled(all_reduce_ir(2, signal=False))
    with pytest.raises(EmuDeadlock) as ei:
        emulate(ck, _inputs(2))
    msg = str(ei.value)
    assert "ptx.spin_wait" in msg and "waits until >= 2" in msg and "signals arrived" in msg
    assert "kernel @all_reduce_one_shot, rank 0, CTA 0, warp 0" in msg


def test_the_same_kernel_with_its_signals_runs():
    ck = _compiled(all_reduce_ir(2))
    x = _inputs(2)
    out = emulate(ck, x)
    assert torch.equal(out[0][0], x[0][0] + x[1][0]) and torch.equal(out[1][0], out[0][0])


def test_reading_a_peer_buffer_without_waiting_is_a_race():
    ck = _compiled(all_reduce_ir(2, wait=False))
    with pytest.raises(EmuRaceError, match="race between ranks") as ei:
        emulate(ck, _inputs(2))
    assert ei.value.where.kernel == "all_reduce_one_shot"


def test_a_wait_that_keeps_polling_hits_the_step_bound():
    e, b, () = _entry("forever", [])
    with b.for_(0, 1 << 40, 1):
        pass
    _done(b)
    with pytest.raises(EmuStepLimit, match="more than 2000 steps"):
        run_entry(e, GlobalMemory(), [[]], max_steps=2000)


def _bulk_kernel(wait: bool, fence: bool):
    """Thread 0: an mbarrier, a 64-byte bulk load global -> shared (at 128), then either
    waits on the mbarrier and reads, or reads at once; then all threads write shared and
    bulk-store it back, with or without fence.proxy.async."""
    e, b, (src, dst) = _entry("bulk", [("src", "u64"), ("dst", "u64")], smem=256)
    tid = b.sreg("%tid.x")
    base = b.r(ptx.SmemBaseOp())
    with b.if_(b.setp("eq", "u32", tid, 0)):
        b.add(ptx.MbarrierOp("init", base, b.u32(1)))
        b.fence("mbarrier_init.release.cluster")
        b.add(ptx.CpAsyncBulkLoadOp(b.add32(base, 128), src, b.u32(64), base))
        state = b.add(ptx.MbarrierOp("arrive_expect_tx", base, b.u32(64))).results[0]
        if wait:
            b.add(ptx.MbarrierWaitOp(base, state, b.u64(1000)))
        v = b.ld("shared", "u32", b.add32(base, 128))
        b.st("shared", "u32", b.add32(base, 192), v)
        if fence:
            b.fence("proxy.async.shared::cta")
        b.add(ptx.CpAsyncBulkStoreOp(dst, b.add32(base, 128), b.u32(128)))
        b.add(ptx.BulkGroupOp())
        b.add(ptx.BulkGroupOp(wait=0))
    _done(b)
    gm = GlobalMemory()
    s, d = gm.alloc(64, "src", 0), gm.alloc(128, "dst", 0)
    gm.finalize()
    gm.write_words(s, np.arange(16, dtype=np.uint32), np.uint32)
    return e, gm, [[s, d]], d


def test_shared_read_before_the_mbarrier_completed_is_an_async_proxy_error():
    e, gm, params, _ = _bulk_kernel(wait=False, fence=True)
    with pytest.raises(EmuAsyncProxyError, match="has not waited on") as ei:
        run_entry(e, gm, params)
    assert "ptx.ld" in ei.value.where.instruction


def test_generic_writes_handed_to_the_async_proxy_without_a_fence():
    e, gm, params, _ = _bulk_kernel(wait=True, fence=False)
    with pytest.raises(EmuAsyncProxyError, match="fence.proxy.async") as ei:
        run_entry(e, gm, params)
    assert "cp_async_bulk_store" in ei.value.where.instruction


def test_bulk_copies_done_right_move_the_bytes():
    e, gm, params, d = _bulk_kernel(wait=True, fence=True)
    run_entry(e, gm, params)
    out = gm.read_words(d, 32, np.uint32)
    assert out[:16].tolist() == list(range(16)) and out[16] == 0


def _setmaxnreg_kernel(consumer_regs: int, producer_dec: bool):
    e, b, () = _entry("budget", [], threads=384, smem=0)
    wg = b.bin("shr", "u32", b.sreg("%tid.x"), 7)
    with b.if_(b.setp("eq", "u32", wg, 0)):
        if producer_dec:
            b.add(ptx_sm90.SetmaxnregOp("dec", 40))
    with b.if_(b.setp("ne", "u32", wg, 0)):
        b.add(ptx_sm90.SetmaxnregOp("inc", consumer_regs))
    _done(b)
    return e


def test_register_budget_over_the_limit():
    # 384 threads start at 168 registers each; two warpgroups at 256 and one at 168 need
    # 87040 > 65536 registers: setmaxnreg.inc can never proceed
    with pytest.raises(EmuRegisterBudgetError, match="setmaxnreg.inc 256 waits") as ei:
        run_entry(_setmaxnreg_kernel(256, producer_dec=False), GlobalMemory(), [[]])
    assert "ptx.setmaxnreg" in ei.value.where.instruction
    # the GEMM's split (40 + 2 x 232) fits once the producer gave its registers back
    run_entry(_setmaxnreg_kernel(232, producer_dec=True), GlobalMemory(), [[]])


def test_mma_sync_by_part_of_a_warp():
    e, b, () = _entry("half_warp", [], threads=32, smem=0)
    lane = b.sreg("%laneid")
    z = b.u32(0)
    f = b.imm(0.0, "f32")
    with b.if_(b.setp("lt", "u32", lane, 16)):
        b.add(ptx.MmaSyncOp("m16n8k16", "f32.bf16.bf16.f32", [z] * 4, [z] * 2, [f] * 4))
    _done(b)
    with pytest.raises(EmuWarpError, match="lanes of its warp") as ei:
        run_entry(e, GlobalMemory(), [[]])
    assert "ptx.mma_sync" in ei.value.where.instruction
