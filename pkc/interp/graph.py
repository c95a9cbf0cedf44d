"""Runs graph-level pk IR for W simulated ranks, in lockstep.

Every SSA value maps to a list of W per-rank torch tensors. Ops that act on one rank's
data run once per rank; collectives see all W tensors at once; a ``pk.kernel`` is handed
to the kernel-level executor, which runs every rank's workers concurrently.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Operation, SSAValue

from pkc.dialects import graph as g
from pkc.dialects.common import int_list
from pkc.dialects.graph_scaled import ScaledMatmulOp
from pkc.dialects.kernel import KernelOp
from pkc.dialects.rank_groups import rank_groups
from pkc.interp.values import (
    InterpError,
    apply_map,
    apply_reduce,
    matmul,
    reduce_ranks,
    scaled_matmul,
    torch_dtype,
    where,
)

PerRank = list[torch.Tensor]
Env = dict[SSAValue, PerRank]

# The graph-level semantics, public for the runtime's and the emulator's graph walkers
# (they run these ops as the interpreter does). Per-rank ops:
# impl(op, *one_rank_operands) -> one_rank_result.
LOCAL_RULES: dict[type[Operation], Callable[..., torch.Tensor]] = {}
# Whole-world ops: impl(op, [per_rank_operand_lists], world) -> [per_rank_results].
WORLD_RULES: dict[type[Operation], Callable[..., list[PerRank]]] = {}


def _local(op_type):
    def register(fn):
        LOCAL_RULES[op_type] = fn
        return fn
    return register


def _world(op_type):
    """Registers a whole-world rule written for one group of ``world`` ranks; the registered
    rule runs it in each sub-group when the op has ``group_ranks``, so every caller (this
    interpreter, the runtime's simulated ranks, the emulator's checks) gets sub-groups."""
    def register(fn):
        def rule(op, xs: PerRank, world: int) -> PerRank:
            return per_group(op, [xs], world, lambda sub, w: [fn(op, sub[0], w)])[0]
        WORLD_RULES[op_type] = rule
        return fn
    return register


def per_group(op: Operation, operands: list[PerRank], world: int,
              run: Callable[[list[PerRank], int], list[PerRank]]) -> list[PerRank]:
    """Runs ``run(operands of one group, group size)`` for each sub-group of ``op`` (see
    :mod:`pkc.dialects.rank_groups`) and puts each group's results back at its ranks'
    places; without ``group_ranks``, once over all ``world`` ranks. ``operands[i][r]`` is
    rank r's i-th operand. Raises InterpError when ``op`` is written for another world."""
    groups = rank_groups(op)
    size = op.world.value.data
    if groups is None and size == 1 and world > 1:
        groups = [[r] for r in range(world)]      # rank-local (a scheduled GEMM): each rank alone
    if groups is None:
        if size != world:
            raise InterpError(f"{where(op)} is written for a world of {size} ranks, "
                              f"but the interpreter runs {world}")
        return run(operands, world)
    if len(groups) * size != world:
        raise InterpError(f"{where(op)} runs in {len(groups)} groups of {size} ranks "
                          f"({groups}), but the interpreter runs {world} ranks")
    results: list[PerRank] | None = None
    for grp in groups:
        outs = run([[o[r] for r in grp] for o in operands], size)
        if results is None:
            results = [[None] * world for _ in outs]  # type: ignore[list-item]
        for res, out in zip(results, outs):
            for j, r in enumerate(grp):
                res[r] = out[j]
    assert results is not None
    return results


def _out(op: Operation, i: int = 0) -> tuple[tuple[int, ...], torch.dtype]:
    t = op.results[i].type
    assert isinstance(t, TensorType)
    return tuple(t.get_shape()), torch_dtype(t.element_type)


@_local(g.MatmulOp)
def _matmul(op, a, b):
    return matmul(a, b, _out(op)[1])


@_local(ScaledMatmulOp)
def _scaled_matmul(op, a, b, sa, sb, bias=None):
    return scaled_matmul(a, b, sa, sb, bias, _out(op)[1])


@_local(g.MapOp)
def _map(op, *xs):
    return apply_map(op.fn.data, list(xs), *_out(op))


@_local(g.ConstantOp)
def _constant(op):
    shape, dtype = _out(op)
    return torch.full(shape, op.value.value.data, dtype=dtype)


@_local(g.ReduceOp)
def _reduce(op, x):
    return apply_reduce(op.fn.data, x, int_list(op.dims), op.keepdim is not None)


@_local(g.ReshapeOp)
def _reshape(op, x):
    return x.reshape(_out(op)[0]).clone()


