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

This module holds the importer itself (:class:`_Importer`: values, types, locations, the
walk over the fx graph); the handlers of the ops live beside it and register in
:data:`pkc.frontend.import_registry.HANDLERS`: :mod:`~pkc.frontend.import_aten_views`
(views, copies, constants, elementwise), :mod:`~pkc.frontend.import_aten_math`
(reductions, norms, matmuls, attention), :mod:`~pkc.frontend.import_collectives` (c10d);
:mod:`~pkc.frontend.import_cleanup` canonicalizes the collectives afterwards.

Errors (symbolic shapes, a sub-group pkc cannot place, unsupported collectives or dtypes) raise
:class:`~pkc.frontend.errors.PkcFrontendError` naming the fx node, the op and the user's
source line. Every op carries the user's source line as its location.
"""

from __future__ import annotations

import logging
import operator
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    FileLineColLoc,
    IntAttr,
    ModuleOp,
    StringAttr,
    TensorType,
    i1,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue

from pkc.dialects import graph as g
from pkc.dialects.common import FLOAT_ONLY_FNS
from pkc.dialects.opaque import OpaqueEncodingError, encode_call, qualified_name
from pkc.dialects.rank_groups import infer_partition
from pkc.frontend.errors import PkcFrontendError, node_source
from pkc.frontend.import_cleanup import simplify_collectives
from pkc.frontend.import_registry import (HANDLERS, Group, Unsupported, Value, aten, bind_args, element_type,
                                       is_float, torch_dtype_of)

__all__ = ["import_graph", "ImportedGraph", "PkcNotCompiledWarning", "element_type", "torch_dtype_of"]

log = logging.getLogger("pkc.frontend")


class PkcNotCompiledWarning(UserWarning):
    """An op of the user's program that pkc keeps as ``pk.opaque`` (runs through torch)."""


@dataclass
class ImportedGraph:
    """The imported module, the ops that run through torch, and constants that the
    importer turned into extra trailing arguments of ``@main`` (name, value)."""

    module: ModuleOp
    not_compiled: dict[str, int] = field(default_factory=dict)
    extra_args: list[tuple[str, torch.Tensor]] = field(default_factory=list)


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
        # uint8 nodes that hold fp8 bytes -> their fp8 element type (import_scaled.py).
        self.fp8_views: dict[torch.fx.Node, Attribute] = {}

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
        elem = self.fp8_views.get(node) if val.dtype == torch.uint8 else element_type(val.dtype)
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
        raise Unsupported(f"operand {x!r} is not a tensor")

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
        if is_float(elem):
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
        raise Unsupported(f"operand {x!r}")

    def map(self, fn: str, inputs: Sequence[Value], elem: Attribute | None = None) -> Value:
        from pkc.dialects.common import broadcast_shapes

        shape = broadcast_shapes("pk.map", [self.shape(v) for v in inputs])
        if elem is None:
            elem = i1 if fn in ("eq", "ne", "lt", "le", "gt", "ge") else self.elem(inputs[-1])
        if fn in FLOAT_ONLY_FNS and not is_float(self.elem(inputs[-1])):
            raise Unsupported(f"{fn} on integers")
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
            raise Unsupported(f"dtype {dtype}")
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
        simplify_collectives(self.block)
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
        mark_fp8_view(self, n)
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
        handler = HANDLERS.get(target.overloadpacket) or HANDLERS.get(target)
        if handler is not None:
            mark = len(self.block.ops)
            known = set(self.env)
            try:
                return handler(self, n, bind_args(n))
            except Unsupported:
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

    def check_group(self, group_name: Any, group_size: int | None = None) -> "Group":
        """The ranks a collective spans: the whole world, or the sub-groups of a device-mesh
        dimension (``group_ranks``; see :mod:`pkc.dialects.rank_groups`)."""
        size, ranks = group_size, None
        if isinstance(group_name, str) and group_name in self.groups:
            size, ranks = self.groups[group_name]
        else:
            size, ranks = self._resolve_group(group_name, group_size)
        if size == self.world and (ranks is None or sorted(ranks) == list(range(self.world))):
            return Group(size, None)
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
        return Group(size, partition)

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


# the handlers register themselves in import_registry.HANDLERS when imported
from pkc.frontend import import_aten_math, import_aten_views, import_collectives  # noqa: E402,F401
from pkc.frontend import import_scaled  # noqa: E402,F401
from pkc.frontend.import_scaled import mark_fp8_view  # noqa: E402
