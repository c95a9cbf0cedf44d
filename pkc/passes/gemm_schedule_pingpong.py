"""The consumers of the persistent GEMM as a ping-pong pair (``GemmConfig.pingpong``):
the two consumer warpgroups take alternate tiles of the CTA's tile sequence, each a whole
``bm x bn`` tile in its own accumulator, so one warpgroup's epilogue (scales, stores)
runs while the other's MMAs keep the tensor cores busy; in the cooperative form
(:func:`pkc.passes.gemm_schedule._consumer`) both share one tile's rows and the tensor
cores wait for their common epilogue, which costs most where K is short (a tile's main
loop is short beside its epilogue).

The producer is the plain GEMM's: it fills the ring with the tiles' k-blocks in order, so
tile ``j``'s k-blocks are ring positions ``j x kb .. (j + 1) x kb - 1`` and each position
is consumed by one warpgroup (``empty`` counts one arrival per CTA of the cluster). Every
warpgroup walks the whole tile sequence and the ring position with it (``kb`` positions a
tile), working only on its own tiles (``j % 2 == wg``).

Why an order barrier: a stage's ``full`` barrier is waited on by parity, which tells
apart only two consecutive phases; a warpgroup that started waiting on its tile's stages
while the other's tile still had a whole ring of stages ahead would see an older phase
of the same parity complete and read the other tile's data. So warpgroup ``w`` starts a
tile's waits only after the other has passed its waits of the tile before
(``order[w]``: the other arrives once it has issued its tile's last MMA; warpgroup 1
arrives on ``order[0]`` once at the start, for tile 0), so its wait for tile ``j`` is
completion ``j / 2`` of ``order[w]``; the waiting warpgroup is then at most one phase
ahead of every barrier.

A fused kernel's parts (:class:`~pkc.passes.gemm_schedule.GemmParts` hooks) work per
warpgroup here as they do in the cooperative form: ``epilogue_setup``'s carried values
are each warpgroup's own (a reduce-scatter's pending chunk and tile count: a warpgroup
sees its own tiles, a contiguous run per chunk as the CTA's are), ``epilogue_tile`` runs
on its tiles only, ``epilogue_finish`` after its loop. What differs is how many
warpgroups handle a tile (one, not ``consumers``): :func:`tile_users` is what a count of
tiles is multiplied by. Parts that start a tile's epilogue work before its main loop
(``consumer_tile_start``: the fresh-output summed epilogues) or that name a reason
(``GemmParts.pingpong_problem``) are refused (:func:`check_pingpong_parts`).
"""

from __future__ import annotations

from xdsl.dialects import arith, scf
from pkc.dialects import schedule as s
from pkc.passes.gemm_schedule import (Epi, GemmParts, _for, _Ops, _trim_prefetch, mma_k_loop,
                                      row_scales)
from pkc.target.gemm_tuning import GemmConfig


