"""Hand-written kernel-level pk IR for codegen tests: the collectives and fused GEMMs that
the passes will produce (all-reduce, all-gather, reduce-scatter, all-to-all, AG+GEMM,
GEMM+RS, GEMM+AR) written the way a pass would, and op-coverage kernels (maps, reductions,
integer tiles, loops, put-add per element type).

Each generator returns a :class:`Case`: IR text for ``func.func @main`` with one
``pk.kernel``, and a reference in torch that follows the interpreter's rules (f32 math,
ranks reduced in rank order, rounded once). Tiles do not divide the shapes: rows use
"bands" (full tiles and a tail tile) where a tile must not run into the next rank's
region, columns overhang the buffer's end (clipped by the bounds rules).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from tests.gpu.irgen import IR, bands, buf, kernel_function, tile

Ref = Callable[[list[list[torch.Tensor]]], list[list[torch.Tensor]]]
F32 = "f32"


@dataclass
class Case:
    name: str
    world: int
    ir: str
    reference: Ref | None = None  # None: compare with the interpreter
    atol: float = 0.0
    rtol: float = 0.0
    meta: dict = field(default_factory=dict)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _tdt(dt: str) -> torch.dtype:
    return {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[dt]


def _tol(dt: str, gemm: bool = False) -> tuple[float, float]:
    if dt == "f32":
        return (1e-4, 1e-4) if gemm else (1e-6, 1e-6)
    return (3e-2, 2e-2) if gemm else (1e-2, 1e-2)


# ----------------------------------------------------------------------------------------
# Collectives.


def all_reduce(W: int, R: int, C: int, dt: str, TR: int = 32, TC: int = 64, sms: int = 8) -> Case:
    """One-shot all-reduce: every rank puts its tiles into every peer's staging buffer
    (rows padded per rank so tiles never cross ranks), then sums them in rank order."""
    Rp = _cdiv(R, TR) * TR
    nti, ntj = _cdiv(R, TR), _cdiv(C, TC)
    st, tt, t32 = buf([W * Rp, C], dt, True), tile([TR, TC], dt), tile([TR, TC], F32)
    sg = "!pk.signals<1>"

    def body(ir: IR, ins, outs):
        ir.emit(f"%stage = pk.alloc : {st}")
        ir.emit(f"%sig = pk.alloc_signals : {sg}")
        with ir.worker("communicate", sms):
            rank = ir.rank()
            with ir.foreach([nti, ntj]) as (i, j):
                r0, c0 = ir.mul(i, TR), ir.mul(j, TC)
                t = ir.load(ins[0], buf([R, C], dt), [r0, c0], tt)
                srow = ir.add(ir.mul(rank, Rp), r0)
                with ir.loop(0, W) as p:
                    ir.put(t, tt, "%stage", st, [srow, c0], p)
                    ir.signal("%sig", sg, 0, p)
            ir.wait("%sig", sg, 0, W * nti * ntj)
            with ir.foreach([nti, ntj]) as (i, j):
                r0, c0 = ir.mul(i, TR), ir.mul(j, TC)
                z = ir.fill(0.0, t32, F32)
                src, acc, res, close = ir.loop_carried(0, W, 1, z, t32)
                part = ir.load("%stage", st, [ir.add(ir.mul(src, Rp), r0), c0], tt)
                p32 = ir.map("cast", [part], [tt], t32)
                close(ir.map("add", [acc, p32], [t32, t32], t32))
                o = ir.map("cast", [res], [t32], tt)
                ir.store(o, tt, outs[0], buf([R, C], dt), [r0, c0])

    text = kernel_function("all_reduce", W, [([R, C], dt)], [([R, C], dt, False)], body)

    def ref(inputs):
        total = torch.zeros(R, C, dtype=torch.float32)
        for r in range(W):
            total = total + inputs[r][0].float()
        return [[total.to(_tdt(dt))] for _ in range(W)]

    return Case(f"all_reduce_W{W}_{R}x{C}_{dt}", W, text, ref, *_tol(dt))


def all_gather(W: int, R: int, C: int, dt: str, TR: int = 32, TC: int = 64, sms: int = 8) -> Case:
    """Direct all-gather along rows into every rank's (symmetric) output."""
    ntj = _cdiv(C, TC)
    ot = buf([W * R, C], dt, True)
    sg = "!pk.signals<1>"
    ntiles = sum(n for n, _ in bands(R, TR)) * ntj

    def body(ir: IR, ins, outs):
        ir.emit(f"%sig = pk.alloc_signals : {sg}")
        with ir.worker("communicate", sms):
            rank = ir.rank()
            base = 0
            for count, tr in bands(R, TR):
                tt = tile([tr, TC], dt)
                with ir.foreach([count, ntj]) as (i, j):
                    r0, c0 = ir.add(ir.mul(i, tr), base), ir.mul(j, TC)
                    t = ir.load(ins[0], buf([R, C], dt), [r0, c0], tt)
                    orow = ir.add(ir.mul(rank, R), r0)
                    with ir.loop(0, W) as p:
                        ir.put(t, tt, outs[0], ot, [orow, c0], p)
                        ir.signal("%sig", sg, 0, p)
                base += count * tr
            ir.wait("%sig", sg, 0, W * ntiles)

    text = kernel_function("all_gather", W, [([R, C], dt)], [([W * R, C], dt, True)], body)

    def ref(inputs):
        full = torch.cat([inputs[r][0] for r in range(W)], 0)
        return [[full] for _ in range(W)]

    return Case(f"all_gather_W{W}_{R}x{C}_{dt}", W, text, ref, 0.0, 0.0)


