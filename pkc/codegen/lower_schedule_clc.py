"""Lowers ``pks.clc_tile_loop`` (:mod:`pkc.dialects.schedule_clc`) for sm_100a: the
persistent tile loop under cluster launch control, registered in the sm_100a op table of
:mod:`pkc.codegen.lower_schedule_tcgen05`.

A ``ptx.for`` whose body computes the next tile (``next_iv``); the first tile is the
cluster's id. Trip i, slot ``i % 2``, phase ``(i / 2) % 2``:

* the issuer role (one thread per CTA) announces 16 bytes on its CTA's ``full[slot]``;
  the issuer of cluster rank 0 first waits until every reader of the cluster read the
  response two trips ago (its ``empty[slot]``) and then issues
  ``clusterlaunchcontrol.try_cancel`` (PTX ISA 9.7.13.17), in a cluster with
  ``.multicast::cluster::all`` (the response lands in every CTA's ``resp[slot]`` and counts
  on every CTA's ``full[slot]``);
* after the body every role waits on its CTA's ``full[slot]``, decodes the response
  (``clusterlaunchcontrol.query_cancel``, 9.7.13.18), meets (a warpgroup role: every
  thread read it) and arrives once on rank 0's ``empty[slot]`` (``mapa`` in a cluster);
* the next tile is the cancelled cluster's (its first CTA's id / cluster size), or the
  tile count when the request failed (the loop ends). Rows as ``pks.tile_loop``: cluster
  rank r takes m block ``cluster x (grouped m) + r`` (with ``cluster_n``: row ``r % cm``,
  column ``r / cm`` of the cluster's cm x cn block of tiles).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pkc.codegen import ptx, ptx_sm90
from pkc.codegen import ptx_sm100_ext as x5
from pkc.codegen.errors import CodegenError
from pkc.dialects.schedule_structure import cluster_shape

if TYPE_CHECKING:
    from pkc.codegen.lower_schedule import Lowering


def lower_clc_tile_loop(L: "Lowering", op) -> None:
    from pkc.codegen.lower_schedule import _op
    b = L.b
    cl = L.sched.cluster.data
    if cl > 4:
        raise CodegenError(f"{op.name}: cluster launch control is lowered for single CTAs, "
                           f"CTA pairs and two pairs (not clusters of {cl})")
    bm, bn, gm = op.bm.data, op.bn.data, op.group_m.data
    cm, cn = cluster_shape(op)          # cm x cn tiles per cluster (pks.tile_loop's cluster_n)
    M, N = L.v(op.m), L.v(op.n)
    num_m = b.bin("div", "u32", b.add32(M, bm - 1), bm)
    num_n = b.bin("div", "u32", b.add32(N, bn - 1), bn)
    num_mc = b.bin("div", "u32", b.add32(num_m, cm - 1), cm) if cm > 1 else num_m
    if cn > 1:
        num_n = b.bin("div", "u32", b.add32(num_n, cn - 1), cn)
    total = b.mul32(num_mc, num_n)
    group_sz = b.mul32(num_n, gm)
    rank = b.sreg("%cluster_ctarank") if cl > 1 else None
    lead_cta = b.setp("eq", "u32", rank, 0) if cl > 1 else None
    resp_t = op.resp.type
    first_tile = b.sreg("%clusterid.x") if cl > 1 else b.sreg("%ctaid.x")
    loop, body = b.for_carried(first_tile, total, 0,
                               [b.u32(0), *[L.v(x) for x in op.inits]], "u32", next_iv=True)
    tile, trip, *carried = body.args
    with b.at(body):
        slot = b.bin("and", "b32", trip, 1)
        phase = b.bin("and", "b32", b.bin("shr", "u32", trip, 1), 1)
        full = b.r(ptx.FmaOp(slot, b.u32(8), L.bar_base[op.full], "u32", "mad.lo"))
        empty = b.r(ptx.FmaOp(slot, b.u32(8), L.bar_base[op.empty], "u32", "mad.lo"))
        resp = b.r(ptx.FmaOp(slot, b.u32(resp_t.bytes.data), L.smem_base[op.resp], "u32",
                             "mad.lo"))
        if op.issuer.data:
            if L.role is None or L.role.single_thread is None:
                raise CodegenError(f"{op.name}: the issuer is a single_thread role")
            if cl > 1:
                b.add(ptx_sm90.MbarrierArriveOp(full, b.u32(16)))
                with b.if_(lead_cta):
                    _request(b, L, empty, full, resp, phase, multicast=True)
            else:
                b.add(ptx_sm90.MbarrierArriveOp(full, b.u32(16)))
                _request(b, L, empty, full, resp, phase, multicast=False)
        # the tile (grouped order, as pks.tile_loop)
        g = b.bin("div", "u32", tile, group_sz)
        first = b.mul32(g, gm)
        gsz = b.bin("min", "u32", b.bin("sub", "u32", num_mc, first), gm)
        r = b.bin("sub", "u32", tile, b.mul32(g, group_sz))
        mb = b.add32(first, b.bin("rem", "u32", r, gsz))
        nb = b.bin("div", "u32", r, gsz)
        if cn > 1:
            mb = b.r(ptx.FmaOp(mb, b.u32(cm), b.bin("rem", "u32", rank, cm), "u32", "mad.lo"))
            nb = b.r(ptx.FmaOp(nb, b.u32(cn), b.bin("div", "u32", rank, cm), "u32", "mad.lo"))
        elif cl > 1:
            mb = b.r(ptx.FmaOp(mb, b.u32(cl), rank, "u32", "mad.lo"))
        m0, n0, *args = op.block.args
        L.vals[m0] = b.mul32(mb, bm)
        L.vals[n0] = b.mul32(nb, bn)
        for a, c in zip(args, carried):
            L.vals[a] = c
        for inner in list(op.block.ops)[:-1]:
            _op(L, inner)
        vals = [L.v(x) for x in op.block.last_op.operands]
        b.add(ptx_sm90.MbarrierWaitParityOp(full, phase, L.deadline))
        q = b.add(x5.ClcQueryOp(resp))
        guard = None
        if L.role is None or L.role.single_thread is None:
            # every thread of the warpgroup read it before the one arrival
            b.add(ptx_sm90.NamedBarrierOp(b.add32(L.warpgroup(), 1), 128))
            guard = L.lead()
        if cl > 1:      # the readers of every CTA free the slot on rank 0's empty
            b.add(ptx_sm90.MbarrierArriveOp(b.r(ptx_sm90.MapaOp(empty, b.u32(0))), guard=guard,
                                            remote=True))
        else:
            b.add(ptx_sm90.MbarrierArriveOp(empty, guard=guard))
        x = b.bin("div", "u32", q.ctaid_x, cl) if cl > 1 else q.ctaid_x
        nxt = b.selp("b32", x, total, q.canceled)
        b.add(ptx.YieldOp([nxt, b.add32(trip, 1), *vals]))
    for res, val in zip(op.res, loop.res[1:]):
        L.vals[res] = val


def _request(b, L, empty, full, resp, phase, multicast: bool) -> None:
    """Waits until the slot's readers are done with it, then asks for a tile."""
    b.add(ptx_sm90.MbarrierWaitParityOp(empty, b.bin("xor", "b32", phase, 1), L.deadline))
    b.add(x5.ClcTryCancelOp(resp, full, multicast))


__all__ = ["lower_clc_tile_loop"]
