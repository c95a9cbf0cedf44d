"""The scheduled GEMM + reduce-scatter for the layouts other than contiguous row chunks.

``overlap`` fuses ``pk.matmul -> pk.reduce_scatter`` along any dim into a kernel on the
2-D product ``[R, N]`` (``pk.fusion``: ``scatter_dim``, ``batches``); the row kernel of
:class:`pkc.passes.fused_schedule.RsParts` scatters ``W`` contiguous row chunks. Here the
same kernel (one GEMM, the same protocol: own chunk stored first, peers' partials
reduce-added by TMA into the owner's copy of the symmetric output, epoch-counted chunk
signals) with another ownership of the tiles:

* columns (``scatter_dim = 1``: dim 1 of a 2-D result, the last dim of a 3-D
  ``[B, S, N]`` one, which is the same ``[B*S, N]`` product): rank p owns columns
  ``[p*Nc, (p+1)*Nc)`` and its output is ``[R, Nc]``. The tile space is W chunks of
  ``[R, Nc]`` tiles (``pks.chunk_tile_loop``, slot s is chunk ``(rank + s) mod W``: every
  rank starts with its own chunk and at each step the destinations are a permutation). The
  producer loads A's rows ``m0`` and B's columns ``chunk*Nc + n0``; the epilogue stores the
  tile at ``(m0, n0)`` through the owner's map of ``[R, Nc]``. A tile that overhangs the
  chunk's last column computes columns of the next chunk, which the owner's map clips (so
  ``Nc`` need not be a multiple of the tile: no residue tiles);
* blocks of rows (``batches = B > 1``: dim 1 of ``[B, S, N]``, DTensor ``Shard(1)``):
  rank p owns rows ``b*S + p*Sc .. + Sc`` of every block b (``Sc = S / W``); its output
  ``[B*Sc, N]`` (a view of ``[B, Sc, N]``) is contiguous, so the output map is the row
  kernel's; only the rows the producer loads change: output row ``m0`` of chunk p is
  product row ``(m0 / Sc)*S + p*Sc + m0 % Sc``, where every tile is inside one block
  (``Sc`` a multiple of the tile's rows; a 64-row tile is taken where 128 does not
  divide). Where no tile divides ``Sc`` (odd shapes), the tile space pads each block to
  ``Scp`` rows of whole tiles and the owner's output maps see ``[B*Sc, N]`` as
  ``[B, Sc, N]`` (``pks.peer_tmap`` with ``dims``; the tile's block is the third
  coordinate of every store / reduce-add), so a tile's rows past ``Sc`` are clipped
  instead of landing in the next block (:class:`BlockViewRsParts`). ``B = 1`` is the row
  kernel itself.

* a bias between the matmul and the scatter (``pk.fusion.bias``, any of the layouts above
  or row chunks; overlap's patterns_bias.py): the kernel takes the bias ``[N]`` and the
  scale 1.0 and applies ``pks.acc_scale`` to each tile's f32 accumulator before its pieces
  are rounded and travel (every rank adds its own bias before the sum, as the graph does,
  rounding once where the graph rounds twice).

All run on the wgmma (sm_90a) and the tensor-memory (sm_100a: the bias applied where
``tcgen05.ld`` reads the accumulator) GEMM (the parts only change the tile loop's
coordinates, the producer's rows and the epilogue's first step), with the fixed add order
of :mod:`pkc.passes.fused_rs_ordered` under ``deterministic``. The result stays in the
symmetric output at every W (the W = 2 fresh-output variant of the row kernel,
``fused_ar_build``, is built for row chunks only).
"""

from __future__ import annotations

from xdsl.dialects import arith
from xdsl.dialects.builtin import IntegerType, TensorType, f32
from xdsl.ir import Block, Region
from xdsl.rewriter import InsertPoint, Rewriter

from pkc.dialects import graph as g
from pkc.dialects import kernel as k
from pkc.dialects import schedule as s
from pkc.dialects import schedule_fused as f
from pkc.dialects.plan import ScheduleKind
from pkc.dialects.types import LOCAL, SYMMETRIC, BufferType
from pkc.passes.fused_rs_ordered import RsOrderedParts, add_order
from pkc.passes.fused_schedule import (RsParts, arrangement, b_operand, build_fused_gemm,
                                       fused_config)
