"""The scheduled GEMM + reduce-scatter along columns (2-D dim 1, 3-D last dim) and along
dim 1 of a 3-D [B, S, N] result (B blocks of rows, DTensor Shard(1)):
pkc/passes/fused_rs_layouts.py. The schedule-level interpreter computes what the
kernel-level kernel computes (check_transform) for W in {2, 3, 4, 8} with odd shapes
(rows not multiples of 16 or of W, chunks wider than one tile and overhanging it); the
emulator runs the lowered kernels at W = 2 and 3 and equals the interpreter (bitwise:
W = 2 has one add per element, W = 3 is the fixed-order variant); row blocks that no tile
divides go through 3-D output maps; what stays on the portable path says why at the
user's line."""

from __future__ import annotations

import pytest
import torch

from pkc.codegen.emit import kernels_of
from pkc.dialects import kernel as k
from pkc.ir import make_context, parse_module
from pkc.passes.registry import parse_pipeline
from pkc.passes.remarks import format_remarks, plan_of
from pkc.testing import check_transform


def rs_text(W: int, lead: tuple[int, ...], dim: int, N: int, K: int, layout: str = "kn",
            t: str = "bf16") -> str:
    """matmul [R, K] x B -> (view [*lead, N]) -> reduce_scatter(dim) (B as [K, N], or the
    transpose of an [N, K] weight for ``nk``)."""
    R = 1
    for d in lead:
        R *= d
    full = [*lead, N]
    out = list(full)
    out[dim] //= W
    ts = lambda s: "x".join(map(str, s)) + f"x{t}"  # noqa: E731
    view = "" if len(lead) == 1 else \
        f"\n  %v = pk.reshape %c : tensor<{R}x{N}x{t}> -> tensor<{ts(full)}>"
    src = "%c" if len(lead) == 1 else "%v"
    if layout == "nk":
        bdecl, bv = f"%w: tensor<{N}x{K}x{t}>", "%wt"
        pre = (f"\n  %wt = pk.transpose %w {{perm = [1, 0]}} : tensor<{N}x{K}x{t}> -> "
               f"tensor<{K}x{N}x{t}>")
    else:
        bdecl, bv, pre = f"%w: tensor<{K}x{N}x{t}>", "%w", ""
    return f"""func.func @main(%a: tensor<{R}x{K}x{t}>, {bdecl}) -> tensor<{ts(out)}> {{{pre}
  %c = pk.matmul %a, {bv} : (tensor<{R}x{K}x{t}>, tensor<{K}x{N}x{t}>) -> tensor<{R}x{N}x{t}>{view}
  %o = pk.reduce_scatter {src} {{dim = {dim} : i64, reduce = "sum", world = {W} : i64}} : tensor<{ts(full)}> -> tensor<{ts(out)}>
  func.return %o : tensor<{ts(out)}>
}}
"""


def kernel_level(text: str):
    m = parse_module(text, "layouts.mlir")
    for p in parse_pipeline("default{force=true}"):
        p.apply(make_context(), m)
    return m


def scheduled(text: str, opts: str = ""):
    m = kernel_level(text)
    for p in parse_pipeline(f"schedule-fused{opts},dce"):
        p.apply(make_context(), m)
    return m


def _kop(m) -> k.KernelOp:
    (kop,) = [o for o in kernels_of(m) if o.schedule() is not None]
    return kop


# name: (lead(W), dim, N(W), K, B layout, expected (scatter_dim, batches))
CASES = {
    # 2-D columns: 37 rows, chunks of 24 columns (not a multiple of 16)
    "cols-2d": (lambda W: (37,), 1, lambda W: 24 * W, 40, "kn", (1, 1)),
    # 3-D [3, 7, N] scattered on its last dim: the column kernel on the [21, N] product
    "cols-3d": (lambda W: (3, 7), 2, lambda W: 8 * W, 24, "nk", (1, 1)),
    # 3-D [2, 64 W, 24] scattered on dim 1: 2 blocks of rows, 64 per rank (64-row tiles)
    "blocks-3d": (lambda W: (2, 64 * W), 1, lambda W: 24, 16, "kn", (0, 2)),
    # 3-D [3, 21 W, 40]: 21 rows per rank and block, no tile divides them: each block
    # padded to one 128-row tile, the owner's output seen as [3, 21, 40] (3-D maps)
    "blocks-odd": (lambda W: (3, 21 * W), 1, lambda W: 40, 24, "nk", (0, 3)),
}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("W", [2, 3, 4, 8])
def test_scheduled_layout_computes_the_kernel_level_reduce_scatter(name, W):
    lead, dim, N, K, layout, (sd, bt) = CASES[name]
    text = rs_text(W, lead(W), dim, N(W), K, layout)
    kop = _kop(scheduled(text))
    plan = plan_of(kop)
    assert (plan["schedule"], plan["fused_kind"]) == ("fused", "rs")
    assert (plan["scatter_dim"], plan["batches"]) == (sd, bt)
    assert plan["fresh_output"] is False and kop.block.args[2].type.symmetric
    # partials rounded to bf16 before they are summed, in any order: W/16 absolute
    check_transform(lambda w: kernel_level(text), "schedule-fused,dce", world_sizes=(W,),
                    seeds=(W,), tolerance={torch.bfloat16: (2e-2, W / 16)})


