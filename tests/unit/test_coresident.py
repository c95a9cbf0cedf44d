"""Peers.check_coresident (pkc/runtime/peers.py): every rank's CTAs of a spin-waiting kernel
must be resident at once. 72 ranks on plain streams get 132 // 72 = 1 SM's worth each: a
fused kernel of one CTA per rank fits (the W = 72 run on the H200), one of two CTAs of
230 KB shared memory (one per SM) cannot start them all, and the check says so, naming the
kernel, instead of leaving the ranks to time out. No GPU: the occupancy query is stubbed."""

from __future__ import annotations

import pytest

from pkc.runtime import driver
from pkc.runtime.peers import Peers


class _Plain(Peers):
    """72 ranks on one 132-SM GPU, plain streams (no green contexts)."""

    def __init__(self, world=72, sms=132):
        self.world, self.ranks, self.sms = world, list(range(world)), sms

    def sms_of(self, rank):
        return self.sms // self.world


@pytest.fixture
def occupancy(monkeypatch):
    seen = []

    def call(name, func, threads, smem):
        assert name == "cuOccupancyMaxActiveBlocksPerMultiprocessor"
        seen.append((threads, smem))
        return 1 if smem > 114 * 1024 else 2048 // threads
    monkeypatch.setattr(driver, "call", call)
    return seen


def test_one_cta_per_rank_fits_at_72(occupancy):
    _Plain().check_coresident("matmul_reduce_scatter", None, 1, 384, 230464)
    assert occupancy == [(384, 230464)]


def test_two_big_ctas_per_rank_at_72_are_refused(occupancy):
    with pytest.raises(RuntimeError, match=r"kernel matmul_reduce_scatter: 2 CTAs per rank cannot "
                                           r"all be resident on rank 0's 1 SMs \(1 CTA"):
        _Plain().check_coresident("matmul_reduce_scatter", None, 2, 384, 230464)


def test_small_ctas_share_an_sm(occupancy):
    # 4 CTAs of 512 threads, no shared memory: 4 per SM, so 4 per rank fit in 1 SM's worth
    _Plain().check_coresident("reduce_scatter_rs", None, 4, 512, 0)
    with pytest.raises(RuntimeError, match="5 CTAs per rank"):
        _Plain().check_coresident("reduce_scatter_rs", None, 5, 512, 0)


def test_one_rank_takes_the_whole_gpu(occupancy):
    one = _Plain(world=1)
    one.check_coresident("gemm", None, 132, 384, 230464, whole_gpu=True)
    with pytest.raises(RuntimeError, match="133 CTAs per rank"):
        one.check_coresident("gemm", None, 133, 384, 230464, whole_gpu=True)


def test_a_query_that_cannot_judge_refuses_nothing(monkeypatch):
    from pkc.runtime.errors import CudaDriverError

    def fails(*a):
        raise CudaDriverError("cuOccupancyMaxActiveBlocksPerMultiprocessor", 1, "CUDA_ERROR_INVALID_VALUE")
    monkeypatch.setattr(driver, "call", fails)
    _Plain().check_coresident("clustered", None, 8, 384, 230464)
    monkeypatch.setattr(driver, "call", lambda *a: 0)
    _Plain().check_coresident("clustered", None, 8, 384, 230464)