from pkc.passes.gemm_schedule import _Ops
from pkc.passes.gemm_schedule_tmem import TmemView
from pkc.passes.remarks import add_remark, set_plan
from pkc.target.cost import OverlapStyle
from pkc.target.fused_tuning import RS_MAX_WORLD, FusedKind


def layout_of(fusion: dict) -> tuple[int, int]:
    """(scatter_dim, batches) of a fused kernel's ``pk.fusion`` entries (defaults 0, 1)."""
    vals = [getattr(fusion.get(key), "value", None) for key in ("scatter_dim", "batches")]
    return tuple(d if v is None else v.data for v, d in zip(vals, (0, 1)))


def has_bias(fusion: dict) -> bool:
    """Whether overlap fused a bias add into the kernel (``pk.fusion.bias``)."""
    v = fusion.get("bias")
    return bool(v is not None and v.value.data)


def is_other_layout(fusion: dict) -> bool:
    """Whether the kernel is this module's: columns or blocks of rows, or any layout
    with a bias."""
    return layout_of(fusion) != (0, 1) or has_bias(fusion)


def layout_words(fusion: dict) -> str:
    sd, bt = layout_of(fusion)
    words = ("column blocks (scatter_dim 1)" if sd == 1 else
             f"row blocks of {bt} batch blocks (3-D dim 1, Shard(1))" if bt > 1 else
             "row chunks")
    return words + (" with a bias" if has_bias(fusion) else "")


