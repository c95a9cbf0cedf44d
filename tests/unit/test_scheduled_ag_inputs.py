"""The all-gather + GEMM launcher hands the kernel every input it declares: the fp8 kernel
(``all_gather_scaled_matmul``) takes its two scales after the shard and the weight. On the
H200 the launcher passed only the first two, and binding the kernel's tensor maps failed
with an IndexError (batch of 2026-12-02 05:40); these CPU checks pin the arity without a GPU."""

from __future__ import annotations

import types

import pytest
import torch

from pkc.codegen import compile_kernel
from pkc.ir import parse_module
from pkc.passes.pipelines import schedule_for_target
from pkc.passes.registry import run_pipeline
from pkc.runtime import scheduled_ag
from tests.unit.test_fp8_overlap import ag_ir


@pytest.fixture(scope="module")
def fp8_ag_kernel():
    m = parse_module(ag_ir(4, 24, 32, 64, False), "ag_fp8")
    run_pipeline("default{force=true}", m)
    m, _ = schedule_for_target(m, "h200")
    ks = [o for o in m.walk() if o.name == "pk.kernel"]
    assert len(ks) == 1 and ks[0].kernel_name.data == "all_gather_scaled_matmul"
    return ks[0], compile_kernel(ks[0], "sm_90a")


def test_fp8_kernel_declares_four_inputs(fp8_ag_kernel):
    op, ck = fp8_ag_kernel
    fz = ck.meta.fused
    assert len(op.inputs) == fz.inputs == 4
    # every tensor map's buffer is one of the kernel's buffers the launcher binds
    assert all(0 <= t.buffer < len(fz.shapes) for t in ck.meta.tmaps)


def test_ag_step_passes_every_input(fp8_ag_kernel, monkeypatch):
    op, ck = fp8_ag_kernel
    seen = {}

    class FakeAg:
        def __init__(self, *args, **kw):
            pass

        def run(self, *inputs, ranks=None, outs=None):
            seen["inputs"] = inputs
            return {r: ["C", "G"] for r in ranks}

    monkeypatch.setattr(scheduled_ag, "ScheduledAgGemm", FakeAg)
    step = scheduled_ag.ag_step(op, ck, peers=None, timeout_ns=1)
    vals = {r: [torch.full((2,), float(10 * r + i)) for i in range(4)] for r in range(4)}
    out = step.run(vals)
    assert len(seen["inputs"]) == 4
    for i, per_rank in enumerate(seen["inputs"]):
        for r in range(4):
            assert float(per_rank[r][0]) == 10 * r + i
    assert out == {r: ["C", "G"] for r in range(4)}
    assert step.persistent == [False, True]


def test_wrong_input_count_is_a_clear_error(fp8_ag_kernel):
    _, ck = fp8_ag_kernel
    ag = scheduled_ag.ScheduledAgGemm.__new__(scheduled_ag.ScheduledAgGemm)
    ag.meta, ag.n_in = ck.meta, 4
    ag.peers = types.SimpleNamespace(ranks=[0])
    with pytest.raises(ValueError, match="takes 4 inputs per rank .*got 2"):
        ag.run({0: None}, {0: None})
