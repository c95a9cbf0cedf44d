"""Graph-level pk IR -> one torch program per rank, compiled by Inductor.

Choice (issue 18): the regions of a graph that pkc does not turn into its own kernels are
handed to Inductor, not run op by op. After the pass pipeline, ``@main`` is translated
into a torch.fx graph of one rank's program:

* graph-level ops become the torch ops with the same meaning (``pk.matmul`` -> a matmul
  in the operands' type with f32 accumulation, ``pk.map`` -> elementwise math in f32
  rounded once, ``pk.reduce``, and views for reshape / transpose / broadcast / slice, so
  a weight used transposed reaches the GEMM as a strided view: no copy, Inductor hands
  it to cuBLAS or its GEMM template in that layout);
* every ``pk.kernel`` becomes one call of ``torch.ops.pkc.kernel`` (an opaque op for
  Inductor, :mod:`pkc.runtime.kernel_call`), except that at W = 1 a collective is the
  identity: a 1-rank lowered collective (or graph-level collective) disappears, so a
  layer at W = 1 is simply Inductor's;
* a graph-level collective left by a pipeline that did not lower it runs as torch's
  functional collective (NCCL) under torch.distributed, or at the rendezvous of the
  simulated ranks.

Inductor then fuses the elementwise regions (norms, activations, residual adds) around
the GEMMs and pkc's kernels, and with ``mode="reduce-overhead"`` records the whole call
as a CUDA graph. The other choice, fusing those regions into pkc's kernels' prologues and
epilogues, is not made here: Inductor's fused elementwise kernels already run at HBM
speed, and the fused GEMM + collective kernels do not yet take epilogues.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp

from pkc.dialects import graph as g
from pkc.dialects.common import int_list
from pkc.dialects.graph_scaled import ScaledMatmulOp
from pkc.dialects.kernel import KernelOp
from pkc.runtime.kernel_call import RunKind, register
from pkc.target.collectives import Collective

__all__ = ["TorchProgram", "torch_program", "compile_with_inductor", "aten_program", "is_identity_kernel"]

def is_identity_kernel(op: KernelOp) -> bool:
    """A 1-rank lowered collective: its output is its input (every collective of one rank
    is the identity)."""
    if op.world_size != 1 or len(op.inputs) != 1 or len(op.outputs) != 1:
        return False
    plan = op.attributes.get("pk.plan")
    coll = getattr(plan, "data", {}).get("collective") if plan is not None else None
    if coll is None or getattr(coll, "data", None) not in tuple(Collective):
        return False
    a, r = op.inputs[0].type, op.outputs[0].type
    return a.element_type == r.element_type and _numel(a.get_shape()) == _numel(r.get_shape())


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


# ---------------------------------------------------------------------- per-op torch rules
# Called with proxies-turned-tensors while Inductor traces the fx graph, never per call.


def _up(x: Any) -> Any:
    """Floats compute in f32 (f64 stays f64), as pk.map defines."""
    if isinstance(x, torch.Tensor) and x.dtype in (torch.bfloat16, torch.float16):
        return x.float()
    return x


def _map(fn: str, dtype: torch.dtype, shape: tuple[int, ...], *xs: Any) -> torch.Tensor:
    from pkc.interp.values import BINARY_FNS, UNARY_FNS

    if fn == "cast":
        r = xs[0].to(dtype)
    elif fn == "where":
        c, a, b = xs
        r = torch.where(c, _up(a), _up(b))
    else:
        rule = UNARY_FNS.get(fn) or BINARY_FNS[fn]
        r = rule(*[_up(x) for x in xs])
    r = r.to(dtype)
    return r if tuple(r.shape) == shape else r.expand(shape)


def _reduce(fn: str, dims: list[int], keepdim: bool, dtype: torch.dtype, x: torch.Tensor) -> torch.Tensor:
    xc = _up(x)
    reduce = {"sum": torch.sum, "mean": torch.mean, "max": torch.amax, "min": torch.amin}[fn]
    return reduce(xc, dim=dims, keepdim=keepdim).to(dtype)


def _matmul(dtype: torch.dtype, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """cuBLAS semantics: f32 accumulation, one rounding to the result type."""
    if a.dtype == b.dtype == dtype:
        return torch.matmul(a, b)
    return torch.matmul(_up(a), _up(b)).to(dtype)


def _scaled_mm(dtype: torch.dtype, fast_accum: bool, a: torch.Tensor, b: torch.Tensor,
               sa: torch.Tensor, sb: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """pk.scaled_matmul: cuBLASLt's fp8 GEMM (torch._scaled_mm) on a GPU for the forms it
    takes (both scales tensor-wise, or both row-wise with a bf16 result; K and N multiples
    of 16; no bias; B column-major), else the interpreter's f32 form (dequantize, multiply
    in f32, round once), which is correct everywhere, only slower."""
    tensor_wise = sa.numel() == 1 and sb.numel() == 1
    row_wise = sa.dim() == 2 and sb.dim() == 2 and dtype == torch.bfloat16
    aligned = a.shape[1] % 16 == 0 and b.shape[1] % 16 == 0 and bias is None
    if a.is_cuda and aligned and (tensor_wise or row_wise):
        if tensor_wise:
            sa, sb = sa.reshape(()), sb.reshape(())
        return torch._scaled_mm(a.contiguous(), b.t().contiguous().t(), sa, sb, bias=bias,
                                out_dtype=dtype, use_fast_accum=fast_accum)
    from pkc.interp.values import scaled_matmul

    return scaled_matmul(a, b, sa, sb, bias, dtype)


def _constant(value: float | int, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return torch.full(shape, value, dtype=dtype, device=device)


def _slice(dim: int, start: int, end: int, step: int, x: torch.Tensor) -> torch.Tensor:
    return torch.ops.aten.slice.Tensor(x, dim, start, end, step)


def _identity(shape: tuple[int, ...], x: torch.Tensor) -> torch.Tensor:
    return x if tuple(x.shape) == shape else x.reshape(shape)


def _kernel(key: int, *xs: torch.Tensor) -> list[torch.Tensor]:
    return torch.ops.pkc.kernel(list(xs), key)


def _funcol_all_reduce(dim: int, group: str, x: torch.Tensor) -> torch.Tensor:
    import torch.distributed._functional_collectives as funcol

    return funcol.all_reduce(x, "sum", group)


def _funcol_all_gather(dim: int, group: str, x: torch.Tensor) -> torch.Tensor:
    import torch.distributed._functional_collectives as funcol

    return funcol.all_gather_tensor(x, dim, group)


def _funcol_reduce_scatter(dim: int, group: str, x: torch.Tensor) -> torch.Tensor:
    import torch.distributed._functional_collectives as funcol

    return funcol.reduce_scatter_tensor(x, "sum", dim, group)


# the collectives NCCL runs for pkc (torch's functional collectives; no all_to_all)
_FUNCOLS = {Collective.ALL_REDUCE: _funcol_all_reduce, Collective.ALL_GATHER: _funcol_all_gather,
            Collective.REDUCE_SCATTER: _funcol_reduce_scatter}


def _opaque(target: Any, spec: str, *xs: torch.Tensor) -> Any:
    from pkc.dialects.opaque import decode_call

    args, kwargs = decode_call(spec, list(xs))
    out = target(*args, **kwargs)
    return list(out) if isinstance(out, (tuple, list)) else [out]


# ---------------------------------------------------------------------- the translation


@dataclass
class TorchProgram:
    """One rank's program: ``gm`` takes ``n_inputs`` tensors (see :func:`torch_program`)."""

    gm: torch.fx.GraphModule
    n_inputs: int
    counts: dict[str, int] = field(default_factory=dict)

    def remark(self) -> str:
        c = self.counts
        return (f"pkc: the graph outside pkc's kernels is compiled by Inductor (pk IR -> one torch "
                f"program of {c.get('torch', 0)} ops); {c.get('kernel', 0)} pkc kernel call(s), "
                f"{c.get('identity', 0)} 1-rank collective(s) as the identity, "
                f"{c.get('nccl', 0)} collective(s) through torch")


