"""The scales of the fused fp8 kernels (``pk.scaled_matmul`` fused by ``overlap``).

Not a pass: the builders of patterns_gemm.py call these when ``Fusion.scaled`` is set. A
scaled kernel multiplies fp8 tiles (``pk.mma`` accumulates their exact products in f32)
and multiplies each f32 product tile by its scales before the tile travels or is stored,
as the epilogue of an fp8 GEMM does on the GPU: a tensor-wise scale is one f32 ([1]), a
row-wise one a column of A's row scales ([rows, 1]) and a row of B's column scales
([1, bn]); ``pk.tile_map "mul"`` broadcasts them.

Kernel arguments (names in ``pk.kernel``'s block, :func:`arg_names`):

* matmul -> reduce_scatter / all_reduce: ``A, B, SA, SB`` then the output ``O``;
* all_gather along K -> scaled matmul: ``X, B, SA, SB`` then ``Y`` (and ``G``). SA is
  the scale of the whole gathered row (``[M, 1]`` or ``[1]``, the same on every rank): the
  kernel sums every shard's product in f32 and scales the sum once, as ``_scaled_mm``;
* all_gather -> scaled matmul(s): ``X, SX, B0.., SB0..`` then ``Y0..`` (and ``G``, the
  gathered fp8 tensor, when it has other users). A row-wise ``SX`` is the shard's scale
  [Ms, 1]: the kernel gathers it with X (each rank puts its scale rows next to its row
  block, before the signal that says the block arrived) into the symmetric ``GS`` [M, 1];
  a tensor-wise ``SX`` is the rank's own scale of the whole gathered tensor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xdsl.dialects.builtin import f32 as F32
from xdsl.ir import SSAValue

from pkc.dialects import kernel as k
from pkc.dialects.types import TileType
from pkc.passes.patterns_fusion import Fusion
from pkc.target.cost import Pattern

if TYPE_CHECKING:  # the builder's types, for the hints only (it is being reshaped)
    from pkc.passes.kernel_builder import Code, Ix, KernelBuilder


def shape_of(v: SSAValue) -> tuple[int, ...]:
    return tuple(v.type.get_shape())  # type: ignore[attr-defined]


def row_wise(scale: SSAValue) -> bool:
    """A [rows, 1] / [1, cols] scale (not the tensor-wise [1])."""
    return len(shape_of(scale)) == 2


def mm_args(kb: KernelBuilder, f: Fusion) -> tuple[SSAValue, SSAValue, SSAValue | None,
                                                   SSAValue | None, SSAValue]:
    """(A, B, SA, SB, O) of a matmul -> reduce_scatter / all_reduce kernel; no scales
    (None) unless ``f.scaled``."""
    args = kb.args
    if f.scaled:
        return args[0], args[1], args[2], args[3], args[4]
    return args[0], args[1], None, None, args[2]


def ag_args(kb: KernelBuilder, f: Fusion):
    """(X, SX, Bs, SBs, Ys) of an all_gather -> matmul(s) kernel (SX None and SBs Nones
    unless ``f.scaled``); G, when returned, is ``kb.args[-1]``."""
    args, n_in = kb.args, len(kb.inputs)
    if not f.scaled:
        n = n_in - 1
        return args[0], None, list(args[1:1 + n]), [None] * n, list(args[1 + n:1 + 2 * n])
    n = (n_in - 2) // 2
    return (args[0], args[1], list(args[2:2 + n]), list(args[2 + n:2 + 2 * n]),
            list(args[2 + 2 * n:2 + 3 * n]))


def arg_names(f: Fusion, n_in: int, n_out: int) -> list[str] | None:
    """The block argument names of a scaled kernel; None for an unscaled one."""
    if not f.scaled:
        return None
    if f.pattern is Pattern.ALL_GATHER_K_MM:      # the gather along K: one weight
        return ["X", "B", "SA", "SB", "Y"] + (["G"] if n_out > 1 else [])
    if f.pattern is not Pattern.ALL_GATHER_MM:
        return ["A", "B", "SA", "SB", "O"]
    n = (n_in - 2) // 2
    names = ["X", "SX", *[f"B{j}" for j in range(n)], *[f"SB{j}" for j in range(n)],
             *[f"Y{j}" for j in range(n)]]
    return names + (["G"] if n_out > n else [])


def gathered_scale(kb: KernelBuilder, sx: SSAValue | None, world: int) -> SSAValue | None:
    """The symmetric [W * Ms, 1] buffer a row-wise shard scale is gathered into (None when
    there is nothing to gather). Always written by puts, staged kernel or not: a scale
    row block is a few bytes, a staging copy of it would cost more than it saves."""
    if sx is None or not row_wise(sx):
        return None
    ms = shape_of(sx)[0]
    return kb.alloc("gathered_scale", [world * ms, 1], F32, symmetric=True)


def put_scale_rows(c: Code, sx: SSAValue | None, gs: SSAValue | None, m0: Ix, rows: int,
                   dest_row: Ix, peer: Ix) -> None:
    """Puts rows m0.. of the shard's scale to ``dest_row`` of ``peer``'s gathered scale
    (before the caller signals that the row block arrived)."""
    if gs is None:
        return
    c.put(c.load(sx, [m0, 0], [rows, 1], "scale"), gs, [dest_row, 0], peer)


def store_own_scale_rows(c: Code, sx: SSAValue | None, gs: SSAValue | None, m0: Ix,
                         rows: int, dest_row: Ix) -> None:
    if gs is not None:
        c.store(c.load(sx, [m0, 0], [rows, 1], "scale"), gs, [dest_row, 0])


def scale_tile(c: Code, acc: SSAValue, sa: SSAValue | None, a_row: Ix, sb: SSAValue | None,
               n0: Ix) -> SSAValue:
    """``acc * sa[a_row:] * sb[:, n0:]`` in f32 (``acc`` itself when unscaled)."""
    if sa is None:
        return acc
    rows, bn = acc.type.get_shape()
    for s, at, shape in ((sa, [a_row, 0], [rows, 1]), (sb, [0, n0], [1, bn])):
        if not row_wise(s):
            at, shape = [0], [1]
        t = c.load(s, at, shape, "scale")
        acc = c.emit(k.TileMapOp("mul", [acc, t], TileType([rows, bn], F32)), "scaled")
    return acc
