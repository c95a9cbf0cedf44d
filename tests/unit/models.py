"""Test models: tensor-, sequence- and expert-parallel layers as users write them.

Every model is described by a :class:`Case`:

- ``make(rank, world)`` builds rank ``rank``'s callable with its own weights. It runs
  inside a process group of ``world`` ranks: the fake one (rank 0) when pkc traces it, the
  threaded one (every rank) when the eager reference runs (pkc.frontend.simulate).
- ``inputs(world)`` gives every rank's positional inputs.
- ``params(world)`` gives what ``CompiledProgram.run_simulated(params=...)`` takes: a list
  of per-rank state dicts (Megatron-style models hold local shards), or one full state
  dict (DTensor models: pkc shards it like the compiled program's DTensor parameters).
- ``expected`` counts the pk ops the imported IR must contain.

Weights and inputs come from seeded generators, never from the global RNG (the eager
reference runs ranks as threads that share it). Shapes are small: the suite is CPU-only.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.nn as nn
import torch.nn.functional as F



def _world_group() -> Any:
    return dist.group.WORLD


def _randn(gen: torch.Generator, *shape: int, scale: float = 1.0, dtype=torch.float32) -> torch.Tensor:
    return (torch.randn(*shape, generator=gen) * scale).to(dtype)


def _chunk(t: torch.Tensor, world: int, dim: int, rank: int) -> torch.Tensor:
    return torch.chunk(t, world, dim=dim)[rank].contiguous()


def _all_gather(x: torch.Tensor) -> torch.Tensor:
    # all_gather_tensor exists in torch 2.11 and 2.13 (all_gather_single only in 2.13).
    return funcol.all_gather_tensor(x, 0, _world_group())


def _reduce_scatter(x: torch.Tensor) -> torch.Tensor:
    return funcol.reduce_scatter_tensor(x, "sum", 0, _world_group())


# ======================================================================================
# Megatron-style tensor-parallel MLP: column-parallel fc1, GELU, row-parallel fc2,
# all_reduce, bias after the reduction.
# ======================================================================================


class TPMLP(nn.Module):
    def __init__(self, d: int, f: int, world: int, collective: str = "inplace",
                 approximate: str = "none") -> None:
        super().__init__()
        self.fc1 = nn.Linear(d, f // world)               # column-parallel (bias sharded)
        self.fc2 = nn.Linear(f // world, d, bias=False)   # row-parallel
        self.bias2 = nn.Parameter(torch.zeros(d))         # added once, after the all_reduce
        self.collective = collective
        self.approximate = approximate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc2(F.gelu(self.fc1(x), approximate=self.approximate))
        if self.collective == "inplace":
            dist.all_reduce(y)
        else:
            y = funcol.all_reduce(y, "sum", _world_group())
        return y + self.bias2


def tp_mlp_full(d: int, f: int, seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {
        "fc1.weight": _randn(gen, f, d, scale=d ** -0.5),
        "fc1.bias": _randn(gen, f, scale=0.1),
        "fc2.weight": _randn(gen, d, f, scale=f ** -0.5),
        "bias2": _randn(gen, d, scale=0.1),
    }


def tp_mlp_shard(full: dict[str, torch.Tensor], world: int, rank: int) -> dict[str, torch.Tensor]:
    return {
        "fc1.weight": _chunk(full["fc1.weight"], world, 0, rank),
        "fc1.bias": _chunk(full["fc1.bias"], world, 0, rank),
        "fc2.weight": _chunk(full["fc2.weight"], world, 1, rank),
        "bias2": full["bias2"].clone(),
    }


# ======================================================================================
# Megatron sequence parallelism: tokens sharded along the sequence (dim 0, layout
# [s, b, h]); all_gather -> LayerNorm'd input -> matmul ... matmul -> reduce_scatter.
# ======================================================================================


class SPMLP(nn.Module):
    def __init__(self, d: int, f: int, world: int, collective: str = "funcol") -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)                        # on the local sequence shard
        self.fc1 = nn.Linear(d, f // world)
        self.fc2 = nn.Linear(f // world, d, bias=False)
        self.world = world
        self.collective = collective

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        if self.collective == "funcol":
            h = _all_gather(h)
        else:
            full = torch.empty((h.shape[0] * self.world, *h.shape[1:]), dtype=h.dtype)
            dist.all_gather_into_tensor(full, h)
            h = full
        y = self.fc2(F.gelu(self.fc1(h), approximate="tanh"))
        if self.collective == "funcol":
            return _reduce_scatter(y)
        out = torch.empty((y.shape[0] // self.world, *y.shape[1:]), dtype=y.dtype)
        dist.reduce_scatter_tensor(out, y)
        return out


def _norm_mlp_full(d: int, f: int, seed: int, fc2_bias: bool) -> dict[str, torch.Tensor]:
    """LayerNorm -> fc1 (+bias) -> fc2 (+bias if asked) parameters, drawn in that order."""
    gen = torch.Generator().manual_seed(seed)
    out = {
        "norm.weight": 1 + _randn(gen, d, scale=0.1),
        "norm.bias": _randn(gen, d, scale=0.1),
        "fc1.weight": _randn(gen, f, d, scale=d ** -0.5),
        "fc1.bias": _randn(gen, f, scale=0.1),
        "fc2.weight": _randn(gen, d, f, scale=f ** -0.5),
    }
    if fc2_bias:
        out["fc2.bias"] = _randn(gen, d, scale=0.1)
    return out


def sp_mlp_full(d: int, f: int, seed: int = 1) -> dict[str, torch.Tensor]:
    return _norm_mlp_full(d, f, seed, fc2_bias=False)


def sp_mlp_shard(full: dict[str, torch.Tensor], world: int, rank: int) -> dict[str, torch.Tensor]:
    return {
        "norm.weight": full["norm.weight"].clone(),
        "norm.bias": full["norm.bias"].clone(),
        "fc1.weight": _chunk(full["fc1.weight"], world, 0, rank),
        "fc1.bias": _chunk(full["fc1.bias"], world, 0, rank),
        "fc2.weight": _chunk(full["fc2.weight"], world, 1, rank),
    }


# ======================================================================================
# Llama SwiGLU MLP, tensor-parallel, in bf16: down(silu(gate(x)) * up(x)), all_reduce.
# ======================================================================================


class SwiGLUMLP(nn.Module):
    def __init__(self, d: int, f: int, world: int, dtype: torch.dtype = torch.bfloat16) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(d, f // world, bias=False, dtype=dtype)
        self.up_proj = nn.Linear(d, f // world, bias=False, dtype=dtype)
        self.down_proj = nn.Linear(f // world, d, bias=False, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        return funcol.all_reduce(y, "sum", _world_group())


def swiglu_full(d: int, f: int, seed: int = 2, dtype=torch.bfloat16) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {
        "gate_proj.weight": _randn(gen, f, d, scale=d ** -0.5, dtype=dtype),
        "up_proj.weight": _randn(gen, f, d, scale=d ** -0.5, dtype=dtype),
        "down_proj.weight": _randn(gen, d, f, scale=f ** -0.5, dtype=dtype),
    }


def swiglu_shard(full: dict[str, torch.Tensor], world: int, rank: int) -> dict[str, torch.Tensor]:
    return {
        "gate_proj.weight": _chunk(full["gate_proj.weight"], world, 0, rank),
        "up_proj.weight": _chunk(full["up_proj.weight"], world, 0, rank),
        "down_proj.weight": _chunk(full["down_proj.weight"], world, 1, rank),
    }


# ======================================================================================
# Attention block: RMSNorm, column-parallel QKV (heads split over ranks), causal softmax
# attention, row-parallel output projection, all_reduce, residual.
# ======================================================================================


class TPAttention(nn.Module):
    def __init__(self, d: int, heads: int, seq: int, world: int) -> None:
        super().__init__()
        assert heads % world == 0
        self.local_heads = heads // world
        self.head_dim = d // heads
        self.norm = nn.RMSNorm(d, eps=1e-6)
        self.qkv = nn.Linear(d, 3 * self.local_heads * self.head_dim, bias=True)
        self.o_proj = nn.Linear(self.local_heads * self.head_dim, d, bias=False)
        self.register_buffer("causal", torch.ones(seq, seq, dtype=torch.bool).triu(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        q = q.view(b, s, self.local_heads, self.head_dim).transpose(1, 2)
        k = k.view(b, s, self.local_heads, self.head_dim).transpose(1, 2)
        v = v.view(b, s, self.local_heads, self.head_dim).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(self.causal, float("-inf"))
        attn = torch.softmax(scores, dim=-1)
        o = (attn @ v).transpose(1, 2).reshape(b, s, self.local_heads * self.head_dim)
        y = self.o_proj(o)
        y = funcol.all_reduce(y, "sum", _world_group())
        return x + y


def attention_full(d: int, heads: int, seed: int = 3) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {
        "norm.weight": 1 + _randn(gen, d, scale=0.1),
        "qkv.weight": _randn(gen, 3 * d, d, scale=d ** -0.5),
        "qkv.bias": _randn(gen, 3 * d, scale=0.1),
        "o_proj.weight": _randn(gen, d, d, scale=d ** -0.5),
    }


def attention_shard(full: dict[str, torch.Tensor], world: int, rank: int, seq: int
                    ) -> dict[str, torch.Tensor]:
    # q, k and v are each split by heads: take rank r's slice of each third.
    w_q, w_k, w_v = full["qkv.weight"].chunk(3, dim=0)
    b_q, b_k, b_v = full["qkv.bias"].chunk(3, dim=0)
    return {
        "norm.weight": full["norm.weight"].clone(),
        "qkv.weight": torch.cat([_chunk(w, world, 0, rank) for w in (w_q, w_k, w_v)]),
        "qkv.bias": torch.cat([_chunk(b, world, 0, rank) for b in (b_q, b_k, b_v)]),
        "o_proj.weight": _chunk(full["o_proj.weight"], world, 1, rank),
        "causal": torch.ones(seq, seq, dtype=torch.bool).triu(1),
    }


# ======================================================================================
# MoE layer, expert-parallel: top-1 routing with a fixed capacity per expert (GShard-style
# dispatch/combine tensors), all_to_all dispatch with equal splits, a batched expert FFN
# on each rank's local experts, all_to_all combine.
# ======================================================================================


class MoE(nn.Module):
    def __init__(self, d: int, f: int, experts: int, capacity: int, world: int) -> None:
        super().__init__()
        assert experts % world == 0
        self.experts, self.capacity, self.world = experts, capacity, world
        self.local = experts // world
        self.router = nn.Linear(d, experts, bias=False)           # replicated
        self.w1 = nn.Parameter(torch.zeros(self.local, d, f))      # local experts only
        self.w2 = nn.Parameter(torch.zeros(self.local, f, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t, d = x.shape
        e, c, w = self.experts, self.capacity, self.world
        probs = torch.softmax(self.router(x), dim=-1)                       # [t, e]
        top = (probs == probs.amax(dim=-1, keepdim=True)).to(torch.int64)   # one-hot top-1
        position = torch.cumsum(top, dim=0) * top                           # 1-based slot
        slots = torch.arange(1, c + 1)
        dispatch = (position.unsqueeze(-1) == slots).to(x.dtype)           # [t, e, c]
        combine = dispatch * probs.unsqueeze(-1)
        tokens = torch.einsum("tec,td->ecd", dispatch, x)                  # [e, c, d]
        # dispatch: rank p receives, from every rank, the slots of its local experts.
        recv = funcol.all_to_all_single(tokens.reshape(e * c, d), None, None, _world_group())
        recv = recv.reshape(w, self.local, c, d).transpose(0, 1).reshape(self.local, w * c, d)
        h = torch.bmm(F.gelu(torch.bmm(recv, self.w1)), self.w2)            # [local, w*c, d]
        h = h.reshape(self.local, w, c, d).transpose(0, 1).reshape(e * c, d)
        back = funcol.all_to_all_single(h, None, None, _world_group()).reshape(e, c, d)
        return torch.einsum("tec,ecd->td", combine, back)


def moe_full(d: int, f: int, experts: int, seed: int = 4) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {
        "router.weight": _randn(gen, experts, d, scale=d ** -0.5),
        "w1": _randn(gen, experts, d, f, scale=d ** -0.5),
        "w2": _randn(gen, experts, f, d, scale=f ** -0.5),
    }


def moe_shard(full: dict[str, torch.Tensor], world: int, rank: int) -> dict[str, torch.Tensor]:
    return {
        "router.weight": full["router.weight"].clone(),
        "w1": _chunk(full["w1"], world, 0, rank),
        "w2": _chunk(full["w2"], world, 0, rank),
    }


# ======================================================================================
# DTensor models: plain (unsharded) modules parallelized with parallel styles on a 1-D
# DeviceMesh over the whole world.
# ======================================================================================


class PlainMLP(nn.Module):
    def __init__(self, d: int, f: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, f)
        self.fc2 = nn.Linear(f, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(self.norm(x))))


def plain_mlp_full(d: int, f: int, seed: int = 5) -> dict[str, torch.Tensor]:
    return _norm_mlp_full(d, f, seed, fc2_bias=True)


def dtensor_mlp(full: dict[str, torch.Tensor], d: int, f: int, world: int, sequence_parallel: bool
                ) -> nn.Module:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    model = PlainMLP(d, f)
    model.load_state_dict(full)
    mesh = init_device_mesh("cpu", (world,))
    if sequence_parallel:
        plan = {
            "norm": SequenceParallel(),
            "fc1": ColwiseParallel(input_layouts=Shard(1)),
            "fc2": RowwiseParallel(output_layouts=Shard(1)),
        }
    else:
        plan = {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()}
    return parallelize_module(model, mesh, plan)


class Reshard(nn.Module):
    """Receives activations sharded on dim 0 and works on them sharded on dim 1: DTensor
    redistributes Shard(0) -> Shard(1), an all-to-all (on a CPU mesh torch falls back to
    all_gather + "take my rank's chunk", which must not bake rank 0 into the graph)."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.full((1,), 1.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale + 1.0