def torch_program(module: ModuleOp, *, world: int, kind: RunKind, arg_map: Sequence[int | torch.Tensor],
                  n_inputs: int, device: torch.device | str = "cpu", target: str = "sm_90a",
                  distributed: bool = False, func_name: str = "main") -> TorchProgram:
    """``@func_name`` as an fx graph over ``n_inputs`` placeholders.

    ``arg_map[j]`` says where argument j of the function comes from: an int is a
    placeholder index, a tensor a constant (moved to ``device`` once, kept in the module).
    ``kind``/``target`` say how pkc's kernels run (:class:`RunKind`); ``distributed``: a
    graph-level collective runs through torch.distributed (NCCL)."""
    from pkc.interp.graph import find_function
    from pkc.interp.values import torch_dtype

    fn = find_function(module, func_name)
    block = fn.body.blocks[0]
    device = torch.device(device)
    graph = torch.fx.Graph()
    root = torch.nn.Module()
    phs = [graph.placeholder(f"arg{i}") for i in range(n_inputs)]
    env: dict = {}
    scalars: dict = {}                       # 1-element constants, folded into maps
    counts = {"torch": 0, "kernel": 0, "identity": 0, "nccl": 0}
    if len(arg_map) != len(block.args):
        raise ValueError(f"@{func_name} takes {len(block.args)} arguments, arg_map has {len(arg_map)}")
    for j, (a, src) in enumerate(zip(block.args, arg_map)):
        if isinstance(src, int):
            env[a] = phs[src]
        else:
            name = f"pkc_constant{j}"
            root.register_buffer(name, src.detach().to(device))
            env[a] = graph.get_attr(name)

    def out(op, i=0):
        t = op.results[i].type
        return tuple(t.get_shape()), torch_dtype(t.element_type)

    def call(fn_, *args):
        counts["torch"] += 1
        return graph.call_function(fn_, tuple(args))

    def value(v):
        if v in env:
            return env[v]
        # a constant used as a whole tensor
        op = v.owner
        shape, dtype = out(op)
        env[v] = call(_constant, op.value.value.data, shape, dtype, device)
        return env[v]

    for op in block.ops:
        if isinstance(op, func.ReturnOp):
            graph.output(tuple(value(v) for v in op.arguments))
            break
        if isinstance(op, g.ConstantOp):
            shape, dtype = out(op)
            if _numel(shape) == 1:
                scalars[op.results[0]] = op.value.value.data
            else:
                env[op.results[0]] = call(_constant, op.value.value.data, shape, dtype, device)
            continue
        if isinstance(op, g.MapOp):
            shape, dtype = out(op)
            xs = [scalars.get(v, None) if v in scalars else None for v in op.operands]
            if all(x is not None for x in xs):    # all scalars: keep one as a tensor
                xs[0] = None
            args = [value(v) if x is None else x for v, x in zip(op.operands, xs)]
            env[op.results[0]] = call(_map, op.fn.data, dtype, shape, *args)
            continue
        operands = [value(v) for v in op.operands]
        shape, dtype = out(op) if op.results else ((), None)
        if isinstance(op, g.MatmulOp):
            node = call(_matmul, dtype, *operands)
        elif isinstance(op, ScaledMatmulOp):
            node = call(_scaled_mm, dtype, op.fast_accum is not None, *operands)
        elif isinstance(op, g.ReduceOp):
            node = call(_reduce, op.fn.data, int_list(op.dims), op.keepdim is not None, dtype, operands[0])
        elif isinstance(op, g.ReshapeOp):
            node = call(torch.reshape, operands[0], shape)
        elif isinstance(op, g.TransposeOp):
            node = call(torch.permute, operands[0], tuple(int_list(op.perm)))
        elif isinstance(op, g.BroadcastOp):
            node = call(torch.broadcast_to, operands[0], shape)
        elif isinstance(op, g.SliceOp):
            node = call(_slice, *(a.value.data for a in (op.dim, op.start, op.end, op.step)), operands[0])
        elif isinstance(op, g.ConcatOp):
            node = call(torch.cat, list(operands), op.dim.value.data)
        elif isinstance(op, g.COLLECTIVE_OPS):
            node = _collective(op, operands[0], shape, graph, counts, world, kind, target, distributed)
        elif isinstance(op, KernelOp):
            if is_identity_kernel(op):
                counts["identity"] += 1
                node = graph.call_function(_identity, (shape, operands[0]))
            else:
                counts["kernel"] += 1
                key = register(op, world, kind, target)
                res = graph.call_function(_kernel, (key, *operands))
                for i, r in enumerate(op.results):
                    env[r] = graph.call_function(operator.getitem, (res, i))
                continue
        elif isinstance(op, g.OpaqueOp):
            from pkc.dialects.opaque import resolve_target

            res = call(_opaque, resolve_target(op.target.data), op.spec.data, *operands)
            for i, r in enumerate(op.results):
                env[r] = graph.call_function(operator.getitem, (res, i))
            continue
        else:
            raise NotImplementedError(f"'{op.name}' has no torch translation (pkc.runtime.inductor)")
        env[op.results[0]] = node
    else:
        raise ValueError(f"function @{func_name} has no func.return")
    graph.lint()
    return TorchProgram(torch.fx.GraphModule(root, graph), n_inputs, counts)


