"""schedule-collectives on 1-byte data: an fp8 all_gather / all_to_all only moves bytes, so
it is scheduled (LL all-gather, direct all-gather, all-to-all: 16-byte vectors, no element
read); the emulator runs it bitwise equal to the interpreter on random bytes (NaN patterns
included) and ptxas assembles it. fp8 reductions and chunks that are not whole 16-byte
vectors stay unscheduled with a remark saying why."""

from __future__ import annotations

import pytest
import torch

from pkc.codegen import compile_kernel
from pkc.codegen.emit import kernels_of
from pkc.codegen.ptxas import check, find_ptxas
from pkc.emu import emulate
from pkc.interp import interpret
from pkc.ir import parse_module
from pkc.passes.registry import run_pipeline
from pkc.passes.remarks import plan_of, remarks_of

_TORCH = {"f8E4M3FN": torch.float8_e4m3fn, "f8E5M2": torch.float8_e5m2}


def _text(coll: str, W: int, n_in: int, dt: str) -> str:
    """One 1-d collective of ``n_in`` input elements per rank."""
    n_out = {"all_gather": n_in * W, "reduce_scatter": n_in // W}.get(coll, n_in)
    attrs = {"all_gather": "dim = 0 : i64", "all_to_all": "split_dim = 0 : i64, concat_dim = 0 : i64",
             "reduce_scatter": 'dim = 0 : i64, reduce = "sum"', "all_reduce": 'reduce = "sum"'}[coll]
    tin, tout = f"tensor<{n_in}x{dt}>", f"tensor<{n_out}x{dt}>"
    return (f"func.func @f(%x: {tin}) -> {tout} {{\n"
            f"  %y = pk.{coll} %x {{{attrs}, world = {W} : i64}} : {tin} -> {tout}\n"
            f"  func.return %y : {tout}\n}}\n")


def _scheduled(coll: str, W: int, n_in: int, dt: str):
    text = _text(coll, W, n_in, dt)
    m = parse_module(text, "fp8.mlir")
    run_pipeline("lower-collectives,schedule-collectives", m)
    (kop,) = kernels_of(m)
    return text, kop


@pytest.mark.parametrize("coll,W,n_in,dt,kind", [
    ("all_gather", 2, 2048, "f8E4M3FN", "llag"),
    ("all_gather", 4, 1024, "f8E5M2", "llag"),
    ("all_gather", 4, 256 * 1024, "f8E4M3FN", "ag"),     # 1 MiB gathered: above the LL limit
    ("all_to_all", 4, 2048, "f8E4M3FN", "a2a"),
])
def test_fp8_data_movement_is_scheduled_and_bitwise(coll, W, n_in, dt, kind):
    text, kop = _scheduled(coll, W, n_in, dt)
    plan = plan_of(kop)
    assert plan.get("schedule") == "collective", remarks_of(kop)
    assert plan["comm_kind"] == kind
    ck = compile_kernel(kop, "sm_90a")
    gen = torch.Generator().manual_seed(W)
    x = [[torch.randint(0, 256, (n_in,), generator=gen, dtype=torch.uint8).view(_TORCH[dt])]
         for _ in range(W)]
    out = emulate(ck, x, kop=kop)
    ref = interpret(parse_module(text, "ref.mlir"), x, W, func="f")
    for r in range(W):
        got, want = out[r][0].reshape(-1), ref[r][0].reshape(-1)
        assert got.dtype == want.dtype == _TORCH[dt]
        assert torch.equal(got.view(torch.uint8), want.view(torch.uint8)), (kind, r)


@pytest.mark.parametrize("coll", ["all_reduce", "reduce_scatter"])
def test_fp8_reductions_stay_unscheduled_with_a_remark(coll):
    _, kop = _scheduled(coll, 2, 4096, "f8E4M3FN")
    assert kop.schedule() is None
    assert any(f"{coll} of f8E4M3FN: reductions of 1-byte element types are not scheduled"
               in r for r in remarks_of(kop)), remarks_of(kop)


def test_fp8_gather_of_partial_vectors_stays_unscheduled():
    _, kop = _scheduled("all_gather", 2, 2001, "f8E4M3FN")
    assert kop.schedule() is None
    assert any("chunks are not whole 16-byte vectors" in r for r in remarks_of(kop))


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
def test_fp8_kinds_assemble_without_spills():
    for coll, W, n_in in [("all_gather", 2, 2048), ("all_gather", 4, 256 * 1024),
                          ("all_to_all", 4, 2048)]:
        _, kop = _scheduled(coll, W, n_in, "f8E4M3FN")
        (rep,) = check(compile_kernel(kop, "sm_90a").ptx, "sm_90a").values()
        assert rep.spill_stores == 0 and rep.spill_loads == 0, rep.line()
