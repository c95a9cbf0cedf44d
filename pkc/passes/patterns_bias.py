"""The bias between a matmul and its reduce-scatter, as ``overlap`` matches it.

``torch.addmm(b, x, w)`` and ``x @ w + b`` import as ``pk.matmul`` then ``pk.map "add"``
with the bias broadcast along the rows (``[N]`` or ``[1, ..., 1, N]``); a row-parallel
linear layer's output (``nn.Linear`` with a bias before a reduce-scatter) is exactly
that. Each rank adds its own bias before the sum, so the fused kernel adds it to every
f32 product tile before the tile travels (kernel level: patterns_gemm; scheduled: the
GEMM's epilogue, pkc/passes/fused_rs_layouts.py): the result is the graph's
``reduce_scatter(mm + bias)``, with one rounding less (the graph rounds the product,
then the sum with the bias).

Only a reduce-scatter takes it (an all-reduce with a bias stays unfused with the remark
of ``overlap.reduction_near_miss``), and only an unscaled ``pk.matmul`` (the fp8 scaled
matmul carries its own bias operand).
"""

from __future__ import annotations

from xdsl.dialects.builtin import TensorType
from xdsl.ir import SSAValue

from pkc.dialects import graph as g


def split_bias(v: SSAValue) -> tuple[SSAValue, SSAValue, g.MapOp] | None:
    """(the product, the bias, the add) when ``v`` is ``pk.map "add"`` of a value of its
    own type (used only there) and a bias broadcast along the rows of the same element
    type; None otherwise."""
    op = v.owner
    if not isinstance(op, g.MapOp) or op.fn.data != "add" or len(op.inputs) != 2:
        return None
    if not op.result.has_one_use():
        return None
    for prod, bias in ((op.inputs[0], op.inputs[1]), (op.inputs[1], op.inputs[0])):
        if prod.type != op.result.type or prod is bias:
            continue
        shape, bshape = prod.type.get_shape(), bias.type.get_shape()
        if (bshape and bshape[-1] == shape[-1] and all(d == 1 for d in bshape[:-1])
                and len(bshape) <= len(shape)
                and bias.type.element_type == prod.type.element_type
                and prod.has_one_use()):
            return prod, bias, op
    return None


def bias_view(bias: SSAValue) -> TensorType | None:
    """The ``[1, N]`` view the kernel takes the bias in (None: it is one already)."""
    shape = list(bias.type.get_shape())
    want = [1, shape[-1]]
    return None if shape == want else TensorType(bias.type.element_type, want)


__all__ = ["split_bias", "bias_view"]