def _collective(op, x, shape, graph, counts, world, kind, target, distributed):
    coll = Collective.parse(op.name.removeprefix("pk."), f"'{op.name}'")
    if op.world_size == 1:
        counts["identity"] += 1
        return graph.call_function(_identity, (shape, x))
    if kind is RunKind.SIMULATED:
        counts["kernel"] += 1
        res = graph.call_function(_kernel, (register(op, world, kind, target), x))
        return graph.call_function(operator.getitem, (res, 0))
    if distributed and coll in _FUNCOLS:
        import torch.distributed as dist

        counts["nccl"] += 1
        dim = op.dim.value.data if hasattr(op, "dim") else 0
        return graph.call_function(_FUNCOLS[coll], (dim, _group_name(op, dist), x))
    raise NotImplementedError(
        f"'{op.name}' of {op.world_size} ranks outside a pk.kernel cannot run here; run a pipeline "
        f"with lower-collectives (e.g. pipeline='default')")


def _group_name(op, dist) -> str:
    """The process group NCCL runs ``op`` in: the world's, or (``group_ranks``) the one of
    this process's rank among the groups the user's program created (a DeviceMesh makes
    them); never the world's for a sub-group collective."""
    from pkc.dialects.rank_groups import rank_groups

    groups = rank_groups(op)
    if groups is None:
        return dist.group.WORLD.group_name
    me = dist.get_rank()
    mine = next(sorted(grp) for grp in groups if me in grp)
    from torch.distributed.distributed_c10d import _world

    for pg, members in _world.pg_group_ranks.items():
        if sorted(members) == mine:
            return pg.group_name
    raise NotImplementedError(
        f"'{op.name}' runs in sub-group {mine} (of {groups}), but this process has no "
        "process group with exactly those ranks: create the device mesh (or dist.new_group) "
        "before calling the compiled program")


