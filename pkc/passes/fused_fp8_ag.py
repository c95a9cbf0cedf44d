"""The fp8 all-gather + GEMM whose A has a row-wise scale (torch's ``_scaled_mm`` with
``scale_a`` of shape ``[M, 1]`` on the gathered A): the parts of
:class:`pkc.passes.ag_gemm_schedule.AgParts` that change (:class:`AgRowScaleParts`;
``schedule_all_gather_mm`` picks it at W > 1, at W = 1 the shard's scale is the whole one
and the plain scaled epilogue reads it); for a shard of B blocks of rows (DTensor
``Shard(1)``: :class:`pkc.passes.ag_blocks_schedule.BlockAgParts`) the same put side with
that layout's tiles (:class:`BlockRowScaleParts`: SX and each shard's SG rows in the
shard's own order ``b*Sc + i``, the row a tile of block b reads).

    rank r: X_r [Mc, K] fp8, SX_r [Mc, 1] f32 (its rows' scales);
    C [W*Mc, N] = (G * SG) @ B_r * SB,  G = gather(X), SG = gather(SX)

Where the scale rows go - the put side moves them (not: the consumers read the peers'
scale rows). Each put CTA ``j``, after the launch handshake and before its first signal to
any peer, copies the rows ``j, j + side, ...`` of its own SX (16-byte vectors where the
shard's scales are whole vectors, else u32 words: ``pks.vec_load`` / ``pks.vec_store``,
``pks.word_load`` / ``pks.word_store``) into every peer's ``SG`` (a symmetric
``pk.alloc``), each loaded once; the block signals are releases by the same thread and the
consumers wait for ``epoch x side`` of them (every put CTA's) before the GEMM reads the
block, so the scale rows are ordered before the first tile of the shard exactly as its A
bytes are: no new signal, no new wait. Why not the consumers
reading the peers' SX: SX is a kernel input in each rank's private memory (only symmetric
buffers have peer copies), so it would have to be copied into symmetric memory and
announced anyway, and every epilogue piece would load its scales over NVLink (per 64-row
piece, on the critical path of the store) instead of from the local L2; the scales are
``4 x Mc`` bytes per shard, nothing beside the ``K x Mc`` bytes of A.

The epilogue scales a tile of the own shard with SX (it never waits: the own shard comes
first and nothing wrote SX during the kernel) and a peer's shard with SG (``pks.when`` on
the tile's shard, uniform over the warpgroup). SG keeps each shard's rows on 128-byte
lines of their own (``Mcp`` = Mc rounded up to 32 rows, the bound stops at the shard's
last row): ``pks.acc_scale`` reads scales through the non-coherent path (``ld.global.nc``),
so an SM must never cache a line holding rows of a shard whose signal it has not seen yet.
The put side's announcement (a peer starts only after every rank's previous launch ended)
orders a launch's SG writes after the previous launch's reads, as it does for G.
"""

from __future__ import annotations

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import Float32Type
from xdsl.ir import SSAValue

from pkc.dialects import kernel as k
from pkc.dialects import schedule as s
from pkc.dialects import schedule_comm as c
from pkc.dialects import schedule_moe as m
from pkc.dialects.types import SYMMETRIC, BufferType
from pkc.passes.ag_blocks_schedule import BlockAgParts
from pkc.passes.ag_gemm_schedule import AgParts, _when
from pkc.passes.gemm_schedule import Epi, _for, _Ops

LINE_ROWS = 32          # f32 scales per 128-byte line: each shard's rows of SG start a line
WORDS_IN_FLIGHT = 8     # scale words a put thread loads before it stores them


