"""The schedule-level interpreter on communication: scheduled collectives (every kind
schedule-collectives writes, W = 1..8) and fused GEMM + reduce-scatter kernels (W = 1..4)
compute what the kernel-level IR computes (check_transform: bitwise for the collectives,
whose sums are in rank order; a stated tolerance for the fused kernel, whose reduce-adds
land in any order); three launches in a row reuse the persistent pads and staging halves
by epoch; and broken protocols (a wait for the wrong count, a missing signal or fence, a
read of a peer's buffer before its signal, an add before the owner's store, a missing
epoch publish) are errors naming the op, rank, CTA and warpgroup."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from xdsl.dialects import arith
from xdsl.dialects.builtin import IntegerAttr, i32

from pkc.codegen.emit import kernels_of
from pkc.dialects import schedule_comm as c
from pkc.dialects import schedule_fused as f
from pkc.interp import InterpError, interpret, random_inputs
from pkc.interp.equivalence import compare_outputs
from pkc.interp.schedule import run_schedule, run_schedule_launches
from pkc.ir import parse_module
from pkc.passes.registry import run_pipeline
from pkc.passes.remarks import plan_of
from pkc.target import comm_tuning as t
from pkc.testing import check_transform

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from collectives_ir import module_text  # noqa: E402

ESIZE = {"bf16": 2, "f16": 2, "f32": 4}
PER = 21        # vectors per rank's chunk: odd, so slices and LL groups do not line up

# kind -> (collective, algorithm, tuning thresholds forced to reach it at a small size)
KINDS = {
    "ll": ("all_reduce", "one_shot", {}),
    "llag": ("all_gather", "direct", {}),
    "llrs": ("reduce_scatter", "direct", {}),
    "ar1": ("all_reduce", "one_shot", {"LL_MAX_BYTES": 0}),
    "ar2": ("all_reduce", "two_shot", {}),
    "ar2-pull-groups": ("all_reduce", "two_shot", {"AR2_PULL_MIN_BYTES": 0,
                                                   "AR2_GROUPS_MIN_BYTES": 0}),
    "ag": ("all_gather", "direct", {"LL_GATHER_MAX_BYTES": 0}),
    "rs": ("reduce_scatter", "direct", {"LL_GATHER_MAX_BYTES": 0}),
}


@pytest.fixture
def force(monkeypatch):
    def apply(kind):
        for name, v in KINDS[kind][2].items():
            monkeypatch.setattr(t, name, v)
    return apply


def lowered(kind: str, W: int, dt: str = "bf16"):
    """The graph of one collective after lower-collectives (a kernel even at W = 1)."""
    coll, algo, _ = KINDS[kind]
    full = (16 // ESIZE[dt]) * PER * W
    text, _, _ = module_text(coll, W, full * ESIZE[dt], dt)
    m = parse_module(text, "t.mlir")
    run_pipeline(f"lower-collectives{{{coll}={algo} keep-single-rank=true}}", m)
    return m


def scheduled(kind: str, W: int, dt: str = "bf16"):
    m = lowered(kind, W, dt)
    run_pipeline("schedule-collectives", m)
    (kop,) = kernels_of(m)
    want = kind.split("-")[0]
    assert plan_of(kop).get("comm_kind") == want, plan_of(kop)
    return m, kop


# ---- check_transform: interp(before) == interp(after) ------------------------------------


@pytest.mark.parametrize("kind", list(KINDS))
def test_schedule_collectives_bitwise_w1_to_8(kind, force):
    force(kind)
    scheduled(kind, 8)      # the kind is the one named (the tuning table's thresholds forced)
    check_transform(lambda W: lowered(kind, W), "schedule-collectives", world_sizes=range(1, 9),
                    seeds=(1,), exact=True, func="f")


def all_to_all(W: int, cols: int = 40):
    """An all-to-all of 3 rows per rank pair, lowered (a kernel even at W = 1)."""
    t_ = f"tensor<{3 * W}x{cols}xbf16>"
    m = parse_module(f"func.func @f(%x: {t_}) -> {t_} {{\n  %y = pk.all_to_all %x {{world = {W} : "
                     f"i64, split_dim = 0 : i64, concat_dim = 0 : i64}} : {t_} -> {t_}\n"
                     f"  func.return %y : {t_}\n}}\n", "a2a.mlir")
    run_pipeline("lower-collectives{keep-single-rank=true}", m)
    return m


def test_schedule_collectives_all_to_all_bitwise_w1_to_8():
    m = all_to_all(4)
    run_pipeline("schedule-collectives", m)
    assert plan_of(kernels_of(m)[0])["comm_kind"] == "a2a"
    check_transform(all_to_all, "schedule-collectives", world_sizes=range(1, 9), seeds=(1,),
                    exact=True, func="f")


@pytest.mark.parametrize("dt", ["f32", "f16"])
def test_schedule_collectives_other_dtypes(dt, force):
    force("ar1")
    check_transform(lambda W: lowered("ar1", W, dt), "schedule-collectives", world_sizes=(4,),
                    seeds=(2,), exact=True, func="f")
    check_transform(lambda W: lowered("llrs", W, dt), "schedule-collectives", world_sizes=(3,),
                    seeds=(2,), exact=True, func="f")


# ---- launches in a row (epochs), grids of several CTAs ------------------------------------


def _as_kernel_operands(kop, graph_inputs):
    """Per-rank graph inputs as the kernel's operands ``[i][rank]`` (its views)."""
    return [[x[i].reshape(kop.inputs[i].type.get_shape()) for x in graph_inputs]
            for i in range(len(kop.inputs))]