@_local(g.TransposeOp)
def _transpose(op, x):
    return x.permute(int_list(op.perm)).contiguous()


@_local(g.BroadcastOp)
def _broadcast(op, x):
    return x.broadcast_to(_out(op)[0]).clone()


@_local(g.SliceOp)
def _slice(op, x):
    d, s, e, st = (a.value.data for a in (op.dim, op.start, op.end, op.step))
    index = [slice(None)] * x.dim()
    index[d] = slice(s, e, st)
    return x[tuple(index)].clone()


@_local(g.ConcatOp)
def _concat(op, *xs):
    return torch.cat(xs, dim=op.dim.value.data)


@_world(g.AllReduceOp)
def _all_reduce(op, xs: PerRank, world: int) -> PerRank:
    total = reduce_ranks(op.reduce.data, xs)
    return [total.clone() for _ in range(world)]


@_world(g.AllGatherOp)
def _all_gather(op, xs: PerRank, world: int) -> PerRank:
    full = torch.cat(xs, dim=op.dim.value.data)
    return [full.clone() for _ in range(world)]


@_world(g.ReduceScatterOp)
def _reduce_scatter(op, xs: PerRank, world: int) -> PerRank:
    total = reduce_ranks(op.reduce.data, xs)
    return [c.clone() for c in torch.chunk(total, world, dim=op.dim.value.data)]


@_world(g.AllToAllOp)
def _all_to_all(op, xs: PerRank, world: int) -> PerRank:
    sd, cd = op.split_dim.value.data, op.concat_dim.value.data
    chunks = [torch.chunk(x, world, dim=sd) for x in xs]  # chunks[src][dst]
    return [torch.cat([chunks[src][dst] for src in range(world)], dim=cd) for dst in range(world)]


def run_opaque(op: g.OpaqueOp, args: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """One rank's ``pk.opaque``: its torch op called on ``args``; the results as a list."""
    from pkc.dialects.opaque import decode_call, resolve_target

    target = resolve_target(op.target.data)
    call_args, call_kwargs = decode_call(op.spec.data, list(args))
    out = target(*call_args, **call_kwargs)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    if len(outs) != len(op.outputs):
        raise InterpError(
            f"{where(op)} {op.target.data} returned {len(outs)} values, the IR declares {len(op.outputs)}"
        )
    return outs


def run_function(fn: func.FuncOp, inputs: list[PerRank], world: int, seed: int = 0,
                 ctas: int | None = None) -> list[PerRank]:
    """Runs ``fn``; ``inputs[r]`` holds rank r's arguments. Returns each rank's results.
    ``seed`` picks how the workers of every kernel interleave; ``ctas``: CTAs per rank of
    every scheduled kernel (None: the schedule interpreter's default)."""
    from pkc.interp.kernel import run_kernel
    from pkc.interp.schedule import run_schedule

    env: Env = {}
    for i, arg in enumerate(fn.body.blocks[0].args):
        env[arg] = [inputs[r][i] for r in range(world)]
    for op in fn.body.blocks[0].ops:
        if isinstance(op, func.ReturnOp):
            results = [env[v] for v in op.arguments]
            return [[res[r] for res in results] for r in range(world)]
        operands = [env[v] for v in op.operands]
        if isinstance(op, g.COLLECTIVE_OPS):
            outs = [WORLD_RULES[type(op)](op, operands[0], world)]
        elif isinstance(op, KernelOp) and op.schedule() is not None:
            outs = per_group(op, operands, world, lambda o, w: run_schedule(op, o, w, seed, ctas))
        elif isinstance(op, KernelOp):
            outs = run_kernel(op, operands, world, seed)
        elif isinstance(op, g.OpaqueOp):
            per_rank = [run_opaque(op, [o[r] for o in operands]) for r in range(world)]
            outs = [[per_rank[r][i] for r in range(world)] for i in range(len(op.outputs))]
        elif type(op) in LOCAL_RULES:
            outs = [[LOCAL_RULES[type(op)](op, *[o[r] for o in operands]) for r in range(world)]]
        else:
            raise InterpError(f"{where(op)} cannot be interpreted at graph level")
        for res, val in zip(op.results, outs):
            env[res] = val
    raise InterpError(f"function @{fn.sym_name.data} has no func.return")


def find_function(module: ModuleOp, name: str) -> func.FuncOp:
    for op in module.walk():
        if isinstance(op, func.FuncOp) and op.sym_name.data == name:
            return op
    raise InterpError(f"no function @{name} in the module")
