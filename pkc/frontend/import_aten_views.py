"""Importer handlers of aten's views, copies, constants and elementwise ops (registered
with :func:`pkc.frontend.import_registry.handles`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.fx
from xdsl.dialects.builtin import i1

from pkc.dialects import graph as g
from pkc.frontend.import_registry import Unsupported, Value, aten, handles, norm_dim, op_or_none

if TYPE_CHECKING:
    from pkc.frontend.importer import _Importer

# ====================================================================================
# Handlers. Each takes (importer, node, bound args) and returns the node's value: an
# SSAValue, or a tuple of them for multi-result ops. Raising Unsupported falls back to
# pk.opaque.
# ====================================================================================


def _rank(n: torch.fx.Node) -> int:
    return n.meta["val"].dim()


# ---- identity-like and views ---------------------------------------------------------


@handles(aten.clone, aten.alias, aten.detach, aten.lift_fresh_copy, aten.contiguous,
          op_or_none("_c10d_functional", "wait_tensor"), op_or_none("_c10d_functional_autograd", "wait_tensor"),
          aten.alias_copy, aten.detach_copy)
def _identity(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    return im.finish(im.value(n.args[0]), im.out_type(n))


@handles(aten.view, aten._unsafe_view, aten.reshape, aten.view_copy, aten.unsqueeze,
          aten.squeeze, aten.flatten, aten.unflatten, aten.unsqueeze_copy, aten.squeeze_copy,
          aten._reshape_alias)
def _reshape(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    if n.target is aten.view.dtype:
        from pkc.frontend.import_scaled import fp8_view_dtype  # fp8 <-> uint8 only

        return fp8_view_dtype(im, n)
    t = im.out_type(n)
    return im.reshape(im.value(n.args[0]), t.get_shape())


@handles(aten.t, aten.transpose, aten.permute, aten.permute_copy, aten.transpose_copy, aten.t_copy)
def _permute(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    x = im.value(n.args[0])
    rank = len(im.shape(x))
    packet = n.target.overloadpacket
    if packet in (aten.t, aten.t_copy):
        perm = [1, 0] if rank == 2 else list(range(rank))
    elif packet in (aten.transpose, aten.transpose_copy):
        d0, d1 = norm_dim(a["dim0"], rank), norm_dim(a["dim1"], rank)
        perm = list(range(rank))
        perm[d0], perm[d1] = perm[d1], perm[d0]
    else:
        perm = [norm_dim(d, rank) for d in a["dims"]]
    return im.transpose(x, perm)


@handles(aten.expand, aten.expand_copy, aten.broadcast_to)
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


@handles(aten.slice, aten.slice_copy)
def _slice(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    x = im.value(a["self"])
    rank = len(im.shape(x))
    dim = norm_dim(a["dim"], rank)
    start, end = _slice_bounds(im.shape(x)[dim], a["start"], a["end"])
    step = int(a["step"] or 1)
    if end <= start:
        raise Unsupported("empty slice")
    return im.slice(x, dim, start, end, step)


@handles(aten.select, aten.select_copy)
def _select(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    x = im.value(a["self"])
    rank = len(im.shape(x))
    dim = norm_dim(a["dim"], rank)
    index = int(a["index"])
    if index < 0:
        index += im.shape(x)[dim]
    y = im.slice(x, dim, index, index + 1)
    return im.reshape(y, im.out_type(n).get_shape())


@handles(aten.narrow, aten.narrow_copy)
def _narrow(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    x = im.value(a["self"])
    dim = norm_dim(a["dim"], len(im.shape(x)))
    start = int(a["start"])
    if start < 0:
        start += im.shape(x)[dim]
    return im.slice(x, dim, start, start + int(a["length"]))


@handles(aten.split, aten.split_with_sizes, aten.split_copy, aten.split_with_sizes_copy,
          aten.chunk, aten.tensor_split, aten.unsafe_split, aten.unsafe_split_with_sizes)
def _split(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    if n.target.overloadpacket is aten.tensor_split:
        raise Unsupported("tensor_split")
    x = im.value(a["self"])
    dim = norm_dim(a.get("dim", 0) or 0, len(im.shape(x)))
    vals = n.meta["val"]
    outs, start = [], 0
    for v in vals:
        size = v.shape[dim]
        outs.append(im.slice(x, dim, start, start + size) if size > 0 else None)
        start += size
    return tuple(outs)


@handles(aten.unbind, aten.unbind_copy)
def _unbind(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    x = im.value(a["self"])
    dim = norm_dim(a["dim"], len(im.shape(x)))
    outs = []
    for i, v in enumerate(n.meta["val"]):
        outs.append(im.reshape(im.slice(x, dim, i, i + 1), tuple(v.shape)))
    return tuple(outs)


@handles(aten.cat, aten.concat, aten.concatenate)
def _cat(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    t = im.out_type(n)
    rank = len(t.get_shape())
    dim = norm_dim(a["dim"], rank)
    parts = []
    for x in a["tensors"]:
        v = im.value(x)
        if len(im.shape(v)) == 1 and im.shape(v)[0] == 0 and rank != 1:
            continue  # torch's legacy empty tensor in cat
        if im.shape(v)[dim] == 0:
            continue
        parts.append(im.cast(v, t.element_type))
    if not parts:
        raise Unsupported("empty cat")
    return im.concat(parts, dim)


@handles(aten.stack)
def _stack(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    t = im.out_type(n)
    rank = len(t.get_shape())
    dim = norm_dim(a["dim"], rank)
    parts = []
    for x in a["tensors"]:
        v = im.cast(im.value(x), t.element_type)
        s = list(im.shape(v))
        s.insert(dim, 1)
        parts.append(im.reshape(v, s))
    return im.concat(parts, dim)


# ---- dtype conversions and copies ----------------------------------------------------


@handles(aten._to_copy, aten.to, aten.type_as, op_or_none("prims", "convert_element_type"),
          aten._autocast_to_reduced_precision, aten._autocast_to_full_precision)
def _to(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    x = im.value(n.args[0])
    return im.finish(x, im.out_type(n))


@handles(aten.copy)
def _copy(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    # Functional copy(dst, src): dst's shape and dtype, filled with src broadcast.
    return im.finish(im.value(a["src"]), im.out_type(n))


# ---- constants -----------------------------------------------------------------------


@handles(aten.full, aten.full_like, aten.new_full, aten.fill, aten.scalar_tensor)
def _full(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    value = a.get("fill_value", a.get("value", a.get("s")))
    if isinstance(value, torch.fx.Node) or not isinstance(value, (bool, int, float)):
        raise Unsupported("non-constant fill")
    t = im.out_type(n)
    return im.emit(g.ConstantOp(value, t)).results[0]


@handles(aten.zeros, aten.zeros_like, aten.new_zeros, aten.empty, aten.empty_like,
          aten.new_empty, aten.empty_strided, aten.new_empty_strided)
def _zeros(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    # Uninitialized memory read before being written is undefined; pkc gives zeros.
    return im.emit(g.ConstantOp(0, im.out_type(n))).results[0]


@handles(aten.ones, aten.ones_like, aten.new_ones)
def _ones(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    return im.emit(g.ConstantOp(1, im.out_type(n))).results[0]


# ---- elementwise ---------------------------------------------------------------------

_BINARY = {
    aten.add: "add", aten.sub: "sub", aten.rsub: "sub", aten.mul: "mul", aten.div: "div",
    aten.true_divide: "div", aten.maximum: "maximum", aten.minimum: "minimum", aten.pow: "pow",
    aten.eq: "eq", aten.ne: "ne", aten.lt: "lt", aten.le: "le", aten.gt: "gt", aten.ge: "ge",
}
_COMPARE = {"eq", "ne", "lt", "le", "gt", "ge"}


@handles(*_BINARY)
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
        raise Unsupported("div with rounding mode")
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


@handles(*_UNARY)
def _unary(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    t = im.out_type(n)
    x = im.cast(im.value(n.args[0]), t.element_type)
    return im.finish(im.map(_UNARY[n.target.overloadpacket], [x]), t)


@handles(aten.gelu)
def _gelu(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    t = im.out_type(n)
    x = im.cast(im.value(a["self"]), t.element_type)
    approx = a.get("approximate") or "none"
    fn = {"none": "gelu", "tanh": "gelu_tanh"}.get(approx)
    if fn is None:
        raise Unsupported(f"gelu approximate={approx}")
    return im.finish(im.map(fn, [x]), t)


@handles(aten.square)
def _square(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    t = im.out_type(n)
    x = im.cast(im.value(a["self"]), t.element_type)
    return im.finish(im.map("mul", [x, x]), t)


@handles(aten.clamp, aten.clamp_min, aten.clamp_max, aten.hardtanh)
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


@handles(aten.where)
def _where(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    if "condition" not in a or a.get("self") is None:
        raise Unsupported("where(cond) form")
    return _where_map(im, n, a["condition"], a["self"], a["other"])


@handles(aten.masked_fill)
def _masked_fill(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    return _where_map(im, n, a["mask"], a["self"], a["value"], first_when_true=False)


@handles(aten.logical_not)
def _logical_not(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    x = im.value(a["self"])
    zero = im.const(0, im.elem(x), len(im.shape(x)))
    return im.finish(im.map("eq", [x, zero]), im.out_type(n))


def _to_bool(im: _Importer, v: Value) -> Value:
    if im.elem(v) == i1:
        return v
    return im.map("ne", [v, im.const(0, im.elem(v), len(im.shape(v)))])


@handles(aten.logical_and, aten.logical_or, aten.logical_xor, aten.bitwise_and,
          aten.bitwise_or, aten.bitwise_xor)
def _logical(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    packet = n.target.overloadpacket
    t = im.out_type(n)
    if packet in (aten.bitwise_and, aten.bitwise_or, aten.bitwise_xor) and t.element_type != i1:
        raise Unsupported("integer bitwise op")
    if not isinstance(a.get("other"), torch.fx.Node):
        raise Unsupported("scalar operand")
    x, y = _to_bool(im, im.value(a["self"])), _to_bool(im, im.value(a["other"]))
    rank = len(t.get_shape())
    if packet in (aten.logical_and, aten.bitwise_and):
        r = im.map("where", [x, y, im.const(False, i1, rank)], i1)
    elif packet in (aten.logical_or, aten.bitwise_or):
        r = im.map("where", [x, im.const(True, i1, rank), y], i1)
    else:
        r = im.map("ne", [x, y])
    return im.finish(r, t)


