"""The fused GEMM + collective kernels for sm_100a (``schedule-fused{target=b200}``: GEMM +
reduce-scatter, GEMM + all-reduce, all-gather + GEMM; ``schedule-moe{target=b200}``: the
MoE dispatch + grouped GEMM + combine): the tensor-memory GEMM (producer, one MMA thread, one epilogue warpgroup reading tensor memory)
with the sm_90a kernels' communication parts.

* the interpreter: each kind's schedule computes what the kernel-level IR computes
  (check_transform, W = 1..4, the tolerances of test_interp_schedule_fused);
* the emulator runs the sm_100a PTX equal to the interpreter on the scheduled kernel
  (W = 1, 2, 4; bitwise where the adds have one order: W <= 2 and the deterministic
  reduce-scatter; within the reduce-adds' rounding otherwise);
* ``ptxas -arch=sm_100a`` assembles them with no spills; their SASS has the 4 UTCHMMA of
  a k-block, LDTM, UTCBAR, the TMA stores (and reduce-adds / bulk puts), no local memory;
* the sm_100a and sm_90a PTX differ in the MMA path only: tcgen05 against wgmma, the same
  TMA stores / reduce-adds and signals.

No Blackwell GPU ran any of this."""

from __future__ import annotations

import functools
import re
import sys
from pathlib import Path

import pytest
import torch

from pkc.codegen import compile_kernel
from pkc.codegen.emit import kernels_of
from pkc.codegen.ptxas import assemble, find_ptxas
from pkc.dialects import schedule as s
from pkc.emu.check import check_module
from pkc.emu.launch import emulate
from pkc.interp import random_inputs
from pkc.interp.kernel import run_kernel
from pkc.ir import make_context, parse_module
from pkc.passes.registry import parse_pipeline
from pkc.passes.remarks import plan_of
from pkc.testing import check_transform
from tests.unit.test_interp_schedule_fused import AG, FUSED, ag_module, fused_module, mm_all_reduce

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from fused_ir import module_text as rs_text  # noqa: E402
from moe_ir import module_text as moe_text  # noqa: E402

needs_ptxas = pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")


def _tol(W: int) -> dict:
    # each rank's partial is rounded to bf16 before the reduce-adds, which land in any
    # order: half an ulp of a partial per rank (as test_interp_schedule_fused)
    return {torch.bfloat16: (2e-2, W / 16)}


@functools.cache
def _rs(W: int, Mc: int, N: int, K: int, layout: str, target: str = "b200",
        deterministic: bool = False):
    m = parse_module(rs_text(W, Mc, N, K, layout), "mm_rs.mlir")
    det = " deterministic=true" if deterministic else ""
    for p in parse_pipeline(f"default{{force=true}},schedule-fused{{target={target}{det}}},dce"):
        p.apply(make_context(), m)
    return m


@functools.cache
def _ar(W: int, Mc: int = 19, N: int = 40, K: int = 24, target: str = "b200",
        deterministic: bool = False):
    m = mm_all_reduce(W, Mc, N, K)
    det = " deterministic=true" if deterministic else ""
    for p in parse_pipeline(f"schedule-fused{{target={target}{det}}},dce"):
        p.apply(make_context(), m)
    return m


@functools.cache
def _ag(W: int, target: str = "b200"):
    m = ag_module(W, *AG[W])
    for p in parse_pipeline(f"schedule-fused{{target={target}}},dce"):
        p.apply(make_context(), m)
    return m


def _moe_graph(W: int):
    """The MoE layer (all-to-all, grouped GEMM, all-to-all) as overlap fused it: one expert
    per rank at W > 2, two below (small: the interpreter runs every role)."""
    m = parse_module(moe_text(W, 2 if W <= 2 else 1, 24, 32, 32), "moe.mlir")
    for p in parse_pipeline("default{force=true}"):
        p.apply(make_context(), m)
    return m


@functools.cache
def _moe(W: int):
    m = _moe_graph(W)
    for p in parse_pipeline("schedule-moe{target=b200}"):
        p.apply(make_context(), m)
    return m


def _scheduled(m):
    return [k for k in kernels_of(m) if k.schedule() is not None]


