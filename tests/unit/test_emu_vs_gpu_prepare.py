"""tests/gpu/emu_vs_gpu.py's CPU half stays alive: ``prepare`` compiles and emulates a
scheduled collective and a fused GEMM + all-reduce case and records their PTX hashes; the
comparison counts differing bits, treats both-NaN as equal, applies a case's tolerance,
and compares MoE outputs only where they are the result."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gpu"))
import emu_cases as E  # noqa: E402
import emu_vs_gpu  # noqa: E402


def _case(name: str) -> E.Case:
    (c,) = [c for c in E.cases() if c.name == name]
    return c


def test_prepare_a_comm_and_a_fused_case(tmp_path, monkeypatch, capsys):
    for name in ("comm_ll_ar_w2", "fused_ar_w1"):
        emu_vs_gpu.main(["prepare", str(tmp_path), "--only", name])
    index = json.loads((tmp_path / "index.json").read_text())
    assert set(index) == {"comm_ll_ar_w2", "fused_ar_w1"}
    for name, rec in index.items():
        assert len(rec["ptx_sha256"]) == 64, rec
        saved = torch.load(tmp_path / f"{name}.pt")
        c = _case(name)
        assert len(saved["inputs"]) == len(saved["emulated"]) == c.W
        for per in saved["emulated"]:
            assert per and not any(torch.isnan(t.float()).any() for t in per)
    assert index["comm_ll_ar_w2"]["emulator_equals_reference"] is True
    assert index["fused_ar_w1"]["emulator_equals_reference"] is None
    # the LL all-reduce: every rank holds the sum of the two ranks' inputs
    saved = torch.load(tmp_path / "comm_ll_ar_w2.pt")
    x = saved["inputs"]
    want = (x[0][0].float() + x[1][0].float()).to(torch.bfloat16)
    for r in range(2):
        assert torch.equal(saved["emulated"][r][0].reshape(-1), want.reshape(-1))
    # compiling again gives the same PTX: what ``run`` checks on the GPU machine
    assert E.ptx_hash(E.build(_case("comm_ll_ar_w2"))) == index["comm_ll_ar_w2"]["ptx_sha256"]
    # ``run`` end to end with the emulator standing in for the GPU: the same bits again
    monkeypatch.setattr(E, "launch_case", lambda c, kernels, x: E.emulate_case(c, kernels, x))
    out = tmp_path / "out"
    for name in ("comm_ll_ar_w2", "fused_ar_w1"):
        emu_vs_gpu.main(["run", str(tmp_path), str(out), "--only", name])
        rep = json.loads((out / "emu_vs_gpu.json").read_text())[name]
        assert "error" not in rep, rep
        assert rep["bitwise"] and rep["differing"] == 0 and rep["elements"] > 0, rep
        assert rep["kind"] == _case(name).kind and rep["W"] == _case(name).W
    lines = capsys.readouterr().out.splitlines()       # the table, last
    assert lines[-1].startswith("2 bitwise, 0 within their tolerance, 0 differ, 0 errors")
    assert any(x.startswith("fused_ar_w1 ") and x.endswith(" yes") for x in lines[-4:])


def test_case_names_select_one_case_each():
    """``--only NAME`` (a prefix) must select exactly that case."""
    names = [c.name for c in E.cases()]
    assert len(set(names)) == len(names)
    assert not [(a, b) for a in names for b in names if a != b and b.startswith(a)]


def test_compare_counts_bits_and_applies_the_tolerance():
    c = _case("comm_ll_ar_w2")
    e = [[torch.tensor([1.0, float("nan"), 3.0], dtype=torch.bfloat16)]]
    same = emu_vs_gpu.compare(c, [[e[0][0].clone()]], e, None)
    assert same["bitwise"] and same["differing"] == 0
    g = [[torch.tensor([1.0, float("nan"), 3.015625], dtype=torch.bfloat16)]]   # one bf16 ulp
    d = emu_vs_gpu.compare(c, g, e, None)
    assert not d["bitwise"] and d["differing"] == 1 and d["max_abs"] == 0.015625
    assert "within_tolerance" not in d           # a case without a reason gets none
    t = emu_vs_gpu.compare(_case("fused_rs_w3"), g, e, None)
    assert t["within_tolerance"] and t["reason"] == E.REDUCE_ADD_WHY
    one_nan = [[torch.tensor([1.0, 2.0, 3.0], dtype=torch.bfloat16)]]
    assert not emu_vs_gpu.compare(_case("fused_rs_w3"), one_nan, e, None)["within_tolerance"]


def test_moe_rows_past_the_counts_are_not_compared():
    c = _case("moe_w2")
    W, Ex, C, N = c.W, c.shapes["E"], c.shapes["C"], c.shapes["N"]
    counts = [torch.tensor([C, 3, 0, 5], dtype=torch.int32), torch.tensor([1, 2, 7, 0], dtype=torch.int32)]
    x = [[None, None, counts[r]] for r in range(W)]
    t = torch.zeros(W * Ex, C, N)
    m = E.valid_mask(c, x, 0, 0, t)
    assert m[:, :, 0].sum(1).tolist() == [C, 3, 0, 5]
    op = E.valid_mask(c, x, 1, 1, torch.zeros(Ex * W * C, 8))   # rank 1's expert operand
    # block (e, s=0): rank 0's tokens for expert e of rank 1 (counts[0][1*E + e]); own s=1 not
    assert op[:, 0].sum().item() == 0 + 5
    assert op[0 * W * C:0 * W * C + C, 0].sum() == 0 and op[(1 * W + 0) * C:(1 * W + 0) * C + 5, 0].all()


def test_new_kinds_prepare_and_run_with_the_emulator_standing_in(tmp_path, monkeypatch, capsys):
    """The ``new_`` group (the scheduled fp8 GEMM, the fused fp8 GEMM + RS, the RS
    layouts): an fp8 GEMM with row-wise scales and bias (bf16 output from fp8 inputs) and a
    3-D column kernel with a bias compile, emulate and go through ``run``; ``--only``
    limits the table's "not run" list to the group."""
    names = ("new_fp8_gemm_e4m3_e5m2_row_bias", "new_rs_bias_cols3d_w1")
    group = [c.name for c in E.cases() if c.name.startswith("new_")]
    assert len(group) >= 10 and set(names) <= set(group)
    assert any("fp8 gemm+rs" in _case(n).kind for n in group)
    for name in names:
        emu_vs_gpu.main(["prepare", str(tmp_path), "--only", name])
    saved = torch.load(tmp_path / f"{names[0]}.pt")
    assert saved["inputs"][0][0].dtype == torch.float8_e4m3fn
    assert saved["inputs"][0][1].dtype == torch.float8_e5m2
    assert saved["emulated"][0][0].dtype == torch.bfloat16
    assert (saved["inputs"][0][2] >= 0.5).all()         # row-wise scales, positive
    monkeypatch.setattr(E, "launch_case", lambda c, kernels, x: E.emulate_case(c, kernels, x))
    out = tmp_path / "out"
    for name in names:
        emu_vs_gpu.main(["run", str(tmp_path), str(out), "--only", name])
    capsys.readouterr()
    emu_vs_gpu.main(["table", str(out), "--only", "new_"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == f"2 bitwise, 0 within their tolerance, 0 differ, 0 errors, {len(group) - 2} not run"
    assert _case(names[0]).tolerance is None and _case(names[1]).tolerance is None
    assert _case("new_fp8_rs_w3_pairs").reason == E.REDUCE_ADD_WHY      # arrival order
    assert _case("new_fp8_rs_w3_ordered_pairs").tolerance is None       # rank ring
    assert lines[-2].startswith("not run: new_")
