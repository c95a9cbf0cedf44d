"""Inductor's per-process start-up checks, remembered on disk so a second process skips them.

A second process that compiles a layer pkc compiled before finds pkc's IR in its cache
(:mod:`pkc.runtime.compile_cache`) and Inductor's code in Inductor's caches, yet still
spent seconds before the first call (measured on CPU, docs/PERF_NOTES.md, "second-process
compile") on three checks whose answers do not change between processes:

- ``torch_key``: a hash of every Python source file of torch (read and hashed, about a
  second), part of the AOTAutograd and FX-graph cache keys. It is stored here under a
  fingerprint of torch's files' names, sizes and modification times (a stat of each,
  about a tenth of the reading), and handed back to Inductor (its ``set``) in the next
  process. An edited torch file changes its size or time, hence the fingerprint.
- the CPU vector-ISA probes: Inductor compiles a test program per ISA and loads it in a
  second Python, once per process, before it loads any CPU kernel; on CPUs with AVX-512
  BF16 or VNNI it compiles one more per extension (whatever ``config.cpp.vec_isa_ok``
  says). Each probe's answer (``VecISA.check_build`` of a program with an ISA's flags) is
  recorded in the first process and stored under a fingerprint of torch, the C++
  compiler (path, size, time) and the CPU's flags; the next process answers the probes
  from that record while it fills Inductor's list of valid ISAs (a probe it has no answer
  for still compiles).
- not done: before it looks for a cached CPU kernel, Inductor runs the C++ preprocessor
  over its prelude header to key a precompiled header (about a second of g++ on this
  machine). Turning precompiled headers off changes Inductor's config, which is part of
  its cache keys: a second process would then miss the first one's code.

Every step is best effort: if torch changes these internals, or a file cannot be read or
written, Inductor does its own checks as before. ``PKC_WARM_START=0`` turns all of it off.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import sys
from pathlib import Path

import torch

__all__ = ["prime", "remember"]

_FINGERPRINTS: dict[str, str] = {}


def enabled() -> bool:
    return os.environ.get("PKC_WARM_START", "1") != "0"


def _folder() -> Path:
    from pkc.runtime.compile_cache import cache_root

    d = cache_root().parent / "inductor_start"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _torch_files_fingerprint() -> str:
    """Names, sizes and modification times of torch's Python files (what torch_key reads)."""
    if "torch" not in _FINGERPRINTS:
        root = os.path.dirname(torch.__file__)
        h = hashlib.sha256(f"{torch.__version__}|{root}".encode())
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in sorted(filenames):
                if name.endswith(".py"):
                    st = os.stat(os.path.join(dirpath, name))
                    h.update(f"{dirpath}/{name}:{st.st_size}:{st.st_mtime_ns}\n".encode())
        _FINGERPRINTS["torch"] = h.hexdigest()[:32]
    return _FINGERPRINTS["torch"]


def _isa_fingerprint() -> str | None:
    """torch, the C++ compiler Inductor would use, and the CPU's flags; None off x86 Linux."""
    if "isa" in _FINGERPRINTS:
        return _FINGERPRINTS["isa"]
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return None
    from torch._inductor import config
    from torch._inductor.cpu_vec_isa import x86_isa_checker

    cxx = config.cpp.cxx if isinstance(config.cpp.cxx, (list, tuple)) else (config.cpp.cxx,)
    found = [shutil.which(c) for c in cxx if c]
    compiler = next((c for c in found if c), None)
    if compiler is None:
        return None
    st = os.stat(compiler)
    text = (f"{torch.__version__}|{sys.executable}|{os.path.realpath(compiler)}:{st.st_size}:"
            f"{st.st_mtime_ns}|{os.environ.get('CXX', '')}|{sorted(x86_isa_checker())}")
    _FINGERPRINTS["isa"] = hashlib.sha256(text.encode()).hexdigest()[:32]
    return _FINGERPRINTS["isa"]


def _write(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_bytes(data)
    tmp.replace(path)  # atomic: a concurrent reader sees no file or the whole one


def prime(*, cpu: bool) -> None:
    """Before ``compile_fx``: hand Inductor what earlier processes found. ``cpu``: the
    program has CPU tensors (Inductor generates C++ for them).

    Nothing here changes Inductor's config (its cache keys include the config, so a patch
    would make a second process miss the first one's compiled code): the answers go into
    the in-process caches Inductor fills on first use."""
    if not enabled():
        return
    try:
        from torch._inductor import codecache, config, cpu_vec_isa

        key_fn = codecache.torch_key
        path = _folder() / f"torch_key-{_torch_files_fingerprint()}"
        if hasattr(key_fn, "set") and path.is_file():
            data = path.read_bytes()
            if len(data) == 32:  # a sha256 digest, as torch_key returns
                try:
                    key_fn.set(data)
                except RuntimeError:
                    pass  # computed already in this process: the same value
        if cpu and config.cpp.vec_isa_ok is None and hasattr(cpu_vec_isa.valid_vec_isa_list, "cache_info"):
            _answer_isa_probes(cpu_vec_isa)
    except Exception:  # noqa: BLE001 - best effort: Inductor checks for itself
        return


# This process's ISA probe answers, by probe (recorded while Inductor probes; stored by
# remember() for the next process).
_PROBES: dict[str, bool] = {}


def _probe_key(isa, code: str) -> str:
    text = f"{type(isa).__name__}|{getattr(isa, '_arch_flags', '')}|{code}"
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _probes_file() -> Path | None:
    isa = _isa_fingerprint()
    return None if isa is None else _folder() / f"isa_probes-{isa}.json"


def _answer_isa_probes(cpu_vec_isa) -> None:
    """Stored answers: fill Inductor's valid-ISA list with the probes answered from them.
    None stored: record this process's probes (the wrapper stays; it only writes a dict)."""
    import json

    real = cpu_vec_isa.VecISA.check_build
    if getattr(real, "_pkc_recording", False):
        return  # primed before in this process
    path = _probes_file()
    if path is None:
        return
    stored = json.loads(path.read_text()) if path.is_file() else None
    if stored and cpu_vec_isa.valid_vec_isa_list.cache_info().currsize == 0:
        def answered(self, code):
            key = _probe_key(self, code)
            return stored[key] if key in stored else real(self, code)

        cpu_vec_isa.VecISA.check_build = answered
        try:
            cpu_vec_isa.valid_vec_isa_list()  # cached for the process, as Inductor's own call
        finally:
            cpu_vec_isa.VecISA.check_build = real
        return

    def recording(self, code):
        ok = real(self, code)
        _PROBES[_probe_key(self, code)] = bool(ok)
        return ok

    recording._pkc_recording = True
    cpu_vec_isa.VecISA.check_build = recording


def remember(*, cpu: bool) -> None:
    """After ``compile_fx``: store what this process's Inductor computed for the next one."""
    if not enabled():
        return
    try:
        from torch._inductor import codecache

        path = _folder() / f"torch_key-{_torch_files_fingerprint()}"
        if not path.is_file():
            _write(path, codecache.torch_key())  # computed by the compile that just ran
        from torch._inductor import config

        path = _probes_file() if cpu and config.cpp.vec_isa_ok is None and _PROBES else None
        if path is not None and not path.is_file():
            import json

            _write(path, json.dumps(_PROBES, sort_keys=True).encode())
    except Exception:  # noqa: BLE001 - best effort: the next process checks for itself
        pass
