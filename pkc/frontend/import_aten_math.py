"""Importer handlers of aten's reductions, softmax and norms, matmuls and fused attention
(registered with :func:`pkc.frontend.import_registry.handles`)."""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any

import torch
import torch.fx
from xdsl.dialects.builtin import TensorType
from xdsl.ir import Attribute

from pkc.dialects import graph as g
from pkc.dialects.opaque import encode_call
from pkc.frontend.errors import PkcFrontendError
from pkc.frontend.import_registry import (Unsupported, Value, aten, handles, is_float, norm_dim, norm_dims,
                                       op_or_none, torch_dtype_of, wide_type)

if TYPE_CHECKING:
    from pkc.frontend.importer import _Importer


# ---- reductions ----------------------------------------------------------------------


@handles(aten.sum, aten.mean, aten.amax, aten.amin)
def _reduce(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    packet = n.target.overloadpacket
    t = im.out_type(n)
    x = im.value(a["self"])
    rank = len(im.shape(x))
    dims = norm_dims(a.get("dim"), rank)
    keepdim = bool(a.get("keepdim") or False)
    fn = {aten.sum: "sum", aten.mean: "mean", aten.amax: "max", aten.amin: "min"}[packet]
    if fn == "mean" and not is_float(t.element_type):
        raise Unsupported("integer mean")
    x = im.cast(x, t.element_type)
    if rank == 0:
        return im.finish(x, t)
    return im.finish(im.reduce(fn, x, dims, keepdim), t)


@handles(aten.max, aten.min)
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
            raise Unsupported("indices")
        dim = norm_dim(a["dim"], rank)
        v = im.reduce(fn, x, [dim], bool(a["keepdim"]))
        return (im.finish(v, im.out_type(n, 0)), None)
    if overload == "other":
        return _binary_named(im, n, "maximum" if fn == "max" else "minimum")
    raise Unsupported(overload)


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


@handles(aten.var, aten.var_mean, aten.std)
def _var(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    packet = n.target.overloadpacket
    x = im.value(a["self"])
    rank = len(im.shape(x))
    if rank == 0:
        raise Unsupported("rank-0 variance")
    dims = norm_dims(a.get("dim"), rank)
    correction = a.get("correction")
    if "unbiased" in a and a.get("unbiased") is not None:
        correction = 1 if a["unbiased"] else 0
    if correction is None:
        correction = 1
    t0 = im.out_type(n, 0) if packet is aten.var_mean else im.out_type(n)
    xw = im.cast(x, wide_type(t0.element_type))
    var, mean, _ = _variance(im, xw, dims, float(correction))
    if packet is aten.std:
        var = im.map("sqrt", [var])
    shape = t0.get_shape()
    if packet is aten.var_mean:
        return (im.finish(im.reshape(var, shape), t0),
                im.finish(im.reshape(mean, im.out_type(n, 1).get_shape()), im.out_type(n, 1)))
    return im.finish(im.reshape(var, shape), t0)


# ---- softmax and norms ---------------------------------------------------------------


@handles(aten._softmax, aten.softmax, aten._log_softmax, aten.log_softmax)
def _softmax(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    packet = n.target.overloadpacket
    t = im.out_type(n)
    x = im.value(a["self"])
    rank = len(im.shape(x))
    if rank == 0:
        raise Unsupported("rank-0 softmax")
    dim = norm_dim(a["dim"], rank)
    xw = im.cast(x, wide_type(t.element_type))
    m = im.reduce("max", xw, [dim], True)
    d = im.map("sub", [xw, m])
    e = im.map("exp", [d])
    s = im.reduce("sum", e, [dim], True)
    if packet in (aten._log_softmax, aten.log_softmax):
        y = im.map("sub", [d, im.map("log", [s])])
    else:
        y = im.map("div", [e, s])
    return im.finish(y, t)


@handles(aten.native_layer_norm)
def _layer_norm(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    x = im.value(a["input"])
    t = im.out_type(n, 0)
    rank = len(im.shape(x))
    k = len(a["normalized_shape"])
    dims = list(range(rank - k, rank))
    wide = wide_type(t.element_type)
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


@handles(op_or_none("aten", "_fused_rms_norm"), op_or_none("aten", "rms_norm"))
def _rms_norm(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    x = im.value(a["input"])
    multi = isinstance(n.meta["val"], (list, tuple))
    t = im.out_type(n, 0) if multi else im.out_type(n)
    rank = len(im.shape(x))
    k = len(a["normalized_shape"])
    dims = list(range(rank - k, rank))
    wide = wide_type(t.element_type)
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
        raise Unsupported("mixed-dtype matmul")
    if not is_float(ex):
        raise Unsupported("integer matmul")
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


@handles(aten.mm, aten.bmm)
def _mm(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    t = im.out_type(n)
    _check_matmul_dtypes(im, n, im.value(a["self"]), im.value(a["mat2"]))
    return im.finish(_matmul(im, im.value(a["self"]), im.value(a["mat2"]), t.element_type), t)


@handles(aten.addmm, aten.baddbmm)
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


@handles(aten.matmul)
def _aten_matmul(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    x, y = im.value(a["self"]), im.value(a["other"])
    sx, sy = im.shape(x), im.shape(y)
    if len(sx) < 2 or len(sy) < 2:
        raise Unsupported("matmul with a vector")
    t = im.out_type(n)
    batch = tuple(t.get_shape()[:-2])
    x = im.broadcast(x, (*batch, *sx[-2:]))
    y = im.broadcast(y, (*batch, *sy[-2:]))
    return im.finish(_matmul(im, x, y, t.element_type), t)


# ====================================================================================
# Fused attention: the CUDA kernels' ops return bookkeeping scalars (max_q, max_k: ints)
# besides the output, which an opaque op cannot carry. Forward graphs use only the output:
# keep the user-level op, which returns just that and picks the same kernel when it runs.

_SDPA_KERNELS = [op_or_none("aten", "_scaled_dot_product_flash_attention"),
                 op_or_none("aten", "_scaled_dot_product_efficient_attention"),
                 op_or_none("aten", "_scaled_dot_product_cudnn_attention")]


@handles(*_SDPA_KERNELS)
def _sdpa_kernel(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    if any(u.target is not operator.getitem or (u.args[1] != 0 and u.users) for u in n.users):
        raise Unsupported("more than the attention output is used")
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


