"""Expert-parallel MoE layer under torchrun: compiled by pkc, checked against eager + NCCL.

    torchrun --nproc_per_node=W examples/torchrun_moe.py [--pipeline default]
    python examples/torchrun_moe.py             # one rank (GPU, or the CPU interpreter)

Top-1 routing with a fixed capacity per expert (GShard-style dispatch / combine tensors),
``all_to_all_single`` dispatch with equal splits, a batched two-layer FFN over the rank's
local experts, ``all_to_all_single`` combine. The router is replicated; each rank holds
E/W experts. pkc's overlap pass may fuse all_to_all -> grouped matmul -> all_to_all.

The slot of each token in its expert's queue is a running count of the tokens routed to
that expert, written as a lower-triangular matmul instead of ``torch.cumsum``: pkc keeps
cumsum as an opaque torch op, and opaque ops do not run yet on pkc's distributed (torchrun)
path (pkc/runtime/execute.py: run_kernel_module_distributed handles pk.kernel and per-rank
pk ops only). Default dtype float32: top-1 routing on bf16 logits can flip on ties between
two correct implementations.
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

SIZES = {"small": dict(tokens=16, d=32, f=64, experts_per_rank=2, capacity=8),
         "medium": dict(tokens=256, d=512, f=1024, experts_per_rank=2, capacity=64)}


class MoE(nn.Module):
    def __init__(self, tokens: int, d: int, f: int, experts: int, capacity: int, world: int) -> None:
        super().__init__()
        assert experts % world == 0
        self.experts, self.capacity, self.world = experts, capacity, world
        self.local = experts // world
        self.router = nn.Linear(d, experts, bias=False)              # replicated
        self.w1 = nn.Parameter(torch.zeros(self.local, d, f))         # local experts only
        self.w2 = nn.Parameter(torch.zeros(self.local, f, d))
        self.register_buffer("running", torch.ones(tokens, tokens).tril())  # prefix sums
        self.register_buffer("slots", torch.arange(1, capacity + 1, dtype=torch.float32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t, d = x.shape
        e, c, w = self.experts, self.capacity, self.world
        group = dist.group.WORLD
        probs = torch.softmax(self.router(x), dim=-1)                        # [t, e]
        top = (probs == probs.amax(dim=-1, keepdim=True)).to(x.dtype)        # one-hot top-1
        position = (self.running.to(x.dtype) @ top) * top                   # 1-based slot
        dispatch = (position.unsqueeze(-1) == self.slots.to(x.dtype)).to(x.dtype)  # [t, e, c]
        combine = dispatch * probs.unsqueeze(-1)
        tokens = torch.einsum("tec,td->ecd", dispatch, x)                   # [e, c, d]
        recv = funcol.all_to_all_single(tokens.reshape(e * c, d), None, None, group)
        recv = recv.reshape(w, self.local, c, d).transpose(0, 1).reshape(self.local, w * c, d)
        h = torch.bmm(F.gelu(torch.bmm(recv, self.w1)), self.w2)             # [local, w*c, d]
        h = h.reshape(self.local, w, c, d).transpose(0, 1).reshape(e * c, d)
        back = funcol.all_to_all_single(h, None, None, group).reshape(e, c, d)
        return torch.einsum("tec,ecd->td", combine, back)


def build(rank: int, world: int, device: torch.device, dtype: torch.dtype, size: str):
    s = SIZES[size]
    t, d, f, c = s["tokens"], s["d"], s["f"], s["capacity"]
    e = s["experts_per_rank"] * world
    gen = torch.Generator().manual_seed(4)
    router = common.randn(gen, e, d, scale=d ** -0.5)
    w1 = common.randn(gen, e, d, f, scale=d ** -0.5)
    w2 = common.randn(gen, e, f, d, scale=f ** -0.5)
    xs = [common.randn(gen, t, d) for _ in range(world)]   # every rank routes its own tokens
    model = MoE(t, d, f, e, c, world)
    model.load_state_dict({"router.weight": router, "w1": w1.chunk(world, 0)[rank].contiguous(),
                           "w2": w2.chunk(world, 0)[rank].contiguous(),
                           "running": model.running, "slots": model.slots})
    return model.to(device=device, dtype=dtype), (xs[rank].to(device=device, dtype=dtype),)


def run(ctx: common.Rank, args) -> common.CheckResult:
    return common.run_example("moe", build, ctx, args, default_dtype="f32")


def main(argv: list[str] | None = None) -> int:
    return common.example_main(__doc__, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
