"""The scheduled collectives for sm_100a (B200 / NVL72 cost targets): every kind that
schedule-collectives builds (LL all-reduce / all-gather / reduce-scatter, one-shot, two-shot
with one and two CTA groups into a fresh output, direct and pull all-gather, direct
reduce-scatter, all-to-all) lowered for ``sm_100a`` and run by the emulator for W ranks,
equal (bitwise: every kind sums in rank order in f32 and rounds once, as the interpreter's
graph-level collective) to the interpreter on the same inputs; W in {1, 2, 4, 8} (W = 1:
lower-collectives keeps the kernel, ``keep-single-rank``) and the five cheapest kinds at
W = 72 (one vector per chunk: the kernels unroll their loops over the W peers, so a W = 72
emulation costs 1-3 s of CPU; ar2 with 1 and 2 CTA groups, rs, a2a and agp cost 9-16 s
each and were run once by hand, all bitwise equal: docs/sm100.md). ptxas
-arch=sm_100a assembles each kind at W = 8 with no spills, and its SASS passes
``pkc.codegen.sass.check_collective`` (where cuobjdump is found).

No Blackwell GPU ran any of this."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch

from pkc.codegen import compile_kernel
from pkc.codegen.emit import kernels_of
from pkc.codegen.errors import CodegenError
from pkc.emu import emulate
from pkc.interp import interpret
from pkc.ir import parse_module, print_module
from pkc.passes.registry import run_pipeline
from pkc.passes.remarks import plan_of, remarks_of

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from collectives_ir import module_text  # noqa: E402

# forced kind -> (collective, lower-collectives algorithm, CTA groups)
KINDS = {"ll": ("all_reduce", "one_shot", 0), "ar1": ("all_reduce", "one_shot", 0),
         "ar2": ("all_reduce", "two_shot", 1), "ar2g": ("all_reduce", "two_shot", 2),
         "llag": ("all_gather", "direct", 0), "ag": ("all_gather", "direct", 0),
         "llrs": ("reduce_scatter", "direct", 0), "rs": ("reduce_scatter", "direct", 0)}


def _kind(case: str) -> str:
    return "ar2" if case == "ar2g" else case


def _target(W: int) -> str:
    return "b200" if W <= 8 else "nvl72"


def _graph_case(kind: str, W: int, vecs: int):
    """(graph-level module text, the scheduled kernel) of ``kind`` at W ranks, ``vecs``
    16-byte vectors per rank's chunk (bf16)."""
    coll, algo, groups = KINDS[kind]
    tgt = _target(W)
    text, _, _ = module_text(coll, W, 16 * vecs * W, "bf16")
    m = parse_module(text, "t.mlir")
    run_pipeline(f"lower-collectives{{{coll}={algo} target={tgt} keep-single-rank=true}},"
                 f"schedule-collectives{{target={tgt} kind={_kind(kind)} groups={groups}}}", m)
    (kop,) = kernels_of(m)
    return text, kop


def _a2a(W: int, rows: int, cols: int):
    t = f"tensor<{rows}x{cols}xbf16>"
    text = (f"func.func @f(%x: {t}) -> {t} {{\n  %y = pk.all_to_all %x {{world = {W} : i64, "
            f"split_dim = 0 : i64, concat_dim = 0 : i64}} : {t} -> {t}\n  func.return %y : {t}\n}}\n")
    m = parse_module(text, "a2a.mlir")
    run_pipeline(f"lower-collectives{{target={_target(W)} keep-single-rank=true}},"
                 f"schedule-collectives{{target={_target(W)}}}", m)
    (kop,) = kernels_of(m)
    return text, kop


