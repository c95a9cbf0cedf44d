"""An all-gather feeding several matmuls: one scheduled kernel that gathers once and
computes every product (:class:`ManyWeights`), or, where that kernel cannot be built, one
gather kernel and then the matmuls (:func:`split_gather_many`).

Matches a fused ``pk.kernel`` of pattern ``all_gather_mm`` with more than one matmul
(``overlap`` fuses every matmul that reads the gathered tensor into one kernel: inputs
``[x, B0, B1, ...]``, results ``[Y0, Y1, ..., (the gathered x)]``).

The fused kernel (built by :func:`pkc.passes.ag_gemm_schedule.schedule_all_gather_mm`
with the parts of the shard's layout - rows, or blocks of rows: ag_blocks_schedule.py -
wrapped by :func:`many_parts`): the gather is the one-weight kernel's (put CTAs, one
signal per row block, the producer waiting once per remote row block), and the tile
space spans every weight's tiles: weight i owns the column tiles ``[off_i, off_i +
ceil(N_i / bn))`` of one ``ceil(M / bm) x sum_i ceil(N_i / bn)`` grid, so a tile is one
weight's (its columns past N_i read zeros from B's map and are clipped by C's). Per tile,
the producer and the epilogue find the weight with a compare / select chain over the
offsets and pick its B map (producer) and C map (epilogue) with ``pks.tmap_select``;
nothing else changes: rasterization walks a row block of A across every weight's
columns, so a gathered row block is waited for once and read from L2 for all weights.
The same parts drive the tensor-memory GEMM of an sm_100a target (its producer and
epilogue are the wgmma GEMM's hooks).

The split (the weights differ in dtype from x or from each other, are in both layouts,
or any other reason :func:`pkc.passes.ag_gemm_schedule.why_not_ag` gives): the kernel is
replaced by a graph-level ``pk.all_gather`` lowered at once into a collective kernel
(:class:`~pkc.passes.lower_collectives.LowerCollectives`' rewrite, so that
``schedule-collectives`` schedules it next) and one graph-level ``pk.matmul`` per weight,
with a remark saying why. With ``pk.fusion.batches`` = B > 1 (a gather along a middle dim,
overlap_gather_blocks.py) that gather is the ``[B, Sc, H]`` shard's along dim 1, between
two free 2-D views, so the matmuls read the gathered tensor in its own layout.

fp8 scaled matmuls sharing one gather and A's scale (inputs ``[x, SX, B0.., SB0..]``):
the same kernel on the fp8 GEMM (``schedule_all_gather_mm``), each weight's B scale
(tensor-wise ``[1]`` or row-wise ``[1, N_i]``) picked per tile by ``pks.scale_select``
on the weight index that picks the maps, and the weight's width bounding its scale
columns; the tile's scale prefetch (sm_90a) and every epilogue piece read the selected
scale (:meth:`ManyWeights.tile_scales`). A's scale is one for all weights (tensor-wise,
or row-wise gathered with A by the put side: fused_fp8_ag.py). sm_90a and sm_100a (there
tensor-wise, as for one weight).

Why one kernel: the unfused sequence reads the gathered x once per weight from HBM and
launches 1 + n kernels; the fused one overlaps the gather with the first tiles of every
weight and keeps each gathered row block hot in L2 across the weights
(docs/PERF_NOTES.md 2026-12-02 (q)).
"""

from __future__ import annotations

from copy import copy
from functools import cache
from itertools import accumulate

from xdsl.dialects import arith
from xdsl.dialects.builtin import TensorType
from xdsl.ir import SSAValue
from xdsl.pattern_rewriter import PatternRewriter
from xdsl.rewriter import InsertPoint, Rewriter

from pkc.dialects import graph as g
from pkc.dialects import kernel as k
from pkc.dialects import schedule as s
from pkc.dialects import schedule_fused as f
from pkc.dialects.rank_groups import copy_groups
from pkc.passes.ag_blocks_schedule import batches_of, why_not_blocks
from pkc.passes.ag_gemm_schedule import why_not_ag
from pkc.passes.gemm_schedule import Epi, Scales, _Ops
from pkc.passes.remarks import add_remark, remarks_of
from pkc.target.cost import Pattern


