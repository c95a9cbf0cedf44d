"""fp8 scaled matmuls fused with the all-gather along K and with the gather of B > 1 blocks
of rows per shard (DTensor ``Shard(1)``), issue 20: overlap matches both (tensor-wise and
row-wise scales as ``torch._scaled_mm`` takes them), the kernel-level kernels compute the
graph (interpreter, W in {2, 3, 4, 8}, odd shapes, staged and elided, intra and inter), the
scheduled sm_90a kernels (pkc/passes/ag_k_schedule.py with the scaled epilogue;
ag_blocks_schedule.BlockAgParts / fused_fp8_ag.BlockRowScaleParts) compute the kernel level
and the graph on the interpreter for W in {1, 2, 3, 4, 8} and on the emulator at W = 1 / 2
(the fp8 tolerance of test_fp8_fused), ptxas takes them without spills, the forms without
a scheduled kernel stay unfused with the reason, and torch programs get the fusions. On
sm_100a (the tensor-memory GEMM) the gather along K and the tensor-wise block gather are
scheduled too (interpreter and emulator; no B200 here).

The K gather's A scale: torch's ``scale_a`` [M, 1] scales a row of the whole gathered K,
so it is one [M, 1] tensor (not gathered) and the kernel scales the f32 sum over every
shard once. The blocks gather's row-wise A scale is the rows view of the same dim-1
gather of the shard's [B, Sc, 1] scale: the kernel gathers those rows with A's.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from pkc.codegen import compile_kernel
from pkc.codegen.ptxas import find_ptxas
from pkc.dialects import graph as g
from pkc.dialects import kernel as k
from pkc.ir import parse_module
from pkc.passes.pipelines import schedule_for_target
from pkc.passes.registry import run_pipeline
from pkc.passes.remarks import format_remarks, plan_of, remarks_of
from pkc.testing import check_transform
from tests.unit.test_fp8_fused import check_levels
from tests.unit.test_fp8_overlap import fuse, tolerance

E4, E5 = "f8E4M3FN", "f8E5M2"

pytestmark = [pytest.mark.filterwarnings("ignore::FutureWarning"),
              pytest.mark.filterwarnings("ignore::UserWarning"),
              pytest.mark.filterwarnings("ignore::pkc.frontend.PkcNotCompiledWarning")]


def agk_ir(W, lead, Kc, N, row=True, out="bf16", gathered=False):
    """x [*lead, Kc] gathered along its last dim (through the [R, K] view when 3-d),
    ``_scaled_mm`` by [K, N] with A's scale [R, 1] (row) or [1]; ``gathered`` returns G."""
    K, R = W * Kc, 1
    for d in lead:
        R *= d
    ts = lambda t, *s: f"tensor<{'x'.join(map(str, s))}x{t}>"  # noqa: E731
    x, gt, v = ts(E4, *lead, Kc), ts(E4, *lead, K), ts(E4, R, K)
    sa, sb = (ts("f32", R, 1), ts("f32", 1, N)) if row else (ts("f32", 1), ts("f32", 1))
    rt = ts(out, R, N) + (f", {gt}" if gathered else "")
    view, lhs = "", "%g"
    if len(lead) > 1:
        view, lhs = f"  %v = pk.reshape %g : {gt} -> {v}\n", "%v"
    return (f"func.func @main(%x: {x}, %b: {ts(E5, K, N)}, %sa: {sa}, %sb: {sb}) -> ({rt}) {{\n"
            f"  %g = pk.all_gather %x {{dim = {len(lead)} : i64, world = {W} : i64}} : "
            f"{x} -> {gt}\n{view}"
            f"  %y = pk.scaled_matmul {lhs}, %b scales(%sa, %sb) : ({v}, {ts(E5, K, N)}, {sa}, "
            f"{sb}) -> {ts(out, R, N)}\n"
            f"  func.return %y{', %g' if gathered else ''} : {rt}\n}}\n")


