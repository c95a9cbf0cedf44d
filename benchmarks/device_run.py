"""The issue-7 device run (``python benchmarks/fused_sweep.py --device-run``): the torchrun
examples and the robustness tests (concurrently: correctness only), then
benchmarks/collectives.py and benchmarks/fused_sweep.py under torchrun on every GPU, each
step in its own process with a time limit, logs under ``out`` (at most 8 files), summary
tables printed last (with benchmarks/done_when.py's tallies)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def device_run(out: str, budget: dict) -> int:
    """Every step in its own process with a time limit; at most 8 files under ``out``."""
    import subprocess

    os.makedirs(out, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    py = sys.executable
    try:
        import torch

        ngpu = torch.cuda.device_count()
    except Exception:
        ngpu = 0
    t_all = time.time()
    with open(os.path.join(out, "env.txt"), "w") as fh:
        for cmd in (["nvidia-smi", "--query-gpu=index,name,clocks.sm,clocks.max.sm,power.draw,power.limit,"
                     "temperature.gpu", "--format=csv"], ["nvidia-smi", "topo", "-m"],
                    ["nvidia-smi", "nvlink", "-s"],
                    [py, "-c", "import torch, cuda.bindings; print('torch', torch.__version__, "
                     "'cuda-bindings', cuda.bindings.__version__, 'nccl', torch.cuda.nccl.version())"]):
            try:
                fh.write(subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout[-6000:])
            except Exception as e:
                fh.write(f"{cmd[0]}: {e}\n")
        fh.write(f"GPUs: {ngpu}\n")

    def start(cmd, log, extra_env=None):
        fh = open(os.path.join(out, log), "a")
        fh.write(f"$ {' '.join(cmd)}\n")
        fh.flush()
        p = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=dict(env, **(extra_env or {})),
                             cwd=str(ROOT), start_new_session=True)
        return p, fh, time.time()

    def finish(p, fh, t0, limit, name):
        try:
            rc = p.wait(timeout=max(1, limit - (time.time() - t0)))
        except subprocess.TimeoutExpired:
            import signal

            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            rc = "timeout"
        fh.write(f"\n[{name}: rc={rc}, {time.time() - t0:.0f} s]\n")
        fh.close()
        print(f"[{name}: rc={rc}, {time.time() - t0:.0f} s]", flush=True)
        return rc

    n = max(1, ngpu)
    trun = [py, "-m", "torch.distributed.run", f"--nproc_per_node={n}", "--master_port"]
    # phase A (correctness only, concurrent): examples | robustness (virtual world, last GPU)
    # | rank-failure tests (torchrun W=2 inside the test)
    procs, rcs = [], {}
    if budget["phase_a"]:  # a budget of 0 skips a step
        procs.append(("examples", budget["phase_a"], *start(
            trun + ["29511", "examples/torchrun_all.py", "--calls", "3"], "examples.log")))
        last = str(max(0, ngpu - 1))
        procs.append(("robustness", budget["phase_a"], *start(
            [py, "-m", "pytest", "-q", "-s", "-rfEsx", "-p", "no:cacheprovider", "tests/gpu/test_robustness.py",
             "-k", "not torchrun"], "robustness.log", {"CUDA_VISIBLE_DEVICES": last})))
        if ngpu >= 2:
            procs.append(("rank-failure", budget["phase_a"], *start(
                [py, "-m", "pytest", "-q", "-s", "-rfEsx", "-p", "no:cacheprovider",
                 "tests/gpu/test_robustness.py", "-k", "torchrun"], "failure.log")))
        rcs = {name: finish(p, fh, t0, lim, name) for name, lim, p, fh, t0 in procs}
        fail_log = os.path.join(out, "failure.log")
        if os.path.exists(fail_log):  # at most 8 files come back: fold it into robustness.log
            with open(os.path.join(out, "robustness.log"), "a") as dst:
                dst.write("\n==== rank-failure tests (torchrun W=2)\n" + open(fail_log, errors="replace").read())
            os.remove(fail_log)
    # phase B (timing, one at a time)
    for name, port, script, margin in (("collectives", "29512", "benchmarks/collectives.py", 12),
                                       ("fused", "29513", "benchmarks/fused_sweep.py", 30)):
        if budget[name]:
            p = start(trun + [port, script, "--out", out, "--budget-s", str(budget[name] - margin)], "bench.log")
            rcs[name] = finish(*p, budget[name], name)
    # summary
    print(f"\n==== summary ({time.time() - t_all:.0f} s; rcs {rcs})")
    rpath = os.path.join(out, "robustness.log")
    if os.path.exists(rpath):
        keys = ("passed", "failed", "skipped", "SKIPPED", "FAILED", "ERROR", "back-to-back", "CUDA graph",
                "absent", "torchrun W=2", "captured", "RANK0-", "HANG", "rc=")
        lines = [ln for ln in open(rpath, errors="replace").read().splitlines() if any(k in ln for k in keys)]
        print("\n---- robustness.log (key lines)")
        print("\n".join(ln[:300] for ln in lines[-24:]))
    for log, marker, n_lines in (("examples.log", "torchrun examples, W=", 12),
                                 ("bench.log", "collectives W=", 60), ("bench.log", "fused sweep W=", 40)):
        path = os.path.join(out, log)
        if not os.path.exists(path):
            continue
        text = open(path, errors="replace").read()
        if marker and marker in text:
            seg = text[text.rindex(marker):].splitlines()[:n_lines]
        else:
            seg = text.splitlines()[-n_lines:]
        print(f"\n---- {log}" + (f" ({marker})" if marker else " (tail)"))
        print("\n".join(seg))
    found = [f for f in ("fused_sweep.json", "collectives.json") if os.path.exists(os.path.join(out, f))]
    if found:
        import done_when

        print("\n---- issue 7's Done-when (benchmarks/done_when.py)")
        print("\n".join(done_when.report(Path(out) / f) for f in found))
    return 0
