"""Runs a worker command over a numbered list of cases, restarting it past a case that
crashed, trapped or hung, so that one bad kernel (which poisons its CUDA context) costs one
case instead of the whole device run.

The worker takes ``--jsonl PATH --skip N``, appends one JSON line with an ``index`` per case
it finishes, and exits non-zero after writing the line of a case that failed with an
exception. A worker that runs past ``timeout`` seconds is killed; the case after the last
line it wrote is recorded as a hang.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time


def _last_index(path: str) -> int:
    last = -1
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    last = max(last, int(json.loads(line).get("index", -1)))
                except (ValueError, json.JSONDecodeError):
                    pass
    return last


def crashed(jsonl: str, key) -> dict:
    """How many earlier records of each ``key(record)`` carry an ``error`` (a crash, trap or
    hang rather than a wrong answer): workers skip what keeps crashing."""
    counts: dict = {}
    if os.path.exists(jsonl):
        with open(jsonl) as f:
            for line in f:
                try:
                    r = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if r.get("error") and not str(r["error"]).startswith("skipped"):
                    counts[key(r)] = counts.get(key(r), 0) + 1
    return counts


def supervise(cmd: list[str], jsonl: str, n_cases: int, timeout: float,
              deadline: float | None = None, log=None, max_restarts: int = 40) -> list[dict]:
    """Runs ``cmd + [--jsonl, jsonl, --skip, k]`` until every case has a line."""
    skip = 0
    silent = 0
    restarts = 0
    while skip < n_cases:
        restarts += 1
        if restarts > max_restarts:
            _append(jsonl, {"index": skip, "ok": False, "error": "supervisor: too many restarts"})
            break
        if deadline is not None and time.time() > deadline:
            _append(jsonl, {"index": skip, "ok": False, "error": "supervisor deadline passed"})
            break
        before = _last_index(jsonl)
        full = cmd + ["--jsonl", jsonl, "--skip", str(skip)]
        left = timeout if deadline is None else max(5.0, min(timeout, deadline - time.time()))
        proc = subprocess.Popen(full, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=left)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = None
        last = _last_index(jsonl)
        if rc == 0 and last >= n_cases - 1:
            break
        if rc == 0:          # finished without covering everything: nothing more to do
            break
        if rc is None:       # hung: the case after the last written one
            hung = max(last, skip - 1) + 1
            _append(jsonl, {"index": hung, "ok": False,
                            "error": f"timed out after {left:.0f} s (hang?)"})
            skip = hung + 1
        elif last > before or last >= skip:
            skip = last + 1  # the failing case wrote its line
        else:                # died before writing anything: skip the case it was on
            _append(jsonl, {"index": skip, "ok": False, "error": f"worker exited rc={rc}"})
            skip += 1
            silent += 1
            if silent >= 2:  # the worker cannot start at all: stop
                break
            continue
        silent = 0
    out = []
    if os.path.exists(jsonl):
        with open(jsonl) as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
    return out


def _append(path: str, rec: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(rec) + "\n")


def log_case(jsonl: str, index: int, run, on_error: dict) -> bool:
    """The worker side: run one case (``run()`` -> its record), append the record with
    ``index`` and ``secs`` to ``jsonl`` and print PASS / FAIL. If it raises, append
    ``on_error`` with the error and return False: a trap poisons the CUDA context, so the
    worker stops and the supervisor restarts it after this case."""
    t0 = time.time()
    try:
        rec = run()
    except Exception as e:
        rec = dict(on_error, ok=False, error=f"{type(e).__name__}: {e}"[:600], index=index)
        _append(jsonl, rec)
        print(json.dumps(rec), flush=True)
        return False
    rec.update(index=index, secs=round(time.time() - t0, 2))
    _append(jsonl, rec)
    print(("PASS " if rec["ok"] else "FAIL ") + json.dumps(rec), flush=True)
    return True


if __name__ == "__main__":   # python benchmarks/supervise.py N TIMEOUT JSONL -- cmd...
    n, to, jl = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
    cmd = sys.argv[sys.argv.index("--") + 1:]
    recs = supervise(cmd, jl, n, to, deadline=time.time() + to)
    bad = [r for r in recs if not r.get("ok", False)]
    print(f"supervise: {len(recs)} records, {len(bad)} not ok")
    for r in bad[:40]:
        print("  NOT OK:", json.dumps(r)[:300])