def reduce_scatter(W: int, Rc: int, C: int, dt: str, TR: int = 32, TC: int = 64, sms: int = 8) -> Case:
    """Rank p's chunk of every rank's input is put-added (f32) into rank p's scratch."""
    ntj = _cdiv(C, TC)
    sc = buf([Rc, C], F32, True)
    sg = "!pk.signals<1>"
    per_chunk = sum(n for n, _ in bands(Rc, TR)) * ntj

    def body(ir: IR, ins, outs):
        ir.emit(f"%scratch = pk.alloc {{zero}} : {sc}")
        ir.emit(f"%sig = pk.alloc_signals : {sg}")
        with ir.worker("communicate", sms):
            base = 0
            for count, tr in bands(Rc, TR):
                tt, t32 = tile([tr, TC], dt), tile([tr, TC], F32)
                with ir.foreach([W, count, ntj]) as (p, i, j):
                    r0, c0 = ir.add(ir.mul(i, tr), base), ir.mul(j, TC)
                    t = ir.load(ins[0], buf([W * Rc, C], dt), [ir.add(ir.mul(p, Rc), r0), c0], tt)
                    ir.put(ir.map("cast", [t], [tt], t32), t32, "%scratch", sc, [r0, c0], p, add=True)
                    ir.signal("%sig", sg, 0, p)
                base += count * tr
            ir.wait("%sig", sg, 0, W * per_chunk)
            base = 0
            for count, tr in bands(Rc, TR):
                tt, t32 = tile([tr, TC], dt), tile([tr, TC], F32)
                with ir.foreach([count, ntj]) as (i, j):
                    r0, c0 = ir.add(ir.mul(i, tr), base), ir.mul(j, TC)
                    s = ir.load("%scratch", sc, [r0, c0], t32)
                    ir.store(ir.map("cast", [s], [t32], tt), tt, outs[0], buf([Rc, C], dt), [r0, c0])
                base += count * tr

    text = kernel_function("reduce_scatter", W, [([W * Rc, C], dt)], [([Rc, C], dt, False)], body)

    def ref(inputs):
        total = torch.zeros(W * Rc, C, dtype=torch.float32)
        for r in range(W):
            total = total + inputs[r][0].float()
        return [[total[r * Rc:(r + 1) * Rc].to(_tdt(dt))] for r in range(W)]

    return Case(f"reduce_scatter_W{W}_{Rc}x{C}_{dt}", W, text, ref, *_tol(dt))


