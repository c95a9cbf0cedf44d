"""The interpreter runs schedule-level (pks) kernels: the GEMM that build_gemm writes equals
torch's matmul for every kind of variant, and broken protocols are errors, never hangs.

What the GEMM tests assert: the interpreter's accumulator sums exactly and is rounded to
f32 once, then to bf16 (pkc.interp.schedule_state.Acc), so its output is bitwise equal to
``(A.double() @ B.double()).float().bfloat16()`` whatever the tile, CTA count or
interleaving; and within one bf16 step of torch's f32 matmul rounded to bf16 (or within
f32's summation error where a result cancels to nearly 0), in at most 0.1% of the elements
(on these shapes a handful).
"""

from __future__ import annotations

import importlib.util

import pytest
import torch
from xdsl.dialects import arith
from xdsl.dialects.builtin import StringAttr
from xdsl.ir import Operation

from pkc.dialects import schedule as s
from pkc.dialects.kernel import KernelOp
from pkc.interp import InterpError, interpret
from pkc.ir import parse_module
from pkc.passes.gemm_schedule import build_gemm
from pkc.target.gemm_tuning import VARIANTS, GemmConfig


def gemm_module(M: int, N: int, K: int, cfg: GemmConfig, world: int = 1):
    """@main(A [M, K], B [N, K] or [K, N]) -> C [M, N]: one pk.kernel scheduled by build_gemm."""
    T = cfg.dtype
    bshape = f"{N}x{K}" if cfg.b_layout == "nk" else f"{K}x{N}"
    a, b, c = f"{M}x{K}x{T}", f"{bshape}x{T}", f"{M}x{N}x{T}"
    m = parse_module(f"""
func.func @main(%a: tensor<{a}>, %b: tensor<{b}>) -> tensor<{c}> {{
  %c = pk.kernel "gemm" (%a, %b) {{world = {world} : i64}} : (tensor<{a}>, tensor<{b}>) -> tensor<{c}> {{
  ^bb0(%A: !pk.buffer<{a}>, %B: !pk.buffer<{b}>, %C: !pk.buffer<{c}>):
    pk.yield
  }}
  func.return %c : tensor<{c}>
}}""")
    k = next(op for op in m.walk() if isinstance(op, KernelOp))
    end = k.block.last_op
    end.detach()
    build_gemm(k.block, *k.block.args, M, N, K, cfg)
    k.block.add_op(end)
    m.verify()
    return m


