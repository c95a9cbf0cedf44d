"""The fused kinds with ping-pong consumers (pkc/passes/gemm_schedule_pingpong.py: the two
consumer warpgroups on alternate tiles, each its own fused epilogue): GEMM +
reduce-scatter (fp8 and bf16, rank-ordered adds), all-gather + fp8 GEMM (tensor- and
row-wise scales), the gather along K; W in {1, 2, 3, 4, 8} with odd shapes. The
interpreter's run of the scheduled kernel equals the kernel-level kernel and the graph
program (a reduce-scatter whose tiles were counted per consumer warpgroup, as the
cooperative form counts them, would wait for signals that never come: a protocol error),
the emulator runs the PTX equal to the interpreter, ptxas has no spills; parts built for the
cooperative consumers are refused with their reason. The fused kinds take the ping-pong tile
only when forced (``variant``): on the H200 it measured slower than their cooperative tile
(docs/PERF_NOTES.md 2026-12-02 (r)); the fp8 ones take CTA pairs where the plain fp8 GEMM
does (test_fused_cluster_pairs.py for their kernels)."""

from __future__ import annotations

import pytest

from pkc.codegen import compile_kernel
from pkc.codegen.ptxas import find_ptxas
from pkc.ir import make_context, parse_module
from pkc.passes.registry import parse_pipeline, run_pipeline
from pkc.passes.remarks import plan_of, remarks_of
from tests.unit.test_fp8_fused import check_levels
from tests.unit.test_fp8_overlap import ag_ir, red_ir

PP = "128x128_pp_s6"


def _scheduled(text: str, variant: str = PP, deterministic: bool = False):
    kernel_level = parse_module(text)
    run_pipeline("default{force=true}", kernel_level)
    sched = kernel_level.clone()
    opts = f"variant={variant}" + (" deterministic=true" if deterministic else "")
    for p in parse_pipeline(f"schedule-fused{{{opts}}},schedule-collectives"):
        p.apply(make_context(), sched)
    (kop,) = [o for o in sched.walk() if o.name == "pk.kernel"]
    assert kop.schedule() is not None, remarks_of(kop)
    return kernel_level, sched, kop


def _bf16_rs_ir(W: int, M: int, N: int, K: int) -> str:
    a, b, c, y = (f"tensor<{M}x{K}xbf16>", f"tensor<{K}x{N}xbf16>", f"tensor<{M}x{N}xbf16>",
                  f"tensor<{M // W}x{N}xbf16>")
    return (f"func.func @main(%a: {a}, %b: {b}) -> {y} {{\n"
            f"  %c = pk.matmul %a, %b : ({a}, {b}) -> {c}\n"
            f'  %o = pk.reduce_scatter %c {{dim = 0 : i64, reduce = "sum", world = {W} : i64}}'
            f" : {c} -> {y}\n  func.return %o : {y}\n}}\n")


# (W, M = W x odd chunk rows, N, K, row-wise, emulate): several tiles per chunk so that
# both warpgroups handle tiles of one chunk and a chunk change falls on either
RS_CASES = [(1, 200, 144, 128, True, False), (2, 2 * 144, 272, 128, False, True),
            (3, 3 * 72, 272, 256, True, False), (4, 4 * 40, 144, 128, False, False),
            (8, 8 * 24, 144, 128, True, False)]


@pytest.mark.parametrize("W,M,N,K,row,emulate", RS_CASES,
                         ids=[f"W{c[0]}-{'row' if c[4] else 'tensor'}" for c in RS_CASES])
def test_fp8_reduce_scatter_pingpong_equals_references(W, M, N, K, row, emulate):
    text = red_ir(W, M, N, K, row, "bf16")
    kernel_level, sched, kop = _scheduled(text)
    assert plan_of(kop)["pingpong"] is True and plan_of(kop)["fused_kind"] == "rs"
    assert any("pingpong" in r for r in remarks_of(kop))
    check_levels(text, kernel_level, sched, W, seed=3, emulate=emulate)


@pytest.mark.parametrize("W,deterministic", [(3, True), (4, False)])
def test_bf16_reduce_scatter_pingpong_equals_references(W, deterministic):
    text = _bf16_rs_ir(W, W * 144, 272, 96)
    kernel_level, sched, kop = _scheduled(text, deterministic=deterministic)
    assert plan_of(kop)["pingpong"] is True
    check_levels(text, kernel_level, sched, W, seed=4, emulate=W == 3)


# all_gather -> fp8 scaled matmul: (W, shard rows (odd), N, K, row-wise, G returned, emulate)
AG_CASES = [(2, 144, 272, 128, False, False, True), (3, 72, 144, 128, True, True, False),
            (4, 40, 272, 128, True, False, True), (8, 24, 144, 128, False, True, False)]


@pytest.mark.parametrize("W,Ms,N,K,row,gathered,emulate", AG_CASES,
                         ids=[f"W{c[0]}-{'row' if c[4] else 'tensor'}" for c in AG_CASES])
def test_fp8_all_gather_pingpong_equals_references(W, Ms, N, K, row, gathered, emulate):
    text = ag_ir(W, Ms, N, K, row, "bf16", gathered)
    kernel_level, sched, kop = _scheduled(text)
    assert plan_of(kop)["pingpong"] is True and plan_of(kop)["fused_kind"] == "ag"
    check_levels(text, kernel_level, sched, W, seed=5, emulate=emulate)