def why_not(kop: k.KernelOp, fusion: dict, dtype_of) -> str | None:
    """Why a column / row-block GEMM + reduce-scatter cannot be scheduled (None: it can)."""
    sd, bt = layout_of(fusion)
    what = f"mm_reduce_scatter of {layout_words(fusion)}"
    W = kop.world_size
    if W > RS_MAX_WORLD:
        return f"{what} at W = {W}: peer tensor maps checked up to W = {RS_MAX_WORLD}"
    bias = has_bias(fusion)
    if len(kop.inputs) != 2 + bias or len(kop.outputs) != 1:
        return f"{what} with {len(kop.inputs)} inputs and {len(kop.outputs)} outputs"
    a, b, y = kop.inputs[0].type, kop.inputs[1].type, kop.outputs[0].type
    if any(len(t.get_shape()) != 2 for t in (a, b, y)):
        return f"{what}: operands are not 2-D ({a}, {b} -> {y})"
    dt = dtype_of(a)
    if dt is None or dtype_of(b) != dt or dtype_of(y) != dt:
        return f"{what}: operands and result must all be bf16 or f16 ({a}, {b} -> {y})"
    (R, K), (K2, N) = a.get_shape(), b.get_shape()
    if min(R, N, K) == 0:
        return f"{what}: empty product"
    if bias and (dtype_of(kop.inputs[2].type) != dt
                 or tuple(kop.inputs[2].type.get_shape()) != (1, N)):
        return f"{what}: the bias {kop.inputs[2].type} must be [1, {N}] of the operands' type"
    if sd == 0 and bt == 1:
        if K != K2 or R % W or tuple(y.get_shape()) != (R // W, N):
            return f"{what}: A {a} x B {b} -> {y} is not a reduce-scatter of {W} row chunks"
        if K % 8 or N % 8:
            return f"{what}: N = {N} and K = {K} must be multiples of 8 (TMA row strides)"
        return None
    if sd == 1:
        if K != K2 or N % W or tuple(y.get_shape()) != (R, N // W):
            return f"{what}: A {a} x B {b} -> {y} is not a reduce-scatter of {W} column chunks"
        if K % 8 or N % 8 or (N // W) % 8:
            return (f"{what}: K = {K}, N = {N} and the chunk's {N // W} columns must be "
                    "multiples of 8 (TMA row strides of the operands and the owner's output)")
        return None
    if K != K2 or R % (bt * W) or tuple(y.get_shape()) != (R // W, N):
        return f"{what}: A {a} x B {b} -> {y} is not a reduce-scatter of {W} row blocks"
    if K % 8 or N % 8:
        return f"{what}: N = {N} and K = {K} must be multiples of 8 (TMA row strides)"
    return None


def _block_rows_config(cfg, sc: int):
    """A tile whose rows divide ``sc`` (every tile in one batch block), None if none: the
    chosen one, else on sm_90a the one-warpgroup 64-row tile."""
    if sc % cfg.bm == 0:
        return cfg
    if not isinstance(cfg, TmemView) and sc % 64 == 0:
        small = cfg.with_(bm=64, consumers=1)
        small.validate()
        return small
    return None


class ColumnRsParts(RsParts):
    """:class:`RsParts` whose chunks are column blocks of ``nc`` columns (module doc):
    the tile loop runs over ``[rows, nc]`` per chunk, B's column is ``chunk*nc + n0``."""

    cluster_pairs_problem = "its own tile space is not counted in pairs"

    def __init__(self, world, rows, nc, cfg, pad, ctl):
        super().__init__(world, rows, nc, cfg, pad, ctl)
        self.nc = nc

    def tile_loop(self, r: _Ops, M, N, inits, cfg):
        loop = r.add(f.ChunkTileLoopOp(M, N, self.rank, inits, cfg.bm, cfg.bn, cfg.group_m, self.W))
        m0, n0, chunk, *carried = loop.block.args
        t = _Ops(loop.block)
        bcol = t.bin(arith.AddiOp, t.bin(arith.MuliOp, chunk, self.nc), n0)
        # coords[1] is what the producer loads B at; the epilogue takes the chunk's n0
        return loop, [m0, bcol, chunk, n0], carried

    def producer_row(self, t: _Ops, coords):
        return coords[0]

    def epilogue_tile(self, t, cfg, e, coords, row0, ebuf, extra):
        m0, _, chunk, n0 = coords
        return super().epilogue_tile(t, cfg, e, [m0, n0, chunk], row0, ebuf, extra)


class BlockRsParts(RsParts):
    """:class:`RsParts` whose chunk p is rows ``p*sc .. + sc`` of each block of ``W*sc``
    product rows (module doc); tiles never cross a block (``sc`` a multiple of bm)."""

    cluster_pairs_problem = "its own tile space is not counted in pairs"

    def __init__(self, world, blocks, sc, n, cfg, pad, ctl):
        super().__init__(world, blocks * sc, n, cfg, pad, ctl)
        self.sc = sc

    def producer_row(self, t: _Ops, coords):
        m0, _, chunk = coords
        blk = t.bin(arith.DivUIOp, m0, self.sc)
        inner = t.bin(arith.RemUIOp, m0, self.sc)
        base = t.bin(arith.MuliOp, t.bin(arith.AddiOp, t.bin(arith.MuliOp, blk, self.W), chunk),
                     self.sc)
        return t.bin(arith.AddiOp, base, inner)


class BlockViewRsParts(RsParts):
    """Row blocks whose ``sc`` rows per rank are no multiple of the tile (module doc): the
    tile space pads each block to ``scp`` rows (whole tiles), the output maps see the
    owner's ``[B*sc, N]`` as ``[B, sc, N]`` (``pks.peer_tmap`` dims) so a tile's rows past
    ``sc`` are clipped instead of spilling into the next block; the producer's rows past
    ``sc`` are another chunk's (their products are never stored)."""

    cluster_pairs_problem = "its own tile space is not counted in pairs"

    def __init__(self, world, blocks, sc, n, cfg, pad, ctl):
        self.scp = -(-sc // cfg.bm) * cfg.bm
        super().__init__(world, blocks * self.scp, n, cfg, pad, ctl)
        self.sc, self.blocks, self.n = sc, blocks, n

    def c_map(self, top: _Ops, C, tc_t):
        t3 = s.TmapType(self.cfg.dtype, [*tc_t.box_dims, 1], tc_t.swizzle.data)
        self.maps = [top.add(f.PeerTmapOp(C, p, t3, [self.blocks, self.sc, self.n])).result
                     for p in range(self.W)]
        return None

    def tile_loop(self, r: _Ops, M, N, inits, cfg):
        loop = r.add(f.ChunkTileLoopOp(M, N, self.rank, inits, cfg.bm, cfg.bn, cfg.group_m, self.W))
        m0, n0, chunk, *carried = loop.block.args
        t = _Ops(loop.block)
        blk, i0 = t.bin(arith.DivUIOp, m0, self.scp), t.bin(arith.RemUIOp, m0, self.scp)
        # coords[0]: the row inside the block (the consumers' row0 and the maps' row)
        return loop, [i0, n0, chunk, blk], carried

    def producer_row(self, t: _Ops, coords):
        i0, _, chunk, blk = coords
        base = t.bin(arith.AddiOp, t.bin(arith.MuliOp, blk, self.W), chunk)
        return t.bin(arith.AddiOp, t.bin(arith.MuliOp, base, self.sc), i0)

    def outer_coords(self, coords):
        return [coords[3]]


class _ColumnOrdered(ColumnRsParts, RsOrderedParts):
    pass


class _BlockOrdered(BlockRsParts, RsOrderedParts):
    pass


class _BlockViewOrdered(BlockViewRsParts, RsOrderedParts):
    pass


class _BiasEpilogue:
    """Mixed in before an RsParts class: every tile's f32 accumulator gets the bias of its
    columns (``pks.acc_scale`` with the tensor-wise scale 1.0: the bias add in f32, as the
    kernel-level kernel does) before its pieces are rounded and travel. ``coords[1]`` is
    the product column of every layout's tile (the column kernel's B column)."""

    def epilogue_tile(self, t, cfg, e, coords, row0, ebuf, extra):
        t.add(s.AccScaleOp(e.acc, self.one, self.one, self.bias, row0, coords[1],
                           t.c(self.product[0]), t.c(self.product[1])))
        return super().epilogue_tile(t, cfg, e, coords, row0, ebuf, extra)


def _parts_class(sd: int, bt: int, ordered: bool, bias: bool, view: bool = False) -> type:
    base = (_ColumnOrdered if ordered else ColumnRsParts) if sd == 1 else \
        (_BlockViewOrdered if ordered else BlockViewRsParts) if view else \
        (_BlockOrdered if ordered else BlockRsParts) if bt > 1 else \
        (RsOrderedParts if ordered else RsParts)
    return type(f"Bias{base.__name__}", (_BiasEpilogue, base), {}) if bias else base


def schedule_rs_layout(kop: k.KernelOp, fusion: dict, target: str, variant: str,
                       deterministic: bool, dtype_of) -> k.KernelOp:
    """Replace ``kop`` (checked by :func:`why_not`) by its scheduled kernel."""
    W = kop.world_size
    sd, bt = layout_of(fusion)
    bias = has_bias(fusion)
    a, b = kop.inputs[:2]
    R, K = a.type.get_shape()
    N = b.type.get_shape()[1]
    dt = dtype_of(a.type)
    b_val, layout = b_operand(b)
    cfg = fused_config(FusedKind.RS, R, N, K, W, dt, layout, target, variant)
    sc = R // bt // W
    view = False        # row blocks that no tile divides: 3-D output maps (BlockViewRsParts)
    if sd == 0 and bt > 1:
        fit = _block_rows_config(cfg, sc)
        view = fit is None
        cfg = fit or cfg
    y = kop.outputs[0].type
    operands = [a, b_val]
    arg_types = [BufferType(a.type.get_shape(), a.type.element_type),
                 BufferType(b_val.type.get_shape(), b_val.type.element_type)]
    if bias:        # graph level: the bias as [N] and the scale 1.0 (pks.acc_scale's)
        src, new_ops = kop.inputs[2], []
        if isinstance(src.owner, g.ReshapeOp) and list(src.owner.input.type.get_shape()) == [N]:
            vec = src.owner.input           # overlap's [1, N] view of an [N] bias: the bias
        else:
            new_ops.append(g.ReshapeOp(src, TensorType(src.type.element_type, [N])))
            vec = new_ops[-1].result
        new_ops.append(g.ConstantOp(1.0, TensorType(f32, [1])))
        for op in new_ops:
            op.location = kop.location
        Rewriter.insert_op(new_ops, InsertPoint.before(kop))
        operands += [vec, new_ops[-1].result]
        arg_types += [BufferType([N], vec.type.element_type), BufferType([1], f32)]
    block = Block(arg_types=[*arg_types, BufferType(y.get_shape(), y.element_type, SYMMETRIC)])
    A, B, C = block.args[0], block.args[1], block.args[-1]
    i32 = IntegerType(32)
    pad = k.AllocOp(BufferType([W], i32, SYMMETRIC), zero=True)
    ctl = k.AllocOp(BufferType([2], i32, LOCAL), zero=True)
    block.add_op(pad)
    block.add_op(ctl)
    ordered = deterministic and W > 2
    cls = _parts_class(sd, bt, ordered, bias, view)
    if sd == 1:
        nc = N // W
        parts = cls(W, R, nc, cfg, pad.result, ctl.result)
        dims = (R, nc)
        own = f"columns [p*{nc}, (p+1)*{nc}) of the {R}x{N} product"
    elif bt > 1:
        parts = cls(W, bt, sc, N, cfg, pad.result, ctl.result)
        dims = (bt * parts.scp, N) if view else (bt * sc, N)
        own = (f"rows [p*{sc}, (p+1)*{sc}) of each of the {bt} blocks of {W * sc} rows " +
               (f"(each block padded to {parts.scp} rows of tiles; the owner's output seen "
                f"as [{bt}, {sc}, {N}] clips a tile at its block's end)" if view else
                f"(tiles of {cfg.bm} rows never cross a block)"))
    else:
        parts = cls(W, R // W, N, cfg, pad.result, ctl.result)
        dims = (R // W, N)
        own = f"rows [p*{R // W}, (p+1)*{R // W})"
    if bias:
        parts.bias, parts.one, parts.product = block.args[2], block.args[3], (R, N)
    build_fused_gemm(block, A, B, C, dims[0], dims[1], K, cfg, parts)
    block.add_op(k.YieldOp())
    attrs = {key: v for key, v in kop.attributes.items() if key not in ("kernel_name", "world")}
    new = k.KernelOp("matmul_reduce_scatter", W, operands, [y], Region(block), attributes=attrs)
    tmem_plan, tmem_words = arrangement(cfg)
    set_plan(new, schedule=ScheduleKind.FUSED, fused_kind=FusedKind.RS, bm=cfg.bm, bn=cfg.bn,
             stages=cfg.stages, consumers=cfg.consumers, group_m=cfg.group_m, b_layout=layout,
             chunk_rows=parts.mc, tiles_per_chunk=parts.tiles_per_chunk,
             scatter_dim=sd, batches=bt, bias=bias,
             scheduled_overlap=OverlapStyle.INTRA, comm_ctas=0, fresh_output=False,
             add_order=add_order(W, ordered), **tmem_plan)
    add_remark(new, f"scheduled GEMM + reduce-scatter of {layout_words(fusion)} W={W} "
               f"{R}x{N}x{K} {dt}: {cfg.tag()}, rank p owns {own}; {W} chunks of "
               f"{parts.tiles_per_chunk} tiles, own chunk first, peers' tiles reduce-added by "
               "TMA into the owner's output (intra-SM, no communicate CTAs)"
               + ("; every rank adds its bias to each f32 product tile before it travels "
                  "(pks.acc_scale, scale 1.0), rounding once" if bias else "")
               + "; result in the symmetric output (persistent, also at W = 2: the "
               "fresh-output variant is built for row chunks without a bias only)"
               + ("; adds in a fixed rank order" if ordered else "") + tmem_words)
    new.location = kop.location
    Rewriter.replace_op(kop, new)
    return new


__all__ = ["ColumnRsParts", "BlockRsParts", "has_bias", "is_other_layout", "layout_of",
           "why_not", "schedule_rs_layout"]