def _assert_tmem_arrangement(kop) -> None:
    sched = kop.schedule()
    roles = [s.RoleKind(r.kind.data) for r in sched.block.walk() if isinstance(r, s.RoleOp)]
    assert roles == [s.RoleKind.PRODUCER, s.RoleKind.MMA, s.RoleKind.EPILOGUE], roles
    # the accumulators are the CTA's (tensor memory), picked per tile
    assert [type(o.parent_op()) for o in sched.walk() if isinstance(o, s.AccAllocOp)] == \
        [s.ScheduleOp, s.ScheduleOp]
    assert any(isinstance(o, s.AccSelectOp) for o in sched.walk())
    plan = plan_of(kop)
    assert plan["acc"] == "tmem" and plan["consumers"] == 1
    remarks = [r.data for r in kop.attributes["pk.remarks"].data]
    assert any(r.startswith("scheduled") and "sm_100a kernel: tcgen05 MMAs" in r
               for r in remarks), remarks


# ---- (a) the interpreter -------------------------------------------------------------

def test_reduce_scatter_schedule_is_tensor_memory_and_means_the_kernel_w1_to_4():
    for W, (Mc, N, K, layout) in FUSED.items():
        check_transform(lambda w: fused_module(w, Mc, N, K, layout),
                        "schedule-fused{target=b200},dce", world_sizes=(W,), seeds=(W,),
                        func="mm_rs", tolerance=_tol(W))
        (kop,) = _scheduled(_rs(W, Mc, N, K, layout))
        _assert_tmem_arrangement(kop)
        assert plan_of(kop)["fresh_output"] == (W == 2)     # the W = 2 variant (summed)


def test_all_reduce_schedule_is_tensor_memory_and_means_the_kernel_w1_to_4():
    for W in (1, 2, 3, 4):
        check_transform(mm_all_reduce, "schedule-fused{target=b200},dce", world_sizes=(W,),
                        seeds=(W,), func="mm_ar", tolerance=_tol(W))
        kops = _scheduled(_ar(W))
        kinds = sorted(plan_of(k).get("fused_kind") or plan_of(k).get("comm_kind") for k in kops)
        assert kinds == (["ar"] if W <= 2 else ["agp", "rs"]), kinds
        _assert_tmem_arrangement([k for k in kops if plan_of(k).get("fused_kind")][0])


def test_all_gather_schedule_is_tensor_memory_and_means_the_kernel_w1_to_4():
    for W in (1, 2, 3, 4):
        check_transform(lambda w: ag_module(w, *AG[W]), "schedule-fused{target=b200},dce",
                        world_sizes=(W,), seeds=(W,), func="ag_mm",
                        tolerance={torch.bfloat16: (2e-2, 2e-2)})
        (kop,) = _scheduled(_ag(W))
        _assert_tmem_arrangement(kop)
        assert plan_of(kop)["comm_ctas"] > 0      # the put CTAs: a side role by CTA index


def test_moe_schedule_is_tensor_memory_and_means_the_kernel_w1_to_4():
    for W in (1, 2, 3, 4):
        check_transform(_moe_graph, "schedule-moe{target=b200}", world_sizes=(W,),
                        func="moe")
        (kop,) = _scheduled(_moe(W))
        assert plan_of(kop)["schedule"] == "moe"
        _assert_tmem_arrangement(kop)


def test_schedule_stage_builds_the_sm100_fused_kernel_and_no_cta_pair():
    """schedule_for_target("b200") (the pipeline pkc.compile runs) gives the
    tensor-memory kernel; a shape whose plain GEMM would take CTA pairs (>= 8 row blocks
    of [N, K] B) stays on single CTAs (the fused parts tile 128 rows)."""
    from pkc.passes.pipelines import schedule_for_target
    from pkc.target.gemm_tuning_sm100 import choose_tmem_config

    assert choose_tmem_config(2048, 256, 64, "bf16", "nk", 148).pair
    module, _ = schedule_for_target(fused_module(2, 1024, 256, 64, "nk"), "b200")
    (kop,) = _scheduled(module)
    assert kop.schedule().cluster.data == 1 and "cta_group" not in plan_of(kop)
    _assert_tmem_arrangement(kop)


