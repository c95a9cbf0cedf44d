"""The interpreter runs kernel-level IR made of puts and signals for W simulated ranks,
and turns protocol bugs into errors that name the op and the rank."""

import pytest
import torch

from pkc.interp import InterpError, interpret, random_inputs
from pkc.ir import parse_module, verify_module
from tests.unit.kernels import all_reduce_ir


def _run(text: str, world: int, seed: int = 0):
    module = parse_module(text, "allreduce.mlir")
    verify_module(module)
    inputs = random_inputs(module, world, seed)
    return inputs, interpret(module, inputs, world, schedule_seed=seed)


@pytest.mark.parametrize("world", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_all_reduce_equals_torch_sum(world, dtype):
    for seed in range(3):
        inputs, outputs = _run(all_reduce_ir(world, dtype=dtype), world, seed)
        expected = torch.stack([x[0].double() for x in inputs]).sum(0)
        for rank in range(world):
            got = outputs[rank][0]
            assert got.dtype == inputs[0][0].dtype
            tol = 1e-5 if dtype == "f32" else 5e-2
            torch.testing.assert_close(got.double(), expected, rtol=tol, atol=tol)


def test_all_reduce_every_rank_identical_and_inputs_untouched():
    inputs, outputs = _run(all_reduce_ir(4), 4)
    originals = [x[0].clone() for x in inputs]
    assert all(torch.equal(outputs[0][0], o[0]) for o in outputs)
    assert all(torch.equal(a[0], b) for a, b in zip(inputs, originals))


def test_wait_without_matching_signal_is_a_deadlock_error():
    with pytest.raises(InterpError) as err:
        _run(all_reduce_ir(4, expected=5), 4)
    msg = str(err.value)
    assert "deadlock" in msg
    assert "'pk.wait' at allreduce.mlir:" in msg
    assert "rank 0" in msg and "rank 3" in msg
    assert "slot 0 >= 5, it is 4" in msg


def test_missing_signal_deadlocks_instead_of_hanging():
    with pytest.raises(InterpError, match=r"deadlock[\s\S]*slot 0 >= 2, it is 0"):
        _run(all_reduce_ir(2, signal=False), 2)


def test_read_before_data_arrived_is_detected():
    # Without the wait, a rank may sum the staging buffer before peers' puts are ordered
    # before its loads: the race detector must see it whatever the interleaving.
    for seed in range(4):
        with pytest.raises(InterpError, match="read before the data arrived") as err:
            _run(all_reduce_ir(3, wait=False), 3, seed)
        assert "'pk.load'" in str(err.value) and "rank" in str(err.value)


def test_peer_outside_world_is_an_error():
    with pytest.raises(InterpError, match=r"'pk.put' at allreduce.mlir:\d+:\d+ on rank \d .*peer 3 is outside the world of 3 ranks"):
        _run(all_reduce_ir(3, first_peer=1), 3)


def test_tile_larger_than_buffer_reads_zeros_and_drops_writes():
    # A 16x32 tile over an 8x16 buffer: TMA semantics, out-of-bounds reads give 0 and
    # out-of-bounds writes are dropped, so the result is still the input.
    inputs, outputs = _run(all_reduce_ir(1, rows=8, cols=16, tile=(16, 32)), 1)
    torch.testing.assert_close(outputs[0][0], inputs[0][0])


def test_unordered_overlapping_puts_are_detected():
    # With 2 ranks the oversized tile of rank 0 spills into rank 1's staging slot: two
    # puts to one element with nothing ordering them.
    with pytest.raises(InterpError, match="also wrote, with nothing ordering the two writes"):
        _run(all_reduce_ir(2, rows=8, cols=16, tile=(16, 32)), 2)


def test_wrong_world_size_is_reported():
    module = parse_module(all_reduce_ir(4), "allreduce.mlir")
    with pytest.raises(InterpError, match="world of 4 ranks, but the interpreter runs 2"):
        interpret(module, random_inputs(module, 2, 0), 2)


def test_mismatched_inputs_are_reported():
    module = parse_module(all_reduce_ir(2), "allreduce.mlir")
    bad = [[torch.zeros(3, 3)], [torch.zeros(3, 3)]]
    with pytest.raises(InterpError, match=r"argument 0 on rank 0 should be a \(8, 16\) torch.float32 tensor"):
        interpret(module, bad, 2)


def test_hand_written_lit_kernel_is_protocol_correct():
    # The fused mm + reduce-scatter of the round-trip lit test must run without a
    # deadlock or a race, and write every output element.
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "lit" / "dialects" / "kernel-roundtrip.mlir"
    for seed in range(3):
        inputs, outputs = _run(path.read_text().replace("@mm_rs", "@main"), 2, seed)
        for rank in range(2):
            assert torch.isfinite(outputs[rank][0].float()).all()
