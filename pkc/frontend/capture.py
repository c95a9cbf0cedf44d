"""Capture: a PyTorch function or nn.Module + example inputs -> an aten-level fx graph.

The path is dynamo (``torch.compile(fullgraph=True, dynamic=False)``) followed by
aot_autograd with the core-aten decompositions: the only route that handles all the ways
users write collectives (funcol, in-place ``dist.all_reduce``, DTensor parallel styles; see
PLATFORM.md "torch capture"). The result is the functional forward graph
(``_c10d_functional.*`` + ``wait_tensor`` for collectives) with a FakeTensor in every
``node.meta["val"]``.

Nothing is executed: tracing runs on FakeTensors and the backend aborts as soon as the
forward graph exists (so no dynamo cache entry is left behind, and recompile limits never
bite however often a model is compiled).

Tracing needs no GPU: initialize torch's fake process group first
(:func:`fake_process_group`), or pass ``world_size`` to :func:`capture` and it does so for
the duration of the capture.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
import torch.fx

from pkc.frontend.capture_support import (_has_hooks, _quiet_fake_tensor_logs,
                                          _rank_independent_dtensor_alltoall, _refuse_rank_reads,
                                          _signature_names, _translate_dynamo_error)
from pkc.frontend.errors import PkcFrontendError
from pkc.kinds import Kind

__all__ = [
    "CapturedGraph",
    "GraphInput",
    "GraphOutput",
    "InputKind",
    "OutputKind",
    "capture",
    "capture_backend",
    "fake_process_group",
    "decompositions",
]


# --------------------------------------------------------------------------------------
# What a capture produces
# --------------------------------------------------------------------------------------


class InputKind(Kind):
    """What a tensor argument of the captured graph is (printed in messages as its value)."""

    INPUT = "input"            # a user input
    PARAMETER = "parameter"    # a module parameter
    BUFFER = "buffer"          # a module buffer
    CONSTANT = "constant"      # a tensor the program closes over


class OutputKind(Kind):
    """What a result of the captured graph is."""

    OUTPUT = "output"          # one of the user's flattened outputs
    MUTATION = "mutation"      # the new value of a graph input mutated in place
    EXTRA = "extra"            # aot_autograd bookkeeping (bases, saved tensors)


@dataclass
class GraphInput:
    """One tensor argument of the captured graph (and of ``@main``), in order.

    ``kind``: ``INPUT`` (a user input; ``user_index`` is its position in
    ``example_inputs``), ``PARAMETER``, ``BUFFER`` (of the module; ``name`` is the
    ``state_dict`` key) or ``CONSTANT`` (a tensor the program closes over). ``value``
    holds the captured tensor for all but inputs. For a DTensor parameter, ``placements``/``mesh_size``/``global_shape``
    describe its sharding and ``shape`` is the local (per-rank) shape.
    """

    name: str
    kind: InputKind
    shape: tuple[int, ...]
    dtype: torch.dtype
    user_index: int | None = None
    placements: tuple[Any, ...] | None = None
    mesh_size: int | None = None
    global_shape: tuple[int, ...] | None = None
    value: torch.Tensor | None = field(default=None, repr=False)

    def __post_init__(self):
        self.kind = InputKind.parse(self.kind, f"graph input '{self.name}'")


@dataclass
class GraphOutput:
    """One result of the graph: ``kind`` is ``OUTPUT`` (the user's ``index``-th
    flattened output), ``MUTATION`` (the new value of graph input ``index``, which the
    program mutated in place) or ``EXTRA`` (aot_autograd bookkeeping: intermediate
    bases, tensors saved for backward)."""

    kind: OutputKind
    index: int

    def __post_init__(self):
        self.kind = OutputKind.parse(self.kind, f"graph output {self.index}")


@dataclass
class CapturedGraph:
    """The aten-level forward graph, what its inputs and outputs are, the world size, and
    the process groups its collectives use (group name -> (size, ranks or None)),
    recorded while the process group existed."""

    gm: torch.fx.GraphModule
    inputs: list[GraphInput]
    outputs: list[GraphOutput]
    world_size: int
    groups: dict[str, tuple[int, list[int] | None]] = field(default_factory=dict)
    # How many positional example inputs the program was traced with (None: unknown, as
    # under torch.compile): a call with more per-rank inputs than this is an error.
    num_user_inputs: int | None = None


def _group_info(gm: torch.fx.GraphModule) -> dict[str, tuple[int, list[int] | None]]:
    """Size and ranks of every process group named by a collective in ``gm``."""
    from torch.distributed.distributed_c10d import _resolve_process_group

    groups: dict[str, tuple[int, list[int] | None]] = {}
    for node in gm.graph.nodes:
        target = node.target
        if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
            continue
        names = [a.name for a in target._schema.arguments]
        if "group_name" not in names:
            continue
        i = names.index("group_name")
        name = node.args[i] if i < len(node.args) else node.kwargs.get("group_name")
        if not isinstance(name, str) or name in groups:
            continue
        try:
            pg = _resolve_process_group(name)
        except Exception:  # noqa: BLE001 - the importer reports unknown groups
            continue
        try:
            ranks = dist.get_process_group_ranks(pg)
        except Exception:  # noqa: BLE001
            ranks = None
        groups[name] = (pg.size(), ranks)
    return groups


# --------------------------------------------------------------------------------------
# Fake process group
# --------------------------------------------------------------------------------------


@contextlib.contextmanager
def fake_process_group(world_size: int, rank: int = 0) -> Iterator[None]:
    """Initialize torch's fake process group of ``world_size`` ranks (this process is
    ``rank``) for the duration of the block: collectives trace but move no data.
    DeviceMesh, DTensor and funcol all work on it."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise PkcFrontendError(
            "a process group is already initialized; destroy it before opening a fake one"
        )
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
    try:
        yield
    finally:
        dist.destroy_process_group()


