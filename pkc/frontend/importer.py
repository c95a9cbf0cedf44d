"""Import: an aten-level fx graph (from :mod:`pkc.frontend.capture`) -> graph-level pk IR.

The result is a ``builtin.module`` holding ``func.func @main``: one argument per tensor
placeholder (in order, each with a ``pk.name`` argument attribute naming the user input or
parameter), one result per graph output, and graph-level pk ops in between.

What maps to what:

- ``mm``/``bmm``/``addmm``/``baddbmm`` -> ``pk.matmul`` (+ ``pk.map`` for bias, alpha,
  beta); views, ``t``/``transpose``/``permute``, ``expand``, ``slice``/``select``/
  ``narrow``/``split``/``unbind``, ``cat``/``stack`` -> reshape / transpose / broadcast /
  slice / concat; elementwise aten ops -> ``pk.map`` (with explicit casts where torch
  promotes types); ``sum``/``mean``/``amax``/``amin``/``var`` -> ``pk.reduce``;
  ``_softmax``, ``_log_softmax``, ``native_layer_norm``, ``_fused_rms_norm`` -> their
  arithmetic (in f32 for 16-bit inputs, as torch does); dtype conversions -> ``cast``.
- ``_c10d_functional.{all_reduce, all_gather_into_tensor, reduce_scatter_tensor,
  all_to_all_single}`` (and ``_coalesced`` forms, ``_dtensor.shard_dim_alltoall``) ->
  pk collectives; ``wait_tensor`` disappears. A collective over a sub-group (a dimension
  of a device mesh) carries ``group_ranks``: every group of that dimension, inferred from
  the traced rank's group (:func:`pkc.dialects.rank_groups.infer_partition`).
- Anything else -> ``pk.opaque`` (runs through torch; see :mod:`pkc.dialects.opaque`),
  with one :class:`PkcNotCompiledWarning` per distinct op.

Errors (symbolic shapes, a sub-group pkc cannot place, unsupported collectives or dtypes) raise
:class:`~pkc.frontend.errors.PkcFrontendError` naming the fx node, the op and the user's
source line. Every op carries the user's source line as its location.
"""

from __future__ import annotations

import logging
import operator
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    ArrayAttr,
    BFloat16Type,
    DictionaryAttr,
    FileLineColLoc,
    Float16Type,
    Float32Type,
    Float64Type,
    IntAttr,
    IntegerType,
    ModuleOp,
    StringAttr,
    TensorType,
    bf16,
    f16,
    f32,
    f64,
    i1,
    i32,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue

from pkc.dialects import graph as g
from pkc.dialects.common import FLOAT_ONLY_FNS
from pkc.dialects.opaque import OpaqueEncodingError, encode_call, qualified_name
from pkc.dialects.rank_groups import infer_partition, rank_groups
from pkc.frontend.errors import PkcFrontendError, node_source

__all__ = ["import_graph", "ImportedGraph", "PkcNotCompiledWarning", "element_type", "torch_dtype_of"]

log = logging.getLogger("pkc.frontend")
aten = torch.ops.aten


class PkcNotCompiledWarning(UserWarning):
    """An op of the user's program that pkc keeps as ``pk.opaque`` (runs through torch)."""


_ELEMENTS: dict[torch.dtype, Attribute] = {
    torch.float32: f32,
    torch.bfloat16: bf16,
    torch.float16: f16,
    torch.float64: f64,
    torch.int64: i64,
    torch.int32: i32,
    torch.int8: IntegerType(8),
    torch.bool: i1,
}


def element_type(dtype: torch.dtype) -> Attribute | None:
    return _ELEMENTS.get(dtype)


def torch_dtype_of(elem: Attribute) -> torch.dtype:
    for d, e in _ELEMENTS.items():
        if e == elem:
            return d
    raise KeyError(elem)


def _is_float(elem: Attribute) -> bool:
    return isinstance(elem, (BFloat16Type, Float16Type, Float32Type, Float64Type))


def _wide(elem: Attribute) -> Attribute:
    """The element type torch computes normalizations in: f32 for 16-bit floats."""
    return f32 if isinstance(elem, (BFloat16Type, Float16Type)) else elem


@dataclass
class ImportedGraph:
    """The imported module, the ops that run through torch, and constants that the
    importer turned into extra trailing arguments of ``@main`` (name, value)."""

    module: ModuleOp
    not_compiled: dict[str, int] = field(default_factory=dict)
    extra_args: list[tuple[str, torch.Tensor]] = field(default_factory=list)


Value = SSAValue
Handler = Callable[["_Importer", torch.fx.Node, dict[str, Any]], Any]
_HANDLERS: dict[Any, Handler] = {}


def _handles(*packets: Any) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        for p in packets:
            if p is not None:
                _HANDLERS[p] = fn
        return fn

    return register


def _op(ns: str, name: str) -> Any:
    """``torch.ops.ns.name`` if this torch has it, else None."""
    try:
        return getattr(getattr(torch.ops, ns), name)
    except (AttributeError, RuntimeError):
        return None


class _Unsupported(Exception):
    """A handler's way of saying: keep this node as pk.opaque."""


def _bind(node: torch.fx.Node) -> dict[str, Any]:
    """The node's arguments by schema name, defaults filled in."""
    schema = node.target._schema  # type: ignore[union-attr]
    out: dict[str, Any] = {}
    pos = 0
    for a in schema.arguments:
        if not a.kwarg_only and pos < len(node.args):
            out[a.name] = node.args[pos]
            pos += 1
        elif a.name in node.kwargs:
            out[a.name] = node.kwargs[a.name]
        elif a.has_default_value():
            out[a.name] = a.default_value
        else:
            out[a.name] = None
    return out


def _norm_dim(d: int, rank: int) -> int:
    return d + rank if d < 0 else d