def line_rows(mc: int) -> int:
    """Rows of one shard in SG: ``mc`` rounded up to whole 128-byte lines."""
    return -(-mc // LINE_ROWS) * LINE_ROWS


class AgRowScaleParts(AgParts):
    """AgParts whose put side also moves the shard's row scales, and whose epilogue reads
    a peer's shard's scales from the gathered SG (see the module doc). The kernel's
    arguments are those of ``schedule_all_gather_mm``'s scaled kernel: A, B, SX, SB, C, G."""

    def __init__(self, world: int, mc: int, n: int, kdim: int, cfg, A: SSAValue, *rest,
                 blocks: int = 1, **kw):
        if blocks != 1:
            raise ValueError(f"fp8 all-gather + GEMM with A's row-wise scale: {blocks} row "
                             "blocks per shard (BlockRowScaleParts gathers those)")
        super().__init__(world, mc, n, kdim, cfg, A, *rest, **kw)
        # the first f32 argument (A, B or B0, B1.. of several weights, then SX)
        self.sx = next((v for v in A.block.args if isinstance(v.type.element_type, Float32Type)),
                       A.block.args[2])
        t = self.sx.type
        if tuple(t.get_shape()) != (mc, 1) or not isinstance(t.element_type, Float32Type):
            raise ValueError(f"fp8 all-gather + GEMM: A's row-wise scale is {t}, expected "
                             f"an f32 [{mc}, 1] shard scale (the argument after the weights)")
        self.mcp = line_rows(mc)
        self.layout_words = (f"A's row scales gathered with A by the put side ({self.mcp} "
                             "rows per shard in the gathered scale), ")

    def a_map(self, top: _Ops, A: SSAValue, ta_t) -> SSAValue:
        self.alloc_sg(top)
        return super().a_map(top, A, ta_t)

    def alloc_sg(self, top: _Ops) -> None:
        """SG: a kernel-level allocation (top: the pk.kernel's block, before the schedule)."""
        self.sg = top.add(k.AllocOp(BufferType([self.W * self.mcp, 1], Float32Type(),
                                               SYMMETRIC))).result

    def put_extra(self, o: _Ops, j: SSAValue, d: SSAValue) -> None:
        """Put CTA ``j``'s share of the shard's scale rows into every peer's SG, once: at
        the first destination (``rank - 1``, served first), after the handshake (every
        peer announced that it is done with the last launch's SG) and before this CTA's
        first signal to anyone; each group is loaded once and stored to all peers (not
        into the own SG: the own shard's tiles read SX). One thread copies,
        ``WORDS_IN_FLIGHT`` loads issued before their stores (a load's latency paid once
        per group): 16-byte vectors ``j, j + side, ...`` (bounded by the shard) where the
        shard's scales are whole vectors (Mc % 4 == 0; SG's shard offsets are whole
        lines), else u32 words, a group's indices past the shard clamped to this CTA's
        last word, which the same thread stores again with the same value (another CTA's
        word would race with that CTA's store)."""
        W, side, U = self.W, self.side, WORDS_IN_FLIGHT
        first = (lambda b: b.bin(arith.RemUIOp, b.bin(arith.AddiOp, self.rank, W - 1), W))
        w = _when(o, o.cmp("eq", d, first(o)))
        src = w.add(c.BufferPtrOp(self.sx)).result
        peers = [w.add(c.BufferPtrOp(self.sg, w.bin(arith.RemUIOp, w.bin(
            arith.AddiOp, self.rank, kk), W))).result for kk in range(1, W)]
        if self.mc % 4 == 0:
            n = self.mc // 4                      # vectors of the shard's scales
            base = w.bin(arith.MuliOp, self.rank, self.mcp // 4)
            _, body, i, _ = _for(w, j, w.c(n), w.c(side * U), [])
            idx = [body.bin(arith.AddiOp, i, u * side) if u else i for u in range(U)]
            hi = body.c(n)
            vals = [body.add(c.VecLoadOp(src, x, hi, c.CacheHint.NC)).result for x in idx]
            for dst in peers:
                for x, v in zip(idx, vals):
                    body.add(c.VecStoreOp(dst, x, hi, v, offset=base))
            body.add(scf.YieldOp())
            return
        base = w.bin(arith.MuliOp, self.rank, self.mcp)
        # this CTA's last word: j + side x floor((mc - 1 - j) / side) (used only when j < mc)
        last = w.bin(arith.AddiOp, j, w.bin(arith.MuliOp, w.bin(arith.DivUIOp, w.bin(
            arith.SubiOp, w.c(self.mc - 1), j), side), side))
        _, body, i, _ = _for(w, j, w.c(self.mc), w.c(side * U), [])
        idx = [body.add(arith.MinUIOp(body.bin(arith.AddiOp, i, u * side) if u else i,
                                      last)).result for u in range(U)]
        words = [body.add(m.WordLoadOp(src, x)).result for x in idx]
        at = [body.bin(arith.AddiOp, base, x) for x in idx]
        for dst in peers:
            for x, word in zip(at, words):
                body.add(m.WordStoreOp(dst, x, word))
        body.add(scf.YieldOp())

    def epilogue_tile(self, t: _Ops, cfg, e: Epi, coords, row0, ebuf, extra):
        return super().epilogue_tile(t, cfg, _ShardScaleEpi(e, self, coords[2]), coords,
                                     row0, ebuf, extra)


class BlockRowScaleParts(BlockAgParts, AgRowScaleParts):
    """The gather of ``blocks`` blocks of rows per shard (:class:`BlockAgParts`: DTensor
    ``Shard(1)``) whose A has a row-wise scale: the put side moves the shard's ``[B*Sc, 1]``
    scale rows as :class:`AgRowScaleParts` does (into SG at ``rank x Mcp``, in the shard's
    own layout: block b's rows at ``b*Sc``), and a tile of block b, rows ``i..`` of a
    shard, is scaled by rows ``b*Sc + i..`` of SX (own) or of the shard's SG rows (peer).
    Padding rows of a block (past Sc, clipped at the store) read the next block's scales,
    or nothing past the shard (the bound)."""

    def __init__(self, *args, blocks: int):
        super().__init__(*args, blocks)
        self.layout_words = (f"{self.layout_words}A's row scales gathered with A by the put "
                             f"side ({self.mcp} rows per shard in the gathered scale), ")

    def a_map(self, top: _Ops, A: SSAValue, ta_t) -> SSAValue:
        self.alloc_sg(top)
        return BlockAgParts.a_map(self, top, A, ta_t)

    def shard_scales(self, e: Epi, chunk: SSAValue) -> Epi:
        return _ShardScaleEpi(e, self, chunk, in_shard=True)

    def epilogue_tile(self, t: _Ops, cfg, e: Epi, coords, row0, ebuf, extra):
        return BlockAgParts.epilogue_tile(self, t, cfg, e, coords, row0, ebuf, extra)


def row_scale_parts(parts_cls: type) -> type:
    """The parts of a W > 1 fp8 gather whose A has a row-wise scale, for the parts of
    its layout (rows: :class:`AgRowScaleParts`; blocks of rows: :class:`BlockRowScaleParts`)."""
    return BlockRowScaleParts if issubclass(parts_cls, BlockAgParts) else AgRowScaleParts


class _ShardScaleEpi(Epi):
    """The epilogue's scale step for a tile of shard ``chunk``: SX for the own shard, the
    shard's rows of SG for a peer's (``row0`` is the gathered A's row: chunk x Mc + ..;
    ``in_shard``: the row in the shard, b x Sc + i for blocks of rows)."""

    def __init__(self, e: Epi, parts: AgRowScaleParts, chunk: SSAValue, in_shard: bool = False):
        super().__init__(e.acc, e.epi, e.C, e.tC, e.wg, e.M, e.N, e.scales, e.prefetch, e.rows)
        self.parts, self.chunk, self.in_shard = parts, chunk, in_shard

    def scale(self, t: _Ops, row0: SSAValue, n0: SSAValue,
              piece: tuple[int, int, int] | None = None) -> None:
        p, sb = self.parts, self.scales.sb
        local = row0 if self.in_shard else t.bin(arith.SubiOp, row0,
                                                 t.bin(arith.MuliOp, self.chunk, p.mc))
        own = _when(t, t.cmp("eq", self.chunk, p.rank))
        # B's column scales from the tile's prefetch (A's rows: the shard's, read here)
        pf = self.prefetched(n0)
        own.add(s.AccScaleOp(self.acc, p.sx, sb, None, local, n0, own.c(p.mc), self.N, piece,
                             pf))
        peer = _when(t, t.cmp("ne", self.chunk, p.rank))
        first = peer.bin(arith.MuliOp, self.chunk, p.mcp)
        peer.add(s.AccScaleOp(self.acc, p.sg, sb, None, peer.bin(arith.AddiOp, first, local),
                              n0, peer.bin(arith.AddiOp, first, p.mc), self.N, piece, pf))


__all__ = ["AgRowScaleParts", "BlockRowScaleParts", "row_scale_parts", "line_rows", "LINE_ROWS",
           "WORDS_IN_FLIGHT"]
