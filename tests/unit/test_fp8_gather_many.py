"""Several fp8 scaled matmuls of one all-gather (sharing the gathered A and A's scale:
tensor-wise, or row-wise gathered with A) are one kernel: overlap fuses them
(``all_gather_mm`` with inputs X, SX, B0.., SB0..), the kernel level computes each
``Y_i = SA * SB_i * (G @ B_i)`` (interpreter vs the graph, W in {2, 3, 4, 8}, odd shapes),
and schedule-fused builds the one sm_90a kernel over every weight's column tiles
(gather_many.ManyWeights) whose tiles pick their B map, C map and B scale
(``pks.scale_select``) by the tile's weight: scheduled vs kernel level in the interpreter,
the emulator at W = 2 against torch._scaled_mm of the gathered A, ptxas; the same on
sm_100a (tensor-wise; the row scale's gather is sm_90a only, as for one weight); a scaled
matmul with another A scale stays beside the kernel, with a remark."""

from __future__ import annotations

import pytest
import torch

from pkc.codegen import compile_kernel
from pkc.codegen.ptxas import find_ptxas
from pkc.emu.check import check_module
from pkc.interp import interpret, random_inputs
from pkc.interp.equivalence import compare_outputs
from pkc.ir import parse_module
from pkc.passes.pipelines import schedule_for_target
from pkc.passes.registry import run_pipeline
from pkc.passes.remarks import plan_of, remarks_of
from pkc.testing import check_transform
from tests.unit.test_fp8_fused import TOL, check_levels
from tests.unit.test_fp8_overlap import E4, E5

__all__ = ["many_ir"]


def many_ir(W: int, Ms: int, ns, K: int, row: bool = True, out: str = "bf16",
            gathered: bool = False) -> str:
    """all_gather of an fp8 [Ms, K] shard (row-wise: and of its [Ms, 1] scale) feeding one
    scaled matmul per width in ``ns``, each with its own B [K, N_i] and B scale."""
    M = W * Ms
    sa = f"{M}x1" if row else "1"
    sbs = [f"1x{n}" if row else "1" for n in ns]
    args = [f"%x: tensor<{Ms}x{K}x{E4}>", f"%sa: tensor<{f'{Ms}x1' if row else '1'}xf32>"]
    args += [f"%b{i}: tensor<{K}x{n}x{E5}>" for i, n in enumerate(ns)]
    args += [f"%sb{i}: tensor<{sb}xf32>" for i, sb in enumerate(sbs)]
    body = [f"  %g = pk.all_gather %x {{dim = 0 : i64, world = {W} : i64}} : "
            f"tensor<{Ms}x{K}x{E4}> -> tensor<{M}x{K}x{E4}>"]
    if row:
        body.append(f"  %gs = pk.all_gather %sa {{dim = 0 : i64, world = {W} : i64}} : "
                    f"tensor<{Ms}x1xf32> -> tensor<{M}x1xf32>")
    for i, (n, sb) in enumerate(zip(ns, sbs)):
        body.append(f"  %y{i} = pk.scaled_matmul %g, %b{i} scales({'%gs' if row else '%sa'}, "
                    f"%sb{i}) : (tensor<{M}x{K}x{E4}>, tensor<{K}x{n}x{E5}>, "
                    f"tensor<{sa}xf32>, tensor<{sb}xf32>) -> tensor<{M}x{n}x{out}>")
    rets = [f"%y{i}" for i in range(len(ns))] + (["%g"] if gathered else [])
    types = [f"tensor<{M}x{n}x{out}>" for n in ns] + ([f"tensor<{M}x{K}x{E4}>"]
                                                        if gathered else [])
    return (f"func.func @main({', '.join(args)}) -> ({', '.join(types)}) {{\n"
            + "\n".join(body) + f"\n  func.return {', '.join(rets)} : {', '.join(types)}\n}}")


def _kernels(text: str, target: str = "h200", pipeline: str = "default{force=true}"):
    kernel_level = parse_module(text)
    run_pipeline(pipeline, kernel_level)
    sched, _ = schedule_for_target(kernel_level, target)
    return kernel_level, sched, [o for o in sched.walk() if o.name == "pk.kernel"]


