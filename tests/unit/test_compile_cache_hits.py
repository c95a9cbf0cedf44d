"""A second process compiling the same layer with ``pkc.backend`` hits torch's caches
(issue 18), on the CPU: Inductor's FX-graph cache, AOTAutograd's cache and pkc's IR cache
without dynamo's precompile cache (and Inductor's and AOTAutograd's from
``torch.compiler.save_cache_artifacts()`` loaded into empty cache folders); with it (``TORCH_CACHING_PRECOMPILE=1``) the second
process loads the compiled graph without calling pkc at all, and a precompiled graph of
other pkc sources is refused (compiled again). Counters, never wall times.

One cold compile serves the whole sequence (fresh processes, one cache folder):
cold -> (mega-cache into empty folders) -> second (caches) -> precompile records ->
precompile loads -> other sources.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

pytestmark = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                                reason="Inductor needs a C++ compiler on the CPU (scripts/setup)")

# one process: the small TP MLP of inductor_layer.py through torch.compile(backend=pkc.backend())
_CHILD = r"""
import json, os, sys
sys.path.insert(0, sys.argv[1])
import torch
import inductor_layer as layer
import pkc
from torch._dynamo.utils import counters

layer.one_rank_group()
m, x = layer.TPMLP(), layer.example_input()
if os.environ.get("MEGA_LOAD"):
    with open(os.environ["MEGA_LOAD"], "rb") as f:
        torch.compiler.load_cache_artifacts(f.read())
be = pkc.backend(pipeline="default")
cm = torch.compile(m, backend=be, fullgraph=True, dynamic=False)
with torch.no_grad():
    y = cm(x)
    x2 = x * 2.0 - 1.0
    y2 = cm(x2)
    err = max((y - m(x)).abs().max().item(), (y2 - m(x2)).abs().max().item())
if os.environ.get("MEGA_SAVE"):
    with open(os.environ["MEGA_SAVE"], "wb") as f:
        f.write(torch.compiler.save_cache_artifacts()[0])
counts = {k: v for g in ("inductor", "aot_autograd", "dynamo_cache") for k, v in counters[g].items()}
print(json.dumps({"err": err, "counters": counts, "compile_times": be.compile_times,
                  "remarks": [r for p in be.programs for r in p.remarks()]}))
sys.stdout.flush()
os._exit(0)
"""


def _run(cache: Path, *, precompile: bool, version: str = "test", **extra: str) -> dict:
    env = {**os.environ, **extra, "PYTHONPATH": str(ROOT), "PKC_CACHE_DIR": str(cache / "pkc"),
           "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"), "PKC_COMPILE_CACHE_VERSION": version,
           "TORCH_CACHING_PRECOMPILE": "1" if precompile else "0", "OMP_NUM_THREADS": "1"}
    for k in ("PKC_COMPILE_CACHE_DIR", "PKC_WARM_START", "TORCHINDUCTOR_FORCE_DISABLE_CACHES"):
        env.pop(k, None)
    for k in ("MEGA_SAVE", "MEGA_LOAD"):
        if k not in extra:
            env.pop(k, None)
    res = subprocess.run([sys.executable, "-c", _CHILD, str(HERE)], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads([ln for ln in res.stdout.splitlines() if ln.startswith("{")][-1])
    assert out["err"] < 1e-4, out          # every process computes the layer
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    cache = tmp_path_factory.mktemp("compile-caches")
    seq = {}
    mega = cache / "mega.bin"
    seq["cold"] = _run(cache, precompile=False, MEGA_SAVE=str(mega))
    # torch's mega-cache: the cold process's artifacts loaded into empty cache folders
    seq["mega"] = _run(tmp_path_factory.mktemp("empty-caches"), precompile=False, MEGA_LOAD=str(mega))
    seq["second"] = _run(cache, precompile=False)
    seq["pre_record"] = _run(cache, precompile=True)
    seq["pre_load"] = _run(cache, precompile=True)
    seq["pre_other_sources"] = _run(cache, precompile=True, version="other")
    return seq


def test_cold_process_fills_the_caches(runs):
    c = runs["cold"]["counters"]
    assert c.get("fxgraph_cache_miss", 0) >= 1 and c.get("fxgraph_cache_hit", 0) == 0
    (t,) = runs["cold"]["compile_times"]
    assert t["cache_hit"] is False and t["fxgraph_cache_miss"] >= 1


def test_second_process_hits_fx_graph_aot_autograd_and_pkc_caches(runs):
    c = runs["second"]["counters"]
    assert c.get("fxgraph_cache_hit", 0) >= 1 and c.get("fxgraph_cache_miss", 0) == 0, c
    assert c.get("autograd_cache_hit", 0) >= 1 and c.get("autograd_cache_miss", 0) == 0, c
    (t,) = runs["second"]["compile_times"]
    assert t["cache_hit"] is True                                   # pkc's IR from its disk cache
    assert t["fxgraph_cache_hit"] >= 1 and t["autograd_cache_hit"] >= 1


def test_saved_cache_artifacts_fill_empty_caches_in_another_process(runs):
    c = runs["mega"]["counters"]
    assert c.get("fxgraph_cache_hit", 0) >= 1 and c.get("fxgraph_cache_miss", 0) == 0, c
    assert c.get("autograd_cache_hit", 0) >= 1 and c.get("autograd_cache_miss", 0) == 0, c
    (t,) = runs["mega"]["compile_times"]
    assert t["cache_hit"] is False      # pkc's IR cache is not among torch's artifacts


def test_first_call_time_is_recorded_and_said(runs):
    (t,) = runs["second"]["compile_times"]
    parts = t["capture_s"] + t["pkc_s"] + t["inductor_s"] + t["first_run_s"]
    assert t["first_call_s"] >= parts > 0
    line = [r for r in runs["second"]["remarks"] if "first call" in r]
    assert line and "IR from the disk cache" in line[0] and "FX-graph cache hit" in line[0]


def test_precompile_records_pkcs_graph_then_a_second_process_loads_it(runs):
    (t,) = runs["pre_record"]["compile_times"]
    assert t["precompile"] == "recorded"
    assert runs["pre_record"]["counters"].get("dynamo_cache_miss", 0) == 1
    load = runs["pre_load"]
    assert load["counters"].get("dynamo_cache_hit", 0) == 1, load["counters"]
    # neither dynamo's tracing nor pkc's backend ran: nothing compiled, nothing looked up
    assert load["compile_times"] == []
    assert not any(k.startswith(("fxgraph_cache", "autograd_cache")) for k in load["counters"])


def test_precompiled_graph_of_other_pkc_sources_is_compiled_again(runs):
    other = runs["pre_other_sources"]
    assert other["counters"].get("dynamo_cache_error", 0) == 1  # found, refused while read
    (t,) = other["compile_times"]                              # pkc compiled the graph
    assert t["cache_hit"] is False                             # its IR cache key changed too
