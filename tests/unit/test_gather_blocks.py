"""An all-gather along a middle dim feeding matmuls through the rows view (DTensor
sequence parallelism, Shard(1) of [B, S/W, H] with B > 1): overlap fuses it
(pkc/passes/overlap_gather_blocks.py, pk.fusion.batches = B), the kernel-level kernel
computes what the graph computes (interpreter, W in {2, 3, 4, 8}, S/W no multiple of the
tile, one or two weights, the gathered tensor returned or not, staged and elided), the
scheduled kernel (pkc/passes/ag_blocks_schedule.py) computes what the kernel-level one
does (schedule-level interpreter), its sm_90a PTX runs in the emulator for W = 1..4
against torch (and assembles with ptxas), the sm_100a tensor-memory kernel too, and a
DTensor SP program on the fake process group gets the scheduled kernel."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from pkc.codegen.emit import kernels_of
from pkc.dialects import kernel as k
from pkc.ir import make_context, parse_module
from pkc.passes.patterns import FUSION, Fusion
from pkc.passes.registry import parse_pipeline
from pkc.passes.remarks import format_remarks, plan_of
from pkc.testing import check_transform

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from fused_ag_blocks import compile_case  # noqa: E402

BF16 = {torch.bfloat16: (2e-2, 1 / 8)}


def text(W: int, B: int, Sc: int, H: int, Ns=(40,), gathered: bool = False,
         t: str = "bf16") -> str:
    """x [B, Sc, H] -all_gather(dim 1)-> [B, S, H] -> [B*S, H] -> matmul by each w_i."""
    S = W * Sc
    x, g, v = (f"tensor<{B}x{Sc}x{H}x{t}>", f"tensor<{B}x{S}x{H}x{t}>",
               f"tensor<{B * S}x{H}x{t}>")
    ws = [f"tensor<{H}x{n}x{t}>" for n in Ns]
    ys = [f"tensor<{B * S}x{n}x{t}>" for n in Ns]
    body = "".join(f"  %y{i} = pk.matmul %v, %w{i} : ({v}, {w}) -> {y}\n"
                   for i, (w, y) in enumerate(zip(ws, ys)))
    rets = [f"%y{i}" for i in range(len(Ns))] + (["%g"] if gathered else [])
    rts = ys + ([g] if gathered else [])
    args = ", ".join(f"%w{i}: {w}" for i, w in enumerate(ws))
    return (f"func.func @main(%x: {x}, {args}) -> ({', '.join(rts)}) {{\n"
            f"  %g = pk.all_gather %x {{dim = 1 : i64, world = {W} : i64}} : {x} -> {g}\n"
            f"  %v = pk.reshape %g : {g} -> {v}\n{body}"
            f"  func.return {', '.join(rets)} : {', '.join(rts)}\n}}\n")


def run(src: str, pipeline: str):
    m = parse_module(src, "blocks.mlir")
    for p in parse_pipeline(pipeline):
        p.apply(make_context(), m)
    return m


def fused_kernels(m) -> list[k.KernelOp]:
    return [o for o in kernels_of(m) if o.kernel_name.data == "all_gather_matmul"]


# ----------------------------------------------------------------------------------------
# overlap and the kernel-level kernel


# (W, B, Sc): rows per block no multiple of the tile; fewer rows at W = 8 (interpreter time)
SIZES = [(2, 3, 13), (3, 3, 13), (4, 3, 13), (8, 2, 5)]


@pytest.mark.parametrize("W,B,Sc", SIZES)
def test_kernel_level_kernel_computes_the_graph(W, B, Sc):
    one = text(W, B, Sc, 24, (40,), gathered=True)
    m = run(one, "collective-views,overlap{force=true}")
    (kop,) = fused_kernels(m)
    fusion, _ = Fusion.from_attr(kop.attributes[FUSION])
    assert (fusion.batches, fusion.gathered) == (B, True)
    # the shard is the [B*Sc, H] view of x; G comes back as [B, S, H]
    assert tuple(kop.inputs[0].type.get_shape()) == (B * Sc, 24)
    assert tuple(kop.outputs[1].type.get_shape()) == (B * W * Sc, 24)
    # staged (intra-SM) at every W; elided (default) and inter-SM at W <= 3 (the same
    # builder; W = 8 takes a while in the interpreter)
    pipes = ["collective-views,overlap{force=true}"] + (
        ["collective-views,overlap{force=true overlap=inter}", "default{force=true}"]
        if W <= 3 else [])
    for pipe in pipes:
        check_transform(lambda w: parse_module(one), pipe, world_sizes=(W,), seeds=(W,),
                        tolerance=BF16)
    two = text(W, 2, Sc, 24, (40, 24))      # one gather for two weights
    assert len(fused_kernels(run(two, "default{force=true}"))[0].inputs) == 3
    if W <= 4:
        check_transform(lambda w: parse_module(two), "default{force=true}", world_sizes=(W,),
                        seeds=(W,), tolerance=BF16)


def test_kernel_goes_after_a_weight_computed_between_the_view_and_the_matmul():
    """DTensor graphs transpose the weight after the gather's view: the kernel is placed
    before the matmul; a user of the gathered tensor before that matmul puts it before
    the gather's first user, where the transposed weight is not there yet: overlap_hoist
    moves the transpose before it and the matmul fuses; a weight out of a collective issued
    there does not move: unfused, with the reason."""
    W, g, v = 2, "tensor<2x26x24xbf16>", "tensor<52x24xbf16>"

    def program(early: bool, reduced: bool = False) -> str:
        rets = ("%y, %n", f"tensor<52x40xbf16>, {g}") if early else ("%y", "tensor<52x40xbf16>")
        return (f"func.func @main(%x: tensor<2x13x24xbf16>, %w: tensor<40x24xbf16>) -> "
                f"({rets[1]}) {{\n"
                f"  %g = pk.all_gather %x {{dim = 1 : i64, world = {W} : i64}} : "
                f"tensor<2x13x24xbf16> -> {g}\n"
                + (f"  %n = pk.map \"neg\" %g : ({g}) -> {g}\n" if early else "") +
                f"  %v = pk.reshape %g : {g} -> {v}\n"
                + ("  %wr = pk.all_reduce %w {reduce = \"sum\", world = 2 : i64} : "
                   "tensor<40x24xbf16> -> tensor<40x24xbf16>\n" if reduced else "") +
                f"  %wt = pk.transpose {'%wr' if reduced else '%w'} {{perm = [1, 0]}} : "
                "tensor<40x24xbf16> -> tensor<24x40xbf16>\n"
                f"  %y = pk.matmul %v, %wt : ({v}, tensor<24x40xbf16>) -> tensor<52x40xbf16>\n"
                f"  func.return {rets[0]} : {rets[1]}\n}}\n")

    src, early = program(False), program(True)
    assert len(fused_kernels(run(src, "overlap{force=true}"))) == 1
    check_transform(lambda w: parse_module(src), "overlap{force=true}", world_sizes=(W,),
                    seeds=(1,), tolerance=BF16)
    m = run(early, "overlap{force=true}")
    assert len(fused_kernels(m)) == 1
    assert any("moved 1 op(s)" in r for r in format_remarks(m)), format_remarks(m)
    check_transform(lambda w: parse_module(early), "overlap{force=true}", world_sizes=(W,),
                    seeds=(1,), tolerance=BF16)
    m = run(program(True, reduced=True), "overlap{force=true}")
    assert not fused_kernels(m)
    rem = "\n".join(format_remarks(m))
    assert "blocks.mlir:2:3: remark: [pk.all_gather] left unfused: all_gather+mm: gather " \
           "along dim 1 of [2, 13, 24] (2 blocks of rows per shard): the matmul's weight is " \
           "computed after the gathered tensor's first use" in rem, rem


def test_fp8_consumer_with_a_row_scale_not_gathered_stays_unfused_with_the_reason():
    """(fp8 consumers whose A scale is tensor-wise or gathered like A are fused:
    tests/unit/test_fp8_gather_kinds.py.) A row-wise A scale that is a plain input cannot
    be the gathered shards' scale rows: left unfused, the remark says what it must be."""
    f8, g = "tensor<2x16x32xf8E4M3FN>", "tensor<2x32x32xf8E4M3FN>"
    src = (f"func.func @main(%x: {f8}, %w: tensor<32x40xf8E4M3FN>, %s: tensor<64x1xf32>, "
           "%t: tensor<1xf32>) -> tensor<64x40xbf16> {\n"
           f"  %g = pk.all_gather %x {{dim = 1 : i64, world = 2 : i64}} : {f8} -> {g}\n"
           f"  %v = pk.reshape %g : {g} -> tensor<64x32xf8E4M3FN>\n"
           "  %y = pk.scaled_matmul %v, %w scales(%s, %t) : (tensor<64x32xf8E4M3FN>, "
           "tensor<32x40xf8E4M3FN>, tensor<64x1xf32>, tensor<1xf32>) -> tensor<64x40xbf16>\n"
           "  func.return %y : tensor<64x40xbf16>\n}\n")
    m = run(src, "overlap{force=true}")
    assert not fused_kernels(m)
    assert "into an fp8 scaled matmul whose row-wise A scale is not the [64, 1] rows view " \
        "of the same gather of the shard's [.., 16, 1] scale" in "\n".join(format_remarks(m))


