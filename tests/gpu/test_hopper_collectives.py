"""pkc's sm_90a collective kernels (pkc/codegen/hopper/collectives.py) on a Hopper GPU, in
a virtual world (W ranks on one GPU, each on its own SM partition): one-shot and two-shot
all-reduce, all-gather and reduce-scatter against the rank-order f32 sum (bitwise), random
inputs, outputs poisoned with NaN before each launch, several launches in a row (epochs,
double-buffered staging), sizes from one vector to several MiB, and a missing peer turning
into CollectiveTimeout instead of a hang.

    python -m pytest tests/gpu/test_hopper_collectives.py      # needs an sm_90 GPU
"""

from __future__ import annotations

import pytest
import torch

from pkc.codegen.hopper.collectives import (CollectiveConfig, CollectiveRunner,
                                            CollectiveTimeout)

DT = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


def _hopper() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


pytestmark = pytest.mark.skipif(not _hopper(), reason="needs an sm_90 GPU")

_PEERS: dict = {}


def peers(W):
    from pkc.runtime.peers import VirtualPeers

    if W not in _PEERS:
        _PEERS[W] = VirtualPeers(W)
    return _PEERS[W]


def rank_sum(xs):
    acc = xs[0].float()
    for x in xs[1:]:
        acc = acc + x.float()
    return acc.to(xs[0].dtype)


def expected(kind, xs, W):
    if kind in ("ll", "ar1", "ar2"):
        return [rank_sum(xs)] * W
    if kind in ("rs", "llrs"):
        return list(rank_sum(xs).chunk(W))
    return [torch.cat(xs)] * W


def _case(kind, W, dtype, elems, copy_in=False, launches=3, gather="push", groups=1):
    cfg = CollectiveConfig(kind, W, dtype, copy_in=copy_in, gather=gather, groups=groups)
    pr = peers(W)
    run = CollectiveRunner(cfg, elems, pr)
    g = torch.Generator(device="cuda").manual_seed(elems + W)
    for launch in range(launches):
        xs = [torch.randn(elems, device="cuda", dtype=DT[dtype], generator=g) for _ in range(W)]
        if run.in_place:
            for r in range(W):
                run.buffer(r).copy_(xs[r])
            outs = run.run()
        else:
            for r in range(W):
                run.out[r].fill_(float("nan"))
            outs = run.run({r: xs[r] for r in range(W)})
        torch.cuda.synchronize()
        run.check()
        want = expected(kind, xs, W)
        for r in range(W):
            got = outs[r]
            assert not torch.isnan(got).any(), f"{cfg.kernel_name} rank {r} launch {launch}: NaN left"
            assert torch.equal(got, want[r]), (
                f"{cfg.kernel_name} rank {r} launch {launch}: max err "
                f"{(got.float() - want[r].float()).abs().max().item()}")


