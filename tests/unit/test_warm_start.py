"""A second process skips Inductor's per-process start-up checks whose answers an earlier
process stored (pkc/runtime/warm_start.py): torch's source hash and the CPU ISA probes
(including the AVX-512 BF16 / VNNI ones, which Inductor runs whatever its config says)."""

from __future__ import annotations

import platform
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# The first process ("store") probes as Inductor does, with pkc's prime / remember around
# it; a fresh interpreter ("check") must then get torch_key and the list of valid ISAs with
# Inductor's source hash and every ISA probe (compile + load) made to fail.
_PROBE = r"""
import sys
from pkc.runtime import warm_start
from torch._inductor import codecache, config, cpu_vec_isa

if sys.argv[1] == "store":
    warm_start.prime(cpu=True)
    valid = [str(i).replace(" ", "+") for i in cpu_vec_isa.valid_vec_isa_list()]  # real probes, recorded
    key = codecache.torch_key()
    warm_start.remember(cpu=True)
    print("stored", key.hex(), "|".join(valid) or "-", len(warm_start._PROBES))
    raise SystemExit(0)

def fail(*a, **k):
    raise AssertionError("computed although an earlier process stored the answer")

codecache.build_code_hash = fail                      # what torch_key() reads files with
cpu_vec_isa.VecISA.check_build = fail                 # every ISA probe (compile + load)
warm_start.prime(cpu=True)
valid = [str(i).replace(" ", "+") for i in cpu_vec_isa.valid_vec_isa_list()]
assert config.cpp.vec_isa_ok is None, "the config (part of Inductor's cache keys) was left changed"
print("ok", codecache.torch_key().hex(), "|".join(valid) or "-")
"""


def _run(tmp: Path, step: str) -> list[str]:
    env = {**__import__("os").environ, "PKC_CACHE_DIR": str(tmp), "PYTHONPATH": str(REPO)}
    env.pop("PKC_WARM_START", None)
    res = subprocess.run([sys.executable, "-c", _PROBE, step], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout.split()


def test_second_process_takes_stored_answers(tmp_path):
    stored = _run(tmp_path, "store")
    assert stored[0] == "stored"
    if platform.machine() == "x86_64" and shutil.which("g++"):
        assert int(stored[3]) >= 1, "no ISA probe was recorded"
    # the same torch_key and the same valid ISAs, none of them computed again
    assert _run(tmp_path, "check") == ["ok", stored[1], stored[2]]


def test_a_changed_torch_file_changes_the_fingerprint(tmp_path, monkeypatch):
    import os

    import torch

    from pkc.runtime import warm_start

    warm_start._FINGERPRINTS.clear()
    before = warm_start._torch_files_fingerprint()
    real_stat = os.stat
    victim = os.path.join(os.path.dirname(torch.__file__), "_inductor", "codecache.py")

    class Edited:
        def __init__(self, st):
            self.st_size, self.st_mtime_ns = st.st_size + 1, st.st_mtime_ns

    monkeypatch.setattr(warm_start.os, "stat",
                        lambda p, *a, **k: Edited(real_stat(p)) if p == victim else real_stat(p, *a, **k))
    warm_start._FINGERPRINTS.clear()
    assert warm_start._torch_files_fingerprint() != before
    warm_start._FINGERPRINTS.clear()
