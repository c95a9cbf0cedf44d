"""overlap: every pattern, fused, computes what the graph-level program computes
(interpreter, W in {1, 2, 3, 4, 8}, random shapes / dtypes / tiles / overlap styles), and
the cost model decides what is fused.

The IR builders and strategies here are shared with test_buffer_elision.py.
"""

from __future__ import annotations

import math
import os

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from xdsl.dialects.builtin import ModuleOp

from pkc.dialects import graph as g
from pkc.dialects import kernel as k
from pkc.interp import InterpError, interpret, random_inputs
from pkc.interp.equivalence import DEFAULT_TOLERANCE
from pkc.ir import make_context, parse_module
from pkc.passes.overlap import Overlap
from pkc.passes.remarks import plan_of, remarks_of
from pkc.target import plan_fusion
from pkc.testing import check_transform

WORLDS = (1, 2, 3, 4, 8)
CTX = make_context()


def examples(W: int) -> settings:
    """Hypothesis settings for one (pattern, W): a few examples each (every example runs
    the interpreter on W ranks, twice), fewer at W = 8; PKC_OVERLAP_EXAMPLES=50 searches
    longer."""
    n = int(os.environ.get("PKC_OVERLAP_EXAMPLES", "0")) or (3 if W >= 8 else 5)
    return settings(max_examples=n, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# ----------------------------------------------------------------------------------------
# Graph-level programs (one per pattern).


def rs_ir(W, M, N, K, t="f32", ot=None, reduce="sum"):
    ot = ot or t
    return f"""
func.func @main(%a: tensor<{M}x{K}x{t}>, %b: tensor<{K}x{N}x{t}>) -> tensor<{M // W}x{N}x{ot}> {{
  %c = pk.matmul %a, %b : (tensor<{M}x{K}x{t}>, tensor<{K}x{N}x{t}>) -> tensor<{M}x{N}x{ot}>
  %o = pk.reduce_scatter %c {{dim = 0 : i64, reduce = "{reduce}", world = {W} : i64}} : tensor<{M}x{N}x{ot}> -> tensor<{M // W}x{N}x{ot}>
  func.return %o : tensor<{M // W}x{N}x{ot}>
}}"""


def ar_ir(W, M, N, K, t="f32", ot=None, reduce="sum"):
    ot = ot or t
    return f"""
func.func @main(%a: tensor<{M}x{K}x{t}>, %b: tensor<{K}x{N}x{t}>) -> tensor<{M}x{N}x{ot}> {{
  %c = pk.matmul %a, %b : (tensor<{M}x{K}x{t}>, tensor<{K}x{N}x{t}>) -> tensor<{M}x{N}x{ot}>
  %o = pk.all_reduce %c {{reduce = "{reduce}", world = {W} : i64}} : tensor<{M}x{N}x{ot}> -> tensor<{M}x{N}x{ot}>
  func.return %o : tensor<{M}x{N}x{ot}>
}}"""


def ag_ir(W, Ms, Ns, K, t="f32", ot=None, gathered=False, neg=False):
    """all_gather of an Ms x K shard, consumed by one matmul per width in Ns; `gathered`
    also returns the gathered tensor, `neg` feeds it to a pk.map as well."""
    ot, M = ot or t, W * Ms
    args = "".join(f", %b{j}: tensor<{K}x{n}x{t}>" for j, n in enumerate(Ns))
    mms = "\n".join(f"  %y{j} = pk.matmul %g, %b{j} : (tensor<{M}x{K}x{t}>, tensor<{K}x{n}x{t}>)"
                    f" -> tensor<{M}x{n}x{ot}>" for j, n in enumerate(Ns))
    vals = [f"%y{j}" for j in range(len(Ns))]
    types = [f"tensor<{M}x{n}x{ot}>" for n in Ns]
    extra = ""
    if neg:
        extra = f"  %n = pk.map \"neg\" %g : (tensor<{M}x{K}x{t}>) -> tensor<{M}x{K}x{t}>"
        vals, types = vals + ["%n"], types + [f"tensor<{M}x{K}x{t}>"]
    if gathered:
        vals, types = vals + ["%g"], types + [f"tensor<{M}x{K}x{t}>"]
    return f"""
func.func @main(%x: tensor<{Ms}x{K}x{t}>{args}) -> ({", ".join(types)}) {{
  %g = pk.all_gather %x {{dim = 0 : i64, world = {W} : i64}} : tensor<{Ms}x{K}x{t}> -> tensor<{M}x{K}x{t}>
{extra}
{mms}
  func.return {", ".join(vals)} : {", ".join(types)}
}}"""


def moe_ir(W, form, E, C, K, N, t="f32", ot=None):
    """MoE in the three spellings overlap accepts (see overlap.py): (a) 3-d all_to_alls,
    (b) 2-d with one expert per rank, (c) the torch idiom around all_to_all_single."""
    ot, R = ot or t, W * E * C
    a1 = "pk.all_to_all %x {{split_dim = {} : i64, concat_dim = {} : i64, world = {} : i64}}"
    if form == "a":
        return f"""
func.func @main(%x: tensor<{W * E}x{C}x{K}x{t}>, %w: tensor<{E}x{K}x{N}x{t}>) -> tensor<{W * E}x{C}x{N}x{ot}> {{
  %d = {a1.format(0, 1, W)} : tensor<{W * E}x{C}x{K}x{t}> -> tensor<{E}x{W * C}x{K}x{t}>
  %y = pk.matmul %d, %w : (tensor<{E}x{W * C}x{K}x{t}>, tensor<{E}x{K}x{N}x{t}>) -> tensor<{E}x{W * C}x{N}x{ot}>
  %o = pk.all_to_all %y {{split_dim = 1 : i64, concat_dim = 0 : i64, world = {W} : i64}} : tensor<{E}x{W * C}x{N}x{ot}> -> tensor<{W * E}x{C}x{N}x{ot}>
  func.return %o : tensor<{W * E}x{C}x{N}x{ot}>
}}"""
    if form == "b":
        assert E == 1
        return f"""
func.func @main(%x: tensor<{R}x{K}x{t}>, %w: tensor<{K}x{N}x{t}>) -> tensor<{R}x{N}x{ot}> {{
  %d = {a1.format(0, 0, W)} : tensor<{R}x{K}x{t}> -> tensor<{R}x{K}x{t}>
  %y = pk.matmul %d, %w : (tensor<{R}x{K}x{t}>, tensor<{K}x{N}x{t}>) -> tensor<{R}x{N}x{ot}>
  %o = pk.all_to_all %y {{split_dim = 0 : i64, concat_dim = 0 : i64, world = {W} : i64}} : tensor<{R}x{N}x{ot}> -> tensor<{R}x{N}x{ot}>
  func.return %o : tensor<{R}x{N}x{ot}>
}}"""
    perm = "{perm = [1 : i64, 0 : i64, 2 : i64, 3 : i64]}"
    return f"""
func.func @main(%x: tensor<{R}x{K}x{t}>, %w: tensor<{E}x{K}x{N}x{t}>) -> tensor<{R}x{N}x{ot}> {{
  %d = {a1.format(0, 0, W)} : tensor<{R}x{K}x{t}> -> tensor<{R}x{K}x{t}>
  %d4 = pk.reshape %d : tensor<{R}x{K}x{t}> -> tensor<{W}x{E}x{C}x{K}x{t}>
  %dt = pk.transpose %d4 {perm} : tensor<{W}x{E}x{C}x{K}x{t}> -> tensor<{E}x{W}x{C}x{K}x{t}>
  %d3 = pk.reshape %dt : tensor<{E}x{W}x{C}x{K}x{t}> -> tensor<{E}x{W * C}x{K}x{t}>
  %y = pk.matmul %d3, %w : (tensor<{E}x{W * C}x{K}x{t}>, tensor<{E}x{K}x{N}x{t}>) -> tensor<{E}x{W * C}x{N}x{ot}>
  %y4 = pk.reshape %y : tensor<{E}x{W * C}x{N}x{ot}> -> tensor<{E}x{W}x{C}x{N}x{ot}>
  %yt = pk.transpose %y4 {perm} : tensor<{E}x{W}x{C}x{N}x{ot}> -> tensor<{W}x{E}x{C}x{N}x{ot}>
  %y2 = pk.reshape %yt : tensor<{W}x{E}x{C}x{N}x{ot}> -> tensor<{R}x{N}x{ot}>
  %o = pk.all_to_all %y2 {{split_dim = 0 : i64, concat_dim = 0 : i64, world = {W} : i64}} : tensor<{R}x{N}x{ot}> -> tensor<{R}x{N}x{ot}>
  func.return %o : tensor<{R}x{N}x{ot}>
}}"""


# ----------------------------------------------------------------------------------------
# Random cases: a pattern, its shape (dims 8..96, most not multiples of the tiles), dtypes,
# tile sizes and overlap style. `make(W)` builds the program for a world of W ranks.

DIM = st.integers(8, 96)
DTYPE = st.sampled_from(["f32", "bf16", "f16"])
STYLE = st.sampled_from(["intra", "inter"])


@st.composite
def _common(draw) -> dict:
    t = draw(DTYPE)
    return dict(t=t, ot=draw(st.sampled_from([t, "f32"])), overlap=draw(STYLE),
                tile=draw(st.sampled_from([16, 32, 128])),
                tile_k=draw(st.sampled_from([16, 32, 64])))


@st.composite
def case(draw, pattern: str) -> dict:
    c = draw(_common())
    c["pattern"] = pattern
    if pattern in ("rs", "ar"):
        c.update(M=draw(DIM), N=draw(DIM), K=draw(DIM))
    elif pattern == "ag":
        c.update(M=draw(DIM), K=draw(DIM), Ns=draw(st.lists(DIM, min_size=1, max_size=3)),
                 gathered=draw(st.booleans()))
    else:
        form = draw(st.sampled_from("abc"))
        c.update(form=form, E=1 if form == "b" else draw(st.integers(1, 3)),
                 C=draw(st.integers(1, 12)), K=draw(DIM), N=draw(DIM))
    return c


def make(c: dict, W: int) -> ModuleOp:
    p, t, ot = c["pattern"], c["t"], c["ot"]
    if p == "rs":
        text = rs_ir(W, W * max(1, c["M"] // W), c["N"], c["K"], t, ot)
    elif p == "ar":
        text = ar_ir(W, c["M"], c["N"], c["K"], t, ot)
    elif p == "ag":
        text = ag_ir(W, max(1, c["M"] // W), c["Ns"], c["K"], t, ot, c["gathered"])
    else:
        text = moe_ir(W, c["form"], c["E"], c["C"], c["K"], c["N"], t, ot)
    return parse_module(text)


def tolerance(c: dict, W: int) -> dict:
    """The interpreter's default tolerance, widened where the fused kernel legitimately
    rounds differently from the graph-level program:

    * f32 sums in another order (K in tile steps, the W partials in arrival order): for n
      terms of size ~1 the difference is ~u*n (u = 2^-24), n = K, times W for reductions;
    * the unfused program rounds each rank's partial product to a 16-bit result type
      before the collective sums them, the kernel sums f32 partials and rounds once. Each
      partial (K products of N(0,1) values, |p| < 5 sqrt(K)) loses up to eps * |p|
      (eps = half an ulp: 2^-8 bf16, 2^-11 f16), and W of them add up.
    Wrong data (a dropped or doubled tile, a stale read) is off by ~sqrt(K) or NaN."""
    K, reduces = c["K"], c["pattern"] in ("rs", "ar")
    tol = dict(DEFAULT_TOLERANCE)
    rtol, atol = tol[torch.float32]
    tol[torch.float32] = (rtol, max(atol, 4 * 2.0 ** -24 * K * (W if reduces else 1)))
    eps = {"bf16": 2.0 ** -8, "f16": 2.0 ** -11}.get(c["ot"])
    if reduces and eps is not None:
        dtype = torch.bfloat16 if c["ot"] == "bf16" else torch.float16
        rtol, atol = tol[dtype]
        tol[dtype] = (rtol, max(atol, eps * W * 5 * math.sqrt(K)))
    return tol


def overlap_pass(c: dict, **extra) -> Overlap:
    return Overlap(force=True, overlap=c["overlap"], tile=c["tile"], tile_k=c["tile_k"], **extra)


def kernels(module: ModuleOp) -> list[k.KernelOp]:
    return [op for op in module.walk() if isinstance(op, k.KernelOp)]


def fused_only(c: dict):
    """The transform under test: overlap alone; checks it fused and left staging."""
    def run(module: ModuleOp) -> None:
        overlap_pass(c).apply(CTX, module)
        module.verify()
        (kernel,) = kernels(module)
        roles = [w.role.data for w in kernel.workers()]
        assert roles == (["compute", "communicate"] if c["overlap"] == "inter" else ["compute"])
        assert not any(isinstance(op, (g.MatmulOp, *g.COLLECTIVE_OPS)) for op in module.walk())
    return run


# ----------------------------------------------------------------------------------------
# Equivalence: interp(before) == interp(after overlap), every pattern, every W.


@pytest.mark.parametrize("W", WORLDS)
@pytest.mark.parametrize("pattern", ["rs", "ar", "ag", "moe"])
def test_overlap_preserves_meaning(pattern, W):
    @examples(W)
    @given(case(pattern))
    def check(c):
        check_transform(lambda w: make(c, w), fused_only(c), world_sizes=(W,),
                        tolerance=tolerance(c, W))

    check()


def test_shapes_not_divisible_by_tiles_use_remainder_tiles():
    # 45 rows per rank: one 32-row block and a 13-row remainder block (own tile type)
    c = dict(pattern="rs", t="bf16", ot="bf16", overlap="inter", tile=32, tile_k=16,
             M=90, N=40, K=37)
    module = make(c, 2)
    overlap_pass(c).apply(CTX, module)
    text = str(module)
    assert "!pk.tile<32x32xf32>" in text and "!pk.tile<13x32xf32>" in text
    check_transform(lambda w: make(c, w), fused_only(c), world_sizes=(2, 3),
                    tolerance=tolerance(c, 3))


def test_all_gather_with_several_consumers_and_other_users():
    # two matmuls share the gather; a pk.map also reads the gathered tensor, so the
    # kernel returns it too
    def mk(W):
        return parse_module(ag_ir(W, 5, [24, 40], 20, "bf16", neg=True))

    def run(module):
        Overlap(force=True, tile=16, tile_k=16).apply(CTX, module)
        module.verify()
        (kernel,) = kernels(module)
        assert len(kernel.outputs) == 3
        assert kernel.attributes["pk.fusion"].data["gathered"].value.data
        assert any(isinstance(op, g.MapOp) for op in module.walk())

    check_transform(mk, run, world_sizes=(1, 3, 4))


def test_all_gather_consumer_defined_after_first_use_stays_outside():
    # %b1 depends on %y0, so its matmul cannot be in the kernel that produces %y0: it
    # consumes the kernel's gathered output instead
    text = """
func.func @main(%x: tensor<6x16xf32>, %b0: tensor<16x16xf32>) -> (tensor<12x16xf32>, tensor<12x16xf32>) {
  %g = pk.all_gather %x {dim = 0 : i64, world = 2 : i64} : tensor<6x16xf32> -> tensor<12x16xf32>
  %y0 = pk.matmul %g, %b0 : (tensor<12x16xf32>, tensor<16x16xf32>) -> tensor<12x16xf32>
  %b1 = pk.slice %y0 {dim = 0 : i64, start = 0 : i64, end = 12 : i64, step = 1 : i64} : tensor<12x16xf32> -> tensor<12x16xf32>
  %r = pk.reshape %b1 : tensor<12x16xf32> -> tensor<16x12xf32>
  %b2 = pk.slice %r {dim = 1 : i64, start = 0 : i64, end = 12 : i64, step = 1 : i64} : tensor<16x12xf32> -> tensor<16x12xf32>
  %y1 = pk.matmul %g, %b2 : (tensor<12x16xf32>, tensor<16x12xf32>) -> tensor<12x12xf32>
  %s = pk.slice %y1 {dim = 1 : i64, start = 0 : i64, end = 12 : i64, step = 1 : i64} : tensor<12x12xf32> -> tensor<12x12xf32>
  %p = pk.concat %s, %s {dim = 1 : i64} : (tensor<12x12xf32>, tensor<12x12xf32>) -> tensor<12x24xf32>
  %q = pk.slice %p {dim = 1 : i64, start = 0 : i64, end = 16 : i64, step = 1 : i64} : tensor<12x24xf32> -> tensor<12x16xf32>
  func.return %y0, %q : tensor<12x16xf32>, tensor<12x16xf32>
}"""

    def run(module):
        Overlap(force=True, tile=8, tile_k=8).apply(CTX, module)
        module.verify()
        (kernel,) = kernels(module)
        assert len(kernel.outputs) == 2  # y0 and the gathered tensor
        assert sum(isinstance(op, g.MatmulOp) for op in module.walk()) == 1

    check_transform(lambda w: parse_module(text), run, world_sizes=(2,))


def test_kernel_structure_rank_rotation_and_staging():
    c = dict(pattern="rs", t="bf16", ot="bf16", overlap="inter", tile=16, tile_k=16,
             M=64, N=32, K=32)
    module = make(c, 4)
    overlap_pass(c).apply(CTX, module)
    (kernel,) = kernels(module)
    assert kernel.kernel_name.data == "matmul_reduce_scatter"
    staging = [op for op in kernel.block.ops
               if isinstance(op, k.AllocOp) and "staging" in op.attributes]
    assert [str(op.result.type) for op in staging] == ["!pk.buffer<64x32xf32, symmetric>"]
    text = str(kernel)
    assert "arith.addi %rank, %i" in text and "arith.remui" in text  # chunk (rank + i) mod W
    assert kernel.attributes["pk.fusion"].data["stage"].data == "staged"
    assert all(w.sms is None for w in kernel.workers())  # sm-partition's job


def test_waits_are_what_orders_the_data():
    # the interpreter must see the fused kernels' synchronization: without their waits,
    # every pattern reads data before it arrived (or deadlocks / differs)
    for c in [dict(pattern="rs", M=32, N=16, K=16), dict(pattern="ar", M=32, N=16, K=16),
              dict(pattern="ag", M=12, K=16, Ns=[16], gathered=False),
              dict(pattern="moe", form="a", E=2, C=4, K=16, N=16)]:
        for style in ("intra", "inter"):
            c.update(t="f32", ot="f32", overlap=style, tile=16, tile_k=16)
            module = make(c, 3)
            overlap_pass(c).apply(CTX, module)
            for wait in [op for op in module.walk() if isinstance(op, k.WaitOp)]:
                wait.detach()
                wait.erase()
            inputs = random_inputs(module, 3, 0)
            with pytest.raises(InterpError, match="before the data arrived|without a signal"):
                interpret(module, inputs, 3)


# ----------------------------------------------------------------------------------------
# Decisions: the cost model fuses what pays and leaves the rest with a remark.


def _untouched(module: ModuleOp) -> bool:
    return not kernels(module) and any(isinstance(op, g.MatmulOp) for op in module.walk())


# (A tiny MoE is fused: the cost model counts the two all-to-all launches it saves; see
# test_cost.py::test_moe_fuses_large_and_tiny_for_different_reasons.)
@pytest.mark.parametrize("text", [rs_ir(8, 64, 64, 64, "bf16"), ar_ir(8, 64, 64, 64, "bf16"),
                                  ag_ir(8, 8, [64], 64, "bf16")])
def test_tiny_shapes_stay_unfused_with_a_remark(text):
    module = parse_module(text)
    before = str(module)
    Overlap(target="h200").apply(CTX, module)
    Overlap(target="h200").apply(CTX, module)  # running again adds no second remark
    assert _untouched(module)
    (coll,) = [op for op in module.walk() if isinstance(op, g.COLLECTIVE_OPS) and remarks_of(op)]
    (remark,) = remarks_of(coll)
    assert "unfused" in remark and "too small for overlap to pay" in remark
    assert plan_of(coll)["fuse"] is False
    # nothing else changed: only the remark and the plan were added
    for key in ("pk.remarks", "pk.plan"):
        coll.attributes.pop(key)
    assert str(module) == before


def _pk_shape(pattern: str, n: int, W: int = 8):
    if pattern == "all_gather_mm":
        return ag_ir(W, n // W, [n // 8], n, "bf16")
    if pattern == "mm_reduce_scatter":
        return rs_ir(W, n, n, n // 8, "bf16")
    return ar_ir(W, n, n, n // 8, "bf16")


@pytest.mark.parametrize("n", [2048, 8192, 16384, 32768])
@pytest.mark.parametrize("pattern", ["mm_reduce_scatter", "mm_all_reduce", "all_gather_mm"])
def test_pk_shapes_follow_the_cost_model(pattern, n):
    # PK's shapes on H200 at W=8 (AG+GEMM N x N/8 x N, GEMM+RS / GEMM+AR N x N x N/8):
    # the IR is built and rewritten, not interpreted
    module = parse_module(_pk_shape(pattern, n))
    Overlap(target="h200").apply(CTX, module)
    module.verify()
    shapes = (n, n // 8, n) if pattern == "all_gather_mm" else (n, n, n // 8)
    plan = plan_fusion("h200", pattern, shapes, 8, 2)
    if not plan.fuse:
        assert _untouched(module)
        return
    (kernel,) = kernels(module)
    assert remarks_of(kernel) == [plan.remark()]
    p = plan_of(kernel)
    assert (p["overlap"], p["comm_sms"], p["forced"]) == (plan.overlap, plan.comm_sms, False)
    assert p["fused_time"] == pytest.approx(plan.fused_time)
    assert p["unfused_time"] == pytest.approx(plan.unfused_time)
    roles = [w.role.data for w in kernel.workers()]
    assert roles == (["compute", "communicate"] if plan.overlap == "inter" else ["compute"])


def test_pk_gemm_reduce_scatter_8192_is_fused():
    # the style follows the model: intra-SM since the measured 2% epilogue cost (H200)
    module = parse_module(rs_ir(8, 8192, 8192, 1024, "bf16"))
    Overlap().apply(CTX, module)
    (kernel,) = kernels(module)
    (remark,) = remarks_of(kernel)
    plan = plan_of(kernel)
    assert remark.startswith("fused mm+reduce_scatter: predicted")
    if plan["overlap"] == "inter":
        assert "comm SMs" in remark and plan["comm_sms"] >= 4
    else:
        assert plan["overlap"] == "intra" and "intra-SM" in remark and plan["comm_sms"] == 0


def test_large_moe_is_fused_intra_sm():
    # 16K tokens land on each rank, hidden 7168 -> 4096, 8 experts per rank (form (a))
    module = parse_module(moe_ir(8, "a", 8, 256, 7168, 4096, "bf16"))
    Overlap().apply(CTX, module)
    module.verify()
    (kernel,) = kernels(module)
    plan = plan_fusion("h200", "all_to_all_mm_all_to_all", (16384, 4096, 7168, 8), 8, 2)
    assert plan.fuse and remarks_of(kernel) == [plan.remark()]
    assert [w.role.data for w in kernel.workers()] == ["compute"]  # intra-SM


def test_forced_fusion_and_forced_style_are_remarked():
    module = parse_module(rs_ir(8, 64, 64, 64, "bf16"))
    Overlap(force=True, overlap="intra").apply(CTX, module)
    (kernel,) = kernels(module)
    lines = remarks_of(kernel)
    assert "force=true overrides the cost model" in lines[0] and "unfused" in lines[0]
    assert lines[1].startswith("overlap forced to intra-SM")
    assert plan_of(kernel)["forced"] is True and plan_of(kernel)["overlap"] == "intra"


def test_one_rank_is_fused_only_when_forced():
    module = parse_module(rs_ir(1, 64, 64, 64))
    Overlap().apply(CTX, module)
    assert _untouched(module)
    (rs,) = [op for op in module.walk() if isinstance(op, g.ReduceScatterOp)]
    assert "1 rank" in remarks_of(rs)[0]


@pytest.mark.parametrize("text,why", [
    (rs_ir(2, 16, 16, 16, reduce="max"), 'reduction "max"'),
    (ar_ir(2, 16, 16, 16, "f64"), "operands of f64"),
    (rs_ir(2, 16, 16, 16, "f32", "f64"), "a f64 result"),
    (rs_ir(16, 64, 64, 64, "bf16"), "world size 16 outside 1..8"),
])
def test_unsupported_matches_are_left_with_a_reason(text, why):
    module = parse_module(text)
    Overlap(force=True).apply(CTX, module)
    assert _untouched(module)
    remarks = [r for op in module.walk() for r in remarks_of(op)]
    assert len(remarks) == 1 and remarks[0].startswith("left unfused") and why in remarks[0]


def test_matmul_with_other_users_is_not_a_match():
    text = """
func.func @main(%a: tensor<8x8xf32>, %b: tensor<8x8xf32>) -> (tensor<4x8xf32>, tensor<8x8xf32>) {
  %c = pk.matmul %a, %b : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %o = pk.reduce_scatter %c {dim = 0 : i64, reduce = "sum", world = 2 : i64} : tensor<8x8xf32> -> tensor<4x8xf32>
  func.return %o, %c : tensor<4x8xf32>, tensor<8x8xf32>
}"""
    module = parse_module(text)
    before = str(module)
    Overlap(force=True).apply(CTX, module)
    assert str(module) == before


def test_options_are_checked():
    with pytest.raises(ValueError, match="intra or inter"):
        Overlap(overlap="both")
    with pytest.raises(ValueError, match="known targets"):
        Overlap(target="a100")