def blocks_ir(W, B, Sc, H, N, row=True, out="bf16", gathered=False):
    """x [B, Sc, H] gathered along dim 1, viewed [B*S, H], ``_scaled_mm`` by [H, N]; A's
    scale: the same gather of the shard's [B, Sc, 1] scale, viewed [B*S, 1] (row), or [1]."""
    S = W * Sc
    x, gt, v = (f"tensor<{B}x{Sc}x{H}x{E4}>", f"tensor<{B}x{S}x{H}x{E4}>",
                f"tensor<{B * S}x{H}x{E4}>")
    sa, sb = (f"tensor<{B * S}x1xf32>", f"tensor<1x{N}xf32>") if row else \
        ("tensor<1xf32>", "tensor<1xf32>")
    ss = f"tensor<{B}x{Sc}x1xf32>" if row else sa
    gs = (f"  %gs = pk.all_gather %ss {{dim = 1 : i64, world = {W} : i64}} : {ss} -> "
          f"tensor<{B}x{S}x1xf32>\n  %sa = pk.reshape %gs : tensor<{B}x{S}x1xf32> -> {sa}\n"
          if row else "")
    y = f"tensor<{B * S}x{N}x{out}>"
    rt = y + (f", {gt}" if gathered else "")
    return (f"func.func @main(%x: {x}, %w: tensor<{H}x{N}x{E5}>, %ss: {ss}, %sb: {sb}) -> "
            f"({rt}) {{\n"
            f"  %g = pk.all_gather %x {{dim = 1 : i64, world = {W} : i64}} : {x} -> {gt}\n{gs}"
            f"  %v = pk.reshape %g : {gt} -> {v}\n"
            f"  %y = pk.scaled_matmul %v, %w scales({'%sa' if row else '%ss'}, %sb) : ({v}, "
            f"tensor<{H}x{N}x{E5}>, {sa}, {sb}) -> {y}\n"
            f"  func.return %y{', %g' if gathered else ''} : {rt}\n}}\n")


def _kernels(m) -> list[k.KernelOp]:
    return [o for o in m.walk() if isinstance(o, k.KernelOp)]


def _scheduled(text: str, single: bool = False, target: str = "h200"):
    kernel_level = parse_module(text)
    run_pipeline("default{force=true" + (" keep-single-rank=true" if single else "") +
                 f" target={target}}}", kernel_level)
    sched, _ = schedule_for_target(kernel_level, target)
    return kernel_level, sched, _kernels(sched)


# ---- kernel level: overlap's kernels compute the graph ------------------------------

# odd shapes: 16-row tiles and 32-deep K steps overhang the rows, N and every shard's K
K_CASES = [  # (W, lead, Kc, N, row-wise, overlap, gathered)
    (2, (13,), 40, 24, True, "intra", False), (3, (2, 7), 24, 20, True, "inter", True),
    (4, (9,), 40, 24, False, "inter", False), (8, (5,), 8, 12, True, "intra", True),
    (3, (11,), 16, 24, False, "intra", True)]


@pytest.mark.parametrize("W,lead,Kc,N,row,overlap,gathered", K_CASES,
                         ids=[f"W{c[0]}-{'row' if c[4] else 'tensor'}-{c[5]}" for c in K_CASES])
def test_gather_k_kernel_level_computes_the_graph(W, lead, Kc, N, row, overlap, gathered):
    check_transform(lambda w: parse_module(agk_ir(w, lead, Kc, N, row, "f32", gathered)),
                    fuse(overlap), world_sizes=(W,), seeds=(0,),
                    tolerance=tolerance(W * Kc, W, False))


B_CASES = [  # (W, B, Sc, H, N, row-wise, overlap, gathered)
    (2, 2, 5, 40, 24, True, "intra", False), (3, 3, 3, 24, 20, True, "inter", True),
    (4, 2, 3, 40, 24, False, "inter", False), (8, 2, 2, 16, 12, True, "intra", False),
    (3, 2, 5, 40, 24, False, "intra", True)]


@pytest.mark.parametrize("W,B,Sc,H,N,row,overlap,gathered", B_CASES,
                         ids=[f"W{c[0]}-B{c[1]}-{'row' if c[5] else 'tensor'}-{c[6]}"
                              for c in B_CASES])
def test_blocks_kernel_level_computes_the_graph(W, B, Sc, H, N, row, overlap, gathered):
    def run(m):
        kop = fuse(overlap)(m)
        assert kop.attributes["pk.fusion"].data["batches"].value.data == B
        # the scale's gather went into the kernel with A's
        assert not [o for o in m.walk() if isinstance(o, g.AllGatherOp)]
        return kop

    check_transform(lambda w: parse_module(blocks_ir(w, B, Sc, H, N, row, "f32", gathered)),
                    run, world_sizes=(W,), seeds=(0,), tolerance=tolerance(H, W, False))


