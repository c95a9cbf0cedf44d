"""A second process skips Inductor's per-process start-up checks whose answers an earlier
process stored (pkc/runtime/warm_start.py): torch's source hash and the CPU ISA probe."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Stores answers (as the first process would), then, in a fresh interpreter, checks that
# Inductor gets them without computing: its source hash and its probe are made to fail.
_PROBE = r"""
import os, sys
from pathlib import Path
from pkc.runtime import warm_start
from torch._inductor import codecache, cpu_vec_isa

folder = Path(os.environ["PKC_CACHE_DIR"]) / "inductor_start"
if sys.argv[1] == "store":
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"torch_key-{warm_start._torch_files_fingerprint()}").write_bytes(b"k" * 32)
    isa = warm_start._isa_fingerprint()
    if isa is not None:
        (folder / f"isa_ok-{isa}").write_bytes(b"stored")
    print("stored", isa is not None)
    raise SystemExit(0)

def fail(*a, **k):
    raise AssertionError("computed although an earlier process stored the answer")

codecache.build_code_hash = fail                      # what torch_key() reads files with
cpu_vec_isa.VecISA.check_build = fail                 # the ISA probe (compile + load)
warm_start.prime(cpu=True)
assert codecache.torch_key() == b"k" * 32
flags = cpu_vec_isa.x86_isa_checker() if warm_start._isa_fingerprint() else []
expected = [str(i) for i in cpu_vec_isa.supported_vec_isa_list if all(f in flags for f in str(i).split())]
assert [str(i) for i in cpu_vec_isa.valid_vec_isa_list()] == expected
from torch._inductor import config
assert config.cpp.vec_isa_ok is None, "the config (part of Inductor's cache keys) was left changed"
print("ok", len(expected))
"""


def _run(tmp: Path, step: str) -> str:
    env = {**__import__("os").environ, "PKC_CACHE_DIR": str(tmp), "PYTHONPATH": str(REPO)}
    env.pop("PKC_WARM_START", None)
    res = subprocess.run([sys.executable, "-c", _PROBE, step], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout.split()


def test_second_process_takes_stored_answers(tmp_path):
    assert _run(tmp_path, "store")[0] == "stored"
    assert _run(tmp_path, "check")[0] == "ok"


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
