"""The fused kernels of a matmul and one collective, built by patterns.build_kernel.

``matmul -> reduce_scatter``, ``matmul -> all_reduce`` and ``all_gather -> matmul(s)``, each
in its staged and its elided form, on the kernel builder (kernel_builder.py) and following
the conventions in patterns.py's docstring. Separate from patterns.py (the dispatch) and from
patterns_moe.py so that each file holds one family of kernels and stays short.
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.ir import SSAValue

from pkc.dialects import kernel as k
from pkc.passes.kernel_builder import F32, Code, Ix, KernelBuilder, ceil_div, shape_of
from pkc.passes.patterns_fusion import Fusion
from pkc.passes.patterns_scaled import ag_args, gathered_scale, mm_args, put_scale_rows, scale_tile
from pkc.passes.patterns_tiles import copy_tiles, gather_workers, gemm_tile, row_blocks
from pkc.target.cost import OverlapStyle

def build_mm_reduce_scatter(kb: KernelBuilder, f: Fusion, W: int, elide: bool) -> None:
    """Staged: tile (p, m, n) of chunk p -> [send ->] recv slot r of rank p {staging};
    rank p sums its W slots (rank order, f32) and stores its output.
    Elided: put-add into rank p's zeroed f32 accumulator (or, for an f32 result, straight
    into its symmetric output, zeroed in the kernel behind a `zeroed` barrier).

    Chunks (``f.scatter_dim``, ``f.batches``; the output O is [Ro, Nc]): rows, rank p's
    output row (b, m) being product row b*S + p*Sc + m of batch block b (S = R/batches
    rows, Sc = S/W); or columns, output (m, n) being product (m, p*Nc + n). Buffers that
    hold one chunk (send's chunk p, recv's slots, the accumulator) are exactly Nc wide:
    a column tile overhanging a chunk's end is dropped there, so column chunks need no
    residue tiles; row tiles must not cross into the next chunk's rows (residue blocks)."""
    A, B, SA, SB, O = mm_args(kb, f)
    bias = None
    if f.bias:      # the last input: the [1, N] bias each rank adds before the sum
        bias, O = kb.args[len(kb.inputs) - 1], kb.args[len(kb.inputs)]
    M, K = shape_of(A)
    (Ro, Nc), odt = shape_of(O), O.type.element_type
    cols, Bt = f.scatter_dim == 1, f.batches
    S, Sc = M // Bt, Ro // Bt   # product rows per batch block; output rows per block
    bm, bn, bk = min(f.tile_m, Sc), min(f.tile_n, Nc), min(f.tile_k, K)
    nrb, TN = ceil_div(Sc, bm), ceil_div(Nc, bn)
    T = Bt * nrb * TN  # output tiles of one chunk
    inter, direct = f.overlap is OverlapStyle.INTER, elide and odt == F32
    send = kb.alloc("send", [W * Ro, Nc], F32) if inter else None
    if not elide:
        dest = kb.alloc("recv", [W * Ro, Nc], F32, symmetric=True, staging=True)
    else:
        dest = O if direct else kb.alloc("accum", [Ro, Nc], F32, symmetric=True, zero=True)
    ready = kb.signals("ready", W * T) if inter else None
    arrived = kb.signals("arrived", T)
    zeroed = kb.signals("zeroed", W) if direct else None

    def chunk_tiles(c: Code, body: Callable, parallel: bool = False) -> None:
        """``body(code, t, b, m0, rows, n0)`` for every output tile of one chunk: tile
        index t, batch block b, row m0 in the block's Sc rows, column n0."""
        def block(c: Code, b: Ix) -> None:
            def tile(c: Code, rb: Ix, m0: Ix, rows: int, ni: Ix) -> None:
                t = c.add(c.mul(c.add(c.mul(b, nrb), rb), TN), ni)
                body(c, t, b, m0, rows, c.mul(ni, bn))
            row_blocks(c, Sc, bm, tile, TN, parallel=parallel)
        c.loop(0, Bt, 1, block, name="b")

    def product_tile(c: Code, p: Ix, b: Ix, m0: Ix, rows: int, n0: Ix) -> SSAValue:
        """f32 tile of chunk p at its output (b, m0, n0): its rows of A, columns of B."""
        if cols:
            a_row, col = c.add(c.mul(b, S), m0), c.add(c.mul(p, Nc), n0)
        else:
            a_row, col = c.add(c.add(c.mul(b, S), c.mul(p, Sc)), m0), n0
        acc = gemm_tile(c, A, a_row, B, 0, col, rows, bn, K, bk)
        acc = scale_tile(c, acc, SA, a_row, SB, col)
        if bias is not None:    # f32: [rows, bn] + [1, bn] (columns past N are never kept)
            bt = c.cast(c.load(bias, [0, col], [1, bn], "bias"), F32, "bias32")
            acc = c.emit(k.TileMapOp("add", [acc, bt], acc.type), "biased")
        return acc

    def deliver(c: Code, tile: SSAValue, p: Ix, row: Ix, n0: Ix, t: Ix) -> None:
        if elide:
            c.put(tile, dest, [row, n0], p, add=True)
        else:
            c.put(tile, dest, [c.add(c.mul(c.rank(), Ro), row), n0], p)
        c.signal(arrived, t, p)

    def compute_step(c: Code, i: Ix) -> None:
        p = c.rotate(i, W)
        if direct and not inter:
            c.wait(zeroed, p, 1)

        def tile(c: Code, t: Ix, b: Ix, m0: Ix, rows: int, n0: Ix) -> None:
            acc = product_tile(c, p, b, m0, rows, n0)
            row = c.add(c.mul(b, Sc), m0)
            if inter:
                c.store(acc, send, [c.add(c.mul(p, Ro), row), n0])
                c.signal(ready, c.add(c.mul(p, T), t), c.rank())
            else:
                deliver(c, acc, p, row, n0, t)

        chunk_tiles(c, tile, parallel=True)

    def comm_step(c: Code, i: Ix) -> None:
        p = c.rotate(i, W)
        if direct:
            c.wait(zeroed, p, 1)

        def tile(c: Code, t: Ix, b: Ix, m0: Ix, rows: int, n0: Ix) -> None:
            row = c.add(c.mul(b, Sc), m0)
            c.wait(ready, c.add(c.mul(p, T), t), 1)
            x = c.load(send, [c.add(c.mul(p, Ro), row), n0], [rows, bn])
            deliver(c, x, p, row, n0, t)

        chunk_tiles(c, tile)

    def finish(c: Code) -> None:
        def tile(c: Code, t: Ix, b: Ix, m0: Ix, rows: int, n0: Ix) -> None:
            row = c.add(c.mul(b, Sc), m0)
            c.wait(arrived, t, W)
            if direct:
                return
            if elide:
                total = c.load(dest, [row, n0], [rows, bn], "total")
            else:
                total = _sum_slots(c, dest, W, Ro, row, n0, rows, bn)
            c.store(c.cast(total, odt), O, [row, n0])

        chunk_tiles(c, tile, parallel=True)

    def zero_output(c: Code) -> None:
        chunk_tiles(c, lambda c, t, b, m0, rows, n0: c.store(
            c.fill([rows, bn], F32), O, [c.add(c.mul(b, Sc), m0), n0]), parallel=True)
        c.loop(0, W, 1, lambda c, q: c.signal(zeroed, c.rank(), q), name="q")

    def compute(c: Code) -> None:
        c.rank()
        if direct:
            zero_output(c)
        c.loop(0, W, 1, compute_step)
        finish(c)

    def comm(c: Code) -> None:
        c.rank()
        c.loop(0, W, 1, comm_step)

    kb.worker(k.WorkerRole.COMPUTE, compute)
    if inter:
        kb.worker(k.WorkerRole.COMMUNICATE, comm)


