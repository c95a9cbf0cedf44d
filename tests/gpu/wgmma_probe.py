"""The H200's wgmma arithmetic on many outputs, the data the emulator's k16-step model
(pkc.emu.ops_sm90.accumulate_h200) is fitted to and checked against: pkc's IR GEMM
(128x128_s6_tma) on inputs that stress the alignment (random magnitudes over 2^-8..2^8,
signs mixed: cancellation), K = 16 (one step, no accumulator) to 128; saves A, B, C (bf16)
per case under $OUT. The rows that told the models apart are kept in
tests/unit/data/wgmma_h200_probe.pt (tests/unit/test_emu_sm90.py).

    python tests/gpu/wgmma_probe.py        # on the GPU machine, OUT=... (xdsl carried)"""
import os
import sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks"))
import torch  # noqa: E402
from gemm_ir import compile_ir  # noqa: E402

from pkc.runtime.scheduled import ScheduledKernel  # noqa: E402


def main() -> None:
    out = os.environ["OUT"]
    g = torch.Generator(device="cpu").manual_seed(7)
    for M, N, K, spread in ((1024, 1024, 16, 8), (1024, 1024, 16, 0), (1024, 512, 64, 8), (512, 512, 128, 3)):
        ck = compile_ir(M, N, K, "128x128_s6_tma", "nk")
        def gen(r, c):
            x = torch.randn(r, c, generator=g)
            if spread:
                x = x * torch.exp2(torch.randint(-spread, spread + 1, (r, c), generator=g).float())
            return x.to(torch.bfloat16)
        a, b = gen(M, K), gen(N, K)
        c = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device="cuda")
        ScheduledKernel(ck.ptx, ck.meta)([a.cuda(), b.cuda(), c])
        torch.cuda.synchronize()
        torch.save({"a": a, "b": b, "c": c.cpu()}, f"{out}/mma_{M}x{N}x{K}_s{spread}.pt")
        print(M, N, K, spread, "nan" if torch.isnan(c).any() else "ok", flush=True)


if __name__ == "__main__":
    main()