# (W, shard rows (odd), widths, K, A's and B's scales row-wise)
KERNEL_CASES = [(2, 13, (32, 48), 64, True), (3, 7, (48, 16, 32), 96, False),
                (4, 5, (16, 32, 16, 48), 64, True), (8, 3, (32, 16), 64, False)]


@pytest.mark.parametrize("W,Ms,ns,K,row", KERNEL_CASES,
                         ids=[f"W{c[0]}-{len(c[2])}w-{'row' if c[4] else 'tensor'}"
                              for c in KERNEL_CASES])
def test_kernel_level_fuses_every_weight(W, Ms, ns, K, row):
    text = many_ir(W, Ms, ns, K, row)
    check_transform(lambda w: parse_module(text), "overlap{force=true}", world_sizes=(W,),
                    tolerance=TOL)
    module = parse_module(text)
    run_pipeline("overlap{force=true}", module)
    (kop,) = [o for o in module.walk() if o.name == "pk.kernel"]
    assert len(kop.inputs) == 2 + 2 * len(ns) and len(kop.outputs) == len(ns)
    assert not [o for o in module.walk() if o.name == "pk.scaled_matmul"]


MIXED = """func.func @main(%x: tensor<13x64xf8E4M3FN>, %sa: tensor<1xf32>, %sa2: tensor<1xf32>, %b0: tensor<64x32xf8E5M2>, %b1: tensor<64x48xf8E5M2>, %b2: tensor<64x16xf8E5M2>, %sb0: tensor<1xf32>, %sb1: tensor<1xf32>, %sb2: tensor<1xf32>) -> (tensor<26x32xbf16>, tensor<26x48xbf16>, tensor<26x16xbf16>) {
  %g = pk.all_gather %x {dim = 0 : i64, world = 2 : i64} : tensor<13x64xf8E4M3FN> -> tensor<26x64xf8E4M3FN>
  %y0 = pk.scaled_matmul %g, %b0 scales(%sa, %sb0) : (tensor<26x64xf8E4M3FN>, tensor<64x32xf8E5M2>, tensor<1xf32>, tensor<1xf32>) -> tensor<26x32xbf16>
  %y1 = pk.scaled_matmul %g, %b1 scales(%sa2, %sb1) : (tensor<26x64xf8E4M3FN>, tensor<64x48xf8E5M2>, tensor<1xf32>, tensor<1xf32>) -> tensor<26x48xbf16>
  %y2 = pk.scaled_matmul %g, %b2 scales(%sa, %sb2) : (tensor<26x64xf8E4M3FN>, tensor<64x16xf8E5M2>, tensor<1xf32>, tensor<1xf32>) -> tensor<26x16xbf16>
  func.return %y0, %y1, %y2 : tensor<26x32xbf16>, tensor<26x48xbf16>, tensor<26x16xbf16>
}"""


def test_a_consumer_with_another_a_scale_stays_with_a_remark():
    """Of three scaled matmuls, the two sharing A's scale are one kernel (which returns
    the gathered tensor); the third reads it, with the remark saying why."""
    check_transform(lambda w: parse_module(MIXED), "overlap{force=true}", world_sizes=(2,),
                    tolerance=TOL)
    kernel_level, sched, (kop,) = _kernels(MIXED)
    assert plan_of(kop)["weights"] == 2 and kop.schedule() is not None
    (left,) = [o for o in sched.walk() if o.name == "pk.scaled_matmul"]
    assert any("whose A scale is not the fused matmuls'" in r for r in remarks_of(left))
    ins = random_inputs(parse_module(MIXED), 2, seed=6)
    compare_outputs(interpret(parse_module(MIXED), [list(x) for x in ins], 2),
                    interpret(sched, [list(x) for x in ins], 2), tolerance=TOL,
                    context="graph vs scheduled")


