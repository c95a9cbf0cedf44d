"""buffer-elision: on every kernel overlap produced, the staging buffers and the copies
through them go, outputs become symmetric, and the program still computes the same
(interpreter, W in {1, 2, 3, 4, 8}); anything else is left alone with a remark."""

from __future__ import annotations

import pytest
from hypothesis import given

from pkc.dialects import kernel as k
from pkc.ir import parse_module
from pkc.passes.buffer_elision import BufferElision
from pkc.passes.remarks import plan_of, remarks_of
from pkc.passes.sm_partition import SmPartition
from pkc.testing import check_transform
from tests.unit.kernels import all_reduce_ir
from tests.unit.test_overlap import (
    CTX,
    WORLDS,
    ag_ir,
    examples,
    case,
    kernels,
    make,
    overlap_pass,
    rs_ir,
    tolerance,
)


def staging(kernel: k.KernelOp) -> list[k.AllocOp]:
    return [op for op in kernel.block.ops
            if isinstance(op, k.AllocOp) and "staging" in op.attributes]


def check_elided(kernel: k.KernelOp) -> None:
    assert kernel.attributes["pk.fusion"].data["stage"].data == "elided"
    assert not staging(kernel)
    n_in = len(kernel.inputs)
    assert all(a.type.symmetric for a in kernel.block.args[n_in:])  # outputs
    assert remarks_of(kernel)[-1].startswith("buffer-elision: removed staging")


def fused_and_elided(c: dict):
    def run(module):
        overlap_pass(c).apply(CTX, module)
        (kernel,) = kernels(module)
        assert staging(kernel)
        BufferElision().apply(CTX, module)
        module.verify()
        (kernel,) = kernels(module)
        check_elided(kernel)
    return run


@pytest.mark.parametrize("W", WORLDS)
@pytest.mark.parametrize("pattern", ["rs", "ar", "ag", "moe"])
def test_overlap_then_elision_preserves_meaning(pattern, W):
    @examples(W)
    @given(case(pattern))
    def check(c):
        check_transform(lambda w: make(c, w), fused_and_elided(c), world_sizes=(W,),
                        tolerance=tolerance(c, W))

    check()


def _elided(c: dict, W: int) -> k.KernelOp:
    module = make(c, W)
    overlap_pass(c).apply(CTX, module)
    BufferElision().apply(CTX, module)
    module.verify()
    (kernel,) = kernels(module)
    return kernel


def _ops(kernel: k.KernelOp, kind: type) -> list:
    return [op for op in kernel.walk() if isinstance(op, kind)]


@pytest.mark.parametrize("style", ["intra", "inter"])
def test_reduce_scatter_puts_add_into_the_owner(style):
    base = dict(pattern="rs", overlap=style, tile=16, tile_k=16, M=64, N=32, K=32, t="bf16")
    # bf16 result: f32 accumulator, one conversion kept (and said so)
    kernel = _elided({**base, "ot": "bf16"}, 4)
    assert all(p.add is not None for p in _ops(kernel, k.PutOp))
    accum = [op for op in kernel.block.ops if isinstance(op, k.AllocOp) and op.zero is not None]
    assert [str(op.result.type) for op in accum] == ["!pk.buffer<16x32xf32, symmetric>"]
    assert "f32 -> bf16 conversion stays" in remarks_of(kernel)[-1]
    # f32 result: the adds land in the (zeroed in-kernel) symmetric output itself
    kernel = _elided({**base, "ot": "f32"}, 4)
    out = kernel.block.args[-1]
    assert all(p.add is not None and p.buffer == out for p in _ops(kernel, k.PutOp))
    assert not [op for op in kernel.block.ops if isinstance(op, k.AllocOp) and op.zero is not None]
    assert "zeroed" in remarks_of(kernel)[-1]