def all_to_all(W: int, Rc: int, C: int, dt: str, TR: int = 32, TC: int = 64, sms: int = 8) -> Case:
    """Chunk p of rank r's rows goes to rows r*Rc.. of rank p's (symmetric) output."""
    ntj = _cdiv(C, TC)
    ot = buf([W * Rc, C], dt, True)
    sg = "!pk.signals<1>"
    per_chunk = sum(n for n, _ in bands(Rc, TR)) * ntj

    def body(ir: IR, ins, outs):
        ir.emit(f"%sig = pk.alloc_signals : {sg}")
        with ir.worker("communicate", sms):
            rank = ir.rank()
            base = 0
            for count, tr in bands(Rc, TR):
                tt = tile([tr, TC], dt)
                with ir.foreach([W, count, ntj]) as (p, i, j):
                    r0, c0 = ir.add(ir.mul(i, tr), base), ir.mul(j, TC)
                    t = ir.load(ins[0], buf([W * Rc, C], dt), [ir.add(ir.mul(p, Rc), r0), c0], tt)
                    ir.put(t, tt, outs[0], ot, [ir.add(ir.mul(rank, Rc), r0), c0], p)
                    ir.signal("%sig", sg, 0, p)
                base += count * tr
            ir.wait("%sig", sg, 0, W * per_chunk)

    text = kernel_function("all_to_all", W, [([W * Rc, C], dt)], [([W * Rc, C], dt, True)], body)

    def ref(inputs):
        chunks = [torch.chunk(inputs[r][0], W, 0) for r in range(W)]
        return [[torch.cat([chunks[s][d] for s in range(W)], 0)] for d in range(W)]

    return Case(f"all_to_all_W{W}_{Rc}x{C}_{dt}", W, text, ref, 0.0, 0.0)


# ----------------------------------------------------------------------------------------
# Fused GEMMs.


def _gemm_tile(ir: IR, a_buf: str, a_type: str, a_row, b_buf: str, b_type: str, col, K: int,
               tm: int, TN: int, TK: int, dt: str) -> str:
    """acc (tm x TN f32) = A[a_row:, :] @ B[:, col:] over K in steps of TK."""
    at, bt, ct = tile([tm, TK], dt), tile([TK, TN], dt), tile([tm, TN], F32)
    z = ir.fill(0.0, ct, F32)
    kk, acc, res, close = ir.loop_carried(0, K, TK, z, ct)
    a = ir.load(a_buf, a_type, [a_row, kk], at)
    b = ir.load(b_buf, b_type, [kk, col], bt)
    close(ir.mma(a, at, b, bt, acc, ct))
    return res


