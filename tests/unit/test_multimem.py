"""NVLS (multimem) collectives: chosen by schedule-collectives only for targets with NVLS
(b200, nvl72; never h100 / h200, whose machines keep NVLink multicast off), built from
``pks.mc_*`` ops, printed as ``multimem.ld_reduce`` / ``multimem.st`` / ``multimem.red``,
assembled by ptxas for sm_90a and sm_100a (0 spills; SASS ``LDGMC``), interpreted
(check_transform, bitwise) and emulated (a multicast window over the W copies) equal to
the interpreter for W in {1, 2, 4, 8, 72}. Never run on a GPU."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from xdsl.dialects import arith
from xdsl.dialects.builtin import IntegerAttr, bf16, i32
from xdsl.ir import Block
from xdsl.utils.exceptions import VerifyException

from pkc.codegen import compile_kernel
from pkc.codegen.emit import kernels_of
from pkc.dialects import schedule_comm as c
from pkc.dialects.types import LOCAL, SYMMETRIC, BufferType
from pkc.emu import EmuMemoryError, emulate
from pkc.interp import interpret
from pkc.ir import parse_module
from pkc.passes.registry import run_pipeline
from pkc.passes.remarks import plan_of, remarks_of
from pkc.testing import check_transform

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from collectives_ir import module_text  # noqa: E402

KINDS = {"armc": "all_reduce", "agmc": "all_gather"}


def _target(W: int) -> str:
    return "b200" if W <= 8 else "nvl72"


def _lowered(coll: str, W: int, vecs: int, tgt: str):
    text, _, _ = module_text(coll, W, 16 * vecs * W, "bf16")
    m = parse_module(text, "t.mlir")
    run_pipeline(f"lower-collectives{{target={tgt} keep-single-rank=true}}", m)
    return text, m


def _scheduled(kind: str, W: int, vecs: int = 3, tgt: str | None = None, force: bool = True):
    tgt = tgt or _target(W)
    text, m = _lowered(KINDS[kind], W, vecs, tgt)
    run_pipeline(f"schedule-collectives{{target={tgt}{' kind=' + kind if force else ''}}}", m)
    (kop,) = kernels_of(m)
    return text, kop


# ---- the choice ------------------------------------------------------------------------------


@pytest.mark.parametrize("tgt", ["b200", "nvl72"])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_nvls_chosen_above_the_ll_limit_on_nvls_targets(kind, tgt):
    _, kop = _scheduled(kind, 8, vecs=1 << 14, tgt=tgt, force=False)       # 256 KiB per rank
    assert plan_of(kop)["comm_kind"] == kind
    assert any("through NVLS" in r for r in remarks_of(kop))


@pytest.mark.parametrize("tgt", ["h100", "h200"])
@pytest.mark.parametrize("vecs", [4, 1 << 14, 1 << 18])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_hopper_targets_never_choose_nvls(kind, vecs, tgt):
    _, kop = _scheduled(kind, 8, vecs=vecs, tgt=tgt, force=False)
    assert plan_of(kop)["comm_kind"] not in KINDS
    assert not any(isinstance(op, c.McPtrOp) for op in kop.walk())


def test_forcing_nvls_on_hopper_is_refused_with_a_remark():
    _, kop = _scheduled("armc", 4, tgt="h200")
    assert kop.schedule() is None
    assert any("target h200 has no NVLS" in r for r in remarks_of(kop))


@pytest.mark.parametrize("tgt,W", [("b200", 8), ("nvl72", 8), ("nvl72", 72)])
def test_cost_model_predicts_nvls_all_reduce_below_two_shot(tgt, W):
    """One byte each way per port (the switch adds) against the two-shot's 2(W-1)/W: at
    64 MiB the NVLS all-reduce is predicted faster; the all-gather moves the same bytes
    per port as the direct one (within 5%); no prediction for a target without NVLS."""
    from pkc.target.cost_collectives import all_gather_time, all_reduce_time, nvls_time

    n = 64 << 20
    assert nvls_time(tgt, "all_reduce", n, W) < 0.75 * all_reduce_time(tgt, n, W, "two_shot")
    ag, direct = nvls_time(tgt, "all_gather", n, W), all_gather_time(tgt, n, W, "direct")
    assert abs(ag - direct) <= 0.05 * direct
    with pytest.raises(ValueError, match="target h200 has no NVLS"):
        nvls_time("h200", "all_reduce", n, 8)


def test_small_messages_stay_ll_on_nvls_targets():
    _, kop = _scheduled("armc", 8, vecs=4, force=False)
    assert plan_of(kop)["comm_kind"] == "ll"


# ---- the ops ---------------------------------------------------------------------------------


def test_plain_access_of_a_multicast_address_is_refused():
    blk = Block(arg_types=[BufferType([64], bf16, SYMMETRIC), BufferType([64], bf16, LOCAL)])
    zero = arith.ConstantOp(IntegerAttr(0, i32))
    mc = c.McPtrOp(blk.args[0])
    blk.add_ops([zero, mc])
    with pytest.raises(VerifyException, match="multicast address"):
        c.VecLoadOp(mc.result, zero.result, None, c.CacheHint.CG).verify()
    with pytest.raises(VerifyException, match="only a symmetric buffer has a multicast"):
        c.McPtrOp(blk.args[1]).verify()
    own = c.BufferPtrOp(blk.args[0])
    blk.add_op(own)
    with pytest.raises(VerifyException, match=r"takes a multicast address \(pks.mc_ptr\)"):
        c.McStoreOp(own.result, zero.result, None,
                    c.McLoadReduceOp(mc.result, zero.result, None, "bf16").result).verify()


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_interpreter_runs_the_nvls_schedule_bitwise(kind):
    check_transform(lambda W: _lowered(KINDS[kind], W, 5, "b200")[1],
                    f"schedule-collectives{{target=b200 kind={kind}}}",
                    world_sizes=(1, 2, 3, 4, 8), seeds=(1,), exact=True, func="f")


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_three_launches_reuse_the_multicast_buffers(kind):
    """Launch k + 1 of a rank may start while a peer is still in launch k: the copy-in
    buffer, the output and the pads persist (no parity halves: the first barrier of a
    launch orders it after every peer's previous one). Every launch's output equals the
    kernel-level result of its inputs; 2 CTAs per rank, W = 3."""
    from pkc.interp import random_inputs
    from pkc.interp.equivalence import compare_outputs
    from pkc.interp.schedule import run_schedule_launches

    before = _lowered(KINDS[kind], 3, 7, "b200")[1]
    _, kop = _scheduled(kind, 3, vecs=7)
    graph_in = [random_inputs(before, 3, 10 + k, "f") for k in range(3)]
    ops = [[[x[i].reshape(kop.inputs[i].type.get_shape()) for x in g]
            for i in range(len(kop.inputs))] for g in graph_in]
    outs = run_schedule_launches(kop, ops, 3, seed=7, ctas=2)
    for k in range(3):
        want = interpret(before, graph_in[k], 3, "f")
        got = [[outs[k][i][r].reshape(w.shape) for i, w in enumerate(want[r])] for r in range(3)]
        compare_outputs(want, got, exact=True, context=f"{kind} launch {k + 1}")


@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_nvls_other_dtypes_emulated_and_assembled(kind, dt):
    """f32 (``.v4.f32``) and f16 (``.acc::f32.v4.f16x2``) at W = 4: emulator == interpreter
    bitwise; ptxas sm_100a, no spills."""
    from pkc.codegen.ptxas import assemble_one, find_ptxas

    text, _, _ = module_text(KINDS[kind], 4, 16 * 5 * 4, dt)
    m = parse_module(text, "t.mlir")
    run_pipeline(f"lower-collectives{{target=b200}},schedule-collectives{{target=b200 kind={kind}}}", m)
    (kop,) = kernels_of(m)
    ck = compile_kernel(kop, "sm_100a")
    tdt = {"f32": torch.float32, "f16": torch.float16}[dt]
    gen = torch.Generator().manual_seed(3)
    x = [[torch.randn(tuple(kop.inputs[0].type.get_shape()), generator=gen).to(tdt)] for _ in range(4)]
    out = emulate(ck, x, kop=kop)
    ref = interpret(parse_module(text, "ref.mlir"), [[t.reshape(-1)] for t, in x], 4, func="f")
    for r in range(4):
        assert torch.equal(out[r][0].reshape(-1), ref[r][0].reshape(-1)), (kind, dt, r)
    if find_ptxas() is not None:
        _, rep = assemble_one(ck.ptx, "sm_100a")
        assert rep.spill_stores == 0 and rep.spill_loads == 0, rep.line()


# ---- PTX, ptxas, SASS --------------------------------------------------------------------------


def _sm90_kernel(kind: str, W: int):
    """The NVLS kernel built for a 132-SM grid (no sm_90a target chooses NVLS: this only
    checks that the instructions assemble for sm_90a)."""
    from pkc.passes.schedule_collectives import build_collective
    from pkc.target.comm_tuning import CommConfig, CommKind

    _, kop = _scheduled(kind, W, vecs=64)
    new = build_collective(kop.kernel_name.data, CommConfig(CommKind(kind), W, "bf16"),
                           list(kop.inputs), kop.inputs[0].type, kop.outputs[0].type, 132,
                           {"pk.plan": kop.attributes["pk.plan"]})
    return new


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_nvls_kernels_assemble_without_spills(kind, arch):
    from pkc.codegen.ptxas import assemble_one, find_ptxas
    from pkc.codegen.sass import check_collective, find_tool, sass

    if find_ptxas() is None:
        pytest.skip("ptxas not found")
    W = 72 if arch == "sm_100a" else 8
    kop = _scheduled(kind, W, vecs=64)[1] if arch == "sm_100a" else _sm90_kernel(kind, W)
    ptx = compile_kernel(kop, arch).ptx
    assert "multimem.st.relaxed.sys.global.v4.f32" in ptx
    assert "multimem.red.relaxed.sys.global.add.u32" in ptx
    assert ("multimem.ld_reduce.relaxed.sys.global.add.acc::f32.v4.bf16x2" in ptx) == (kind == "armc")
    cubin, rep = assemble_one(ptx, arch)
    assert rep.spill_stores == 0 and rep.spill_loads == 0 and rep.stack_bytes == 0, rep.line()
    if not find_tool("cuobjdump"):
        pytest.skip("cuobjdump not found (SASS check)")
    assert check_collective(sass(cubin), multicast_reduce=kind == "armc") == []


# ---- the emulator ------------------------------------------------------------------------------


@pytest.mark.parametrize("W", [1, 2, 4, 8, 72])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_emulator_runs_nvls_kernels_equal_to_the_interpreter(kind, W):
    text, kop = _scheduled(kind, W, vecs=1 if W == 72 else 3)
    assert plan_of(kop)["comm_kind"] == kind
    ck = compile_kernel(kop, "sm_100a")
    assert ck.meta.comm.multicast
    gen = torch.Generator().manual_seed(W)
    x = [[torch.randn(tuple(kop.inputs[0].type.get_shape()), generator=gen).to(torch.bfloat16)]
         for _ in range(W)]
    out = emulate(ck, x, kop=kop)
    ref = interpret(parse_module(text, "ref.mlir"), [[t.reshape(-1)] for t, in x], W, func="f")
    for r in range(W):
        assert torch.equal(out[r][0].reshape(-1), ref[r][0].reshape(-1)), (kind, W, r)


def test_multimem_on_a_plain_address_is_an_emulator_error(monkeypatch):
    """The launch binds each ``_mc`` parameter to the rank's own copy (a plain address)
    instead of a multicast window: the first multimem instruction is an error naming it."""
    from pkc.emu import ops_multimem

    def plain(gm, comm, named, world):
        for name in comm.multicast:
            for r in range(world):
                named[r][f"{name}_mc"] = named[r][f"{name}_p{r}"]
    monkeypatch.setattr(ops_multimem, "bind_multicast", plain)
    _, kop = _scheduled("agmc", 2)
    ck = compile_kernel(kop, "sm_100a")
    x = [[torch.ones(tuple(kop.inputs[0].type.get_shape()), dtype=torch.bfloat16)] for _ in range(2)]
    with pytest.raises(EmuMemoryError, match="no multicast address"):
        emulate(ck, x, kop=kop)


def test_runtime_refuses_nvls_kernels():
    from pkc.runtime.scheduled_comm import ScheduledCollective

    _, kop = _scheduled("armc", 2)
    ck = compile_kernel(kop, "sm_100a")

    class Peers:
        world = 2
    with pytest.raises(ValueError, match="NVLS .* makes no multicast objects"):
        ScheduledCollective(ck.ptx, ck.meta, Peers(), (1,), (1,), "bf16")
