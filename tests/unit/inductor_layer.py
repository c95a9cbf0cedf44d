"""A small Llama-style tensor-parallel MLP layer for the Inductor-backend tests (its own
module, so that a second process builds exactly the same graph for the cache test).

    python tests/unit/inductor_layer.py CACHE_DIR    # pkc.compile once with that cache
"""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

D, F_LOCAL, T = 32, 64, 16


class TPMLP(nn.Module):
    """RMSNorm -> gate, up -> SiLU(gate) * up -> down -> all_reduce -> residual add."""

    def __init__(self, d: int = D, f: int = F_LOCAL, seed: int = 0) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(d, eps=1e-5)
        self.gate = nn.Linear(d, f, bias=False)
        self.up = nn.Linear(d, f, bias=False)
        self.down = nn.Linear(f, d, bias=False)
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, p in self.named_parameters():
                base = 1.0 if name.startswith("norm") else 0.0
                p.copy_(base + torch.randn(p.shape, generator=gen) * p.shape[-1] ** -0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        y = self.down(F.silu(self.gate(h)) * self.up(h))
        dist.all_reduce(y)
        return x + y


def one_rank_group() -> None:
    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)


def example_input(seed: int = 1) -> torch.Tensor:
    return torch.randn(T, D, generator=torch.Generator().manual_seed(seed))


def compile_cached() -> dict:
    """pkc.compile of the layer with the disk cache on: was the IR read from it, and how
    long the compile took."""
    import time

    import pkc

    one_rank_group()
    t0 = time.perf_counter()
    program = pkc.compile(TPMLP(), (example_input(),), world_size=1, pipeline="default", cache=True)
    return {"cache_hit": program.cache_hit, "compile_s": time.perf_counter() - t0,
            "kernels": sum(op.name == "pk.kernel" for op in program.module.walk())}


if __name__ == "__main__":
    import os

    os.environ["PKC_COMPILE_CACHE_DIR"] = sys.argv[1]
    print(json.dumps(compile_cached()))
