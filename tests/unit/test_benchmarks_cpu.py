"""The CPU-only pieces of the issue-7 harness (benchmarks/fused_sweep.py,
benchmarks/collectives.py): shape lists, traffic and roofline arithmetic, bus bandwidth,
tables, JSON; the pk IR the harness compiles, checked on the interpreter; and the torchrun
examples as one CPU process (world 1, pkc's reference interpreter)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import collectives as coll  # noqa: E402
import done_when as dw  # noqa: E402
import fused_sweep as fs  # noqa: E402
import sweep_common as sc  # noqa: E402

sys.path.pop(0)


# ---------------------------------------------------------------------- shapes


@pytest.mark.parametrize("world", [1, 2, 4, 8])
def test_fused_shapes_are_valid_and_unique(world):
    shapes = fs.fused_shapes(world)
    labels = [s.label for s in shapes]
    assert len(labels) == len(set(labels))
    assert all(s.valid(world) for s in shapes)
    # PK: 5 values of N x 3 families, Llama-70B: 6 layers
    assert len([s for s in shapes if s.label.startswith("pk ")]) == 15
    assert len([s for s in shapes if s.label.startswith("llama70b")]) == 6
    order = fs.priority_order(shapes)
    assert sorted(s.label for s in order) == sorted(labels)
    assert all("16384" in s.label for s in order[-6:-3])
    assert all("32768" in s.label for s in order[-3:])


def test_pk_shapes_follow_the_paper():
    by = {s.label: s for s in fs.fused_shapes(8)}
    ag = by["pk ag+gemm N=8192"]
    assert (ag.family, ag.M, ag.N, ag.K) == ("ag", 8192, 1024, 8192)          # N x N/8 x N
    for fam in ("rs", "ar"):
        s = by[f"pk gemm+{fam} N=8192"]
        assert (s.M, s.N, s.K) == (8192, 8192, 1024)                            # N x N x N/8
    assert ag.operand_shapes(8) == {"a": (1024, 8192), "b": (1024, 8192), "out": (8192, 1024)}
    assert by["pk gemm+rs N=8192"].operand_shapes(8)["out"] == (1024, 8192)
    assert by["pk gemm+ar N=8192"].operand_shapes(8)["out"] == (8192, 8192)


def test_llama70b_tp8_shapes_match_the_gemm_benchmark():
    # benchmarks/gemm_ir.py: QKV 8192 x 1280 x 8192, O 8192 x 8192 x 1024, up+gate
    # 8192 x 7168 x 8192, down 8192 x 8192 x 3584 (TP-8, 8192 tokens)
    by = {s.label: (s.M, s.N, s.K) for s in fs.fused_shapes(8)}
    assert by["llama70b qkv T=8192 (sp)"] == (8192, 1280, 8192)
    assert by["llama70b up+gate T=8192 (sp)"] == (8192, 7168, 8192)
    assert by["llama70b o T=8192 (sp)"] == by["llama70b o T=8192 (tp)"] == (8192, 8192, 1024)
    assert by["llama70b down T=8192 (sp)"] == (8192, 8192, 3584)


def test_shapes_that_do_not_divide_are_left_out():
    assert all(s.M % 3 == 0 for s in fs.fused_shapes(3))
    assert fs.fused_shapes(3) == []  # 2048.. and 8192 tokens: no row split by 3


# ---------------------------------------------------------------------- arithmetic


def test_comm_bytes_and_roofline():
    s = fs.FusedShape("ag", "x", 4096, 512, 4096)
    assert s.comm_bytes(1) == 0
    assert s.comm_bytes(2) == 0.5 * 4096 * 4096 * 2
    rs = fs.FusedShape("rs", "y", 4096, 4096, 512)
    ar = fs.FusedShape("ar", "z", 4096, 4096, 512)
    assert ar.comm_bytes(8) == 2 * rs.comm_bytes(8) == 2 * 7 / 8 * 4096 * 4096 * 2
    assert s.flops() == 2 * 4096 * 512 * 4096
    # 16 MiB at 400 GB/s = 0.0419 ms; the GEMM (0.05 ms) is the limit
    assert fs.comm_ms(16 << 20, 400e9) == pytest.approx((16 << 20) / 400e9 * 1e3)
    assert fs.roofline_ms(0.05, 16 << 20, 400e9) == 0.05
    assert fs.roofline_ms(0.01, 16 << 20, 400e9) == pytest.approx(fs.comm_ms(16 << 20, 400e9))
    assert fs.roofline_ms(0.01, 0, None) == 0.01
    assert math.isinf(fs.comm_ms(1, None))


def test_bus_bandwidth_follows_nccl_tests():
    assert fs.bus_factor("all_reduce", 8) == 2 * 7 / 8
    assert fs.bus_factor("all_gather", 8) == fs.bus_factor("reduce_scatter", 8) == 7 / 8
    assert fs.bus_factor("all_reduce", 1) == 0
    assert fs.alg_bw(1 << 30, 1.0) == pytest.approx((1 << 30) / 1e-3 / 1e9)
    assert fs.bus_bw("all_reduce", 1 << 30, 2, 1.0) == pytest.approx(fs.alg_bw(1 << 30, 1.0))
    with pytest.raises(ValueError):
        fs.bus_factor("broadcast", 2)


def test_collective_sizes_and_layouts():
    sizes = fs.collective_sizes()
    assert sizes[0] == 4096 and sizes[-1] == 1 << 30 and len(sizes) == 10
    assert [fs.fmt_size(s) for s in sizes[:4]] == ["4K", "16K", "64K", "256K"]
    assert fs.fmt_size(1 << 30) == "1G" and fs.fmt_size(1000) == "1000"
    for op in coll.OPS:
        for w in (1, 2, 4, 8):
            rows, cols = coll.layout(op, 4096, w)
            assert rows * cols * coll.ESIZE == 4096
            assert op == "all_reduce" or rows % w == 0
    assert coll.layout("all_gather", 4096, 16) is None
    assert fs.ratio(2.0, 1.0) == 2.0 and fs.ratio(None, 1.0) is None and fs.ratio(1.0, 0) is None


# ---------------------------------------------------------------------- tables, files


def _fake_fused_result():
    row = {"label": "pk gemm+rs N=4096", "family": "rs", "M": 4096, "N": 4096, "K": 512,
           "comm_bytes": 16 << 20, "link_bw": 400e9, "pkc_gemm_outside": True,
           "ms": {"base": 0.2, "gemm": 0.05, "coll": 0.15, "symm": 0.18, "pkc_hand": 0.1,
                  "pkc": 0.125},
           "checks": {"pkc_hand": {"ok": True, "rel_err": 1e-3}, "symm": {"ok": False, "rel_err": 0.5}}}
    err = {"label": "pk gemm+ar N=4096", "family": "ar", "M": 4096, "N": 4096, "K": 512,
           "error": "RuntimeError: boom"}
    return {"world": 2, "device": "cpu", "shapes": [row, err]}


def test_summaries_and_the_fused_table():
    res = _fake_fused_result()
    s = fs.summarize_fused(res["shapes"][0])
    assert s["roofline_ms"] == pytest.approx(max(0.05, (16 << 20) / 400e9 * 1e3))
    assert s["speedup"]["pkc_hand"] == pytest.approx(2.0)
    assert s["speedup"]["pkc"] == pytest.approx(0.2 / 0.125)
    assert s["pkc_vs_symm"] == pytest.approx(0.18 / 0.125)
    assert s["pkc_vs_roofline"] == pytest.approx(s["roofline_ms"] / 0.125)
    text = fs.fused_table(res)
    assert "pk gemm+rs N=4096" in text and "BAD symm" in text and "ERROR RuntimeError" in text
    assert "2.000" in text


def test_collectives_table_and_bandwidths():
    res = {"world": 2, "rows": []}
    for size in (4096, 1 << 20):
        row = {"op": "all_reduce", "size": size, "ms": {"nccl": 0.02, "one_shot": 0.01, "pkc": 2.0},
               "checks": {"one_shot": {"ok": True}}}
        res["rows"].append(coll.add_bandwidths(row, 2))
    assert res["rows"][1]["busbw_GBps"]["nccl"] == pytest.approx(fs.bus_bw("all_reduce", 1 << 20, 2, 0.02))
    assert coll.speedups(res["rows"][0])["one_shot"] == pytest.approx(2.0)
    text = coll.tables(res)
    assert "all_reduce (W=2" in text and "4K" in text and "1M" in text and "2.00" in text


def test_table_formatting():
    t = fs.format_table(["a", "b"], [["x", 1.23456], ["long", None]])
    lines = t.splitlines()
    assert lines[0].startswith("a") and "1.235" in lines[1] and lines[2].rstrip().endswith("-")
    assert len({len(line) for line in lines}) == 1


def test_json_and_results_dir(tmp_path):
    d = fs.results_dir("h200x2", "2026-11-30", root=tmp_path)
    assert d == tmp_path / "h200x2_2026-11-30"
    fs.write_json(d / "fused_sweep.json", _fake_fused_result())
    back = json.loads((d / "fused_sweep.json").read_text())
    assert back["shapes"][0]["ms"]["base"] == 0.2
    assert fs.machine_tag("NVIDIA H200", 2) == "h200x2"
    assert fs.machine_tag("NVIDIA H100 80GB HBM3", 1) == "h100"
    assert fs.machine_tag("", 0) == "cpu"


def test_list_runs_without_a_gpu(capsys):
    assert fs.main(["--list", "--world", "4"]) == 0
    out = capsys.readouterr().out
    assert "llama70b up+gate T=8192 (sp)" in out and "8192x14336x8192" in out


# ---------------------------------------------------------------------- the IR the harness compiles


def _interp(ir: str, args, world, pipeline="default{force=true}"):
    from pkc.interp import interpret
    from pkc.ir import parse_module
    from pkc.passes.registry import run_pipeline

    m = parse_module(ir, "bench.mlir")
    run_pipeline(pipeline, m)
    return interpret(m, args, world)


@pytest.mark.parametrize("family", ["ag", "rs", "ar"])
def test_compiled_ir_means_the_pattern(family):
    W, M, N, K = 2, 8, 16, 8
    shape = fs.FusedShape(family, "t", M, N, K)
    g = torch.Generator().manual_seed(0)
    shp = shape.operand_shapes(W)
    a = [torch.randn(*shp["a"], generator=g) for _ in range(W)]
    b = [torch.randn(K, N, generator=g) for _ in range(W)]     # the IR takes B as [K, N]
    got = _interp(fs.compiled_ir(shape, W, "f32"), [[a[r], b[r]] for r in range(W)], W)
    for r in range(W):
        if family == "ag":
            want = torch.cat(a) @ b[r]
        else:
            total = sum(a[q] @ b[q] for q in range(W))
            want = total.chunk(W)[r] if family == "rs" else total
        torch.testing.assert_close(got[r][0], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op", coll.OPS)
def test_collective_ir_means_the_collective(op):
    W, rows, cols = 2, 8, 4
    g = torch.Generator().manual_seed(1)
    shape = (rows // W, cols) if op == "all_gather" else (rows, cols)
    xs = [torch.randn(*shape, generator=g) for _ in range(W)]
    got = _interp(fs.collective_ir(op, rows, cols, W, "f32"), [[x] for x in xs], W, "default")
    for r in range(W):
        want = {"all_gather": torch.cat(xs), "all_reduce": sum(xs),
                "reduce_scatter": sum(xs).chunk(W)[r] if op == "reduce_scatter" else None}[op]
        torch.testing.assert_close(got[r][0], want, rtol=1e-5, atol=1e-5)


def test_pkc_program_reports_what_the_pipeline_did():
    p = fs.PkcProgram(fs.compiled_ir(fs.FusedShape("rs", "t", 64, 64, 32), 2), "default{force=true}")
    assert p.kernels == 1 and p.fused and not p.gemm_outside
    q = fs.PkcProgram(fs.collective_ir("all_reduce", 8, 256, 2), "default")
    assert q.kernels == 1 and not q.fused and any("all_reduce" in r for r in q.remarks)


# ---------------------------------------------------------------------- the torchrun examples, world 1


def test_torchrun_examples_run_as_one_cpu_process(capsys):
    import torch.distributed as dist

    if dist.is_initialized():
        pytest.skip("a process group is already initialized in this process")
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import torchrun_all
    finally:
        sys.path.pop(0)
    rc = torchrun_all.main(["--calls", "0", "--pipelines", "default", "default{force=true}"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert not dist.is_initialized()
    for name in ("tp_mlp", "sp_block", "moe"):
        assert f"] {name}: max abs error" in out
    assert "reference interpreter" in out or "pkc kernels" in out
    assert "FAILED" not in out


def test_log_case_records_passes_and_crashes(tmp_path):
    from supervise import log_case

    path = str(tmp_path / "cases.jsonl")
    assert log_case(path, 3, lambda: {"ok": True, "err": 0.0}, {"case": "a"})
    assert not log_case(path, 4, lambda: 1 / 0, {"case": "b"})
    recs = [json.loads(line) for line in open(path)]
    assert recs[0]["index"] == 3 and recs[0]["ok"] and "secs" in recs[0]
    assert recs[1] == {"case": "b", "ok": False, "error": "ZeroDivisionError: division by zero",
                       "index": 4}


def test_done_when_tallies_from_json(tmp_path):
    def shape(label, base, gemm, pkc, symm=None, comm_bytes=0.0):
        ms = {"base": base, "gemm": gemm, "pkc": pkc}
        if symm is not None:
            ms["symm"] = symm
        return {"label": label, "M": 1, "N": 1, "K": 1, "ms": ms, "link_bw": 1e9,
                "comm_bytes": comm_bytes, "checks": {}}
    fused = {"world": 4, "shapes": [
        shape("a", 2.0, 1.0, 1.0, symm=1.1, comm_bytes=1e6),   # c/c 1.0: 2.0x, beats symm
        shape("b", 2.0, 1.0, 1.6, symm=1.5, comm_bytes=1e6),   # c/c 1.0: 1.25x < 1.3, loses
        shape("c", 1.0, 1.0, 1.2, comm_bytes=1e5),             # c/c 0.1: 0.83x < 1.0
    ]}
    checks = dw.fused_checks(fused)
    assert checks["pkc >= 1.0x"][:2] == (2, 3) and checks["pkc >= 1.0x"][2][0].startswith("c ")
    assert checks["pkc >= 1.3x (c/c 0.5-2)"][:2] == (1, 2)      # "c" is outside the range
    assert checks["pkc >= symm"][:2] == (1, 2)
    coll_res = {"world": 4, "rows": [
        {"op": "all_reduce", "size": 4096, "ms": {"nccl": 0.015, "pkc": 0.009}},        # 1.67x
        {"op": "all_reduce", "size": 1 << 20, "ms": {"nccl": 0.02, "pkc": 0.02}},        # 1.0x
        {"op": "all_reduce", "size": 1 << 30, "ms": {"nccl": 4.0, "pkc": 4.1}},          # 0.98x
        {"op": "all_gather", "size": 4096, "ms": {"nccl": 0.01, "pkc": 0.02}}]}
    ar = dw.allreduce_checks(coll_res)
    assert ar["all-reduce >= 1.5x at <= 1 MiB"][:2] == (1, 2)
    assert ar["all-reduce >= 0.95x at 1 GiB"][:2] == (1, 1)
    (tmp_path / "fused_sweep.json").write_text(json.dumps(fused))
    (tmp_path / "collectives.json").write_text(json.dumps(coll_res))
    assert dw.main([str(tmp_path)]) == 0
    assert dw.main([str(tmp_path / "nothing")]) == 2


def test_run_cases_keeps_going_past_a_failing_case(tmp_path, capsys):
    """The benchmarks' case loop: a case that raises becomes an error row (with the fields
    its error_row gives), the next case still runs, and the JSON holds every row."""
    def one(c):
        if c[0] == "bad":
            raise RuntimeError("boom")
        return {"case": c[0], "us": 1.5}
    path = tmp_path / "out" / "rows.json"
    rows = sc.run_cases([("bad", "v1"), ("good", "v2")], one, path,
                        lambda c: {"case": c[0], "variant": c[1]})
    assert rows == [{"case": "bad", "variant": "v1", "error": "RuntimeError: boom"},
                    {"case": "good", "us": 1.5}]
    assert json.loads(path.read_text()) == rows
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert printed == rows
