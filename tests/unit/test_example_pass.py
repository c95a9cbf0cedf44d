"""The example user pass (examples/passes/fuse_allreduce_rmsnorm.py) registers, runs from
pkc-opt, and preserves meaning in the interpreter for W = 1, 2, 3, 4, 8."""

import importlib.util
from pathlib import Path

import pytest

from pkc.ir import parse_module
from pkc.passes.registry import available_passes, parse_pipeline, unregister_pass
from pkc.tools.pkc_opt import main as pkc_opt
from pkc.testing import check_transform

ROOT = Path(__file__).resolve().parents[2]
PASS_FILE = ROOT / "examples" / "passes" / "fuse_allreduce_rmsnorm.py"
IR = (ROOT / "examples" / "ir" / "allreduce_rmsnorm.mlir").read_text()


@pytest.fixture(scope="module", autouse=True)
def plugin():
    spec = importlib.util.spec_from_file_location("fuse_allreduce_rmsnorm", PASS_FILE)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    assert "fuse-allreduce-rmsnorm" in available_passes()


def _module(world: int, rows: int = 16):
    text = IR.replace("world = 4", f"world = {world}").replace("16x", f"{rows}x")
    return parse_module(text, "allreduce_rmsnorm.mlir")


def _fuse(module):
    for p in parse_pipeline("fuse-allreduce-rmsnorm{tile_rows=8}"):
        p.apply(None, module)
    names = [op.name for op in module.walk()]
    assert names.count("pk.kernel") == 1 and "pk.all_reduce" not in names and "pk.reduce" not in names


@pytest.mark.parametrize("rows", [16, 13])
def test_fused_kernel_equals_unfused_graph(rows):
    check_transform(lambda w: _module(w, rows), _fuse, world_sizes=(1, 2, 3, 4, 8))


def test_runs_from_pkc_opt(tmp_path, capsys):
    src = tmp_path / "in.mlir"
    src.write_text(IR)
    unregister_pass("fuse-allreduce-rmsnorm")  # pkc-opt loads the file itself
    rc = pkc_opt(["--load-pass-plugin", str(PASS_FILE), "-p", "fuse-allreduce-rmsnorm",
                  "--remarks", str(src)])
    io = capsys.readouterr()
    assert rc == 0, io.err
    assert 'pk.kernel "allreduce_add_rmsnorm"' in io.out and "pk.all_reduce" not in io.out
    assert "remark: [pk.kernel] fuse-allreduce-rmsnorm: all_reduce + residual add" in io.err


def test_leaves_a_plain_all_reduce_alone():
    text = """func.func @main(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %y = pk.all_reduce %x {world = 2 : i64, reduce = "sum"} : tensor<4x8xf32> -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}"""
    module = parse_module(text, "plain.mlir")
    for p in parse_pipeline("fuse-allreduce-rmsnorm"):
        p.apply(None, module)
    assert "pk.all_reduce" in str(module) and "no residual add + RMSNorm" in str(module)
