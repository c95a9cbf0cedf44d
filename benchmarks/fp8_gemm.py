"""The IR-built fp8 GEMM (graph pk.scaled_matmul -> schedule-matmul -> sm_90a wgmma k32
.e4m3 / .e5m2 -> PTX) against torch._scaled_mm (cuBLASLt), in one run on one H200.

    python benchmarks/fp8_gemm.py --out DIR        # on the GPU machine (xdsl carried as wheels)
    python benchmarks/fp8_gemm.py --list           # the cases, no GPU

Per case: random fp8 operands (A [M, K] row-major, B given to torch column-major, i.e. the
kernel reads B^T [N, K]), f32 scales (tensor-wise or row-wise), bf16 output NaN-poisoned;
the kernel's output against torch._scaled_mm's (max abs difference relative to the output
scale; bitwise-equal fraction); then both timed in alternation (benchmarks/timing.py
``rotated`` / ``paired``, medians and the median of paired ratios torch / pkc: > 1 means
pkc is faster), torch both with its default (cuBLASLt promotes partial sums) and with
use_fast_accum=True (no promotion: what the wgmma kernel does). Cases with a named tile variant measure the tuning table's other tiles on
fp8. The table is printed last; JSON under DIR.
"""

from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from sweep_common import run_cases  # noqa: E402  (the path above)

_TYPES = {"e4m3": "f8E4M3FN", "e5m2": "f8E5M2"}

# (name, M, N, K, row-wise scales, variant ("": schedule-matmul's pick), A type, B type)
CASES: list[tuple[str, int, int, int, bool, str, str, str]] = [
    ("square 8192^3", 8192, 8192, 8192, False, "", "e4m3", "e4m3"),
    ("square 8192^3 row", 8192, 8192, 8192, True, "", "e4m3", "e4m3"),
    ("4096^3", 4096, 4096, 4096, False, "", "e4m3", "e4m3"),
    ("llama70b-tp8 qkv", 8192, 1280, 8192, False, "", "e4m3", "e4m3"),
    ("16384x8192x4096", 16384, 8192, 4096, True, "", "e4m3", "e4m3"),
    ("odd 1000x1040x2000", 1000, 1040, 2000, True, "", "e4m3", "e4m3"),
    ("8192^3 e4m3 x e5m2", 8192, 8192, 8192, False, "", "e4m3", "e5m2"),
    ("square 8192^3", 8192, 8192, 8192, False, "128x256_s4_cl2", "e4m3", "e4m3"),
    ("square 8192^3", 8192, 8192, 8192, False, "256x128_s4_tma", "e4m3", "e4m3"),
    ("square 8192^3", 8192, 8192, 8192, False, "128x128_s6_tma", "e4m3", "e4m3"),
    ("square 8192^3", 8192, 8192, 8192, False, "128x256_s4_g16", "e4m3", "e4m3"),
    ("llama70b-tp8 qkv", 8192, 1280, 8192, False, "128x160_s5_cl2", "e4m3", "e4m3"),
    ("16384x8192x4096", 16384, 8192, 4096, True, "128x256_s4_cl2", "e4m3", "e4m3"),
]


def module_text(M: int, N: int, K: int, row: bool = False, bias: bool = False,
                ta: str = "e4m3", tb: str = "e4m3", out: str = "bf16",
                transpose: bool = True) -> str:
    """``torch._scaled_mm(x, w.t(), sa, sb[, bias])`` at the graph level: x [M, K], w
    [N, K] under a ``pk.transpose`` (``transpose=False``: B given [K, N])."""
    fa, fb = _TYPES[ta], _TYPES[tb]
    sa = f"tensor<{M}x1xf32>" if row else "tensor<1xf32>"
    sb = f"tensor<1x{N}xf32>" if row else "tensor<1xf32>"
    w = f"tensor<{N}x{K}x{fb}>" if transpose else f"tensor<{K}x{N}x{fb}>"
    args = [f"%x: tensor<{M}x{K}x{fa}>", f"%w: {w}", f"%sa: {sa}", f"%sb: {sb}"]
    if bias:
        args.append(f"%bias: tensor<{N}x{out}>")
    body, wt = "", "%w"
    if transpose:
        body += (f"  %wt = pk.transpose %w {{perm = [1, 0]}} : {w} -> "
                 f"tensor<{K}x{N}x{fb}>\n")
        wt = "%wt"
    b = f" bias %bias : tensor<{N}x{out}>" if bias else ""
    body += (f"  %y = pk.scaled_matmul %x, {wt} scales(%sa, %sb){b} : (tensor<{M}x{K}x{fa}>, "
             f"tensor<{K}x{N}x{fb}>, {sa}, {sb}) -> tensor<{M}x{N}x{out}>\n")
    return (f"func.func @mm({', '.join(args)}) -> tensor<{M}x{N}x{out}> {{\n{body}"
            f"  func.return %y : tensor<{M}x{N}x{out}>\n}}\n")


