"""The graph-level scaled matmul of 8-bit floats (torch's ``aten._scaled_mm``).

Kept apart from graph.py (which is near the file-size limit) and registered with the other
graph ops in ``pkc.dialects.PK``.

Semantics (what torch computes, on the CPU exactly; on CUDA cuBLASLt computes the same
products in another order):

    result = round_to(result type, (dequant(lhs) @ dequant(rhs)) [+ bias])

where ``dequant(lhs) = f32(lhs) * scale_lhs`` and ``dequant(rhs) = f32(rhs) * scale_rhs``
broadcast: a tensor-wise scale is ``tensor<1xf32>``, a row-wise one ``tensor<Mx1xf32>``
(one per row of lhs) and ``tensor<1xNxf32>`` (one per column of rhs). The products of two
fp8 numbers are exact in f32; sums accumulate in f32. ``fast_accum`` records torch's
``use_fast_accum`` (Hopper's tensor cores then skip the periodic promotion of partial
sums; the reference semantics is the same f32 sum either way).
"""

from __future__ import annotations

from xdsl.dialects.builtin import Float8E5M2Type, Float32Type, TensorType, UnitAttr
from xdsl.ir import Attribute, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    opt_attr_def,
    opt_operand_def,
    result_def,
    traits_def,
)
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

from pkc.dialects.graph import PkTensors
from pkc.dialects.types import is_float, is_fp8, shape_str


@irdl_op_definition
class ScaledMatmulOp(IRDLOperation):
    """``result = (f32(lhs) * scale_lhs) @ (f32(rhs) * scale_rhs) [+ bias]`` for 2-d fp8
    ``lhs`` [M, K] and ``rhs`` [K, N] (f8E4M3FN or f8E5M2, not both f8E5M2), f32 scales
    (tensor-wise [1], or row-wise [M, 1] and [1, N]), an optional bias [N], rounded once to
    the result's bf16, f16 or f32."""

    name = "pk.scaled_matmul"
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    scale_lhs = operand_def(TensorType)
    scale_rhs = operand_def(TensorType)
    bias = opt_operand_def(TensorType)
    result = result_def(TensorType)
    fast_accum = opt_attr_def(UnitAttr)
    traits = traits_def(Pure(), PkTensors())
    assembly_format = (
        "$lhs `,` $rhs `scales` `(` $scale_lhs `,` $scale_rhs `)` (`bias` $bias^ `:` type($bias))? "
        "attr-dict `:` `(` type($lhs) `,` type($rhs) `,` type($scale_lhs) `,` type($scale_rhs) `)` "
        "`->` type($result)"
    )

    def __init__(self, lhs: SSAValue, rhs: SSAValue, scale_lhs: SSAValue, scale_rhs: SSAValue,
                 result_type: Attribute, bias: SSAValue | None = None, fast_accum: bool = False):
        super().__init__(
            operands=[lhs, rhs, scale_lhs, scale_rhs, [bias] if bias is not None else []],
            result_types=[result_type],
            attributes={"fast_accum": UnitAttr()} if fast_accum else {},
        )

    def row_wise(self) -> tuple[bool, bool]:
        """(lhs scale per row, rhs scale per column)."""
        return (len(self.scale_lhs.type.get_shape()) == 2,  # type: ignore[attr-defined]
                len(self.scale_rhs.type.get_shape()) == 2)  # type: ignore[attr-defined]

    def verify_(self) -> None:
        a, b, r = self.lhs.type, self.rhs.type, self.result.type
        sa, sb = self.scale_lhs.type, self.scale_rhs.type
        assert isinstance(a, TensorType) and isinstance(b, TensorType) and isinstance(r, TensorType)
        assert isinstance(sa, TensorType) and isinstance(sb, TensorType)
        if len(a.get_shape()) != 2 or len(b.get_shape()) != 2:
            raise VerifyException(f"'pk.scaled_matmul' needs 2-d operands, got {a} and {b}")
        (M, K), (K2, N) = a.get_shape(), b.get_shape()
        if K != K2:
            raise VerifyException(
                f"'pk.scaled_matmul' contraction dims differ: lhs {a} has K={K}, rhs {b} has K={K2}")
        if not is_fp8(a.element_type) or not is_fp8(b.element_type):
            raise VerifyException(
                f"'pk.scaled_matmul' operands must be f8E4M3FN or f8E5M2, got {a.element_type} "
                f"and {b.element_type} (use pk.matmul for wider floats)")
        if isinstance(a.element_type, Float8E5M2Type) and isinstance(b.element_type, Float8E5M2Type):
            raise VerifyException(
                "'pk.scaled_matmul' of two f8E5M2 operands is not supported (neither by torch "
                "nor by the tensor cores); make one of them f8E4M3FN")
        if tuple(r.get_shape()) != (M, N):
            raise VerifyException(
                f"'pk.scaled_matmul' result shape {shape_str(r.get_shape())} should be {M}x{N}")
        if not is_float(r.element_type) or r.element_type.bitwidth > 32:  # type: ignore[attr-defined]
            raise VerifyException(
                f"'pk.scaled_matmul' result must be bf16, f16 or f32, got {r.element_type}")
        for what, s, shapes in (("lhs", sa, ((1,), (M, 1))), ("rhs", sb, ((1,), (1, N)))):
            if not isinstance(s.element_type, Float32Type) or tuple(s.get_shape()) not in shapes:
                raise VerifyException(
                    f"'pk.scaled_matmul' {what} scale must be f32 of shape "
                    f"{' or '.join(shape_str(x) for x in shapes)} (tensor-wise or row-wise), got {s}")
        if self.bias is not None:
            t = self.bias.type
            if not isinstance(t, TensorType) or tuple(t.get_shape()) != (N,) or not is_float(
                    t.element_type):
                raise VerifyException(
                    f"'pk.scaled_matmul' bias must be a float tensor of shape {N}, got {t}")


SCALED_OPS = [ScaledMatmulOp]
