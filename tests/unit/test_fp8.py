"""fp8 through capture, graph IR and the interpreter: ``torch._scaled_mm`` after an
all-gather and before a reduce-scatter (tensor-wise and row-wise scales), uint8 views of
fp8 data (torch's fp8 all-gather idiom), the interpreter bitwise equal to torch's CPU
``_scaled_mm``, and the errors for the forms pkc does not compile."""

from __future__ import annotations

import functools
import warnings

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

from pkc.api import compile as pkc_compile
from pkc.frontend import PkcFrontendError, fake_process_group, run_eager
from pkc.interp import interpret
from pkc.ir import parse_module

pytestmark = [pytest.mark.filterwarnings("ignore::FutureWarning")]

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


def _fp8_all_gather(t: torch.Tensor, dim: int, world: int) -> torch.Tensor:
    """DTensor + float8's all-gather: bytes gathered on dim 0, re-laid along ``dim`` as uint8."""
    ag = funcol.all_gather_tensor(t, 0, dist.group.WORLD)
    if dim == 0:
        return ag.view(t.dtype)
    chunks = [c.view(torch.uint8) for c in ag.chunk(world)]
    return torch.cat(chunks, dim=dim).view(t.dtype)


def ag_scaled(dim: int, row_wise: bool, world: int):
    def fn(a, b, sa, sb):
        g = _fp8_all_gather(a, dim, world)
        if row_wise and dim == 0:  # A's row-wise scale is gathered with A
            sa = funcol.all_gather_tensor(sa, 0, dist.group.WORLD)
        return torch._scaled_mm(g, b, sa, sb, out_dtype=torch.bfloat16)
    return fn


def scaled_rs(a, b, sa, sb):
    c = torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)
    return funcol.reduce_scatter_tensor(c, "sum", 0, dist.group.WORLD)


def scaled_bias(a, b, sa, sb, bias):
    return torch._scaled_mm(a, b, sa, sb, bias=bias, out_dtype=torch.float32, use_fast_accum=True)


