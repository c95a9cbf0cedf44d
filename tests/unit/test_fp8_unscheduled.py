"""overlap's fp8 decision lives in one place: ``pipelines.SCALED_FUSED_ARCHS`` (every kind)
and ``SCALED_FUSED_PATTERNS`` (some kinds). With neither listing the arch, ``-p default``
leaves a large fp8 all_gather + scaled matmul unfused with the remark (the cost model would
fuse it); listing the architecture lets the cost model's choice through again."""

from __future__ import annotations

from pathlib import Path

from pkc.ir import parse_module
from pkc.passes import pipelines
from pkc.passes.registry import run_pipeline
from pkc.passes.remarks import remarks_of

LIT = Path(__file__).resolve().parents[1] / "lit/passes/overlap-fp8-unscheduled.mlir"


def _fp8_function(monkeypatch, archs):
    # an arch listed in neither table has no fp8 fused kernel; one in SCALED_FUSED_ARCHS
    # has every kind and form (the lit file's f32 result too)
    monkeypatch.setattr(pipelines, "SCALED_FUSED_ARCHS", archs)
    monkeypatch.setattr(pipelines, "SCALED_FUSED_PATTERNS", {})
    m = parse_module(LIT.read_text(), "t.mlir")
    run_pipeline("overlap", m)
    (fn,) = [o for o in m.walk() if o.name == "func.func" and o.sym_name.data == "ag_fp8"]
    return [o for o in fn.walk() if o.name in ("pk.kernel", "pk.all_gather",
                                                "pk.scaled_matmul")]


def test_no_scheduled_fp8_kernel_leaves_it_unfused(monkeypatch):
    ops = _fp8_function(monkeypatch, ())
    assert [o.name for o in ops] == ["pk.all_gather", "pk.scaled_matmul"]
    assert any("no scheduled fp8 kernel for sm_90a yet" in r for r in remarks_of(ops[0]))


def test_an_arch_with_one_fuses_on_the_cost_model(monkeypatch):
    ops = _fp8_function(monkeypatch, ("sm_90a",))
    assert [o.name for o in ops] == ["pk.kernel"]
    assert ops[0].attributes["pk.fusion"].data["scaled"].value.data
