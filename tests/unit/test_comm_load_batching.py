"""The unrolled vector loads of a collective kernel's copy loops stay batched after ptxas:
every guarded ``ld.v4`` defines its registers where the guard fails (zeros), so ptxas does
not keep them live from the kernel's entry and, under the 2-CTAs-per-SM register cap, sink
the loads between the stores. Measured on the H200 (docs/PERF_NOTES.md, 2026-12-02): the
reduce-scatter at 4 MiB, W = 4 was 0.90x the old hand kernel with the loads interleaved."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pkc.codegen import compile_kernel
from pkc.codegen.emit import kernels_of
from pkc.codegen.ptxas import assemble_one, find_ptxas
from pkc.codegen.sass import find_tool, instructions, sass
from pkc.ir import parse_module
from pkc.passes.registry import run_pipeline

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from collectives_ir import module_text  # noqa: E402

MIB = 1 << 20


def _ptx(coll: str, algo: str, W: int, dt: str = "bf16") -> str:
    text, _, _ = module_text(coll, W, 4 * MIB, dt)
    m = parse_module(text, "t.mlir")
    run_pipeline(f"lower-collectives{{{coll}={algo}}},schedule-collectives", m)
    (kop,) = kernels_of(m)
    return compile_kernel(kop, "sm_90a").ptx


@pytest.mark.parametrize("coll,algo,W", [("reduce_scatter", "direct", 4),
                                         ("reduce_scatter", "direct", 2),
                                         ("all_reduce", "one_shot", 4)])
def test_guarded_vector_loads_define_their_registers(coll, algo, W):
    lines = _ptx(coll, algo, W).splitlines()
    guarded = [i for i, l in enumerate(lines) if l.strip().startswith("@") and ".v4.b32 {" in l
               and " ld." in l]
    assert guarded, "no guarded vector load: the test no longer looks at the copy loop"
    for i in guarded:
        regs = lines[i].split("{", 1)[1].split("}", 1)[0].split(", ")
        before = "\n".join(lines[max(0, i - 8):i])
        for r in regs:
            assert f"mov.b32 {r}, " in before, f"{r} of {lines[i].strip()!r} is not defined first"


@pytest.mark.skipif(find_ptxas() is None or find_tool("cuobjdump") is None,
                    reason="needs ptxas and cuobjdump (the nvidia-cuda-nvcc wheel)")
def test_reduce_scatter_copy_loops_issue_their_loads_back_to_back():
    cubin, rep = assemble_one(_ptx("reduce_scatter", "direct", 4))
    ops = [("L" if "LDG.E.128" in i else "S") for i in instructions(sass(cubin))
           if "LDG.E.128" in i or "STG.E.128" in i]
    text = "".join(ops)
    # 4 peers' copy loops (4 loads then 4 stores each) before the reduction's loads
    assert text.startswith("LLLLSSSS" * 4), text