def test_column_chunk_wider_than_a_tile_and_overhanging_it():
    """Chunks of 136 columns: two 128-column tiles, the second computes 120 columns of
    the next chunk that the owner's map clips; 150 rows: two row tiles."""
    text = rs_text(2, (150,), 1, 272, 24, "kn")
    assert plan_of(_kop(scheduled(text)))["tiles_per_chunk"] == 4
    check_transform(lambda w: kernel_level(text), "schedule-fused,dce", world_sizes=(2,),
                    seeds=(1,), tolerance={torch.bfloat16: (2e-2, 2 / 16)})


def test_fixed_add_order_variant_of_the_column_kernel():
    text = rs_text(4, (19,), 1, 64, 24, "nk")
    assert plan_of(_kop(scheduled(text, "{deterministic=true}")))["add_order"] == "rank-ring"
    check_transform(lambda w: kernel_level(text), "schedule-fused{deterministic=true},dce",
                    world_sizes=(4,), seeds=(4,), tolerance={torch.bfloat16: (2e-2, 4 / 16)})


def test_remarks_name_the_layout_and_why_a_kernel_stays_portable():
    # scheduled: the remark says which layout and who owns what
    text = "\n".join(format_remarks(scheduled(rs_text(3, (29,), 1, 72, 40))))
    assert "scheduled GEMM + reduce-scatter of column blocks (scatter_dim 1) W=3" in text
    assert "rank p owns columns [p*24, (p+1)*24) of the 29x72 product" in text
    text = "\n".join(format_remarks(scheduled(rs_text(2, (2, 128), 1, 24, 16))))
    assert "row blocks of 2 batch blocks (3-D dim 1, Shard(1))" in text
    # left on the portable path, at the user's line (the reduce_scatter)
    for src, why in [
        (rs_text(2, (2, 100), 1, 20, 16),
         "N = 20 and K = 16 must be multiples of 8 (TMA row strides)"),
        (rs_text(2, (37,), 1, 24, 16),
         "the chunk's 12 columns must be multiples of 8 (TMA row strides"),
    ]:
        m = scheduled(src)
        assert not [o for o in kernels_of(m) if o.schedule() is not None]
        line = next(i for i, s in enumerate(src.splitlines(), 1) if "pk.reduce_scatter" in s)
        rem = [r for r in format_remarks(m) if "left unscheduled" in r]
        assert rem and why in rem[0] and rem[0].startswith(f"layouts.mlir:{line}:"), rem


# ----------------------------------------------------------------------------------------
# The lowered kernels on the emulator (sm_90a PTX-dialect), against the interpreter


def _emulate_vs_interpret(text: str, W: int, opts: str = ""):
    from pkc.codegen import compile_kernel
    from pkc.emu.launch import emulate_scheduled
    from pkc.interp.schedule import run_schedule_launches

    kop = _kop(scheduled(text, opts))
    ck = compile_kernel(kop, "sm_90a")
    gen = torch.Generator().manual_seed(W)
    x = [[torch.randn(tuple(v.type.get_shape()), generator=gen).to(torch.bfloat16)
          for v in kop.inputs] for _ in range(W)]
    emu = emulate_scheduled(ck, kop, x)
    ref = run_schedule_launches(kop, [[[x[r][i] for r in range(W)]
                                       for i in range(len(kop.inputs))]], W)[0][0]
    return kop, x, [emu[r][0] for r in range(W)], ref


