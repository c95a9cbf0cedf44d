"""Importer handlers of 8-bit floats: ``aten._scaled_mm`` -> ``pk.scaled_matmul`` and the
``uint8`` views of fp8 data that torch's fp8 all-gather idiom makes.

``_scaled_mm(A, B, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None,
use_fast_accum=False)`` with fp8 A [M, K] and B [K, N], f32 scales that are tensor-wise
(``[]``, ``[1]``, ``[1, 1]``; imported as ``[1]``) or row-wise (``[M, 1]`` for A, ``[1, N]``
for B), an optional bias [N] and a bf16 / f16 / f32 ``out_dtype``. Other forms (an fp8
result, ``scale_result``, block-wise scales) are errors naming the op and the shapes:
pkc has no kernel that computes them, and running them through torch would hide that.

uint8 views: DTensor + float8 gathers fp8 shards as bytes (``all_gather -> chunk -> view
(uint8) -> cat -> view(float8)``, see torch's micro-pipeline-TP tests). A ``view(uint8)``
of fp8 data and the ops that only move those bytes (cat, split, slice, views, gathers)
keep the fp8 element type in pk: the bytes are the same, and pk never computes on them.
The importer records such nodes (:func:`mark_fp8_view`) and gives them the fp8 type
(``_Importer.tensor_type``); a view back to the same fp8 dtype is the value itself. Any
other use of the bytes (arithmetic on uint8) is an error.
"""

from __future__ import annotations

import math
import operator
from typing import TYPE_CHECKING, Any

import torch
import torch.fx
from xdsl.dialects.builtin import TensorType, f32
from xdsl.ir import Attribute

from pkc.dialects.graph_scaled import ScaledMatmulOp
from pkc.dialects.types import is_fp8
from pkc.frontend.import_registry import Unsupported, aten, element_type, handles, is_float, op_or_none

if TYPE_CHECKING:
    from pkc.frontend.importer import _Importer

FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)

# Ops that move bytes without looking at them: a uint8 view of fp8 data may pass through.
_BYTE_MOVES = {
    aten.cat, aten.split, aten.split_with_sizes, aten.chunk, aten.slice, aten.narrow,
    aten.view, aten._unsafe_view, aten.reshape, aten.clone, aten.contiguous, aten.alias,
    aten.permute, aten.t, aten.transpose, aten.unsqueeze, aten.squeeze, aten.flatten,
    aten.select, aten.unbind, aten.stack,
    op_or_none("_c10d_functional", "wait_tensor"),
    op_or_none("_c10d_functional", "all_gather_into_tensor"),
    op_or_none("_c10d_functional", "all_to_all_single"),
}


def _uint8_values(val: Any) -> bool:
    vals = val if isinstance(val, (list, tuple)) else [val]
    return any(isinstance(v, torch.Tensor) and v.dtype == torch.uint8 for v in vals)


def mark_fp8_view(im: _Importer, n: torch.fx.Node) -> None:
    """Records, before ``n`` is imported, that its uint8 value holds fp8 bytes (a
    ``view(uint8)`` of fp8 data, or a byte move of such a value), so that its pk type is
    the fp8 one. Raises the importer's error when such bytes reach an op that computes."""
    if n.op != "call_function" or not _uint8_values(n.meta.get("val")):
        return
    if n.target is aten.view.dtype:
        src = n.args[0].meta.get("val") if isinstance(n.args[0], torch.fx.Node) else None
        if isinstance(src, torch.Tensor) and src.dtype in FP8_DTYPES:
            im.fp8_views[n] = element_type(src.dtype)
            return
    sources = [im.fp8_views[x] for x in n.all_input_nodes if x in im.fp8_views]
    if not sources:
        return
    packet = getattr(n.target, "overloadpacket", n.target)
    if n.target is not operator.getitem and packet not in _BYTE_MOVES:
        raise im.error(
            f"{n.target} computes on the uint8 view of fp8 data ('{n.args[0]}'); pkc keeps "
            "uint8 views of fp8 tensors only through ops that move the bytes (cat, split, "
            "slice, views, all_gather) and back to the fp8 dtype", n)
    if len(set(sources)) > 1:
        raise im.error(f"{n.target} mixes the bytes of {' and '.join(map(str, set(sources)))} "
                       "tensors viewed as uint8", n)
    im.fp8_views[n] = sources[0]


