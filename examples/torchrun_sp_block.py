"""Sequence-parallel MLP block under torchrun: compiled by pkc, checked against eager + NCCL.

    torchrun --nproc_per_node=W examples/torchrun_sp_block.py [--pipeline default] [--dtype bf16]
    python examples/torchrun_sp_block.py        # one rank (GPU, or the CPU interpreter)

Megatron sequence parallelism, layout [sequence, batch, hidden]: each rank holds s/W tokens
of the sequence; LayerNorm runs on the local shard, an all-gather assembles the whole
sequence for the column-parallel fc1, GELU, the row-parallel fc2 produces partial sums
that a reduce-scatter sums and splits back along the sequence, and the residual is added
on the local shard. pkc's overlap pass may fuse all_gather -> fc1 and fc2 ->
reduce_scatter into one kernel each (its remarks say what it chose and why).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torchrun_common as common  # noqa: E402  (sets the no-multicast environment first)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.distributed._functional_collectives as funcol  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

SIZES = {"small": dict(seq=16, batch=2, d=32, f=128), "medium": dict(seq=512, batch=2, d=1024, f=4096)}


class SPBlock(nn.Module):
    def __init__(self, d: int, f: int, world: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, f // world)               # column-parallel
        self.fc2 = nn.Linear(f // world, d, bias=False)   # row-parallel

    def forward(self, x: torch.Tensor) -> torch.Tensor:   # x: [s/W, b, d]
        group = dist.group.WORLD
        h = funcol.all_gather_tensor(self.norm(x), 0, group)          # [s, b, d]
        y = self.fc2(F.gelu(self.fc1(h), approximate="tanh"))          # partial sums
        return x + funcol.reduce_scatter_tensor(y, "sum", 0, group)    # [s/W, b, d]


def build(rank: int, world: int, device: torch.device, dtype: torch.dtype, size: str):
    s = SIZES[size]
    d, f, seq = s["d"], s["f"], s["seq"]
    if f % world or seq % world:
        raise SystemExit(f"d_ff={f} and seq={seq} must be divisible by the world size {world}")
    gen = torch.Generator().manual_seed(1)
    full = {
        "norm.weight": 1 + common.randn(gen, d, scale=0.1),
        "norm.bias": common.randn(gen, d, scale=0.1),
        "fc1.weight": common.randn(gen, f, d, scale=d ** -0.5),
        "fc1.bias": common.randn(gen, f, scale=0.1),
        "fc2.weight": common.randn(gen, d, f, scale=f ** -0.5),
    }
    x = common.randn(gen, seq, s["batch"], d)  # the whole sequence; each rank takes its part
    shard = {
        "norm.weight": full["norm.weight"],
        "norm.bias": full["norm.bias"],
        "fc1.weight": full["fc1.weight"].chunk(world, 0)[rank],
        "fc1.bias": full["fc1.bias"].chunk(world, 0)[rank],
        "fc2.weight": full["fc2.weight"].chunk(world, 1)[rank],
    }
    model = SPBlock(d, f, world)
    model.load_state_dict({k: v.contiguous() for k, v in shard.items()})
    x_local = x.chunk(world, 0)[rank].contiguous()
    return model.to(device=device, dtype=dtype), (x_local.to(device=device, dtype=dtype),)


def run(ctx: common.Rank, args) -> common.CheckResult:
    return common.run_example("sp_block", build, ctx, args)


def main(argv: list[str] | None = None) -> int:
    return common.example_main(__doc__, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