BLOCKS = """func.func @main(%x: tensor<2x13x64xf8E4M3FN>, %w0: tensor<64x32xf8E5M2>, %w1: tensor<64x48xf8E5M2>, %s: tensor<2x13x1xf32>, %sb0: tensor<1x32xf32>, %sb1: tensor<1x48xf32>) -> (tensor<52x32xbf16>, tensor<52x48xbf16>) {
  %g = pk.all_gather %x {dim = 1 : i64, world = 2 : i64} : tensor<2x13x64xf8E4M3FN> -> tensor<2x26x64xf8E4M3FN>
  %gs = pk.all_gather %s {dim = 1 : i64, world = 2 : i64} : tensor<2x13x1xf32> -> tensor<2x26x1xf32>
  %v = pk.reshape %g : tensor<2x26x64xf8E4M3FN> -> tensor<52x64xf8E4M3FN>
  %sv = pk.reshape %gs : tensor<2x26x1xf32> -> tensor<52x1xf32>
  %y0 = pk.scaled_matmul %v, %w0 scales(%sv, %sb0) : (tensor<52x64xf8E4M3FN>, tensor<64x32xf8E5M2>, tensor<52x1xf32>, tensor<1x32xf32>) -> tensor<52x32xbf16>
  %y1 = pk.scaled_matmul %v, %w1 scales(%sv, %sb1) : (tensor<52x64xf8E4M3FN>, tensor<64x48xf8E5M2>, tensor<52x1xf32>, tensor<1x48xf32>) -> tensor<52x48xbf16>
  func.return %y0, %y1 : tensor<52x32xbf16>, tensor<52x48xbf16>
}"""


def test_blocks_of_rows_over_every_weight():
    """A gather along dim 1 of [2, 13, 64] (DTensor Shard(1): 2 blocks of rows per shard)
    and of its row scale, two scaled matmuls of the rows view: one kernel over both
    weights on the blocks' parts (BlockRowScaleParts), emulated at W = 2."""
    kernel_level, sched, (kop,) = _kernels(BLOCKS)
    p = plan_of(kop)
    assert (p["weights"], p["batches"]) == (2, 2) and kop.schedule() is not None
    assert [o for o in kop.walk() if o.name == "pks.scale_select"]
    ins = random_inputs(parse_module(BLOCKS), 2, seed=7)
    compare_outputs(interpret(parse_module(BLOCKS), [list(x) for x in ins], 2),
                    interpret(sched, [list(x) for x in ins], 2), tolerance=TOL,
                    context="graph vs scheduled")
    res = check_module(sched, ins, 2, tolerance=TOL)
    assert res.ok, res.difference


# (W, shard rows (odd), widths, K, row-wise, gathered A returned, emulate)
SCHED_CASES = [(1, 40, (48, 32), 64, True, False, True),
               (2, 13, (32, 48), 64, True, False, True),
               (2, 27, (48, 16, 32), 128, False, True, True),
               (3, 13, (32, 16), 64, True, False, False),
               (4, 7, (16, 48), 96, False, False, False)]


@pytest.mark.parametrize("W,Ms,ns,K,row,gathered,emulate", SCHED_CASES,
                         ids=[f"W{c[0]}-{len(c[2])}w-{'row' if c[4] else 'tensor'}"
                              for c in SCHED_CASES])
