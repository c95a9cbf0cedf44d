"""The fused kernel of an all-gather along the matmul's contraction dim K (kernel level).

Built by :func:`pkc.passes.patterns.build_kernel` for ``Pattern.ALL_GATHER_K_MM``, which
``overlap`` matches (overlap_match.py): ``G = all_gather(X, dim=last)``, ``Y = G @ B``
where rank r holds ``X [M, Kc]`` (a 3-d ``[B, S, Kc]`` viewed as ``[B*S, Kc]``) and the
whole ``B [K, N]`` (K = W x Kc). Then ``Y = sum_r X_r @ B[r*Kc : (r+1)*Kc]``: every output
tile needs every rank's shard of its rows (unlike the gather along rows, where a tile
needs one shard), so the consumers run a K loop over the shards, the own one first (read
from X, no wait), then shard ``(r + i) mod W`` once its row block arrived.

Kernel arguments: ``X, B, Y`` and ``G [M, K]`` when the gathered tensor has other users
(its true layout: shard p is columns ``[p*Kc, (p+1)*Kc)``); an fp8 ``pk.scaled_matmul``
(``Fusion.scaled``) adds A's and B's scales after B: ``X, B, SA, SB, Y (, G)``. SA scales
a row of the whole gathered K (torch's ``scale_a`` of the gathered A: not gathered, the
same on every rank), so the f32 sum over all shards is scaled once, before the cast
(patterns_scaled.scale_tile), exactly as ``_scaled_mm`` does. Conventions of patterns.py:

* Puts: rank r pushes its shard row block by row block, column tile by column tile (full
  ``tile_k`` tiles, then one narrower tile: a tile overhanging ``Kc`` would overwrite the
  next shard's columns), to rank ``(r - i) mod W`` at step i, into columns ``r*Kc..`` of
  its G (elided: symmetric; staged: its ``stage {staging}``, which the receiver copies
  into G), then signals that row block.
* The K loop over one shard steps ``tile_k`` and ends with a narrower step (the next
  shard's columns are not this step's), reading B's rows ``p*Kc + k0``.
* Inter-SM overlap: the communicate worker pushes (and, staged, copies in and signals
  ``ready``); the compute worker waits for ``ready`` before a peer's shard of a row
  block. Intra-SM: the compute worker pushes first, then computes.
"""

from __future__ import annotations

from xdsl.ir import SSAValue

from pkc.passes.kernel_builder import F32, Code, Ix, KernelBuilder, ceil_div, shape_of
from pkc.passes.patterns_fusion import Fusion
from pkc.passes.patterns_scaled import scale_tile
from pkc.passes.patterns_tiles import gather_workers, row_blocks
from pkc.target.cost import OverlapStyle


def _col_tiles(c: Code, width: int, bk: int, body) -> None:
    """``body(code, k0, w)`` over columns ``[0, width)``: full ``bk`` tiles, then the rest."""
    full, rem = divmod(width, bk)
    c.loop(0, full * bk, bk, lambda c, k0: body(c, k0, bk), name="k")
    if rem:
        body(c, full * bk, rem)


def _shard_product(c: Code, src: SSAValue, row: Ix, col: Ix, B: SSAValue, b_row: Ix, n0: Ix,
                   rows: int, bn: int, kc: int, bk: int, acc: SSAValue) -> SSAValue:
    """``acc + src[row:+rows, col:+kc] @ B[b_row:+kc, n0:+bn]`` (f32), in steps of bk."""
    def step(c: Code, k0: Ix, acc: SSAValue, w: int) -> list[SSAValue]:
        ta = c.load(src, [row, c.add(col, k0)], [rows, w], "a")
        tb = c.load(B, [c.add(b_row, k0), n0], [w, bn], "b")
        return [c.mma(ta, tb, acc)]

    full, rem = divmod(kc, bk)
    (acc,) = c.loop(0, full * bk, bk, lambda c, k0, acc: step(c, k0, acc, bk), [acc], "k")
    if rem:
        (acc,) = step(c, full * bk, acc, rem)
    return acc


