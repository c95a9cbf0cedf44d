"""Tensor-parallel MLP under torchrun: compiled by pkc, checked against eager PyTorch + NCCL.

    torchrun --nproc_per_node=W examples/torchrun_tp_mlp.py [--pipeline default] [--dtype bf16]
    python examples/torchrun_tp_mlp.py          # one rank (GPU, or the CPU interpreter)

Megatron-style: fc1 is column-parallel (each rank holds d_ff/W of its output features),
fc2 row-parallel (d_ff/W of its input features); the partial outputs are summed with an
in-place ``dist.all_reduce`` and the bias is added once, after the sum. Each rank builds its
own shards of the same seeded full weights, compiles the model with
``torch.compile(model, backend=pkc.backend(pipeline=...))`` and runs it on its GPU; the same
model, uncompiled, is the reference. Prints each rank's max abs error and what pkc decided.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torchrun_common as common  # noqa: E402  (sets the no-multicast environment first)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

SIZES = {"small": dict(tokens=16, d=32, f=128), "medium": dict(tokens=256, d=1024, f=4096)}


class TPMLP(nn.Module):
    def __init__(self, d: int, f: int, world: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d, f // world)               # column-parallel
        self.fc2 = nn.Linear(f // world, d, bias=False)   # row-parallel
        self.bias2 = nn.Parameter(torch.zeros(d))         # added once, after the sum

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc2(F.gelu(self.fc1(x), approximate="tanh"))
        dist.all_reduce(y)
        return y + self.bias2


def build(rank: int, world: int, device: torch.device, dtype: torch.dtype, size: str):
    """Rank ``rank``'s model (its shards of seeded full weights) and its input."""
    s = SIZES[size]
    d, f = s["d"], s["f"]
    if f % world:
        raise SystemExit(f"d_ff={f} is not divisible by the world size {world}")
    gen = torch.Generator().manual_seed(0)
    full = {
        "fc1.weight": common.randn(gen, f, d, scale=d ** -0.5),
        "fc1.bias": common.randn(gen, f, scale=0.1),
        "fc2.weight": common.randn(gen, d, f, scale=f ** -0.5),
        "bias2": common.randn(gen, d, scale=0.1),
    }
    x = common.randn(gen, s["tokens"], d)  # activations are replicated under TP
    shard = {
        "fc1.weight": full["fc1.weight"].chunk(world, 0)[rank],
        "fc1.bias": full["fc1.bias"].chunk(world, 0)[rank],
        "fc2.weight": full["fc2.weight"].chunk(world, 1)[rank],
        "bias2": full["bias2"],
    }
    model = TPMLP(d, f, world)
    model.load_state_dict({k: v.contiguous() for k, v in shard.items()})
    return model.to(device=device, dtype=dtype), (x.to(device=device, dtype=dtype),)


def run(ctx: common.Rank, args) -> common.CheckResult:
    return common.run_example("tp_mlp", build, ctx, args)


def main(argv: list[str] | None = None) -> int:
    return common.example_main(__doc__, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