def test_blocks_scale_gather_with_another_user_stays():
    """A's gathered row scale also returned: the kernel gathers the shard's scale rows
    itself, and the scale's gather and view stay for the other user."""
    t = blocks_ir(2, 2, 5, 32, 16, True, "f32")
    t = t.replace("func.return %y :", "func.return %y, %sa :").replace(
        "-> (tensor<20x16xf32>)", "-> (tensor<20x16xf32>, tensor<20x1xf32>)").replace(
        ": tensor<20x16xf32>\n}", ": tensor<20x16xf32>, tensor<20x1xf32>\n}")
    m = parse_module(t)
    run_pipeline("overlap{force=true}", m)
    m.verify()
    assert len(_kernels(m)) == 1
    assert [o.name for o in m.walk() if isinstance(o, g.AllGatherOp)] == ["pk.all_gather"]
    check_transform(lambda w: parse_module(t), "default{force=true}", world_sizes=(2,),
                    seeds=(0,), tolerance=tolerance(32, 2, False))


def test_default_pipeline_elides_and_stays_equivalent():
    for text, W in ((agk_ir(3, (2, 5), 24, 20, True, "f32", True), 3),
                    (blocks_ir(2, 3, 5, 40, 24, True, "f32", True), 2)):
        check_transform(lambda w, text=text: parse_module(text), "default{force=true}",
                        world_sizes=(W,), seeds=(1,), tolerance=tolerance(200, W, False))


# ---- the scheduled sm_90a kernels ----------------------------------------------------

SK_CASES = [  # (W, lead, Kc, N, row-wise, gathered, emulate): Kc, N multiples of 16
    (1, (40,), 48, 32, True, True, True), (2, (40,), 48, 32, True, True, True),
    (2, (27,), 144, 48, False, False, True),   # a shard of two 128-deep k-steps, overhanging
    (3, (2, 13), 32, 48, True, False, False), (4, (21,), 16, 32, False, True, False),
    (8, (9,), 16, 16, True, False, False)]


@pytest.mark.parametrize("W,lead,Kc,N,row,gathered,emulate", SK_CASES,
                         ids=[f"W{c[0]}-{'row' if c[4] else 'tensor'}" for c in SK_CASES])
def test_scheduled_gather_k_equals_references(W, lead, Kc, N, row, gathered, emulate):
    text = agk_ir(W, lead, Kc, N, row, "bf16", gathered)
    kernel_level, sched, kops = _scheduled(text, single=W == 1)
    kop = next(o for o in kops if o.kernel_name.data == "all_gather_k_scaled_matmul")
    assert kop.schedule() is not None and plan_of(kop)["gather_dim"] == "K"
    assert any("+ fp8 GEMM (e4m3 x e5m2 -> bf16, the sum over the shards scaled in the "
               f"epilogue) W={W}" in r for r in remarks_of(kop))
    names = [o.name for o in kop.walk()]
    assert "pks.acc_scale" in names and "pks.mma_async" in names
    if W > 1:
        assert "pks.signal_wait" in names and "pks.tmap_select" in names
    check_levels(text, kernel_level, sched, W, 2, emulate)


SB_CASES = [  # (W, B, Sc, H, N, row-wise, gathered, emulate); a shard's B*Sc scales are
    # copied as 16-byte vectors where B*Sc % 4 == 0 (Sc = 16, 10), else as u32 words
    (1, 2, 13, 64, 48, True, False, True), (2, 2, 13, 64, 48, True, True, True),
    (2, 2, 16, 32, 32, True, False, True), (2, 3, 7, 32, 32, False, False, True),
    (3, 2, 10, 48, 32, True, False, False), (4, 2, 5, 32, 48, False, True, False),
    (8, 2, 3, 32, 16, True, False, False)]


@pytest.mark.parametrize("W,B,Sc,H,N,row,gathered,emulate", SB_CASES,
                         ids=[f"W{c[0]}-B{c[1]}-{'row' if c[5] else 'tensor'}" for c in SB_CASES])