@pytest.mark.parametrize("W", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("kind", ["ll", "llag", "llrs", "ar1", "rs", "ar2", "ag"])
def test_collective_bf16(kind, W):
    for elems in (8 * W, 8 * W * 37, 8 * W * 5000, 1 << 21):
        if (elems // 8) % W and kind in ("rs", "llrs"):
            continue
        _case(kind, W, "bf16", elems)


@pytest.mark.parametrize("dtype", ["f16", "f32"])
@pytest.mark.parametrize("kind", ["ll", "llag", "llrs", "ar1", "rs", "ar2", "ag"])
def test_collective_dtypes(kind, dtype):
    _case(kind, 4, dtype, 4 * 8 * 1031)


@pytest.mark.parametrize("W", [1, 2, 3, 4, 8])
def test_pull_all_gather_from_symmetric_chunks(W):
    """agp: each rank's chunk already lies in symmetric memory (a fused GEMM + RS result);
    every rank pulls the W chunks into a fresh output; several launches with new chunks."""
    pr = peers(W)
    for dtype, elems in (("bf16", 8 * 7), ("bf16", 8 * 40000), ("f32", 4 * 1031)):
        src = pr.symmetric(("test-agp", W, dtype, elems), (elems,), DT[dtype])
        run = CollectiveRunner(CollectiveConfig("agp", W, dtype), elems, pr, source=src)
        g = torch.Generator(device="cuda").manual_seed(elems + W)
        for launch in range(3):
            xs = [torch.randn(elems, device="cuda", dtype=DT[dtype], generator=g) for _ in range(W)]
            for r in range(W):
                src.tensors[r].copy_(xs[r])
            outs = {r: torch.full((W * elems,), float("nan"), device="cuda", dtype=DT[dtype])
                    for r in range(W)}
            pr.sync_all()
            got = run.run(outs=outs)
            torch.cuda.synchronize()
            run.check()
            for r in range(W):
                assert got[r] is outs[r]
                assert torch.equal(got[r], torch.cat(xs)), f"agp W={W} rank {r} launch {launch}"
    with pytest.raises(ValueError, match="source"):
        CollectiveRunner(CollectiveConfig("agp", W, "bf16"), 64, pr)


@pytest.mark.parametrize("gather", ["push", "pull"])
@pytest.mark.parametrize("W", [2, 3, 4, 8])
def test_two_shot_copy_in(W, gather):
    _case("ar2", W, "bf16", 8 * W * 3001, copy_in=True, gather=gather)
    _case("ar2", W, "f32", 1 << 20, copy_in=True, gather=gather)
    _case("ar2", W, "bf16", 8 * W * 5, copy_in=True, gather=gather)


@pytest.mark.parametrize("groups", [2, 3, 8])
@pytest.mark.parametrize("W", [2, 4])
def test_two_shot_in_staggered_groups(W, groups):
    """CTA groups that take turns on the exchange: every group's slices still land (the
    last group may be short or empty), in place and into a fresh output."""
    for copy_in, gather in ((True, "push"), (True, "pull"), (False, "push")):
        _case("ar2", W, "bf16", 8 * W * 3001, copy_in=copy_in, gather=gather, groups=groups)
    _case("ar2", W, "bf16", 1 << 22, copy_in=True, groups=groups, launches=4)


def test_many_launches_reuse_pads():
    _case("ll", 2, "bf16", 4096, launches=50)
    _case("ar1", 2, "bf16", 4096, launches=50)
    _case("ar2", 2, "bf16", 4096, launches=50)


def test_rejects_bad_input():
    run = CollectiveRunner(CollectiveConfig("ar1", 2, "bf16"), 1024, peers(2))
    bad = torch.randn(1000, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="1024 elements"):
        run.run({0: bad, 1: bad})
    with pytest.raises(ValueError, match="16 bytes"):
        CollectiveRunner(CollectiveConfig("ar1", 2, "bf16"), 1001, peers(2))


@pytest.mark.parametrize("kind", ["ll", "llag", "ar1", "ar2", "ag"])
def test_missing_peer_is_an_error_not_a_hang(kind):
    run = CollectiveRunner(CollectiveConfig(kind, 2, "bf16", copy_in=kind == "ar2"), 1 << 16,
                           peers(2), timeout_ns=50_000_000)
    x = torch.randn(1 << 16, device="cuda", dtype=torch.bfloat16)
    run.run({0: x}, ranks=[0])      # rank 1 never launches
    torch.cuda.synchronize()
    with pytest.raises(CollectiveTimeout, match="rank 0 .* timed out waiting for rank 1"):
        run.check()
    # the same record in the host-mapped mailbox (readable without a CUDA call)
    from pkc.runtime.errors import PeerTimeoutError

    assert any("timed out waiting for rank 1" in ln for ln in peers(2).mailbox.reports())
    with pytest.raises(PeerTimeoutError, match=run.cfg.kernel_name):
        peers(2).raise_timeouts()
    assert not peers(2).mailbox.reports()


def test_fresh_outputs():
    """A caller's output tensor per launch (what the compiled path does: no copy)."""
    run = CollectiveRunner(CollectiveConfig("ll", 2, "bf16"), 2048, peers(2))
    for _ in range(3):
        xs = [torch.randn(2048, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
        outs = {r: torch.full((2048,), float("nan"), device="cuda", dtype=torch.bfloat16) for r in range(2)}
        got = run.run({0: xs[0], 1: xs[1]}, outs=outs)
        torch.cuda.synchronize()
        run.check()
        assert all(got[r] is outs[r] and torch.equal(outs[r], rank_sum(xs)) for r in range(2))