def operands(M, N, K, cfg, world=1, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(world):
        a = torch.randn(M, K, generator=g).to(torch.bfloat16)
        b = torch.randn(*((N, K) if cfg.b_layout == "nk" else (K, N)), generator=g).to(torch.bfloat16)
        out.append([a, b])
    return out


def check_gemm(M, N, K, cfg, world=1, **kw) -> None:
    m = gemm_module(M, N, K, cfg, world)
    ins = operands(M, N, K, cfg, world)
    outs = interpret(m, ins, world, **kw)
    for r in range(world):
        a, b = ins[r]
        b = b.t() if cfg.b_layout == "nk" else b
        got = outs[r][0]
        exact = (a.double() @ b.double()).float().to(torch.bfloat16)
        assert torch.equal(got.view(torch.int16), exact.view(torch.int16)), \
            f"rank {r}: {int((got != exact).sum())} elements differ from the exact product"
        f32 = torch.matmul(a.float(), b.float()).to(torch.bfloat16)
        steps = (got.view(torch.int16).int() - f32.view(torch.int16).int()).abs()
        # f32 sums may round across a bf16 boundary (one step) or, on a result that cancels
        # to nearly 0, differ by f32's summation error
        err = K * 2 ** -22 * (a.float().abs() @ b.float().abs())
        assert bool(((steps <= 1) | ((got.float() - f32.float()).abs() <= err)).all())
        assert int((got != f32).sum()) <= max(2, got.numel() // 1000)


VARIANT_NAMES = ["128x256_s4_tma", "128x256_s3_global", "128x256_s4_kn", "64x256_c1_s5",
                 "128x256_s4_cl2", "128x128_s6_cl2", "256x128_s4_tma", "128x160_s5_tma",
                 "128x224_s4_tma"]


@pytest.mark.parametrize("name", VARIANT_NAMES)
def test_gemm_variants_odd_shape(name):
    check_gemm(200, 136, 72, VARIANTS[name])


@pytest.mark.parametrize("name,ctas,seed", [
    ("128x128_s6_tma", 1, 0), ("128x128_s6_tma", 3, 5), ("128x256_s4_kn", 2, 7),
    ("128x128_s6_cl2", 2, 3), ("128x128_s6_cl2", 4, 0), ("64x256_c1_s5", None, 11),
])
def test_gemm_rings_wrap_any_grid_and_order(name, ctas, seed):
    """More k-blocks than stages (the rings wrap inside a tile, phases flip), several tiles
    per CTA, a random interleaving: still the exact product."""
    check_gemm(264, 200, 456, VARIANTS[name], ctas=ctas, schedule_seed=seed)


def test_gemm_world_of_three_ranks():
    check_gemm(72, 64, 136, VARIANTS["128x128_s6_tma"], world=3)


def test_global_epilogue_clips_at_rows_and_cols():
    """The output starts as NaN (poison): every element in bounds was written, none beyond."""
    check_gemm(65, 24, 8, GemmConfig(bm=128, bn=128, stages=2, epilogue="global"))


def test_tma_reduce_add_adds_into_the_output():
    """Each epilogue piece stored, then reduce-added once more: C = 2 x the product (a bf16
    value doubled in f32 and rounded back is exact), clipped at the bounds like the store."""
    cfg = VARIANTS["128x128_s6_tma"]
    M, N, K = 200, 136, 72
    m = gemm_module(M, N, K, cfg)
    for st in _ops(m, s.TmaStoreOp):
        twice = st.clone()
        twice.attributes["reduce"] = StringAttr("add")
        st.parent_block().insert_op_after(twice, st)
    (a, b), = operands(M, N, K, cfg)
    got = interpret(m, [[a, b]], 1)[0][0]
    exact = (a.double() @ b.t().double()).float().to(torch.bfloat16)
    assert torch.equal(got, (exact.float() * 2).to(torch.bfloat16))


def test_an_op_without_a_rule_is_named():
    from xdsl.dialects import arith
    from xdsl.dialects.builtin import FloatAttr, f32

    cfg = VARIANTS["128x256_s4_global"]
    m = gemm_module(200, 136, 72, cfg)
    wait = _ops(_role(m, s.RoleKind.CONSUMER), s.MbarrierWaitOp)[0]
    one = arith.ConstantOp(FloatAttr(1.0, f32))
    wait.parent_block().insert_op_before(one, wait)
    wait.parent_block().insert_op_before(arith.NegfOp(one.result), wait)
    with pytest.raises(InterpError, match=r"'arith.negf' on rank 0, CTA 0, consumer warpgroup 0: "
                       r"cannot be interpreted at the schedule level \(no rule in pkc.interp.schedule_rules"):
        _run(m, cfg, 200, 136, 72)


# ----------------------------------------------------------------------------------------
# Broken protocols


def _role(m, kind: s.RoleKind) -> s.RoleOp:
    return next(op for op in m.walk() if isinstance(op, s.RoleOp) and op.role is kind)


def _ops(root: Operation, cls) -> list:
    return [op for op in root.walk() if isinstance(op, cls)]


def _run(m, cfg, M, N, K, **kw):
    return interpret(m, operands(M, N, K, cfg), 1, **kw)


SMALL = (200, 136, 456)          # 8 k-blocks: more than the stages


def test_removed_release_is_a_deadlock_naming_the_waits():
    cfg = VARIANTS["128x128_s6_tma"]
    m = gemm_module(*SMALL, cfg)
    release = _ops(_role(m, s.RoleKind.CONSUMER), s.MbarrierArriveOp)[0]   # in the k loop
    release.detach()
    release.erase()
    with pytest.raises(InterpError) as e:
        _run(m, cfg, *SMALL)
    msg = str(e.value)
    assert "deadlock" in msg
    assert "'pks.mbarrier_wait' on rank 0, CTA 0, producer warpgroup 0: waits for phase" in msg
    assert "consumer warpgroup 1: waits for phase" in msg
    assert "arrivals" in msg


def test_missing_full_wait_reads_before_the_data_arrived():
    cfg = VARIANTS["128x256_s4_tma"]
    m = gemm_module(*SMALL, cfg)
    wait = _ops(_role(m, s.RoleKind.CONSUMER), s.MbarrierWaitOp)[0]
    wait.detach()
    wait.erase()
    for seed in (0, 1, 2):
        with pytest.raises(InterpError, match=r"'pks.mma_async' on rank 0, CTA \d, consumer "
                           r"warpgroup \d: reads bytes .*read before the data arrived"):
            _run(m, cfg, *SMALL, schedule_seed=seed)


def test_expect_tx_short_of_the_stage_reads_before_the_data_arrived():
    """The full barrier completes on the A bytes alone: B is read before it landed."""
    cfg = VARIANTS["128x128_s6_tma"]
    m = gemm_module(*SMALL, cfg)
    arrive = _ops(_role(m, s.RoleKind.PRODUCER), s.MbarrierArriveOp)[0]
    arrive.tx_bytes = type(arrive.tx_bytes)(cfg.a_stage_bytes)
    with pytest.raises(InterpError, match="read before the data arrived"):
        _run(m, cfg, *SMALL)


def test_consumer_ring_with_a_wrong_stage_count_is_caught():
    """The consumers wrap their ring one stage early: they wait for a stage the producer
    has not refilled, or read one it has refilled for another k-block."""
    cfg = VARIANTS["128x128_s6_tma"]
    m = gemm_module(*SMALL, cfg)
    consumer = _role(m, s.RoleKind.CONSUMER)
    cmp = next(op for op in consumer.walk() if isinstance(op, arith.CmpiOp)
               and isinstance(op.rhs.owner, arith.ConstantOp)
               and op.rhs.owner.value.value.data == cfg.stages)
    cmp.rhs.owner.value = type(cmp.rhs.owner.value)(cfg.stages - 1, cmp.rhs.type)
    with pytest.raises(InterpError) as e:
        _run(m, cfg, *SMALL)
    assert "deadlock" in str(e.value) or "phases" in str(e.value)


def test_two_expect_tx_arrivals_are_too_many():
    cfg = VARIANTS["128x256_s4_tma"]
    m = gemm_module(*SMALL, cfg)
    arrive = _ops(_role(m, s.RoleKind.PRODUCER), s.MbarrierArriveOp)[0]
    arrive.parent_block().insert_op_after(arrive.clone(), arrive)
    with pytest.raises(InterpError, match=r"'pks.mbarrier_arrive' on rank 0, CTA 0, producer "
                       r"warpgroup 0: arrival on mbarriers #0\[0\] .* over its expected count 1"):
        _run(m, cfg, *SMALL)


def test_double_release_is_caught():
    """Each consumer releases its last stage twice per tile: the empty barrier runs a phase
    ahead of the ring, and the producer's next wait or fill is caught."""
    cfg = VARIANTS["128x128_s6_tma"]
    m = gemm_module(*SMALL, cfg)
    release = _ops(_role(m, s.RoleKind.CONSUMER), s.MbarrierArriveOp)[1]   # after the k loop
    release.parent_block().insert_op_after(release.clone(), release)
    with pytest.raises(InterpError, match="already completed|still reads|no mbarrier ordering"):
        _run(m, cfg, *SMALL, ctas=1)


def test_release_before_the_mma_completed_is_caught():
    """The stage is released before pks.mma_wait: the producer's refill overwrites bytes
    the MMA may still read."""
    cfg = VARIANTS["128x128_s6_tma"]
    m = gemm_module(*SMALL, cfg)
    consumer = _role(m, s.RoleKind.CONSUMER)
    release = _ops(consumer, s.MbarrierArriveOp)[0]
    wait = _ops(consumer, s.MmaWaitOp)[0]
    release.detach()
    wait.parent_block().insert_op_before(release, wait)
    with pytest.raises(InterpError, match=r"'pks.tma_load' on rank 0, CTA 0, producer warpgroup 0: "
                       r"overwrites bytes .* that the MMA .* read, with no mbarrier ordering"):
        _run(m, cfg, *SMALL)


def test_epilogue_without_the_bulk_wait_overwrites_a_buffer_being_stored():
    cfg = VARIANTS["128x128_s6_tma"]
    m = gemm_module(200, 136, 72, cfg)
    bw = next(op for op in _ops(_role(m, s.RoleKind.CONSUMER), s.BulkWaitOp) if op.read is not None)
    bw.detach()
    bw.erase()
    with pytest.raises(InterpError, match=r"'pks.acc_store_smem' .* while the TMA store .* still reads"):
        _run(m, cfg, 200, 136, 72, ctas=1)      # one CTA: it reuses its buffers


def test_epilogue_without_the_fence_is_caught():
    cfg = VARIANTS["128x128_s6_tma"]
    m = gemm_module(200, 136, 72, cfg)
    for f in _ops(m, s.FenceAsyncSharedOp):
        f.detach()
        f.erase()
    with pytest.raises(InterpError, match=r"'pks.tma_store' .* no pks.fence_async_shared"):
        _run(m, cfg, 200, 136, 72)


def test_accumulator_read_before_the_last_mma_completed():
    cfg = VARIANTS["128x256_s4_global"]
    m = gemm_module(200, 136, 72, cfg)
    last = next(op for op in _ops(_role(m, s.RoleKind.CONSUMER), s.MmaWaitOp) if op.pending.data == 0)
    last.detach()
    last.erase()
    with pytest.raises(InterpError, match=r"'pks.acc_store_global' .* MMAs on it are in flight"):
        _run(m, cfg, 200, 136, 72)


def test_parity_outside_0_1():
    cfg = VARIANTS["128x256_s4_global"]
    m = gemm_module(200, 136, 72, cfg)
    wait = _ops(_role(m, s.RoleKind.CONSUMER), s.MbarrierWaitOp)[0]
    two = arith.ConstantOp.from_int_and_width(2, 32)
    wait.parent_block().insert_op_before(two, wait)
    wait.operands[2] = two.result
    with pytest.raises(InterpError, match="parity 2"):
        _run(m, cfg, 200, 136, 72)


def test_tma_needs_16_byte_strides():
    cfg = VARIANTS["128x256_s4_global"]
    m = gemm_module(64, 64, 36, cfg)          # K = 36: rows of 72 bytes
    with pytest.raises(InterpError, match="multiples of 16 bytes"):
        _run(m, cfg, 64, 64, 36)


def test_ctas_must_be_whole_clusters():
    cfg = VARIANTS["128x128_s6_cl2"]
    m = gemm_module(200, 136, 72, cfg)
    with pytest.raises(InterpError, match="multiple of the cluster size 2"):
        _run(m, cfg, 200, 136, 72, ctas=3)


# ----------------------------------------------------------------------------------------
# The scheduling pass, checked by the interpreter


def _matmul_module(M, N, K, transposed: bool) -> str:
    if transposed:      # x @ W.T: the kernel reads W in its [N, K] layout
        return f"""
func.func @main(%x: tensor<{M}x{K}xbf16>, %w: tensor<{N}x{K}xbf16>) -> tensor<{M}x{N}xbf16> {{
  %wt = pk.transpose %w {{perm = [1, 0]}} : tensor<{N}x{K}xbf16> -> tensor<{K}x{N}xbf16>
  %y = pk.matmul %x, %wt : (tensor<{M}x{K}xbf16>, tensor<{K}x{N}xbf16>) -> tensor<{M}x{N}xbf16>
  func.return %y : tensor<{M}x{N}xbf16>
}}"""
    return f"""
func.func @main(%x: tensor<{M}x{K}xbf16>, %w: tensor<{K}x{N}xbf16>) -> tensor<{M}x{N}xbf16> {{
  %y = pk.matmul %x, %w : (tensor<{M}x{K}xbf16>, tensor<{K}x{N}xbf16>) -> tensor<{M}x{N}xbf16>
  func.return %y : tensor<{M}x{N}xbf16>
}}"""


def _schedule_matmul_present() -> bool:
    return importlib.util.find_spec("pkc.passes.schedule_matmul") is not None


@pytest.mark.skipif(not _schedule_matmul_present(),
                    reason="the schedule-matmul pass (pkc/passes/schedule_matmul.py) is not there yet")
@pytest.mark.parametrize("shape,transposed,pipeline", [
    ((200, 136, 72), True, "schedule-matmul"),
    ((130, 128, 72), False, "schedule-matmul"),
    ((96, 64, 64), True, "schedule-matmul{variant=128x128_s6_cl2}"),
])
def test_check_transform_covers_schedule_matmul(shape, transposed, pipeline):
    """interp(graph-level matmul) == interp(scheduled kernel) on every rank, W = 1..8, the
    scheduled side in a random interleaving (check_equivalent runs it with seed + 1)."""
    from pkc.testing import check_transform

    def make(w):
        return parse_module(_matmul_module(*shape, transposed))

    def kernels(m):
        return [op for op in m.walk() if isinstance(op, KernelOp) and op.schedule() is not None]

    after = make(1)
    from pkc.passes.registry import run_pipeline
    run_pipeline(pipeline, after)
    assert len(kernels(after)) == 1              # the pass did schedule it: a real check
    check_transform(make, pipeline)
