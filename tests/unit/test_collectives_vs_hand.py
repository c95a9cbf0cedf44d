"""The fair hand-vs-IR collective benchmark's inputs (benchmarks/collectives_vs_hand.py,
benchmarks/results/hand_collectives) and a runtime fix it exposed, on the CPU:

* cases.json lists exactly the benchmark's cases, each with the IR plan this tree makes
  (so a change of the schedule pass's choices is noticed here, not on the GPU), a hand
  PTX file and a launch plan for every CTA budget the virtual world gives on an H200;
* the zero-default stripping of the ``--variants`` experiment finds the guarded loads;
* ScheduledCollective keys its persistent allocations by a number of its own, not by
  ``id(self)`` (reused after a runner is freed: the H200 run of 2026-12-02 then found a
  freed runner's allocation of another size, "exists with another shape")."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
HAND = ROOT / "benchmarks" / "results" / "hand_collectives"


def _specs():
    return json.loads((HAND / "cases.json").read_text())


def test_cases_json_matches_the_benchmark_and_has_every_plan():
    from collectives_vs_hand import cases
    from hand_collectives_gen import BUDGETS

    specs = _specs()
    assert [(s["collective"], s["algorithm"], s["W"], s["bytes"], s["dtype"]) for s in specs] == \
        [tuple(c) for c in cases()]
    for s in specs:
        h = s["hand"]
        assert (HAND / h["ptx"]).is_file(), h["ptx"]
        assert sorted(h["plans"], key=int) == [str(b) for b in BUDGETS]
        assert h["kernel"] in (HAND / h["ptx"]).read_text()


@pytest.mark.parametrize("i", [0, 13, 28, 30])      # ll, rs, rs W=4 4 MiB, the pull two-shot
def test_ir_plan_is_still_the_one_the_hand_kernels_were_made_for(i):
    from collectives_ir import compile_ir

    s = _specs()[i]
    _, plan, n_in, n_out = compile_ir(s["collective"], s["algorithm"], s["W"], s["bytes"], s["dtype"])
    assert (plan["comm_kind"], plan.get("gather"), plan.get("groups"), n_in, n_out) == \
        (s["kind"], s["gather"], s["groups"], s["n_in"], s["n_out"])


def test_strip_zero_defaults_finds_the_guarded_loads():
    from collectives_ir import compile_ir
    from collectives_vs_hand import strip_zero_defaults

    ck, _, _, _ = compile_ir("reduce_scatter", "direct", 4, 4 << 20, "bf16")
    out, n = strip_zero_defaults(ck.ptx)
    # 4 push loops of 4 vectors, the slot sum's 2 x 4 loads
    assert n == 24 and out.count("mov.b32") == ck.ptx.count("mov.b32") - 4 * n
    assert out.count("ld.global") == ck.ptx.count("ld.global")


class _FakePeers:
    """What ScheduledCollective asks of its peers, recording the allocation keys."""

    world, ranks, trap = 2, [0, 1], False

    def __init__(self):
        import torch

        self.device = torch.device("cpu")
        self.keys = []
        self.mailbox = type("M", (), {"slot": staticmethod(lambda *a: 0)})()

    def sms_of(self, r):
        return 64

    def symmetric(self, key, shape, dtype, zero=False):
        self.keys.append(key)
        return type("S", (), {"ptrs": [0, 0], "tensors": {}})()

    def local(self, key, shape, dtype, zero=False):
        self.keys.append(key)
        return {0: None, 1: None}


def test_scheduled_collective_allocation_keys_are_never_reused(monkeypatch):
    import gc

    from collectives_ir import compile_ir

    from pkc.runtime import scheduled_comm as sc

    monkeypatch.setattr(sc, "load_kernel", lambda *a, **k: type("K", (), {"func": None})())
    monkeypatch.setattr(sc, "call", lambda *a: 2)           # occupancy: 2 CTAs per SM
    ck, _, n_in, n_out = compile_ir("all_reduce", "one_shot", 2, 1 << 20, "bf16")
    peers = _FakePeers()
    firsts = []
    for _ in range(6):          # made and freed in turn: a freed runner's id() may come back
        run = sc.ScheduledCollective(ck.ptx, ck.meta, peers, [n_in], [n_out], "bf16")
        firsts.append(peers.keys[-1][:3])
        assert id(run) not in peers.keys[-1], "keyed by the runner's address"
        del run
        gc.collect()
    assert len(set(firsts)) == len(firsts), firsts