def ag_gemm(W: int, R: int, K: int, N: int, dt: str, TM: int = 64, TN: int = 64, TK: int = 32,
            comm_sms: int = 8, comp_sms: int = 24) -> Case:
    """AG+GEMM: A's rows are gathered into every rank's staging buffer by a communicate
    worker; the compute worker starts with its own rows and multiplies each source's rows
    as soon as that source's signal count is complete."""
    ntk, ntn = _cdiv(K, TK), _cdiv(N, TN)
    st = buf([W * R, K], dt, True)
    sg = f"!pk.signals<{W}>"
    a_tiles = sum(n for n, _ in bands(R, TM)) * ntk
    bt_ = buf([K, N], dt)
    ot = buf([W * R, N], dt)

    def body(ir: IR, ins, outs):
        ir.emit(f"%stage = pk.alloc : {st}")
        ir.emit(f"%sig = pk.alloc_signals : {sg}")
        with ir.worker("communicate", comm_sms):
            rank = ir.rank()
            base = 0
            for count, tm in bands(R, TM):
                tt = tile([tm, TK], dt)
                with ir.foreach([count, ntk]) as (i, kk):
                    r0, k0 = ir.add(ir.mul(i, tm), base), ir.mul(kk, TK)
                    t = ir.load(ins[0], buf([R, K], dt), [r0, k0], tt)
                    srow = ir.add(ir.mul(rank, R), r0)
                    with ir.loop(0, W) as p:
                        ir.put(t, tt, "%stage", st, [srow, k0], p)
                        ir.signal("%sig", sg, rank, p)
                base += count * tm
        with ir.worker("compute", comp_sms):
            rank = ir.rank()
            with ir.loop(0, W) as s:
                src = ir.rem(ir.add(rank, s), W)
                ir.wait("%sig", sg, src, a_tiles)
                base = 0
                for count, tm in bands(R, TM):
                    with ir.foreach([count, ntn]) as (i, j):
                        r0 = ir.add(ir.add(ir.mul(i, tm), base), ir.mul(src, R))
                        c0 = ir.mul(j, TN)
                        acc = _gemm_tile(ir, "%stage", st, r0, ins[1], bt_, c0, K, tm, TN, TK, dt)
                        ct, ot_t = tile([tm, TN], F32), tile([tm, TN], dt)
                        ir.store(ir.map("cast", [acc], [ct], ot_t), ot_t, outs[0], ot, [r0, c0])
                    base += count * tm

    text = kernel_function("ag_gemm", W, [([R, K], dt), ([K, N], dt)], [([W * R, N], dt, False)], body)

    def ref(inputs):
        a = torch.cat([inputs[r][0] for r in range(W)], 0).float()
        return [[(a @ inputs[r][1].float()).to(_tdt(dt))] for r in range(W)]

    return Case(f"ag_gemm_W{W}_{R}x{K}x{N}_{dt}", W, text, ref, *_tol(dt, True))


def gemm_rs(W: int, Mc: int, K: int, N: int, dt: str, TM: int = 64, TN: int = 64, TK: int = 32,
            comm_sms: int = 8, comp_sms: int = 24) -> Case:
    """GEMM+RS: each output tile of rank p's chunk is put-added (f32) into rank p's
    scratch as soon as it is computed; a communicate worker waits and writes the output."""
    ntn = _cdiv(N, TN)
    sc = buf([Mc, N], F32, True)
    sg = "!pk.signals<1>"
    per_chunk = sum(n for n, _ in bands(Mc, TM)) * ntn
    at_, bt_ = buf([W * Mc, K], dt), buf([K, N], dt)

    def body(ir: IR, ins, outs):
        ir.emit(f"%scratch = pk.alloc {{zero}} : {sc}")
        ir.emit(f"%sig = pk.alloc_signals : {sg}")
        with ir.worker("compute", comp_sms):
            base = 0
            for count, tm in bands(Mc, TM):
                with ir.foreach([W, count, ntn]) as (p, i, j):
                    r0, c0 = ir.add(ir.mul(i, tm), base), ir.mul(j, TN)
                    acc = _gemm_tile(ir, ins[0], at_, ir.add(ir.mul(p, Mc), r0), ins[1], bt_, c0,
                                     K, tm, TN, TK, dt)
                    ir.put(acc, tile([tm, TN], F32), "%scratch", sc, [r0, c0], p, add=True)
                    ir.signal("%sig", sg, 0, p)
                base += count * tm
        with ir.worker("communicate", comm_sms):
            ir.wait("%sig", sg, 0, W * per_chunk)
            base = 0
            for count, tm in bands(Mc, TM):
                t32, tt = tile([tm, TN], F32), tile([tm, TN], dt)
                with ir.foreach([count, ntn]) as (i, j):
                    r0, c0 = ir.add(ir.mul(i, tm), base), ir.mul(j, TN)
                    s = ir.load("%scratch", sc, [r0, c0], t32)
                    ir.store(ir.map("cast", [s], [t32], tt), tt, outs[0], buf([Mc, N], dt), [r0, c0])
                base += count * tm

    text = kernel_function("gemm_rs", W, [([W * Mc, K], dt), ([K, N], dt)], [([Mc, N], dt, False)], body)

    def ref(inputs):
        total = sum(inputs[r][0].float() @ inputs[r][1].float() for r in range(W))
        return [[total[r * Mc:(r + 1) * Mc].to(_tdt(dt))] for r in range(W)]

    return Case(f"gemm_rs_W{W}_{Mc}x{K}x{N}_{dt}", W, text, ref, *_tol(dt, True))