def test_all_gather_peers_write_the_gemm_operand():
    c = dict(pattern="ag", overlap="inter", tile=16, tile_k=16, M=48, K=32, Ns=[32, 16],
             gathered=True, t="f16", ot="f16")
    kernel = _elided(c, 4)
    gathered = kernel.block.args[-1]  # the kernel's gathered output is the GEMM operand
    assert all(p.buffer == gathered for p in _ops(kernel, k.PutOp))
    assert any(ld.buffer == gathered for ld in _ops(kernel, k.LoadOp))
    own_shard = [st for st in _ops(kernel, k.StoreOp) if st.buffer == gathered]
    assert own_shard and all(st.tile.owner.buffer == kernel.block.args[0] for st in own_shard)


def test_moe_results_go_straight_to_the_source_rank():
    c = dict(pattern="moe", form="c", E=2, C=5, K=24, N=16, overlap="intra", tile=16,
             tile_k=16, t="bf16", ot="bf16")
    kernel = _elided(c, 3)
    out = kernel.block.args[-1]
    puts = _ops(kernel, k.PutOp)
    assert {p.buffer for p in puts} == {out, next(op.result for op in kernel.block.ops
                                                  if isinstance(op, k.AllocOp))}
    assert not _ops(kernel, k.StoreOp)  # no copy in, no copy out


def test_sm_partition_in_between_is_kept():
    c = dict(pattern="rs", overlap="inter", tile=16, tile_k=16, M=64, N=32, K=32, t="bf16",
             ot="bf16")

    def run(module):
        overlap_pass(c).apply(CTX, module)
        SmPartition().apply(CTX, module)
        BufferElision().apply(CTX, module)
        (kernel,) = kernels(module)
        check_elided(kernel)
        assert [w.sm_count for w in kernel.workers()] == [124, 8]
        assert plan_of(kernel)["sms_communicate"] == 8
        assert any(r.startswith("sm-partition") for r in remarks_of(kernel))

    check_transform(lambda w: make(c, w), run, world_sizes=(2,), tolerance=tolerance(c, 2))


def test_idempotent():
    module = parse_module(rs_ir(2, 16, 16, 16, "bf16"))
    overlap_pass(dict(overlap="inter", tile=8, tile_k=8)).apply(CTX, module)
    BufferElision().apply(CTX, module)
    once = str(module)
    BufferElision().apply(CTX, module)
    assert str(module) == once


def test_kernel_changed_after_overlap_is_left_alone():
    module = parse_module(ag_ir(2, 8, [16], 16))
    overlap_pass(dict(overlap="inter", tile=8, tile_k=8)).apply(CTX, module)
    (kernel,) = kernels(module)
    next(op for op in kernel.walk() if isinstance(op, k.WaitOp)).detach()  # "a later pass"
    before, remarks = str(module), kernel.attributes["pk.remarks"]
    BufferElision().apply(CTX, module)
    (kernel,) = kernels(module)
    assert staging(kernel)
    assert "left alone: the body is no longer the staged" in remarks_of(kernel)[-1]
    kernel.attributes["pk.remarks"] = remarks
    assert str(module) == before


def test_other_kernels_are_left_alone_with_a_remark():
    module = parse_module(all_reduce_ir(4))
    before = str(module)
    BufferElision().apply(CTX, module)
    BufferElision().apply(CTX, module)
    (kernel,) = kernels(module)
    (remark,) = remarks_of(kernel)
    assert remark.startswith("buffer-elision: left alone") and "no pk.fusion" in remark
    kernel.attributes.pop("pk.remarks")
    assert str(module) == before


def test_cse_in_between_is_harmless():
    from xdsl.transforms.common_subexpression_elimination import CommonSubexpressionElimination

    c = dict(pattern="ag", overlap="intra", tile=16, tile_k=16, M=24, K=20, Ns=[24, 16],
             gathered=False, t="bf16", ot="bf16")

    def run(module):
        overlap_pass(c).apply(CTX, module)
        CommonSubexpressionElimination().apply(CTX, module)
        BufferElision().apply(CTX, module)
        module.verify()
        check_elided(kernels(module)[0])

    check_transform(lambda w: make(c, w), run, world_sizes=(3,))