def build_all_gather_k_mm(kb: KernelBuilder, f: Fusion, W: int, elide: bool) -> None:
    """The kernel of the module doc: staged (``elide=False``) or with the staging buffer
    elided (peers put straight into the symmetric G)."""
    X, B = kb.args[0], kb.args[1]
    SA, SB = (kb.args[2], kb.args[3]) if f.scaled else (None, None)
    Y = kb.args[4 if f.scaled else 2]
    M, Kc = shape_of(X)
    N = shape_of(B)[1]
    K, dt = W * Kc, X.type.element_type
    bm, bn, bk = min(f.tile_m, M), min(f.tile_n, N), min(f.tile_k, Kc)
    nrb = ceil_div(M, bm)
    inter = f.overlap is OverlapStyle.INTER
    G = kb.args[-1] if f.gathered else kb.alloc("gathered", [M, K], dt, symmetric=elide)
    stage = None if elide else kb.alloc("stage", [M, K], dt, symmetric=True, staging=True)
    ready = kb.signals("ready", W * nrb)
    arrived = None if elide else kb.signals("arrived", W * nrb)

    def push(c: Code, i: Ix) -> None:
        q, r = c.rotate(i, W, back=True), c.rank()

        def block(c: Code, rb: Ix, m0: Ix, rows: int, _ni: Ix) -> None:
            _col_tiles(c, Kc, bk, lambda c, k0, w: c.put(
                c.load(X, [m0, k0], [rows, w], "shard"), stage if stage is not None else G,
                [m0, c.add(c.mul(r, Kc), k0)], q))
            c.signal(arrived if arrived is not None else ready, c.add(c.mul(r, nrb), rb), q)

        row_blocks(c, M, bm, block)

    def copy_own(c: Code) -> None:
        def block(c: Code, rb: Ix, m0: Ix, rows: int, _ni: Ix) -> None:
            _col_tiles(c, Kc, bk, lambda c, k0, w: c.store(
                c.load(X, [m0, k0], [rows, w], "shard"), G, [m0, c.add(c.mul(c.rank(), Kc), k0)]))

        row_blocks(c, M, bm, block)

    def copy_in(c: Code, p: Ix, rb: Ix, m0: Ix, rows: int) -> None:
        """Staged: wait for row block rb of shard p in stage, copy it into G."""
        c.wait(arrived, c.add(c.mul(p, nrb), rb), 1)
        col = c.mul(p, Kc)
        _col_tiles(c, Kc, bk, lambda c, k0, w: c.store(
            c.load(stage, [m0, c.add(col, k0)], [rows, w], "shard"), G, [m0, c.add(col, k0)]))

    def row_block(c: Code, rb: Ix, m0: Ix, rows: int, _ni: Ix) -> None:
        waits = inter or elide       # else (staged, intra) the shards were copied in first
        if not waits:
            c.loop(1, W, 1, lambda c, i: copy_in(c, c.rotate(i, W), rb, m0, rows), name="i")

        def tile(c: Code, ni: Ix) -> None:
            n0 = c.mul(ni, bn)
            acc = _shard_product(c, X, m0, 0, B, c.mul(c.rank(), Kc), n0, rows, bn, Kc, bk,
                                 c.fill([rows, bn], F32))

            def shard(c: Code, i: Ix, acc: SSAValue) -> list[SSAValue]:
                p = c.rotate(i, W)
                if waits:
                    c.wait(ready, c.add(c.mul(p, nrb), rb), 1)
                col = c.mul(p, Kc)
                return [_shard_product(c, G, m0, col, B, col, n0, rows, bn, Kc, bk, acc)]

            (acc,) = c.loop(1, W, 1, shard, [acc], "i")
            acc = scale_tile(c, acc, SA, m0, SB, n0)
            c.store(c.cast(acc, Y.type.element_type), Y, [m0, n0])

        c.foreach([ceil_div(N, bn)], tile, ["ni"])

    def comm_step(c: Code, i: Ix) -> None:
        push(c, i)
        if not elide:
            p = c.rotate(i, W)

            def block(c: Code, rb: Ix, m0: Ix, rows: int, _ni: Ix) -> None:
                copy_in(c, p, rb, m0, rows)
                c.signal(ready, c.add(c.mul(p, nrb), rb), c.rank())

            row_blocks(c, M, bm, block)

    gather_workers(kb, W, inter, f.gathered, copy_own, push, comm_step,
                   lambda c: row_blocks(c, M, bm, row_block))