def test_scheduled_kernel_over_every_weight(W, Ms, ns, K, row, gathered, emulate):
    text = many_ir(W, Ms, ns, K, row, gathered=gathered)
    kernel_level, sched, kops = _kernels(text)
    (kop,) = kops
    assert kop.kernel_name.data == "all_gather_scaled_matmul" and kop.schedule() is not None
    assert plan_of(kop)["weights"] == len(ns)
    assert any("one kernel over" in r and "B's scale selected per tile" in r
               for r in remarks_of(kop)), remarks_of(kop)
    sel = [o for o in kop.walk() if o.name == "pks.scale_select"]
    assert sel and all(len(o.scales) == len(ns) for o in sel)
    res = check_levels(text, kernel_level, sched, W, seed=3, emulate=emulate,
                       forward_emulated=W == 2)
    if not emulate or W != 2:
        return
    # the emulator's outputs (forwarded) against torch._scaled_mm of the gathered A (the
    # inputs check_levels ran on: the same seed)
    ins = random_inputs(parse_module(text), W, seed=3)
    a = torch.cat([r[0] for r in ins])
    n = len(ns)
    for r in range(W):
        sa = torch.cat([q[1] for q in ins]) if row else ins[r][1]
        for i in range(n):
            b = ins[r][2 + i].t().contiguous().t()      # the [K, N] values, column-major
            want = torch._scaled_mm(a, b, sa, ins[r][2 + n + i],
                                    out_dtype=torch.bfloat16).float()
            got = res.outputs[r][i].float()
            assert not torch.isnan(got).any()
            rtol, atol = TOL[torch.bfloat16]
            assert float((got - want).abs().max()) <= atol + rtol * float(want.abs().max())


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not found")
@pytest.mark.parametrize("row", [True, False], ids=["row", "tensor"])
def test_assembles_without_spills(row):
    """q / k / v-like widths at W = 4 (three weights, one padded tile each of k and v)."""
    from pkc.codegen.ptxas import assemble_one

    _, _, (kop,) = _kernels(many_ir(4, 256, (1024, 128, 128), 512, row))
    ck = compile_kernel(kop, "sm_90a")
    assert ".e4m3" in ck.ptx and "ld.global.nc.f32" in ck.ptx
    _, res = assemble_one(ck.ptx)
    assert res.spill_stores == 0 and res.spill_loads == 0 and res.stack_bytes == 0


def test_overlap_fuses_them_without_force():
    """On the cost model (no force) the weights go into one kernel; a consumer whose A
    scale is another tensor stays a scaled matmul of the gathered tensor."""
    text = many_ir(8, 1024, (8192, 1024, 1024), 8192, True)
    _, sched, kops = _kernels(text, pipeline="default")
    (kop,) = [k for k in kops if k.kernel_name.data == "all_gather_scaled_matmul"]
    assert plan_of(kop)["weights"] == 3 and kop.schedule() is not None


# sm_100a (the tensor-memory GEMM, tcgen05 kind::f8f6f4): tensor-wise scales (A's row
# scale gathered with A is sm_90a only; at W = 1 nothing is gathered)
SM100_CASES = [(1, 40, (48, 32), 64, True, True), (2, 13, (32, 48), 64, False, True),
               (3, 7, (48, 16, 32), 96, False, False)]


@pytest.mark.parametrize("W,Ms,ns,K,row,emulate", SM100_CASES,
                         ids=[f"W{c[0]}-{'row' if c[4] else 'tensor'}" for c in SM100_CASES])
def test_sm100_kernel_over_every_weight(W, Ms, ns, K, row, emulate):
    text = many_ir(W, Ms, ns, K, row)
    kernel_level, sched, (kop,) = _kernels(text, "b200")
    assert kop.schedule() is not None and plan_of(kop)["weights"] == len(ns)
    assert [o for o in kop.walk() if o.name == "pks.scale_select"]
    ins = random_inputs(parse_module(text), W, seed=4)
    ref = interpret(kernel_level, [list(x) for x in ins], W)
    got = interpret(sched, [list(x) for x in ins], W)
    compare_outputs(ref, got, tolerance=TOL, context="kernel level vs scheduled (b200)")
    if emulate:
        res = check_module(sched, ins, W, tolerance=TOL, target="sm_100a")
        assert res.ok, res.difference


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not found")
def test_sm100_assembles_without_spills():
    from pkc.codegen.ptxas import assemble_one

    _, _, (kop,) = _kernels(many_ir(4, 256, (1024, 128, 128), 512, False), "b200")
    _, res = assemble_one(compile_kernel(kop, "sm_100a").ptx, "sm_100a")
    assert res.spill_stores == 0 and res.spill_loads == 0 and res.stack_bytes == 0


def test_sm100_leaves_the_row_scale_gather_with_the_reason():
    text = many_ir(8, 1024, (8192, 1024, 1024), 8192, True)
    module = parse_module(text)
    run_pipeline("default{target=b200}", module)
    assert not [o for o in module.walk() if o.name == "pk.kernel"
                and "all_gather_scaled" in o.kernel_name.data]
    lines = [r for o in module.walk() for r in remarks_of(o)]
    assert any("row-wise scale (gathered with A): scheduled on sm_90a only" in r
               for r in lines), lines