def _sum_slots(c: Code, buf: SSAValue, W: int, slot_rows: int, m0: Ix, n0: Ix, rows: int,
               bn: int) -> SSAValue:
    """Sum over s = 0..W-1 (rank order, f32) of the tile at row s*slot_rows + m0."""
    def add(c: Code, s: Ix, acc: SSAValue) -> list[SSAValue]:
        part = c.load(buf, [c.add(c.mul(s, slot_rows), m0), n0], [rows, bn], "part")
        return [c.combine(acc, part)]

    (total,) = c.loop(0, W, 1, add, [c.fill([rows, bn], F32)], "s")
    return total


# -- matmul -> all_reduce ----------------------------------------------------------------


def build_mm_all_reduce(kb: KernelBuilder, f: Fusion, W: int, elide: bool) -> None:
    """Output tile t (T of them) belongs to rank t mod W. Phase 1: every rank sends its
    partial of tile t to the owner (staged: slot r of the owner's recv {staging}; elided:
    put-add into the owner's zeroed f32 accumulator). Phase 2: the owner waits for W
    partials, sums / loads them, casts, and puts the tile into every rank's bcast
    {staging} (staged; each rank then copies bcast -> output) or output (elided)."""
    A, B, SA, SB, O = mm_args(kb, f)
    (M, K), N = shape_of(A), shape_of(B)[1]
    odt = O.type.element_type
    bm, bn, bk = min(f.tile_m, M), min(f.tile_n, N), min(f.tile_k, K)
    TM, TN = ceil_div(M, bm), ceil_div(N, bn)
    T, Mp = TM * TN, TM * bm  # tiles; rows of a recv slot (padded to whole tiles)
    inter = f.overlap is OverlapStyle.INTER
    send = kb.alloc("send", [M, N], F32) if inter else None
    if elide:
        accum = kb.alloc("accum", [M, N], F32, symmetric=True, zero=True)
        bcast = O
    else:
        accum = kb.alloc("recv", [W * Mp, N], F32, symmetric=True, staging=True)
        bcast = kb.alloc("bcast", [M, N], odt, symmetric=True, staging=True)
    ready = kb.signals("ready", T) if inter else None
    arrived = kb.signals("arrived", T)
    done = kb.signals("done", 1)

    def at(c: Code, t: Ix) -> tuple[Ix, Ix]:
        return c.mul(c.div(t, TN), bm), c.mul(c.rem(t, TN), bn)

    def deliver(c: Code, tile: SSAValue, p: Ix, t: Ix) -> None:
        m0, n0 = at(c, t)
        if elide:
            c.put(tile, accum, [m0, n0], p, add=True)
        else:
            c.put(tile, accum, [c.add(c.mul(c.rank(), Mp), m0), n0], p)
        c.signal(arrived, t, p)

    def compute_step(c: Code, i: Ix) -> None:
        p = c.rotate(i, W)  # the owner of tiles p, p + W, ...

        def tile(c: Code, t: Ix) -> None:
            m0, n0 = at(c, t)
            acc = scale_tile(c, gemm_tile(c, A, m0, B, 0, n0, bm, bn, K, bk), SA, m0, SB, n0)
            if inter:
                c.store(acc, send, [m0, n0])
                c.signal(ready, t, c.rank())
            else:
                deliver(c, acc, p, t)

        c.loop(p, T, W, tile, name="t")

    def comm_step(c: Code, i: Ix) -> None:
        p = c.rotate(i, W)

        def tile(c: Code, t: Ix) -> None:
            c.wait(ready, t, 1)
            m0, n0 = at(c, t)
            deliver(c, c.load(send, [m0, n0], [bm, bn]), p, t)

        c.loop(p, T, W, tile, name="t")

    def reduce_and_broadcast(c: Code) -> None:
        def tile(c: Code, t: Ix) -> None:
            m0, n0 = at(c, t)
            c.wait(arrived, t, W)
            if elide:
                total = c.load(accum, [m0, n0], [bm, bn], "total")
            else:
                total = _sum_slots(c, accum, W, Mp, m0, n0, bm, bn)
            out = c.cast(total, odt)

            def to(c: Code, j: Ix) -> None:
                q = c.rotate(j, W)
                c.put(out, bcast, [m0, n0], q)
                c.signal(done, 0, q)

            c.loop(0, W, 1, to, name="j")

        c.loop(c.rank(), T, W, tile, name="t")

    def finish(c: Code) -> None:
        c.wait(done, 0, T)
        if not elide:
            copy_tiles(c, bcast, O, M, N, bm, bn)

    def compute(c: Code) -> None:
        c.rank()
        c.loop(0, W, 1, compute_step)
        if not inter:
            reduce_and_broadcast(c)
        finish(c)

    def comm(c: Code) -> None:
        c.rank()
        c.loop(0, W, 1, comm_step)
        reduce_and_broadcast(c)

    kb.worker(k.WorkerRole.COMPUTE, compute)
    if inter:
        kb.worker(k.WorkerRole.COMMUNICATE, comm)