def gemm_ar(W: int, M: int, K: int, N: int, dt: str, TM: int = 64, TN: int = 64, TK: int = 32,
            comm_sms: int = 8, comp_sms: int = 24) -> Case:
    """GEMM+AR: every output tile is put-added into every rank's scratch; a communicate
    worker waits for all W contributions of all tiles and writes the output."""
    ntm, ntn = _cdiv(M, TM), _cdiv(N, TN)
    sc = buf([M, N], F32, True)
    sg = "!pk.signals<1>"
    at_, bt_ = buf([M, K], dt), buf([K, N], dt)
    t32, tt = tile([TM, TN], F32), tile([TM, TN], dt)

    def body(ir: IR, ins, outs):
        ir.emit(f"%scratch = pk.alloc {{zero}} : {sc}")
        ir.emit(f"%sig = pk.alloc_signals : {sg}")
        with ir.worker("compute", comp_sms):
            with ir.foreach([ntm, ntn]) as (i, j):
                r0, c0 = ir.mul(i, TM), ir.mul(j, TN)
                acc = _gemm_tile(ir, ins[0], at_, r0, ins[1], bt_, c0, K, TM, TN, TK, dt)
                with ir.loop(0, W) as p:
                    ir.put(acc, t32, "%scratch", sc, [r0, c0], p, add=True)
                    ir.signal("%sig", sg, 0, p)
        with ir.worker("communicate", comm_sms):
            ir.wait("%sig", sg, 0, W * ntm * ntn)
            with ir.foreach([ntm, ntn]) as (i, j):
                r0, c0 = ir.mul(i, TM), ir.mul(j, TN)
                s = ir.load("%scratch", sc, [r0, c0], t32)
                ir.store(ir.map("cast", [s], [t32], tt), tt, outs[0], buf([M, N], dt), [r0, c0])

    text = kernel_function("gemm_ar", W, [([M, K], dt), ([K, N], dt)], [([M, N], dt, False)], body)

    def ref(inputs):
        total = sum(inputs[r][0].float() @ inputs[r][1].float() for r in range(W))
        return [[total.to(_tdt(dt))] for _ in range(W)]

    return Case(f"gemm_ar_W{W}_{M}x{K}x{N}_{dt}", W, text, ref, *_tol(dt, True))


# ----------------------------------------------------------------------------------------
# Op coverage (compared with the interpreter).