def current_world_size(world_size: int | None) -> int:
    """The world size to compile for: the explicit one, else the default group's."""
    if dist.is_available() and dist.is_initialized():
        actual = dist.get_world_size()
        if world_size is not None and world_size != actual:
            raise PkcFrontendError(
                f"world_size={world_size} was requested, but the initialized process group "
                f"has {actual} ranks",
                hint="pass world_size equal to the process group's size, or leave it out",
            )
        return actual
    return 1 if world_size is None else world_size


# --------------------------------------------------------------------------------------
# Decompositions
# --------------------------------------------------------------------------------------

_DECOMPS: dict | None = None


def decompositions() -> dict:
    """The decomposition table handed to aot_autograd: torch's core-aten set.

    It keeps gelu, _softmax, addmm, native_layer_norm (the importer lowers those itself)
    and decomposes rms_norm, silu-style composites, linear, matmul, softmax, etc."""
    global _DECOMPS
    if _DECOMPS is None:
        from torch._decomp import core_aten_decompositions

        _DECOMPS = dict(core_aten_decompositions())
    return _DECOMPS


# --------------------------------------------------------------------------------------
# Mapping graph placeholders back to what the user passed
# --------------------------------------------------------------------------------------

_PATH = re.compile(r"_(?:modules|parameters|buffers)\['([^']+)'\]")
_LOCAL = re.compile(r"^L\['([^']+)'\]$")


def _source_name(source: Any) -> str:
    try:
        return source.name if isinstance(source.name, str) else source.name()
    except Exception:  # noqa: BLE001 - a name is only cosmetic
        return str(source)


def _dotted(source_name: str) -> str:
    """``L['self']._modules['fc1']._parameters['weight']`` -> ``fc1.weight``."""
    parts = _PATH.findall(source_name)
    if parts:
        return ".".join(parts)
    m = _LOCAL.match(source_name)
    return m.group(1) if m else source_name