# ----------------------------------------------------------------------------------------
# the scheduled kernel


@pytest.mark.parametrize("W,B,Sc", SIZES)
def test_scheduled_kernel_computes_the_kernel_level_one(W, B, Sc):
    src = text(W, B, Sc, 24, (40,), gathered=True)
    m = run(src, "default{force=true},schedule-fused,dce")
    (kop,) = [o for o in kernels_of(m) if o.schedule() is not None]
    plan = plan_of(kop)
    assert (plan["fused_kind"], plan["batches"], plan["gathered_output"]) == ("ag", B, True)
    assert plan["tiles_per_chunk"] == B and plan["row_blocks"] == B   # a tile per block
    rem = format_remarks(m)[-1]
    assert f"{B} blocks of {Sc} rows per shard (block b of rank r: rows " \
           f"b*{W * Sc} + r*{Sc} of G and C), each padded to 128 rows of tiles" in rem, rem
    check_transform(lambda w: parse_module(src), "default{force=true},schedule-fused,dce",
                    world_sizes=(W,), seeds=(W,), tolerance=BF16)


def test_one_rank():
    """W = 1: the kernel-level kernel still takes the blocks (its gather moves nothing),
    the scheduled one is the plain GEMM (B plays no part: no batches in its plan)."""
    src = text(1, 2, 13, 24, (40,), gathered=True)
    (kop,) = fused_kernels(run(src, "collective-views,overlap{force=true}"))
    assert Fusion.from_attr(kop.attributes[FUSION])[0].batches == 2
    pipe = "default{force=true keep-single-rank=true},schedule-fused,dce"
    (kop,) = fused_kernels(run(src, pipe))
    assert plan_of(kop)["fused_kind"] == "ag" and "batches" not in plan_of(kop)
    for p in ("collective-views,overlap{force=true}", pipe):
        check_transform(lambda w: parse_module(src), p, world_sizes=(1,), seeds=(1,),
                        tolerance=BF16)


