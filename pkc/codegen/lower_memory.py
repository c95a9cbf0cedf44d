"""``pk.load`` / ``pk.store`` / ``pk.put``: tiles between shared and global memory, with
TMA's bounds rules (out-of-bounds elements read 0 and are dropped on write).

Portable path: each thread moves elements ``tid, tid+128, ...`` of the tile, one
guarded ``ld``/``st`` each. A put writes the peer's copy through its base pointer (from
the buffer's pointer array); a put with ``add`` uses ``red.relaxed.sys.global.add`` per
element (f32, f64, f16; bf16 on sm_90+) or a CAS loop (bf16 on sm_80). Loads of buffers
that the kernel writes, or that peers write (symmetric), bypass L1 (``.cg``): L1 is not
coherent, and a wait's acquire must reach the data.

On targets with bulk copies, :mod:`pkc.codegen.lower_bulk` moves whole rows with
``cp.async.bulk`` where their size and alignment allow, and this file handles the rest.
"""

from __future__ import annotations

from xdsl.ir import SSAValue

from pkc.codegen import ptx
from pkc.codegen.context import BufferRef, TileRef, WorkerCtx, lowers
from pkc.codegen.elements import load_raw, store_raw, widen
from pkc.dialects import kernel as k


class GlobalTile:
    """Addressing of a tile placed at ``offsets`` in a buffer at ``base``: per-tile parts
    computed once, per-element address and in-bounds predicate on demand."""

    def __init__(self, ctx: WorkerCtx, buf: BufferRef, base: SSAValue, offsets: list[SSAValue],
                 tile_shape: tuple[int, ...], op=None):
        b = ctx.b
        self.ctx, self.buf, self.tile_shape, self.op = ctx, buf, tile_shape, op
        shape = buf.type.get_shape()
        self.strides = [1] * len(shape)
        for d in reversed(range(len(shape) - 1)):
            self.strides[d] = self.strides[d + 1] * shape[d + 1]
        es = buf.elem.size
        lin = None
        for d, off in enumerate(offsets):
            term = b.mul64(ctx.index(off), self.strides[d]) if self.strides[d] != 1 else ctx.index(off)
            lin = term if lin is None else b.add64(lin, term)
        self.base = b.r(ptx.FmaOp(lin, b.s64(es), base, "s64", "mad.lo")) if lin is not None else base
        # Per dimension, how many tile rows fit before the buffer's end (None: all do).
        self.room: list[SSAValue | None] = []
        for d, off in enumerate(offsets):
            c = ctx.const_of(off)
            if c is not None and c + tile_shape[d] <= shape[d]:
                self.room.append(None)
            else:
                self.room.append(b.bin("sub", "s64", b.s64(shape[d]), ctx.index(off)))

    def element(self, idx: list[SSAValue | int]) -> tuple[SSAValue, SSAValue | None]:
        """(address, in-bounds predicate or None) of the element at tile index ``idx``."""
        b = self.ctx.b
        off = None
        guard = None
        for d, i in enumerate(idx):
            if isinstance(i, int):
                if self.room[d] is not None:
                    p = b.setp("gt", "s64", self.room[d], i)
                    guard = p if guard is None else b.pand(guard, p)
                if i:
                    term = b.s64(i * self.strides[d])
                    off = term if off is None else b.add64(off, term)
                continue
            i64 = b.cvt("u64", "u32", i)
            if self.room[d] is not None:
                p = b.setp("lt", "s64", i64, self.room[d])
                guard = p if guard is None else b.pand(guard, p)
            term = b.mul64(i64, self.strides[d]) if self.strides[d] != 1 else i64
            off = term if off is None else b.add64(off, term)
        if off is None:
            return self.base, guard
        addr = b.r(ptx.FmaOp(off, b.s64(self.buf.elem.size), self.base, "s64", "mad.lo"))
        return addr, guard


