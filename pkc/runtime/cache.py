"""Disk cache of kernel images, keyed by hash(PTX, cubin arch, ptxas version).

Where ptxas is available the cached image is the cubin it makes for the device (so a
run skips both our codegen's ptxas check and the driver's JIT); otherwise it is the PTX
itself, which the driver JIT-compiles at load (and caches in its own JIT cache).
Folder: ``$PKC_CACHE_DIR``, else ``~/.cache/pkc/kernels``.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from pkc.codegen.ptxas import assemble, find_ptxas, ptxas_version


def cache_dir() -> Path:
    d = Path(os.environ.get("PKC_CACHE_DIR") or Path.home() / ".cache" / "pkc" / "kernels")
    d.mkdir(parents=True, exist_ok=True)
    return d


def cubin_arch(ptx_target: str, capability: tuple[int, int]) -> str:
    """The SASS architecture to assemble for: an ``a`` target only for its own GPU, a
    portable target for whatever GPU runs it."""
    major, minor = capability
    if ptx_target.endswith("a"):
        want = int(ptx_target[3:-1])
        if want != major * 10 + minor:
            raise RuntimeError(f"PTX for {ptx_target} cannot run on a GPU of compute capability "
                               f"{major}.{minor}; compile for sm_80 (portable) or that GPU's target")
        return ptx_target
    return f"sm_{major}{minor}"


def kernel_image(ptx: str, ptx_target: str, capability: tuple[int, int],
                 use_ptxas: bool | None = None) -> tuple[bytes, str, Path]:
    """(image bytes, "cubin" | "ptx", path in the cache)."""
    arch = cubin_arch(ptx_target, capability)
    ptxas = find_ptxas() if use_ptxas in (None, True) else None
    version = ptxas_version(ptxas) if ptxas else "jit"
    key = hashlib.sha256(f"{arch}\0{version}\0{ptx}".encode()).hexdigest()[:32]
    kind = "cubin" if ptxas else "ptx"
    path = cache_dir() / f"{key}.{kind}"
    if path.exists():
        return path.read_bytes(), kind, path
    if ptxas:
        image, _, _ = assemble(ptx, arch, ptxas=ptxas)
    else:
        image = ptx.encode() + b"\0"
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_bytes(image)
    tmp.replace(path)
    return image, kind, path