@dataclass
class _DynamoArg:
    name: str
    kind: InputKind
    example: torch.Tensor
    user_index: int | None = None
    local_shape: tuple[int, ...] = ()
    dtensor: tuple[tuple, int, tuple[int, ...]] | None = None


def _dtensor_info(t: torch.Tensor) -> tuple[tuple, int, tuple[int, ...]] | None:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # pragma: no cover
        return None
    if isinstance(t, DTensor):
        return tuple(t.placements), t.device_mesh.size(), tuple(t.shape)
    return None


def _local_shape(t: torch.Tensor) -> tuple[int, ...]:
    # Not to_local(): that is an op, and this may run under aot's FakeTensorMode.
    if _dtensor_info(t) is not None:
        return tuple(t._local_tensor.shape)  # type: ignore[attr-defined]
    return tuple(t.shape)


def _classify_dynamo_inputs(
    gm: torch.fx.GraphModule,
    module: torch.nn.Module | None,
    example_inputs: Sequence[Any] | None,
    user_names: Sequence[str] | None,
) -> list[_DynamoArg]:
    """The tensor placeholders of dynamo's graph, each named and classified."""
    by_id: dict[int, tuple[InputKind, str, int | None]] = {}
    if module is not None:
        for name, p in module.named_parameters(remove_duplicate=False):
            by_id.setdefault(id(p), (InputKind.PARAMETER, name, None))
        for name, b in module.named_buffers(remove_duplicate=False):
            by_id.setdefault(id(b), (InputKind.BUFFER, name, None))
    if example_inputs is not None:
        for i, x in enumerate(example_inputs):
            if isinstance(x, torch.Tensor):
                name = user_names[i] if user_names and i < len(user_names) else f"input{i}"
                by_id[id(x)] = (InputKind.INPUT, name, i)

    args: list[_DynamoArg] = []
    user_count = 0
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        grapharg = node.meta.get("grapharg")
        example = getattr(grapharg, "example", None) if grapharg is not None else None
        value = node.meta.get("example_value")
        if isinstance(value, torch.SymInt) or isinstance(example, torch.SymInt):
            what = _source_name(grapharg.source) if getattr(grapharg, "source", None) else "?"
            raise PkcFrontendError(
                f"dynamic shape: graph input '{node.name}' is a symbolic size ({what} = "
                f"{value}); pkc compiles static shapes only",
                node=node,
                hint="do not mark dimensions dynamic (torch._dynamo.mark_dynamic) and "
                "compile with dynamic=False",
            )
        if not isinstance(example, torch.Tensor):
            continue  # a DeviceMesh, an opaque object: not a tensor argument
        source = _source_name(grapharg.source) if grapharg.source is not None else node.name
        if id(example) in by_id:
            kind, name, user_index = by_id[id(example)]
        elif module is None and example_inputs is None:
            # torch.compile backend: no module at hand, classify by dynamo's source.
            kind = InputKind.PARAMETER if "_parameters[" in source else (
                InputKind.BUFFER if "_buffers[" in source else InputKind.INPUT)
            name = _dotted(source)
            user_index = None
            if kind is InputKind.INPUT:
                user_index = user_count
                user_count += 1
        else:
            kind, name, user_index = InputKind.CONSTANT, _dotted(source), None
        args.append(_DynamoArg(name, kind, example, user_index, _local_shape(example),
                               _dtensor_info(example)))
    return args