def maps_and_reductions(dt: str, R: int = 20, C: int = 24, W: int = 1) -> Case:
    """Every float map function, broadcasting, comparisons, where, casts and reductions."""
    tt, t32 = tile([R, C], dt), tile([R, C], F32)
    bt = buf([R, C], dt)
    unary = ["neg", "exp", "tanh", "relu", "gelu", "gelu_tanh", "silu", "sigmoid", "abs"]
    positive = ["log", "sqrt", "rsqrt", "reciprocal"]
    binary = ["add", "sub", "mul", "div", "maximum", "minimum", "pow"]
    outs: list[tuple[list[int], str, bool]] = []
    outs += [([R, C], dt, False)] * (len(unary) + len(positive) + len(binary))
    outs += [([R, C], "i1", False), ([R, C], dt, False), ([R, C], F32, False), ([R, C], "i32", False)]
    outs += [([R, 1], dt, False), ([C], dt, False), ([R, 1], dt, False), ([R, 1], dt, False),
             ([R, C], dt, False)]

    def body(ir: IR, ins, o):
        with ir.worker("compute"):
            x = ir.load(ins[0], bt, [0, 0], tt)
            y = ir.load(ins[1], bt, [0, 0], tt)
            one = ir.fill(1.0, tt, dt)
            pos = ir.map("add", [ir.map("abs", [x], [tt], tt), one], [tt, tt], tt)
            k = 0

            def out(t, ttype, otype):
                nonlocal k
                ir.store(t, ttype, o[k], otype, _zeros(otype))
                k += 1

            for fn in unary:
                out(ir.map(fn, [x], [tt], tt), tt, bt)
            for fn in positive:
                out(ir.map(fn, [pos], [tt], tt), tt, bt)
            for fn in binary:
                a = pos if fn == "pow" else x
                out(ir.map(fn, [a, y], [tt, tt], tt), tt, bt)
            ti = tile([R, C], "i1")
            cond = ir.map("gt", [x, y], [tt, tt], ti)
            out(cond, ti, buf([R, C], "i1"))
            out(ir.map("where", [cond, x, y], [ti, tt, tt], tt), tt, bt)
            out(ir.map("cast", [x], [tt], t32), t32, buf([R, C], F32))
            scaled = ir.map("mul", [x, ir.fill(10.0, tt, dt)], [tt, tt], tt)
            out(ir.map("cast", [scaled], [tt], tile([R, C], "i32")), tile([R, C], "i32"), buf([R, C], "i32"))
            r1 = tile([R, 1], dt)
            out(ir.reduce("sum", x, tt, [1], True, r1), r1, buf([R, 1], dt))
            out(ir.reduce("max", x, tt, [0], False, tile([C], dt)), tile([C], dt), buf([C], dt))
            out(ir.reduce("min", x, tt, [1], True, r1), r1, buf([R, 1], dt))
            mx = ir.reduce("mean", x, tt, [1], True, r1)
            out(mx, r1, buf([R, 1], dt))
            out(ir.map("sub", [x, mx], [tt, r1], tt), tt, bt)

    text = kernel_function("maps", W, [([R, C], dt), ([R, C], dt)], outs, body)
    atol, rtol = (2e-5, 2e-5) if dt == "f32" else (1.6e-2, 1.6e-2)
    return Case(f"maps_{dt}", W, text, None, atol, rtol)


def _zeros(btype: str) -> list[int]:
    dims = btype[btype.index("<") + 1:btype.index(">")].split(",")[0].split("x")[:-1]
    return [0] * len(dims)


def integers(R: int = 12, C: int = 20) -> Case:
    """i32 / i8 / i64 / i1 tiles: loads, integer maps, casts, where, stores."""
    outs = [([R, C], "i32", False), ([R, C], "i8", False), ([R, C], "i64", False),
            ([R, C], "i1", False), ([R, C], F32, False), ([R, 1], "i32", False)]

    def body(ir: IR, ins, o):
        with ir.worker("compute"):
            ti32, ti8, ti64, ti1 = (tile([R, C], t) for t in ("i32", "i8", "i64", "i1"))
            a = ir.load(ins[0], buf([R, C], "i32"), [0, 0], ti32)
            b8 = ir.load(ins[1], buf([R, C], "i8"), [0, 0], ti8)
            c64 = ir.load(ins[2], buf([R, C], "i64"), [0, 0], ti64)
            m = ir.load(ins[3], buf([R, C], "i1"), [0, 0], ti1)
            b32 = ir.map("cast", [b8], [ti8], ti32)
            s = ir.map("maximum", [ir.map("mul", [a, b32], [ti32, ti32], ti32), ir.map("neg", [a], [ti32], ti32)],
                       [ti32, ti32], ti32)
            ir.store(s, ti32, o[0], buf([R, C], "i32"), [0, 0])
            ir.store(ir.map("add", [b8, b8], [ti8, ti8], ti8), ti8, o[1], buf([R, C], "i8"), [0, 0])
            c2 = ir.map("sub", [c64, ir.map("cast", [a], [ti32], ti64)], [ti64, ti64], ti64)
            ir.store(c2, ti64, o[2], buf([R, C], "i64"), [0, 0])
            lt = ir.map("lt", [a, b32], [ti32, ti32], ti1)
            ir.store(ir.map("where", [m, lt, m], [ti1, ti1, ti1], ti1), ti1, o[3], buf([R, C], "i1"), [0, 0])
            ir.store(ir.map("cast", [ir.map("where", [m, a, b32], [ti1, ti32, ti32], ti32)], [ti32],
                            tile([R, C], F32)), tile([R, C], F32), o[4], buf([R, C], F32), [0, 0])
            ir.store(ir.reduce("sum", a, ti32, [1], True, tile([R, 1], "i32")), tile([R, 1], "i32"), o[5],
                     buf([R, 1], "i32"), [0, 0])

    text = kernel_function("integers", 1, [([R, C], "i32"), ([R, C], "i8"), ([R, C], "i64"), ([R, C], "i1")],
                           outs, body)
    return Case("integers", 1, text, None, 0.0, 0.0)