def _inputs(pattern: str, world: int, seed: int = 0) -> list[list[torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)

    def r(*shape):
        return torch.randn(*shape, generator=gen) * 2

    out = []
    for _ in range(world):
        if pattern.startswith("ag"):  # shard [5, 48] (dim 0) or [20, 16] (dim 1); K = 48
            dim, row_wise = int(pattern[2]), pattern.endswith("row")
            a = r(5, 48) if dim == 0 else r(20, 48 // world)
            M = 5 * world if dim == 0 else 20
            sa = torch.rand(5 if dim == 0 else M, 1, generator=gen) + 0.5
            if not row_wise:
                sa = torch.tensor(0.75)
        else:
            a, M = r(4 * world, 48), 4 * world
            row_wise = pattern.endswith("row")
            sa = torch.rand(M, 1, generator=gen) + 0.5 if row_wise else torch.tensor(0.75)
        b = r(24, 48).to(E4M3).t()  # column-major B, as cuBLASLt wants it
        sb = torch.rand(1, 24, generator=gen) + 0.5 if row_wise else torch.tensor(1.25)
        args = [a.to(E4M3), b, sa, sb]
        if pattern == "bias":
            args.append(r(24))
        out.append(args)
    return out


PATTERNS = {
    "ag0-row": lambda W: ag_scaled(0, True, W),
    "ag0-tensor": lambda W: ag_scaled(0, False, W),
    "ag1-row": lambda W: ag_scaled(1, True, W),  # gather along K: uint8 views, cat on dim 1
    "rs-row": lambda W: scaled_rs,
    "rs-tensor": lambda W: scaled_rs,
    "bias": lambda W: scaled_bias,
}


@functools.lru_cache(maxsize=None)
def _compiled(pattern: str, world: int):
    with fake_process_group(world), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pkc_compile(PATTERNS[pattern](world), _inputs(pattern, world)[0], pipeline=None)


@pytest.mark.parametrize("pattern,world", [("ag0-row", 2)] + [(p, 3) for p in sorted(PATTERNS)])
def test_capture_matches_eager(pattern: str, world: int) -> None:
    prog = _compiled(pattern, world)
    names = [op.name for op in prog.module.walk()]
    assert "pk.scaled_matmul" in names and "pk.opaque" not in names, prog.ir()
    if pattern == "ag0-row":  # A and its row-wise scale each gathered
        assert names.count("pk.all_gather") == 2, prog.ir()
    inputs = _inputs(pattern, world)
    expected = run_eager(lambda rank: PATTERNS[pattern](world), inputs, world_size=world)
    got = prog.run_simulated(inputs)
    for rank in range(world):
        for g, e in zip(got[rank], expected[rank]):
            assert g.dtype == e.dtype and g.shape == e.shape
            if pattern.startswith("rs"):  # eager sums the bf16 products in bf16, pk in f32
                torch.testing.assert_close(g, e, atol=0.5, rtol=2e-2)
            else:
                assert torch.equal(g, e), f"{pattern} W={world} rank {rank}"


SCALED_IR = """
func.func @main(%a: tensor<{M}x{K}x{ta}>, %b: tensor<{K}x{N}x{tb}>, %sa: tensor<{sa}xf32>,
                %sb: tensor<{sb}xf32>{bias_arg}) -> tensor<{M}x{N}x{out}> {{
  %y = pk.scaled_matmul %a, %b scales(%sa, %sb){bias} : (tensor<{M}x{K}x{ta}>, tensor<{K}x{N}x{tb}>, tensor<{sa}xf32>, tensor<{sb}xf32>) -> tensor<{M}x{N}x{out}>
  func.return %y : tensor<{M}x{N}x{out}>
}}"""

_MLIR = {E4M3: "f8E4M3FN", E5M2: "f8E5M2", torch.bfloat16: "bf16", torch.float32: "f32",
         torch.float16: "f16"}


@pytest.mark.parametrize("ta,tb,row_wise,out,bias", [
    (E4M3, E4M3, False, torch.bfloat16, False),
    (E4M3, E4M3, True, torch.bfloat16, False),
    (E5M2, E4M3, True, torch.float32, False),
    (E4M3, E5M2, False, torch.float16, False),
    (E4M3, E4M3, True, torch.float32, True),
])
def test_interpreter_equals_torch_scaled_mm(ta, tb, row_wise, out, bias) -> None:
    """The interpreter computes what torch's CPU ``_scaled_mm`` computes, bit for bit."""
    M, K, N = 19, 80, 33
    gen = torch.Generator().manual_seed(1)
    a = (torch.randn(M, K, generator=gen) * 3).to(ta)
    b = (torch.randn(N, K, generator=gen) * 3).to(tb).t()
    sa = torch.rand(M, 1, generator=gen) + 0.1 if row_wise else torch.tensor([0.37])
    sb = torch.rand(1, N, generator=gen) + 0.1 if row_wise else torch.tensor([1.3])
    bias_t = torch.randn(N, generator=gen) if bias else None
    text = SCALED_IR.format(
        M=M, K=K, N=N, ta=_MLIR[ta], tb=_MLIR[tb], out=_MLIR[out],
        sa=f"{M}x1" if row_wise else "1", sb=f"1x{N}" if row_wise else "1",
        bias_arg=f", %bias: tensor<{N}xf32>" if bias else "",
        bias=f" bias %bias : tensor<{N}xf32>" if bias else "")
    args = [a, b, sa, sb] + ([bias_t] if bias else [])
    got = interpret(parse_module(text), [args], 1)[0][0]
    want = torch._scaled_mm(a, b, sa if row_wise else sa.reshape(()),
                            sb if row_wise else sb.reshape(()), bias=bias_t, out_dtype=out)
    assert got.dtype == out and torch.equal(got, want)


def _capture_error(fn, args, world: int = 2) -> PkcFrontendError:
    with fake_process_group(world), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(PkcFrontendError) as err:
            pkc_compile(fn, args, pipeline=None)
    return err.value


def test_fp8_result_is_an_error_naming_op_and_shapes() -> None:
    a, b = torch.randn(8, 32).to(E4M3), torch.randn(16, 32).to(E4M3).t()
    s = torch.tensor(1.0)
    err = _capture_error(lambda a, b, sa, sb: torch._scaled_mm(a, b, sa, sb), [a, b, s, s])
    assert "aten._scaled_mm of [8, 32] x [32, 16]" in str(err)
    assert "out_dtype torch.float8_e4m3fn is not supported" in str(err)


def test_arithmetic_on_uint8_view_of_fp8_is_an_error() -> None:
    a = torch.randn(8, 32).to(E4M3)
    err = _capture_error(lambda a: a.view(torch.uint8) + 1, [a])
    assert "computes on the uint8 view of fp8 data" in str(err)


def test_torch_program_runs_the_scaled_matmul() -> None:
    """The torch backend's translation of pk IR (pkc/runtime/inductor.py) computes a
    pk.scaled_matmul as the interpreter does (off the GPU: the same f32 form)."""
    from pkc.runtime.inductor import torch_program
    from pkc.runtime.kernel_call import RunKind

    M, K, N = 12, 48, 20
    text = SCALED_IR.format(M=M, K=K, N=N, ta=_MLIR[E4M3], tb=_MLIR[E5M2], out="bf16",
                            sa=f"{M}x1", sb=f"1x{N}", bias_arg=f", %bias: tensor<{N}xf32>",
                            bias=f" bias %bias : tensor<{N}xf32>")
    module = parse_module(text)
    prog = torch_program(module, world=1, kind=RunKind.SIMULATED, arg_map=list(range(5)),
                         n_inputs=5)
    gen = torch.Generator().manual_seed(2)
    args = [torch.randn(M, K, generator=gen).to(E4M3), torch.randn(K, N, generator=gen).to(E5M2),
            torch.rand(M, 1, generator=gen), torch.rand(1, N, generator=gen),
            torch.randn(N, generator=gen)]
    got = prog.gm(*args)
    got = got[0] if isinstance(got, (list, tuple)) else got
    assert torch.equal(got, interpret(module, [args], 1)[0][0])