def compile_fp8(M: int, N: int, K: int, row: bool, variant: str = "", ta: str = "e4m3",
                tb: str = "e4m3", bias: bool = False):
    """(compiled kernel: PTX + launch metadata, its pk.kernel) of one case."""
    from pkc.codegen import compile_kernel
    from pkc.codegen.emit import kernels_of
    from pkc.ir import make_context, parse_module
    from pkc.passes.schedule_matmul import ScheduleMatmul

    m = parse_module(module_text(M, N, K, row, bias, ta, tb), "fp8_gemm.mlir")
    ScheduleMatmul(variant=variant).apply(make_context(), m)
    (kop,) = kernels_of(m)
    return compile_kernel(kop, "sm_90a"), kop


def fp8_inputs(M, N, K, row, ta="e4m3", tb="e4m3", bias=False, device="cuda", seed=0):
    """(a [M, K], w [N, K], sa, sb, bias or None) as the kernel takes them; torch takes
    ``w.t()`` (column-major B)."""
    import torch

    dt = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
    g = torch.Generator(device="cpu").manual_seed(seed)
    a = (torch.randn(M, K, generator=g) * 2).to(dt[ta]).to(device)
    w = (torch.randn(N, K, generator=g) * 2).to(dt[tb]).to(device)
    if row:
        sa = (torch.rand(M, 1, generator=g) + 0.5).to(device)
        sb = (torch.rand(1, N, generator=g) + 0.5).to(device)
    else:
        sa = torch.tensor([0.75]).to(device)
        sb = torch.tensor([1.25]).to(device)
    bv = (torch.randn(N, generator=g)).to(torch.bfloat16).to(device) if bias else None
    return a, w, sa, sb, bv


def torch_fp8_launchers(M, N, K):
    """Row-wise fp8 inputs ``(a, w, sa, sb)``, torch's row-wise result (fast accumulation)
    and torch's row- and tensor-wise launchers (``out=`` buffers: no allocation per call),
    the baselines of the fp8 GEMM benchmarks."""
    import torch

    a, w, sa, sb, _ = fp8_inputs(M, N, K, True)
    _, _, ta, tb, _ = fp8_inputs(M, N, K, False)
    ref = torch_scaled_mm(a, w, sa, sb, fast=True)
    o1, o2 = torch.empty_like(ref), torch.empty_like(ref)
    launchers = [("torch row", lambda: torch_scaled_mm(a, w, sa, sb, out=o1, fast=True)),
                 ("torch tensor", lambda: torch_scaled_mm(a, w, ta, tb, out=o2, fast=True))]
    return (a, w, sa, sb), ref, launchers, o1


def torch_scaled_mm(a, w, sa, sb, bias=None, out=None, fast=False):
    """torch._scaled_mm(a, w.t(), ...) -> bf16; ``fast``: use_fast_accum=True (no promotion
    of partial sums: what the wgmma kernel does)."""
    import torch

    s = (lambda x: x.reshape(())) if sa.numel() == 1 else (lambda x: x)
    kw = {"use_fast_accum": True} if fast else {}
    if out is None:
        return torch._scaled_mm(a, w.t(), s(sa), s(sb), bias=bias, out_dtype=torch.bfloat16, **kw)
    return torch._scaled_mm(a, w.t(), s(sa), s(sb), bias=bias, out_dtype=torch.bfloat16,
                            out=out, **kw)