def loops_and_fma(R: int = 40, C: int = 36, K: int = 20, W: int = 2) -> Case:
    """Nested foreach, scf.for with a carried tile, an f32 and an f64 MMA (FMA path),
    tiles overhanging the buffer, a store then load at worker scope (worker barriers),
    loads from a peer."""
    TR, TC = 16, 16
    nti, ntj = _cdiv(R, TR), _cdiv(C, TC)
    outs = [([R, C], F32, False), ([R, C], F32, True), ([R, C], F32, False)]

    def body(ir: IR, ins, o):
        ir.emit("%sig = pk.alloc_signals : !pk.signals<1>")
        with ir.worker("compute", 3):
            rank = ir.rank()
            at, bt, ct = tile([TR, K], F32), tile([K, TC], F32), tile([TR, TC], F32)
            with ir.foreach([nti]) as (i,):
                with ir.foreach([ntj]) as (j,):
                    r0, c0 = ir.mul(i, TR), ir.mul(j, TC)
                    a = ir.load(ins[0], buf([R, K], F32), [r0, 0], at)
                    b = ir.load(ins[1], buf([K, C], F32), [0, c0], bt)
                    z = ir.fill(0.5, ct, F32)
                    acc = ir.mma(a, at, b, bt, z, ct)
                    iv, carried, res, close = ir.loop_carried(0, 3, 1, acc, ct)
                    close(ir.map("mul", [carried, ir.fill(0.5, ct, F32)], [ct, ct], ct))
                    ir.store(res, ct, o[0], buf([R, C], F32), [r0, c0])
                    a64, b64, t64 = tile([TR, K], "f64"), tile([K, TC], "f64"), tile([TR, K], "f64")
                    ad = ir.map("cast", [a], [at], a64)
                    bd = ir.map("cast", [b], [bt], b64)
                    acc2 = ir.mma(ad, a64, bd, b64, ir.fill(0.0, ct, F32), ct)
                    ir.store(acc2, ct, o[1], buf([R, C], F32, True), [r0, c0])
            # worker scope: read back what the foreach stored (needs a worker barrier)
            whole = tile([R, C], F32)
            back = ir.load(o[0], buf([R, C], F32), [0, 0], whole)
            ir.store(ir.map("add", [back, back], [whole, whole], whole), whole, o[2], buf([R, C], F32), [0, 0])
            with ir.loop(0, W) as p:
                ir.signal("%sig", "!pk.signals<1>", 0, p)
            ir.wait("%sig", "!pk.signals<1>", 0, W)
            peer = ir.rem(ir.add(rank, 1), W)
            theirs = ir.load(o[1], buf([R, C], F32, True), [0, 0], whole, peer=peer)
            mine = ir.load(o[2], buf([R, C], F32), [0, 0], whole)
            ir.store(ir.map("sub", [mine, theirs], [whole, whole], whole), whole, o[2], buf([R, C], F32), [0, 0])

    text = kernel_function("loops", W, [([R, K], F32), ([K, C], F32)], outs, body)
    return Case(f"loops_W{W}", W, text, None, 2e-4, 2e-4)