def consumer_pingpong(o, cfg: GemmConfig, dims, C, tC, a_st, b_st, epi, full, empty, order,
                      parts, scales=None) -> None:
    """Appends the ping-pong consumer role to ``o`` (see the module docstring); ``order``:
    two mbarriers of one arrival (``order[w]``: warpgroup ``w`` may start its next tile)."""
    role = o.add(s.RoleOp(s.RoleKind.CONSUMER, 1, cfg.consumers, cfg.consumer_reg_target))
    r = _Ops(role.block)
    M, N, K = (r.c(d) for d in dims)
    wg = r.add(s.WarpgroupIndexOp()).result
    acc = r.add(s.AccAllocOp(cfg.wg_m, cfg.bn)).result
    zero, one = r.c(0), r.c(1)
    kb = -(-dims[2] // cfg.bk)
    num_kb = r.c(kb)
    all_ctas = cfg.cluster_m > 1
    prefetch = scales is not None and cfg.scale_prefetch
    rows = (r.c(scales.rows) if scales.rows else M) if prefetch else None
    other = r.bin(arith.XOrIOp, wg, 1)
    extra = parts.epilogue_setup(r, cfg)
    # warpgroup 1 lets warpgroup 0 start its first tile: completion 0 of order[0]
    r.add(s.MbarrierArriveOp(order, zero, pred=r.cmp("eq", wg, 1)))
    # carried: ring (stage, phase) at the tile's first position, tile count j, the
    # epilogue's staging buffer (unchanged over a tile: an even number of pieces), the
    # parts' epilogue values (this warpgroup's)
    loop, coords, (stage, phase, j, ebuf, *extra) = parts.tile_loop(
        r, M, N, [zero, zero, zero, zero, *extra], cfg)
    t = _Ops(loop.block)
    m0 = coords[0]
    # the tile is this warpgroup's: a loop of one trip, else none (the schedule level's
    # plain GEMM has loops, not conditionals)
    mine = t.cmp("eq", t.bin(arith.AndIOp, j, 1), wg)
    trips = t.select(mine, one, zero)
    own, w, _, extra_in = _for(t, zero, trips, one, extra)
    # wait for the other warpgroup to have passed its waits of tile j - 1 (warpgroup 1's
    # arrival above for tile 0): completion j / 2 of order[wg]
    w.add(s.MbarrierWaitOp(order, wg, w.bin(arith.AndIOp, w.bin(arith.ShRUIOp, j, 1), 1)))
    pf = a_row0 = None
    if prefetch:
        # A's rows are the ones the producer loads (a fused kernel's chunk row, not C's)
        prow = parts.producer_row(w, coords)
        a_row0 = m0 if prow is m0 else prow
        sc, col, cols = parts.tile_scales(w, scales, coords, N)
        pf = w.add(s.ScalePrefetchOp(acc, sc.sa, sc.sb, sc.bias, a_row0, col, rows, cols,
                                     row_scales(scales)))
    kloop = mma_k_loop(w, cfg, acc, a_st, zero, b_st, full, empty, (zero, one, num_kb),
                       stage, phase, all_ctas, turns=True)   # the other's phases skipped
    last = kloop.results[2]
    # every wait of this tile passed: the other warpgroup may start its next tile
    w.add(s.MbarrierArriveOp(order, other))
    w.add(s.MmaWaitOp(0))
    w.add(s.MbarrierArriveOp(empty, last, all_ctas=all_ctas))
    e = Epi(acc, epi, C, tC, wg, M, N, scales, pf.result if pf else None, rows, a_row0)
    _, extra_out = parts.epilogue_tile(w, cfg, e, coords, m0, ebuf, list(extra_in))
    w.add(scf.YieldOp(*extra_out))
    if pf is not None:
        _trim_prefetch(pf)
    # every warpgroup: the ring position kb positions on (the tile's k-blocks)
    total = t.bin(arith.AddiOp, stage, num_kb)
    stage2 = t.bin(arith.RemUIOp, total, cfg.stages)
    flips = t.bin(arith.AndIOp, t.bin(arith.DivUIOp, total, cfg.stages), 1)
    phase2 = t.bin(arith.XOrIOp, phase, flips)
    t.add(s.YieldOp([stage2, phase2, t.bin(arith.AddiOp, j, 1), ebuf, *own.results]))
    parts.epilogue_finish(r, cfg, list(loop.results)[4:])
    r.add(s.BulkWaitOp(0))
    r.add(s.YieldOp())


def tile_users(cfg) -> int:
    """The consumer warpgroups that handle each tile (and count it, in a fused epilogue's
    signals): one for the ping-pong pair, every one for the cooperative consumers."""
    return 1 if getattr(cfg, "pingpong", False) else cfg.consumers


def pingpong_refusal(parts_cls: type) -> str | None:
    """Why parts of class ``parts_cls`` cannot work as a ping-pong pair, or None: their
    epilogue starts before a tile's main loop (``consumer_tile_start``) or they say so
    (``pingpong_problem``)."""
    why = parts_cls.pingpong_problem
    if why is None and parts_cls.consumer_tile_start is not GemmParts.consumer_tile_start:
        why = "its epilogue starts before the tile's main loop (consumer_tile_start)"
    return why


def check_pingpong_parts(parts) -> None:
    """Parts that :func:`pingpong_refusal` refuses are not built as a ping-pong pair."""
    why = pingpong_refusal(type(parts))
    if why:
        raise ValueError(f"pingpong consumers: not for {type(parts).__name__}: {why}")


__all__ = ["consumer_pingpong", "check_pingpong_parts", "pingpong_refusal", "tile_users"]
