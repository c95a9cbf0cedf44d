"""What the torchrun examples share: the process group, and the check of a model compiled by
``torch.compile(model, backend=pkc.backend(...))`` against the same model run eagerly.

Under ``torchrun --nproc_per_node=W`` every process is one rank on its own GPU with a NCCL
group; the compiled model runs pkc's program on that GPU (kernels over symmetric memory,
:func:`pkc.runtime.execute.run_kernel_module_distributed`), the eager reference runs the
uncompiled model with NCCL collectives and cuBLAS. Started as a plain ``python`` process
there is one rank (world 1): on a GPU with a 1-rank NCCL group, on a CPU-only machine with
a 1-rank gloo group, where pkc runs the program on its reference interpreter.

NVLink multicast stays off: the three variables below are set before torch.distributed is
imported (the lent multi-GPU machines must never use NVLS / multimem).
"""

from __future__ import annotations

import os

for _k, _v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
               ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ[_k] = _v

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from dataclasses import dataclass  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # running from a checkout without an installed pkc
    sys.path.insert(0, ROOT)

import pkc  # noqa: E402


@dataclass
class Rank:
    rank: int
    world: int
    device: torch.device
    backend: str
    owns_group: bool  # this module initialized the group (and destroys it)


def init_distributed() -> Rank:
    """The process group: torchrun's (env://), an already initialized one, or a 1-rank
    group for a plain ``python`` run (NCCL on a GPU, gloo on the CPU)."""
    cuda = torch.cuda.is_available()
    if dist.is_initialized():
        rank, world = dist.get_rank(), dist.get_world_size()
        device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
        return Rank(rank, world, device, dist.get_backend(), False)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        local = int(os.environ.get("LOCAL_RANK", os.environ["RANK"]))
        if cuda:
            torch.cuda.set_device(local)
            device = torch.device("cuda", local)
            dist.init_process_group("nccl", device_id=device)
        else:
            device = torch.device("cpu")
            dist.init_process_group("gloo")
    else:
        device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
        if cuda:
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if cuda else "gloo", store=dist.HashStore(), rank=0,
                                world_size=1)
    return Rank(dist.get_rank(), dist.get_world_size(), device, dist.get_backend(), True)


def finish(ctx: Rank, ok: bool) -> int:
    """Every rank's verdict combined (all ranks exit alike); destroys the group if ours."""
    flag = torch.tensor([1 if ok else 0], dtype=torch.int32, device=ctx.device)
    if ctx.world > 1:
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    all_ok = bool(flag.item())
    if ctx.owns_group:
        dist.destroy_process_group()
    return 0 if all_ok else 1


def base_args(description: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--pipeline", default="default",
                    help='pkc pass pipeline (default "default": fuse where the cost model says it '
                         'pays; "default{force=true}" fuses every candidate)')
    ap.add_argument("--dtype", choices=["bf16", "f32"], default=None,
                    help="parameter / activation dtype (default: bf16 on a GPU, f32 on the CPU)")
    ap.add_argument("--size", choices=["small", "medium"], default=None,
                    help="model size (default: medium on a GPU, small on the CPU)")
    ap.add_argument("--calls", type=int, default=5, help="timed calls after the first (0: none)")
    return ap


def dtype_of(name: str | None, device: torch.device) -> torch.dtype:
    if name is None:
        name = "bf16" if device.type == "cuda" else "f32"
    return {"bf16": torch.bfloat16, "f32": torch.float32}[name]


def size_of(name: str | None, device: torch.device) -> str:
    return name or ("medium" if device.type == "cuda" else "small")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _median_ms(fn: Callable[[], object], calls: int, device: torch.device) -> float | None:
    if calls <= 0:
        return None
    ts = []
    for _ in range(calls):
        _sync(device)
        t0 = time.perf_counter()
        fn()
        _sync(device)
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


@dataclass
class CheckResult:
    name: str
    ok: bool
    max_err: float
    ref_scale: float
    mode: str
    kernels: int
    remarks: list[str]
    pkc_ms: float | None
    eager_ms: float | None
    first_call_s: float