def put_add(W: int, R: int, C: int, dt: str, TR: int = 16, TC: int = 64) -> Case:
    """Every rank put-adds its tiles into every rank's zeroed symmetric buffer of ``dt``
    (red.add / CAS loop / cp.reduce.async.bulk per element type), then copies it out."""
    nti, ntj = _cdiv(R, TR), _cdiv(C, TC)
    sc = buf([R, C], dt, True)
    tt = tile([TR, TC], dt)

    def body(ir: IR, ins, o):
        ir.emit(f"%acc = pk.alloc {{zero}} : {sc}")
        ir.emit("%sig = pk.alloc_signals : !pk.signals<1>")
        with ir.worker("communicate", 4):
            with ir.foreach([nti, ntj]) as (i, j):
                r0, c0 = ir.mul(i, TR), ir.mul(j, TC)
                t = ir.load(ins[0], buf([R, C], dt), [r0, c0], tt)
                with ir.loop(0, W) as p:
                    ir.put(t, tt, "%acc", sc, [r0, c0], p, add=True)
                    ir.signal("%sig", "!pk.signals<1>", 0, p)
            ir.wait("%sig", "!pk.signals<1>", 0, W * nti * ntj)
            with ir.foreach([nti, ntj]) as (i, j):
                r0, c0 = ir.mul(i, TR), ir.mul(j, TC)
                ir.store(ir.load("%acc", sc, [r0, c0], tt), tt, o[0], buf([R, C], dt), [r0, c0])

    text = kernel_function("put_add", W, [([R, C], dt)], [([R, C], dt, False)], body)

    def ref(inputs):
        total = sum(inputs[r][0].float() for r in range(W))
        return [[total.to(_tdt(dt))] for _ in range(W)]

    # Each add rounds to dt, in an order the hardware picks.
    atol = 1e-5 if dt == "f32" else 0.05 * W
    return Case(f"put_add_W{W}_{R}x{C}_{dt}", W, text, ref, atol, 2e-2)


def lit_mm_rs(path: str = "tests/lit/dialects/kernel-roundtrip.mlir") -> Case:
    """The hand-written mm+rs kernel of the dialect's lit test (W = 2). Its wait threshold
    (6) is below the 12 signal units that arrive, a race the interpreter reports; the GPU
    test uses 12, and compares with the interpreter."""
    text = open(path).read().replace("%c6 = arith.constant 6 : index", "%c6 = arith.constant 12 : index")
    text = text.replace("@mm_rs(", "@main(")
    return Case("lit_mm_rs_W2", 2, text, None, 3e-2, 2e-2)


def unit_all_reduce(W: int, dt: str, rows: int = 8, cols: int = 16, **kw) -> Case:
    """The one-tile one-shot all-reduce of tests/unit/kernels.py (kw: its breakages)."""
    from tests.unit.kernels import all_reduce_ir

    text = all_reduce_ir(W, rows, cols, dt, **kw)
    # It accumulates in the tile type (rounding after every add): the interpreter is the
    # reference, not an f32 sum.
    return Case(f"unit_all_reduce_W{W}_{dt}", W, text, None, 1e-6, 1e-6)


def collective_cases(W: int, dt: str) -> list[Case]:
    """The seven patterns at shapes that tiles do not divide."""
    return [
        all_reduce(W, 100, 200, dt),
        all_gather(W, 70, 130, dt),
        reduce_scatter(W, 45, 152, dt),
        all_to_all(W, 37, 90, dt),
        ag_gemm(W, 72, 80, 100, dt),
        gemm_rs(W, 72, 80, 96, dt),
        gemm_ar(W, 100, 72, 96, dt),
    ]


def coverage_cases() -> list[Case]:
    return [maps_and_reductions("bf16"), maps_and_reductions("f16"), maps_and_reductions("f32"),
            integers(), loops_and_fma(), lit_mm_rs(),
            put_add(2, 40, 96, "bf16"), put_add(2, 40, 100, "bf16"), put_add(2, 40, 100, "f16"),
            put_add(2, 40, 100, "f32")]
