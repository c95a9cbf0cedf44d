"""The Executable's bookkeeping, without a GPU (fake peers and a fake scheduled step): which
results leave a call copied (persistent buffers, views of the caller's arguments) and
which are handed out as they are (fresh tensors); a kernel the schedule stage left alone
goes to the portable runner with the reason in the report; reports from the peers'
mailbox raise before any work is queued."""

from __future__ import annotations

import pytest
import torch

from pkc.ir import parse_module
from pkc.passes.registry import run_pipeline
from pkc.runtime.errors import PeerTimeoutError
from pkc.runtime.executable import Executable


class FakePeers:
    world, ranks, device = 2, [0, 1], torch.device("cpu")

    def __init__(self):
        self.pending: list[str] = []

    def raise_timeouts(self):
        if self.pending:
            raise PeerTimeoutError("; ".join(self.pending))


class FakeStep:
    """Stands for a scheduled kernel's step (pkc.runtime.scheduled_step): returns, per rank,
    ``buffers[r]`` (a persistent buffer, as the fused kernels' symmetric outputs) or a new
    tensor (as a collective into a fresh output), filled with the sum over ranks of the
    first operand."""

    made: list = []

    def __init__(self, op):
        self.kind = "fused" if op.kernel_name.data.startswith("matmul") else "collective"
        shape = tuple(op.results[0].type.get_shape())
        self.shapes = [shape]
        self.persistent = [self.kind == "fused"]
        self.buffers = {0: torch.zeros(shape), 1: torch.zeros(shape)}
        FakeStep.made.append(self)

    def run(self, vals):
        total = sum(v[0].float() for v in vals.values())
        out = {}
        for r in vals:
            t = self.buffers[r] if self.persistent[0] else torch.empty(self.shapes[0])
            out[r] = [t.copy_(total.reshape(self.shapes[0]).to(t.dtype))]
        return out


@pytest.fixture
def fake_step(monkeypatch):
    import pkc.runtime.scheduled_step as ss

    FakeStep.made = []
    monkeypatch.setattr(ss, "scheduled_step", lambda op, peers, target, timeout_s: FakeStep(op))
    return FakeStep


def _module(ir: str, pipeline="default{force=true},schedule"):
    m = parse_module(ir, "x.mlir")
    run_pipeline(pipeline, m)
    return m


AR = """func.func @main(%x: tensor<64x64xf32>) -> tensor<64x64xf32> {
  %y = pk.all_reduce %x {reduce = "sum", world = 2 : i64} : tensor<64x64xf32> -> tensor<64x64xf32>
  func.return %y : tensor<64x64xf32>
}"""

RS = """func.func @main(%a: tensor<64x32xbf16>, %b: tensor<32x64xbf16>) -> tensor<32x64xbf16> {
  %p = pk.matmul %a, %b : (tensor<64x32xbf16>, tensor<32x64xbf16>) -> tensor<64x64xbf16>
  %y = pk.reduce_scatter %p {dim = 0 : i64, reduce = "sum", world = 2 : i64} : tensor<64x64xbf16> -> tensor<32x64xbf16>
  func.return %y : tensor<32x64xbf16>
}"""

VIEW = """func.func @main(%x: tensor<4x16xf32>) -> tensor<64xf32> {
  %y = pk.reshape %x : tensor<4x16xf32> -> tensor<64xf32>
  func.return %y : tensor<64xf32>
}"""


def test_fresh_results_are_not_copied(fake_step):
    ex = Executable(_module(AR), FakePeers(), None, target="sm_90a")
    assert ["scheduled kernel" in line for line in ex.kernel_report] == [True]
    xs = {r: [torch.randn(64, 64)] for r in (0, 1)}
    out = ex.run(xs)
    assert torch.equal(out[0][0], xs[0][0] + xs[1][0])
    (step,) = fake_step.made
    assert not step.persistent[0]


def test_persistent_results_are_copied_unless_told(fake_step):
    peers = FakePeers()
    ex = Executable(_module(RS), peers, None, target="sm_90a")
    (step,) = fake_step.made
    assert step.kind == "fused" and step.persistent == [True]
    args = {r: [torch.randn(64, 32).bfloat16(), torch.randn(32, 64).bfloat16()] for r in (0, 1)}
    out = ex.run(args)
    assert out[0][0].data_ptr() != step.buffers[0].data_ptr()       # copied out
    assert torch.equal(out[0][0], step.buffers[0])
    ex.copy_outputs = False                                         # caller accepts reuse
    out = ex.run(args)
    assert out[0][0].data_ptr() == step.buffers[0].data_ptr()


def test_views_of_arguments_are_copied():
    ex = Executable(_module(VIEW, "default"), FakePeers(), None, target="sm_90a")
    xs = {r: [torch.randn(4, 16)] for r in (0, 1)}
    out = ex.run(xs)
    assert torch.equal(out[1][0], xs[1][0].reshape(64))
    assert out[1][0].data_ptr() != xs[1][0].data_ptr()             # not the caller's storage


def test_unscheduled_kernels_use_the_portable_runner(fake_step, monkeypatch):
    """No kernel is chosen at run time: a kernel-level module (the schedule stage did not
    run) goes to the portable runner, and the report says why."""
    calls = []

    class General:
        def run(self, ck, inputs, timeout_s):
            calls.append(ck.meta.name)
            return [[x[0].clone()] for x in inputs]

    import pkc.runtime.execute as execute

    monkeypatch.setattr(execute, "compiled", lambda op, target, bulk=None: type(
        "CK", (), {"meta": type("M", (), {"name": op.kernel_name.data})()})())
    ex = Executable(_module(AR, "default{force=true}"), FakePeers(), General(), target="sm_90a")
    assert not fake_step.made and "portable path (not scheduled" in ex.kernel_report[0]
    ex.run({r: [torch.randn(64, 64)] for r in (0, 1)})
    assert calls == ["all_reduce_one_shot"]


def test_an_earlier_timeout_raises_before_any_work(fake_step):
    peers = FakePeers()
    ex = Executable(_module(AR), peers, None, target="sm_90a")
    peers.pending.append("kernel k: rank 0 timed out waiting for rank 1")
    with pytest.raises(PeerTimeoutError, match="waiting for rank 1"):
        ex.run({r: [torch.randn(64, 64)] for r in (0, 1)})


def test_mailbox_reports_without_cuda():
    """The host side of the error mailbox (pkc.runtime.peers.Mailbox) on plain host memory:
    nothing reported until a kernel's record sets a slot's flag; the line names kernel,
    rank, CTA, epoch, the missing peer and what was awaited; clearing forgets it."""
    import ctypes

    import numpy as np

    from pkc.runtime.peers import Mailbox

    m = Mailbox.__new__(Mailbox)            # skip cuMemHostAlloc: same layout on the host
    buf = (ctypes.c_uint32 * (Mailbox.SLOTS * 8))()
    m.host, m.dev, m.words, m.owners = ctypes.addressof(buf), 1 << 40, buf, []
    m._flags = np.ctypeslib.as_array(m.words)[0::8]
    assert m.slot("k0", 0, {1: "arrival"}) == 1 << 40
    assert m.slot("k1", 1, {1: "arrival"}) == (1 << 40) + 32
    assert m.reports() == []
    for i, v in enumerate([1, 1, 1, 0, 3, 4, 7, 2]):     # flag kind rank peer seen wanted cta epoch
        buf[8 + i] = v
    (line,) = m.reports(clear=True)
    assert line == ("kernel k1: rank 1 (CTA 7, epoch 2) timed out waiting for rank 0: arrival; "
                    "its signal was 3, wanted 4")
    assert m.reports() == []