def dtensor_reshard(world: int) -> nn.Module:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import PrepareModuleInput, parallelize_module

    mesh = init_device_mesh("cpu", (world,))
    plan = PrepareModuleInput(input_layouts=(Shard(0),), desired_input_layouts=(Shard(1),),
                              use_local_output=True)
    return parallelize_module(Reshard(D), mesh, plan)


# ======================================================================================
# A model with ops pkc does not compile (sort, cumsum): they stay pk.opaque.
# ======================================================================================


class TPMLPWithSort(TPMLP):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = super().forward(x)
        return torch.sort(y, dim=-1).values + 0.5 * torch.cumsum(y, dim=-1)


# ======================================================================================
# The cases
# ======================================================================================


@dataclass
class Case:
    name: str
    make: Callable[[int, int], Callable[..., Any]]
    inputs: Callable[[int], list[tuple[torch.Tensor, ...]]]
    params: Callable[[int], Any]
    expected: dict[str, int]
    dtype: torch.dtype = torch.float32
    not_compiled: set[str] = field(default_factory=set)
    worlds: tuple[int, ...] = (2, 4, 8)

    def __repr__(self) -> str:
        return self.name


def _inputs(seed: int, shape_of: Callable[[int], tuple[int, ...]], dtype=torch.float32
            ) -> Callable[[int], list[tuple[torch.Tensor, ...]]]:
    def make(world: int) -> list[tuple[torch.Tensor, ...]]:
        gen = torch.Generator().manual_seed(seed)
        return [(_randn(gen, *shape_of(world), dtype=dtype),) for _ in range(world)]
    return make


