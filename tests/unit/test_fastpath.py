"""Which pk.kernel ops take pkc's hand-tuned sm_90a kernels (pkc/runtime/fastpath.py), on
IR from the real pipeline: fused GEMM + reduce-scatter / all-reduce, all-gather + GEMM(s)
and lowered collectives get a fast plan with the right shapes; everything else keeps the
general path with a reason that names the problem."""

from __future__ import annotations

import pytest

from pkc.dialects.kernel import KernelOp
from pkc.ir import parse_module
from pkc.passes.registry import run_pipeline
from pkc.runtime.fastpath import FastPlan, plan_fast


def kernels(ir: str, pipeline: str = "default{force=true}") -> dict[str, KernelOp]:
    m = parse_module(ir, "t.mlir")
    run_pipeline(pipeline, m)
    return {op.kernel_name.data: op for op in m.walk() if isinstance(op, KernelOp)}


def t(shape, dt="bf16"):
    return f"tensor<{'x'.join(map(str, shape))}x{dt}>"


def layer(W=2, dt="bf16", M=256, K=512, N=1024):
    x, w, h, r = t((M, K), dt), t((K, N), dt), t((M, N), dt), t((M // W, N), dt)
    w2, w3, o, q = t((N, K), dt), t((N, 128), dt), t((M, K), dt), t((M, 128), dt)
    return f"""
func.func @main(%x: {x}, %w: {w}, %w2: {w2}, %v: {w3}) -> ({r}, {h}, {o}, {q}) {{
  %h = pk.matmul %x, %w : ({x}, {w}) -> {h}
  %r = pk.reduce_scatter %h {{dim = 0 : i64, reduce = "sum", world = {W} : i64}} : {h} -> {r}
  %g = pk.all_gather %r {{dim = 0 : i64, world = {W} : i64}} : {r} -> {h}
  %m = pk.matmul %g, %w2 : ({h}, {w2}) -> {o}
  %a = pk.all_reduce %m {{reduce = "sum", world = {W} : i64}} : {o} -> {o}
  %q = pk.matmul %g, %v : ({h}, {w3}) -> {q}
  func.return %r, %g, %a, %q : {r}, {h}, {o}, {q}
}}"""


def test_fused_and_collective_plans():
    ks = kernels(layer())
    rs = plan_fast(ks["matmul_reduce_scatter"])
    assert isinstance(rs, FastPlan) and rs.kind == "mm_rs"
    assert rs.shapes == {"M": 256, "N": 1024, "K": 512} and rs.dtype == "bf16" and rs.world == 2
    ag = plan_fast(ks["all_gather_matmul"])
    assert ag.kind == "ag_mms" and ag.shapes == {"Mc": 128, "K": 1024, "N": [512, 128], "gathered": True}
    ar = [plan_fast(k) for n, k in ks.items() if n.startswith("all_reduce")]
    assert [p.kind for p in ar] == ["ll"] and ar[0].shapes["elems"] == 256 * 512   # 256 KiB
    assert "sm_90a only" in plan_fast(ks["matmul_reduce_scatter"], "sm_100a")


def test_mm_all_reduce_and_single_ag_mm():
    x, w, y = t((256, 64)), t((64, 512)), t((256, 512))
    ir = f"""func.func @main(%x: {x}, %w: {w}) -> {y} {{
  %h = pk.matmul %x, %w : ({x}, {w}) -> {y}
  %a = pk.all_reduce %h {{reduce = "sum", world = 4 : i64}} : {y} -> {y}
  func.return %a : {y}
}}"""
    (k,) = kernels(ir).values()
    p = plan_fast(k)
    assert p.kind == "mm_ar" and p.shapes == {"M": 256, "N": 512, "K": 64} and p.world == 4
    s, b, o = t((64, 256)), t((256, 512)), t((256, 512))
    ir = f"""func.func @main(%s: {s}, %b: {b}) -> {o} {{
  %g = pk.all_gather %s {{dim = 0 : i64, world = 4 : i64}} : {s} -> {t((256, 256))}
  %c = pk.matmul %g, %b : ({t((256, 256))}, {b}) -> {o}
  func.return %c : {o}
}}"""
    (k,) = kernels(ir).values()
    p = plan_fast(k)
    assert p.kind == "ag_mm" and p.shapes == {"Mc": 64, "K": 256, "N": [512], "gathered": False}


def test_two_shot_and_scatter_gather():
    big = t((4096, 4096))
    ir = f"""func.func @main(%x: {big}) -> {big} {{
  %a = pk.all_reduce %x {{reduce = "sum", world = 8 : i64}} : {big} -> {big}
  func.return %a : {big}
}}"""
    (k,) = kernels(ir, "default").values()
    assert plan_fast(k).kind == "ar2"          # 32 MiB: the cost model picks two-shot
    assert plan_fast(k).describe().endswith("(push gather, 1 CTA group)")   # < 64 MiB
    part = t((512, 4096))
    ir = f"""func.func @main(%x: {big}) -> {part} {{
  %a = pk.reduce_scatter %x {{dim = 0 : i64, reduce = "sum", world = 8 : i64}} : {big} -> {part}
  func.return %a : {part}
}}"""
    (k,) = kernels(ir, "default").values()
    p = plan_fast(k)
    assert p.kind == "rs" and p.shapes["elems"] == 4096 * 4096


@pytest.mark.parametrize("case,why", [
    ("dim1", "non-leading dim"),
    ("f64", "bf16/f16/f32"),
    ("odd", "16-byte vectors"),
    ("max", "reducing with max"),   # the fast kernels sum: a max all-reduce must not run them
])
def test_declined_with_reason(case, why):
    if case == "max":
        a = b = t((64, 64))
        body = f'%y = pk.all_reduce %x {{reduce = "max", world = 8 : i64}} : {a} -> {b}'
    elif case == "dim1":
        a, b = t((64, 32)), t((64, 64))
        body = f'%y = pk.all_gather %x {{dim = 1 : i64, world = 2 : i64}} : {a} -> {b}'
    elif case == "f64":
        a = b = t((64, 64), "f64")
        body = f'%y = pk.all_reduce %x {{reduce = "sum", world = 2 : i64}} : {a} -> {b}'
    else:
        a = b = t((3, 5))
        body = f'%y = pk.all_reduce %x {{reduce = "sum", world = 2 : i64}} : {a} -> {b}'
    ir = f"func.func @main(%x: {a}) -> {b} {{\n  {body}\n  func.return %y : {b}\n}}"
    (k,) = kernels(ir, "default").values()
    reason = plan_fast(k)
    assert isinstance(reason, str) and why in reason


def test_size_limits_and_put_ctas_follow_the_measurements():
    from pkc.runtime.fastpath import (LL_GATHER_MAX_BYTES, LL_MAX_BYTES, ag_put_ctas,
                                      ll_limit)

    # LL limits are the W = 2 measurements, scaled by 2 / W (W = 4: 256 KiB went to the
    # one-shot push kernel, 1.13 vs 0.76x)
    assert ll_limit(LL_MAX_BYTES, 2) == 256 << 10 and ll_limit(LL_MAX_BYTES, 1) == 256 << 10
    assert ll_limit(LL_MAX_BYTES, 4) == 128 << 10 and ll_limit(LL_MAX_BYTES, 8) == 64 << 10
    assert ll_limit(LL_GATHER_MAX_BYTES, 4) == 512 << 10
    # put CTAs: a multiple of 4 in [4, 16]; many where A's bytes outrun the GEMM, few where
    # the GEMM dominates (the measured winners on 2 and 4 H200s)
    assert ag_put_ctas(16384, 2048, 16384, 4) == 16            # PK N = 16384
    assert ag_put_ctas(8192, 28672, 8192, 2) == 4              # Llama-70B up+gate, W = 2
    assert ag_put_ctas(32768, 4096, 32768, 4) == 8             # PK N = 32768, W = 4
    for M, N, K in ((2048, 256, 2048), (8192, 5120, 8192), (65536, 65536, 1024)):
        for W in (2, 3, 4, 8):
            n = ag_put_ctas(M, N, K, W)
            assert 4 <= n <= 16 and n % 4 == 0


def test_two_shot_config_follows_the_measurements():
    """Fresh-output two-shot: push gather at W = 2 at every size and at W > 2 below 512 MiB
    (pull above); two CTA groups from 64 MiB (measured on 2 H200s: 1 GiB 0.95 -> 0.99x)."""
    from pkc.runtime.fastpath import collective_config

    def cfg(W, nbytes):
        return collective_config("ar2", W, "bf16", nbytes // 2)

    assert cfg(2, 1 << 30).gather == "push" and cfg(2, 1 << 30).groups == 2
    assert cfg(4, 1 << 30).gather == "pull" and cfg(4, 256 << 20).gather == "push"
    assert cfg(2, 16 << 20).groups == 1 and cfg(8, 64 << 20).groups == 2
    assert all(cfg(W, 1 << 20).copy_in for W in (2, 3, 8))
    ll = collective_config("ll", 4, "f32", 1024)
    assert (ll.kind, ll.copy_in, ll.groups) == ("ll", False, 1)


def test_gemm_all_reduce_kernel_choice(monkeypatch):
    """W = 2: the broadcast kernel into a fresh output (ar_out); link-bound shapes take arf
    (16 reducer CTAs) only when ARF_ENABLED; W != 2 keep "ar" (W = 1 has nothing to add,
    W > 2 runs RS + all-gather)."""
    import pkc.runtime.fastpath as fp
    from pkc.runtime.fastpath import arf_reducer_ctas, mm_ar_kind

    out = "ar_out" if fp.AR_INTO_OUTPUT else "ar"
    assert mm_ar_kind(8192, 8192, 1024, 2) == ("arf" if fp.ARF_ENABLED else out)
    assert arf_reducer_ctas(8192, 8192, 1024, 2) == 16
    assert mm_ar_kind(8192, 8192, 14336, 2) == out
    assert mm_ar_kind(8192, 8192, 1024, 1) == "ar" and mm_ar_kind(8192, 8192, 1024, 4) == "ar"
    monkeypatch.setattr(fp, "ARF_ENABLED", True)
    assert mm_ar_kind(8192, 8192, 1024, 2) == "arf" and mm_ar_kind(8192, 8192, 14336, 2) == out
    monkeypatch.setattr(fp, "AR_INTO_OUTPUT", False)
    assert mm_ar_kind(8192, 8192, 14336, 2) == "ar"
    for M, N, K in ((2048, 2048, 256), (8192, 8192, 14336), (32768, 32768, 4096)):
        n = arf_reducer_ctas(M, N, K, 2)
        assert 4 <= n <= 16 and n % 4 == 0


def test_fused_tile_config():
    """Link-bound GEMM + all-reduce broadcasts and GEMM + reduce-scatters (W = 2) take 128 x
    128 tiles; GEMM-bound ones, all-gather + GEMM, W = 1 (nothing sent) and W > 2 keep
    choose_config's tile; the plan's remark names the tile."""
    from pkc.codegen.hopper.launch import choose_config
    from pkc.runtime.fastpath import FastPlan, fused_gemm_config

    def tile(kind, M, N, K, W):
        c = fused_gemm_config(kind, M, N, K, W, "bf16", "nk", 132)
        return (c.bm, c.bn, c.stages)

    assert tile("ar", 8192, 8192, 1024, 2) == (128, 128, 6)      # link / GEMM ~2
    assert tile("rs", 4096, 4096, 512, 2) == (128, 128, 6)        # ~1.3
    for kind, M, N, K, W in (("ar", 8192, 8192, 14336, 2), ("ar", 32768, 32768, 4096, 2),
                             ("ar", 8192, 8192, 1024, 4), ("rs", 8192, 8192, 1024, 2),
                             ("ar", 4096, 4096, 512, 1), ("rs", 4096, 4096, 512, 1),
                             ("ag", 8192, 1024, 8192, 2)):
        c = choose_config(M, N, K, "bf16", "nk", 132)
        assert tile(kind, M, N, K, W) == (c.bm, c.bn, c.stages), (kind, M, N, K, W)
    kn = fused_gemm_config("ar", 8192, 8192, 1024, 2, "bf16", "kn", 132)
    assert kn.b_layout == "kn" and kn.bn % 64 == 0
    plan = FastPlan("mm_ar", 2, "bf16", dict(M=8192, N=8192, K=1024))
    assert plan.describe().endswith("(bf16 accumulator) (128x128 tiles, into a fresh output)")
    plan = FastPlan("mm_rs", 2, "bf16", dict(M=8192, N=8192, K=14336))
    assert plan.describe().endswith("(bf16 accumulator) (128x256 tiles, into a fresh output)")
    plan = FastPlan("mm_rs", 1, "bf16", dict(M=8192, N=8192, K=14336))
    assert plan.describe().endswith("(bf16 accumulator) (128x256 tiles)")


def test_fused_results_into_fresh_outputs_at_w2():
    """At W = 2 GEMM + reduce-scatter and GEMM + all-reduce write fresh outputs (nothing
    persistent to copy when the result leaves the graph); at W = 1 (and rs at W > 2) the
    result is the persistent accumulator; the switches turn it off."""
    import pkc.runtime.fastpath as fp
    from pkc.runtime.fastpath import FastPlan, FastStep

    def persistent(kind, W, M=8192):
        plan = FastPlan(kind, W, "bf16", dict(M=M, N=1024, K=1024))
        return FastStep(plan, None, [(M // W, 1024)]).persistent

    assert persistent("mm_rs", 2) == [not fp.RS_INTO_OUTPUT]
    assert persistent("mm_rs", 1) == [True] and persistent("mm_rs", 4) == [True]
    assert persistent("mm_ar", 2) == [not fp.AR_INTO_OUTPUT] and persistent("mm_ar", 1) == [True]
    assert persistent("mm_ar", 4) == [False]            # RS then a pull all-gather