def _graph_inputs(
    fw: torch.fx.GraphModule, dyn_args: list[_DynamoArg]
) -> list[GraphInput]:
    """Pairs the tensor placeholders of aot's forward graph with dynamo's arguments.

    DTensor arguments arrive in the forward graph as their local tensor (plus opaque
    non-tensor placeholders, which carry no data and must be unused)."""
    tensor_nodes = []
    for node in fw.graph.nodes:
        if node.op != "placeholder":
            continue
        val = node.meta.get("val")
        if isinstance(val, torch.SymInt):
            raise PkcFrontendError(
                f"dynamic shape: graph input '{node.name}' is a symbolic size ({val}); "
                "pkc compiles static shapes only",
                node=node,
                hint="do not mark dimensions dynamic (torch._dynamo.mark_dynamic)",
            )
        if isinstance(val, torch.Tensor):
            tensor_nodes.append(node)
        elif node.users:
            raise PkcFrontendError(
                f"graph input '{node.name}' of type {type(val).__name__} is used by the "
                "program; pkc only takes tensor inputs",
                node=node,
            )
    if len(tensor_nodes) != len(dyn_args):
        raise PkcFrontendError(
            f"cannot match the {len(tensor_nodes)} tensor inputs of the aten graph with the "
            f"{len(dyn_args)} tensors dynamo lifted ({', '.join(a.name for a in dyn_args)})",
            hint="is one tensor passed twice, or an input mutated through an alias?",
        )
    inputs: list[GraphInput] = []
    for node, arg in zip(tensor_nodes, dyn_args):
        val = node.meta["val"]
        shape = tuple(int(d) if not isinstance(d, torch.SymInt) else d for d in val.shape)
        if 0 in shape:
            raise PkcFrontendError(
                f"{arg.kind} '{arg.name}' is empty (shape {list(shape)}); pkc compiles "
                "tensors with at least one element",
                hint="a dimension of size 0 (an empty batch, a shard of nothing) cannot be "
                "tiled: skip the call, or pad the input",
            )
        if shape != arg.local_shape:
            raise PkcFrontendError(
                f"graph input '{node.name}' has shape {shape}, but its tensor '{arg.name}' "
                f"has local shape {arg.local_shape}",
                node=node,
            )
        info = arg.dtensor
        inputs.append(
            GraphInput(
                name=arg.name,
                kind=arg.kind,
                shape=shape,
                dtype=val.dtype,
                user_index=arg.user_index,
                placements=info[0] if info else None,
                mesh_size=info[1] if info else None,
                global_shape=info[2] if info else None,
                value=arg.example if arg.kind is not InputKind.INPUT else None,
            )
        )
    return inputs


def _graph_outputs(fw: torch.fx.GraphModule) -> list[GraphOutput]:
    out_node = next(n for n in reversed(fw.graph.nodes) if n.op == "output")
    n_out = len(out_node.args[0])
    try:
        from torch._guards import TracingContext

        meta = TracingContext.try_get().fw_metadata  # type: ignore[union-attr]
        mutated = list(meta.mutated_inp_runtime_indices)
        n_user = meta.num_outputs
    except Exception:  # noqa: BLE001 - without metadata, every result is an output
        mutated, n_user = [], n_out
    outputs = [GraphOutput(OutputKind.MUTATION, i) for i in mutated]
    outputs += [GraphOutput(OutputKind.OUTPUT, j) for j in range(n_user)]
    outputs += [GraphOutput(OutputKind.EXTRA, k) for k in range(n_out - len(outputs))]
    return outputs[:n_out]


# --------------------------------------------------------------------------------------
# The dynamo backend
# --------------------------------------------------------------------------------------


class _CaptureDone(Exception):
    """Raised from the backend to stop dynamo once the graph is in hand."""

    def __init__(self, captured: CapturedGraph) -> None:
        super().__init__("pkc capture finished")
        self.captured = captured


OnGraph = Callable[[CapturedGraph], Callable[..., Any]]