def check_model(ctx: Rank, name: str, model: torch.nn.Module, inputs: Sequence[torch.Tensor], *,
                pipeline: str, rtol: float, calls: int = 5) -> CheckResult:
    """Runs ``model`` eagerly (NCCL collectives, cuBLAS) and compiled by pkc on this rank's
    inputs; prints this rank's max abs error and where pkc ran."""
    from pkc.torch_backend import execution_mode

    model.requires_grad_(False)  # inference: no backward graph
    ref = model(*inputs)
    _sync(ctx.device)
    be = pkc.backend(pipeline=pipeline)
    compiled = torch.compile(model, backend=be, dynamic=False)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = compiled(*inputs)
    _sync(ctx.device)
    first = time.perf_counter() - t0
    again = compiled(*inputs)  # a second call: cached program, same answer
    _sync(ctx.device)
    err = (out.float() - ref.float()).abs().max().item()
    err_again = (again.float() - out.float()).abs().max().item()
    scale = ref.float().abs().max().item()
    nan = bool(torch.isnan(out.float()).any())
    kernels = sum(1 for p in be.programs for op in p.module.walk() if op.name == "pk.kernel")
    mode = execution_mode(ctx.world) if be.programs else "not compiled by pkc"
    ok = bool(be.programs) and not nan and err <= rtol * max(1.0, scale) and err_again <= rtol * max(1.0, scale)
    if ctx.device.type == "cuda" and ctx.world > 1:
        ok = ok and mode == "gpu"
    # Several ranks without GPUs: the backend ran the graph through torch, so a match with
    # eager says nothing about pkc. Never "ok" for a run in which pkc's code did not run.
    pkc_ran = bool(be.programs) and mode in ("gpu", "interp")
    ok = ok and pkc_ran
    remarks = [r for p in be.programs for r in p.remarks()]
    pkc_ms = _median_ms(lambda: compiled(*inputs), calls, ctx.device)
    eager_ms = _median_ms(lambda: model(*inputs), calls, ctx.device)
    where = {"gpu": f"pkc kernels on {ctx.device}" + (" over symmetric memory" if ctx.world > 1 else ""),
             "interp": "pkc's reference interpreter (CPU)",
             "eager": "torch (no GPUs for several ranks)"}.get(mode, mode)
    timing = ""
    if pkc_ms is not None:
        timing = f"; per call pkc {pkc_ms:.3f} ms, eager {eager_ms:.3f} ms"
    print(f"[rank {ctx.rank}/{ctx.world}] {name}: max abs error {err:.3g} (|ref| max {scale:.3g}, "
          f"tol {rtol:g} x max(1, |ref|)) "
          f"{'ok' if ok else ('FAILED' if pkc_ran else 'NOT CHECKED: pkc did not run it')}; "
          f"ran on {where}; "
          f"{len(be.programs)} graph(s), {kernels} pk.kernel(s); first call {first:.1f} s"
          f"{timing}", flush=True)
    if ctx.rank == 0:
        for r in remarks:
            print(f"  remark: {r}", flush=True)
    return CheckResult(name, ok, err, scale, mode, kernels, remarks, pkc_ms, eager_ms, first)


def tolerance(dtype: torch.dtype) -> float:
    return 3e-2 if dtype == torch.bfloat16 else 1e-3


def randn(gen: torch.Generator, *shape: int, scale: float = 1.0) -> torch.Tensor:
    """Seeded CPU normal values (the same on every rank for the same generator state)."""
    return torch.randn(*shape, generator=gen) * scale


def run_example(name: str, build: Callable, ctx: Rank, args, default_dtype: str | None = None
                ) -> CheckResult:
    """One example on this rank: ``build(rank, world, device, dtype, size)`` gives its model
    and inputs; compiled with pkc and checked against the same model run eagerly."""
    dtype = dtype_of(args.dtype or default_dtype, ctx.device)
    model, inputs = build(ctx.rank, ctx.world, ctx.device, dtype, size_of(args.size, ctx.device))
    return check_model(ctx, name, model, inputs, pipeline=args.pipeline, rtol=tolerance(dtype),
                       calls=args.calls)


def example_main(doc: str, run: Callable[[Rank, argparse.Namespace], CheckResult],
                 argv: list[str] | None = None) -> int:
    """``torchrun ... examples/torchrun_<name>.py [options]``: parse, join the group, run."""
    args = base_args(doc.splitlines()[0]).parse_args(argv)
    ctx = init_distributed()
    return finish(ctx, run(ctx, args).ok)
