"""The ``schedule`` stage: what the GPU runs is the schedule-level program the compiler
built (CompiledProgram.kernel_module, pkc-opt --emit=ptx), while ``module`` stays the
interpreter's kernel-level reference."""

from __future__ import annotations

import os
import subprocess
import sys

import torch
import torch.distributed._functional_collectives as funcol

import pkc
from pkc.dialects.kernel import KernelOp
from pkc.passes.pipelines import PIPELINES, schedule_for_target, unscheduled_reason

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _mm_rs(x, w):
    return funcol.reduce_scatter_tensor(x @ w.t(), "sum", 0, [0, 1])


def _compile(tmp_path=None, target="h200"):
    x = torch.randn(512, 256, dtype=torch.bfloat16)
    w = torch.randn(384, 256, dtype=torch.bfloat16)
    return pkc.compile(_mm_rs, [x, w], world_size=2, pipeline="default{force=true}",
                       target=target, dump_dir=tmp_path)


def _kernels(module):
    return [op for op in module.walk() if isinstance(op, KernelOp)]


def test_schedule_pipeline_is_named():
    assert PIPELINES["schedule"] == ("schedule-moe", "schedule-fused", "schedule-collectives")


def test_kernel_module_is_scheduled_and_module_is_not(tmp_path):
    prog = _compile(tmp_path)
    assert [k.schedule() for k in _kernels(prog.module)] == [None]
    ks = _kernels(prog.kernel_module)
    assert len(ks) == 1 and ks[0].schedule() is not None
    assert ks[0].kernel_name.data == "matmul_reduce_scatter"
    # the dump has the stage and the PTX of the kernel that runs
    names = sorted(os.listdir(tmp_path))
    assert names[-2].endswith("-schedule.mlir"), names
    ptx = open(tmp_path / "kernels" / "matmul_reduce_scatter.sm_90a.ptx").read()
    assert "wgmma.mma_async" in ptx and "cp.async.bulk.tensor" in ptx and "red.release.sys" in ptx
    assert any("scheduled GEMM + reduce-scatter" in r for r in prog.remarks())


def test_interpreter_still_runs_the_reference_module():
    prog = _compile()
    torch.manual_seed(0)
    xs = [torch.randn(512, 256, dtype=torch.bfloat16) for _ in range(2)]
    w = torch.randn(384, 256, dtype=torch.bfloat16)
    outs = prog.run_simulated([[x, w] for x in xs])
    ref = sum(x.float() @ w.float().t() for x in xs)
    for r in range(2):
        want = ref[r * 256:(r + 1) * 256]
        # the partials are rounded to bf16 before they are summed: a few bf16 steps
        err = (outs[r][0].float() - want).abs().max().item()
        assert err <= 0.02 * want.abs().max().item(), err


def test_sm100_target_runs_the_schedule_pipeline():
    """b200 (sm_100a) is in SCHEDULED_ARCHS: the schedule pipeline runs; a kernel whose
    pass has no sm_100a lowering yet keeps its body and says so."""
    prog = _compile(target="b200")
    module, ran = schedule_for_target(prog.module, "b200")
    assert ran == list(PIPELINES["schedule"])
    for kop in _kernels(module):
        if kop.schedule() is None:
            assert "no sm_100a lowering yet" in unscheduled_reason(kop), unscheduled_reason(kop)


def test_target_without_schedule_lowering_keeps_kernels(monkeypatch):
    from pkc.passes import pipelines

    monkeypatch.setattr(pipelines, "SCHEDULED_ARCHS", ("sm_90a",))
    prog = _compile(target="b200")
    module, ran = schedule_for_target(prog.module, "b200")
    assert ran == [] and [k.schedule() for k in _kernels(module)] == [None]


def test_pkc_opt_emit_ptx_prints_the_scheduled_kernel(tmp_path):
    src = tmp_path / "mm_rs.mlir"
    src.write_text(
        "func.func @main(%x: tensor<512x256xbf16>, %w: tensor<256x384xbf16>) -> tensor<256x384xbf16> {\n"
        "  %c = pk.matmul %x, %w : (tensor<512x256xbf16>, tensor<256x384xbf16>) -> tensor<512x384xbf16>\n"
        "  %o = pk.reduce_scatter %c {dim = 0 : i64, reduce = \"sum\", world = 2 : i64} : "
        "tensor<512x384xbf16> -> tensor<256x384xbf16>\n"
        "  func.return %o : tensor<256x384xbf16>\n}\n")
    out = subprocess.run([sys.executable, "-m", "pkc.tools.pkc_opt", str(src), "-p",
                          "default{force=true}", "--emit=ptx"], capture_output=True, text=True,
                         cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "// pk.kernel @matmul_reduce_scatter (sm_90a)" in out.stdout
    assert "wgmma.mma_async" in out.stdout


def test_runtime_target_is_the_compiled_one():
    from pkc.runtime.errors import RuntimeUnavailable
    from pkc.runtime.execute import target_for
    from pkc.target.targets import get_target

    assert target_for((9, 0), "h200") == "sm_90a"
    assert target_for((9, 0), get_target("h100")) == "sm_90a"
    assert target_for((9, 0), "sm_80") == "sm_80"          # the portable path runs anywhere
    assert target_for((9, 0)) in ("sm_90a", os.environ.get("PKC_TARGET"))
    try:
        target_for((9, 0), "b200")
    except RuntimeUnavailable as err:
        assert "compiled for b200 (sm_100a)" in str(err) and "9.0 (sm_90a)" in str(err)
    else:
        raise AssertionError("an sm_100a program was accepted on an sm_90a GPU")


def test_every_kernel_of_a_tp_program_is_scheduled():
    """The programs tests/gpu/test_gpu_scheduled_program.py runs on the GPU: after
    ``default{force=true}`` and ``schedule`` no kernel is left for the portable path."""
    from tests.gpu.test_gpu_scheduled_program import _prepare, layer, mm_coll

    cases = [mm_coll(3, "bf16", 37, 200, 136, coll) for coll in ("rs", "ar", "ag")]
    cases += [mm_coll(2, "f16", 517, 264, 392, "ar", nk=False), layer(2, "bf16")]
    for ir in cases:
        _, module = _prepare(ir)
        ks = _kernels(module)
        assert ks and all(k.schedule() is not None for k in ks), \
            [(k.kernel_name.data, k.attributes.get("pk.remarks")) for k in ks if k.schedule() is None]
