"""The scheduled all-gather along K + GEMM (:class:`AgKParts`, :func:`schedule_all_gather_k_mm`,
called by ``schedule-fused`` for a kernel of pattern ``all_gather_k_mm``).

    rank r: A_r [M, Kc] (its shard of the contraction dim); B [K, N] (whole, K = W x Kc);
    C [M, N] = sum over shards p of A_p @ B[p*Kc : (p+1)*Kc].

Matches the kernel-level ``all_gather_k_matmul`` that ``overlap`` builds
(:mod:`pkc.passes.patterns_gather_k`); produces the persistent warp-specialized GEMM of
:func:`pkc.passes.fused_schedule.build_fused_gemm` (wgmma on sm_90a, tensor memory on
sm_100a: both share the producer this kernel changes) with the all-gather + GEMM parts
(:class:`pkc.passes.ag_gemm_schedule.AgParts`) reused where the protocol is the same:

* Put side: the all-gather + GEMM kernel's (last ``side`` CTAs; each rank puts its
  ``[M, Kc]`` shard, contiguous, into slot ``rank`` of every peer's symmetric
  ``G [W, M, Kc]``, a signal per row block; announcements at launch; epochs) in the other
  order it offers (``rows_first``): row block 0 to every peer, then row block 1, ... A
  tile needs every shard's row block, so a row block is complete after its share of the
  gather (peer by peer, a whole shard each, its last shard would come in the last turn).
* Tile space: the plain GEMM's ``[M, N]`` tiles (``pks.tile_loop``): every tile needs every
  shard, so there are no chunks. The K loop runs over ``W x ceil(Kc / bk)`` steps: slot s
  (``ceil(Kc / bk)`` steps) is shard ``(rank + s) mod W``, the own one first, read from
  A's own map with no wait; a peer's from G's 3-D map ``[W, M, Kc]`` (both views of one
  type, ``pks.tmap_select``). Columns past ``Kc`` read zeros (the shard's map ends
  there), so a step that overhangs the shard adds nothing although B's rows there belong
  to the next shard. B's k coordinate is ``shard x Kc + k``.
* Waits: before the first step of a peer's shard, the producer waits (once per row block
  of ``group_m x bm`` rows and CTA: the raster makes a CTA's row blocks non-decreasing,
  so a carried "last row block waited" suffices) until every put CTA of that peer
  signalled its row block there, then fences the async proxy before its TMA loads.
* C: stored by the plain GEMM epilogue.
* The gathered tensor, where the IR asks for it, is written in its own layout
  ``[M, W*Kc]``: a row of the shard is one put piece (``piece_dest`` maps a piece to its
  row of G, at column ``rank x Kc``; ring slots stay whole KiB), and A and G are read
  through ``[M, 1, Kc]`` / ``[M, W, Kc]`` views (the shard is the middle coordinate); the
  ring has more, smaller slots (the same bytes in flight). Only for rows of 8-32 KiB
  (``ROW_PIECE_MIN``; Kc 4096-16384 in bf16): short rows made the put side ~4x slower
  (measured), long ones exceed a piece. Otherwise the puts move whole row blocks into slots
  ``G [W, M, Kc]`` and the rewrite adds the graph-level ``reshape -> transpose
  [1, 0, 2] -> reshape`` that gives ``[M, K]`` (one copy of G after the kernel). Not asked
  for, G is always the slots (whole row blocks per put: the largest pieces).

Why: the GEMM is the plain one with the shard walk in its producer, and every
communication op is the all-gather's, so both GPU targets and the emulator take it as
they are; the cost model's entry (``pkc.target.cost._gather_k``) follows this order.
"""

from __future__ import annotations

from xdsl.dialects import arith
from xdsl.dialects.builtin import TensorType
from xdsl.ir import Block, Region, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

from pkc.dialects import graph as g
from pkc.dialects import kernel as k
from pkc.dialects import schedule as s
from pkc.dialects import schedule_ag as ag
from pkc.dialects import schedule_comm as c
from pkc.dialects import schedule_fused as f
from pkc.dialects.plan import ScheduleKind
from pkc.dialects.types import LOCAL, SYMMETRIC, BufferType
from pkc.passes.ag_gemm_schedule import (MAX_BYTES, AgParts, _dtype, _when, operand_problem, put_ctas,
                                         put_ring, row_blocks, signal_allocs)
from pkc.passes.fused_schedule import arrangement, b_operand, build_fused_gemm, fused_config
from pkc.passes.gemm_schedule import GemmParts, Scales, _Ops
from pkc.passes.remarks import add_remark, plan_of, set_plan
from pkc.target.cost import OverlapStyle
from pkc.target.fused_tuning import PUT_PIECE, PUT_RING, FusedKind