def _norm_dims(dims: Any, rank: int) -> list[int]:
    if dims is None:
        return list(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    dims = list(dims)
    if not dims:
        return list(range(rank))
    return sorted({_norm_dim(int(d), max(rank, 1)) for d in dims})


@dataclass(frozen=True)
class _Group:
    """The ranks one collective spans: ``size`` ranks; ``groups`` lists every group of its
    mesh dimension (None: the whole world)."""

    size: int
    groups: list[list[int]] | None


class _Importer:
    def __init__(self, gm: torch.fx.GraphModule, world_size: int, arg_names: Sequence[str] | None,
                 func_name: str, groups: dict[str, tuple[int, list[int] | None]] | None = None,
                 arg_order: Sequence[int] | None = None) -> None:
        self.gm = gm
        self.groups = dict(groups or {})
        self.arg_order = list(arg_order) if arg_order is not None else None
        self.world = world_size
        self.arg_names = list(arg_names) if arg_names is not None else None
        self.func_name = func_name
        self.block = Block()
        self.env: dict[torch.fx.Node, Any] = {}
        self.node: torch.fx.Node | None = None
        self.loc: FileLineColLoc | None = None
        self.not_compiled: dict[str, int] = {}
        self.extra_args: list[tuple[str, torch.Tensor]] = []
        self.arg_attr_names: list[str] = []
        # Nodes computed at import time (they depend on no input): node -> value.
        self.folded: dict[torch.fx.Node, Any] = {}

    # ---------------------------------------------------------------- errors, types

    def error(self, reason: str, node: torch.fx.Node | None = None, **kw: Any) -> PkcFrontendError:
        return PkcFrontendError(reason, node=node or self.node, **kw)

    def tensor_type(self, val: Any, node: torch.fx.Node) -> TensorType:
        if not isinstance(val, torch.Tensor):
            raise self.error(f"expected a tensor value, got {type(val).__name__}", node)
        shape = []
        for d in val.shape:
            if not isinstance(d, int):
                raise self.error(
                    f"dynamic shape: the value of '{node.name}' has symbolic size "
                    f"{tuple(val.shape)}; pkc compiles static shapes only",
                    node,
                    hint="do not mark dimensions dynamic; compile with dynamic=False",
                )
            shape.append(d)
        elem = element_type(val.dtype)
        if elem is None:
            raise self.error(f"dtype {val.dtype} of '{node.name}' is not supported by pkc", node)
        return TensorType(elem, shape)

    def out_type(self, node: torch.fx.Node, index: int | None = None) -> TensorType:
        val = node.meta.get("val")
        if index is not None:
            val = val[index]
        return self.tensor_type(val, node)

    # ---------------------------------------------------------------- building blocks

    def emit(self, op: Operation) -> Operation:
        if self.loc is not None:
            op.location = self.loc
        self.block.add_op(op)
        return op

    def value(self, x: Any) -> Value:
        if isinstance(x, torch.fx.Node):
            if x not in self.env and x in self.folded:
                self.env[x] = self.materialize(x)
            v = self.env.get(x)
            if isinstance(v, SSAValue):
                return v
            raise self.error(f"operand '{x.name}' is not a single tensor ({type(v).__name__})")
        raise _Unsupported(f"operand {x!r} is not a tensor")

    @staticmethod
    def shape(v: Value) -> tuple[int, ...]:
        return tuple(v.type.get_shape())  # type: ignore[attr-defined]

    @staticmethod
    def elem(v: Value) -> Attribute:
        return v.type.element_type  # type: ignore[attr-defined]

    def cast(self, v: Value, elem: Attribute) -> Value:
        if self.elem(v) == elem:
            return v
        return self.emit(g.MapOp("cast", [v], TensorType(elem, self.shape(v)))).results[0]

    def reshape(self, v: Value, shape: Sequence[int]) -> Value:
        if isinstance(v.owner, g.ReshapeOp):  # reshape(reshape(x)) == reshape(x)
            v = v.owner.input
        if self.shape(v) == tuple(shape):
            return v
        return self.emit(g.ReshapeOp(v, TensorType(self.elem(v), list(shape)))).results[0]

    def broadcast(self, v: Value, shape: Sequence[int]) -> Value:
        if self.shape(v) == tuple(shape):
            return v
        return self.emit(g.BroadcastOp(v, TensorType(self.elem(v), list(shape)))).results[0]

    def transpose(self, v: Value, perm: Sequence[int]) -> Value:
        if isinstance(v.owner, g.TransposeOp):  # compose transpose(transpose(x))
            inner = [p.value.data for p in v.owner.perm.data]
            perm = [inner[p] for p in perm]
            v = v.owner.input
        if list(perm) == list(range(len(perm))):
            return v
        return self.emit(g.TransposeOp(v, list(perm))).results[0]

    def const(self, value: float | int | bool, elem: Attribute, rank: int) -> Value:
        if _is_float(elem):
            value = float(value)
        else:
            value = int(value)
        return self.emit(g.ConstantOp(value, TensorType(elem, [1] * rank))).results[0]

    def operand(self, x: Any, elem: Attribute, rank: int) -> Value:
        """A tensor operand cast to ``elem``, or a python scalar as a splat constant."""
        if isinstance(x, torch.fx.Node):
            return self.cast(self.value(x), elem)
        if isinstance(x, (bool, int, float)):
            return self.const(x, elem, rank)
        raise _Unsupported(f"operand {x!r}")

    def map(self, fn: str, inputs: Sequence[Value], elem: Attribute | None = None) -> Value:
        from pkc.dialects.common import broadcast_shapes

        shape = broadcast_shapes("pk.map", [self.shape(v) for v in inputs])
        if elem is None:
            elem = i1 if fn in ("eq", "ne", "lt", "le", "gt", "ge") else self.elem(inputs[-1])
        if fn in FLOAT_ONLY_FNS and not _is_float(self.elem(inputs[-1])):
            raise _Unsupported(f"{fn} on integers")
        return self.emit(g.MapOp(fn, list(inputs), TensorType(elem, list(shape)))).results[0]

    def reduce(self, fn: str, v: Value, dims: Sequence[int], keepdim: bool) -> Value:
        if not dims:
            return v
        return self.emit(g.ReduceOp(fn, v, list(dims), keepdim)).results[0]

    def slice(self, v: Value, dim: int, start: int, end: int, step: int = 1) -> Value:
        size = self.shape(v)[dim]
        if start == 0 and end == size and step == 1:
            return v
        return self.emit(g.SliceOp(v, dim, start, end, step)).results[0]

    def concat(self, vs: Sequence[Value], dim: int) -> Value:
        if len(vs) == 1:
            return vs[0]
        return self.emit(g.ConcatOp(list(vs), dim)).results[0]

    def finish(self, v: Value, t: TensorType) -> Value:
        """Cast and broadcast ``v`` to the node's type (shape and dtype from its meta)."""
        v = self.cast(v, t.element_type)
        shape = tuple(t.get_shape())
        if self.shape(v) != shape:
            import math

            if math.prod(self.shape(v)) == math.prod(shape):
                v = self.reshape(v, shape)
            else:
                v = self.broadcast(v, shape)
        return v

    # ---------------------------------------------------------------- promotion

    @staticmethod
    def _proxy(x: Any) -> Any:
        if isinstance(x, torch.fx.Node):
            val = x.meta.get("val")
            if isinstance(val, torch.Tensor):
                return torch.empty((1,) * val.dim(), dtype=val.dtype, device="meta")
            return val
        return x

    def promoted(self, a: Any, b: Any) -> Attribute:
        dtype = torch.result_type(self._proxy(a), self._proxy(b))
        elem = element_type(dtype)
        if elem is None:
            raise _Unsupported(f"dtype {dtype}")
        return elem

    # ---------------------------------------------------------------- the walk

    def live_nodes(self) -> set[torch.fx.Node]:
        out = next(n for n in reversed(self.gm.graph.nodes) if n.op == "output")
        live: set[torch.fx.Node] = set()
        stack = [out]
        while stack:
            n = stack.pop()
            if n in live:
                continue
            live.add(n)
            if n.op == "call_function" and n.target is aten.copy.default:
                deps = [n.args[1]] if isinstance(n.args[1], torch.fx.Node) else []
            else:
                deps = n.all_input_nodes
            stack.extend(deps)
        return live

    def run(self) -> ImportedGraph:
        live = self.live_nodes()
        placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        tensor_nodes: list[tuple[torch.fx.Node, TensorType]] = []
        for n in placeholders:
            val = n.meta.get("val")
            if isinstance(val, torch.SymInt) or (
                isinstance(val, torch.Tensor) and any(not isinstance(d, int) for d in val.shape)
            ):
                raise self.error(
                    f"dynamic shape: graph input '{n.name}' is symbolic ({val}); pkc compiles "
                    "static shapes only", n,
                    hint="do not mark dimensions dynamic (torch._dynamo.mark_dynamic)",
                )
            if not isinstance(val, torch.Tensor):
                if n.users:
                    raise self.error(f"graph input '{n.name}' is not a tensor ({type(val).__name__})", n)
                continue
            tensor_nodes.append((n, self.tensor_type(val, n)))
        order = self.arg_order if self.arg_order is not None else range(len(tensor_nodes))
        if sorted(order) != list(range(len(tensor_nodes))):
            raise self.error(f"arg_order {list(order)} is not a permutation of the "
                             f"{len(tensor_nodes)} tensor inputs")
        for i in order:
            n, t = tensor_nodes[i]
            self.env[n] = self.block.insert_arg(t, len(self.block.args))
            name = self.arg_names[i] if self.arg_names and i < len(self.arg_names) else n.name
            self.arg_attr_names.append(name)

        results: list[Value] = []
        for n in self.gm.graph.nodes:
            if n.op == "placeholder" or n not in live:
                continue
            self.node = n
            src = node_source(n)
            self.loc = (
                FileLineColLoc(StringAttr(src.file), IntAttr(src.line), IntAttr(1)) if src else None
            )
            if n.op == "output":
                results = self.outputs(n)
            elif n.op == "get_attr":
                self.get_attr(n)
            elif n.op == "call_function":
                if not self.try_fold(n):
                    self.env[n] = self.call(n)
            else:
                raise self.error(f"unexpected fx node kind '{n.op}'", n)
        self.node, self.loc = None, None
        self.block.add_op(func.ReturnOp(*results))
        _simplify(self.block)
        arg_types = [a.type for a in self.block.args]
        names = self.arg_attr_names + [name for name, _ in self.extra_args]
        arg_attrs = ArrayAttr([DictionaryAttr({"pk.name": StringAttr(nm)}) for nm in names])
        fn = func.FuncOp(
            self.func_name, (arg_types, [r.type for r in results]), Region(self.block),
            arg_attrs=arg_attrs,
        )
        return ImportedGraph(ModuleOp([fn]), self.not_compiled, self.extra_args)

    def outputs(self, n: torch.fx.Node) -> list[Value]:
        flat: list[Value] = []

        def visit(x: Any) -> None:
            if isinstance(x, (list, tuple)):
                for y in x:
                    visit(y)
            elif isinstance(x, torch.fx.Node):
                flat.append(self.value(x))
            else:
                raise self.error(f"graph output {x!r} is not a tensor", n)

        visit(n.args[0])
        return flat

    def get_attr(self, n: torch.fx.Node) -> None:
        obj = self.gm
        for part in str(n.target).split("."):
            obj = getattr(obj, part)
        if not isinstance(obj, torch.Tensor):
            raise self.error(f"graph attribute '{n.target}' is not a tensor", n)
        self.folded[n] = obj.detach()

    def materialize(self, n: torch.fx.Node) -> Value:
        """The IR value of a folded node: a splat ``pk.constant``, or else a trailing
        argument of ``@main`` whose value :mod:`pkc.api` passes (``extra_args``)."""
        val = self.folded[n]
        if not isinstance(val, torch.Tensor):
            raise self.error(f"'{n.name}' is not a tensor ({type(val).__name__})", n)
        t = self.tensor_type(val, n)
        flat = val.reshape(-1)
        if flat.numel() > 0 and bool((flat == flat[0]).all()):
            op = g.ConstantOp(flat[0].item(), t)
            op.location = self.loc
            self.block.add_op(op)
            return op.results[0]
        name = str(n.target) if n.op == "get_attr" else f"const.{n.name}"
        self.extra_args.append((name, val.clone()))
        return self.block.insert_arg(t, len(self.block.args))

    _FOLD_LIMIT = 1 << 16  # elements: bigger constants are computed in the IR

    def try_fold(self, n: torch.fx.Node) -> bool:
        """Compute ``n`` now if it depends on no input (an ``arange``, a causal mask)."""
        target = n.target
        if any(x not in self.folded for x in n.all_input_nodes):
            return False
        if target is operator.getitem:
            self.folded[n] = self.folded[n.args[0]][n.args[1]]
            return True
        if not isinstance(target, torch._ops.OpOverload):
            return False
        if target.namespace != "aten" or torch.Tag.nondeterministic_seeded in target.tags:
            return False
        if target.overloadpacket in (aten.empty, aten.empty_like, aten.new_empty,
                                     aten.empty_strided, aten.new_empty_strided):
            return False
        val = n.meta.get("val")
        vals = val if isinstance(val, (list, tuple)) else [val]
        if not all(isinstance(v, torch.Tensor) and v.numel() <= self._FOLD_LIMIT for v in vals):
            return False
        args, kwargs = torch.fx.node.map_arg((n.args, n.kwargs), lambda x: self.folded[x])
        try:
            self.folded[n] = target(*args, **kwargs)
        except Exception:  # noqa: BLE001 - not foldable after all: import it normally
            return False
        return True

    def call(self, n: torch.fx.Node) -> Any:
        target = n.target
        if target is operator.getitem:
            src, index = n.args
            val = self.env[src]
            if not isinstance(val, (list, tuple)) or val[index] is None:
                raise self.error(f"output {index} of '{src.name}' is not available", n)
            return val[index]
        if not isinstance(target, torch._ops.OpOverload):
            raise self.error(
                f"'{getattr(target, '__name__', target)}' is not a torch operator; the aten "
                "graph should contain only torch ops (symbolic shape arithmetic?)", n,
            )
        val = n.meta.get("val")
        self._check_static(n, val)
        handler = _HANDLERS.get(target.overloadpacket) or _HANDLERS.get(target)
        if handler is not None:
            mark = len(self.block.ops)
            known = set(self.env)
            try:
                return handler(self, n, _bind(n))
            except _Unsupported:
                # Roll back the ops the handler emitted before giving up (constants it
                # materialized included: they are materialized again when needed).
                emitted = list(self.block.ops)[mark:]
                for node in [k for k in self.env if k not in known]:
                    v = self.env[node]
                    if isinstance(v, SSAValue) and v.owner in emitted:
                        del self.env[node]
                for op in reversed(emitted):
                    op.detach()
                    op.erase(safe_erase=False)
        return self.opaque(n)

    def _check_static(self, n: torch.fx.Node, val: Any) -> None:
        vals = val if isinstance(val, (list, tuple)) else [val]
        for v in vals:
            if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
                raise self.error(
                    f"data-dependent or dynamic value: '{n.name}' produces a symbolic scalar "
                    f"({v}); pkc compiles static shapes only", n,
                )
            if isinstance(v, torch.Tensor) and any(not isinstance(d, int) for d in v.shape):
                raise self.error(
                    f"dynamic shape: '{n.name}' has symbolic size {tuple(v.shape)}; pkc "
                    "compiles static shapes only", n,
                    hint="do not mark dimensions dynamic; compile with dynamic=False",
                )

    # ---------------------------------------------------------------- opaque

    def opaque(self, n: torch.fx.Node) -> Any:
        target = n.target
        assert isinstance(target, torch._ops.OpOverload)
        ns = target.namespace
        if ns in ("_c10d_functional", "_c10d_functional_autograd", "c10d", "_dtensor", "symm_mem"):
            raise self.error(
                f"collective {target} is not supported by pkc (pkc compiles all_reduce, "
                "all_gather_into_tensor, reduce_scatter_tensor and all_to_all_single with equal "
                "splits over the whole world)", n,
            )
        try:
            tensors, spec = encode_call(n.args, n.kwargs)
        except OpaqueEncodingError as err:
            raise self.error(f"cannot keep {target} as an opaque torch op: {err}", n) from None
        operands = [self.value(t) for t in tensors]
        val = n.meta.get("val")
        multi = isinstance(val, (list, tuple))
        vals = list(val) if multi else [val]
        if any(not isinstance(v, torch.Tensor) for v in vals):
            raise self.error(
                f"{target} returns {type(val).__name__} with non-tensor parts; pkc cannot keep "
                "it as an opaque op", n,
            )
        result_types = [self.tensor_type(v, n) for v in vals]
        op = self.emit(g.OpaqueOp(qualified_name(target), operands, spec, result_types))
        name = str(target)
        if name not in self.not_compiled:
            msg = f"pkc: not compiled, runs through torch: {name}"
            src = node_source(n)
            if src is not None:  # the note points at the user's line
                warnings.warn_explicit(msg, PkcNotCompiledWarning, src.file, src.line)
            else:
                warnings.warn(msg, PkcNotCompiledWarning, stacklevel=2)
            log.info(msg)
        self.not_compiled[name] = self.not_compiled.get(name, 0) + 1
        return tuple(op.results) if multi else op.results[0]

    # ---------------------------------------------------------------- collectives

    def check_group(self, group_name: Any, group_size: int | None = None) -> "_Group":
        """The ranks a collective spans: the whole world, or the sub-groups of a device-mesh
        dimension (``group_ranks``; see :mod:`pkc.dialects.rank_groups`)."""
        size, ranks = group_size, None
        if isinstance(group_name, str) and group_name in self.groups:
            size, ranks = self.groups[group_name]
        else:
            size, ranks = self._resolve_group(group_name, group_size)
        if size == self.world and (ranks is None or sorted(ranks) == list(range(self.world))):
            return _Group(size, None)
        who = f"ranks {ranks}" if ranks is not None else f"{size} ranks"
        if size is None or ranks is None or self.world % size:
            raise self.error(
                f"collective over process group '{group_name}' ({who}) in a world of {self.world} "
                "ranks: pkc needs the group's ranks to tell the other groups of its mesh dimension",
                hint="use a DeviceMesh (init_device_mesh) or groups made with dist.new_group",
            )
        partition = infer_partition(ranks, self.world)
        if partition is None:
            raise self.error(
                f"collective over process group '{group_name}' ({who}) in a world of {self.world} "
                "ranks: its translates do not tile the world, so pkc cannot tell the other "
                "groups (pkc supports the groups of a regular device mesh's dimension)",
                hint="lay ranks out with init_device_mesh((dp, tp)) (row-major), so that the "
                "groups of a dimension are [0, 1], [2, 3], ... or [0, 2], [1, 3], ...",
            )
        return _Group(size, partition)

    @staticmethod
    def _resolve_group(group_name: Any, group_size: int | None) -> tuple[int | None, list[int] | None]:
        import torch.distributed as dist

        size, ranks = group_size, None
        try:
            from torch.distributed.distributed_c10d import _resolve_process_group

            pg = _resolve_process_group(group_name)
            size = pg.size()
            try:
                ranks = dist.get_process_group_ranks(pg)
            except Exception:  # noqa: BLE001 - ranks are a refinement only
                ranks = None
        except Exception:  # noqa: BLE001 - an unknown group: judge by its size
            pass
        return size, ranks


# ====================================================================================
# Handlers. Each takes (importer, node, bound args) and returns the node's value: an
# SSAValue, or a tuple of them for multi-result ops. Raising _Unsupported falls back to
# pk.opaque.
# ====================================================================================


def _rank(n: torch.fx.Node) -> int:
    return n.meta["val"].dim()


# ---- identity-like and views ---------------------------------------------------------


@_handles(aten.clone, aten.alias, aten.detach, aten.lift_fresh_copy, aten.contiguous,
          _op("_c10d_functional", "wait_tensor"), _op("_c10d_functional_autograd", "wait_tensor"),
          aten.alias_copy, aten.detach_copy)
def _identity(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    return im.finish(im.value(n.args[0]), im.out_type(n))


@_handles(aten.view, aten._unsafe_view, aten.reshape, aten.view_copy, aten.unsqueeze,
          aten.squeeze, aten.flatten, aten.unflatten, aten.unsqueeze_copy, aten.squeeze_copy,
          aten._reshape_alias)
def _reshape(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    if n.target is aten.view.dtype:
        raise _Unsupported("bitcast view")
    t = im.out_type(n)
    return im.reshape(im.value(n.args[0]), t.get_shape())


@_handles(aten.t, aten.transpose, aten.permute, aten.permute_copy, aten.transpose_copy, aten.t_copy)
def _permute(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    x = im.value(n.args[0])
    rank = len(im.shape(x))
    packet = n.target.overloadpacket
    if packet in (aten.t, aten.t_copy):
        perm = [1, 0] if rank == 2 else list(range(rank))
    elif packet in (aten.transpose, aten.transpose_copy):
        d0, d1 = _norm_dim(a["dim0"], rank), _norm_dim(a["dim1"], rank)
        perm = list(range(rank))
        perm[d0], perm[d1] = perm[d1], perm[d0]
    else:
        perm = [_norm_dim(d, rank) for d in a["dims"]]
    return im.transpose(x, perm)


@_handles(aten.expand, aten.expand_copy, aten.broadcast_to)
def _expand(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    return im.broadcast(im.value(n.args[0]), im.out_type(n).get_shape())


def _slice_bounds(size: int, start: Any, end: Any) -> tuple[int, int]:
    start = 0 if start is None else int(start)
    end = size if end is None else int(end)
    if start < 0:
        start += size
    if end < 0:
        end += size
    start = min(max(start, 0), size)
    end = min(max(end, start), size)
    return start, end


@_handles(aten.slice, aten.slice_copy)
def _slice(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    x = im.value(a["self"])
    rank = len(im.shape(x))
    dim = _norm_dim(a["dim"], rank)
    start, end = _slice_bounds(im.shape(x)[dim], a["start"], a["end"])
    step = int(a["step"] or 1)
    if end <= start:
        raise _Unsupported("empty slice")
    return im.slice(x, dim, start, end, step)


@_handles(aten.select, aten.select_copy)
def _select(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    x = im.value(a["self"])
    rank = len(im.shape(x))
    dim = _norm_dim(a["dim"], rank)
    index = int(a["index"])
    if index < 0:
        index += im.shape(x)[dim]
    y = im.slice(x, dim, index, index + 1)
    return im.reshape(y, im.out_type(n).get_shape())


@_handles(aten.narrow, aten.narrow_copy)
def _narrow(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    x = im.value(a["self"])
    dim = _norm_dim(a["dim"], len(im.shape(x)))
    start = int(a["start"])
    if start < 0:
        start += im.shape(x)[dim]
    return im.slice(x, dim, start, start + int(a["length"]))


@_handles(aten.split, aten.split_with_sizes, aten.split_copy, aten.split_with_sizes_copy,
          aten.chunk, aten.tensor_split, aten.unsafe_split, aten.unsafe_split_with_sizes)
def _split(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    if n.target.overloadpacket is aten.tensor_split:
        raise _Unsupported("tensor_split")
    x = im.value(a["self"])
    dim = _norm_dim(a.get("dim", 0) or 0, len(im.shape(x)))
    vals = n.meta["val"]
    outs, start = [], 0
    for v in vals:
        size = v.shape[dim]
        outs.append(im.slice(x, dim, start, start + size) if size > 0 else None)
        start += size
    return tuple(outs)


@_handles(aten.unbind, aten.unbind_copy)
def _unbind(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    x = im.value(a["self"])
    dim = _norm_dim(a["dim"], len(im.shape(x)))
    outs = []
    for i, v in enumerate(n.meta["val"]):
        outs.append(im.reshape(im.slice(x, dim, i, i + 1), tuple(v.shape)))
    return tuple(outs)


@_handles(aten.cat, aten.concat, aten.concatenate)
def _cat(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    t = im.out_type(n)
    rank = len(t.get_shape())
    dim = _norm_dim(a["dim"], rank)
    parts = []
    for x in a["tensors"]:
        v = im.value(x)
        if len(im.shape(v)) == 1 and im.shape(v)[0] == 0 and rank != 1:
            continue  # torch's legacy empty tensor in cat
        if im.shape(v)[dim] == 0:
            continue
        parts.append(im.cast(v, t.element_type))
    if not parts:
        raise _Unsupported("empty cat")
    return im.concat(parts, dim)


@_handles(aten.stack)
def _stack(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    t = im.out_type(n)
    rank = len(t.get_shape())
    dim = _norm_dim(a["dim"], rank)
    parts = []
    for x in a["tensors"]:
        v = im.cast(im.value(x), t.element_type)
        s = list(im.shape(v))
        s.insert(dim, 1)
        parts.append(im.reshape(v, s))
    return im.concat(parts, dim)


# ---- dtype conversions and copies ----------------------------------------------------


@_handles(aten._to_copy, aten.to, aten.type_as, _op("prims", "convert_element_type"),
          aten._autocast_to_reduced_precision, aten._autocast_to_full_precision)
def _to(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    x = im.value(n.args[0])
    return im.finish(x, im.out_type(n))


@_handles(aten.copy)
def _copy(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    # Functional copy(dst, src): dst's shape and dtype, filled with src broadcast.
    return im.finish(im.value(a["src"]), im.out_type(n))


# ---- constants -----------------------------------------------------------------------


@_handles(aten.full, aten.full_like, aten.new_full, aten.fill, aten.scalar_tensor)
def _full(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    value = a.get("fill_value", a.get("value", a.get("s")))
    if isinstance(value, torch.fx.Node) or not isinstance(value, (bool, int, float)):
        raise _Unsupported("non-constant fill")
    t = im.out_type(n)
    return im.emit(g.ConstantOp(value, t)).results[0]


@_handles(aten.zeros, aten.zeros_like, aten.new_zeros, aten.empty, aten.empty_like,
          aten.new_empty, aten.empty_strided, aten.new_empty_strided)
def _zeros(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    # Uninitialized memory read before being written is undefined; pkc gives zeros.
    return im.emit(g.ConstantOp(0, im.out_type(n))).results[0]


@_handles(aten.ones, aten.ones_like, aten.new_ones)
def _ones(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    return im.emit(g.ConstantOp(1, im.out_type(n))).results[0]


# ---- elementwise ---------------------------------------------------------------------

_BINARY = {
    aten.add: "add", aten.sub: "sub", aten.rsub: "sub", aten.mul: "mul", aten.div: "div",
    aten.true_divide: "div", aten.maximum: "maximum", aten.minimum: "minimum", aten.pow: "pow",
    aten.eq: "eq", aten.ne: "ne", aten.lt: "lt", aten.le: "le", aten.gt: "gt", aten.ge: "ge",
}
_COMPARE = {"eq", "ne", "lt", "le", "gt", "ge"}


@_handles(*_BINARY)
def _binary(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    packet = n.target.overloadpacket
    fn = _BINARY[packet]
    t = im.out_type(n)
    rank = len(t.get_shape())
    args = [n.args[0], n.args[1]] if len(n.args) >= 2 else [a.get("self"), a.get("other")]
    if packet is aten.pow and n.target is aten.pow.Scalar:
        args = [a["self"], a["exponent"]]
    elif packet is aten.pow:
        args = [a["self"], a["exponent"]]
    if packet is aten.div and a.get("rounding_mode") is not None:
        raise _Unsupported("div with rounding mode")
    compute = im.promoted(args[0], args[1]) if fn in _COMPARE else t.element_type
    x = im.operand(args[0], compute, rank)
    y = im.operand(args[1], compute, rank)
    if packet is aten.rsub:
        x, y = y, x
    alpha = a.get("alpha")
    if alpha is not None and alpha != 1 and fn in ("add", "sub"):
        y = im.map("mul", [y, im.const(alpha, compute, rank)])
    r = im.map(fn, [x, y])
    return im.finish(r, t)


_UNARY = {
    aten.neg: "neg", aten.exp: "exp", aten.log: "log", aten.tanh: "tanh", aten.relu: "relu",
    aten.silu: "silu", aten.sigmoid: "sigmoid", aten.sqrt: "sqrt", aten.rsqrt: "rsqrt",
    aten.abs: "abs", aten.reciprocal: "reciprocal",
}


@_handles(*_UNARY)
def _unary(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    t = im.out_type(n)
    x = im.cast(im.value(n.args[0]), t.element_type)
    return im.finish(im.map(_UNARY[n.target.overloadpacket], [x]), t)


@_handles(aten.gelu)
def _gelu(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    t = im.out_type(n)
    x = im.cast(im.value(a["self"]), t.element_type)
    approx = a.get("approximate") or "none"
    fn = {"none": "gelu", "tanh": "gelu_tanh"}.get(approx)
    if fn is None:
        raise _Unsupported(f"gelu approximate={approx}")
    return im.finish(im.map(fn, [x]), t)


@_handles(aten.square)
def _square(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    t = im.out_type(n)
    x = im.cast(im.value(a["self"]), t.element_type)
    return im.finish(im.map("mul", [x, x]), t)


@_handles(aten.clamp, aten.clamp_min, aten.clamp_max, aten.hardtanh)
def _clamp(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    t = im.out_type(n)
    rank = len(t.get_shape())
    packet = n.target.overloadpacket
    lo = a.get("min", a.get("min_val"))
    hi = a.get("max", a.get("max_val"))
    if packet is aten.clamp_max:
        lo, hi = None, a.get("max")
    elif packet is aten.clamp_min:
        lo, hi = a.get("min"), None
    x = im.cast(im.value(a["self"]), t.element_type)
    if lo is not None:
        x = im.map("maximum", [x, im.operand(lo, t.element_type, rank)])
    if hi is not None:
        x = im.map("minimum", [x, im.operand(hi, t.element_type, rank)])
    return im.finish(x, t)


def _where_map(im: _Importer, n: torch.fx.Node, cond: Any, first: Any, second: Any,
               first_when_true: bool = True) -> Any:
    """``pk.map "where"`` of a boolean condition and two values broadcast to the output
    (imported in the order given; ``first_when_true=False``: ``second`` where cond holds)."""
    t = im.out_type(n)
    rank = len(t.get_shape())
    c = im.operand(cond, i1, rank)
    x = im.operand(first, t.element_type, rank)
    y = im.operand(second, t.element_type, rank)
    args = [c, x, y] if first_when_true else [c, y, x]
    return im.finish(im.map("where", args, t.element_type), t)


@_handles(aten.where)
def _where(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    if "condition" not in a or a.get("self") is None:
        raise _Unsupported("where(cond) form")
    return _where_map(im, n, a["condition"], a["self"], a["other"])


@_handles(aten.masked_fill)
def _masked_fill(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    return _where_map(im, n, a["mask"], a["self"], a["value"], first_when_true=False)


@_handles(aten.logical_not)
def _logical_not(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    x = im.value(a["self"])
    zero = im.const(0, im.elem(x), len(im.shape(x)))
    return im.finish(im.map("eq", [x, zero]), im.out_type(n))


def _to_bool(im: _Importer, v: Value) -> Value:
    if im.elem(v) == i1:
        return v
    return im.map("ne", [v, im.const(0, im.elem(v), len(im.shape(v)))])


@_handles(aten.logical_and, aten.logical_or, aten.logical_xor, aten.bitwise_and,
          aten.bitwise_or, aten.bitwise_xor)
def _logical(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    packet = n.target.overloadpacket
    t = im.out_type(n)
    if packet in (aten.bitwise_and, aten.bitwise_or, aten.bitwise_xor) and t.element_type != i1:
        raise _Unsupported("integer bitwise op")
    if not isinstance(a.get("other"), torch.fx.Node):
        raise _Unsupported("scalar operand")
    x, y = _to_bool(im, im.value(a["self"])), _to_bool(im, im.value(a["other"]))
    rank = len(t.get_shape())
    if packet in (aten.logical_and, aten.bitwise_and):
        r = im.map("where", [x, y, im.const(False, i1, rank)], i1)
    elif packet in (aten.logical_or, aten.bitwise_or):
        r = im.map("where", [x, im.const(True, i1, rank), y], i1)
    else:
        r = im.map("ne", [x, y])
    return im.finish(r, t)


# ---- reductions ----------------------------------------------------------------------


@_handles(aten.sum, aten.mean, aten.amax, aten.amin)
def _reduce(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    packet = n.target.overloadpacket
    t = im.out_type(n)
    x = im.value(a["self"])
    rank = len(im.shape(x))
    dims = _norm_dims(a.get("dim"), rank)
    keepdim = bool(a.get("keepdim") or False)
    fn = {aten.sum: "sum", aten.mean: "mean", aten.amax: "max", aten.amin: "min"}[packet]
    if fn == "mean" and not _is_float(t.element_type):
        raise _Unsupported("integer mean")
    x = im.cast(x, t.element_type)
    if rank == 0:
        return im.finish(x, t)
    return im.finish(im.reduce(fn, x, dims, keepdim), t)


@_handles(aten.max, aten.min)
def _max_min(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    fn = "max" if n.target.overloadpacket is aten.max else "min"
    overload = n.target._overloadname
    x = im.value(n.args[0])
    rank = len(im.shape(x))
    if overload == "default":
        t = im.out_type(n)
        return im.finish(im.reduce(fn, x, list(range(rank)), False), t)
    if overload == "dim":
        # values only; if the indices are used, the whole op runs through torch.
        if any(u.target is operator.getitem and u.args[1] == 1 for u in n.users):
            raise _Unsupported("indices")
        dim = _norm_dim(a["dim"], rank)
        v = im.reduce(fn, x, [dim], bool(a["keepdim"]))
        return (im.finish(v, im.out_type(n, 0)), None)
    if overload == "other":
        return _binary_named(im, n, "maximum" if fn == "max" else "minimum")
    raise _Unsupported(overload)


def _binary_named(im: _Importer, n: torch.fx.Node, fn: str) -> Any:
    t = im.out_type(n)
    rank = len(t.get_shape())
    x = im.operand(n.args[0], t.element_type, rank)
    y = im.operand(n.args[1], t.element_type, rank)
    return im.finish(im.map(fn, [x, y]), t)


def _variance(im: _Importer, x: Value, dims: list[int], correction: float
              ) -> tuple[Value, Value, Value]:
    """(var, mean, x - mean); var and mean with keepdim=True shapes, in x's element type."""
    mean = im.reduce("mean", x, dims, True)
    xc = im.map("sub", [x, mean])
    var = im.reduce("mean", im.map("mul", [xc, xc]), dims, True)
    count = 1
    for d in dims:
        count *= im.shape(x)[d]
    if correction:
        scale = count / max(count - correction, 0) if count > correction else float("inf")
        var = im.map("mul", [var, im.const(scale, im.elem(x), len(im.shape(x)))])
    return var, mean, xc


@_handles(aten.var, aten.var_mean, aten.std)
def _var(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    packet = n.target.overloadpacket
    x = im.value(a["self"])
    rank = len(im.shape(x))
    if rank == 0:
        raise _Unsupported("rank-0 variance")
    dims = _norm_dims(a.get("dim"), rank)
    correction = a.get("correction")
    if "unbiased" in a and a.get("unbiased") is not None:
        correction = 1 if a["unbiased"] else 0
    if correction is None:
        correction = 1
    t0 = im.out_type(n, 0) if packet is aten.var_mean else im.out_type(n)
    xw = im.cast(x, _wide(t0.element_type))
    var, mean, _ = _variance(im, xw, dims, float(correction))
    if packet is aten.std:
        var = im.map("sqrt", [var])
    shape = t0.get_shape()
    if packet is aten.var_mean:
        return (im.finish(im.reshape(var, shape), t0),
                im.finish(im.reshape(mean, im.out_type(n, 1).get_shape()), im.out_type(n, 1)))
    return im.finish(im.reshape(var, shape), t0)


# ---- softmax and norms ---------------------------------------------------------------


@_handles(aten._softmax, aten.softmax, aten._log_softmax, aten.log_softmax)
def _softmax(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    packet = n.target.overloadpacket
    t = im.out_type(n)
    x = im.value(a["self"])
    rank = len(im.shape(x))
    if rank == 0:
        raise _Unsupported("rank-0 softmax")
    dim = _norm_dim(a["dim"], rank)
    xw = im.cast(x, _wide(t.element_type))
    m = im.reduce("max", xw, [dim], True)
    d = im.map("sub", [xw, m])
    e = im.map("exp", [d])
    s = im.reduce("sum", e, [dim], True)
    if packet in (aten._log_softmax, aten.log_softmax):
        y = im.map("sub", [d, im.map("log", [s])])
    else:
        y = im.map("div", [e, s])
    return im.finish(y, t)


@_handles(aten.native_layer_norm)
def _layer_norm(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    x = im.value(a["input"])
    t = im.out_type(n, 0)
    rank = len(im.shape(x))
    k = len(a["normalized_shape"])
    dims = list(range(rank - k, rank))
    wide = _wide(t.element_type)
    xw = im.cast(x, wide)
    var, mean, xc = _variance(im, xw, dims, 0.0)
    eps = float(a["eps"])
    rstd = im.map("rsqrt", [im.map("add", [var, im.const(eps, wide, rank)])])
    y = im.map("mul", [xc, rstd])
    if a.get("weight") is not None:
        y = im.map("mul", [y, im.cast(im.value(a["weight"]), wide)])
    if a.get("bias") is not None:
        y = im.map("add", [y, im.cast(im.value(a["bias"]), wide)])
    outs = [im.finish(y, t)]
    for i, v in ((1, mean), (2, rstd)):
        ti = im.out_type(n, i)
        outs.append(im.finish(im.reshape(v, ti.get_shape()) if _numel(im, v) == _numel_t(ti) else v, ti))
    return tuple(outs)


def _numel(im: _Importer, v: Value) -> int:
    import math

    return math.prod(im.shape(v))


def _numel_t(t: TensorType) -> int:
    import math

    return math.prod(t.get_shape())


@_handles(_op("aten", "_fused_rms_norm"), _op("aten", "rms_norm"))
def _rms_norm(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    x = im.value(a["input"])
    multi = isinstance(n.meta["val"], (list, tuple))
    t = im.out_type(n, 0) if multi else im.out_type(n)
    rank = len(im.shape(x))
    k = len(a["normalized_shape"])
    dims = list(range(rank - k, rank))
    wide = _wide(t.element_type)
    xw = im.cast(x, wide)
    eps = a.get("eps")
    if eps is None:
        eps = torch.finfo(torch_dtype_of(im.elem(x))).eps
    ms = im.reduce("mean", im.map("mul", [xw, xw]), dims, True)
    rstd = im.map("rsqrt", [im.map("add", [ms, im.const(float(eps), wide, rank)])])
    y = im.map("mul", [xw, rstd])
    if a.get("weight") is not None:
        y = im.map("mul", [y, im.cast(im.value(a["weight"]), wide)])
    if not multi:
        return im.finish(y, t)
    t1 = im.out_type(n, 1)
    return (im.finish(y, t), im.finish(rstd, t1))


# ---- matmul --------------------------------------------------------------------------


def _matmul(im: _Importer, x: Value, y: Value, elem: Attribute) -> Value:
    ex, ey = im.elem(x), im.elem(y)
    if ex != ey:
        raise _Unsupported("mixed-dtype matmul")
    if not _is_float(ex):
        raise _Unsupported("integer matmul")
    sx, sy = im.shape(x), im.shape(y)
    return im.emit(g.MatmulOp(x, y, TensorType(elem, [*sx[:-1], sy[-1]]))).results[0]


def _check_matmul_dtypes(im: _Importer, n: torch.fx.Node, x: Value, y: Value) -> None:
    """torch's matmuls need one dtype; fake tensors do not check it while tracing, so an
    int64 input to a float model would compile and fail only when run."""
    ex, ey = im.elem(x), im.elem(y)
    if ex != ey:
        raise PkcFrontendError(
            f"the example inputs do not fit the program: a matmul of {torch_dtype_of(ex)} by "
            f"{torch_dtype_of(ey)} (torch needs one dtype)",
            node=n,
            hint="give the inputs the model's dtype (e.g. x.float() or x.to(torch.bfloat16))",
        )


@_handles(aten.mm, aten.bmm)
def _mm(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    t = im.out_type(n)
    _check_matmul_dtypes(im, n, im.value(a["self"]), im.value(a["mat2"]))
    return im.finish(_matmul(im, im.value(a["self"]), im.value(a["mat2"]), t.element_type), t)


@_handles(aten.addmm, aten.baddbmm)
def _addmm(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    t = im.out_type(n)
    rank = len(t.get_shape())
    elem = t.element_type
    names = ("mat1", "mat2") if n.target.overloadpacket is aten.addmm else ("batch1", "batch2")
    _check_matmul_dtypes(im, n, im.value(a[names[0]]), im.value(a[names[1]]))
    r = _matmul(im, im.value(a[names[0]]), im.value(a[names[1]]), elem)
    alpha, beta = a.get("alpha", 1), a.get("beta", 1)
    if alpha != 1:
        r = im.map("mul", [r, im.const(alpha, elem, rank)])
    if beta != 0:
        bias = im.cast(im.value(a["self"]), elem)
        if beta != 1:
            bias = im.map("mul", [bias, im.const(beta, elem, rank)])
        r = im.map("add", [r, bias])
    return im.finish(r, t)


@_handles(aten.matmul)
def _aten_matmul(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    x, y = im.value(a["self"]), im.value(a["other"])
    sx, sy = im.shape(x), im.shape(y)
    if len(sx) < 2 or len(sy) < 2:
        raise _Unsupported("matmul with a vector")
    t = im.out_type(n)
    batch = tuple(t.get_shape()[:-2])
    x = im.broadcast(x, (*batch, *sx[-2:]))
    y = im.broadcast(y, (*batch, *sy[-2:]))
    return im.finish(_matmul(im, x, y, t.element_type), t)


# ---- collectives ---------------------------------------------------------------------

_REDUCE_OPS = {"sum": "sum", "max": "max", "min": "min", "avg": "avg"}


def _reduce_op(im: _Importer, op: Any) -> str:
    name = str(op).lower()
    if name not in _REDUCE_OPS:
        raise im.error(f"collective reduction '{op}' is not supported (pkc: sum, avg, max, min)")
    return name


def _scale_avg(im: _Importer, v: Value, red: str, size: int) -> Value:
    if red != "avg":
        return v
    return im.map("div", [v, im.const(size, im.elem(v), len(im.shape(v)))])


def _c10d(name: str) -> list[Any]:
    return [_op("_c10d_functional", name), _op("_c10d_functional_autograd", name)]


def _emit_all_reduce(im: _Importer, x: Value, grp: _Group, red: str) -> Value:
    op = g.AllReduceOp(x, grp.size, "sum" if red == "avg" else red, grp.groups)
    return _scale_avg(im, im.emit(op).results[0], red, grp.size)


def _emit_all_gather(im: _Importer, x: Value, grp: _Group) -> Value:
    if not im.shape(x):
        raise im.error("all_gather of a rank-0 tensor is not supported")
    return im.emit(g.AllGatherOp(x, 0, grp.size, grp.groups)).results[0]


def _emit_reduce_scatter(im: _Importer, x: Value, grp: _Group, red: str) -> Value:
    if not im.shape(x) or im.shape(x)[0] % grp.size:
        raise im.error(f"reduce_scatter input {im.shape(x)} does not split into {grp.size} equal parts")
    op = g.ReduceScatterOp(x, 0, grp.size, "sum" if red == "avg" else red, grp.groups)
    return _scale_avg(im, im.emit(op).results[0], red, grp.size)


@_handles(*_c10d("all_reduce"))
def _all_reduce(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    grp = im.check_group(a["group_name"])
    return _emit_all_reduce(im, im.value(a["input"]), grp, _reduce_op(im, a["reduce_op"]))


@_handles(*_c10d("all_gather_into_tensor"))
def _all_gather(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    grp = im.check_group(a["group_name"], a["group_size"])
    return _emit_all_gather(im, im.value(a["input"]), grp)


@_handles(*_c10d("reduce_scatter_tensor"))
def _reduce_scatter(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    grp = im.check_group(a["group_name"], a["group_size"])
    return _emit_reduce_scatter(im, im.value(a["input"]), grp, _reduce_op(im, a["reduce_op"]))


@_handles(*_c10d("all_to_all_single"))
def _all_to_all(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    grp = im.check_group(a["group_name"])
    w = grp.size
    x = im.value(a["input"])
    rows = im.shape(x)[0] if im.shape(x) else 0
    outs, ins = a["output_split_sizes"], a["input_split_sizes"]
    equal = [rows // w] * w
    for sizes in (outs, ins):
        if sizes is not None and list(sizes) and [int(s) if isinstance(s, int) else s for s in sizes] != equal:
            raise im.error(
                f"all_to_all_single with splits {list(sizes)} on a tensor of {rows} rows: pkc "
                f"supports equal splits only ({equal})",
                hint="pad each rank's tokens to a fixed capacity so that splits are equal",
            )
    if rows % w:
        raise im.error(f"all_to_all_single of {rows} rows does not split into {w} equal parts")
    return im.emit(g.AllToAllOp(x, 0, 0, w, grp.groups)).results[0]


@_handles(*_c10d("all_reduce_coalesced"))
def _all_reduce_coalesced(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    grp = im.check_group(a["group_name"])
    red = _reduce_op(im, a["reduce_op"])
    return tuple(_emit_all_reduce(im, im.value(x), grp, red) for x in a["inputs"])


@_handles(*_c10d("all_gather_into_tensor_coalesced"))
def _all_gather_coalesced(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    grp = im.check_group(a["group_name"], a["group_size"])
    return tuple(_emit_all_gather(im, im.value(x), grp) for x in a["inputs"])


@_handles(*_c10d("reduce_scatter_tensor_coalesced"))
def _reduce_scatter_coalesced(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    grp = im.check_group(a["group_name"], a["group_size"])
    red = _reduce_op(im, a["reduce_op"])
    return tuple(_emit_reduce_scatter(im, im.value(x), grp, red) for x in a["inputs"])


@_handles(_op("_dtensor", "shard_dim_alltoall"))
def _shard_dim_alltoall(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    grp = im.check_group(a["group_name"])
    x = im.value(a["input"])
    rank = len(im.shape(x))
    gather, shard = _norm_dim(a["gather_dim"], rank), _norm_dim(a["shard_dim"], rank)
    if im.shape(x)[shard] % grp.size:
        raise im.error(f"all_to_all: dim {shard} of {im.shape(x)} does not split into {grp.size} parts")
    return im.emit(g.AllToAllOp(x, shard, gather, grp.size, grp.groups)).results[0]


# ====================================================================================
# Fused attention: the CUDA kernels' ops return bookkeeping scalars (max_q, max_k: ints)
# besides the output, which an opaque op cannot carry. Forward graphs use only the output:
# keep the user-level op, which returns just that and picks the same kernel when it runs.

_SDPA_KERNELS = [_op("aten", "_scaled_dot_product_flash_attention"),
                 _op("aten", "_scaled_dot_product_efficient_attention"),
                 _op("aten", "_scaled_dot_product_cudnn_attention")]


@_handles(*_SDPA_KERNELS)
def _sdpa_kernel(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    if any(u.target is not operator.getitem or (u.args[1] != 0 and u.users) for u in n.users):
        raise _Unsupported("more than the attention output is used")
    mask = a.get("attn_bias")
    args = [a["query"], a["key"], a["value"]]
    kwargs = {"attn_mask": mask, "dropout_p": float(a.get("dropout_p") or 0.0),
              "is_causal": bool(a.get("is_causal")), "scale": a.get("scale")}
    tensors, spec = encode_call(args, kwargs)
    operands = [im.value(t) for t in tensors]
    val = n.meta["val"][0]
    op = im.emit(g.OpaqueOp("aten::scaled_dot_product_attention", operands, spec,
                            [im.tensor_type(val, n)]))
    name = str(n.target)
    im.not_compiled[name] = im.not_compiled.get(name, 0) + 1
    return (op.results[0],) + (None,) * (len(n.meta["val"]) - 1)


# ====================================================================================
# Clean-up after import


def _slice_of(v: SSAValue) -> tuple[SSAValue, int, int, int] | None:
    op = v.owner
    if isinstance(op, g.SliceOp) and op.step.value.data == 1:
        return op.input, op.dim.value.data, op.start.value.data, op.end.value.data
    return None


def _equal_chunks(parts: Sequence[SSAValue], world: int) -> tuple[SSAValue, int] | None:
    """(source, dim) if ``parts`` are the W equal chunks of one value, in order."""
    if len(parts) != world:
        return None
    first = _slice_of(parts[0])
    if first is None:
        return None
    src, dim, _, _ = first
    size = tuple(src.type.get_shape())[dim]  # type: ignore[attr-defined]
    if size % world:
        return None
    n = size // world
    for i, p in enumerate(parts):
        s = _slice_of(p)
        if s is None or s[0] is not src or s[1] != dim or (s[2], s[3]) != (i * n, (i + 1) * n):
            return None
    return src, dim


def _simplify(block: Block) -> None:
    """Canonicalize collectives along other dims, then drop dead ops.

    torch expresses a gather/scatter along dim d as ``all_gather(dim 0) -> split(dim 0) ->
    cat(dim d)`` and ``split(dim d) -> cat(dim 0) -> reduce_scatter(dim 0)`` (DTensor's
    sequence parallelism does); pk has these as one collective with ``dim = d``.
    """
    for op in list(block.ops):
        if isinstance(op, g.ConcatOp):
            parts = list(op.inputs)
            first = _slice_of(parts[0]) if parts else None
            if first is None or not isinstance(first[0].owner, g.AllGatherOp):
                continue
            ag = first[0].owner
            world = ag.world_size
            chunks = _equal_chunks(parts, world)
            if chunks is None or chunks[1] != 0 or ag.dim.value.data != 0:
                continue
            dim = op.dim.value.data
            new = g.AllGatherOp(ag.input, dim, world, rank_groups(ag))
            if new.result.type != op.result.type:
                continue
            new.location = ag.location
            block.insert_op_before(new, op)
            op.result.replace_all_uses_with(new.result)
        elif isinstance(op, g.ReduceScatterOp) and op.dim.value.data == 0:
            cat = op.input.owner
            if not isinstance(cat, g.ConcatOp) or cat.dim.value.data != 0:
                continue
            chunks = _equal_chunks(list(cat.inputs), op.world_size)
            if chunks is None:
                continue
            src, dim = chunks
            new = g.ReduceScatterOp(src, dim, op.world_size, op.reduce.data, rank_groups(op))
            if new.result.type != op.result.type:
                continue
            new.location = op.location
            block.insert_op_before(new, op)
            op.result.replace_all_uses_with(new.result)
    # Dead code: pure graph ops (collectives included: they are functional) without uses.
    for op in reversed(list(block.ops)):
        if isinstance(op, (func.ReturnOp, g.OpaqueOp)):
            continue
        if all(not r.uses for r in op.results):
            op.detach()
            op.erase()


# ====================================================================================


def import_graph(
    gm: torch.fx.GraphModule,
    *,
    world_size: int,
    arg_names: Sequence[str] | None = None,
    func_name: str = "main",
    groups: dict[str, tuple[int, list[int] | None]] | None = None,
    arg_order: Sequence[int] | None = None,
) -> ImportedGraph:
    """Translate an aten-level functional fx graph into a module with ``@func_name``.

    ``world_size`` is the number of ranks collectives span (every group must be the whole
    world). ``arg_names`` name the tensor placeholders (``pk.name`` argument attributes).
    ``groups`` gives the size and ranks of each named process group (as recorded by
    :func:`~pkc.frontend.capture.capture`); groups not in it are resolved through
    torch.distributed, or judged by the size the collective states. ``arg_order`` lists
    the tensor placeholders (by position) in the order ``@main`` takes them (default: the
    graph's order); ``arg_names`` are indexed by placeholder position.
    """
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    # The torch.compile backend imports inside aot_autograd's FakeTensorMode; folding
    # constants needs real tensors.
    with unset_fake_temporarily():
        return _Importer(gm, world_size, arg_names, func_name, groups, arg_order).run()