# ---------------------------------------------------------------------- Inductor


def compile_with_inductor(program: TorchProgram, example_inputs: Sequence[Any], *,
                          mode: str | None = None, options: dict | None = None,
                          static_inputs: Sequence[int] = (),
                          backend_id: str | None = None) -> Callable[..., Any]:
    """Inductor's compiled callable of ``program`` (positional tensors in, tuple out).

    ``mode="reduce-overhead"`` records CUDA graphs (Inductor's cudagraph trees).
    ``static_inputs``: placeholders that keep their address from call to call (the
    model's weights): a CUDA graph reads them where they are instead of copying them into
    its own input buffers on every call. Inductor learns this the way it does for a
    dynamo graph: the placeholders carry dynamo's static-input mark.

    Runs in a tracing context of its own, so that a compile from inside another
    backend's aot_autograd (pkc's capture) leaves that one's metadata alone. Inductor's
    per-process start-up checks are skipped where an earlier process stored their
    answers (:mod:`pkc.runtime.warm_start`). ``backend_id``: dynamo's id of the graph this
    program compiles, where the program can stand in for it in dynamo's precompile cache
    (:mod:`pkc.runtime.precompile`): Inductor then records its artifact under that id."""
    import torch._guards
    from torch._inductor.compile_fx import compile_fx

    from pkc.runtime import warm_start

    cpu = any(isinstance(x, torch.Tensor) and x.device.type == "cpu" for x in example_inputs)
    warm_start.prime(cpu=cpu)
    patches = dict(options or {})
    if mode in ("reduce-overhead", "max-autotune"):
        patches.setdefault("triton.cudagraphs", True)
    if mode in ("max-autotune", "max-autotune-no-cudagraphs"):
        patches.setdefault("max_autotune", True)
    gm = _aten_graph(program.gm, example_inputs)
    static = set(static_inputs)
    gm.meta["dynamo_compile_id"] = "pkc"
    gm._param_name_to_source = {}        # no lifted parameters: every tensor is a placeholder
    if backend_id is not None:
        gm._backend_id = backend_id      # what AOTAutograd files its bundled entry under
    for k, node in enumerate(gm.graph.find_nodes(op="placeholder")):
        node._dynamo_source = None
        if k in static:
            node.meta["tensor_dict"] = {"_dynamo_static_input_type": "unguarded"}
    with torch._guards.tracing(None):
        compiled = compile_fx(gm, list(example_inputs), config_patches=patches or None)
    warm_start.remember(cpu=cpu)
    return compiled


def aten_program(program: TorchProgram, example_inputs: Sequence[Any]) -> torch.fx.GraphModule:
    """``program`` traced to aten ops, as :func:`compile_with_inductor` hands it to Inductor
    (what pkc.aot_build packages with AOTInductor)."""
    return _aten_graph(program.gm, example_inputs)


def _aten_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> torch.fx.GraphModule:
    """The program traced to aten ops (and pkc's / torch's collective ops): a graph of
    torch operators only, which AOTAutograd's cache accepts (calls of Python functions
    make it bypass the cache), so a second process skips this retrace too."""
    import contextlib

    from torch._guards import detect_fake_mode
    from torch.fx.experimental.proxy_tensor import make_fx

    fake = detect_fake_mode(list(example_inputs))
    with torch._guards.tracing(None), (fake or contextlib.nullcontext()):
        traced = make_fx(gm, tracing_mode="real" if fake else "fake")(*example_inputs)
    return traced