def base_for(ctx: WorkerCtx, buf: BufferRef, peer: SSAValue | None) -> SSAValue:
    from pkc.codegen.lower import peer_pointer

    if peer is None:
        return buf.own
    return peer_pointer(ctx, buf.param, ctx.index(peer))


def load_cache(buf: BufferRef) -> str | None:
    return "cg" if (buf.written or buf.arg.symmetric) else None


@lowers(k.LoadOp)
def _load(ctx: WorkerCtx, op: k.LoadOp) -> None:
    from pkc.codegen.lower_bulk import try_bulk_load
    from pkc.codegen.lower_sync import worker_barrier

    b = ctx.b
    if not ctx.in_foreach:
        if ctx.wrote:
            worker_barrier(ctx, op)  # the leader's writes come before every CTA's read
        ctx.read = True
    buf = ctx.buffer(op.buffer)
    tile = ctx.tile(op.result)
    src = "peer" if op.peer is not None else "own"
    b.comment(f"pk.load {buf.arg.name}[...] ({src}) -> {tile.type}")
    g = GlobalTile(ctx, buf, base_for(ctx, buf, op.peer), list(op.indices), tile.shape, op)
    if try_bulk_load(ctx, g, tile):
        return
    with ctx.for_elements(tile.numel) as e:
        addr, guard = g.element(ctx.unravel(e, tile.shape))
        raw = load_raw(b, tile.elem, "global", addr, guard, cache=load_cache(buf))
        store_raw(b, tile.elem, "shared", ctx.tile_addr(tile, e), raw)
    b.bar()


def _writes(ctx: WorkerCtx, op, peer: SSAValue | None, add: bool) -> None:
    from pkc.codegen.lower_bulk import try_bulk_store
    from pkc.codegen.lower_sync import _side_effect_scope, worker_barrier

    b = ctx.b
    if not ctx.in_foreach:
        if ctx.read:
            worker_barrier(ctx, op)  # every CTA's reads come before the leader's write
        ctx.wrote = True
    buf = ctx.buffer(op.buffer)
    tile = ctx.tile(op.tile)
    what = "pk.put" + (" add" if add else "") if peer is not None else "pk.store"
    b.comment(f"{what} {tile.type} -> {buf.arg.name}[...]")
    with _side_effect_scope(ctx):
        g = GlobalTile(ctx, buf, base_for(ctx, buf, peer), list(op.indices), tile.shape, op)
        if not try_bulk_store(ctx, g, tile, add):
            with ctx.for_elements(tile.numel) as e:
                addr, guard = g.element(ctx.unravel(e, tile.shape))
                raw = b.ld("shared", tile.elem.mem, ctx.tile_addr(tile, e))
                if add:
                    atomic_add(ctx, tile, addr, raw, guard)
                else:
                    store_raw(b, tile.elem, "global", addr, raw, guard)
            b.bar()


def atomic_add(ctx: WorkerCtx, tile: TileRef, addr: SSAValue, raw: SSAValue,
               guard: SSAValue | None) -> None:
    """``*addr += raw`` atomically at system scope (peers add into one element)."""
    b = ctx.b
    e = tile.elem
    kw = {"guard": guard} if guard is not None else {}
    if e.name in ("f32", "f64"):
        b.add(ptx.RedOp("add", e.name, addr, raw, sem="relaxed", scope="sys", **kw))
    elif e.name == "f16" or (e.name == "bf16" and ctx.target.red_bf16):
        b.add(ptx.RedOp("add.noftz", e.name, addr, raw, sem="relaxed", scope="sys", **kw))
    else:
        b.add(ptx.AtomicAddCas16Op(e.name, addr, widen(b, e, raw).reg, "sys", guard))


@lowers(k.StoreOp)
def _store(ctx: WorkerCtx, op: k.StoreOp) -> None:
    _writes(ctx, op, None, add=False)


@lowers(k.PutOp)
def _put(ctx: WorkerCtx, op: k.PutOp) -> None:
    _writes(ctx, op, op.peer, add=op.add is not None)
