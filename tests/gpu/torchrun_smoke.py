"""Real multi-GPU check (torchrun --nproc_per_node=W): pkc's kernels over symmetric memory
against NCCL + cuBLAS, for a lowered all-reduce and the fused patterns.

    torchrun --nproc_per_node=2 tests/gpu/torchrun_smoke.py
"""

import os
import sys
import time

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

sys.path.insert(0, os.getcwd())
from pkc.ir import parse_module  # noqa: E402
from pkc.passes.registry import run_pipeline  # noqa: E402
from pkc.runtime.execute import run_kernel_module_distributed  # noqa: E402
from pkc.runtime.symm import DistributedRunner  # noqa: E402
from tests.unit.test_overlap import ag_ir, ar_ir, rs_ir  # noqa: E402


def reference(kind, a, b, W):
    if kind == "ar_only":
        x = a.clone()
        dist.all_reduce(x)
        return x
    if kind == "ag":
        g = torch.empty(W * a.shape[0], a.shape[1], dtype=a.dtype, device=a.device)
        dist.all_gather_into_tensor(g, a)
        return (g.float() @ b.float()).to(a.dtype)
    c = (a.float() @ b.float()).to(a.dtype)
    if kind == "ar":
        dist.all_reduce(c)
        return c
    out = torch.empty(c.shape[0] // W, c.shape[1], dtype=c.dtype, device=c.device)
    dist.reduce_scatter_tensor(out, c)
    return out


def main():
    dist.init_process_group("nccl")
    rank, W = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(rank)
    ar_only = f"""
func.func @main(%x: tensor<96x200xbf16>, %unused: tensor<1x1xbf16>) -> tensor<96x200xbf16> {{
  %y = pk.all_reduce %x {{reduce = "sum", world = {W} : i64}} : tensor<96x200xbf16> -> tensor<96x200xbf16>
  func.return %y : tensor<96x200xbf16>
}}"""
    cases = {
        "ar_only": (ar_only, (96, 200), (1, 1)),
        "rs": (rs_ir(W, 64 * W, 96, 72, "bf16"), (64 * W, 72), (72, 96)),
        "ar": (ar_ir(W, 80, 96, 72, "bf16"), (80, 72), (72, 96)),
        "ag": (ag_ir(W, 40, (96,), 72, "bf16"), (40, 72), (72, 96)),
    }
    runner = DistributedRunner()
    results = []
    for kind, (text, sa, sb) in cases.items():
        module = parse_module(text, f"{kind}.mlir")
        run_pipeline("default{force=true},schedule", module)
        gen = torch.Generator(device="cuda").manual_seed(100 + rank)
        a = torch.randn(*sa, device="cuda", dtype=torch.bfloat16, generator=gen)
        b = torch.randn(*sb, device="cuda", dtype=torch.bfloat16, generator=gen)
        out = run_kernel_module_distributed(module, [a, b], runner=runner)[0]
        ref = reference(kind, a, b, W)
        err = (out.float() - ref.float()).abs().max().item()
        scale = ref.float().abs().max().item()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(10):
            run_kernel_module_distributed(module, [a, b], runner=runner)
        torch.cuda.synchronize()
        t_pkc = (time.perf_counter() - t0) / 10
        t0 = time.perf_counter()
        for _ in range(10):
            reference(kind, a, b, W)
        torch.cuda.synchronize()
        t_ref = (time.perf_counter() - t0) / 10
        ok = err <= 0.03 * max(scale, 1.0)
        results.append((kind, ok, err, scale, t_pkc, t_ref))
    dist.barrier()
    if rank == 0:
        print(f"W={W} kind ok max_err ref_scale pkc_ms nccl_cublas_ms")
        for kind, ok, err, scale, tp, tr in results:
            print(f"W={W} {kind:8s} {ok} {err:.3g} {scale:.3g} {tp * 1e3:.3f} {tr * 1e3:.3f}")
    dist.destroy_process_group()
    return 0 if all(r[1] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