def _replicated(seed: int, shape: tuple[int, ...], dtype=torch.float32):
    """The same input on every rank (tensor parallelism replicates activations)."""
    def make(world: int) -> list[tuple[torch.Tensor, ...]]:
        x = _randn(torch.Generator().manual_seed(seed), *shape, dtype=dtype)
        return [(x.clone(),) for _ in range(world)]
    return make


def _sharded(seed: int, shape: tuple[int, ...], dim: int, dtype=torch.float32):
    """One global input, each rank holding its chunk along ``dim`` (sequence parallel)."""
    def make(world: int) -> list[tuple[torch.Tensor, ...]]:
        x = _randn(torch.Generator().manual_seed(seed), *shape, dtype=dtype)
        return [(_chunk(x, world, dim, r),) for r in range(world)]
    return make


def _megatron(model_cls: Callable[[int], nn.Module], full: dict, shard: Callable[[dict, int, int], dict]
              ) -> tuple[Callable[[int, int], nn.Module], Callable[[int], list[dict]]]:
    def make(rank: int, world: int) -> nn.Module:
        m = model_cls(world)
        m.load_state_dict(shard(full, world, rank))
        return m

    def params(world: int) -> list[dict]:
        return [shard(full, world, r) for r in range(world)]

    return make, params


D, F_, S, B = 16, 64, 8, 2


