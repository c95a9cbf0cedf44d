"""Targets: every figure present, positive and sourced; lookups and overrides."""

import dataclasses

import pytest

from pkc.target import TARGETS, Target, get_target

SOURCE_KINDS = ("measured here 2026-11-29 (PLATFORM.md)",
                "measured here 2026-11-29 (benchmarks/transfer.py",
                "measured here 2026-11-29 (benchmarks/fused_sweep.py",
                "measured here 2026-11-29 (benchmarks/results/", "datasheet:", "PK paper",
                "estimate:", "policy:")
NAMES = ["h100", "h200", "b200", "nvl72"]


def test_all_four_targets_exist():
    assert sorted(TARGETS) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_figures_positive(name):
    t = get_target(name)
    assert t.sm_arch in ("sm_90a", "sm_100a")
    for f in Target.figure_names():
        if f in ("sm_arch", "nvls"):
            continue
        v = getattr(t, f)
        assert isinstance(v, (int, float)) and v > 0, (name, f, v)


@pytest.mark.parametrize("name", NAMES)
def test_every_figure_has_a_known_kind_of_source(name):
    t = get_target(name)
    for f in Target.figure_names():
        src = t.sources.get(f, "")
        assert src.startswith(SOURCE_KINDS), (name, f, src)
        assert len(src) > len("estimate: "), (name, f, src)


@pytest.mark.parametrize("name", NAMES)
def test_nvls_only_on_blackwell_targets(name):
    """NVLS (multimem) collectives may be chosen for b200 / nvl72, never for the Hopper
    targets of the lent machines (NVLink multicast stays off there)."""
    assert get_target(name).nvls is (name in ("b200", "nvl72"))


@pytest.mark.parametrize("name", NAMES)
def test_achievable_not_above_datasheet(name):
    t = get_target(name)
    assert t.mma_achievable_flops <= t.mma_peak_flops
    assert t.hbm_achievable_bw <= t.hbm_bw
    assert t.nvlink_achievable_bw <= t.nvlink_bw
    assert t.ldst_bw_per_sm < t.tma_bw_per_sm
    assert t.sm_partition_min % t.sm_partition_align == 0
    assert t.intra_sm_slowdown_ldst >= t.intra_sm_slowdown_tma >= 1.0


def test_h200_uses_figures_measured_here():
    t = get_target("h200")
    measured = "measured here 2026-11-29 (PLATFORM.md)"
    assert t.num_sms == 132 and t.sources["num_sms"].startswith(measured)
    assert t.hbm_achievable_bw == pytest.approx(4227e9)
    assert t.sources["hbm_achievable_bw"].startswith(measured)
    assert 720e12 <= t.mma_achievable_flops <= 830e12
    assert t.sources["mma_achievable_flops"].startswith(measured)
    assert (t.sm_partition_min, t.sm_partition_align) == (8, 8)
    assert t.sources["sm_partition_min"].startswith(measured)


def test_pk_sourced_and_estimated_figures_are_marked():
    b, h = get_target("b200"), get_target("h200")
    assert b.sources["tma_bw_per_sm"].startswith("PK paper")
    # PK: ~78% of NVLink with ~15 SMs on B200
    assert 13 <= b.nvlink_achievable_bw / b.tma_bw_per_sm <= 17
    # ld/st needs 3-5x more SMs
    assert 3 <= b.tma_bw_per_sm / b.ldst_bw_per_sm <= 5
    for f in ("signal_latency", "launch_overhead"):
        assert h.sources[f].startswith("estimate:"), f
    # measured on the multi-GPU machines / the W = 1 fused kernel
    assert h.sources["nvlink_achievable_bw"].startswith("measured here 2026-11-29 (benchmarks/fused_sweep.py")
    assert h.sources["intra_sm_slowdown_tma"].startswith("measured here 2026-11-29 (benchmarks/results/h200_2026-11-29/fused_w1.json")
    # H200 per-SM drive rates: pkc's transfer microbenchmark (device to device)
    for f in ("tma_bw_per_sm", "ldst_bw_per_sm"):
        assert h.sources[f].startswith("measured here 2026-11-29 (benchmarks/transfer.py"), f


def test_domain_sizes_and_archs():
    assert get_target("nvl72").max_gpus == 72
    assert get_target("h200").max_gpus == 8
    assert get_target("b200").sm_arch == "sm_100a"
    assert get_target("h100").sm_arch == "sm_90a"
    assert get_target("nvl72").nvlink_bw == get_target("b200").nvlink_bw


def test_get_target_is_case_insensitive():
    assert get_target("H200") is get_target("h200")


def test_unknown_target_lists_known_names():
    with pytest.raises(ValueError) as e:
        get_target("a100")
    msg = str(e.value)
    assert "a100" in msg
    for n in NAMES:
        assert n in msg


def test_with_overrides_replaces_value_and_source():
    h = get_target("h200")
    h2 = h.with_overrides(source="microbenchmark 2026-12-01", signal_latency=1.2e-6)
    assert h2.signal_latency == 1.2e-6
    assert h2.sources["signal_latency"] == "microbenchmark 2026-12-01"
    assert h.signal_latency == 2e-6 and h.sources["signal_latency"].startswith("estimate:")
    assert h2.sources["num_sms"] == h.sources["num_sms"]
    assert h2.num_sms == h.num_sms


def test_with_overrides_rejects_unknown_figure():
    with pytest.raises(TypeError, match="nvlink_speed"):
        get_target("h200").with_overrides(nvlink_speed=1.0)


def test_targets_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        get_target("h200").num_sms = 1
    with pytest.raises(TypeError):
        get_target("h200").sources["num_sms"] = "x"