# the shortest shard row (bytes) the puts write into G's own layout, one row per piece
ROW_PIECE_MIN = 8192


class AgKParts(AgParts):
    """All-gather along K + GEMM (see the module doc): AgParts with ``mc`` = M (a shard is
    all M rows) and ``k`` = Kc, the plain GEMM's tile loop and epilogue, and a producer
    whose K loop walks the shards; the put side serves row block by row block."""

    cluster_pairs_problem = "the K gather's tiles are not counted in pairs"

    rows_first = True

    def __init__(self, world: int, m: int, n: int, kc: int, cfg, A: SSAValue, gath: SSAValue,
                 pad: SSAValue | None, ctl: SSAValue | None, side: int, ring: int, piece: int,
                 self_copy: bool, true_layout: bool = False):
        super().__init__(world, m, n, kc, cfg, A, gath, pad, ctl, side, ring, piece, self_copy)
        self.nkc = -(-kc // cfg.bk)           # k-steps of one shard
        # G in the gathered tensor's own layout [M, W*Kc] (else the slots [W, M, Kc]): a
        # row of the shard is one put piece, landing in its row of G at column rank*Kc
        self.true = true_layout and world > 1
        self.row_bytes = kc * (1 if cfg.fp8 else 2)
        if self.true and piece != self.row_bytes:
            raise ValueError(f"AgKParts: G's own layout puts one row per piece ({self.row_bytes} "
                             f"bytes), got pieces of {piece}")

    def k_steps(self) -> int:
        """The GEMM's K (a multiple of bk): W shards of ``nkc`` steps."""
        return self.W * self.nkc * self.cfg.bk

    # ---- G in its own layout [M, W, Kc]: A and G seen with a middle dim (the shard) ---
    def a_map(self, top: _Ops, A: SSAValue, ta_t) -> SSAValue:
        if not self.true:
            return super().a_map(top, A, ta_t)
        bk, *rest = ta_t.box_dims
        t3 = s.TmapType(self.cfg.in_types[0], [bk, 1, *rest], ta_t.swizzle.data)
        self.tA = top.add(ag.TmapViewOp(A, [self.mc, 1, self.k], t3)).result
        self.tG = top.add(ag.TmapViewOp(self.gath, [self.mc, self.W, self.k], t3)).result
        return self.tA

    def block_span(self, o: _Ops, b: SSAValue, base: SSAValue, total: int, blk: int):
        if not self.true:
            return super().block_span(o, b, base, total, blk)
        off = o.bin(arith.MuliOp, b, blk)
        nb = o.bin(arith.MinUIOp, o.bin(arith.SubiOp, o.c(total), off), o.c(blk))
        rows = self.cfg.bm * self.cfg.group_m           # the row block's first row of G ..
        dst = o.bin(arith.AddiOp, o.bin(arith.MuliOp, b, rows * self.W * self.row_bytes),
                    o.bin(arith.MuliOp, self.rank, self.row_bytes))   # .. at column rank*Kc
        return off, dst, nb

    def piece_dest(self, o: _Ops, poff: SSAValue) -> SSAValue:
        if not self.true:
            return poff
        return o.bin(arith.MuliOp, o.bin(arith.DivUIOp, poff, self.row_bytes),
                     self.W * self.row_bytes)

    # the plain GEMM's C map, tile loop and epilogue (AgParts' are chunked by shard)
    def c_map(self, top: _Ops, C: SSAValue, tc_t) -> SSAValue | None:
        return GemmParts.c_map(self, top, C, tc_t)

    def tile_loop(self, r: _Ops, M, N, inits, cfg):
        return GemmParts.tile_loop(self, r, M, N, inits, cfg)

    def epilogue_tile(self, t: _Ops, cfg, e, coords, row0, ebuf, extra):
        return GemmParts.epilogue_tile(self, t, cfg, e, coords, row0, ebuf, extra)

    # ---- the producer: the tile's row block; the shard of every k-step --------------
    def producer_tile(self, t: _Ops, coords, tA, extra):
        if self.W == 1:
            return GemmParts.producer_tile(self, t, coords, tA, extra)
        m0 = coords[0]
        (last,) = extra
        self.block = t.bin(arith.DivUIOp, m0, self.cfg.bm * self.cfg.group_m)
        self.fresh = t.cmp("ne", self.block, last)     # not waited for yet by this CTA
        return tA, m0, [], [self.block]

    def producer_k(self, k: _Ops, kb, kc, tA, m0, outer):
        if self.W == 1:
            return super().producer_k(k, kb, kc, tA, m0, outer)
        slot = k.bin(arith.DivUIOp, kb, self.nkc)
        kin = k.bin(arith.MuliOp, k.bin(arith.RemUIOp, kb, self.nkc), self.cfg.bk)
        shard = k.bin(arith.RemUIOp, k.bin(arith.AddiOp, self.rank, slot), self.W)
        own = k.cmp("eq", slot, 0)
        # a peer's shard's first step, in a row block this CTA has not waited for
        peer, start = k.cmp("ne", slot, 0), k.cmp("eq", kin, 0)
        w = _when(_when(_when(k, peer), start), self.fresh)
        key = w.bin(arith.AddiOp, w.bin(arith.MuliOp, shard, self.G), self.block)
        pad = w.add(c.BufferPtrOp(self.pad)).result
        w.add(c.SignalWaitOp(pad, key, self.want, shard, c.WaitSite.ARRIVAL, "sys", 64))
        w.add(f.FenceAsyncGlobalOp())   # the puts (async proxy) before our TMA loads
        tm = k.add(f.TmapSelectOp(k.select(own, k.c(0), k.c(1)), [self.tA, self.tG])).result
        b_k = k.bin(arith.AddiOp, k.bin(arith.MuliOp, shard, self.k), kin)
        which = k.select(own, k.c(0), shard)
        return tm, ([kin, which, m0] if self.true else [kin, m0, which]), b_k


def why_not_agk(kop: k.KernelOp) -> str | None:
    """Why an ``all_gather_k_mm`` kernel cannot be scheduled (None: it can)."""
    if len(kop.inputs) != 2:
        return f"all_gather_k_mm with {len(kop.inputs)} inputs (the shard and one weight)"
    a, b = kop.inputs[0].type, kop.inputs[1].type
    outs = [o.type for o in kop.outputs]
    if (why := operand_problem("all_gather_k_mm", a, b, outs)) is not None:
        return why
    W = kop.world_size
    (M, Kc), (K, N) = a.get_shape(), b.get_shape()
    if K != W * Kc or tuple(outs[0].get_shape()) != (M, N) or (
            len(outs) > 1 and tuple(outs[1].get_shape()) != (M, K)):
        return f"all_gather_k_mm: shard {a} x B {b} -> {outs[0]} is not a gather of {W} K shards"
    if Kc % 8 or N % 8:
        return (f"all_gather_k_mm: N = {N} and the shard's K = {Kc} must be multiples of 8 "
                "(TMA row strides)")
    if min(M, N, Kc) == 0:
        return "all_gather_k_mm: empty product"
    if W * M * Kc * 2 >= MAX_BYTES:
        return f"all_gather_k_mm: the gathered A ({W * M * Kc * 2} bytes) needs 64-bit offsets"
    return None


def schedule_all_gather_k_mm(kop: k.KernelOp, target: str, variant: str) -> None:
    """Rewrite ``kop`` (pattern ``all_gather_k_mm``) into the scheduled kernel, or leave it
    with a remark saying why not. An fp8 kernel (inputs X, B, SA, SB; schedule-fused
    checked it: :func:`pkc.passes.fused_fp8.agk_problem`) gets the fp8 GEMM whose plain
    epilogue scales the tile summed over every shard (SA is the gathered row's scale)."""
    scaled = len(kop.inputs) == 4
    reason = None if scaled else why_not_agk(kop)
    if reason:
        add_remark(kop, f"fused kernel left unscheduled: {reason}")
        return
    W = kop.world_size
    a, b = kop.inputs[:2]
    M, Kc = a.type.get_shape()
    K, N = W * Kc, b.type.get_shape()[1]
    asked = len(kop.outputs) == 2
    if scaled:
        from pkc.passes.fused_fp8 import fp8_operands

        b_val, layout, dt, types = fp8_operands(kop, a, b)
    else:
        (b_val, layout), dt, types = b_operand(b), _dtype(a.type), ("", "")
    cfg = fused_config(FusedKind.AG, M, N, K, W, dt, layout, target, variant)
    cfg = cfg.with_(a_type=types[0], b_type=types[1]) if scaled else cfg
    plan = plan_of(kop)
    side, why_side = put_ctas(plan, W, asked, M, N, K, target)
    arena, ring, piece = put_ring(cfg)
    # asked for, G is written in its own layout where a row of the shard is a large put
    # piece (measured: rows of 272 bytes made the put side ~4x slower than whole row
    # blocks into the slots, docs/PERF_NOTES.md 2026-12-02 (i)), with as many bytes in
    # flight as the slots' ring (more, smaller slots)
    row = Kc * (1 if scaled else 2)
    true = asked and W > 1 and ROW_PIECE_MIN <= row <= piece
    if true:
        piece, ring = row, min(arena // row, PUT_RING * PUT_PIECE // row)
    y = kop.outputs[0].type
    el = a.type.element_type
    gshape = [M, K] if true else [W * M, Kc]
    scale_ins = list(kop.inputs[2:])
    block = Block(arg_types=[BufferType([M, Kc], el),
                             BufferType(b_val.type.get_shape(), b_val.type.element_type),
                             *[BufferType(v.type.get_shape(), v.type.element_type)
                               for v in scale_ins],
                             BufferType(y.get_shape(), y.element_type, LOCAL),
                             BufferType(gshape, el, SYMMETRIC)])
    A, B, C, Gb = block.args[0], block.args[1], block.args[-2], block.args[-1]
    # fp8: the plain GEMM's epilogue scales the f32 tile summed over all W shards, A's
    # row scales at the tile's rows (the gathered row's scale is the shard row's)
    scales = Scales(block.args[2], block.args[3]) if scaled else None
    pad, ctl = signal_allocs(block, W, row_blocks(M, cfg))
    parts = AgKParts(W, M, N, Kc, cfg, A, Gb, pad, ctl, side, ring, piece, asked, true)
    build_fused_gemm(block, A, B, C, M, N, parts.k_steps(), cfg, parts, scales)
    block.add_op(k.YieldOp())
    attrs = {key: v for key, v in kop.attributes.items() if key not in ("kernel_name", "world")}
    slots = TensorType(el, gshape)
    new = k.KernelOp("all_gather_k_scaled_matmul" if scaled else "all_gather_k_matmul", W,
                     [a, b_val, *scale_ins], [y, slots], Region(block), attributes=attrs)
    tmem_plan, tmem_words = arrangement(cfg)
    set_plan(new, schedule=ScheduleKind.FUSED, fused_kind=FusedKind.AG, bm=cfg.bm, bn=cfg.bn,
             stages=cfg.stages, consumers=cfg.consumers, group_m=cfg.group_m, b_layout=layout,
             gather_dim="K", shard_k=Kc, row_blocks=parts.G,
             scheduled_overlap=OverlapStyle.INTER if side else OverlapStyle.NONE, comm_ctas=side,
             put_piece=piece, put_ring=ring, put_lag=parts.lag, gathered_output=asked,
             **({"gathered_layout": "rows" if true or W == 1 else "slots"} if asked else {}),
             **tmem_plan)
    what = (f"fp8 GEMM ({types[0]} x {types[1]} -> {dt}, the sum over the shards scaled "
            "in the epilogue)" if scaled else "GEMM")
    add_remark(new, f"scheduled all-gather along K + {what} W={W} {M}x{N}x{K}"
               f"{'' if scaled else ' ' + dt}: "
               f"{cfg.tag()}, K loop over {W} shards of {parts.nkc} k-steps (own shard "
               f"first, read in place; a peer's after its row block's signal, once per row "
               f"block of {cfg.bm * cfg.group_m} rows), {parts.G} row blocks per shard "
               f"signalled one by one; {why_side}; puts by cp.async.bulk through a {ring} x "
               f"{piece // 1024} KiB ring, row block by row block to every peer"
               + ("; the gathered A stays in the kernel" if not asked else
                  "; the gathered A is returned in its [M, K] layout (the puts write each row "
                  f"of the shard into its columns: pieces of one row, {row} bytes)"
                  if true or W == 1 else
                  f"; the gathered A is returned ([W, M, Kc] slots, transposed to [M, K] "
                  f"after the kernel: a row of the shard, {row} bytes, is not a put piece "
                  f"of {ROW_PIECE_MIN}-{piece} bytes)")
               + tmem_words)
    new.location = kop.location
    outs = [new.results[0]]
    Rewriter.insert_op(new, InsertPoint.before(kop))
    if asked:
        outs.append(new.results[1] if true or W == 1 else
                    _true_layout(new.results[1], W, M, Kc, kop))
    for old, res in zip(kop.outputs, outs):
        old.replace_all_uses_with(res)
    Rewriter.erase_op(kop)


def _true_layout(slots: SSAValue, W: int, M: int, Kc: int, kop: k.KernelOp) -> SSAValue:
    """G's slots ``[W*M, Kc]`` as the gathered ``[M, W*Kc]`` (graph level, after kop)."""
    el = slots.type.element_type
    v3 = g.ReshapeOp(slots, TensorType(el, [W, M, Kc]))
    tr = g.TransposeOp(v3.result, [1, 0, 2])
    v2 = g.ReshapeOp(tr.result, TensorType(el, [M, W * Kc]))
    for op in (v3, tr, v2):
        op.location = kop.location
    Rewriter.insert_op([v3, tr, v2], InsertPoint.before(kop))
    return v2.result


__all__ = ["AgKParts", "schedule_all_gather_k_mm", "why_not_agk"]
