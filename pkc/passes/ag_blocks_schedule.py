"""The scheduled all-gather + GEMM for a gather along a middle dim (DTensor sequence
parallelism, ``Shard(1)`` with B > 1 sequences: ``pk.fusion.batches = B``).

    rank r: A_r [B*Sc, K] (its shard x_r [B, Sc, K]); G [B*S, K] = the gathered x
    [B, S, K] in its own layout (S = W*Sc); C [B*S, N] = G @ B_r.

Block b of rank r's shard is rows ``b*S + r*Sc ..`` of G and C: each shard is B
separate blocks of the operand's rows. :class:`BlockAgParts` is
:class:`pkc.passes.ag_gemm_schedule.AgParts` (the same protocol: put CTAs, epoch-counted
per-row-block signals, the own shard first, the producer waiting once per remote row
block) with another geometry:

* Put side: a shard's row blocks are taken per batch block (``Gb`` raster groups of
  ``group_m x bm`` rows in each of the B blocks; ``B x Gb`` signal slots per shard). Row
  block (b, g) is contiguous in A (rows ``b*Sc + g*group_m*bm ..``) and in G (rows
  ``b*S + r*Sc + g*group_m*bm ..``), so it is still one run of bytes per peer: the puts
  write the gathered tensor's true layout, and G, when the IR asks for it, is returned as
  it is (no copy, no second layout).
* Tile space: per shard, B blocks of ``Scp`` rows (Sc rounded up to whole tiles), so an
  m-tile never straddles two batch blocks (``pks.chunk_tile_loop`` over ``B x Scp`` rows;
  the tile's block is ``m0 / Scp``, its row in the block ``m0 % Scp``).
* Maps: the own shard is A seen as ``[B, Sc, K]`` (3-D ``pks.tmap_view``, outer
  coordinate b); a remote one is G seen as ``[B*W, Sc, K]`` (outer coordinate
  ``b*W + shard``: G's ``[B, W, Sc, K]`` with the two outer dims merged); C is stored
  through ``[B*W, Sc, N]`` the same way. Rows past Sc read zeros and are clipped at the
  store, so Sc need not be a multiple of the tile (odd shapes: no residue tiles).

At W = 1 the gather is the identity and the kernel is the plain one (B plays no part).
The same parts drive the tensor-memory GEMM of an sm_100a target (they only change the
tile loop's coordinates, the producer's map and row, the epilogue's store and the put
side's byte ranges). fp8 (``pk.scaled_matmul``, sm_90a): the scheduled fp8 GEMM with the
scales in the epilogue (a tensor-wise A scale as it is; a row-wise one is the shard's
``[B*Sc, 1]`` scale, whose rows the put side gathers into SG in the shard's own layout:
:class:`pkc.passes.fused_fp8_ag.BlockRowScaleParts`); a tile's scale row is ``b*Sc + i``
of its shard.
"""

from __future__ import annotations

from xdsl.dialects import arith
from xdsl.ir import SSAValue

from pkc.dialects import kernel as k
from pkc.dialects import schedule as s
from pkc.dialects import schedule_ag as ag
from pkc.dialects import schedule_fused as f
from pkc.passes.ag_gemm_schedule import AgParts, schedule_all_gather_mm, why_not_ag
from pkc.passes.gemm_schedule import Epi, _Ops, _tma_epilogue
from pkc.passes.remarks import add_remark
from pkc.target.gemm_tuning import GemmConfig


def batches_of(kop: k.KernelOp) -> int:
    """``pk.fusion.batches`` of a fused kernel (1 when absent)."""
    fz = kop.attributes.get("pk.fusion")
    v = fz.data.get("batches") if fz is not None else None
    return 1 if v is None else v.value.data


