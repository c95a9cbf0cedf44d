"""The emulator's tcgen05 / tensor-memory model on the sm_100a GEMM that schedule-matmul
builds for b200: the kernel's output equals the exact product rounded to the output type
within one unit in the last place (the emulator sums each K = 16 step exactly and rounds
to f32, then the epilogue rounds to bf16 / f16: at most one extra rounding of the f32
partial sums; no Blackwell GPU has run it to pin the hardware's rounding), and broken
copies of the kernel (tensor memory not freed, a tcgen05.ld result read before
tcgen05.wait::ld, a wrong descriptor) stop with the named error."""

from __future__ import annotations

import pytest
import torch

from pkc.codegen import compile_kernel, ptx_sm100 as t5
from pkc.codegen.emit import kernels_of
from pkc.emu import emulate
from pkc.emu.ops_sm100 import EmuTensorMemoryError, decode_instr_desc, decode_smem_desc
from pkc.passes import schedule_matmul as sm
from pkc.ir import make_context, parse_module, verify_module
from pkc.passes.schedule_matmul import ScheduleMatmul
from pkc.target.gemm_tuning_sm100 import TmemGemmConfig

DT = {"bf16": torch.bfloat16, "f16": torch.float16}


def _text(M, N, K, layout, dt):
    if layout == "nk":
        return (f"func.func @mm(%x: tensor<{M}x{K}x{dt}>, %w: tensor<{N}x{K}x{dt}>) -> tensor<{M}x{N}x{dt}> {{\n"
                f"  %wt = pk.transpose %w {{perm = [1, 0]}} : tensor<{N}x{K}x{dt}> -> tensor<{K}x{N}x{dt}>\n"
                f"  %y = pk.matmul %x, %wt : (tensor<{M}x{K}x{dt}>, tensor<{K}x{N}x{dt}>) -> tensor<{M}x{N}x{dt}>\n"
                f"  func.return %y : tensor<{M}x{N}x{dt}>\n}}\n")
    return (f"func.func @mm(%x: tensor<{M}x{K}x{dt}>, %w: tensor<{K}x{N}x{dt}>) -> tensor<{M}x{N}x{dt}> {{\n"
            f"  %y = pk.matmul %x, %w : (tensor<{M}x{K}x{dt}>, tensor<{K}x{N}x{dt}>) -> tensor<{M}x{N}x{dt}>\n"
            f"  func.return %y : tensor<{M}x{N}x{dt}>\n}}\n")


def _kernel(M, N, K, layout="nk", dt="bf16", cfg=None, monkeypatch=None):
    m = parse_module(_text(M, N, K, layout, dt), "t.mlir")
    if cfg is not None:
        monkeypatch.setattr(sm, "choose_tmem_config", lambda *a: cfg)
    ScheduleMatmul(target="b200").apply(make_context(), m)
    verify_module(m)
    (kop,) = kernels_of(m)
    return kop, compile_kernel(kop, "sm_100a")


