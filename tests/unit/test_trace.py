"""pkc-opt --trace writes the predicted schedule of fused kernels in Chrome's trace-event
format (what Perfetto and chrome://tracing load)."""

import json

from pkc.tools.pkc_opt import main as pkc_opt
from tests.unit.test_overlap import rs_ir


def _trace(tmp_path, text: str, pipeline: str) -> dict:
    src, out = tmp_path / "in.mlir", tmp_path / "trace.json"
    src.write_text(text)
    assert pkc_opt([str(src), "-p", pipeline, "--trace", str(out), "-o", str(tmp_path / "o")]) == 0
    return json.loads(out.read_text())


def test_trace_of_a_fused_pk_shape_is_well_formed(tmp_path):
    # PK's GEMM+RS at N = 8192, W = 8: the cost model fuses it (intra-SM on H200).
    trace = _trace(tmp_path, rs_ir(8, 8192, 8192, 1024, "bf16"), "default")
    events = trace["traceEvents"]
    assert trace["displayTimeUnit"] in ("ns", "ms")
    spans = [e for e in events if e["ph"] == "X"]
    meta = [e for e in events if e["ph"] == "M"]
    assert spans and meta and {e["ph"] for e in events} <= {"X", "M"}
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    procs = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    assert list(procs.values()) == ["pk.kernel @matmul_reduce_scatter"]
    assert any(("comm SMs" in n or "producer warps" in n) for n in names.values())
    assert any(("compute" in n or "consumer warpgroups" in n) for n in names.values())
    for e in spans:
        assert {"name", "cat", "ts", "dur", "pid", "tid"} <= set(e)
        assert e["ts"] >= 0 and e["dur"] >= 0 and (e["pid"], e["tid"]) in names
    kinds = {e["cat"] for e in spans}
    assert {"mma", "put"} <= kinds, kinds
    end = max(e["ts"] + e["dur"] for e in spans)
    assert 100 < end < 10_000  # microseconds: a GEMM of 8192x8192x1024 on 8 ranks
    # spans of one worker do not overlap: a worker does one thing at a time
    for key in names:
        own = sorted((e["ts"], e["ts"] + e["dur"]) for e in spans if (e["pid"], e["tid"]) == key)
        assert all(a_end <= b_start + 1e-6 for (_, a_end), (b_start, _) in zip(own, own[1:]))


def test_unfused_program_has_an_empty_trace(tmp_path):
    trace = _trace(tmp_path, rs_ir(8, 64, 64, 64), "default")
    assert trace["traceEvents"] == []
