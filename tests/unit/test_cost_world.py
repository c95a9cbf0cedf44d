"""The cost model grows with the world size W (issue 17): per-peer signalling and flag
fan-in in every barrier, one-shot link bytes growing with W, and a few predictions at
W = 2, 8, 72 worked out here by hand from the targets' figures (pkc/target/targets.py),
not copied from the model's output."""

import pytest

from pkc.target import cost
from pkc.target.collectives import Algorithm
from pkc.target.targets import get_target

NVL72, B200 = get_target("nvl72"), get_target("b200")
MIB = 1 << 20
WORLDS = (2, 3, 4, 8, 16, 32, 48, 64, 72)


def _xfer(link_s, hbm_s):
    # the standalone collectives' overlap of link and local traffic (cost_collectives._xfer)
    return max(link_s, hbm_s) + 0.5 * min(link_s, hbm_s)


# --- the figures the hand computations use (pkc/target/targets.py) ----------------------
# nvl72: flag round trip 3 us, launch 3 us, 50 ns per further peer flag issued, 25 ns per
# further flag landing; NVLink 900 GB/s x 78% = 702 GB/s reachable; ld/st drive 148 SMs x
# 11.7 GB/s = 1.73 TB/s and TMA 148 x 46.8 = 6.9 TB/s, both above the link: link-bound;
# HBM 8 TB/s x 0.88 = 7.04 TB/s. b200: the same but a 2 us round trip, W <= 8.
LINK = 0.78 * 900e9
HBM = 0.88 * 8e12


def _barrier(round_trip, W):
    return round_trip + (W - 2) * (50e-9 + 25e-9)


def test_figures_the_hand_computations_assume():
    for t, rt in ((NVL72, 3e-6), (B200, 2e-6)):
        assert (t.signal_latency, t.launch_overhead) == (rt, 3e-6)
        assert (t.peer_signal_issue, t.flag_fanin) == (50e-9, 25e-9)
        assert t.nvlink_achievable_bw == pytest.approx(LINK)
        assert t.hbm_achievable_bw == pytest.approx(HBM)
        assert t.num_sms * t.ldst_bw_per_sm > LINK and t.num_sms * t.tma_bw_per_sm > LINK


def test_barrier_by_hand():
    assert cost.barrier_time(NVL72, 1) == 0.0
    assert cost.barrier_time(NVL72, 2) == NVL72.signal_latency       # W = 2: as before
    assert cost.barrier_time(NVL72, 8) == pytest.approx(3e-6 + 6 * 75e-9)      # 3.45 us
    assert cost.barrier_time(NVL72, 72, 2) == pytest.approx(2 * (3e-6 + 70 * 75e-9))  # 16.5
    assert cost.fan_out_time(NVL72, 71) == pytest.approx(0.5e-6 + 70 * 50e-9)  # 4 us


@pytest.mark.parametrize("t,W,expect_us", [
    # 3 us launch + 3 barriers + 2 phases of (link (W-1)/W MiB, local 2 MiB)
    (NVL72, 2, 3 + 3 * 3.0 + 2 * (0.74687 + 0.5 * 0.29789)),      # 13.79 us
    (NVL72, 8, 3 + 3 * 3.45 + 2 * (1.30702 + 0.5 * 0.29789)),     # 16.26 us
    (NVL72, 72, 3 + 3 * 8.25 + 2 * (1.47298 + 0.5 * 0.29789)),    # 30.99 us
    (B200, 2, 3 + 3 * 2.0 + 2 * (0.74687 + 0.5 * 0.29789)),       # 10.79 us
    (B200, 8, 3 + 3 * 2.45 + 2 * (1.30702 + 0.5 * 0.29789)),      # 13.26 us
])
def test_two_shot_all_reduce_1mib_by_hand(t, W, expect_us):
    # the same from the figures, to tie the literals above to them
    rt = t.signal_latency
    by_figures = 3e-6 + 3 * _barrier(rt, W) + 2 * _xfer((W - 1) / W * MIB / LINK, 2 * MIB / HBM)
    assert by_figures == pytest.approx(expect_us * 1e-6, rel=1e-4)
    got = cost.all_reduce_time(t, MIB, W, Algorithm.TWO_SHOT)
    assert got == pytest.approx(expect_us * 1e-6, rel=1e-4)