def _groups(sc: int, cfg: GemmConfig) -> int:
    """Raster groups (signal slots) of one batch block of ``sc`` rows."""
    return -(-(-(-sc // cfg.bm)) // cfg.group_m)


class BlockAgParts(AgParts):
    """:class:`AgParts` over a shard of ``blocks`` blocks of ``mc / blocks`` rows (module
    doc)."""

    cluster_pairs_problem = "the blocks' tiles are not counted in pairs"

    def __init__(self, world, mc, n, kdim, cfg, A, gath, pad, ctl, side, ring, piece,
                 self_copy, blocks: int):
        super().__init__(world, mc, n, kdim, cfg, A, gath, pad, ctl, side, ring, piece,
                         self_copy)
        self.B, self.sc = blocks, mc // blocks
        self.scp = -(-self.sc // cfg.bm) * cfg.bm
        self.Gb = _groups(self.sc, cfg)
        self.G = blocks * self.Gb
        self.tiles_per_chunk = blocks * (self.scp // cfg.bm) * -(-n // cfg.bn)
        self.tile_rows = blocks * self.scp
        self.layout_words = (f"{blocks} blocks of {self.sc} rows per shard (block b of "
                             f"rank r: rows b*{world * self.sc} + r*{self.sc} of G and C), "
                             f"each padded to {self.scp} rows of tiles; ")

    @staticmethod
    def signal_slots(mc: int, cfg: GemmConfig, blocks: int) -> int:
        return blocks * _groups(mc // blocks, cfg)

    def a_map(self, top: _Ops, A: SSAValue, ta_t) -> SSAValue:
        t3 = s.TmapType(self.cfg.in_types[0], [*ta_t.box_dims, 1], ta_t.swizzle.data)
        self.tA = top.add(ag.TmapViewOp(A, [self.B, self.sc, self.k], t3)).result
        self.tG = top.add(ag.TmapViewOp(self.gath, [self.B * self.W, self.sc, self.k],
                                        t3)).result
        return self.tA

    def c_map(self, top: _Ops, C: SSAValue, tc_t) -> SSAValue | None:
        t3 = s.TmapType(self.cfg.dtype, [*tc_t.box_dims, 1], tc_t.swizzle.data)
        n = C.type.get_shape()[1]       # C's own columns (one weight's of several)
        return top.add(ag.TmapViewOp(C, [self.B * self.W, self.sc, n], t3)).result

    def tile_loop(self, r: _Ops, M, N, inits, cfg):
        loop = r.add(f.ChunkTileLoopOp(M, N, self.rank, inits, cfg.bm, cfg.bn, cfg.group_m,
                                       self.W))
        m0, n0, chunk, *carried = loop.block.args
        t = _Ops(loop.block)
        blk, i0 = t.bin(arith.DivUIOp, m0, self.scp), t.bin(arith.RemUIOp, m0, self.scp)
        # coords[0]: the row in the block (the consumers' row0, the maps' row)
        return loop, [i0, n0, chunk, blk], carried

    def _outer(self, t: _Ops, chunk, blk) -> SSAValue:
        """G's / C's outer coordinate of the tile's (shard, block): b*W + shard."""
        return t.bin(arith.AddiOp, t.bin(arith.MuliOp, blk, self.W), chunk)

    def producer_tile(self, t: _Ops, coords, tA, extra):
        i0, _, chunk, blk = coords
        (last,) = extra
        own = t.cmp("eq", chunk, self.rank)
        key = t.bin(arith.AddiOp, t.bin(arith.AddiOp, t.bin(arith.MuliOp, chunk, self.G),
                                        t.bin(arith.MuliOp, blk, self.Gb)),
                    t.bin(arith.DivUIOp, i0, self.cfg.bm * self.cfg.group_m))
        tm, last = self.wait_row_block(t, own, chunk, key, last)
        return tm, i0, [t.select(own, blk, self._outer(t, chunk, blk))], [last]

    def epilogue_tile(self, t: _Ops, cfg: GemmConfig, e: Epi, coords, row0, ebuf, extra):
        _, n0, chunk, blk = coords
        outer = self._outer(t, chunk, blk)
        # an fp8 kernel's pieces are scaled first; A's row scales at the tile's row of its
        # shard (b*Sc + i: the shard's own layout, that of SX and of its rows in SG)
        a_row0 = None
        if e.scales is not None:
            a_row0 = t.bin(arith.AddiOp, t.bin(arith.MuliOp, blk, self.sc), row0)
            e = self.shard_scales(e, chunk)
        ebuf = _tma_epilogue(t, cfg, e.acc, e.epi, e.wg, row0, n0, ebuf,
                             lambda slot, col, row: t.add(s.TmaStoreOp(e.epi, slot, e.tC,
                                                                       [col, row, outer])),
                             e, a_row0)
        return ebuf, extra

    def shard_scales(self, e: Epi, chunk: SSAValue) -> Epi:
        """The epilogue's scales of a tile of shard ``chunk`` (tensor-wise: ``e`` itself;
        A's row-wise ones gathered by the put side: :mod:`pkc.passes.fused_fp8_ag`)."""
        return e

    def block_span(self, o: _Ops, b: SSAValue, base: SSAValue, total: int, blk: int):
        """Row block b = (batch block bb, raster group g): ``rows`` rows from A's row
        ``bb*Sc + g*gm*bm`` to G's row ``(bb*W + rank)*Sc + g*gm*bm``."""
        es = 1 if self.cfg.fp8 else 2
        row_bytes, group = self.k * es, self.cfg.bm * self.cfg.group_m
        bb, g = o.bin(arith.DivUIOp, b, self.Gb), o.bin(arith.RemUIOp, b, self.Gb)
        r0 = o.bin(arith.MuliOp, g, group)
        src_row = o.bin(arith.AddiOp, o.bin(arith.MuliOp, bb, self.sc), r0)
        dst_row = o.bin(arith.AddiOp, o.bin(arith.MuliOp, o.bin(arith.AddiOp, o.bin(
            arith.MuliOp, bb, self.W), self.rank), self.sc), r0)
        rows = o.bin(arith.MinUIOp, o.bin(arith.SubiOp, o.c(self.sc), r0), o.c(group))
        return (o.bin(arith.MuliOp, src_row, row_bytes), o.bin(arith.MuliOp, dst_row, row_bytes),
                o.bin(arith.MuliOp, rows, row_bytes))


def _scaled(kop: k.KernelOp) -> bool:
    fz = kop.attributes.get("pk.fusion")
    v = fz.data.get("scaled") if fz is not None else None
    return v is not None and bool(v.value.data)


def why_not_blocks(kop: k.KernelOp) -> str | None:
    """Why a gather of blocks of rows cannot be scheduled (None: it can); an fp8 kernel
    was checked by schedule-fused (:func:`pkc.passes.fused_fp8.ag_problem`)."""
    if _scaled(kop):
        return None
    why = why_not_ag(kop)
    if why is not None:
        return why
    B, (Mc, _) = batches_of(kop), kop.inputs[0].type.get_shape()
    if Mc % B:
        return f"all_gather_mm of {B} blocks of rows: the shard's {Mc} rows are not {B} blocks"
    return None


def schedule_ag_blocks(kop: k.KernelOp, target: str, variant: str) -> None:
    """Rewrite an ``all_gather_mm`` kernel with ``batches`` > 1 and one weight into the
    scheduled kernel (module doc), or leave it with a remark saying why not."""
    why = why_not_blocks(kop)
    if why is not None:
        add_remark(kop, f"fused kernel left unscheduled: {why}")
        return
    if kop.world_size == 1:     # nothing gathered: the shard is the operand
        schedule_all_gather_mm(kop, target, variant)
        return
    schedule_all_gather_mm(kop, target, variant, BlockAgParts, batches_of(kop))


__all__ = ["BlockAgParts", "batches_of", "schedule_ag_blocks", "why_not_blocks"]
