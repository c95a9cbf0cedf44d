"""The IR-built all-gather + GEMM of a gather along dim 1 with B > 1 blocks of rows per
shard (DTensor Shard(1): pkc/passes/ag_blocks_schedule.py) on the GPU, in the virtual
world, W = 1, 2, 4 and B = 2, 3 on odd shapes (rows per block no multiple of the tile,
N and H multiples of 8 but not 16): each rank's C against torch (the gathered x times its
weight in f32, within a bf16 step of the scale), the gathered [B*S, H] bitwise where it
is returned, again after a few timed launches (epochs advance, pads reused).
benchmarks/fused_ag_blocks.py has the cases and the timing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from fused_ag_blocks import CASES, run_case  # noqa: E402

ODD = [c for c in CASES if c[0].startswith("odd")]


@pytest.mark.parametrize("case", ODD, ids=[c[0] for c in ODD])
def test_matches_torch(case):
    from pkc.runtime.peers import VirtualPeers

    row = run_case(*case, rounds=2, peers=VirtualPeers(case[1]))
    assert row["correct"] and row["correct_after_timing"], row
    assert row["batches"] == (case[2] if case[1] > 1 else 1), row
