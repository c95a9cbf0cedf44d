"""An all-gather along the matmul's contraction dim K fused into the GEMM (issue 20; torch's
``test_fuse_all_gather_matmul`` with gather_dim = the last dim of A): ``overlap`` matches
it (2-d, 3-d through the linear layer's view, the gathered tensor returned or not), the
kernel-level form is interpreter-equivalent to the graph for W in {2, 3, 4, 8} on odd
shapes (staged and elided, inter and intra), ``schedule-fused`` makes the sm_90a kernel
(pkc/passes/ag_k_schedule.py) that the emulator runs equal to torch for W = 1..4 (and the
sm_100a tensor-memory one), ptxas takes it, and a torch program over a fake process group
gets the fusion."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest
import torch

from pkc.codegen.ptxas import find_ptxas
from pkc.dialects import graph as g
from pkc.dialects import kernel as k
from pkc.dialects import schedule_comm as c
from pkc.dialects import schedule_fused as sf
from pkc.ir import parse_module
from pkc.passes.patterns import FUSION, Fusion
from pkc.passes.registry import run_pipeline
from pkc.passes.remarks import plan_of, remarks_of
from pkc.target.cost import Pattern, plan_fusion
from pkc.testing import check_transform

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from fused_ag_k_ir import compile_ir, scheduled_module  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore::FutureWarning"),
              pytest.mark.filterwarnings("ignore::pkc.frontend.PkcNotCompiledWarning")]

F32_TOL = {torch.float32: (1e-4, 1e-4)}


def _text(W: int, lead: tuple[int, ...], Kc: int, N: int, t: str = "f32",
          gathered: bool = False) -> str:
    """all_gather of [*lead, Kc] along the last dim, (the [rows, K] view,) a matmul by
    [K, N]; with ``gathered`` the gathered tensor is returned too."""
    K, R = W * Kc, 1
    for d in lead:
        R *= d
    ts = lambda *s: "x".join(map(str, s)) + f"x{t}"  # noqa: E731
    x, gt = ts(*lead, Kc), ts(*lead, K)
    rt = f"tensor<{ts(R, N)}>" + (f", tensor<{gt}>" if gathered else "")
    view, lhs = "", "%g"
    if len(lead) > 1:
        view, lhs = f"  %v = pk.reshape %g : tensor<{gt}> -> tensor<{ts(R, K)}>\n", "%v"
    return (f"func.func @main(%x: tensor<{x}>, %w: tensor<{ts(K, N)}>) -> ({rt}) {{\n"
            f"  %g = pk.all_gather %x {{dim = {len(lead)} : i64, world = {W} : i64}} : "
            f"tensor<{x}> -> tensor<{gt}>\n{view}"
            f"  %y = pk.matmul {lhs}, %w : (tensor<{ts(R, K)}>, tensor<{ts(K, N)}>) -> "
            f"tensor<{ts(R, N)}>\n"
            f"  func.return %y{', %g' if gathered else ''} : {rt}\n}}\n")


def _kernels(m) -> list[k.KernelOp]:
    return [o for o in m.walk() if isinstance(o, k.KernelOp)]


# ---- matching and the kernel-level form ------------------------------------------------

# (W, lead dims, Kc, N, gathered): odd shapes; tiles of 5 x 5 with a K step of 4 overhang
# rows, columns and every shard's K (Kc is not a multiple of 4 but for W = 8)
CASES = [(1, (7,), 5, 6, True), (2, (13,), 11, 9, False), (3, (2, 7), 6, 5, True), (4, (9,), 5, 7, True),
         (8, (3, 2), 4, 3, False)]


@pytest.mark.parametrize("W,lead,Kc,N,gathered", CASES,
                         ids=[f"W{c[0]}-{len(c[1]) + 1}d{'-G' if c[4] else ''}" for c in CASES])
def test_kernel_level_form_is_equivalent(W, lead, Kc, N, gathered):
    text = _text(W, lead, Kc, N, gathered=gathered)
    probe = parse_module(text)
    run_pipeline("overlap{force=true}", probe)
    (kop,) = _kernels(probe)
    fusion, _ = Fusion.from_attr(kop.attributes[FUSION])
    assert (fusion.pattern, fusion.gathered) == (Pattern.ALL_GATHER_K_MM, gathered)
    assert kop.kernel_name.data == "all_gather_k_matmul"
    assert not any(isinstance(o, (g.AllGatherOp, g.MatmulOp)) for o in probe.walk())
    # staged (overlap alone) and elided (default: buffer-elision), both overlap styles
    for ov in ("inter", "intra"):
        for pipe in ("overlap", "default"):
            check_transform(lambda w: parse_module(text),
                            f"{pipe}{{force=true overlap={ov} tile=5 tile-k=4}}",
                            world_sizes=(W,), seeds=(W,), tolerance=F32_TOL)


TWO = """func.func @main(%x: tensor<13x11xf32>, %w: tensor<22x9xf32>, %v: tensor<22x5xf32>)
    -> (tensor<13x9xf32>, tensor<13x5xf32>) {
  %g = pk.all_gather %x {dim = 1 : i64, world = 2 : i64} : tensor<13x11xf32> -> tensor<13x22xf32>
  %y = pk.matmul %g, %w : (tensor<13x22xf32>, tensor<22x9xf32>) -> tensor<13x9xf32>
  %z = pk.matmul %g, %v : (tensor<13x22xf32>, tensor<22x5xf32>) -> tensor<13x5xf32>
  func.return %y, %z : tensor<13x9xf32>, tensor<13x5xf32>
}"""


def test_two_matmuls_gather_once():
    """Two matmuls of one gather along K: the first is fused, the kernel returns the
    gathered tensor and the second reads it (one gather, no second all_gather)."""
    m = parse_module(TWO)
    run_pipeline("overlap{force=true}", m)
    (kop,) = _kernels(m)
    assert len(kop.outputs) == 2
    (mm,) = [o for o in m.walk() if isinstance(o, g.MatmulOp)]
    assert mm.lhs is kop.outputs[1] and not any(isinstance(o, g.AllGatherOp) for o in m.walk())
    check_transform(lambda w: parse_module(TWO), "default{force=true tile=5 tile-k=4}",
                    world_sizes=(2,), seeds=(2,), tolerance=F32_TOL)


def test_cost_model_plans_the_gather_along_k():
    """Fused where the GEMM hides the gather; the plan names the pattern. With the put side
    serving row block by row block, a row block is complete after its share of the gather,
    so the prediction is within 2% of the gather along rows (a small product at W = 8,
    where every row block waits for 7 shards, is not fused)."""
    for W in (2, 4, 8):
        k = plan_fusion("h200", Pattern.ALL_GATHER_K_MM, (8192, 8192, 8192), W)
        rows = plan_fusion("h200", Pattern.ALL_GATHER_MM, (8192, 8192, 8192), W)
        assert k.fuse and k.remark().startswith("fused all_gather(K)+mm: predicted")
        assert rows.fused_time <= k.fused_time <= 1.02 * rows.fused_time
    assert not plan_fusion("h200", Pattern.ALL_GATHER_K_MM, (512, 512, 512), 8).fuse


# ---- the scheduled kernel --------------------------------------------------------------


def test_schedule_writes_the_kernel_with_its_decisions():
    W, M, N, Kc = 3, 101, 200, 136
    (kop,) = _kernels(scheduled_module(W, M, N, Kc, "nk", gathered=True))
    plan = plan_of(kop)
    assert (plan["schedule"], plan["fused_kind"], plan["gather_dim"]) == ("fused", "ag", "K")
    assert plan["shard_k"] == Kc and plan["gathered_output"] is True
    # sm-partition sized the put CTAs for the gathered [M, W*Kc]; the pass followed it
    from pkc.target.fused_tuning import ag_put_ctas
    assert plan["put_ctas"] == plan["comm_ctas"] == ag_put_ctas(M, N, W * Kc, W)[0]
    assert f"{plan['put_ctas']} put CTAs from sm-partition's plan" in remarks_of(kop)[-1]
    assert "scheduled all-gather along K + GEMM W=3 101x200x408" in remarks_of(kop)[-1]
    # rows of 272 bytes: whole row blocks into the slots [W, M, Kc] (A and G seen as
    # [1 | W, M, Kc]), the gathered [M, K] from them after the kernel
    assert plan["gathered_layout"] == "slots"
    views = [o.dim_list for o in kop.block.ops if o.name == "pks.tmap_view"]
    assert views == [[1, M, Kc], [W, M, Kc]]
    assert "is not a put piece of 8192-32768 bytes" in remarks_of(kop)[-1]
    ops = [type(o) for o in kop.parent.ops]
    at = ops.index(k.KernelOp)
    assert ops[at + 1:at + 4] == [g.ReshapeOp, g.TransposeOp, g.ReshapeOp]
    # waits: the producer's (one site, per peer shard's row block) and the put side's
    # announcements (one per peer)
    assert len([o for o in kop.walk() if isinstance(o, c.SignalWaitOp)]) == 1 + (W - 1)
    assert len([o for o in kop.walk() if isinstance(o, sf.TmapSelectOp)]) == 1


def test_gathered_rows_of_8k_are_written_in_place():
    """Rows of 8 KiB (Kc = 4096): the puts write each shard row into its row of G
    [M, W*Kc] (pieces of one row, a ring of 16 such: the slots' bytes in flight), A and G
    read through [M, 1 | W, Kc]; G returned as it is."""
    W, M, N, Kc = 3, 101, 200, 4096
    (kop,) = _kernels(scheduled_module(W, M, N, Kc, "nk", gathered=True))
    plan = plan_of(kop)
    assert plan["gathered_layout"] == "rows"
    assert (plan["put_piece"], plan["put_ring"], plan["put_lag"]) == (2 * Kc, 16, 8)
    views = [o.dim_list for o in kop.block.ops if o.name == "pks.tmap_view"]
    assert views == [[M, 1, Kc], [M, W, Kc]]
    assert tuple(kop.outputs[1].type.get_shape()) == (M, W * Kc)
    assert not any(isinstance(o, g.TransposeOp) for o in kop.parent.ops)


def test_gathered_rows_longer_than_a_piece_come_back_from_slots():
    """A shard row longer than a put piece (Kc = 16400: 32800 bytes > 32 KiB): the puts
    move whole row blocks into the slots [W, M, Kc] and the gathered [M, K] comes from
    them after the kernel (reshape, transpose, reshape)."""
    W, M, N, Kc = 2, 64, 64, 16400
    (kop,) = _kernels(scheduled_module(W, M, N, Kc, "kn", gathered=True))
    plan = plan_of(kop)
    assert plan["gathered_layout"] == "slots" and plan["put_piece"] < 2 * Kc
    views = [o.dim_list for o in kop.block.ops if o.name == "pks.tmap_view"]
    assert views == [[1, M, Kc], [W, M, Kc]]
    assert "transposed to [M, K] after the kernel" in remarks_of(kop)[-1]
    ops = [type(o) for o in kop.parent.ops]
    at = ops.index(k.KernelOp)
    assert ops[at + 1:at + 4] == [g.ReshapeOp, g.TransposeOp, g.ReshapeOp]


@pytest.mark.parametrize("W,lead,Kc,N,gathered", [(1, (40,), 24, 16, True),
                                                  (2, (40,), 24, 16, True),
                                                  (3, (2, 9), 16, 24, False),
                                                  (4, (11,), 8, 16, True),
                                                  (8, (5,), 8, 8, False)])
def test_scheduled_kernel_is_equivalent(W, lead, Kc, N, gathered):
    """interp(graph) == interp(scheduled kernel + the slots' transpose), bf16: the
    schedule-level interpreter runs the producer's shard walk, the put side and the waits."""
    text = _text(W, lead, Kc, N, "bf16", gathered)
    single = " keep-single-rank=true" if W == 1 else ""
    check_transform(lambda w: parse_module(text),
                    f"default{{force=true{single}}},schedule-fused", world_sizes=(W,),
                    seeds=(W,))


def test_w1_is_the_gemm():
    (kop,) = _kernels(scheduled_module(1, 101, 200, 136, "kn"))
    assert plan_of(kop)["comm_ctas"] == 0
    assert not any(isinstance(o, (c.SignalWaitOp, sf.TmapSelectOp)) for o in kop.walk())


def test_unschedulable_shapes_say_why():
    m = parse_module(_text(2, (40,), 12, 20, t="bf16"))
    run_pipeline("default{force=true},schedule-fused", m)
    (kop,) = _kernels(m)
    assert kop.schedule() is None
    assert any("must be multiples of 8 (TMA row strides)" in r for r in remarks_of(kop))


def _emulate(W, M, N, Kc, layout, gathered, target="h200", arch="sm_90a"):
    from pkc.emu import emulate

    ck, kop = compile_ir(W, M, N, Kc, layout, gathered, target=target, arch=arch)
    gen = torch.Generator().manual_seed(W)
    a = [torch.randn(M, Kc, generator=gen).to(torch.bfloat16) for _ in range(W)]
    w = (torch.randn(N, W * Kc, generator=gen) / (W * Kc) ** 0.5).to(torch.bfloat16)
    b = w if layout == "nk" else w.t().contiguous()
    out = emulate(ck, [[a[r], b] for r in range(W)], kop=kop, sms=2 + ck.meta.fused.side_ctas)
    ref = torch.cat(a, dim=1).float() @ w.float().t()
    for r in range(W):
        got = out[r][0].float()
        assert not torch.isnan(got).any()
        assert float((got - ref).abs().max()) <= 2 ** -7 * float(ref.abs().max())
        if gathered:    # G in its own layout [M, K] (or the slots [W*M, Kc])
            rows = plan_of(kop).get("gathered_layout") == "rows"
            assert torch.equal(out[r][1], torch.cat(a, dim=1 if rows else 0))
    return kop


@pytest.mark.parametrize("W,M,N,Kc,layout,gathered", [
    (1, 67, 72, 136, "kn", True),
    (2, 40, 16, 24, "nk", False),
    (3, 67, 40, 24, "kn", True),
    (4, 33, 24, 16, "nk", False),
])
def test_emulated_sm90_against_torch(W, M, N, Kc, layout, gathered):
    """The PTX (put CTAs, bulk copies into the peers' slots, epoch signals, the producer's
    shard walk) for W ranks against torch."""
    _emulate(W, M, N, Kc, layout, gathered)


def test_emulated_sm90_gathered_in_place(monkeypatch):
    """G written in its own layout (one shard row per put piece), W = 3: with the row
    threshold lowered to 1 KiB so that the emulator runs a small K (the production one,
    8 KiB, is the sm_100a test's)."""
    from pkc.passes import ag_k_schedule

    monkeypatch.setattr(ag_k_schedule, "ROW_PIECE_MIN", 1024)
    kop = _emulate(3, 67, 40, 512, "kn", True)
    assert plan_of(kop)["gathered_layout"] == "rows"


def test_emulated_sm90_several_row_blocks():
    """Two row blocks of group_m x bm rows (put row block by row block to every peer): a
    CTA waits for each peer shard's block once."""
    assert plan_of(_emulate(2, 1030, 16, 16, "kn", False))["row_blocks"] == 2


def test_emulated_sm100_tensor_memory():
    """sm_100a: the tensor-memory GEMM shares the producer, so the same parts give it
    (W = 3 with the slots; W = 2 with rows of 8 KiB written in place)."""
    _emulate(3, 67, 40, 24, "kn", True, target="b200", arch="sm_100a")
    kop = _emulate(2, 40, 16, 4096, "kn", True, target="b200", arch="sm_100a")
    assert plan_of(kop)["gathered_layout"] == "rows"


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
@pytest.mark.parametrize("case,target,arch", [
    ((2, 199, 136, 72, "nk", False), "h200", "sm_90a"),
    ((4, 67, 264, 72, "kn", True), "h200", "sm_90a"),
    ((3, 67, 264, 72, "kn", True), "b200", "sm_100a")],
    ids=["W2_nk", "W4_kn_gathered", "W3_sm100a"])
def test_assembles_without_spills(case, target, arch):
    from pkc.codegen.ptxas import assemble_one

    ck, _ = compile_ir(*case, target=target, arch=arch)
    _, res = assemble_one(ck.ptx, arch)
    assert res.spill_stores == 0 and res.spill_loads == 0 and res.stack_bytes == 0


# ---- from a torch program --------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_torch_program_gets_the_fusion(dtype):
    """torch's micro-pipeline-TP test, gather_dim = 2 of a 3-d A, A returned too: one
    all_gather_k_matmul kernel, the program interpreter-equal to the unfused one; in bf16
    the program's kernel module (what the GPU runs) has the scheduled kernel."""
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    import pkc
    from pkc.frontend import fake_process_group
    from pkc.interp import interpret, random_inputs
    from pkc.interp.equivalence import compare_outputs

    def fn(a_shard, b):
        a = funcol.all_gather_tensor(a_shard, 2, dist.group.WORLD)
        return a, a @ b

    W = 2
    with fake_process_group(W), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = pkc.compile(fn, (torch.randn(2, 8, 16, dtype=dtype),
                                torch.randn(32, 16, dtype=dtype)),
                           pipeline="default{force=true}")
    (kop,) = [o for o in _kernels(prog.module) if o.kernel_name.data == "all_gather_k_matmul"]
    fusion, _ = Fusion.from_attr(kop.attributes[FUSION])
    assert fusion.gathered and [tuple(v.type.get_shape()) for v in kop.inputs] == [(16, 16),
                                                                                  (32, 16)]
    assert not any(isinstance(o, (g.AllGatherOp, g.MatmulOp)) for o in prog.module.walk())
    assert not any("[pk.all_gather]" in r for r in prog.remarks())
    ref = parse_module(prog.stages[0][1])
    xs = random_inputs(ref, W, seed=1)
    compare_outputs(interpret(ref, xs, W), interpret(prog.module, xs, W))
    if dtype is torch.bfloat16:
        (run,) = _kernels(prog.kernel_module)
        assert run.kernel_name.data == "all_gather_k_matmul" and run.schedule() is not None
        # rows of 32 bytes: the slots [32, 16] back to [16, 32], then [2, 8, 32]
        ops = [type(o) for o in run.parent.ops]
        at = ops.index(k.KernelOp)
        assert ops[at + 1:at + 4] == [g.ReshapeOp, g.TransposeOp, g.ReshapeOp]
