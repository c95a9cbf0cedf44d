"""Row-wise bulk copies for tile loads and puts on sm_90a / sm_100a (``cp.async.bulk``).

A tile's last dimension is contiguous in shared and in global memory, so each tile row
is one bulk copy when its shared address, global address and byte count are multiples of
16 (the copy engine's rule). Shared rows are aligned when the row is a multiple of 16
bytes (slots are 128-aligned): that is checked here, at compile time; the global side
depends on run-time offsets and is checked per row, and rows that fail (or are clipped to
a size that is not a multiple of 16) fall back to element ld/st in the same loop. Rows are
dealt to threads (thread t issues rows t, t+128, ...).

* Load: ``cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes`` into the
  tile; each thread then arrives on the CTA's mbarrier with the bytes it issued
  (``arrive.expect_tx``) and all wait for the phase. Tails past the buffer's end are zero-
  filled by ordinary stores. A ``fence.proxy.async.shared::cta`` before the copies orders
  earlier generic accesses of the slot before the copy engine writes it.
* Put / store: ``cp.async.bulk.global.shared::cta.bulk_group`` (``cp.reduce.async.bulk``
  ``.add`` for put-add) from the tile to the (peer's) buffer, then ``commit_group`` and
  ``wait_group 0`` (the writes complete) and ``fence.proxy.async.global`` in the issuing
  thread, so that a later ``pk.signal``'s release covers them.

This is the first step of the fast Hopper path (TMA tensor maps + wgmma come later); the
portable path stays the reference.
"""

from __future__ import annotations

from xdsl.ir import SSAValue

from pkc.codegen import ptx
from pkc.codegen.abi import SiteKind
from pkc.codegen.context import TileRef, WorkerCtx
from pkc.codegen.elements import load_raw, store_raw
from pkc.codegen.smem import HDR_MBARRIER
from pkc.codegen.lower_sync import exit_if_timed_out, record_timeout
from pkc.codegen.targets import THREADS

_REDUCE = {"f32": "add.f32", "f16": "add.noftz.f16", "bf16": "add.noftz.bf16"}


def _eligible_statically(ctx: WorkerCtx, g, tile: TileRef, add: bool = False) -> bool:
    if not ctx.target.bulk_copies:
        return False
    row_bytes = tile.shape[-1] * tile.elem.size
    buf_row_bytes = g.buf.type.get_shape()[-1] * tile.elem.size
    if row_bytes % 16 or buf_row_bytes % 16 and g.buf.type.rank > 1:
        return False
    if add and tile.elem.name not in _REDUCE:
        return False
    return True


class _Row:
    """Per-row addressing: global address, in-bounds guard of the leading dims, clipped
    length and whether the row can go as one bulk copy."""

    def __init__(self, ctx: WorkerCtx, g, tile: TileRef, r: SSAValue):
        b = ctx.b
        lead = tile.shape[:-1]
        L = tile.shape[-1]
        idx = ctx.unravel(r, lead) if lead else []
        self.idx = idx
        self.addr, self.guard = g.element(list(idx) + [0])
        room = g.room[-1]
        self.clip = b.s64(L) if room is None else b.bin("min", "s64", room, b.s64(L))
        bytes64 = b.mul64(self.clip, tile.elem.size)
        self.bytes = b.cvt("u32", "s64", bytes64)
        ok = b.setp("eq", "b64", b.bin("and", "b64", self.addr, b.imm(15, "b64")), b.imm(0, "b64"))
        ok = b.pand(ok, b.setp("eq", "b32", b.bin("and", "b32", self.bytes, b.imm(15, "b32")),
                               b.imm(0, "b32")))
        ok = b.pand(ok, b.setp("gt", "s64", self.clip, 0))
        if self.guard is not None:
            ok = b.pand(ok, self.guard)
        self.bulk = ok
        first = ctx.ravel(list(idx) + [0], tile.shape)
        self.smem = ctx.tile_addr(tile, first)