def test_two_weights_gather_once_along_dim_1():
    """Two weights: one scheduled kernel over both (pkc/passes/gather_many.py's parts over
    the blocks' parts; on the emulator: tests/unit/test_gather_many.py)."""
    src = text(3, 3, 13, 24, (40, 24), gathered=True)
    m = run(src, "default{force=true},schedule-fused,dce")
    (kop,) = kernels_of(m)
    assert kop.schedule() is not None
    assert (plan_of(kop)["batches"], plan_of(kop)["weights"]) == (3, 2)
    check_transform(lambda w: parse_module(src), "default{force=true},schedule-fused,dce",
                    world_sizes=(3,), seeds=(3,), tolerance=BF16)


EMU = [  # (W, B, Sc, N, H, gathered, arch)
    (1, 2, 13, 40, 24, False, "sm_90a"),
    (2, 2, 13, 40, 24, True, "sm_90a"),
    (3, 3, 9, 24, 40, False, "sm_90a"),
    (4, 2, 7, 16, 24, True, "sm_90a"),
    (2, 3, 11, 40, 24, True, "sm_100a"),
]


@pytest.mark.parametrize("W,B,Sc,N,H,gathered,arch", EMU)
def test_emulated_kernel_against_torch(W, B, Sc, N, H, gathered, arch):
    """The PTX (put CTAs' bulk copies into the peers' G, epoch signals, the GEMM through
    3-D maps) on the emulator: C within a bf16 step of torch's, G bitwise."""
    from pkc.emu import emulate

    ck, kop = compile_case(W, B, Sc, N, H, gathered, arch)
    assert plan_of(kop).get("batches", 1) == (B if W > 1 else 1)
    gen = torch.Generator().manual_seed(W)
    x = [torch.randn(B, Sc, H, generator=gen).to(torch.bfloat16) for _ in range(W)]
    w = [(torch.randn(H, N, generator=gen) / H ** 0.5).to(torch.bfloat16) for _ in range(W)]
    out = emulate(ck, [[x[r].reshape(B * Sc, H), w[r]] for r in range(W)], kop=kop,
                  sms=2 + ck.meta.fused.side_ctas)
    full = torch.cat(x, dim=1).reshape(-1, H)
    for r in range(W):
        ref = full.float() @ w[r].float()
        got = out[r][0].float()
        assert not torch.isnan(got).any()
        assert float((got - ref).abs().max()) <= 2 ** -7 * float(ref.abs().max()), r
        if gathered:
            assert torch.equal(out[r][1], full), r