def test_a_wgmma_variant_is_refused_for_a_tensor_memory_target():
    from pkc.ir import PkcDiagnostic       # an error at the kernel (the user's option)

    with pytest.raises(PkcDiagnostic, match="'pk.kernel' op schedule-fused: "
                                            "variant=128x256_s4_tma is a wgmma"):
        for p in parse_pipeline("schedule-fused{target=b200 variant=128x256_s4_tma}"):
            p.apply(make_context(), fused_module(2, *FUSED[2]))


# ---- (b) the emulator runs the sm_100a kernels ----------------------------------------

EMU_RS = {1: (37, 40, 24, "nk"), 2: (45, 40, 24, "kn"), 4: (19, 48, 24, "kn")}


# (kind, W): the kernels the emulator must run bitwise equal to the interpreter (one
# order of adds: W <= 2, or W = 4 deterministic; the all-gather moves data, rounds once).
# The all-reduce at W = 4 is the pair: the reduce-scatter kernel, then the pull gather.
EMU_EXACT = [("rs", 1), ("rs", 2), ("ar", 1), ("ar", 2), ("ar", 4), ("ag", 1), ("ag", 2),
             ("ag", 4), ("moe", 1), ("moe", 2), ("moe", 4)]
_KIND = {"rs": (lambda W: _rs(W, *EMU_RS[W]), "mm_rs", lambda W: ["matmul_reduce_scatter"]),
         "ar": (lambda W: _ar(W, deterministic=True), "mm_ar",
                lambda W: (["matmul_all_reduce"] if W <= 2
                           else ["matmul_reduce_scatter", "all_gather_agp"])),
         "ag": (lambda W: _ag(W), "ag_mm", lambda W: ["all_gather_matmul"]),
         "moe": (lambda W: _moe(W), "moe", lambda W: ["moe_dispatch_gemm_combine"])}


@pytest.mark.parametrize("kind,W", EMU_EXACT, ids=[f"{k}-w{w}" for k, w in EMU_EXACT])
def test_emulator_runs_the_sm100_kernel_bitwise(kind, W):
    build, func, kernels = _KIND[kind]
    m = build(W)
    # MoE: within check_module's bf16 tolerance (K = 32 of products; the emulator rounds
    # each K = 16 step of tcgen05 to f32, the interpreter the whole sum: a bf16 rounding
    # may differ by one step on other shapes); the others bitwise
    res = check_module(m, random_inputs(m, W, 0, func), W, target="sm_100a",
                       func_name=func, exact=kind != "moe")
    assert res.ok, str(res.difference)
    assert [k.kernel for k in res.kernels] == kernels(W)


def test_emulator_runs_the_summed_epilogue_over_several_pieces(monkeypatch):
    """GEMM + all-reduce at W = 2 with 128-column tiles forced (the rule picks 64 for the
    small shapes above): two 64 x 64 pieces per slice, each piece's partial loaded while
    the previous one is summed and stored (the load ring's phases over two buffers)."""
    import pkc.passes.fused_schedule as fs

    choose = fs.choose_tmem_config
    monkeypatch.setattr(fs, "choose_tmem_config", lambda *a: choose(*a).with_(bn=128))
    m = mm_all_reduce(2, 70, 264, 72)
    for p in parse_pipeline("schedule-fused{target=b200},dce"):
        p.apply(make_context(), m)
    (kop,) = _scheduled(m)
    assert plan_of(kop)["bn"] == 128
    res = check_module(m, random_inputs(m, 2, 0, "mm_ar"), 2, target="sm_100a",
                       func_name="mm_ar")
    assert res.ok, str(res.difference)


def test_emulator_runs_sm100_gemm_reduce_scatter_w4():
    """The default kernel (adds in arrival order): within the rounding of the adds (the
    deterministic one, bitwise, is the all-reduce pair's first kernel above)."""
    (kop,) = _scheduled(_rs(4, *EMU_RS[4]))
    inputs = random_inputs(_rs(4, *EMU_RS[4]), 4, 1, "mm_rs")
    ref = run_kernel(kop, [[x[r] for r in range(4)] for x in zip(*inputs)], 4, 0)
    got = emulate(compile_kernel(kop, "sm_100a"), inputs, kop=kop)
    for r in range(4):
        torch.testing.assert_close(got[r][0], ref[0][r], rtol=2e-2, atol=4 / 16)