def try_bulk_load(ctx: WorkerCtx, g, tile: TileRef) -> bool:
    if not _eligible_statically(ctx, g, tile):
        return False
    from pkc.codegen.lower_memory import load_cache

    b = ctx.b
    L = tile.shape[-1]
    nrows = tile.numel // L
    mbar = b.add32(ctx.smem, HDR_MBARRIER)
    b.comment("bulk load: cp.async.bulk per row, mbarrier complete_tx")
    b.fence("proxy.async.shared::cta")
    b.bar()
    loop, block = b.for_carried(ctx.tid, b.u32(nrows), b.u32(THREADS), [b.u32(0)], type="s32")
    with b.at(block):
        r, total = block.args
        row = _Row(ctx, g, tile, r)
        b.add(ptx.CpAsyncBulkLoadOp(row.smem, row.addr, row.bytes, mbar, guard=row.bulk))
        issued = b.selp("u32", row.bytes, b.u32(0), row.bulk)
        # Elements the copy does not write: all of a row that is not bulk, the tail of a
        # clipped row (zeros), and out-of-bounds rows (zeros).
        with b.for_(0, L, 1, type="s64") as c:
            covered = b.pand(row.bulk, b.setp("lt", "s64", c, row.clip))
            with b.if_(covered, negate=True):
                in_row = b.setp("lt", "s64", c, row.clip)
                guard = in_row if row.guard is None else b.pand(in_row, row.guard)
                addr = b.r(ptx.FmaOp(c, b.s64(tile.elem.size), row.addr, "s64", "mad.lo"))
                raw = load_raw(b, tile.elem, "global", addr, guard, cache=load_cache(g.buf))
                saddr = b.r(ptx.FmaOp(b.cvt("u32", "s64", c), b.u32(tile.elem.size), row.smem,
                                      "u32", "mad.lo"))
                store_raw(b, tile.elem, "shared", saddr, raw)
        b.add(ptx.YieldOp([b.add32(total, issued)]))
    state = b.add(ptx.MbarrierOp("arrive_expect_tx", mbar, loop.res[0])).results[0]
    wait = b.add(ptx.MbarrierWaitOp(mbar, state, ctx.timeout))
    site = ctx.site(SiteKind.MBARRIER, g.op)
    record_timeout(ctx, wait.timed_out, site, b.u32(0xFFFFFFFF), loop.res[0], b.u32(0))
    exit_if_timed_out(ctx)
    return True


def try_bulk_store(ctx: WorkerCtx, g, tile: TileRef, add: bool) -> bool:
    if not _eligible_statically(ctx, g, tile, add):
        return False
    from pkc.codegen.lower_memory import atomic_add

    b = ctx.b
    L = tile.shape[-1]
    nrows = tile.numel // L
    b.comment("bulk store: cp" + (".reduce" if add else "") + ".async.bulk per row")
    b.fence("proxy.async.shared::cta")
    b.bar()
    with ctx.for_elements(nrows) as r:
        row = _Row(ctx, g, tile, r)
        b.add(ptx.CpAsyncBulkStoreOp(row.addr, row.smem, row.bytes,
                                     _REDUCE[tile.elem.name] if add else None, guard=row.bulk))
        with b.if_(row.bulk, negate=True):
            with b.for_(0, L, 1, type="s64") as c:
                in_row = b.setp("lt", "s64", c, row.clip)
                guard = in_row if row.guard is None else b.pand(in_row, row.guard)
                addr = b.r(ptx.FmaOp(c, b.s64(tile.elem.size), row.addr, "s64", "mad.lo"))
                saddr = b.r(ptx.FmaOp(b.cvt("u32", "s64", c), b.u32(tile.elem.size), row.smem,
                                      "u32", "mad.lo"))
                raw = b.ld("shared", tile.elem.mem, saddr)
                if add:
                    atomic_add(ctx, tile, addr, raw, guard)
                else:
                    store_raw(b, tile.elem, "global", addr, raw, guard)
    b.add(ptx.BulkGroupOp())
    b.add(ptx.BulkGroupOp(wait=0))
    b.fence("proxy.async.global")
    b.bar()
    return True