def test_fp8_gather_along_k_pingpong_equals_references():
    from tests.unit.test_fp8_gather_kinds import agk_ir

    text = agk_ir(3, (137,), 64, 144, True, "bf16", True)
    kernel_level, sched, kop = _scheduled(text)
    assert plan_of(kop)["pingpong"] is True and plan_of(kop)["gather_dim"] == "K"
    check_levels(text, kernel_level, sched, 3, seed=6, emulate=False)


def test_fp8_tiles_chosen_without_a_variant():
    """The plain fp8 GEMM: CTA pairs with multicast B where every CTA has many tiles, the
    ping-pong tile where it has many k-blocks, else the table; the fused fp8 kinds built
    for pairs take the same pairs (with ping-pong consumers where K is short), the others
    and bf16 the table's tile (journal 2026-12-02 (r), (s), (t))."""
    from pkc.passes.ag_k_schedule import AgKParts
    from pkc.passes.fused_schedule import RsParts, fp8_fused_config, fused_config
    from pkc.target.fused_tuning import FusedKind
    from pkc.target.gemm_tuning import BLayout, choose_config

    def plain(M, N, K):
        return choose_config(M, N, K, "bf16", BLayout.NK, 132, ("e4m3", "e4m3"), True)

    for shape in [(16384, 8192, 4096), (8192, 8192, 8192), (4096, 28672, 8192)]:
        c = plain(*shape)
        assert (c.bm, c.bn, c.cluster_m, c.pingpong, c.a_type) == (128, 256, 2, False, "e4m3")
    c = plain(8192, 1280, 8192)
    assert c.pingpong and (c.bm, c.bn, c.cluster_m) == (128, 128, 1)
    assert not plain(4096, 4096, 4096).pingpong and plain(4096, 4096, 4096).cluster_m == 1

    def fused(M, N, K, parts=RsParts, variant=""):
        f = fused_config(FusedKind.RS, M, N, K, 2, "bf16", BLayout.NK, "h200", variant)
        return f, fp8_fused_config(f, ("e4m3", "e4m3"), M, N, K, "h200", variant, parts)

    # pairs: ping-pong consumers on them where a tile's main loop is <= 32 k-blocks
    # (K <= 4096) and the parts can work as a ping-pong pair, else the cooperative tile
    bf16, fp8 = fused(16384, 8192, 4096)
    assert (bf16.cluster_m, fp8.cluster_m, fp8.bm, fp8.bn, fp8.pingpong) == (1, 2, 128, 128,
                                                                             True)
    assert fp8.a_type == "e4m3" and fp8.stages == 6
    long_k = fused(8192, 8192, 8192)[1]                                   # 64 k-blocks
    assert (long_k.cluster_m, long_k.bn, long_k.pingpong) == (2, 256, False)
    assert fused(16384, 8192, 4096 + 128)[1].pingpong is False           # 33 k-blocks

    class NoPingpong(RsParts):
        pingpong_problem = "built for the cooperative consumers"
    cooperative = fused(16384, 8192, 4096, NoPingpong)[1]
    assert (cooperative.cluster_m, cooperative.bn, cooperative.pingpong) == (2, 256, False)
    assert fused(16384, 8192, 4096, AgKParts)[1].cluster_m == 1       # not built for pairs
    assert fused(4096, 4096, 4096)[1].cluster_m == 1                   # < 8 tiles a CTA
    assert fused(16384, 8192, 4096, variant="128x256_s4_tma")[1].cluster_m == 1   # forced


def test_parts_built_for_the_cooperative_consumers_are_refused():
    from pkc.passes.fused_ar_schedule import ArParts, ArOutParts
    from pkc.passes.fused_schedule import RsParts
    from pkc.passes.gemm_schedule_pingpong import check_pingpong_parts

    check_pingpong_parts(RsParts.__new__(RsParts))          # no error
    with pytest.raises(ValueError, match="ArParts: the all-reduce's broadcast epilogue"):
        check_pingpong_parts(ArParts.__new__(ArParts))
    with pytest.raises(ValueError, match="ArOutParts"):
        check_pingpong_parts(ArOutParts.__new__(ArOutParts))
    # a forced ping-pong tile on the fp8 all-reduce: an error at the kernel with the reason
    from pkc.ir import PkcDiagnostic

    with pytest.raises(PkcDiagnostic, match="variant=128x128_pp_s6: pingpong consumers: "
                                            "not for Ar"):
        _scheduled(red_ir(2, 2 * 40, 144, 128, True, "bf16", coll="ar"))


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
@pytest.mark.parametrize("kind", ["rs", "ag"])
def test_pingpong_fused_kernels_assemble_without_spills(kind):
    from pkc.codegen.ptxas import assemble_one

    text = (red_ir(4, 4 * 1024, 1024, 1024, True, "bf16") if kind == "rs"
            else ag_ir(4, 1024, 1024, 1024, True, "bf16"))
    _, _, kop = _scheduled(text)
    _, res = assemble_one(compile_kernel(kop, "sm_90a").ptx)
    assert res.spill_stores == 0 and res.spill_loads == 0 and res.stack_bytes == 0