def test_emulator_catches_an_epilogue_that_reads_the_accumulator_before_its_commit():
    """The W = 2 summed epilogue without its wait on acc_full (the MMA thread's commit):
    the emulator names the tcgen05.ld that read tensor memory before the matching wait."""
    from pkc.emu.errors import EmuTensorMemoryError

    m = parse_module(rs_text(2, *EMU_RS[2]), "mm_rs.mlir")
    for p in parse_pipeline("default{force=true},schedule-fused{target=b200},dce"):
        p.apply(make_context(), m)
    (kop,) = _scheduled(m)
    epi = [r for r in kop.walk() if isinstance(r, s.RoleOp)
           and s.RoleKind(r.kind.data) is s.RoleKind.EPILOGUE]
    (wait,) = [o for o in epi[0].walk() if isinstance(o, s.MbarrierWaitOp)
               and isinstance(o.next_op, s.AccSelectOp)]
    wait.detach()
    wait.erase()
    inputs = random_inputs(m, 2, 0, "mm_rs")
    with pytest.raises(EmuTensorMemoryError, match="read before the matching wait"):
        emulate(compile_kernel(kop, "sm_100a"), inputs, kop=kop)


# ---- (c) ptxas, (d) the MMA path is the only difference ---------------------------------

# SASS a kernel's communication leaves besides the GEMM's: the TMA reduce-adds of the
# persistent reduce-scatter (W = 2 sums in the epilogue instead), the all-gather's puts
SASS_COMM = {("rs", 4): "UTMAREDG", ("ag", 4): "UBLKCP"}


@needs_ptxas
@pytest.mark.parametrize("kind,W", [("rs", 4), ("ar", 2), ("ag", 4), ("moe", 2)])
def test_sm100_fused_kernels_assemble_without_spills_and_keep_tcgen05_in_sass(kind, W):
    from pkc.codegen.sass import find_tool, sass

    m = {"rs": lambda: _rs(W, 333, 264, 136, "kn"), "ar": lambda: _ar(W, 333, 264, 136),
         "ag": lambda: _ag(W), "moe": lambda: _moe(W)}[kind]()
    (kop,) = [k for k in _scheduled(m) if plan_of(k).get("acc") == "tmem"]
    cubin, reports, _ = assemble(compile_kernel(kop, "sm_100a").ptx, "sm_100a")
    (rep,) = reports.values()
    assert rep.spill_stores == 0 and rep.spill_loads == 0 and rep.stack_bytes == 0, rep.line()
    if not find_tool("cuobjdump"):
        pytest.skip("cuobjdump not found (SASS check)")
    ins = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", sass(cubin))
    names = [i.split(".")[0] for i in ins]
    assert names.count("UTCHMMA") == 4          # the 4 k16 tcgen05 MMAs of a k-block
    assert "LDTM" in names and "UTCBAR" in names and "UTMASTG" in names
    assert "LDL" not in names and "STL" not in names
    assert not any(n.startswith("HGMMA") for n in names)
    if (kind, W) in SASS_COMM:
        assert SASS_COMM[kind, W] in names, kind


def test_sm100_and_sm90_ptx_differ_in_the_mma_path_only():
    shape = EMU_RS[4]
    (k100,) = _scheduled(_rs(4, *shape))
    (k90,) = _scheduled(_rs(4, *shape, target="h200"))
    p100 = compile_kernel(k100, "sm_100a").ptx
    p90 = compile_kernel(k90, "sm_90a").ptx
    assert "tcgen05.mma.cta_group::1.kind::f16" in p100 and "tcgen05.ld" in p100
    assert "wgmma" not in p100
    assert "wgmma.mma_async" in p90 and "tcgen05" not in p90
    # the same communication: TMA stores and reduce-adds to the owners, release signals,
    # bounded waits on the pads
    for pattern in (r"cp\.reduce\.async\.bulk\.tensor", r"red\.release\.sys\.global\.add\.u32",
                    r"cp\.async\.bulk\.tensor\.2d\.global\.shared"):
        n100, n90 = len(re.findall(pattern, p100)), len(re.findall(pattern, p90))
        assert n100 == n90 and n100 > 0, (pattern, n100, n90)
