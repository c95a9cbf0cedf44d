"""fp8 (``pk.scaled_matmul``, torch's ``_scaled_mm``) on sm_100a: schedule-matmul for a b200
target builds the tensor-memory GEMM on 8-bit operands (``pks.mma_async`` e4m3 / e5m2,
``pks.acc_scale`` per epilogue piece), lowered to ``tcgen05.mma.kind::f8f6f4`` with the
scales and bias applied after ``tcgen05.ld``. No Blackwell GPU has run any of it: checked
here with the emulator (its output equals the interpreter's and torch's CPU ``_scaled_mm``
on small odd shapes: e4m3 / e5m2, tensor-wise / row-wise scales, bias, single CTAs, CTA
pairs, the register epilogue, cluster launch control; bitwise where every sum is exact),
``ptxas -arch=sm_100a`` (no spills) and the SASS (``UTCQMMA``), and against the sm_90a
kernel of the same matmul (wgmma: the MMA path differs, the rest is the same ops)."""

from __future__ import annotations

import pytest
import torch

from pkc.codegen import compile_kernel
from pkc.codegen import ptx_sm100 as t5
from pkc.codegen.emit import kernels_of
from pkc.codegen.ptxas import assemble, find_ptxas
from pkc.codegen.sass import check_sm100_gemm, find_tool, sass
from pkc.dialects import schedule as s
from pkc.emu.check import check_module
from pkc.emu.errors import EmuTensorMemoryError
from pkc.ir import make_context, parse_module, verify_module
from pkc.passes import scaled_matmul_tmem as smt
from pkc.passes.schedule_matmul import ScheduleMatmul
from pkc.target.gemm_tuning_sm100 import TmemGemmConfig

TORCH = {"f8E4M3FN": torch.float8_e4m3fn, "f8E5M2": torch.float8_e5m2}
OUT = {"bf16": torch.bfloat16, "f16": torch.float16}


def _text(M, N, K, at="f8E4M3FN", bt="f8E4M3FN", rows=(False, False), bias=None, out="bf16"):
    sa = f"tensor<{M}x1xf32>" if rows[0] else "tensor<1xf32>"
    sb = f"tensor<1x{N}xf32>" if rows[1] else "tensor<1xf32>"
    bias_arg = f", %bias: tensor<{N}x{bias}>" if bias else ""
    bias_use = f" bias %bias : tensor<{N}x{bias}>" if bias else ""
    return (f"func.func @smm(%a: tensor<{M}x{K}x{at}>, %b: tensor<{N}x{K}x{bt}>, %sa: {sa}, "
            f"%sb: {sb}{bias_arg}) -> tensor<{M}x{N}x{out}> {{\n"
            f"  %bt = pk.transpose %b {{perm = [1, 0]}} : tensor<{N}x{K}x{bt}> -> tensor<{K}x{N}x{bt}>\n"
            f"  %y = pk.scaled_matmul %a, %bt scales(%sa, %sb){bias_use} : (tensor<{M}x{K}x{at}>, "
            f"tensor<{K}x{N}x{bt}>, {sa}, {sb}) -> tensor<{M}x{N}x{out}>\n"
            f"  func.return %y : tensor<{M}x{N}x{out}>\n}}\n")


def _module(case, monkeypatch=None, target="b200"):
    M, N, K, at, bt, rows, bias, out, cfg = case
    m = parse_module(_text(M, N, K, at, bt, rows, bias, out), "t.mlir")
    if cfg is not None:
        monkeypatch.setattr(smt, "choose_tmem_config",
                            lambda *a: cfg.with_(dtype=out, a_type=_st(at), b_type=_st(bt)))
    ScheduleMatmul(target=target).apply(make_context(), m)
    verify_module(m)
    return m


def _st(t: str) -> str:
    return {"f8E4M3FN": "e4m3", "f8E5M2": "e5m2"}[t]