def test_one_shot_all_reduce_is_link_bound_at_w_times_the_message():
    # W = 72: 71 MiB over the 702 GB/s port (106 us) and 146 MiB of local traffic (21.7 us),
    # 2 barriers of 8.25 us, a launch: 136.4 us
    expect = 3e-6 + 2 * 8.25e-6 + (71 * MIB / LINK + 0.5 * 146 * MIB / HBM)
    assert expect == pytest.approx(136.43e-6, rel=1e-4)
    assert cost.all_reduce_time(NVL72, MIB, 72, Algorithm.ONE_SHOT) == pytest.approx(expect)
    # and so the two-shot wins by far at W = 72 (the choice lower-collectives takes)
    choice = cost.choose_all_reduce(NVL72, MIB, 72)
    assert choice.kind is Algorithm.TWO_SHOT
    assert choice.alternatives[Algorithm.ONE_SHOT] > 4 * choice.time


def test_direct_all_gather_1mib_by_hand():
    # W = 72: barriers 2 x 8.25 us; 71/72 MiB over the link (1.473 us) + 1 MiB locally
    expect = 3e-6 + 16.5e-6 + (71 / 72 * MIB / LINK + 0.5 * MIB / HBM)
    assert cost.all_gather_time(NVL72, MIB, 72, Algorithm.DIRECT) == pytest.approx(expect)
    assert expect == pytest.approx(21.047e-6, rel=1e-4)
    # W = 8 on b200: barriers 2 x 2.45 us
    expect8 = 3e-6 + 4.9e-6 + (7 / 8 * MIB / LINK + 0.5 * MIB / HBM)
    assert cost.reduce_scatter_time(B200, MIB, 8, Algorithm.DIRECT) == pytest.approx(expect8)


def test_1mib_all_reduce_no_longer_the_same_at_8_and_72():
    at8 = cost.choose_all_reduce(NVL72, MIB, 8).time
    at72 = cost.choose_all_reduce(NVL72, MIB, 72).time
    assert at72 > 1.8 * at8


@pytest.mark.parametrize("nbytes", [4 << 10, MIB, 256 * MIB])
@pytest.mark.parametrize("fn,algos", [
    (cost.all_reduce_time, (Algorithm.ONE_SHOT, Algorithm.TWO_SHOT, Algorithm.RING)),
    (cost.all_gather_time, (Algorithm.DIRECT, Algorithm.RING)),
    (cost.reduce_scatter_time, (Algorithm.DIRECT, Algorithm.RING)),
])
def test_collectives_grow_strictly_with_w(fn, algos, nbytes):
    for algo in algos:
        times = [fn(NVL72, nbytes, W, algo) for W in WORLDS]
        assert all(a < b for a, b in zip(times, times[1:])), (fn.__name__, algo, times)


@pytest.mark.parametrize("nbytes", [4 << 10, MIB, 256 * MIB])
def test_all_to_all_and_barriers_grow_strictly_with_w(nbytes):
    times = [cost.all_to_all_time(NVL72, nbytes, W) for W in WORLDS]
    assert all(a < b for a, b in zip(times, times[1:])), times
    bars = [cost.barrier_time(NVL72, W) for W in WORLDS]
    assert all(a < b for a, b in zip(bars, bars[1:])), bars


@pytest.mark.parametrize("pattern,shape", [
    ("mm_reduce_scatter", (8192, 8192, 1024)),
    ("mm_all_reduce", (4096, 8192, 1024)),
    ("all_gather_mm", (8192, 1024, 8192)),
    ("all_to_all_mm_all_to_all", (4096, 4096, 1024, 2)),
])
def test_fused_predictions_do_not_shrink_with_w(pattern, shape):
    """Per-rank GEMM fixed: more peers only add barrier, fan-out and link bytes."""
    worlds = (2, 4, 8, 16, 32, 72)
    fused = [cost.predict_fused(NVL72, pattern, shape, W) for W in worlds]
    unfused = [cost.predict_unfused(NVL72, pattern, shape, W) for W in worlds]
    for times in (fused, unfused):
        assert all(a <= b * (1 + 1e-12) for a, b in zip(times, times[1:])), (pattern, times)
    assert fused[-1] > fused[0] and unfused[-1] > unfused[0]


def test_nvl72_plans_at_72_and_b200_refuses_it():
    plan = cost.plan_fusion(NVL72, "mm_reduce_scatter", (9216, 4096, 1024), 72)
    assert plan.W == 72 and plan.fused_time > 0 and plan.unfused_time > 0
    with pytest.raises(ValueError, match=r"world size 72 outside 1\.\.8 \(NVLink domain of b200\)"):
        cost.plan_fusion(B200, "mm_reduce_scatter", (9216, 4096, 1024), 72)