def test_scheduled_blocks_equals_references(W, B, Sc, H, N, row, gathered, emulate):
    text = blocks_ir(W, B, Sc, H, N, row, "bf16", gathered)
    kernel_level, sched, kops = _scheduled(text, single=W == 1)
    kop = next(o for o in kops if o.kernel_name.data == "all_gather_scaled_matmul")
    assert kop.schedule() is not None
    if W > 1:
        assert plan_of(kop)["batches"] == B
        rem = "\n".join(remarks_of(kop))
        assert f"{B} blocks of {Sc} rows per shard" in rem
        assert ("A's row scales gathered with A by the put side" in rem) == row
        names = [o.name for o in kop.walk()]
        store = "pks.vec_store" if (B * Sc) % 4 == 0 else "pks.word_store"
        assert names.count(store) == (8 * (W - 1) if row else 0)
    check_levels(text, kernel_level, sched, W, 3, emulate)


@pytest.mark.parametrize("kind", ["agk", "blocks"])
def test_emulated_w2_against_torch_scaled_mm(kind):
    """The emulator's run of the scheduled sm_90a kernel at W = 2 (its outputs forwarded,
    not the interpreter's) against torch._scaled_mm of the gathered A on each rank, within
    the fp8 tolerance of test_fp8_fused (TOL: bf16 (2e-2, 0.5))."""
    from pkc.emu.check import check_module
    from pkc.interp import random_inputs
    from tests.unit.test_fp8_fused import TOL

    W = 2
    text = (agk_ir(W, (40,), 48, 32, True) if kind == "agk" else
            blocks_ir(W, 2, 13, 64, 48, True))
    _, sched, _ = _scheduled(text)
    ins = random_inputs(parse_module(text), W, 5)
    res = check_module(sched, ins, W, tolerance=TOL, forward_emulated=True)
    assert res.ok, res.difference
    xs = [r[0] for r in ins]
    if kind == "agk":
        a, sas = torch.cat(xs, dim=1), [r[2] for r in ins]
    else:
        a = torch.cat(xs, dim=1).reshape(-1, xs[0].shape[-1])
        sa = torch.cat([r[2] for r in ins], dim=1).reshape(-1, 1)
        sas = [sa] * W
    for r in range(W):
        b = ins[r][1].t().contiguous().t()          # the [K, N] values, column-major
        want = torch._scaled_mm(a, b, sas[r], ins[r][3], out_dtype=torch.bfloat16).float()
        got = res.outputs[r][0].float()
        assert not torch.isnan(got).any()
        rtol, atol = TOL[torch.bfloat16]
        assert float((got - want).abs().max()) <= atol + rtol * float(want.abs().max())


def test_blocks_without_the_scale_rows_read_nothing(monkeypatch):
    """The peers' scale rows travel only by the put side (BlockRowScaleParts.put_extra):
    without it the interpreter finds a peer's tiles scaled by memory nobody wrote."""
    from pkc.interp.equivalence import EquivalenceError
    from pkc.passes import fused_fp8_ag

    monkeypatch.setattr(fused_fp8_ag.AgRowScaleParts, "put_extra", lambda *a: None)
    text = blocks_ir(2, 2, 13, 64, 48, True)
    kernel_level, sched, _ = _scheduled(text)
    with pytest.raises(EquivalenceError, match="never written|NaN"):
        check_levels(text, kernel_level, sched, 2, 1, emulate=False)


@pytest.mark.parametrize("kind,W,row", [("agk", 2, True), ("agk", 3, False),
                                        ("blocks", 2, False)])