def _tp_case(name: str, collective: str, approximate: str, sort: bool = False) -> Case:
    cls = TPMLPWithSort if sort else TPMLP
    full = tp_mlp_full(D, F_)
    make, params = _megatron(lambda w: cls(D, F_, w, collective, approximate), full, tp_mlp_shard)
    expected = {"pk.matmul": 2, "pk.all_reduce": 1}
    if sort:
        expected["pk.opaque"] = 2
    return Case(name, make, _replicated(10, (B, S, D)), params, expected,
                not_compiled={"aten.sort.default", "aten.cumsum.default"} if sort else set())


def _sp_case(name: str, collective: str) -> Case:
    full = sp_mlp_full(D, F_)
    make, params = _megatron(lambda w: SPMLP(D, F_, w, collective), full, sp_mlp_shard)
    return Case(name, make, _sharded(11, (S * 8 // 2, B, D), 0), params,
                {"pk.all_gather": 1, "pk.matmul": 2, "pk.reduce_scatter": 1, "pk.all_reduce": 0})


def _swiglu_case() -> Case:
    full = swiglu_full(D, F_)
    make, params = _megatron(lambda w: SwiGLUMLP(D, F_, w), full, swiglu_shard)
    return Case("swiglu_mlp_bf16", make, _replicated(12, (B, S, D), torch.bfloat16), params,
                {"pk.matmul": 3, "pk.all_reduce": 1}, dtype=torch.bfloat16)


def _attention_case() -> Case:
    heads = 8
    full = attention_full(D * 2, heads)
    make, params = _megatron(
        lambda w: TPAttention(D * 2, heads, S, w), full,
        lambda f, w, r: attention_shard(f, w, r, S),
    )
    return Case("tp_attention", make, _replicated(13, (B, S, D * 2)), params,
                {"pk.matmul": 4, "pk.all_reduce": 1})


def _moe_case() -> Case:
    experts_per_rank, capacity, tokens = 2, 4, 8

    def make(rank: int, world: int) -> nn.Module:
        e = experts_per_rank * world
        full = moe_full(D, 32, e)
        m = MoE(D, 32, e, capacity, world)
        m.load_state_dict(moe_shard(full, world, rank))
        return m

    def params(world: int) -> list[dict]:
        full = moe_full(D, 32, experts_per_rank * world)
        return [moe_shard(full, world, r) for r in range(world)]

    return Case("moe_all_to_all", make, _inputs(14, lambda w: (tokens, D)), params,
                {"pk.all_to_all": 2, "pk.matmul": 5},
                not_compiled={"aten.cumsum.default"})


def _dtensor_case(name: str, sequence_parallel: bool) -> Case:
    full = plain_mlp_full(D, F_)

    def make(rank: int, world: int) -> nn.Module:
        return dtensor_mlp(full, D, F_, world, sequence_parallel)

    if sequence_parallel:
        inputs = _sharded(15, (B, S * 8 // 2, D), 1)
        expected = {"pk.all_gather": 1, "pk.matmul": 2, "pk.reduce_scatter": 1, "pk.all_reduce": 0}
    else:
        inputs = _replicated(15, (B, S, D))
        expected = {"pk.matmul": 2, "pk.all_reduce": 1}
    return Case(name, make, inputs, lambda world: dict(full), expected)


def _reshard_case() -> Case:
    def make(rank: int, world: int) -> nn.Module:
        return dtensor_reshard(world)

    return Case("dtensor_shard0_to_shard1", make, _sharded(16, (8 * 8, 8 * 4), 0),
                lambda world: {"scale": torch.full((1,), 1.5)}, {"pk.all_to_all": 1},
                worlds=(2, 4))


def all_cases() -> list[Case]:
    return [
        _tp_case("tp_mlp_inplace", "inplace", "none"),
        _tp_case("tp_mlp_funcol_tanh", "funcol", "tanh"),
        _sp_case("sp_mlp_funcol", "funcol"),
        _sp_case("sp_mlp_inplace", "inplace"),
        _swiglu_case(),
        _attention_case(),
        _moe_case(),
        _dtensor_case("dtensor_tp_mlp", sequence_parallel=False),
        _dtensor_case("dtensor_sp_mlp", sequence_parallel=True),
        _reshard_case(),
        _tp_case("tp_mlp_with_sort", "inplace", "none", sort=True),
    ]
