"""pkc-opt does IR work without importing torch (importing torch takes seconds, and the
lit suite starts pkc-opt hundreds of times)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Runs pkc-opt's main in a fresh interpreter and fails if torch got imported.
_PROBE = """
import io, sys, contextlib
from pkc.tools.pkc_opt import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    rc = main(sys.argv[1:])
loaded = sorted(m for m in ("torch", "numpy") if m in sys.modules)
print(rc, " ".join(loaded) or "-")
"""


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["examples/ir/tp_mlp_graph.mlir"],
        ["examples/ir/tp_mlp_graph.mlir", "-p", "default", "--remarks"],
        ["examples/ir/tp_mlp_graph.mlir", "-p", "default", "--emit=ptx"],
        ["examples/ir/tp_mlp_graph.mlir", "-p", "default", "--fast-path"],
    ],
    ids=["help", "parse", "default", "emit-ptx", "fast-path"],
)
def test_ir_work_does_not_import_torch(args):
    res = subprocess.run(
        [sys.executable, "-c", _PROBE, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    rc, loaded = res.stdout.strip().splitlines()[-1].split(" ", 1)
    assert rc == "0", res.stderr
    assert "torch" not in loaded.split(), f"pkc-opt {' '.join(args)} imported torch"


def test_public_api_still_reachable_lazily():
    """``pkc.compile`` & co. load on first use (PEP 562), so ``import pkc`` stays cheap."""
    res = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, pkc; assert 'torch' not in sys.modules; "
            "from pkc import compile, backend, CompiledProgram, PkcFrontendError; "
            "print(callable(pkc.compile), 'torch' in sys.modules)",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["True", "True"]