# -- all_gather -> matmul(s) -------------------------------------------------------------


def build_all_gather_mm(kb: KernelBuilder, f: Fusion, W: int, elide: bool) -> None:
    """Rank r pushes its shard, row block by row block, to rank (r - i) mod W at step i
    (staged: into that rank's stage {staging}, which the receiver copies into the GEMM
    operand G; elided: straight into the receiver's symmetric G) and signals it. The
    consumers first multiply the local shard (read from the input, no wait), then the
    shard of rank (r + i) mod W once its row block has arrived. G is the kernel's last
    result when the gathered tensor has other users.

    Blocks of rows (``f.batches`` = B > 1: a gather along a middle dim, DTensor
    ``Shard(1)`` of ``[B, S/W, H]``): the shard X ``[B*Sc, K]`` is B blocks of Sc rows and
    its block b is rows ``b*S + r*Sc ..`` of G ``[B*S, K]``, the gathered tensor's own
    layout (so G is returned as it is and the output rows are G's rows). Row blocks are
    taken per batch block (each with its residue tile: a tile never spans two blocks),
    and signals count per (shard, batch block, row block). B = 1 is the row gather."""
    args = kb.args
    X, SX, Bs, SBs, Ys = ag_args(kb, f)
    Ms, K = shape_of(X)
    Bt = f.batches
    Sc = Ms // Bt               # rows of one batch block of a shard
    M, dt = W * Ms, X.type.element_type
    bm, bk = min(f.tile_m, Sc), min(f.tile_k, K)
    nrb = ceil_div(Sc, bm)      # row blocks of one batch block
    nsb = Bt * nrb              # row blocks (signal slots) of one shard
    inter = f.overlap is OverlapStyle.INTER
    if f.gathered:
        G = args[-1]
    else:
        G = kb.alloc("gathered", [M, K], dt, symmetric=elide)
    stage = None if elide else kb.alloc("stage", [M, K], dt, symmetric=True, staging=True)
    GS = gathered_scale(kb, SX, W)  # a row-wise scale travels with its rows
    ready = kb.signals("ready", W * nsb)
    arrived = None if elide else kb.signals("arrived", W * nsb)

    def k_tiles(c: Code, body: Callable) -> None:
        c.loop(0, ceil_div(K, bk) * bk, bk, lambda c, k0: body(c, k0), name="k")

    def shard_blocks(c: Code, body: Callable) -> None:
        """``body(code, slot, x_row, rows, g_off)`` for the row blocks of one shard: its
        signal slot among the shard's nsb, its first row in X, and ``b*S + m0``, to
        which shard s adds ``s*Sc`` for its row in G (:func:`g_row`)."""
        def batch(c: Code, b: Ix) -> None:
            row_blocks(c, Sc, bm, lambda c, rb, m0, rows, _ni: body(
                c, c.add(c.mul(b, nrb), rb), c.add(c.mul(b, Sc), m0), rows,
                c.add(c.mul(b, W * Sc), m0)))

        c.loop(0, Bt, 1, batch, name="b")

    def g_row(c: Code, s: Ix, g_off: Ix) -> Ix:
        return c.add(c.mul(s, Sc), g_off)

    def push(c: Code, i: Ix) -> None:
        q = c.rotate(i, W, back=True)
        r = c.rank()

        def block(c: Code, sl: Ix, xr: Ix, rows: int, go: Ix) -> None:
            def move(c: Code, k0: Ix) -> None:
                x = c.load(X, [xr, k0], [rows, bk], "shard")
                c.put(x, stage if stage is not None else G, [g_row(c, r, go), k0], q)

            k_tiles(c, move)
            put_scale_rows(c, SX, GS, xr, rows, g_row(c, r, go), q)
            c.signal(arrived if arrived is not None else ready, c.add(c.mul(r, nsb), sl), q)

        shard_blocks(c, block)

    def copy_own(c: Code) -> None:
        def block(c: Code, sl: Ix, xr: Ix, rows: int, go: Ix) -> None:
            k_tiles(c, lambda c, k0: c.store(c.load(X, [xr, k0], [rows, bk], "shard"), G,
                                             [g_row(c, c.rank(), go), k0]))

        shard_blocks(c, block)

    def copy_in(c: Code, s: Ix, sl: Ix, go: Ix, rows: int) -> None:
        """Staged: wait for row block sl of shard s in stage, copy it into G."""
        row = g_row(c, s, go)
        c.wait(arrived, c.add(c.mul(s, nsb), sl), 1)
        k_tiles(c, lambda c, k0: c.store(c.load(stage, [row, k0], [rows, bk], "shard"), G,
                                         [row, k0]))

    def consume(c: Code, src: SSAValue, src_row: Ix, out_row: Ix, rows: int) -> None:
        sa = SX if src is X or GS is None else GS  # the scale of src's rows
        for B, SB, Y in zip(Bs, SBs, Ys):
            N = shape_of(B)[1]
            bn = min(f.tile_n, N)

            def tile(c: Code, ni: Ix, B=B, SB=SB, Y=Y, N=N, bn=bn) -> None:
                n0 = c.mul(ni, bn)
                acc = gemm_tile(c, src, src_row, B, 0, n0, rows, bn, K, bk)
                acc = scale_tile(c, acc, sa, src_row, SB, n0)
                c.store(c.cast(acc, Y.type.element_type), Y, [out_row, n0])

            c.foreach([ceil_div(N, bn)], tile, ["ni"])

    def local(c: Code) -> None:
        shard_blocks(c, lambda c, sl, xr, rows, go: consume(
            c, X, xr, g_row(c, c.rank(), go), rows))

    def remote_step(c: Code, i: Ix) -> None:
        s = c.rotate(i, W)

        def block(c: Code, sl: Ix, xr: Ix, rows: int, go: Ix) -> None:
            row = g_row(c, s, go)
            if inter or elide:
                c.wait(ready, c.add(c.mul(s, nsb), sl), 1)
            else:
                copy_in(c, s, sl, go, rows)
            consume(c, G, row, row, rows)

        shard_blocks(c, block)

    def comm_step(c: Code, i: Ix) -> None:
        push(c, i)
        if not elide:
            s = c.rotate(i, W)

            def block(c: Code, sl: Ix, xr: Ix, rows: int, go: Ix) -> None:
                copy_in(c, s, sl, go, rows)
                c.signal(ready, c.add(c.mul(s, nsb), sl), c.rank())

            shard_blocks(c, block)

    def consume_all(c: Code) -> None:
        local(c)
        c.loop(1, W, 1, remote_step)

    gather_workers(kb, W, inter, f.gathered, copy_own, push, comm_step, consume_all)
