"""``pk.mma`` (``acc + a @ b``, f32 accumulator) on tiles in shared memory.

* bf16 / f16 operands: ``mma.sync.aligned.m16n8k16.row.col.f32.<t>.<t>.f32``. The output
  is cut into 16x8 fragments dealt round-robin to the CTA's 4 warps; each warp loads its
  A/B fragments from shared memory in the PTX ISA's register layout (groupID = lane/4,
  threadID_in_group = lane%4), with zero padding where M, N or K are not multiples of
  16/8/16, accumulating over K in registers.
* f32 / f64 operands: a scalar FMA loop per output element (f64 products summed in f64,
  then added to the f32 accumulator, as the interpreter does).

This is the portable reference; the Hopper fast path (TMA + wgmma, warp-specialized)
replaces it per target without changing the tile contract.
"""

from __future__ import annotations

from pkc.codegen import ptx
from pkc.codegen.context import TileRef, WorkerCtx, lowers
from pkc.codegen.elements import convert, widen
from pkc.dialects import kernel as k

WARPS = 4


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


@lowers(k.MmaOp)
def _mma(ctx: WorkerCtx, op: k.MmaOp) -> None:
    a, bt, c = ctx.tile(op.a), ctx.tile(op.b), ctx.tile(op.acc)
    d = ctx.tile(op.result)
    ctx.b.comment(f"pk.mma {a.type} x {bt.type} + {c.type}")
    if a.elem.name in ("bf16", "f16"):
        _mma_sync(ctx, a, bt, c, d)
    else:
        _mma_fma(ctx, a, bt, c, d)
    ctx.b.bar()


def _mma_sync(ctx: WorkerCtx, a: TileRef, bt: TileRef, c: TileRef, d: TileRef) -> None:
    b = ctx.b
    M, K = a.shape
    N = bt.shape[1]
    t = a.elem.name
    warp = b.bin("shr", "u32", ctx.tid, 5)
    lane = b.bin("and", "b32", ctx.tid, 31)
    group = b.bin("shr", "u32", lane, 2)
    tig = b.bin("and", "b32", lane, 3)
    two_t = b.bin("shl", "b32", tig, 1)
    nfn = _ceil(N, 8)
    frags = _ceil(M, 16) * nfn

    def smem16(tile: TileRef, row, col, rows: int, cols: int, check_row: bool, check_col: bool):
        """A 16-bit element of a row-major tile, 0 outside [rows, cols)."""
        lin = b.r(ptx.FmaOp(row, b.u32(cols), col, "u32", "mad.lo"))
        addr = ctx.tile_addr(tile, lin)
        guard = _guard(row, rows, check_row, col, cols, check_col)
        if guard is None:
            return b.ld("shared", "b16", addr)
        return b.ld("shared", "b16", addr, guard=guard, other=b.imm(0, "b16"))

    def smem_f32(tile: TileRef, row, col, check_row: bool, check_col: bool):
        lin = b.r(ptx.FmaOp(row, b.u32(N), col, "u32", "mad.lo"))
        addr = ctx.tile_addr(tile, lin)
        guard = _guard(row, M, check_row, col, N, check_col)
        return addr, guard

    def _guard(row, rows, check_row, col, cols, check_col):
        guard = None
        if check_row:
            guard = b.setp("lt", "u32", row, rows)
        if check_col:
            pc = b.setp("lt", "u32", col, cols)
            guard = pc if guard is None else b.pand(guard, pc)
        return guard

    mrag, nrag, krag = M % 16 != 0, N % 8 != 0, K % 16 != 0
    with b.for_(warp, b.u32(frags), b.u32(WARPS), type="s32") as f:
        mi = b.bin("div", "u32", f, nfn)
        ni = b.bin("rem", "u32", f, nfn)
        row0 = b.r(ptx.FmaOp(mi, b.u32(16), group, "u32", "mad.lo"))
        row1 = b.add32(row0, 8)
        nbase = b.mul32(ni, 8)
        colc = b.add32(nbase, two_t)
        colc1 = b.add32(colc, 1)
        colb = b.add32(nbase, group)
        cs = []
        for row in (row0, row1):
            for col in (colc, colc1):
                addr, guard = smem_f32(c, row, col, mrag, nrag)
                if guard is None:
                    cs.append(b.ld("shared", "f32", addr))
                else:
                    cs.append(b.ld("shared", "f32", addr, guard=guard, other=b.imm(0.0, "f32")))
        loop, block = b.for_carried(b.u32(0), b.u32(K), b.u32(16), cs, type="s32")
        with b.at(block):
            kk, *acc = block.args
            ka = b.add32(kk, two_t)
            ka1, ka8, ka9 = b.add32(ka, 1), b.add32(ka, 8), b.add32(ka, 9)
            areg = [b.r(ptx.PackOp(smem16(a, r, k0, M, K, mrag, krag), smem16(a, r, k1, M, K, mrag, krag)))
                    for (r, k0, k1) in ((row0, ka, ka1), (row1, ka, ka1), (row0, ka8, ka9), (row1, ka8, ka9))]
            breg = [b.r(ptx.PackOp(smem16(bt, k0, colb, K, N, krag, nrag), smem16(bt, k1, colb, K, N, krag, nrag)))
                    for (k0, k1) in ((ka, ka1), (ka8, ka9))]
            mma = b.add(ptx.MmaSyncOp("m16n8k16", f"f32.{t}.{t}.f32", areg, breg, acc))
            b.add(ptx.YieldOp(list(mma.results)))
        i = 0
        for row in (row0, row1):
            for col in (colc, colc1):
                addr, guard = smem_f32(d, row, col, mrag, nrag)
                kw = {"guard": guard} if guard is not None else {}
                b.st("shared", "f32", addr, loop.res[i], **kw)
                i += 1


def _mma_fma(ctx: WorkerCtx, a: TileRef, bt: TileRef, c: TileRef, d: TileRef) -> None:
    b = ctx.b
    M, K = a.shape
    N = bt.shape[1]
    ct = a.elem.ctype  # f32 or f64
    with ctx.for_elements(M * N) as e:
        m = b.bin("div", "u32", e, N)
        n = b.bin("rem", "u32", e, N)
        zero = b.imm(0.0, ct)
        loop, block = b.for_carried(b.u32(0), b.u32(K), b.u32(1), [zero], type="s32")
        with b.at(block):
            kk, acc = block.args
            x = widen(b, a.elem, b.ld("shared", a.elem.mem,
                                      ctx.tile_addr(a, b.r(ptx.FmaOp(m, b.u32(K), kk, "u32", "mad.lo")))))
            y = widen(b, bt.elem, b.ld("shared", bt.elem.mem,
                                       ctx.tile_addr(bt, b.r(ptx.FmaOp(kk, b.u32(N), n, "u32", "mad.lo")))))
            b.add(ptx.YieldOp([b.fma(x.reg, y.reg, acc, ct)]))
        from pkc.codegen.elements import Val

        prod = convert(b, Val(loop.res[0], ct), "f32")
        acc0 = b.ld("shared", "f32", ctx.tile_addr(c, e))
        b.st("shared", "f32", ctx.tile_addr(d, e), b.bin("add", "f32", acc0, prod.reg))