def _launch_inputs(m, kop, W, launches, func="f"):
    return [_as_kernel_operands(kop, random_inputs(m, W, 10 + k, func)) for k in range(launches)]


def check_launches(before, kop, W, func="f", launches=3, ctas=None, tolerance=None):
    """``launches`` launches of the scheduled kernel ``kop`` in a row, fresh inputs each:
    every launch's output is the kernel-level module's result on its inputs."""
    graph_in = [random_inputs(before, W, 10 + k, func) for k in range(launches)]
    outs = run_schedule_launches(kop, [_as_kernel_operands(kop, g) for g in graph_in], W,
                                 seed=7, ctas=ctas)
    for k in range(launches):
        want = interpret(before, graph_in[k], W, func)
        got = [[outs[k][i][r].reshape(w.shape) for i, w in enumerate(want[r])]
               for r in range(W)]
        compare_outputs(want, got, exact=tolerance is None, tolerance=tolerance,
                        context=f"@{kop.kernel_name.data} launch {k + 1}")


@pytest.mark.parametrize("kind", ["ll", "llag", "llrs", "ar1", "ar2", "ar2-pull-groups", "ag",
                                  "rs"])
def test_three_launches_reuse_pads_and_halves(kind, force):
    """Launch k + 1 of a rank may start while a peer is still in launch k; the epoch word,
    pads and (by parity) staging halves persist. Every launch's output equals the
    kernel-level result of its inputs; a grid of 2 CTAs per rank."""
    force(kind)
    _, kop = scheduled(kind, 3)
    check_launches(lowered(kind, 3), kop, 3, ctas=2)


def test_three_launches_all_to_all_into_symmetric_output():
    """The result stays in the symmetric output: a peer's next launch may write it only
    after this rank's host read it (the arrive phase orders that)."""
    m = all_to_all(3)
    run_pipeline("schedule-collectives", m)
    check_launches(all_to_all(3), kernels_of(m)[0], 3, ctas=2)


def test_epoch_word_counts_launches_and_ctas(force):
    force("ar1")
    m, kop = scheduled("ar1", 2)
    launches = _launch_inputs(m, kop, 2, 2)
    from pkc.interp.schedule import ScheduleRun
    R = ScheduleRun(kop, launches, 2, 0, 3)
    R.run()
    assert R.ctas == 3
    ctl = next(op.result for op in kop.block.ops if op.name == "pk.alloc"
               and op.result.type.get_shape() == (2,))
    for r in range(2):
        assert R.data[ctl][r].tolist() == [2, 0]        # epoch 2 stored, count reset


# ---- broken protocols ------------------------------------------------------------------


def _ops(kop, cls):
    return [op for op in kop.walk() if isinstance(op, cls)]


def _run(m, W, **kw):
    return interpret(m, random_inputs(m, W, 0, "f"), W, "f", **kw)


def test_wait_for_the_wrong_count_is_a_deadlock_naming_op_rank_cta(force):
    force("ar1")
    m, kop = scheduled("ar1", 2)
    wait = _ops(kop, c.SignalWaitOp)[0]
    one = arith.ConstantOp(IntegerAttr(1, i32))
    more = arith.AddiOp(wait.epoch, one.result)
    wait.parent_block().insert_op_before(one, wait)
    wait.parent_block().insert_op_before(more, wait)
    wait.operands[2] = more.result
    with pytest.raises(InterpError, match=r"deadlock in kernel @all_reduce_ar1(.|\n)*"
                       r"'pks.signal_wait' on rank 0, CTA 0, warpgroup 0 \(outside any role\): "
                       r"waits for u32 slot \d+ of .* of rank 0 to reach 2 \(it holds 1; "
                       r"ARRIVAL wait on peer \d"):
        _run(m, 2)


def test_missing_signal_is_a_deadlock_naming_the_waiting_rank(force):
    force("rs")
    m, kop = scheduled("rs", 3)
    sig = _ops(kop, c.SignalOp)[1]          # the phase-1 signal to rank 1
    sig.detach()
    sig.erase()
    with pytest.raises(InterpError, match=r"deadlock(.|\n)*'pks.signal_wait' on rank 1, CTA 0, "
                       r"warpgroup 0 \(outside any role\): waits for u32 slot .* to reach 1 "
                       r"\(it holds 0"):
        _run(m, 3)


