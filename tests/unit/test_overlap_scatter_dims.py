"""overlap fuses a matmul with a reduce-scatter along any dim: rows or columns of a 2-d
product, dim 1 (row blocks, DTensor sequence parallelism's ``Shard(1)``) or the last dim
of its 3-d view; interpreter-checked through overlap and buffer-elision (the default
pipeline), W in {2, 3, 4}, odd shapes, tiles that overhang chunks; and what stays unfused
(an activation before the scatter, a gather along dim 1) says why at the user's line; a bias
add before the scatter is fused."""

from __future__ import annotations

import warnings

import pytest
import torch

import pkc
from pkc.dialects import graph as g
from pkc.dialects import kernel as k
from pkc.frontend import fake_process_group
from pkc.ir import parse_module
from pkc.passes.patterns import FUSION, Fusion
from pkc.passes.registry import run_pipeline
from pkc.passes.remarks import remarks_of
from pkc.testing import check_transform

pytestmark = [pytest.mark.filterwarnings("ignore::FutureWarning"),
              pytest.mark.filterwarnings("ignore::pkc.frontend.PkcNotCompiledWarning")]


def _rs_ir(W: int, lead: tuple[int, ...], dim: int, t: str, K: int = 40, N_per: int = 5) -> str:
    """matmul [R, K] x [K, N] -> view [*lead, N] (lead[d] scattered when d < len(lead)) ->
    reduce_scatter(dim)."""
    shape = [*lead]
    N = N_per * W if dim == len(lead) else 7
    full = [*shape, N]
    out = list(full)
    out[dim] //= W
    R = 1
    for d in lead:
        R *= d
    ts = lambda s: "x".join(map(str, s)) + f"x{t}"  # noqa: E731
    view = "" if len(lead) == 1 else f'''
  %v = pk.reshape %c : tensor<{R}x{N}x{t}> -> tensor<{ts(full)}>'''
    src = "%c" if len(lead) == 1 else "%v"
    return f"""
func.func @main(%a: tensor<{R}x{K}x{t}>, %b: tensor<{K}x{N}x{t}>) -> tensor<{ts(out)}> {{
  %c = pk.matmul %a, %b : (tensor<{R}x{K}x{t}>, tensor<{K}x{N}x{t}>) -> tensor<{R}x{N}x{t}>{view}
  %o = pk.reduce_scatter {src} {{dim = {dim} : i64, reduce = "sum", world = {W} : i64}} : tensor<{ts(full)}> -> tensor<{ts(out)}>
  func.return %o : tensor<{ts(out)}>
}}"""


CASES = {
    # name: (lead dims as a function of W, scatter dim, expected (scatter_dim, batches))
    "2d-cols": (lambda W: (9,), 1, (1, 1)),
    "3d-dim1": (lambda W: (3, 3 * W), 1, (0, 3)),        # [B=3, S, N]: B row blocks
    "3d-dim2": (lambda W: (2, 5), 2, (1, 1)),
    "4d-dim1": (lambda W: (2, W, 3), 1, (0, 2)),         # blocks of W*3 rows, chunks of 3
}


def _fused(m) -> k.KernelOp:
    (kop,) = [o for o in m.walk() if isinstance(o, k.KernelOp)]
    return kop


@pytest.mark.parametrize("name,W", [(n, w) for n in CASES for w in (2, 3, 4)
                                    if w != 4 or n in ("2d-cols", "3d-dim1")])
def test_fused_reduce_scatter_along_dim_is_equivalent(name: str, W: int) -> None:
    lead, dim, (sd, bt) = CASES[name]
    text = _rs_ir(W, lead(W), dim, "f32")
    probe = parse_module(text)
    run_pipeline("overlap{force=true}", probe)
    fusion, _ = Fusion.from_attr(_fused(probe).attributes[FUSION])
    assert (fusion.scatter_dim, fusion.batches) == (sd, bt)
    assert not any(isinstance(o, (g.MatmulOp, g.ReduceScatterOp)) for o in probe.walk())
    # small tiles (5 x 5, K step 16): row and column tiles overhang chunk and buffer ends
    for ov in ("inter", "intra"):
        check_transform(lambda w: parse_module(text),
                        f"default{{force=true overlap={ov} tile=5 tile-k=16}}",
                        world_sizes=(W,), seeds=(W,), tolerance={torch.float32: (1e-4, 1e-4)})


def test_bf16_rows_in_blocks_with_f32_accumulation() -> None:
    text = _rs_ir(3, (2, 9), 1, "bf16", K=24)
    check_transform(lambda w: parse_module(text), "default{force=true tile=4 tile-k=8}",
                    world_sizes=(3,), seeds=(0,))


