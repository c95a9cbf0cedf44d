"""What launching a compiled kernel needs besides pointers: CTA counts per worker fitted
to the SMs at hand, the kernel's loaded image (cached per process and device), and the
parameter list in ABI order."""

from __future__ import annotations

import os

from pkc.codegen.abi import KernelMeta
from pkc.codegen.emit import CompiledKernel
from pkc.runtime.cache import kernel_image
from pkc.runtime.loader import LoadedKernel

_LOADED: dict[tuple[str, int], LoadedKernel] = {}


def fit_ctas(meta: KernelMeta, sms: int) -> list[int]:
    """CTAs per worker: the workers' ``sms``, scaled down proportionally (each >= 1) when
    they ask for more than ``sms`` in total, so that every CTA is resident at once."""
    want = [max(1, w.sms) for w in meta.workers]
    if len(want) > sms:
        raise RuntimeError(f"kernel @{meta.name} has {len(want)} workers but only {sms} SMs")
    if sum(want) <= sms:
        return want
    got = [max(1, w * sms // sum(want)) for w in want]
    while sum(got) > sms:
        i = max(range(len(got)), key=lambda j: got[j])
        got[i] -= 1
    return got


def load(ck: CompiledKernel, ordinal: int, capability: tuple[int, int]) -> LoadedKernel:
    from pkc.runtime.driver import device

    key = (ck.ptx, ordinal)
    if key not in _LOADED:
        use_ptxas = None if os.environ.get("PKC_JIT", "0") != "1" else False
        image, _, _ = kernel_image(ck.ptx, ck.target, capability, use_ptxas)
        _LOADED[key] = LoadedKernel(image, ck.entry, ck.meta.smem_bytes, device(ordinal))
    return _LOADED[key]


def params(meta: KernelMeta, buffers: list[int], signals: list[int], rank: int, world: int,
           error: int, workspace: int, timeout_s: float, ctas: list[int]) -> list[tuple[str, int]]:
    values = [*buffers, *signals, rank, world, error, workspace, int(timeout_s * 1e9), *ctas]
    types = [t for _, t in meta.params()]
    assert len(values) == len(types), (len(values), len(types))
    return list(zip(types, values))