class ManyWeights:
    """Mixin over an all-gather's parts (:class:`~pkc.passes.ag_gemm_schedule.AgParts` or
    a subclass): the tile space's columns are every weight's (module doc). ``weights``:
    (the B buffers, the C buffers, the weights' widths N_i, and for fp8 the B scales);
    the parts' ``n`` is the padded total. CTA pairs (a forced variant) share a tile column,
    so one weight's B, as the single-weight kernel's pairs do."""

    def __init__(self, *args, weights: tuple, **kw):
        super().__init__(*args, **kw)
        self.Bs, self.Cs, self.ns, *sbs = weights
        # fp8: each weight's B scale (tensor-wise [1] or row-wise [1, N_i]), per tile
        # picked by pks.scale_select as the maps are by pks.tmap_select
        self.SBs = sbs[0] if sbs else None
        self._tile = None       # the consumer tile's (column, weight, column in it, scales)
        bn = self.cfg.bn
        # the first column of weights 1, 2, ... in the tile space
        self.offs = list(accumulate(-(-n // bn) * bn for n in self.ns))[:-1]

    def weight_of(self, t: _Ops, n0: SSAValue) -> tuple[SSAValue, SSAValue]:
        """(the weight, the column in it) of tile column ``n0``."""
        idx, base = t.c(0), t.c(0)
        for i, off in enumerate(self.offs, 1):
            past = t.cmp("uge", n0, off)
            idx = t.select(past, t.c(i), idx)
            base = t.select(past, t.c(off), base)
        return idx, t.bin(arith.SubiOp, n0, base)

    def b_map(self, top: _Ops, B: SSAValue, tb_t) -> SSAValue:
        self.tBs = [top.add(s.TmapOp(b, tb_t)).result for b in self.Bs]
        return self.tBs[0]

    def c_map(self, top: _Ops, C: SSAValue, tc_t) -> SSAValue | None:
        self.tCs = [super(ManyWeights, self).c_map(top, c, tc_t) for c in self.Cs]
        return self.tCs[0]

    def producer_setup(self, r: _Ops, cfg) -> list[SSAValue]:
        for tb in self.tBs[1:]:         # (the first: the GEMM's own prefetch)
            r.add(s.TmaPrefetchOp(tb))
        return super().producer_setup(r, cfg)

    def producer_b(self, t: _Ops, coords, tB: SSAValue) -> tuple[SSAValue, SSAValue]:
        idx, n0 = self.weight_of(t, coords[1])
        return t.add(f.TmapSelectOp(idx, self.tBs)).result, n0

    def tile_scales(self, t: _Ops, scales: Scales, coords, N: SSAValue):
        """The tile's weight's B scale, its column in that weight and the weight's width
        (fp8; the epilogue reuses them, so that it reads the tile's prefetch)."""
        if self.SBs is None:
            return super().tile_scales(t, scales, coords, N)
        self._tile = None
        idx, n0 = self.weight_of(t, coords[1])
        sb = t.add(f.ScaleSelectOp(idx, self.SBs)).result
        cols = t.c(self.ns[0])
        for i, off in enumerate(self.offs, 1):
            cols = t.select(t.cmp("uge", coords[1], off), t.c(self.ns[i]), cols)
        self._tile = (coords[1], idx, n0, Scales(scales.sa, sb, scales.bias, scales.rows), cols)
        return self._tile[3], n0, cols

    def epilogue_tile(self, t: _Ops, cfg, e: Epi, coords, row0, ebuf, extra):
        e = copy(e)             # the same epilogue, storing through the weight's C map
        if self.SBs is not None:
            if self._tile is None or self._tile[0] is not coords[1]:
                self.tile_scales(t, e.scales, coords, e.N)
            _, idx, n0, e.scales, e.N = self._tile      # (scaled by the weight's B scale)
        else:
            idx, n0 = self.weight_of(t, coords[1])
        e.tC = t.add(f.TmapSelectOp(idx, self.tCs)).result
        return super().epilogue_tile(t, cfg, e, [coords[0], n0, *coords[2:]], row0, ebuf,
                                     extra)


def many_config(W: int, mc: int, K: int, ns, dt: str, layout, target: str, variant: str = "",
                sms: int = 0):
    """The tile of the kernel over weights of widths ``ns`` on ``sms`` GEMM CTAs (0: the
    target's SMs): the one whose tile space, each weight padded to whole tiles, takes the
    least time by the plain GEMM's model (:func:`pkc.target.gemm_tuning.choose_config`:
    waves x tile area / the tile's measured efficiency), times the padded columns over the
    weights' (measured: docs/PERF_NOTES.md 2026-12-02 (q)), among the fused table's tile
    for the whole product (first: it wins ties within 2%) and the model's 128-row tiles.
    The table's tile for the sum of the widths can pad badly: [1024, 128, 128] at 160
    columns is 7 + 1 + 1 tiles, two waves at T = 2048 where 192 columns make one. A forced
    ``variant`` is taken as it is; sm_100a (no measured efficiencies) compares the
    tensor-memory table's tiles for the sum and for each width, area only."""
    from pkc.passes.fused_schedule import fused_config
    from pkc.target.fused_tuning import FusedKind
    from pkc.target.gemm_tuning import AUTO_CANDIDATES, BLayout
    from pkc.target.targets import get_target

    total = fused_config(FusedKind.AG, W * mc, sum(ns), K, W, dt, layout, target, variant)
    if variant:
        return total
    sms = sms or get_target(target).num_sms
    effs = {(c.bm, c.bn): eff for c, eff in AUTO_CANDIDATES}
    if get_target(target).sm_arch == "sm_100a":
        cands = [(fused_config(FusedKind.AG, W * mc, n, K, W, dt, layout, target), 1.0)
                 for n in sorted(set(ns))]
    else:   # the table's tile with the model's shapes (its stages, consumers, group)
        cands = [(total.with_(bn=c.bn, stages=c.stages), eff) for c, eff in AUTO_CANDIDATES
                 if (c.bm, c.consumers) == (total.bm, total.consumers)
                 and not (layout is BLayout.KN and c.bn % 64)]
    best, best_cost = total, None
    for cfg, eff in [(total, effs.get((total.bm, total.bn), 1.0)), *cands]:
        cols = sum(-(-n // cfg.bn) for n in ns)
        tiles = W * -(-mc // cfg.bm) * cols
        # x the padded work's share: measured, waves alone under-predict padded tiles
        # (q, k, v of 8B at T = 4096: 256 columns, one wave, 1.37x 128 columns' two waves)
        cost = -(-tiles // sms) * cfg.bm * cfg.bn / eff * cols * cfg.bn / sum(ns)
        if best_cost is None or cost < best_cost * 0.98:
            try:
                cfg.validate()      # (the table's stages / buffers with another width)
            except ValueError:
                continue
            best, best_cost = cfg, cost
    return best


@cache
def many_parts(parts_cls: type) -> type:
    """``parts_cls`` over several weights (:class:`ManyWeights` first in its order)."""
    return type(f"Many{parts_cls.__name__}", (ManyWeights, parts_cls), {})


def is_gather_many(kop: k.KernelOp, pattern: Pattern | None) -> bool:
    return pattern is Pattern.ALL_GATHER_MM and len(kop.inputs) > 2


def why_not_fused(kop: k.KernelOp) -> str | None:
    """Why several weights' kernel ``kop`` cannot be one scheduled kernel (None: it can)."""
    return why_not_blocks(kop) if batches_of(kop) > 1 else why_not_ag(kop)


def split_gather_many(kop: k.KernelOp, target: str, why: str) -> None:
    """Replace ``kop`` by the gather kernel and one matmul per weight (module doc);
    ``why``: why the one kernel is not built (the remark's)."""
    from pkc.passes.lower_collectives import LowerCollectives, _LowerPattern

    W = kop.world_size
    x, *weights = kop.inputs
    views = []
    blocks = batches_of(kop)
    if blocks > 1:      # B blocks of rows per shard: a gather along dim 1 of [B, Sc, H]
        (mc, h), et = x.type.get_shape(), x.type.element_type
        views.append(g.ReshapeOp(x, TensorType(et, [blocks, mc // blocks, h])))
        x = views[0].result
    gather = g.AllGatherOp(x, 1 if blocks > 1 else 0, W)
    copy_groups(kop, gather)
    rows = gather.result
    if blocks > 1:
        views.append(g.ReshapeOp(rows, TensorType(et, [W * mc, h])))
        rows = views[-1].result
    mms = []
    for b, y in zip(weights, kop.outputs):
        mm = g.MatmulOp(rows, b, y.type)
        mms.append(mm)
    for op in [gather, *views, *mms]:
        op.location = kop.location
    Rewriter.insert_op([*views[:1], gather, *views[1:], *mms], InsertPoint.before(kop))
    outs = [mm.result for mm in mms]
    if len(kop.outputs) > len(weights):         # the gathered tensor is asked for too
        outs.append(rows)
    for line in remarks_of(kop):
        add_remark(gather, line)
    add_remark(gather, f"all_gather + {len(weights)} matmuls over {W} ranks: one gather kernel, "
                       "then one GEMM per weight on the gathered operand, not one kernel "
                       f"over the weights: {why}")
    for old, new in zip(kop.outputs, outs):
        old.replace_all_uses_with(new)
    kop.detach()
    kop.erase()
    module = gather
    while module.parent_op() is not None:
        module = module.parent_op()
    taken = {o.kernel_name.data for o in module.walk() if isinstance(o, k.KernelOp)}
    _LowerPattern(LowerCollectives(target=target), taken).match_and_rewrite(
        gather, PatternRewriter(gather))


__all__ = ["ManyWeights", "is_gather_many", "many_config", "many_parts", "split_gather_many", "why_not_fused"]