def test_old_fusion_attributes_still_read() -> None:
    """pk.fusion written before scatter_dim / batches existed reads with their defaults,
    and the usual case still prints without them."""
    m = parse_module(_rs_ir(2, (6,), 0, "f32").replace("x7x", "x7x"))
    run_pipeline("overlap{force=true}", m)
    attr = _fused(m).attributes[FUSION]
    assert "scatter_dim" not in attr.data and "batches" not in attr.data
    fusion, stage = Fusion.from_attr(attr)
    assert (fusion.scatter_dim, fusion.batches, stage) == (0, 1, "staged")


# ----------------------------------------------------------------------------------------
# DTensor sequence parallelism (Shard(1)): the reduce-scatter of fc2's output, [B, S, D]
# along dim 1, B = 2. With a bias (RowwiseParallel adds bias / W on every rank) the product
# reaches the scatter through "add", which the kernel takes into its epilogue.


def _sp_model(world: int, bias: bool):
    from torch import nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1 = nn.Linear(16, 32)
            self.fc2 = nn.Linear(32, 16, bias=bias)

        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(x)))  # LINE-SP

    torch.manual_seed(0)
    mesh = init_device_mesh("cpu", (world,))
    plan = {"fc1": ColwiseParallel(input_layouts=Shard(1)),
            "fc2": RowwiseParallel(output_layouts=Shard(1))}
    return parallelize_module(MLP(), mesh, plan)


@pytest.mark.parametrize("bias", [False, True])
def test_dtensor_sequence_parallel_shard1(bias: bool) -> None:
    W = 2
    with fake_process_group(W), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = pkc.compile(_sp_model(W, bias), (torch.randn(2, 3, 16),),
                           pipeline="default{force=true}")
    names = [o.kernel_name.data for o in prog.module.walk() if isinstance(o, k.KernelOp)]
    remarks = "\n".join(prog.remarks())
    # fc1's input, gathered along dim 1 of [2, 3, 16] (2 blocks of rows per shard), and
    # fc1's matmul are one kernel (overlap_gather_blocks.py), placed after the weight's
    # transpose that the DTensor graph puts between the gather's view and the matmul
    assert "left unfused: all_gather+mm" not in remarks
    ag = next(o for o in prog.module.walk() if isinstance(o, k.KernelOp)
              and o.kernel_name.data == "all_gather_matmul")
    fusion, _ = Fusion.from_attr(ag.attributes[FUSION])
    assert (fusion.batches, fusion.gathered) == (2, False)
    assert [tuple(v.type.get_shape()) for v in ag.inputs] == [(6, 16), (16, 16)]
    # with or without fc2's bias, fc2 and the scatter are one kernel (the bias: every
    # rank adds its own to the product tiles before they travel, patterns_bias.py)
    assert "matmul_reduce_scatter" in names
    kop = next(o for o in prog.module.walk() if isinstance(o, k.KernelOp)
               and o.kernel_name.data == "matmul_reduce_scatter")
    fusion, _ = Fusion.from_attr(kop.attributes[FUSION])
    assert (fusion.scatter_dim, fusion.batches, fusion.bias) == (0, 2, bias)
    assert len(kop.inputs) == 2 + bias
    assert any("fused mm+reduce_scatter" in r for r in remarks_of(kop))
    # either way the program computes what the unfused one does (interpreter, all ranks)
    from pkc.interp import interpret, random_inputs
    from pkc.interp.equivalence import compare_outputs

    ref = parse_module(prog.stages[0][1])
    xs = random_inputs(ref, W, seed=1)
    compare_outputs(interpret(ref, xs, W), interpret(prog.module, xs, W),
                    tolerance={torch.float32: (1e-4, 1e-4)})


@pytest.mark.parametrize("lead,dim,why", [
    ((2, 8), 1, None), ((8,), 1, None),
    ((2, 8), 1, "N = 12 and K = 16 must be multiples of 8")])
def test_gpu_paths_take_the_new_layouts_or_say_why(lead, dim, why) -> None:
    """The scheduled GEMM + reduce-scatter scatters columns and blocks of rows with their
    own tile ownership (pkc/passes/fused_rs_layouts.py); a shape TMA cannot address keeps
    its kernel-level body (the portable path) and says why."""
    from pkc.passes.pipelines import kernel_lines, schedule_for_target
    from pkc.passes.remarks import format_remarks, plan_of

    n = "x16x" if why is None else "x12x"
    m = parse_module(_rs_ir(2, lead, dim, "bf16", K=16, N_per=8).replace("x7x", n))
    run_pipeline("default{force=true}", m)
    scheduled, _ = schedule_for_target(m, "h200")
    if why is None:
        assert _fused(scheduled).schedule() is not None
        assert plan_of(_fused(scheduled))["scatter_dim"] == (1 if len(lead) == 1 else 0)
        return
    assert "portable path (fused kernel left unscheduled" in "\n".join(kernel_lines(scheduled))
    assert _fused(scheduled).schedule() is None
    assert why in "\n".join(format_remarks(scheduled))
