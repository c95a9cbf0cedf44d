"""Device probe for the emulator's fp8 wgmma arithmetic: runs the IR-built fp8 GEMM on a
few small shapes on the H200 and saves inputs and outputs (``--out DIR/fp8_probe.pt``), so
that the emulator's model of the k32 step (pkc.emu.ops_sm90.ACCUMULATE) can be compared
with the hardware bit for bit on the CPU afterwards (tests/unit/test_fp8_gemm.py reads the
saved file when it is in benchmarks/results)."""

from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

# (M, N, K, row-wise, bias, A, B, variant): K large enough that the k-step's alignment and
# truncation show in bf16 outputs; scales 1 where tensor-wise
PROBES = [
    (128, 256, 2048, False, False, "e4m3", "e4m3", "128x256_s4_tma"),
    (192, 128, 1024, True, True, "e4m3", "e5m2", "128x128_s6_tma"),
    (64, 64, 4096, False, False, "e5m2", "e4m3", "128x128_s6_tma"),
]


def main() -> None:
    import torch
    from fp8_gemm import compile_fp8, fp8_inputs

    from pkc.runtime.scheduled import ScheduledKernel

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    saved = []
    for M, N, K, row, bias, ta, tb, variant in PROBES:
        ck, _ = compile_fp8(M, N, K, row, variant, ta, tb, bias)
        k = ScheduledKernel(ck.ptx, ck.meta)
        a, w, sa, sb, bv = fp8_inputs(M, N, K, row, ta, tb, bias, seed=M + K)
        if not row:
            sa, sb = torch.ones_like(sa), torch.ones_like(sb)
        c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        k([a, w, sa, sb] + ([bv] if bias else []) + [c])
        torch.cuda.synchronize()
        saved.append({"case": (M, N, K, row, bias, ta, tb, variant),
                      "inputs": [x.cpu() for x in [a, w, sa, sb] + ([bv] if bias else [])],
                      "out": c.cpu()})
        print("probe", M, N, K, ta, tb, "nan" if torch.isnan(c).any() else "ok", flush=True)
    torch.save(saved, os.path.join(args.out, "fp8_probe.pt"))


if __name__ == "__main__":
    main()