def _inputs(M, N, K, layout, dt, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(M, K, generator=g).to(DT[dt])
    w = torch.randn(*((N, K) if layout == "nk" else (K, N)), generator=g).to(DT[dt])
    ref = x.double() @ (w.double().T if layout == "nk" else w.double())
    return x, w, ref


def _within_one_ulp(out: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """Whether each element is the correctly rounded ``ref`` or one of its two neighbours
    in the output type (16-bit patterns one apart)."""
    r = ref.to(out.dtype).view(torch.int16).int()
    o = out.view(torch.int16).int()
    return ((o - r).abs() <= 1) | (out.double() == ref.to(out.dtype).double())


CASES = {   # M, N, K, layout, dtype, cfg (None: the pass's choice), CTAs
    "nk_bf16_edges": (200, 136, 72, "nk", "bf16", None, 2),
    # 2 CTAs x 6 tiles: both accumulators reused, the 4-stage ring wraps (K = 5 blocks)
    "nk_bf16_bn64_many_tiles": (384, 256, 320, "nk", "bf16",
                                TmemGemmConfig(bn=64, stages=4, b_layout="nk"), 2),
    # the tile the pass picks, with B given [K, N]; the MMA thread's commits of the next
    # tile must not hide the accumulator's commit from the epilogue (a regression)
    "kn_bf16_chosen_2ctas": (300, 256, 200, "kn", "bf16", None, 2),
    # the epilogue from registers (pks.acc_store_global)
    "kn_f16_bn128_global": (136, 192, 136, "kn", "f16",
                            TmemGemmConfig(bn=128, stages=3, dtype="f16", b_layout="kn",
                                           epilogue="global"), 1),
    # 80 columns: 16-column TMA pieces (tcgen05.ld .x16), an N = 80 instruction descriptor
    "nk_bf16_bn80": (128, 80, 64, "nk", "bf16", TmemGemmConfig(bn=80, stages=2), 1),
    # 80 columns from registers: tcgen05.ld .x32, .x32, .x16
    "nk_bf16_bn80_global": (128, 80, 64, "nk", "bf16",
                            TmemGemmConfig(bn=80, stages=2, epilogue="global"), 1),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_emulated_sm100_gemm_equals_the_exact_product(case, monkeypatch):
    M, N, K, layout, dt, cfg, ctas = CASES[case]
    if cfg is not None:
        cfg = cfg.with_(dtype=dt)
    kop, ck = _kernel(M, N, K, layout, dt, cfg, monkeypatch)
    x, w, ref = _inputs(M, N, K, layout, dt)
    (out,), = emulate(ck, [[x, w]], kop=kop, sms=ctas)
    assert not torch.isnan(out).any(), "an element no tile wrote"
    assert _within_one_ulp(out, ref).all()
    # and not trivially: most elements are exactly the correctly rounded product
    assert (out == ref.to(out.dtype)).float().mean() > 0.99


def _broken(remove: type, M=200, N=136, K=72, monkeypatch=None):
    kop, ck = _kernel(M, N, K)
    victims = [op for op in ck.entry_op.walk() if isinstance(op, remove)]
    assert victims
    for op in victims:
        op.detach()
        op.erase()
    x, w, _ = _inputs(M, N, K, "nk", "bf16")
    return lambda: emulate(ck, [[x, w]], kop=kop, sms=2)


def test_tensor_memory_not_freed_is_an_error_naming_the_alloc():
    run = _broken(t5.Tcgen05DeallocOp)
    with pytest.raises(EmuTensorMemoryError, match=r"columns of tensor memory .* not freed .*"
                       r"no tcgen05.dealloc\)") as e:
        run()
    assert "tcgen05.alloc" in str(e.value) and "CTA 0" in str(e.value)


def test_ld_result_read_before_wait_is_an_error():
    run = _broken(t5.Tcgen05WaitOp)
    with pytest.raises(EmuTensorMemoryError, match=r"read before tcgen05.wait::ld, by .*cvt.rn.bf16x2"):
        run()


def test_ld_before_the_accumulator_wait_is_an_error():
    # the epilogue's wait on acc_full removed: it reads the accumulator before the MMAs
    # (their commit's mbarrier) say it is complete
    from pkc.codegen import ptx_sm90

    kop, ck = _kernel(200, 136, 72)
    waits = [o for o in ck.entry_op.walk() if isinstance(o, ptx_sm90.MbarrierWaitParityOp)]
    waits[-1].detach()        # the last wait in program order: the epilogue's on acc_full
    waits[-1].erase()
    x, w, _ = _inputs(200, 136, 72, "nk", "bf16")
    with pytest.raises(EmuTensorMemoryError, match="tcgen05.ld reads tensor memory (no MMA wrote|"
                       "that an MMA writes|before this thread waited).*read before the "
                       "matching wait"):
        emulate(ck, [[x, w]], kop=kop, sms=2)


def test_descriptor_decoders_read_the_codegen_encodings_back():
    f = decode_instr_desc(t5.instr_desc_f16("bf16", 128, 240, b_mn_major=True))
    assert (f["m"], f["n"], f["atype"], f["btype"], f["dtype"], f["trans_b"]) == (128, 240, 1, 1, 1, 1)
    d = decode_smem_desc(t5.DESC_MNMAJOR | (0x3400 >> 4))
    assert (d["start"], d["lbo"], d["sbo"], d["version"], d["swizzle"]) == (0x3400, 8192, 1024, 1, 2)


def test_a_descriptor_ptxas_accepts_but_the_isa_forbids_is_caught():
    # the K-major descriptor without the fixed 0b001 at bits 46-48 (the wgmma format):
    # ptxas assembles it; the emulator names the field
    from pkc.codegen import ptx
    from pkc.emu.errors import EmuTensorMemoryError as E

    kop, ck = _kernel(200, 136, 72)
    wanted = str(t5.DESC_KMAJOR)
    imms = [o for o in ck.entry_op.walk() if isinstance(o, ptx.ImmOp) and o.value.data == wanted]
    assert imms
    for o in imms:
        o.attributes["value"] = type(o.value)(str(t5.DESC_KMAJOR & ~(1 << 46)))
    x, w, _ = _inputs(200, 136, 72, "nk", "bf16")
    with pytest.raises(E, match="shared-memory descriptor of A .*fixed constant 0b001"):
        emulate(ck, [[x, w]], kop=kop, sms=1)
