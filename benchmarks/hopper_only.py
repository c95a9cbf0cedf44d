"""Import pkc's Hopper modules without running ``pkc/__init__`` (which loads the frontend,
xDSL and the passes): the GEMM / fused / transfer benchmarks and the Hopper GPU tests run
on machines that may have only torch and cuda-bindings."""

from __future__ import annotations

import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def skip_pkc_init() -> None:
    """Register empty ``pkc`` and ``pkc.codegen`` packages pointing at the source tree
    (once; a no-op where pkc is already imported), and put the repository on sys.path."""
    if "pkc" not in sys.modules:
        for name, sub in (("pkc", "pkc"), ("pkc.codegen", "pkc/codegen")):
            m = types.ModuleType(name)
            m.__path__ = [str(ROOT / sub)]
            sys.modules[name] = m
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
