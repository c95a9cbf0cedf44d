"""The examples run and say what they should."""

import runpy
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_quickstart_all_reduce_matches_torch(capsys):
    sys.path.insert(0, str(EXAMPLES))
    try:
        from quickstart import main
    finally:
        sys.path.pop(0)
    assert main([]) == 0
    out = capsys.readouterr().out
    assert "parsed and verified" in out
    assert "pk.kernel \"all_reduce_one_shot\"" in out
    assert "ran @main on 4 simulated ranks" in out
    err = float(out.rsplit("max abs error", 1)[1])
    assert err < 1e-4


def test_quickstart_reports_bad_ir(tmp_path, capsys):
    sys.path.insert(0, str(EXAMPLES))
    try:
        from quickstart import main
    finally:
        sys.path.pop(0)
    bad = tmp_path / "bad.mlir"
    bad.write_text("func.func @main() {\n  %0 = pk.nope\n  func.return\n}\n")
    assert main([str(bad)]) == 1
    assert "bad.mlir:2:" in capsys.readouterr().err
