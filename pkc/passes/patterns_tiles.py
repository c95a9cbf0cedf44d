"""The tiling loops that the fused-kernel builders of patterns_gemm.py and patterns_moe.py
share: a GEMM tile over K (:func:`gemm_tile`), the row blocks of a chunk with their
remainder block (:func:`row_blocks`), every tile of a buffer (:func:`all_tiles`) and a
tile-by-tile copy (:func:`copy_tiles`), and the workers of an all-gather kernel
(:func:`gather_workers`). Written on the kernel builder
(:mod:`pkc.passes.kernel_builder`), which knows nothing of tiles of a GEMM; separate from
it so that the builder stays the one general emitter that lower-collectives uses too.
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.ir import SSAValue

from pkc.dialects import kernel as k
from pkc.passes.kernel_builder import F32, Code, Ix, KernelBuilder, ceil_div


def gemm_tile(c: Code, a: SSAValue, a_row: Ix, b: SSAValue, b_row: Ix, n0: Ix, rows: int,
              bn: int, K: int, bk: int, exact_k: bool = False) -> SSAValue:
    """f32 ``a[a_row : a_row+rows, 0:K] @ b[b_row : b_row+K, n0 : n0+bn]``, K in steps of
    bk. Overhanging K reads zeros from both operands when they end at K; with ``exact_k``
    (b holds more rows after K, as a stack of experts' weights does) the last step uses a
    narrower tile instead."""
    acc = c.fill([rows, bn], F32)

    def step(c: Code, k0: Ix, acc: SSAValue, width: int) -> list[SSAValue]:
        ta = c.load(a, [a_row, k0], [rows, width], "a")
        tb = c.load(b, [c.add(b_row, k0), n0], [width, bn], "b")
        return [c.mma(ta, tb, acc)]

    full = K // bk if exact_k else ceil_div(K, bk)
    (acc,) = c.loop(0, full * bk, bk, lambda c, k0, acc: step(c, k0, acc, bk), [acc], "k")
    if exact_k and K % bk:
        (acc,) = step(c, full * bk, acc, K % bk)
    return acc


def row_blocks(c: Code, rows: int, bm: int, body: Callable, cols: int = 1,
               parallel: bool = False) -> None:
    """Calls ``body(code, rb, m0, tile_rows, ni)`` for the row blocks of a chunk of
    ``rows`` rows (full blocks of bm, then the remainder block with a smaller tile) times
    ``cols`` column tiles; ``parallel`` spreads them with pk.foreach, else scf.for."""
    full, rem = divmod(rows, bm)

    def run(c: Code, rb: Ix, ni: Ix, tile_rows: int) -> None:
        body(c, rb, c.mul(rb, bm), tile_rows, ni)

    if full == 1 and parallel:
        c.foreach([cols], lambda c, ni: run(c, 0, ni, bm), ["ni"])
    elif full and parallel:
        c.foreach([full, cols], lambda c, rb, ni: run(c, rb, ni, bm), ["rb", "ni"])
    elif full:
        def row(c: Code, rb: Ix) -> None:
            c.loop(0, cols, 1, lambda c, ni: run(c, rb, ni, bm), name="ni")

        c.loop(0, full, 1, row, name="rb")
    if rem and parallel:
        c.foreach([cols], lambda c, ni: run(c, full, ni, rem), ["ni"])
    elif rem:
        c.loop(0, cols, 1, lambda c, ni: run(c, full, ni, rem), name="ni")


def all_tiles(c: Code, rows: int, cols: int, bm: int, bn: int, body: Callable) -> None:
    """``body(code, m0, n0)`` for every tile of a rows x cols buffer (pk.foreach; tiles
    overhang the end)."""
    c.foreach([ceil_div(rows, bm), ceil_div(cols, bn)],
              lambda c, mi, ni: body(c, c.mul(mi, bm), c.mul(ni, bn)), ["mi", "ni"])


def copy_tiles(c: Code, src: SSAValue, dst: SSAValue, rows: int, cols: int, bm: int,
               bn: int) -> None:
    """Copies a whole rows x cols buffer tile by tile."""
    def body(c: Code, m0: Ix, n0: Ix) -> None:
        c.store(c.load(src, [m0, n0], [bm, bn]), dst, [m0, n0])

    all_tiles(c, rows, cols, bm, bn, body)


def gather_workers(kb: KernelBuilder, W: int, inter: bool, gathered: bool, copy_own: Callable,
                   push: Callable, comm_step: Callable, consume: Callable) -> None:
    """The workers of an all-gather + GEMM kernel. Inter-SM: a communicate worker copies the
    own shard into G when G is asked for (``gathered``) and runs ``comm_step`` for the W - 1
    peers while the compute worker runs ``consume``. Intra-SM: one compute worker does the
    own copy and the W - 1 ``push`` steps first, then ``consume``."""

    def comm(c: Code) -> None:
        c.rank()
        if gathered:
            copy_own(c)
        c.loop(1, W, 1, comm_step)

    def compute(c: Code) -> None:
        c.rank()
        if not inter:
            if gathered:
                copy_own(c)
            c.loop(1, W, 1, push)
        consume(c)

    kb.worker(k.WorkerRole.COMPUTE, compute)
    if inter:
        kb.worker(k.WorkerRole.COMMUNICATE, comm)
