"""torchrun check: a tensor-parallel MLP followed by ops pkc does not compile (sort,
cumsum: pk.opaque), compiled with pkc.backend, against eager + NCCL on each rank.

    torchrun --nproc_per_node=2 tests/gpu/torchrun_opaque.py
"""

import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.getcwd(), "examples"))
import torchrun_common as common  # noqa: E402


class TPMLPWithSort(nn.Module):
    def __init__(self, d: int, f: int, world: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d, f // world)
        self.fc2 = nn.Linear(f // world, d, bias=False)

    def forward(self, x):
        y = self.fc2(F.gelu(self.fc1(x)))
        dist.all_reduce(y)
        return torch.sort(y, dim=-1).values + 0.5 * torch.cumsum(y, dim=-1)


def main() -> int:
    ctx = common.init_distributed()
    torch.manual_seed(0)  # the same full weights on every rank; each keeps its shard
    model = TPMLPWithSort(64, 256, ctx.world).to(ctx.device)
    x = torch.randn(32, 64, device=ctx.device)
    result = common.check_model(ctx, "tp_mlp_with_sort", model, (x,), pipeline="default",
                                rtol=1e-3, calls=2)
    return common.finish(ctx, result.ok)


if __name__ == "__main__":
    raise SystemExit(main())