def fp8_view_dtype(im: _Importer, n: torch.fx.Node) -> Any:
    """``aten.view.dtype`` between an fp8 dtype and uint8 (either way): the value itself,
    typed fp8 in pk (see the module docstring). Any other bitcast: not imported."""
    x = n.args[0]
    src = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
    dst = n.meta.get("val")
    if not isinstance(src, torch.Tensor) or not isinstance(dst, torch.Tensor):
        raise Unsupported("bitcast view")
    if src.dtype == dst.dtype:
        return im.value(x)
    if src.dtype in FP8_DTYPES and dst.dtype == torch.uint8:
        return im.value(x)
    if src.dtype == torch.uint8 and dst.dtype in FP8_DTYPES and x in im.fp8_views:
        v = im.value(x)
        if im.elem(v) != element_type(dst.dtype):
            raise im.error(f"view of {im.elem(v)} bytes (seen as uint8) as {dst.dtype}: pkc "
                           "does not reinterpret one fp8 format as another", n)
        return v
    raise Unsupported("bitcast view")


def _shape_str(shape: Any) -> str:
    return f"[{', '.join(str(d) for d in shape)}]"


@handles(op_or_none("aten", "_scaled_mm"))
def _scaled_mm(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    x, y = im.value(a["self"]), im.value(a["mat2"])
    sx, sy = im.shape(x), im.shape(y)
    what = f"aten._scaled_mm of {_shape_str(sx)} x {_shape_str(sy)}"
    out = n.meta.get("val")
    if a.get("scale_result") is not None:
        raise im.error(f"{what}: scale_result is not supported (pkc's scaled matmuls "
                       "produce bf16, f16 or f32 results)", n)
    if not isinstance(out, torch.Tensor) or out.dtype not in (torch.bfloat16, torch.float16,
                                                              torch.float32):
        dtype = out.dtype if isinstance(out, torch.Tensor) else out
        raise im.error(f"{what}: out_dtype {dtype} is not supported (pkc's scaled matmuls "
                       "produce bf16, f16 or f32)", n,
                       hint="pass out_dtype=torch.bfloat16 (or float16 / float32)")
    if len(sx) != 2 or len(sy) != 2:
        raise im.error(f"{what}: pkc's scaled matmul takes 2-d operands", n)
    if not is_fp8(im.elem(x)) or not is_fp8(im.elem(y)):
        raise im.error(f"{what}: operands of {im.elem(x)} and {im.elem(y)} (pkc's scaled "
                       "matmul takes float8_e4m3fn / float8_e5m2)", n)
    (M, K), (_, N) = sx, sy
    t = TensorType(element_type(out.dtype), [M, N])
    scales = [_scale(im, n, a["scale_a"], "scale_a", (M, 1), what),
              _scale(im, n, a["scale_b"], "scale_b", (1, N), what)]
    bias = a.get("bias")
    if bias is not None:
        bias = im.value(bias)
        if im.shape(bias) != (N,) or not is_float(im.elem(bias)):
            raise im.error(f"{what}: bias of shape {_shape_str(im.shape(bias))} and type "
                           f"{im.elem(bias)} (pkc takes a float bias of shape [{N}])", n)
    op = ScaledMatmulOp(x, y, *scales, t, bias=bias, fast_accum=bool(a.get("use_fast_accum")))
    return im.emit(op).results[0]


def _scale(im: _Importer, n: torch.fx.Node, node: Any, name: str, row_wise: tuple[int, int],
           what: str) -> Any:
    """The scale as ``[1]`` (tensor-wise) or its row-wise shape, f32."""
    v = im.value(node)
    shape = im.shape(v)
    elem: Attribute = im.elem(v)
    if elem != f32:
        raise im.error(f"{what}: {name} is {elem} (scales are float32)", n)
    if math.prod(shape) == 1:
        return im.reshape(v, [1])
    if shape == row_wise:
        return v
    raise im.error(
        f"{what}: {name} of shape {_shape_str(shape)} is not supported (pkc takes tensor-wise "
        f"scales, [] or [1], and row-wise scales, {_shape_str(row_wise)})", n)
