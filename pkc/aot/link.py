"""The link step of an AOTInductor package: recorded, re-run with other flags, remembered per machine.

On the H200 machine (torch 2.11.0+cu130; docs/PERF_NOTES.md 2026-12-02 (k) and (n)) every
AOTInductor package, torch's own toy included, crashed torch's loader. The cause: torch
builds the wrapper there with ``/opt/gcc/bin/g++``, whose link puts a copy of libstdc++ into
the wrapper (no ``libstdc++.so.6`` among its needed libraries) with every symbol exported.
At load, some of the wrapper's references bind to its own copy (``std::locale::locale()``,
the classic locale and its facet indices, ``locale::id::_S_refcount``) and others to the
process's ``libstdc++.so.6`` (``std::collate<char>::id``), so ``std::regex`` in
``parse_device_str`` (the model's constructor) takes the facet at an index that names
another one (``codecvt<char16_t>``) and calls a wrong virtual: SIGSEGV. Linked with
``private-libstdc++`` (the copy kept, its symbols hidden and bound inside the wrapper) the
same objects load and run; so does a process started with ``LD_PRELOAD`` of the system
libstdc++ (its copy then wins every binding).

pkc links the wrapper as torch does unless its dynamic symbols show such an exported copy of
libstdc++ (:func:`exports_libstdcxx`: then it relinks with the fix at once), runs the
package once in a fresh process (:func:`pkc.aot.build.check_package`), and if that process
dies of a signal re-runs the link with each of :data:`FIXES` in turn (seconds: the objects
are kept) until one passes the same check. What worked, or that nothing did, is written per
torch build to ``<cache root>/loader.json``; later builds on that machine link with the fix
at once, or, where nothing loads, skip the package build (45-65 s of CPU per layer on the
H200) and say so.

:func:`recording` patches torch's compile-command runner
(``torch._inductor.cpp_builder._run_compile_cmd``) for the build's duration: the link
command of the wrapper (``-o <name>.so`` from object files) gets ``extra`` flags, its
objects are copied to ``<folder>/link/`` and the command is kept in ``link.json`` there
(objects rewritten to the copies), so :func:`relink` can re-run it; the folder is removed
once the package is published. This module runs only in a building process (it imports
torch's Inductor), never on the load path.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import subprocess
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import torch

LINK_DIR = "link"
LINK_JSON = "link.json"
MACHINE = "loader.json"
RECIPES = 1     # of FIXES and the record's meaning; bump on change (old records are ignored)

# what each fix appends to the wrapper's link command, in the order they are tried.
# "private-libstdc++": a copy of libstdc++ (locale, facets, their ids) inside the wrapper,
# its symbols hidden and bound inside: nothing of it binds to, or is bound from, another
# library of the process. (-Wl,-Bsymbolic alone did not load on the H200: the wrapper's
# copy lacks some ids, e.g. collate<char>'s, which still bound to libstdc++.so.6.)
FIXES: dict[str, list[str]] = {
    "private-libstdc++": ["-static-libstdc++", "-static-libgcc", "-Wl,--exclude-libs,ALL", "-Wl,-Bsymbolic"],
}
# the fix applied without a failed check first, where the link shows the cause
FIX_EXPORTED_LIBSTDCXX = "private-libstdc++"
# libstdc++'s locale, defined by a library that is not libstdc++: an exported copy
_LIBSTDCXX_MARKS = ("_ZNSt6localeC1Ev", "_ZNSt6locale7classicEv")


class LoaderCrash(RuntimeError):
    """The fresh-process check of a package died of a signal (not an error it reported)."""


def machine_key(device: str) -> str:
    """What a record in loader.json is valid for: this torch build on this device type."""
    return f"torch {torch.__version__} cuda {torch.version.cuda} {device} recipes {RECIPES}"


def read_machine(root: Path, device: str) -> dict:
    """This torch build's record: {} (none yet), {"fix": name or None} (a package linked that
    way loaded) or {"broken": why} (no link recipe loaded)."""
    try:
        return dict(json.loads((root / MACHINE).read_text()).get(machine_key(device), {}))
    except (OSError, ValueError, AttributeError):
        return {}


def write_machine(root: Path, device: str, record: dict) -> None:
    root.mkdir(parents=True, exist_ok=True)
    path = root / MACHINE
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    data[machine_key(device)] = {**record, "when": time.strftime("%Y-%m-%d %H:%M:%S")}
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(path)


def _is_link(parts: list[str]) -> bool:
    """A link of objects into a shared library: the wrapper's (Inductor's other C++ builds
    compile a source straight to a library and are left as they are)."""
    return ("-o" in parts[:-1] and parts[parts.index("-o") + 1].endswith(".so")
            and any(p.endswith(".o") for p in parts))


@contextlib.contextmanager
def recording(folder: Path, extra: list[str]) -> Iterator[None]:
    """Within: torch's C++ builds append ``extra`` to the wrapper's link command and keep
    that command and its objects under ``folder/link`` (see the module docstring)."""
    import torch._inductor.cpp_builder as cb

    orig = getattr(cb, "_run_compile_cmd", None)
    if orig is None:            # another torch: nothing recorded, the build as torch does it
        yield
        return
    keep = folder / LINK_DIR

    def run(cmd_line: str, cwd: str) -> None:
        parts = shlex.split(cmd_line)
        if _is_link(parts):
            keep.mkdir(parents=True, exist_ok=True)
            for i, p in enumerate(parts):
                if p.endswith(".o") and os.path.isfile(os.path.join(cwd, p)):
                    parts[i] = str(shutil.copy(os.path.join(cwd, p), keep / os.path.basename(p)))
            parts += extra
            cmd_line = shlex.join(parts)
            (keep / LINK_JSON).write_text(json.dumps({"cmd": cmd_line, "extra": extra}))
        orig(cmd_line, cwd)

    cb._run_compile_cmd = run
    try:
        yield
    finally:
        cb._run_compile_cmd = orig


def recorded_link(folder: Path) -> dict | None:
    try:
        return json.loads((folder / LINK_DIR / LINK_JSON).read_text())
    except (OSError, ValueError):
        return None


def linked_library(folder: Path) -> Path | None:
    """The wrapper library torch's (recorded) link wrote."""
    rec = recorded_link(folder)
    if rec is None:
        return None
    parts = shlex.split(rec["cmd"])
    return Path(parts[parts.index("-o") + 1])