def test_ptxas_assembles_without_spills(tmp_path):
    from pkc.codegen.ptxas import find_ptxas

    ptxas = find_ptxas()
    if ptxas is None:
        pytest.skip("no ptxas")
    for arch in ("sm_90a", "sm_100a"):
        ck, _ = compile_case(4, 3, 61, 1048, 712, True, arch)
        f = tmp_path / f"k_{arch}.ptx"
        f.write_text(ck.ptx)
        r = subprocess.run([ptxas, f"-arch={arch}", str(f), "-o", str(tmp_path / "k.o"), "-v"],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-2000:]
        assert "0 bytes spill stores" in r.stderr and "spill stores" in r.stderr


# ----------------------------------------------------------------------------------------
# from a real DTensor sequence-parallel program


def test_dtensor_shard1_gather_with_two_sequences_is_one_scheduled_kernel():
    """ColwiseParallel(input_layouts=Shard(1)) on a bf16 [B=2, S, 16] input: torch's
    all_gather -> split -> cat(dim 1) imports as a gather along dim 1 (import_cleanup),
    overlap fuses it with the linear's matmul (batches 2), schedule-fused schedules it."""
    import pkc
    from torch import nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

    from pkc.frontend import fake_process_group

    W = 2
    with fake_process_group(W), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        lin = nn.Linear(16, 32, bias=False).to(torch.bfloat16)
        model = parallelize_module(lin, init_device_mesh("cpu", (W,)),
                                   ColwiseParallel(input_layouts=Shard(1)))
        prog = pkc.compile(model, (torch.randn(2, 8, 16, dtype=torch.bfloat16),),
                           pipeline="default{force=true},schedule-fused")
    (kop,) = [o for o in prog.module.walk() if isinstance(o, k.KernelOp)
              and o.kernel_name.data == "all_gather_matmul"]
    assert plan_of(kop)["batches"] == 2 and plan_of(kop)["fused_kind"] == "ag"
    assert "left unfused: all_gather" not in "\n".join(prog.remarks())
    from pkc.interp import interpret, random_inputs
    from pkc.interp.equivalence import compare_outputs

    ref = parse_module(prog.stages[0][1])
    xs = random_inputs(ref, W, seed=1)
    compare_outputs(interpret(ref, xs, W), interpret(prog.module, xs, W), tolerance=BF16)


def test_cost_model_counts_the_per_block_tiles():
    """Blocks of 513 rows tile into 5 tiles of 128 each (640 rows): the fused prediction
    grows, the unfused one does not; blocks of 512 rows cost what one block does."""
    from pkc.target.cost import block_tile_rows, as_shapes, plan_fusion

    W, N, K = 8, (3584,), 8192
    one = plan_fusion("h200", "all_gather_mm", (W * 2 * 513, N, K), W)
    two = plan_fusion("h200", "all_gather_mm", (W * 2 * 513, N, K, 1, 2), W)
    assert two.fused_time > one.fused_time and two.unfused_time == one.unfused_time
    even = [plan_fusion("h200", "all_gather_mm", (W * 2 * 512, N, K, 1, b), W) for b in (1, 2)]
    assert even[0].fused_time == even[1].fused_time
    assert block_tile_rows(as_shapes("all_gather_mm", (W * 2 * 513, N, K, 1, 2)), W).M == \
        W * 2 * 640
    m = run(text(2, 2, 10, 24), "overlap{force=true}")
    assert "each rank's shard is 2 blocks of 10 rows (block b of rank r is rows b*20 + r*10 " \
           "of the operand); each block is tiled on its own (128-row tiles never span two), " \
           "so the GEMM covers 512 rows for 40" in "\n".join(format_remarks(m))