def capture_backend(
    on_graph: OnGraph,
    *,
    world_size: int | None = None,
    module: torch.nn.Module | None = None,
    example_inputs: Sequence[Any] | None = None,
    user_names: Sequence[str] | None = None,
) -> Callable[[torch.fx.GraphModule, list], Callable[..., Any]]:
    """A dynamo backend: runs aot_autograd and hands each forward graph to ``on_graph``,
    which returns the callable that runs it (or raises to stop)."""

    def backend(gm: torch.fx.GraphModule, dyn_example_inputs: list) -> Callable[..., Any]:
        from functorch.compile import make_boxed_func
        from torch._functorch.aot_autograd import aot_module_simplified

        dyn_args = _classify_dynamo_inputs(gm, module, example_inputs, user_names)
        w = current_world_size(world_size)

        def fw_compiler(fw: torch.fx.GraphModule, _args: list) -> Callable[..., Any]:
            captured = CapturedGraph(fw, _graph_inputs(fw, dyn_args), _graph_outputs(fw), w,
                                     _group_info(fw))
            return make_boxed_func(on_graph(captured))

        def bw_compiler(bw: torch.fx.GraphModule, _args: list) -> Callable[..., Any]:
            return make_boxed_func(bw.forward)

        return aot_module_simplified(
            gm,
            dyn_example_inputs,
            fw_compiler=fw_compiler,
            bw_compiler=bw_compiler,
            decompositions=decompositions(),
        )

    return backend


# --------------------------------------------------------------------------------------
# capture()
# --------------------------------------------------------------------------------------


def capture(
    fn: Callable[..., Any] | torch.nn.Module,
    example_inputs: Sequence[Any] | torch.Tensor,
    *,
    world_size: int | None = None,
) -> CapturedGraph:
    """Trace ``fn`` on ``example_inputs`` into an aten-level functional forward graph.

    ``example_inputs`` are the positional arguments (rank 0's, for a program whose inputs
    differ per rank: only shapes and dtypes matter). If no process group is initialized
    and ``world_size`` is given, a fake one of that size is opened for the capture.
    Parameters and buffers of a module become graph inputs (see :class:`GraphInput`).
    """
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    example_inputs = tuple(example_inputs)
    names = _signature_names(fn, example_inputs)

    if world_size is not None and world_size > 1 and not dist.is_initialized():
        with fake_process_group(world_size):
            return capture(fn, example_inputs, world_size=world_size)
    w = current_world_size(world_size)

    def on_graph(captured: CapturedGraph) -> Callable[..., Any]:
        raise _CaptureDone(captured)

    module = fn if isinstance(fn, torch.nn.Module) else getattr(fn, "__self__", None)
    if not isinstance(module, torch.nn.Module):
        module = None
    backend = capture_backend(
        on_graph, world_size=w, module=module, example_inputs=example_inputs, user_names=names
    )
    from torch._dynamo.exc import BackendCompilerFailed

    # torch.compile(module) traces forward() alone and runs the module's own hooks
    # (DTensor's input/output redistribution among them) as separate graphs, which a
    # one-graph capture would miss: then compile a call of the module instead.
    target = (lambda *args: fn(*args)) if _has_hooks(fn) else fn
    compiled = torch.compile(target, backend=backend, fullgraph=True, dynamic=False)
    try:
        with torch.no_grad(), _quiet_fake_tensor_logs(), _rank_independent_dtensor_alltoall(), \
                _refuse_rank_reads():
            compiled(*example_inputs)
    except BackendCompilerFailed as err:
        inner = err.inner_exception
        if isinstance(inner, _CaptureDone):
            inner.captured.num_user_inputs = len(example_inputs)
            return inner.captured
        if isinstance(inner, PkcFrontendError):
            raise inner.with_traceback(None) from None
        raise
    except PkcFrontendError as err:
        raise err.with_traceback(None) from None
    except Exception as err:  # noqa: BLE001 - translated below or re-raised
        translated = _translate_dynamo_error(err)
        if translated is None:
            raise
        raise translated from None
    raise PkcFrontendError(
        "dynamo ran the program without producing a graph (was it already compiled "
        "with torch.compile, or does it contain no tensor operations?)"
    )