EMU = {  # name: (W, text, schedule-fused options)
    "cols W=2": (2, rs_text(2, (37,), 1, 48, 24, "kn"), ""),
    "cols-3d W=3": (3, rs_text(3, (2, 35), 2, 264, 40, "nk"), "{deterministic=true}"),
    "blocks W=2": (2, rs_text(2, (2, 128), 1, 24, 16, "kn"), ""),
    "blocks W=3": (3, rs_text(3, (2, 192), 1, 16, 16, "nk"), "{deterministic=true}"),
    "blocks-odd W=2": (2, rs_text(2, (2, 100), 1, 24, 16, "kn"), ""),
    "blocks-odd W=3": (3, rs_text(3, (3, 63), 1, 40, 24, "nk"), "{deterministic=true}"),
}


@pytest.mark.parametrize("name", list(EMU))
def test_emulated_kernel_equals_the_interpreter_and_torch(name):
    W, text, opts = EMU[name]
    kop, x, emu, ref = _emulate_vs_interpret(text, W, opts)
    sd, bt = plan_of(kop)["scatter_dim"], plan_of(kop)["batches"]
    nk = "transpose" in text
    full = sum(x[r][0].float() @ (x[r][1].float().t() if nk else x[r][1].float())
               for r in range(W))
    R, N = full.shape
    for r in range(W):
        assert torch.equal(emu[r], ref[r]), f"{name}: rank {r}: emulator != interpreter"
        if sd == 1:
            want = full[:, r * (N // W):(r + 1) * (N // W)]
        else:
            want = full.reshape(bt, W, R // bt // W, N)[:, r].reshape(-1, N)
        assert emu[r].shape == want.shape
        scale = float(want.abs().max())
        assert torch.allclose(emu[r].float(), want, rtol=0, atol=W * 2 ** -7 * scale), name


# ----------------------------------------------------------------------------------------
# A bias between the matmul and the reduce-scatter (mm + b, addmm): overlap takes it into
# the kernel (patterns_bias.py), the scheduled kernel adds it in the epilogue


def bias_text(W: int, lead: tuple[int, ...], dim: int, N: int, K: int, t: str = "bf16",
              bias_shape: str = "N", bias_first: bool = False) -> str:
    """matmul -> add(bias) -> (view) -> reduce_scatter(dim)."""
    R = 1
    for d in lead:
        R *= d
    full = [*lead, N]
    out = list(full)
    out[dim] //= W
    ts = lambda s: "x".join(map(str, s)) + f"x{t}"  # noqa: E731
    bt = f"tensor<{N}x{t}>" if bias_shape == "N" else f"tensor<1x{N}x{t}>"
    ops = "%bias, %c" if bias_first else "%c, %bias"
    tys = f"{bt}, tensor<{R}x{N}x{t}>" if bias_first else f"tensor<{R}x{N}x{t}>, {bt}"
    view = "" if len(lead) == 1 else \
        f"\n  %v = pk.reshape %d : tensor<{R}x{N}x{t}> -> tensor<{ts(full)}>"
    src = "%d" if len(lead) == 1 else "%v"
    return f"""func.func @main(%a: tensor<{R}x{K}x{t}>, %b: tensor<{K}x{N}x{t}>, %bias: {bt}) -> tensor<{ts(out)}> {{
  %c = pk.matmul %a, %b : (tensor<{R}x{K}x{t}>, tensor<{K}x{N}x{t}>) -> tensor<{R}x{N}x{t}>
  %d = pk.map "add" {ops} : ({tys}) -> tensor<{R}x{N}x{t}>{view}
  %o = pk.reduce_scatter {src} {{dim = {dim} : i64, reduce = "sum", world = {W} : i64}} : tensor<{ts(full)}> -> tensor<{ts(out)}>
  func.return %o : tensor<{ts(out)}>
}}
"""


@pytest.mark.parametrize("W,lead,dim,bias_shape,bias_first", [
    (2, (18,), 0, "N", False), (3, (9,), 1, "1N", True), (2, (2, 6), 1, "N", False)])
def test_kernel_level_bias_is_the_graphs_mm_plus_bias_then_scatter(W, lead, dim, bias_shape,
                                                                   bias_first):
    """overlap + buffer-elision (both overlap styles, tiles that overhang chunks) compute
    reduce_scatter(mm + bias) on f32: every rank's bias is in the sum."""
    N = 10 * W if dim == len(lead) else 12
    text = bias_text(W, lead, dim, N, 16, "f32", bias_shape, bias_first)
    for ov in ("inter", "intra"):
        check_transform(lambda w: parse_module(text),
                        f"default{{force=true overlap={ov} tile=5 tile-k=16}}",
                        world_sizes=(W,), seeds=(W,), tolerance={torch.float32: (1e-4, 1e-4)})


BIAS = {  # name: (W, lead, dim, N, K)
    "rows W=2": (2, (74,), 0, 40, 24),
    "rows W=8": (8, (88,), 0, 24, 16),
    "cols W=3": (3, (29,), 1, 72, 40),
    "cols-3d W=4": (4, (3, 7), 2, 64, 24),
    "blocks W=2": (2, (2, 128), 1, 24, 16),
}


@pytest.mark.parametrize("name", list(BIAS))
def test_scheduled_bias_in_the_epilogue(name):
    W, lead, dim, N, K = BIAS[name]
    text = bias_text(W, lead, dim, N, K)
    kop = _kop(scheduled(text))
    assert plan_of(kop)["bias"] is True and len(kop.inputs) == 4
    assert "with a bias" in "\n".join(format_remarks(kop.parent.parent.parent))
    check_transform(lambda w: kernel_level(text), "schedule-fused,dce", world_sizes=(W,),
                    seeds=(W,), tolerance={torch.bfloat16: (2e-2, W / 16)})


@pytest.mark.parametrize("W,lead,dim,N,K,opts", [(2, (74,), 0, 40, 24, ""),
                                                 (3, (29,), 1, 72, 40, "{deterministic=true}")])
def test_emulated_bias_kernel_equals_the_interpreter_and_torch(W, lead, dim, N, K, opts):
    from pkc.codegen import compile_kernel
    from pkc.emu.launch import emulate_scheduled
    from pkc.interp.schedule import run_schedule_launches

    kop = _kop(scheduled(bias_text(W, lead, dim, N, K), opts))
    ck = compile_kernel(kop, "sm_90a")
    gen = torch.Generator().manual_seed(W)
    x = [[torch.randn(tuple(v.type.get_shape()), generator=gen).to(torch.bfloat16)
          for v in kop.inputs[:3]] + [torch.ones(1)] for _ in range(W)]
    emu = emulate_scheduled(ck, kop, x)
    ref = run_schedule_launches(kop, [[[x[r][i] for r in range(W)] for i in range(4)]], W)[0][0]
    full = sum(x[r][0].float() @ x[r][1].float() + x[r][2].float() for r in range(W))
    for r in range(W):
        assert torch.equal(emu[r][0], ref[r]), f"rank {r}: emulator != interpreter"
        want = full[r * (full.shape[0] // W):(r + 1) * (full.shape[0] // W)] if dim == 0 else \
            full[:, r * (N // W):(r + 1) * (N // W)]
        assert torch.allclose(emu[r][0].float(), want, rtol=0,
                              atol=W * 2 ** -7 * float(want.abs().max()))


def test_bias_before_an_all_reduce_stays_unfused_with_the_remark():
    text = bias_text(2, (16,), 0, 16, 16).replace(
        'pk.reduce_scatter %d {dim = 0 : i64, reduce = "sum", world = 2 : i64} : '
        'tensor<16x16xbf16> -> tensor<8x16xbf16>',
        'pk.all_reduce %d {reduce = "sum", world = 2 : i64} : tensor<16x16xbf16> -> '
        'tensor<16x16xbf16>').replace("-> tensor<8x16xbf16> {", "-> tensor<16x16xbf16> {") \
        .replace("func.return %o : tensor<8x16xbf16>", "func.return %o : tensor<16x16xbf16>")
    m = kernel_level(text)
    assert not [o for o in m.walk() if isinstance(o, k.KernelOp)
                and o.kernel_name.data == "matmul_all_reduce"]
    assert any('goes through "add" before the all_reduce' in r for r in format_remarks(m))


# ----------------------------------------------------------------------------------------
# sm_100a: the same parts on the tensor-memory GEMM (the bias applied where tcgen05.ld
# reads the accumulator)


@pytest.mark.parametrize("name,W,text", [
    ("cols", 2, rs_text(2, (150,), 1, 272, 24, "kn")),
    ("blocks-3d", 2, rs_text(2, (2, 256), 1, 24, 16, "nk")),
    ("blocks-odd", 2, rs_text(2, (2, 100), 1, 24, 16, "kn")),
    ("bias rows", 2, bias_text(2, (74,), 0, 40, 24))],
    ids=["cols", "blocks-3d", "blocks-odd", "bias-rows"])
def test_sm100_layout_kernels_on_the_interpreter_and_the_emulator(name, W, text):
    from pkc.emu.check import check_module
    from pkc.interp import random_inputs

    check_transform(lambda w: kernel_level(text), "schedule-fused{target=b200},dce",
                    world_sizes=(W,), seeds=(W,), tolerance={torch.bfloat16: (2e-2, W / 16)})
    m = scheduled(text, "{target=b200}")
    assert plan_of(_kop(m))["acc"] == "tmem"
    # one add per element at W = 2: the emulated sm_100a kernel equals the interpreter
    res = check_module(m, random_inputs(m, W, 0, "main"), W, target="sm_100a", exact=True)
    assert res.ok, str(res.difference)
    assert [k.kernel for k in res.kernels] == ["matmul_reduce_scatter"]


def test_launch_metadata_lists_the_bias_kernels_input_types():
    """The bias kernel's inputs are not all of one type (the f32 scale): the metadata
    lists each buffer's (FusedLaunch.dtypes, through JSON), which the runtime checks the
    caller's tensors against; a kernel of one type keeps the old metadata (no list)."""
    from pkc.codegen import compile_kernel
    from pkc.codegen.abi import ScheduledKernelMeta

    meta = compile_kernel(_kop(scheduled(bias_text(2, (74,), 0, 40, 24))), "sm_90a").meta
    back = ScheduledKernelMeta.from_json(meta.to_json())
    assert back.fused.dtypes == ["bf16", "bf16", "bf16", "f32", "bf16"]
    assert back.fused.shapes[:4] == [[74, 24], [24, 40], [40], [1]]
    plain = compile_kernel(_kop(scheduled(rs_text(2, (37,), 1, 48, 24))), "sm_90a").meta
    assert plain.fused.dtypes == []


# ----------------------------------------------------------------------------------------
# Shard(1) gathers: [1, S/W, H] along dim 1 (one sequence) is a row gather (contiguous
# shards): collective-views moves the 2-d view before it, overlap fuses it, schedule-fused
# builds the all-gather + GEMM


@pytest.mark.parametrize("W", [2, 3, 4, 8])
def test_shard1_gather_of_one_sequence_is_fused_and_scheduled(W):
    Sc, H, N = 13, 24, 40
    s, g = f"tensor<1x{Sc}x{H}xbf16>", f"tensor<1x{W * Sc}x{H}xbf16>"
    v, y = f"tensor<{W * Sc}x{H}xbf16>", f"tensor<{W * Sc}x{N}xbf16>"
    text = f"""func.func @main(%x: {s}, %w: tensor<{H}x{N}xbf16>) -> {y} {{
  %g = pk.all_gather %x {{dim = 1 : i64, world = {W} : i64}} : {s} -> {g}
  %v = pk.reshape %g : {g} -> {v}
  %y = pk.matmul %v, %w : ({v}, tensor<{H}x{N}xbf16>) -> {y}
  func.return %y : {y}
}}
"""
    m = scheduled(text)
    assert [o.kernel_name.data for o in kernels_of(m)] == ["all_gather_matmul"]
    assert _kop(m).schedule() is not None
    check_transform(lambda w: parse_module(text), "default{force=true},schedule-fused,dce",
                    world_sizes=(W,), seeds=(W,), tolerance={torch.bfloat16: (2e-2, 1 / 8)})


@pytest.mark.parametrize("text", [rs_text(1, (150,), 1, 272, 24, "kn"),
                                  rs_text(1, (2, 100), 1, 24, 16, "kn")], ids=["cols", "blocks-odd"])
def test_one_rank_kernel_is_the_plain_gemm_without_epoch(text):
    """W = 1: no peer reads a signal, so the column and 3-D block kernels read and publish
    no epoch (as the row kernel at W = 1), and still compute the product."""
    from pkc.dialects import schedule_comm as c

    kop = _kop(scheduled(text))
    assert not any(isinstance(o, (c.EpochOp, c.EpochPublishOp)) for o in kop.walk())
    check_transform(lambda w: kernel_level(text), "schedule-fused,dce", world_sizes=(1,),
                    seeds=(1,), tolerance={torch.bfloat16: (2e-2, 1 / 16)})
