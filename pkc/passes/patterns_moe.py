"""The fused MoE kernel (all_to_all -> grouped matmul -> all_to_all), built by
patterns.build_kernel.

Staged and elided forms, on the kernel builder (kernel_builder.py) and following the
conventions in patterns.py's docstring. Separate from patterns_gemm.py because its row
layout (blocks of ``capacity`` token rows per (expert, source rank)) and its two exchanges
share nothing with the single-collective kernels there.
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.ir import SSAValue

from pkc.dialects import kernel as k
from pkc.passes.kernel_builder import Code, Ix, KernelBuilder, ceil_div, shape_of
from pkc.passes.patterns_fusion import Fusion
from pkc.passes.patterns_tiles import copy_tiles, gemm_tile, row_blocks
from pkc.target.cost import OverlapStyle

# -- all_to_all -> grouped matmul -> all_to_all (MoE) ------------------------------------


def build_moe(kb: KernelBuilder, f: Fusion, W: int, elide: bool) -> None:
    """Row layout (2-d views, see overlap.py): X has W*E*C token rows, block (q, e) of C
    rows goes to expert e of rank q; Wt stacks the E local experts' K x N weights; the
    received activations D hold block (e, s) at rows (e*W + s)*C; the result row block of
    (e, s) returns to rank s at rows (r*E + e)*C of its output.
    Dispatch: rank r pushes block (q, e) to rank q = (r - i) mod W at step i (staged: into
    q's dstage {staging}, copied into D by q; elided: into q's symmetric D). Grouped GEMM:
    the local blocks (from X, no wait) first, then source (r + i) mod W's as they arrive.
    Combine: each result tile goes back to its source rank (staged: into its cstage
    {staging}, copied into the output at the end; elided: into its symmetric output)."""
    X, Wt, O = kb.args
    R, K = shape_of(X)
    N, odt, dt = shape_of(Wt)[1], O.type.element_type, X.type.element_type
    E, C = f.experts, f.capacity
    bm, bn, bk = min(f.tile_m, C), min(f.tile_n, N), min(f.tile_k, K)
    nrb, TN = ceil_div(C, bm), ceil_div(N, bn)
    blocks = W * E * nrb
    inter, exact_k = f.overlap is OverlapStyle.INTER, E > 1
    if elide:
        D, dstage, combine_to = kb.alloc("recv", [E * W * C, K], dt, symmetric=True), None, O
    else:
        dstage = kb.alloc("dstage", [E * W * C, K], dt, symmetric=True, staging=True)
        D = kb.alloc("recv", [E * W * C, K], dt)
        combine_to = kb.alloc("cstage", [R, N], odt, symmetric=True, staging=True)
    ysend = kb.alloc("send", [E * W * C, N], odt) if inter else None
    ready = kb.signals("ready", blocks)
    disp = None if elide else kb.signals("dispatched", blocks)
    yready = kb.signals("computed", blocks) if inter else None
    combined = kb.signals("combined", 1)

    def slot(c: Code, e: Ix, s: Ix, rb: Ix) -> Ix:
        return c.add(c.mul(c.add(c.mul(s, E), e), nrb), rb)

    def d_row(c: Code, e: Ix, s: Ix, m0: Ix) -> Ix:
        return c.add(c.mul(c.add(c.mul(e, W), s), C), m0)

    def out_row(c: Code, e: Ix, m0: Ix) -> Ix:  # row in the source's output
        return c.add(c.mul(c.add(c.mul(c.rank(), E), e), C), m0)

    def blocks_of(c: Code, body: Callable) -> None:
        """body(code, e, rb, m0, rows) for every (expert, row block) of one source."""
        c.loop(0, E, 1, lambda c, e: row_blocks(
            c, C, bm, lambda c, rb, m0, rows, _ni: body(c, e, rb, m0, rows)), name="e")

    def k_tiles(c: Code, body: Callable) -> None:
        c.loop(0, ceil_div(K, bk) * bk, bk, lambda c, k0: body(c, k0), name="k")

    def dispatch(c: Code, i: Ix) -> None:
        q = c.rotate(i, W, back=True)

        def block(c: Code, e: Ix, rb: Ix, m0: Ix, rows: int) -> None:
            src = c.add(c.mul(c.add(c.mul(q, E), e), C), m0)
            dst = d_row(c, e, c.rank(), m0)
            k_tiles(c, lambda c, k0: c.put(c.load(X, [src, k0], [rows, bk], "tokens"),
                                           dstage if dstage is not None else D, [dst, k0], q))
            c.signal(disp if disp is not None else ready, slot(c, e, c.rank(), rb), q)

        blocks_of(c, block)

    def copy_in(c: Code, s: Ix, e: Ix, rb: Ix, m0: Ix, rows: int) -> None:
        row = d_row(c, e, s, m0)
        c.wait(disp, slot(c, e, s, rb), 1)
        k_tiles(c, lambda c, k0: c.store(c.load(dstage, [row, k0], [rows, bk], "tokens"), D,
                                         [row, k0]))

    def expert_block(c: Code, src: SSAValue, src_row: Ix, s: Ix, e: Ix, rb: Ix, m0: Ix,
                     rows: int) -> None:
        def tile(c: Code, ni: Ix) -> None:
            n0 = c.mul(ni, bn)
            acc = gemm_tile(c, src, src_row, Wt, c.mul(e, K), n0, rows, bn, K, bk, exact_k)
            y = c.cast(acc, odt)
            if inter:
                c.store(y, ysend, [d_row(c, e, s, m0), n0])
            else:
                c.put(y, combine_to, [out_row(c, e, m0), n0], s)

        c.foreach([TN], tile, ["ni"])
        if inter:
            c.signal(yready, slot(c, e, s, rb), c.rank())
        else:
            c.signal(combined, 0, s)

    def local(c: Code) -> None:
        r = c.rank()
        blocks_of(c, lambda c, e, rb, m0, rows: expert_block(
            c, X, c.add(c.mul(c.add(c.mul(r, E), e), C), m0), r, e, rb, m0, rows))

    def remote_step(c: Code, i: Ix) -> None:
        s = c.rotate(i, W)

        def block(c: Code, e: Ix, rb: Ix, m0: Ix, rows: int) -> None:
            if inter or elide:
                c.wait(ready, slot(c, e, s, rb), 1)
            else:
                copy_in(c, s, e, rb, m0, rows)
            expert_block(c, D, d_row(c, e, s, m0), s, e, rb, m0, rows)

        blocks_of(c, block)

    def combine_step(c: Code, i: Ix) -> None:
        s = c.rotate(i, W)

        def block(c: Code, e: Ix, rb: Ix, m0: Ix, rows: int) -> None:
            c.wait(yready, slot(c, e, s, rb), 1)
            c.loop(0, TN, 1, lambda c, ni: c.put(
                c.load(ysend, [d_row(c, e, s, m0), c.mul(ni, bn)], [rows, bn], "result"),
                combine_to, [out_row(c, e, m0), c.mul(ni, bn)], s), name="ni")
            c.signal(combined, 0, s)

        blocks_of(c, block)

    def receive_step(c: Code, i: Ix) -> None:
        s = c.rotate(i, W)

        def block(c: Code, e: Ix, rb: Ix, m0: Ix, rows: int) -> None:
            copy_in(c, s, e, rb, m0, rows)
            c.signal(ready, slot(c, e, s, rb), c.rank())

        blocks_of(c, block)

    def finish(c: Code) -> None:
        c.wait(combined, 0, blocks)
        if not elide:
            copy_tiles(c, combine_to, O, R, N, min(f.tile_m, R), bn)

    def compute(c: Code) -> None:
        c.rank()
        if not inter:
            c.loop(1, W, 1, dispatch)
        local(c)
        c.loop(1, W, 1, remote_step)
        finish(c)

    def comm(c: Code) -> None:
        c.rank()
        c.loop(1, W, 1, dispatch)
        if not elide:
            c.loop(1, W, 1, receive_step)
        c.loop(0, W, 1, combine_step)

    kb.worker(k.WorkerRole.COMPUTE, compute)
    if inter:
        kb.worker(k.WorkerRole.COMMUNICATE, comm)