def _inputs(case, seed=0, exact=False):
    """A [M, K], B [N, K] (fp8), the scales and the bias. ``exact``: small integers and
    powers of two, so that every product, sum, scale and bias is exact (then any order of
    summation gives the same bits)."""
    M, N, K, at, bt, rows, bias, out, _ = case
    g = torch.Generator().manual_seed(seed)
    if exact:
        a = torch.randint(-3, 4, (M, K), generator=g).float()
        b = torch.randint(-3, 4, (N, K), generator=g).float()
        sa = 2.0 ** torch.randint(-2, 2, (M, 1) if rows[0] else (1,), generator=g).float()
        sb = 2.0 ** torch.randint(-2, 2, (1, N) if rows[1] else (1,), generator=g).float()
    else:
        a, b = torch.randn(M, K, generator=g) * 2, torch.randn(N, K, generator=g) * 2
        sa = torch.rand((M, 1) if rows[0] else (1,), generator=g) + 0.5
        sb = torch.rand((1, N) if rows[1] else (1,), generator=g) + 0.5
    ins = [a.to(TORCH[at]), b.to(TORCH[bt]), sa, sb]
    if bias:
        bv = torch.randint(-8, 9, (N,), generator=g).float() if exact else torch.randn(N, generator=g)
        ins.append(bv.to({"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[bias]))
    return ins


def _torch(case, ins):
    """torch's CPU _scaled_mm (scales as torch takes them: both singletons, or both
    row-wise, a tensor-wise one beside a row-wise one broadcast to its rows)."""
    M, N, K, at, bt, rows, bias, out, _ = case
    a, b, sa, sb = ins[:4]
    if any(rows):
        sa, sb = sa.reshape(-1, 1).expand(M, 1).contiguous(), sb.reshape(1, -1).expand(1, N).contiguous()
    else:
        sa, sb = sa.reshape(()), sb.reshape(())
    # the bias added in f32 and the sum rounded once (torch's bias must be of the output
    # type; an f32 bias would be rounded first)
    r = torch._scaled_mm(a, b.T, sa, sb, out_dtype=torch.float32)
    return (r + ins[4].float() if bias else r).to(OUT[out])


CASES = {  # M, N, K, A, B, (row-wise A, row-wise B), bias, out, forced config (None: chosen)
    # the pass's tile (128 x 64, 8 stages) for an odd shape: 2 x 2 tiles, K = 208 (two
    # 128-deep k-blocks, the second zero-filled past K)
    "e4m3_tensorwise": (200, 96, 208, "f8E4M3FN", "f8E4M3FN", (False, False), None, "bf16", None),
    # mixed formats, row-wise scales and a bf16 bias; 80 columns: 16-column pieces
    "e4m3_e5m2_rowwise_bias": (136, 80, 160, "f8E4M3FN", "f8E5M2", (True, True), "bf16", "bf16",
                               TmemGemmConfig(bn=80, stages=2)),
    # a CTA pair (cta_group::2, M = 256): odd M (the odd CTA's last rows past M), A
    # row-wise with B tensor-wise, an f32 bias, f16 out; 3 pair tiles, the ring wrapping
    "e5m2_e4m3_pair": (300, 96, 272, "f8E5M2", "f8E4M3FN", (True, False), "f32", "f16",
                       TmemGemmConfig(bn=32, stages=2, pair=True)),
    # the register epilogue (pks.acc_store_global: the whole tile scaled), B row-wise only
    "global_epilogue": (136, 48, 96, "f8E4M3FN", "f8E4M3FN", (False, True), "bf16", "bf16",
                        TmemGemmConfig(bn=48, stages=2, epilogue="global")),
    # cluster launch control: 4 tiles on 2 CTAs
    "clc": (200, 64, 128, "f8E4M3FN", "f8E5M2", (True, True), None, "bf16",
            TmemGemmConfig(bn=32, stages=3, clc=True)),
    # CTA pairs under cluster launch control (the choice for large fp8 shapes on b200)
    "pair_clc": (300, 64, 128, "f8E4M3FN", "f8E5M2", (True, True), "bf16", "bf16",
                 TmemGemmConfig(bn=32, stages=2, pair=True, clc=True)),
    # two pairs multicasting A (2x2) or, under CLC, B (4x1): the second pair past N / M
    "cluster_2x2": (300, 96, 272, "f8E4M3FN", "f8E5M2", (True, True), "bf16", "bf16",
                    TmemGemmConfig(bn=32, stages=2, pair=True, pair_cluster="2x2")),
    "cluster_4x1_clc": (300, 96, 144, "f8E5M2", "f8E4M3FN", (False, True), None, "f16",
                        TmemGemmConfig(bn=32, stages=2, pair=True, pair_cluster="4x1",
                                       clc=True)),
}


def _ulps(out: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    return (out.view(torch.int16).int() - ref.view(torch.int16).int()).abs()


@pytest.mark.parametrize("case", sorted(CASES))
def test_emulated_sm100_fp8_gemm_equals_the_interpreter_and_torch(case, monkeypatch):
    c = CASES[case]
    m = _module(c, monkeypatch)
    ins = _inputs(c)
    sms = 4 if c[-1] is not None and c[-1].cluster == 4 else 2
    res = check_module(m, [ins], 1, target="sm_100a", func_name="smm", sms=sms,
                       forward_emulated=True)
    assert res.ok, res.difference
    assert len(res.kernels) == 1          # the scheduled kernel ran (not the graph level)
    (out,), = res.outputs
    ref = _torch(c, ins)
    assert not torch.isnan(out.float()).any()
    # torch sums the exact products in f32 in another order: within one step of the output
    # type, or (a sum that cancels to near zero) within f32 rounding of the largest values
    near = (out.float() - ref.float()).abs() <= 2.0 ** -12 * ref.float().abs().max()
    assert ((_ulps(out, ref) <= 1) | near).all()
    assert (out == ref).float().mean() > 0.97


@pytest.mark.parametrize("case", ["e4m3_e5m2_rowwise_bias", "e5m2_e4m3_pair"])
def test_exact_inputs_give_the_same_bits_as_torch_and_the_interpreter(case, monkeypatch):
    c = CASES[case]
    m = _module(c, monkeypatch)
    ins = _inputs(c, seed=3, exact=True)
    res = check_module(m, [ins], 1, target="sm_100a", func_name="smm", sms=2, exact=True,
                       forward_emulated=True)
    assert res.ok, res.difference
    assert len(res.kernels) == 1 and res.kernels[0].exact
    (out,), = res.outputs
    assert torch.equal(out, _torch(c, ins))


def test_schedule_is_the_tensor_memory_gemm_on_8_bit_operands():
    m = _module(CASES["e4m3_e5m2_rowwise_bias"][:-1] + (None,))
    (kop,) = kernels_of(m)
    ops = list(kop.walk())
    mma = [o for o in ops if isinstance(o, s.MmaAsyncOp)]
    assert len(mma) == 1 and mma[0].types == ("e4m3", "e5m2")
    roles = {s.RoleKind(o.kind.data): o for o in ops if isinstance(o, s.RoleOp)}
    assert set(roles) == {s.RoleKind.PRODUCER, s.RoleKind.MMA, s.RoleKind.EPILOGUE}
    # the scales in the epilogue role only, one per stored piece (2 slices x 1 piece of 64)
    scales = [o for o in ops if isinstance(o, s.AccScaleOp)]
    assert len(scales) == 2 and all(o.bias is not None for o in scales)
    assert all(roles[s.RoleKind.EPILOGUE].is_ancestor(o) for o in scales)
    tmaps = [o.result.type for o in ops if isinstance(o, s.TmapOp)]
    assert [t.element.data for t in tmaps[:2]] == ["e4m3", "e5m2"]
    assert [t.box_dims[0] for t in tmaps[:2]] == [128, 128]     # 128 bytes = 128 of K
    text = str(kop)
    assert 'acc = "tmem"' in text and "tcgen05.mma kind::f8f6f4" in text


def test_sm100_fp8_ptx_differs_from_sm90_in_the_mma_path_only():
    c = CASES["e4m3_tensorwise"]
    ptx100 = compile_kernel(kernels_of(_module(c))[0], "sm_100a").ptx
    ptx90 = compile_kernel(kernels_of(_module(c, target="h200"))[0], "sm_90a").ptx
    assert ptx100.count("tcgen05.mma.cta_group::1.kind::f8f6f4 [") == 4
    assert "kind::f16" not in ptx100 and "wgmma" not in ptx100
    assert "tcgen05" not in ptx90 and "wgmma.mma_async.sync.aligned.m64n" in ptx90
    assert ".f32.e4m3.e4m3" in ptx90
    # both load the 8-bit operands by TMA and store bf16 by TMA
    for p in (ptx100, ptx90):
        assert "cp.async.bulk.tensor.2d.shared::cluster.global" in p
        assert "cp.async.bulk.tensor.2d.global.shared::cta" in p


def test_pair_ptx_is_cta_group_2_kind_f8f6f4(monkeypatch):
    ptx = compile_kernel(kernels_of(_module(CASES["e5m2_e4m3_pair"], monkeypatch))[0],
                         "sm_100a").ptx
    assert ptx.count("tcgen05.mma.cta_group::2.kind::f8f6f4 [") == 4


def test_a_wrong_type_code_in_the_instruction_descriptor_is_an_emulator_error(monkeypatch):
    # a descriptor whose A type is 2 (TF32's code in .kind::tf32: no f8f6f4 format); ptxas
    # would accept it, the tensor core's result would be undefined
    good = t5.instr_desc_f8f6f4
    monkeypatch.setattr(t5, "instr_desc_f8f6f4", lambda *a: good(*a) | (2 << 7))
    c = CASES["e4m3_tensorwise"]
    m = _module(c)
    with pytest.raises(EmuTensorMemoryError, match="atype = 2 is no .kind::f8f6f4 format"):
        check_module(m, [_inputs(c)], 1, target="sm_100a", func_name="smm", sms=2)


def test_an_f32_result_is_left_to_the_graph_level_with_a_remark():
    # an f32 result: the scheduled kernel stores bf16 / f16; it says so
    m = parse_module(_text(64, 32, 64, out="f32"), "t.mlir")
    ScheduleMatmul(target="b200").apply(make_context(), m)
    assert not kernels_of(m)
    assert "scaled matmul left to the graph level: result f32" in str(m)


# (row-wise scales + bias with the TMA epilogue: the chosen 128 x 256 tile, the most registers)
SPILL_CASES = ["e5m2_e4m3_pair", "global_epilogue", "cluster_2x2"]


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
@pytest.mark.parametrize("case", SPILL_CASES + ["chosen_256"])
def test_sm100_fp8_assembles_without_spills_and_sass_has_utcqmma(case, monkeypatch):
    if case == "chosen_256":    # the pass's widest tile: 128 x 256, row-wise + bias
        c = (1024, 2048, 512, "f8E4M3FN", "f8E5M2", (True, True), "bf16", "bf16", None)
    else:
        c = CASES[case]
    kop = kernels_of(_module(c, monkeypatch))[0]
    ptx = compile_kernel(kop, "sm_100a").ptx
    cubin, reports, _ = assemble(ptx, "sm_100a")
    (rep,) = reports.values()
    assert (rep.spill_stores, rep.spill_loads, rep.stack_bytes) == (0, 0, 0), rep.line()
    if find_tool("cuobjdump") is None:
        pytest.skip("cuobjdump not installed")
    pair = "cta_group::2" in ptx
    tma = "cp.async.bulk.tensor.2d.global.shared::cta" in ptx
    assert check_sm100_gemm(sass(cubin), cta_pair=pair, tma_store=tma, fp8=True) == []
    assert check_sm100_gemm(sass(cubin), cta_pair=pair, tma_store=tma) != []