def test_sm100_tensor_memory_kernels(kind, W, row):
    """sm_100a: the tensor-memory GEMM shares the producer and the plain epilogue, so the
    gather along K (any scales) and the tensor-wise block gather are scheduled there too;
    interpreter-equal, and the emulator runs the tcgen05 kernel at W = 2 (no B200 here).
    The row-wise block gather is not (its epilogue scales a piece in one of two branches,
    which the tcgen05 scale lowering refuses): a remark says so."""
    from pkc.emu.check import check_module
    from pkc.interp import random_inputs
    from tests.unit.test_fp8_fused import TOL

    text = (agk_ir(W, (2, 13), 32, 48, row, gathered=True) if kind == "agk" else
            blocks_ir(W, 2, 13, 64, 48, row))
    kernel_level, sched, kops = _scheduled(text, target="b200")
    (kop,) = [o for o in kops if "scaled" in o.kernel_name.data]
    assert kop.schedule() is not None and "tcgen05" in "\n".join(remarks_of(kop))
    check_levels(text, kernel_level, sched, W, 1, emulate=False)
    if W == 2:
        res = check_module(sched, random_inputs(parse_module(text), W, 1), W,
                           target="sm_100a", tolerance=TOL)
        assert res.ok, res.difference
    _, sched, kops = _scheduled(blocks_ir(W, 2, 13, 64, 48, True), target="b200")
    (kop,) = [o for o in kops if "matmul" in o.kernel_name.data]
    assert kop.schedule() is None and any(
        "A's row-wise scale (gathered with A): scheduled on sm_90a only" in r
        for r in remarks_of(kop))


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
@pytest.mark.parametrize("text", [agk_ir(2, (256,), 1024, 512, True),
                                  agk_ir(4, (199,), 512, 256, False, gathered=True),
                                  blocks_ir(2, 2, 133, 512, 256, True),
                                  blocks_ir(3, 3, 100, 256, 512, False, gathered=True)],
                         ids=["agk-row", "agk-tensor-G", "blocks-row", "blocks-tensor-G"])
def test_assembles_without_spills(text):
    from pkc.codegen.ptxas import assemble_one

    _, _, kops = _scheduled(text)
    kop = next(o for o in kops if o.schedule() is not None and "scaled" in o.kernel_name.data)
    ck = compile_kernel(kop, "sm_90a")
    assert ".e4m3.e5m2" in ck.ptx
    _, res = assemble_one(ck.ptx)
    assert res.spill_stores == 0 and res.spill_loads == 0 and res.stack_bytes == 0


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
def test_sm100_assembles_without_spills():
    from pkc.codegen.ptxas import assemble_one

    for text in (agk_ir(2, (256,), 1024, 512, True), blocks_ir(3, 3, 100, 256, 512, False)):
        _, _, kops = _scheduled(text, target="b200")
        kop = next(o for o in kops if o.schedule() is not None)
        ck = compile_kernel(kop, "sm_100a")
        assert "kind::f8f6f4" in ck.ptx
        _, res = assemble_one(ck.ptx, "sm_100a")
        assert res.spill_stores == 0 and res.spill_loads == 0 and res.stack_bytes == 0


# ---- what stays unfused, and why ------------------------------------------------------

def _overlap(text: str, force: bool = False):
    m = parse_module(text, "fp8.mlir")
    run_pipeline("overlap{force=true}" if force else "overlap", m)
    return m, "\n".join(format_remarks(m))


def test_cost_model_fuses_large_shapes_and_f32_results_stay_unfused():
    m, _ = _overlap(agk_ir(4, (4096,), 2048, 8192, True))
    assert [o.kernel_name.data for o in _kernels(m)] == ["all_gather_k_matmul"]
    m, _ = _overlap(blocks_ir(4, 2, 1024, 8192, 3584, True))
    assert [o.kernel_name.data for o in _kernels(m)] == ["all_gather_matmul"]
    # an f32 result: the scheduled fp8 GEMM stores 16-bit results only
    for text in (agk_ir(4, (4096,), 2048, 8192, True, "f32"),
                 blocks_ir(4, 2, 1024, 8192, 3584, False, "f32")):
        m, rem = _overlap(text)
        assert not _kernels(m)
        assert "no scheduled fp8 kernel for this" in rem and "stores bf16 or f16" in rem, rem


def test_gather_k_scale_computed_late_stays_unfused_with_the_reason():
    """A's scale made by a collective (which never moves) after the gathered tensor's
    first use (a view returned): the kernel would run before it, so nothing is fused."""
    t = (f"func.func @main(%x: tensor<13x32x{E4}>, %b: tensor<64x16x{E5}>, "
         f"%sa: tensor<13x1xf32>, %sb: tensor<1x16xf32>) -> (tensor<13x16xbf16>, "
         f"tensor<832x{E4}>) {{\n"
         f"  %g = pk.all_gather %x {{dim = 1 : i64, world = 2 : i64}} : tensor<13x32x{E4}> -> "
         f"tensor<13x64x{E4}>\n"
         f"  %h = pk.reshape %g : tensor<13x64x{E4}> -> tensor<832x{E4}>\n"
         '  %s2 = pk.all_reduce %sa {reduce = "sum", world = 2 : i64} : tensor<13x1xf32> -> '
         "tensor<13x1xf32>\n"
         f"  %y = pk.scaled_matmul %g, %b scales(%s2, %sb) : (tensor<13x64x{E4}>, "
         f"tensor<64x16x{E5}>, tensor<13x1xf32>, tensor<1x16xf32>) -> tensor<13x16xbf16>\n"
         f"  func.return %y, %h : tensor<13x16xbf16>, tensor<832x{E4}>\n}}\n")
    m, rem = _overlap(t, force=True)
    assert not _kernels(m)
    assert ("fp8.mlir:2:3: remark: [pk.all_gather] left unfused: all_gather(K)+mm: the scales "
            "are computed after the gathered tensor's first use") in rem, rem