def _agp(W: int, n: int):
    """The pull all-gather: an all-gather whose input a producer kernel left in symmetric
    memory (the lowered kernel's input made symmetric, as after a fused GEMM +
    reduce-scatter), then scheduled."""
    tin, tout = f"tensor<{n}xbf16>", f"tensor<{W * n}xbf16>"
    text = (f"func.func @f(%x: {tin}) -> {tout} {{\n  %y = pk.all_gather %x {{world = {W} : i64, "
            f"dim = 0 : i64}} : {tin} -> {tout}\n  func.return %y : {tout}\n}}\n")
    m = parse_module(text, "ag.mlir")
    run_pipeline(f"lower-collectives{{all_gather=direct target={_target(W)} keep-single-rank=true}}", m)
    buf = f"!pk.buffer<1x1x{n}xbf16>"
    low = print_module(m).replace(buf, f"!pk.buffer<1x1x{n}xbf16, symmetric>")
    producer = (f'%made = pk.kernel "produce"(%view) {{world = {W} : i64}} : (tensor<1x1x{n}xbf16>) -> '
                f"tensor<1x1x{n}xbf16> {{\n  ^bb0(%pi: !pk.buffer<1x1x{n}xbf16>, %po: "
                f"!pk.buffer<1x1x{n}xbf16, symmetric>):\n    pk.worker \"compute\" {{\n      pk.yield\n"
                f"    }}\n    pk.yield\n  }}\n")
    low = re.sub(r'(%lowered = pk.kernel "all_gather_direct")\(%view\)',
                 lambda mt: producer + mt.group(1) + "(%made)", low)
    m = parse_module(low, "ag2.mlir")
    run_pipeline(f"schedule-collectives{{target={_target(W)}}}", m)
    kop = [k for k in kernels_of(m) if k.kernel_name.data.startswith("all_gather")][0]
    return text, kop


def _case(kind: str, W: int, vecs: int):
    if kind == "a2a":
        return _a2a(W, W * vecs, 8)
    if kind == "agp":
        return _agp(W, 8 * vecs)
    return _graph_case(kind, W, vecs)


def _run_and_compare(kind: str, W: int, vecs: int):
    text, kop = _case(kind, W, vecs)
    assert plan_of(kop)["comm_kind"] == _kind(kind), remarks_of(kop)
    if kind == "ar2g":
        assert plan_of(kop)["groups"] == 2
    ck = compile_kernel(kop, "sm_100a")
    assert ck.meta.comm is not None and ck.meta.target == "sm_100a"
    gen = torch.Generator().manual_seed(W)
    shape = tuple(kop.inputs[0].type.get_shape())
    x = [[torch.randn(shape, generator=gen).to(torch.bfloat16)] for _ in range(W)]
    out = emulate(ck, x, kop=kop)
    ref = interpret(parse_module(text, "ref.mlir"), [[t.reshape(ref_shape(text))] for t, in x],
                    W, func="f")
    for r in range(W):
        got, want = out[r][0].reshape(-1), ref[r][0].reshape(-1)
        assert torch.equal(got, want), (kind, W, r, (got.float() - want.float()).abs().max())


def ref_shape(text: str) -> tuple[int, ...]:
    """The graph-level input's shape (the kernel's is its 3-d view)."""
    dims = re.search(r"%x: tensor<([0-9x]+)xbf16>", text).group(1)
    return tuple(int(d) for d in dims.split("x"))


ALL_KINDS = sorted(KINDS) + ["a2a", "agp"]


@pytest.mark.parametrize("W", [1, 2, 4, 8])
@pytest.mark.parametrize("kind", ALL_KINDS)
def test_sm100_collective_matches_the_interpreter(kind, W):
    _run_and_compare(kind, W, 3)


@pytest.mark.parametrize("kind", ["ll", "llag", "ar1", "ag", "llrs"])
def test_sm100_collective_at_w72(kind):
    """NVL72's world: one vector per chunk (the cheapest launch of the kind)."""
    _run_and_compare(kind, 72, 1)


def test_grid_scheduled_for_b200_does_not_lower_for_sm_90a():
    """The pads of a b200 kernel have slots for 2 x 148 CTAs, more than an sm_90a GPU
    keeps resident (132 SMs): refused, naming the pass option that fixes it."""
    _, kop = _graph_case("rs", 8, 4)
    assert plan_of(kop)["max_ctas"] == 2 * 148
    with pytest.raises(CodegenError, match=r"296 CTAs .* sm_90a has 132 SMs"):
        compile_kernel(kop, "sm_90a")


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_sm100_collective_assembles_without_spills(kind):
    from pkc.codegen.ptxas import assemble_one, find_ptxas

    if find_ptxas() is None:
        pytest.skip("ptxas not found")
    _, kop = _case(kind, 8, 64)
    ck = compile_kernel(kop, "sm_100a")
    assert ".target sm_100a" in ck.ptx
    cubin, rep = assemble_one(ck.ptx, "sm_100a")
    assert rep.spill_stores == 0 and rep.spill_loads == 0 and rep.stack_bytes == 0, rep.line()
    from pkc.codegen.sass import check_collective, find_tool, sass
    if not find_tool("cuobjdump"):
        pytest.skip("cuobjdump not found (SASS check)")
    # no MMA, a .sys signal (LL kinds: flags in the data, none), no LDL / STL
    assert check_collective(sass(cubin), signals=not kind.startswith("ll")) == []