def exports_libstdcxx(so: Path) -> bool:
    """Whether ``so`` exports libstdc++'s own locale code (a copy linked in, not hidden):
    the binding mix that crashed the H200's loader (module docstring). False where
    ``nm`` is missing."""
    nm = shutil.which("nm")
    if nm is None or not so.is_file():
        return False
    res = subprocess.run([nm, "-D", "--defined-only", str(so)], capture_output=True, text=True, timeout=120)
    names = {ln.split()[-1].split("@")[0] for ln in res.stdout.splitlines() if ln.strip()}
    return any(m in names for m in _LIBSTDCXX_MARKS)


def relink(folder: Path, fix: str) -> Path:
    """The wrapper linked again with ``FIXES[fix]`` (in ``folder/link/<fix>/``); its path."""
    rec = recorded_link(folder)
    if rec is None:
        raise RuntimeError("no recorded link command to re-run")
    parts = shlex.split(rec["cmd"])
    extra = rec.get("extra", [])
    if extra and parts[-len(extra):] == extra:
        parts = parts[:-len(extra)]
    i = parts.index("-o")
    out = folder / LINK_DIR / fix / os.path.basename(parts[i + 1])
    out.parent.mkdir(parents=True, exist_ok=True)
    parts[i + 1] = str(out)
    res = subprocess.run(parts + FIXES[fix], capture_output=True, text=True, timeout=600,
                         cwd=str(folder / LINK_DIR), stdin=subprocess.DEVNULL)
    if res.returncode != 0:
        raise RuntimeError(f"relink with {fix} failed: {(res.stderr or res.stdout).strip()[-500:]}")
    return out


def repackage(pt2: Path, so: Path) -> None:
    """``pt2`` with its wrapper library (the entry named like ``so``) replaced by ``so``."""
    tmp = pt2.with_name(f"{pt2.stem}.tmp{os.getpid()}.pt2")
    hit = False
    with zipfile.ZipFile(pt2) as zin, zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as zout:
        for item in zin.infolist():
            data = zin.read(item.filename)
            if os.path.basename(item.filename) == so.name:
                data, hit = so.read_bytes(), True
            zout.writestr(item, data)
    if not hit:
        tmp.unlink()
        raise RuntimeError(f"{pt2} holds no {so.name}")
    tmp.replace(pt2)


def drop(folder: Path) -> None:
    """The kept objects are no longer needed (the package is published or failed)."""
    shutil.rmtree(folder / LINK_DIR, ignore_errors=True)