# ---- from torch programs ---------------------------------------------------------------

def _compile(fn, ins, W):
    import pkc
    from pkc.frontend import fake_process_group

    with fake_process_group(W), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pkc.compile(fn, ins, pipeline="default{force=true tile=16 tile-k=16}")


@pytest.mark.parametrize("W", [2, 3])
def test_torch_programs_get_the_fusions(W):
    """``_scaled_mm`` after a functional all-gather along the last dim (A's row scale an
    input: the gathered row's; and of the fp8 bytes viewed uint8, tensor-wise), and after a dim-1 gather of [B, Sc, H] with A's row scale
    gathered the same way: each one fused scaled kernel, nothing left beside it, equal to
    eager torch on W simulated ranks."""
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    from pkc.frontend import run_eager
    from pkc.passes.patterns import FUSION, Fusion
    from pkc.target.cost import Pattern

    e4 = torch.float8_e4m3fn

    def agk(a, b, sa, sb):
        ag = funcol.all_gather_tensor(a, 1, dist.group.WORLD)
        return torch._scaled_mm(ag, b.t(), sa, sb, out_dtype=torch.bfloat16)

    def agk_bytes(a, b, sa, sb):     # DTensor + float8's idiom: the bytes gathered
        ag = funcol.all_gather_tensor(a.view(torch.uint8), 1, dist.group.WORLD).view(e4)
        return torch._scaled_mm(ag, b.t(), sa, sb, out_dtype=torch.bfloat16)

    def agb(a, b, sa, sb):
        ag = funcol.all_gather_tensor(a, 1, dist.group.WORLD)
        sg = funcol.all_gather_tensor(sa, 1, dist.group.WORLD)
        return torch._scaled_mm(ag.reshape(-1, ag.shape[-1]), b.t(),
                                sg.reshape(-1, 1), sb, out_dtype=torch.bfloat16)

    gen = torch.Generator().manual_seed(W)
    f8 = lambda *s: (torch.randn(*s, generator=gen) * 2).to(e4)  # noqa: E731
    pos = lambda *s: torch.rand(*s, generator=gen) + 0.5  # noqa: E731
    cases = [(agk, Pattern.ALL_GATHER_K_MM, 1,
              [(f8(5, 16), f8(16, 16 * W), pos(5, 1), pos(1, 16)) for _ in range(W)]),
             (agk_bytes, Pattern.ALL_GATHER_K_MM, 1,
              [(f8(7, 16), f8(32, 16 * W), pos(()), pos(())) for _ in range(W)]),
             (agb, Pattern.ALL_GATHER_MM, 2,
              [(f8(2, 3, 32), f8(16, 32), pos(2, 3, 1), pos(1, 16)) for _ in range(W)])]
    for fn, pattern, batches, ins in cases:
        prog = _compile(fn, ins[0], W)
        fused = [(kop, Fusion.from_attr(kop.attributes[FUSION])[0])
                 for kop in _kernels(prog.module) if FUSION in kop.attributes]
        assert [(f.pattern, f.scaled, f.batches) for _, f in fused] == [(pattern, True,
                                                                        batches)], \
            "\n".join(prog.remarks())
        left = [o.name for o in prog.module.walk()
                if isinstance(o, (g.AllGatherOp, g.MatmulOp))]
        assert not left, left
        want = run_eager(lambda r, fn=fn: fn, ins, world_size=W)
        got = prog.run_simulated(ins)
        for r in range(W):
            torch.testing.assert_close(got[r][0].float(), want[r][0].float(), rtol=2e-2,
                                       atol=2e-2)