def run_case(name, M, N, K, row, variant, ta, tb, rounds: int) -> dict:
    import torch
    from pkc.passes.remarks import plan_of
    from pkc.runtime.scheduled import ScheduledKernel
    from timing import paired, rotated

    ck, kop = compile_fp8(M, N, K, row, variant, ta, tb)
    p = plan_of(kop)
    tile = f"{p['bm']}x{p['bn']}_s{p['stages']}" + ("_cl2" if p.get("cluster") == 2 else "")
    k = ScheduledKernel(ck.ptx, ck.meta)
    a, w, sa, sb, _ = fp8_inputs(M, N, K, row, ta, tb)
    c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    k([a, w, sa, sb, c])
    ref = torch_scaled_mm(a, w, sa, sb)
    torch.cuda.synchronize()
    diff = (c.float() - ref.float()).abs()
    scale = float(ref.float().abs().max())
    err = float(diff.max())
    nan = bool(torch.isnan(c).any())
    # f32 accumulation in another order than cuBLASLt's, then one bf16 rounding: a few
    # bf16 steps of the output's scale
    tol = 2 ** -6 * scale
    row_ = {"case": name, "M": M, "N": N, "K": K, "row_wise": row, "types": f"{ta}x{tb}",
            "variant": variant or "auto", "tile": tile, "nan": nan, "max_abs_vs_torch": err,
            "tol": tol, "correct": err <= tol and not nan,
            "bitwise_equal_fraction": float((diff == 0).float().mean()),
            "registers": k.kernel.num_regs, "smem": ck.meta.smem_bytes, "grid": k.grid}
    if not row_["correct"]:
        return row_
    out = torch.empty_like(c)
    try:                # torch's out= variant (no allocation per call), where it has one
        torch_scaled_mm(a, w, sa, sb, out=out)
        use_out = True
    except (TypeError, RuntimeError):
        use_out = False

    def tfn(fast):
        o = out if use_out else None
        return lambda: torch_scaled_mm(a, w, sa, sb, out=o, fast=fast)
    fns = [lambda: k([a, w, sa, sb, out]), tfn(False), tfn(True)]
    for _ in range(3):
        for f in fns:
            f()
    t = paired(rotated(fns, rounds), ["pkc", "torch", "torch_fast"])
    flop = 2 * M * N * K
    row_.update(t, tflops_pkc=flop / t["us_pkc"] / 1e6, tflops_torch=flop / t["us_torch"] / 1e6,
                tflops_torch_fast=flop / t["us_torch_fast"] / 1e6)
    return row_


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out/fp8_gemm")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    if args.list:
        for c in CASES:
            print(*c)
        return
    rows = run_cases(CASES, lambda c: run_case(*c, rounds=args.rounds),
                     os.path.join(args.out, "fp8_gemm.json"),
                     lambda c: {"case": c[0], "variant": c[5] or "auto"})
    print(f"\n{'case':22} {'variant':15} {'tile':12} {'ok':5} {'pkc us':>8} {'torch us':>8} "
          f"{'torch/pkc':>9} {'fast/pkc':>8} {'pkc TF/s':>8} {'torch TF/s':>10}")
    for r in rows:
        if "error" in r:
            print(f"{r['case']:22} {r['variant']:15} ERROR {r['error'][:90]}")
            continue
        print(f"{r['case']:22} {r['variant']:15} {r['tile']:12} {str(r['correct']):5} "
              f"{r.get('us_pkc', 0):8.1f} {r.get('us_torch', 0):8.1f} "
              f"{r.get('torch_over_pkc', 0):9.3f} {r.get('torch_fast_over_pkc', 0):8.3f} "
              f"{r.get('tflops_pkc', 0):8.1f} "
              f"{r.get('tflops_torch', 0):10.1f}")


if __name__ == "__main__":
    main()