def test_read_of_a_peers_data_before_its_signal(force):
    force("ar1")
    m, kop = scheduled("ar1", 2)
    wait = _ops(kop, c.SignalWaitOp)[0]
    wait.detach()
    wait.erase()
    with pytest.raises(InterpError, match=r"'pks.vec_load' on rank \d, CTA 0, warpgroup \d "
                       r"\(outside any role\): reads word \d+ .* of .* of rank \d"):
        _run(m, 2)


def test_signal_without_fence_orders_nothing(force):
    force("ag")
    m, kop = scheduled("ag", 2)
    for fence in _ops(kop, c.FenceSysOp)[1:]:       # the fence before the leave signals
        fence.detach()
        fence.erase()
    with pytest.raises(InterpError, match=r"output 0 on rank \d \(launch 1\): .* is read by the "
                       r"host after the kernel, but the store 'pks.vec_store' on rank \d, CTA 0, "
                       r"warpgroup \d .* wrote it, with nothing ordering that before"):
        _run(m, 2)


def test_ll_flags_of_the_wrong_epoch_never_satisfy_the_poll(force):
    m, kop = scheduled("ll", 2)
    st = _ops(kop, c.LlStoreOp)[0]
    two = arith.ConstantOp(IntegerAttr(7, i32))
    st.parent_block().insert_op_before(two, st)
    st.operands[2] = two.result
    with pytest.raises(InterpError, match=r"deadlock(.|\n)*'pks.ll_wait' on rank 0, CTA \d, "
                       r"warpgroup 0 \(outside any role\): waits for the LL line of slot 1 .* "
                       r"to carry epoch 1 in its flags \(they hold \[7, 7, 7, 7\]\)"):
        _run(m, 2)


def test_missing_epoch_publish_breaks_the_second_launch(force):
    force("ar1")
    m, kop = scheduled("ar1", 2)
    pub = _ops(kop, c.EpochPublishOp)[0]
    pub.detach()
    pub.erase()
    launches = _launch_inputs(m, kop, 2, 2)
    # the epoch stays 1: launch 2 stages into the half a peer may still read from launch 1
    with pytest.raises(InterpError, match=r"'pks.vec_store' on rank \d, CTA 0, warpgroup \d "
                       r"\(outside any role\), launch 2: overwrites word \d+ .* after the read "
                       r"'pks.vec_load' on rank \d, CTA 0, warpgroup \d"):
        run_schedule_launches(kop, launches, 2)


def test_fused_kernel_ops_have_rules():
    from pkc.interp.schedule_rules import BLOCKING_RULES, KERNEL_RULES, SIMPLE_RULES

    rules = {**SIMPLE_RULES, **BLOCKING_RULES, **KERNEL_RULES}
    missing = [op.name for op in c.COMM_OPS if op not in rules]
    assert not missing, missing
    for op in (f.PeerTmapOp, f.TmapSelectOp, f.ChunkTileLoopOp, f.TmaStoreOrAddOp,
               f.FenceAsyncGlobalOp, f.SignalAddOp):
        assert op in rules, op.name


def test_single_launch_api_still_returns_outputs(force):
    force("rs")
    m, kop = scheduled("rs", 2)
    (ins,) = _launch_inputs(m, kop, 2, 1)
    out = run_schedule(kop, ins, 2)
    assert len(out) == 1 and len(out[0]) == 2


def test_next_launch_overwriting_an_output_the_host_still_reads():
    """Without the arrive wait, a peer's next all-to-all writes into this rank's symmetric
    output while its host may still read the last result: one launch is fine, two are not."""
    m = all_to_all(3)
    run_pipeline("schedule-collectives", m)
    (kop,) = kernels_of(m)
    for w in _ops(kop, c.SignalWaitOp):
        if c.WaitSite(w.site.data) is c.WaitSite.ARRIVAL:
            w.detach()
            w.erase()
    run_schedule_launches(kop, _launch_inputs(m, kop, 3, 1), 3)
    with pytest.raises(InterpError, match=r"'pks.vec_store' on rank \d, CTA 0, warpgroup \d "
                       r"\(outside any role\), launch 2: overwrites word \d+ .* of rank \d, after "
                       r"the host of rank \d reading the outputs of launch 1"):
        run_schedule_launches(kop, _launch_inputs(m, kop, 3, 2), 3)


def test_read_only_cache_load_of_a_peers_data(force):
    force("ar1")
    m, kop = scheduled("ar1", 2)
    for ld in _ops(kop, c.VecLoadOp):
        if ld.cache.data == c.CacheHint.CG.value:
            ld.attributes["cache"] = type(ld.cache)(c.CacheHint.NC.value)
    with pytest.raises(InterpError, match=r"'pks.vec_load' on rank \d, CTA 0, warpgroup \d "
                       r"\(outside any role\): a read-only \(cache nc\) load of .* which rank \d, "
                       r"CTA 0, warpgroup \d wrote during the run"):
        _run(m, 2)
