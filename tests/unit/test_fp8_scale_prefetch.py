"""The fp8 GEMM's scale prefetch (``pks.scale_prefetch``, sm_90a): schedule-matmul loads a
tile's scales (A's rows, B's columns spread over the warp's lanes, the bias, the
tensor-wise scales) into registers before the tile's main loop, and the epilogue's
``pks.acc_scale`` reads them there (B's columns by ``shfl.sync.idx``). Checked: the
schedule (where the prefetch sits, what reads it, the option that turns it off), the
verifiers, the emulator running the kernel with and without it bitwise equal (the same
values are multiplied in the same order) over tiles whose columns are not whole groups of
64 (bn 128 / 144-column tails, 160), 256 columns in CTA pairs, two row slices per
warpgroup, one consumer and the register epilogue, and ``shfl.sync.idx`` on the emulator (a warp-collective: lanes of an
incomplete warp wait); the fused kinds reading it (A's rows of a gathered shard not);
ptxas without spills."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from xdsl.utils.exceptions import VerifyException

from pkc.codegen import compile_kernel
from pkc.codegen.builder import Builder
from pkc.codegen.emit import kernels_of
from pkc.codegen.ptxas import find_ptxas
from pkc.dialects import schedule as s
from pkc.emu import EmuWarpError, GlobalMemory, run_entry
from pkc.ir import make_context, parse_module, verify_module
from pkc.passes.remarks import plan_of
from pkc.passes.schedule_matmul import ScheduleMatmul

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from fp8_gemm import module_text  # noqa: E402

_DT = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


def _kernel(M, N, K, row, bias, variant, prefetch, ta="e4m3", tb="e4m3"):
    m = parse_module(module_text(M, N, K, row, bias, ta, tb), "fp8.mlir")
    ScheduleMatmul(variant=variant, scale_prefetch=prefetch).apply(make_context(), m)
    verify_module(m)
    (kop,) = kernels_of(m)
    return kop


def _inputs(M, N, K, row, bias, ta="e4m3", tb="e4m3", seed=5):
    g = torch.Generator().manual_seed(seed)
    out = [(torch.randn(M, K, generator=g) * 2).to(_DT[ta]),
           (torch.randn(N, K, generator=g) * 2).to(_DT[tb]),
           torch.rand(M, 1, generator=g) + 0.5 if row else torch.tensor([0.75]),
           torch.rand(1, N, generator=g) + 0.5 if row else torch.tensor([1.25])]
    if bias:
        out.append(torch.randn(N, generator=g).to(torch.bfloat16))
    return out


def test_the_prefetch_sits_before_the_main_loop_and_the_epilogue_reads_it():
    kop = _kernel(200, 144, 160, True, True, "", True)
    (pf,) = [o for o in kop.walk() if isinstance(o, s.ScalePrefetchOp)]
    assert pf.with_rows is not None and pf.bias is not None
    # in the consumer's tile loop, right before the tile's k-loop
    nxt = pf.next_op
    assert nxt.name == "scf.for" and any(isinstance(o, s.MmaAsyncOp) for o in nxt.walk())
    scales = [o for o in kop.walk() if isinstance(o, s.AccScaleOp)]
    assert scales and all(o.prefetched == pf.result and o.rows_prefetched() for o in scales)
    assert plan_of(kop)["scales"] == "prefetched"
    # off: the scales are read per piece in the epilogue, as before
    kop = _kernel(200, 144, 160, True, True, "", False)
    assert not [o for o in kop.walk() if isinstance(o, s.ScalePrefetchOp)]
    assert all(o.prefetched is None for o in kop.walk() if isinstance(o, s.AccScaleOp))
    assert plan_of(kop)["scales"] == "epilogue"
    ptx = compile_kernel(kop, "sm_90a").ptx
    # no scale shuffles: the one shfl is the warpgroup index's broadcast at the start
    assert ptx.count("shfl.sync") == 1


def test_prefetch_verifiers_name_the_op_and_the_mismatch():
    kop = _kernel(64, 32, 64, False, False, "", True)
    (pf,) = [o for o in kop.walk() if isinstance(o, s.ScalePrefetchOp)]
    assert pf.with_rows is None                     # tensor-wise A: no rows to load
    from xdsl.dialects.builtin import UnitAttr
    pf.attributes["with_rows"] = UnitAttr()
    with pytest.raises(VerifyException, match="'pks.scale_prefetch' with_rows: scale_a is "
                                              "tensor-wise"):
        pf.verify_()
    del pf.attributes["with_rows"]
    sc = next(o for o in kop.walk() if isinstance(o, s.AccScaleOp))
    ops = list(sc.operands)       # acc, SA, SB, row, col, rows, cols, prefetched
    sc.operands = [*ops[:4], ops[3], *ops[5:]]                 # col := the row's value
    with pytest.raises(VerifyException, match="'pks.acc_scale' prefetched: its "
                                              "pks.scale_prefetch must name the same"):
        sc.verify_()


def _emulate(kop, ins):
    from pkc.emu import emulate

    ck = compile_kernel(kop, "sm_90a")
    (got,) = emulate(ck, [ins], kop=kop)[0]
    return got, ck.ptx


@pytest.mark.parametrize("shape,row,bias,variant,types", [
    ((136, 144, 160), True, True, "128x128_s6_tma", ("e4m3", "e5m2")),   # 16-column tail
    ((130, 160, 128), True, False, "128x160_s5_tma", ("e4m3", "e4m3")),  # 160: 3 groups
    ((200, 64, 128), True, True, "256x128_s4_tma", ("e5m2", "e4m3")),    # 2 row slices
    ((70, 256, 64), True, True, "64x256_c1_s5", ("e4m3", "e4m3")),       # one consumer
    ((64, 32, 64), True, True, "128x256_s3_global", ("e4m3", "e4m3")),   # register epilogue
    ((72, 48, 96), False, True, "128x128_s6_tma", ("e4m3", "e4m3")),     # tensor-wise, bias
    ((260, 256, 128), True, True, "128x256_s4_cl2", ("e4m3", "e4m3")),   # CTA pairs, n256
])
def test_emulated_kernel_with_the_prefetch_equals_the_one_without_bitwise(shape, row, bias,
                                                                         variant, types):
    ins = _inputs(*shape, row, bias, *types)
    new, ptx = _emulate(_kernel(*shape, row, bias, variant, True, *types), ins)
    old, _ = _emulate(_kernel(*shape, row, bias, variant, False, *types), ins)
    assert ("shfl.sync.idx.b32" in ptx) == (row or bias)
    assert torch.equal(new.view(torch.int16), old.view(torch.int16))
    ref = torch._scaled_mm(ins[0], ins[1].t(), ins[2] if row else ins[2].reshape(()),
                           ins[3] if row else ins[3].reshape(()),
                           bias=ins[4] if bias else None, out_dtype=torch.bfloat16)
    d = (new.float() - ref.float()).abs()
    assert float((d <= ref.float().abs() * 2 ** -7 + 0.5).float().mean()) == 1.0


def _shfl_probe(threads: int, partial: bool = False):
    from pkc.codegen import ptx

    e = ptx.EntryOp("shfl_probe", [("out", "u64")], threads, 0)
    b = Builder(e.block)
    (out,) = e.block.args
    tid = b.sreg("%tid.x")
    v = b.bin("mul.lo", "u32", tid, 7)
    lane = b.add32(b.bin("mul.lo", "u32", tid, 5), 3 + 64)
    if partial:
        with b.if_(b.setp("lt", "u32", b.bin("and", "b32", tid, 31), 16)):
            b.r(ptx.ShflIdxOp(v, lane))
    else:
        got = b.r(ptx.ShflIdxOp(v, lane))
        b.st("global", "u32", b.add64(out, b.mul64(b.cvt("u64", "u32", tid), 4)), got)
    b.add(ptx.YieldOp())
    return e


def test_shfl_idx_on_the_emulator_reads_the_named_lane_of_the_whole_warp():
    """64 threads: every lane reads the value of lane (5 l + 3) % 32 of its own warp (the
    lane operand's high bits ignored: clamp 31); half a warp alone waits for the rest."""
    gm = GlobalMemory()
    x = gm.alloc(4 * 64, "out", 0)
    gm.finalize()
    run_entry(_shfl_probe(64), gm, [[x]])
    t = torch.arange(64)
    src = (t // 32) * 32 + (t * 5 + 3 + 64) % 32
    got = torch.from_numpy(gm.read_words(x, 64).astype("int64"))
    assert torch.equal(got, src * 7)
    with pytest.raises(EmuWarpError, match="lanes of its warp"):
        run_entry(_shfl_probe(32, partial=True), gm, [[x]])


def test_fused_kinds_read_the_prefetch_but_not_a_gathered_shards_rows():
    from fp8_fused import compile_fused

    for kind, W, rows in (("ar", 2, True), ("rs", 2, True), ("ag", 2, False), ("ag", 1, True)):
        ck, kop = compile_fused(W, 256, 128, 128, True, kind)
        (pf,) = [o for o in kop.walk() if isinstance(o, s.ScalePrefetchOp)]
        scales = [o for o in kop.walk() if isinstance(o, s.AccScaleOp)]
        assert all(o.prefetched == pf.result for o in scales), kind
        assert (pf.with_rows is not None) == rows, (kind, W)
        assert all(o.rows_prefetched() == rows for o in scales), (kind, W)
        assert "shfl.sync.idx.b32" in ck.ptx


def test_sm100_builds_no_prefetch():
    m = parse_module(module_text(256, 256, 256, True, False), "fp8.mlir")
    ScheduleMatmul(target="b200").apply(make_context(), m)
    (kop,) = kernels_of(m)
    assert not [o for o in kop.walk() if isinstance(o, s.ScalePrefetchOp)]


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
@pytest.mark.parametrize("variant", ["128x256_s4_tma", "256x128_s4_tma", "128x160_s5_tma",
                                     "128x256_s4_cl2"])
def test_prefetching_kernels_assemble_without_spills(variant):
    from pkc.codegen.ptxas import assemble_one

    kop = _kernel(1000, 512, 256, True, True, variant, True, "e4m3", "e5m2")
    _, res = assemble_one(compile_kernel(kop, "sm_90a").ptx)
    assert res.spill_stores == 0 and res.spill_loads == 0 and res.stack_bytes == 0
