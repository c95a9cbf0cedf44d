"""The emulator (pkc/emu) runs every kernel kind the general codegen path emits, compared
with the reference interpreter: graph-level programs through ``-p default`` (fused GEMM +
reduce-scatter / all-reduce, all-gather + GEMM, all-to-all + grouped GEMM, lowered
collectives) for W in 1, 2, 4, the repository's example and lit inputs through
``python -m pkc.emu``, and the three targets."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from pkc.emu.__main__ import main as emu_main
from pkc.emu.check import check_module, compare
from pkc.emu.values import f32_to_bf16, fma_f32
from pkc.interp import random_inputs
from pkc.ir import make_context, parse_module
from pkc.passes import parse_pipeline

ROOT = Path(__file__).resolve().parents[2]

GRAPHS = {
    "mm_rs": """func.func @main(%a: tensor<{M}x32xbf16>, %b: tensor<32x32xbf16>) -> tensor<16x32xbf16> {{
  %c = pk.matmul %a, %b : (tensor<{M}x32xbf16>, tensor<32x32xbf16>) -> tensor<{M}x32xbf16>
  %o = pk.reduce_scatter %c {{dim = 0 : i64, reduce = "sum", world = {W} : i64}} : tensor<{M}x32xbf16> -> tensor<16x32xbf16>
  func.return %o : tensor<16x32xbf16>
}}""",
    "mm_ar": """func.func @main(%a: tensor<32x32xbf16>, %b: tensor<32x32xbf16>) -> tensor<32x32xbf16> {{
  %c = pk.matmul %a, %b : (tensor<32x32xbf16>, tensor<32x32xbf16>) -> tensor<32x32xbf16>
  %o = pk.all_reduce %c {{reduce = "sum", world = {W} : i64}} : tensor<32x32xbf16> -> tensor<32x32xbf16>
  func.return %o : tensor<32x32xbf16>
}}""",
    "ag_mm": """func.func @main(%x: tensor<8x32xbf16>, %w: tensor<32x16xbf16>) -> tensor<{M8}x16xbf16> {{
  %g = pk.all_gather %x {{dim = 0 : i64, world = {W} : i64}} : tensor<8x32xbf16> -> tensor<{M8}x32xbf16>
  %q = pk.matmul %g, %w : (tensor<{M8}x32xbf16>, tensor<32x16xbf16>) -> tensor<{M8}x16xbf16>
  func.return %q : tensor<{M8}x16xbf16>
}}""",
    "ar_f32": """func.func @main(%x: tensor<16x48xf32>) -> tensor<16x48xf32> {{
  %o = pk.all_reduce %x {{reduce = "sum", world = {W} : i64}} : tensor<16x48xf32> -> tensor<16x48xf32>
  func.return %o : tensor<16x48xf32>
}}""",
    "ag_rs": """func.func @main(%x: tensor<8x64xbf16>) -> tensor<8x64xbf16> {{
  %g = pk.all_gather %x {{dim = 0 : i64, world = {W} : i64}} : tensor<8x64xbf16> -> tensor<{M8}x64xbf16>
  %o = pk.reduce_scatter %g {{dim = 0 : i64, reduce = "sum", world = {W} : i64}} : tensor<{M8}x64xbf16> -> tensor<8x64xbf16>
  func.return %o : tensor<8x64xbf16>
}}""",
    "a2a_mm": """func.func @main(%x: tensor<{M8}x32xbf16>, %w: tensor<32x16xbf16>) -> tensor<{M8}x16xbf16> {{
  %d = pk.all_to_all %x {{split_dim = 0 : i64, concat_dim = 0 : i64, world = {W} : i64}} : tensor<{M8}x32xbf16> -> tensor<{M8}x32xbf16>
  %y = pk.matmul %d, %w : (tensor<{M8}x32xbf16>, tensor<32x16xbf16>) -> tensor<{M8}x16xbf16>
  %o = pk.all_to_all %y {{split_dim = 0 : i64, concat_dim = 0 : i64, world = {W} : i64}} : tensor<{M8}x16xbf16> -> tensor<{M8}x16xbf16>
  func.return %o : tensor<{M8}x16xbf16>
}}""",
}

# (graph, world, target, kernels it must make): every graph at one world, the worlds
# 1, 2, 4 all covered, each target at least once (sm_80: mma.sync and the bf16 CAS loop)
CASES = [("mm_rs", 2, "sm_90a", {"matmul_reduce_scatter"}),
         ("mm_ar", 4, "sm_90a", {"matmul_all_reduce"}),
         ("ag_mm", 2, "sm_100a", {"all_gather_matmul"}),
         ("ag_rs", 4, "sm_90a", {"all_gather_direct", "reduce_scatter_direct"}),
         ("ar_f32", 4, "sm_80", {"all_reduce_one_shot"}),
         ("ag_rs", 2, "sm_90a", {"all_gather_ring", "reduce_scatter_ring"}),
         ("a2a_mm", 4, "sm_90a", {"all_to_all_matmul_all_to_all"}),
         ("mm_rs", 1, "sm_80", {"matmul_reduce_scatter"})]


def _module(name: str, world: int):
    ctx = make_context()
    m = parse_module(GRAPHS[name].format(W=world, M=16 * world, M8=8 * world), f"{name}.mlir",
                     ctx=ctx)
    for p in parse_pipeline("default{force=true}"):
        p.apply(ctx, m)
    return m


@pytest.mark.parametrize("name,world,target,kernels", CASES,
                         ids=[f"{c[0]}-w{c[1]}-{c[2]}" for c in CASES])
def test_pipeline_kernels_match_the_interpreter(name, world, target, kernels):
    m = _module(name, world)
    res = check_module(m, random_inputs(m, world, 0), world, target=target)
    assert res.ok, str(res.difference)
    assert {k.kernel for k in res.kernels} == kernels
    # data movement and one rounding per element: bitwise equal to the interpreter
    assert all(k.exact for k in res.kernels), [(k.kernel, k.max_abs) for k in res.kernels]


def test_worker_spread_over_several_ctas():
    """Four SMs: workers get several CTAs, which meet at worker barriers in the workspace."""
    m = _module("ar_f32", 2)
    res = check_module(m, random_inputs(m, 2, 1), 2, sms=4)
    assert res.ok and res.kernels


@pytest.mark.parametrize("path,args", [
    ("examples/ir/all_reduce_one_shot.mlir", []),
    ("examples/ir/tp_mlp_graph.mlir", ["-p", "default"]),
    ("tests/lit/codegen/mma.mlir", []),
    ("tests/lit/codegen/put-add.mlir", []),
    ("tests/lit/codegen/put-add.mlir", ["--target", "sm_80"]),
    ("tests/lit/codegen/workers-bounds.mlir", []),
    ("tests/lit/passes/lower-collectives-reduce-scatter.mlir", ["-p", "default"]),
    ("tests/lit/passes/lower-collectives-all-to-all.mlir", ["-p", "default"]),
])
def test_cli_runs_repository_inputs(path, args, capsys):
    rc = emu_main([str(ROOT / path), *args])
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert "match the interpreter" in out.out and "ok   @" in out.out


def test_cli_reports_the_first_difference(monkeypatch, capsys):
    """Rounding bf16 by truncation instead of to nearest even: the emulator must disagree
    with the interpreter, and the command says where (exit 1)."""
    import pkc.emu.ops_core as core

    monkeypatch.setattr(core, "f32_to_bf16",
                        lambda x: (np.asarray(x, np.float32).view(np.uint32) >> 16).astype(np.uint16))
    rc = emu_main([str(ROOT / "tests/lit/passes/overlap-mm-reduce-scatter.mlir"),
                   "-p", "overlap{force=true tile=16 tile-k=32}", "--func", "mm_rs", "--exact"])
    err = capsys.readouterr().err
    assert rc == 1
    assert "MISMATCH kernel @" in err and "differs at index" in err and "interpreter" in err


def test_cli_bad_world_and_bad_input_exit_1(tmp_path, capsys):
    assert emu_main([str(ROOT / "examples/ir/all_reduce_one_shot.mlir"), "--world", "2"]) == 1
    assert "world of 4 ranks" in capsys.readouterr().err
    bad = tmp_path / "bad.mlir"
    bad.write_text("func.func @main( {")
    assert emu_main([str(bad)]) == 1


def test_compare_tolerance_and_nan():
    a = torch.tensor([1.0, float("nan"), 2.0])
    assert compare("k", 0, 0, a, a.clone(), exact=True)[0] is None
    b = a.clone()
    b[2] = 2.0 + 3e-7
    d, same, _ = compare("k", 0, 0, a, b, exact=False)
    assert d is None and not same
    d, _, _ = compare("k", 0, 0, a, b, exact=True)
    assert d is not None and d.index == (2,)


def test_rounding_helpers():
    # bf16 round to nearest even, NaN canonical
    x = np.array([1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, float("nan")], dtype=np.float32)
    assert f32_to_bf16(x).tolist() == [0x3F80, 0x3F82, 0x7FFF]
    # fma rounds once: a*b+c with a*b = 1 + 2^-24 + 2^-48 style residues
    a = np.array([1 + 2 ** -12], dtype=np.float32)
    c = np.array([-1.0], dtype=np.float32)
    exact = (1 + 2 ** -12) ** 2 - 1
    assert fma_f32(a, a, c)[0] == np.float32(exact)


def test_cli_runs_the_ir_built_gemm(tmp_path, capsys):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gemm_ir import module_text

    f = tmp_path / "gemm.mlir"
    f.write_text(module_text(128, 128, 64, "nk"))
    assert emu_main([str(f), "-p", "schedule-matmul"]) == 0, capsys.readouterr().err
    assert "ok   @matmul: 1 rank(s), sm_90a" in capsys.readouterr().out
