""":class:`Fusion`, the parameters of one fused kernel, and its ``pk.fusion`` attribute.

The ``overlap`` pass writes a :class:`Fusion` on the kernel it builds as the ``pk.fusion``
dictionary attribute (:meth:`Fusion.to_attr`), and ``buffer-elision`` reads it back
(:meth:`Fusion.from_attr`) to recognise the kernels it may rewrite. Separate from
patterns.py so that the pattern builders (patterns_gemm.py, patterns_moe.py), which read a
:class:`Fusion`, need not import the module that dispatches to them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr, StringAttr, i64
from xdsl.ir import Attribute

from pkc.target.cost import OverlapStyle, Pattern

FUSION = "pk.fusion"

# ----------------------------------------------------------------------------------------
# The parameters of one fused kernel.


@dataclass(frozen=True)
class Fusion:
    """What a fused kernel is; enough to rebuild it from its operands and result types."""

    pattern: Pattern
    overlap: OverlapStyle  # INTRA | INTER
    tile_m: int
    tile_n: int
    tile_k: int
    experts: int = 1  # MoE: experts per rank
    capacity: int = 0  # MoE: token rows per (expert, source rank)
    gathered: bool = False  # AG+GEMM: the gathered tensor is also a result of the kernel
    # GEMM+RS: which chunks of the 2-d product [R, N] each rank owns.
    # scatter_dim 0: rows; the R rows are `batches` blocks (the leading dims of a 3-d
    #   result scattered along a middle dim) and rank p owns rows p*S/W.. of every block;
    # scatter_dim 1: columns p*N/W .. (dim -1 of a 2-d or 3-d result).
    scatter_dim: int = 0
    batches: int = 1
    # fp8 scaled matmuls (pk.scaled_matmul): the kernel also takes the operands' f32
    # scales (patterns_scaled.py says where) and scales each f32 product tile by them
    # before it travels or is stored.
    scaled: bool = False
    # GEMM+RS: the kernel also takes a [1, N] bias (its last input) that every rank adds
    # to its f32 product tiles before they travel (the graph's mm + bias on each rank)
    bias: bool = False

    def to_attr(self, stage: str) -> DictionaryAttr:
        entries: dict[str, Attribute] = {"stage": StringAttr(stage)}
        for key, v in asdict(self).items():
            if key in _ADDED_LATER and v == Fusion.__dataclass_fields__[key].default:
                continue  # the usual case reads as it always did
            if isinstance(v, bool):
                entries[key] = IntegerAttr(int(v), 1)
            elif isinstance(v, int):
                entries[key] = IntegerAttr(v, i64)
            else:
                entries[key] = StringAttr(str(v))
        return DictionaryAttr(entries)

    @staticmethod
    def from_attr(attr: Attribute) -> tuple["Fusion", str] | None:
        """(fusion, stage) from a ``pk.fusion`` attribute, None if it is not one."""
        if not isinstance(attr, DictionaryAttr):
            return None
        d = attr.data
        try:
            values = {}
            for f in fields(Fusion):
                if f.name not in d and f.name in _ADDED_LATER:
                    continue  # written before the field existed: its default
                v = d[f.name]
                values[f.name] = v.data if isinstance(v, StringAttr) else v.value.data
            values["gathered"] = bool(values["gathered"])
            values["scaled"] = bool(values.get("scaled", False))
            values["bias"] = bool(values.get("bias", False))
            stage = d["stage"].data
        except (KeyError, AttributeError, TypeError):
            return None
        if values["pattern"] not in KERNEL_NAMES or \
                values["overlap"] not in (OverlapStyle.INTRA, OverlapStyle.INTER):
            return None
        values["pattern"] = Pattern(values["pattern"])
        values["overlap"] = OverlapStyle(values["overlap"])
        return Fusion(**values), stage


_ADDED_LATER = ("scatter_dim", "batches", "scaled", "bias")

KERNEL_NAMES = {
    Pattern.MM_REDUCE_SCATTER: "matmul_reduce_scatter",
    Pattern.MM_ALL_REDUCE: "matmul_all_reduce",
    Pattern.ALL_GATHER_MM: "all_gather_matmul",
    Pattern.ALL_GATHER_K_MM: "all_gather_k_matmul",
    Pattern.MOE: "all_to_all_matmul_all_to_all",
}
