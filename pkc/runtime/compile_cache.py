"""Disk cache of compiled graphs: the pk IR after the pass pipeline, keyed by graph + target.

The key hashes the captured aten graph (its code, and every placeholder's shape, dtype
and strides), the world size and process groups, the target, the pipeline string, the
torch version and pkc's own sources (a changed pass must not be served an old result).
An entry holds the IR text, the remarks as the passes wrote them, the ops left to torch,
and the importer's constants (``torch.save``). A second process compiling the same layer
then parses the IR instead of importing and running the passes; the GEMM and collective
kernels have their own image cache (:mod:`pkc.runtime.cache`) and the torch program
Inductor's (its FX graph cache).

Folder: ``$PKC_COMPILE_CACHE_DIR``, else ``$PKC_CACHE_DIR/graphs``, else
``~/.cache/pkc/graphs``. ``PKC_COMPILE_CACHE=0`` turns it off; ``PKC_COMPILE_CACHE_VERSION``
pins the sources part of the key.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from pkc.sources import sources_digest

__all__ = ["CacheEntry", "cache_enabled", "graph_key", "load", "store", "cache_root", "sources_digest"]

def cache_enabled() -> bool:
    return os.environ.get("PKC_COMPILE_CACHE", "1") != "0"


def cache_root() -> Path:
    d = os.environ.get("PKC_COMPILE_CACHE_DIR")
    if d:
        root = Path(d)
    elif os.environ.get("PKC_CACHE_DIR"):
        root = Path(os.environ["PKC_CACHE_DIR"]) / "graphs"
    else:
        root = Path.home() / ".cache" / "pkc" / "graphs"
    root.mkdir(parents=True, exist_ok=True)
    return root


def graph_key(gm: torch.fx.GraphModule, *, world: int, target: str, pipeline: str | None,
              groups: dict | None = None, names: list[str] | None = None) -> str:
    """The key of a captured graph compiled for ``world`` ranks, ``target``, ``pipeline``."""
    h = hashlib.sha256()
    h.update(gm.code.encode())
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        v = node.meta.get("val")
        if isinstance(v, torch.Tensor):
            h.update(f"{node.name}:{tuple(v.shape)}:{v.dtype}:{tuple(v.stride())}".encode())
        else:
            h.update(f"{node.name}:{type(v).__name__}".encode())
    for name, attr in sorted(gm.named_buffers()) + sorted(gm.named_parameters()):
        h.update(name.encode())
        h.update(attr.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    meta = {"world": world, "target": target, "pipeline": pipeline, "torch": torch.__version__,
            "groups": {k: list(v[:1]) for k, v in sorted((groups or {}).items())},
            "names": names or [], "pkc": sources_digest()}
    h.update(json.dumps(meta, sort_keys=True, default=str).encode())
    return h.hexdigest()[:40]


@dataclass
class CacheEntry:
    ir: str
    remarks: list[str]
    not_compiled: dict[str, int]
    extra_args: list[tuple[str, torch.Tensor]]


def load(key: str) -> CacheEntry | None:
    path = cache_root() / f"{key}.pt"
    if not path.exists():
        return None
    try:
        data = torch.load(path, weights_only=True)
        return CacheEntry(data["ir"], list(data["remarks"]), dict(data["not_compiled"]),
                          [(n, t) for n, t in data["extra_args"]])
    except Exception:  # noqa: BLE001 - a damaged entry is a miss, rewritten below
        return None


def store(key: str, entry: CacheEntry) -> None:
    buf = io.BytesIO()
    torch.save({"ir": entry.ir, "remarks": entry.remarks, "not_compiled": entry.not_compiled,
                "extra_args": [(n, t.detach().cpu()) for n, t in entry.extra_args]}, buf)
    path = cache_root() / f"{key}.pt"
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_bytes(buf.getvalue())
    tmp.replace(path)       # atomic: a concurrent reader sees the old entry or the new one
