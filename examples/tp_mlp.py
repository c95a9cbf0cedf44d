"""Tensor-parallel MLP: compile with pkc, print the pk IR, run it on W ranks.

Runs on any machine:

    python examples/tp_mlp.py [--world 4] [--dump-dir out/] [--pipeline default]

A Megatron-style MLP (column-parallel fc1, GELU, row-parallel fc2, in-place
``dist.all_reduce``) is traced on torch's fake process group, imported into graph-level pk
IR and compiled by the default pipeline; its remarks say what the passes decided (at the
example's small shapes the cost model leaves fc2's matmul and the all_reduce unfused:
overlap does not pay there; ``--pipeline 'default{force=true}'`` fuses them into one
kernel anyway, to show it). The program then runs for W ranks: on the GPU when there is one (W virtual
ranks on one device), otherwise on pkc's reference interpreter. The same model runs
eagerly on W threads with real collectives (torch's threaded process group), and the
example prints the largest difference between the two.
"""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import pkc
from pkc.frontend import fake_process_group, run_eager


class TPMLP(nn.Module):
    """One rank's share of ``fc2(gelu(fc1(x)))``: fc1's output features and fc2's input
    features are split over the W ranks; the partial results are summed with all_reduce."""

    def __init__(self, d_model: int, d_ff: int, world: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_ff // world)               # column-parallel
        self.fc2 = nn.Linear(d_ff // world, d_model, bias=False)   # row-parallel
        self.bias = nn.Parameter(torch.zeros(d_model))             # added after the sum

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc2(F.gelu(self.fc1(x)))
        dist.all_reduce(y)
        return y + self.bias


def rank_state(full: dict[str, torch.Tensor], world: int, rank: int) -> dict[str, torch.Tensor]:
    """Rank ``rank``'s shards of the full (unsharded) weights."""
    return {
        "fc1.weight": full["fc1.weight"].chunk(world, 0)[rank].contiguous(),
        "fc1.bias": full["fc1.bias"].chunk(world, 0)[rank].contiguous(),
        "fc2.weight": full["fc2.weight"].chunk(world, 1)[rank].contiguous(),
        "bias": full["bias"],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", type=int, default=4, help="number of ranks (default 4)")
    ap.add_argument("--dump-dir", default=None, help="write the IR after every stage here")
    ap.add_argument("--pipeline", default="default",
                    help="pass pipeline (default: the default pipeline; "
                    "'default{force=true}' forces fusion)")
    args = ap.parse_args(argv)
    world, d_model, d_ff, tokens = args.world, 64, 256, 32

    gen = torch.Generator().manual_seed(0)
    full = {
        "fc1.weight": torch.randn(d_ff, d_model, generator=gen) * d_model ** -0.5,
        "fc1.bias": torch.randn(d_ff, generator=gen) * 0.1,
        "fc2.weight": torch.randn(d_model, d_ff, generator=gen) * d_ff ** -0.5,
        "bias": torch.randn(d_model, generator=gen) * 0.1,
    }
    x = torch.randn(tokens, d_model, generator=gen)  # replicated on every rank

    # 1. Compile: trace rank 0's model on a fake process group of `world` ranks.
    with fake_process_group(world):
        model = TPMLP(d_model, d_ff, world)
        program = pkc.compile(model, (x,), dump_dir=args.dump_dir, pipeline=args.pipeline)
    print(program.ir())
    print("\n".join(program.remarks()))

    # 2. Run every rank, each with its own shards: GPU if present, else the interpreter.
    per_rank_params = [rank_state(full, world, r) for r in range(world)]
    got = [[o.cpu() for o in outs] for outs in program.run([(x,)] * world, params=per_rank_params)]
    where = "the GPU" if torch.cuda.is_available() else "the reference interpreter"
    print(f"// ran @main on {world} ranks on {where}")

    # 3. The eager reference: the same model on `world` threads with real collectives.
    def make(rank: int) -> nn.Module:
        m = TPMLP(d_model, d_ff, world)
        m.load_state_dict(per_rank_params[rank])
        return m

    expected = run_eager(make, [(x,)] * world, world_size=world)
    err = max((g[0] - e[0]).abs().max().item() for g, e in zip(got, expected))
    print(f"// pkc vs eager PyTorch over {world} ranks: max abs error {err:.3g}")
    return 0 if err < 1e-4 else 1


if __name__ == "__main__":
    raise SystemExit(main())
