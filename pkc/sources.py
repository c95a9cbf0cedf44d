"""The digest of pkc's own Python sources: what a cached compile result is valid for.

A changed pass, importer or translation must not be served a result compiled by the old
one, so every on-disk cache of compiled code keys or checks its entries with this digest
(:mod:`pkc.runtime.compile_cache`, :mod:`pkc.runtime.precompile`, :mod:`pkc.aot`).

Kept apart from those modules because the fast load path of :mod:`pkc.aot` may import
nothing but torch and the standard library (``pkc.runtime`` imports xDSL).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

__all__ = ["sources_digest"]

_DIGEST: list[str] = []


def sources_digest() -> str:
    """pkc's Python sources, hashed once per process (~10 ms); ``$PKC_COMPILE_CACHE_VERSION``
    replaces the hash by a fixed string (an install whose sources never change; tests in a
    tree that others edit meanwhile)."""
    pinned = os.environ.get("PKC_COMPILE_CACHE_VERSION")
    if pinned:
        return f"pinned:{pinned}"
    if not _DIGEST:
        h = hashlib.sha256()
        base = Path(__file__).resolve().parent   # the pkc package
        for p in sorted(base.rglob("*.py")):
            h.update(str(p.relative_to(base)).encode())
            h.update(p.read_bytes())
        _DIGEST.append(h.hexdigest())
    return _DIGEST[0]
