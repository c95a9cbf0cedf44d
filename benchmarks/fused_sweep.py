"""Fused GEMM + collective sweep (issue 7): pkc against cuBLAS+NCCL, torch's fused
symmetric-memory ops and the roofline, on W GPUs.

    torchrun --nproc_per_node=W benchmarks/fused_sweep.py [--out DIR] [--budget-s 240]
    python benchmarks/fused_sweep.py                # one GPU: W = 1 (a 1-rank NCCL group)
    python benchmarks/fused_sweep.py --list         # the shapes and the roofline inputs (CPU)
    python benchmarks/fused_sweep.py --device-run   # the whole issue-7 device run (see below)

Families (bf16, B given as [N, K] like an nn.Linear weight; M x N x K is each rank's GEMM):
- AG+GEMM ``N x N/8 x N`` (PK): each rank holds M/W rows of A, all-gathers A, multiplies
  by its B. GEMM+RS and GEMM+AR ``N x N x N/8``: each rank multiplies its K-shard, the
  partial products are reduce-scattered (rank r keeps rows r*M/W..) or all-reduced.
  N = 2048, 4096, 8192, 16384, 32768 (the two largest run last, under the time budget).
- Llama-70B tensor-parallel layers (hidden 8192, FFN 28672, 64 query / 8 KV heads of 128;
  T = 8192 tokens): sequence-parallel QKV and up+gate as AG+GEMM, O and down as GEMM+RS,
  and O and down as GEMM+AR (plain tensor parallelism).

Implementations, per shape, on the same random inputs (outputs checked against the
baseline's: relative Frobenius error < 2e-2 for bf16, no NaN):
- ``base``: cuBLAS (torch.mm) and NCCL (torch.distributed) back to back (the unfused sequence);
- ``gemm``, ``coll``: each half alone (the roofline's GEMM time; the collective's time);
- ``symm``: torch.ops.symm_mem.fused_all_gather_matmul / fused_matmul_reduce_scatter (AG, RS);
- ``pkc``: the compiler's path: graph-level pk IR of the pattern, the ``default`` pipeline
  (the cost model decides whether to fuse), run by pkc's runtime under torch.distributed
  (pkc.runtime.executable: kernels with a fast plan run pkc's sm_90a kernels; ``pkc_path``
  in the JSON says which path each kernel took), B passed as the transpose view of an
  ``[N, K]`` weight (as nn.Linear gives it), the result copied out of pkc's persistent
  buffers as a compiled graph's output is. No host synchronization per call: timed like
  the others.

Timing: CUDA events around every call, implementations interleaved call by call (A B C A
B C ..., order rotated each iteration) so that clock drift falls on all alike, the host
queued ahead of the GPU with ``torch.cuda._sleep``, warm-up first, median of ``--iters``.
Roofline: max(GEMM time, bytes each rank receives / measured link bandwidth), the link
bandwidth being the best of an NCCL all-gather's bus bandwidth and a peer-to-peer pull
through symmetric memory (256 MiB), measured in the same run.

Writes ``fused_sweep.json`` (and ``fused_sweep.png`` when matplotlib is there) under
``--out`` (default benchmarks/results/<machine>_<date>/) and prints a table of ratios.
NVLink multicast stays off (environment set before torch.distributed is imported).

``--device-run`` is the one command of the issue-7 device run: environment, the torchrun
examples and the robustness tests (concurrently: correctness only), then
benchmarks/collectives.py and this sweep under torchrun on every GPU, each step with a
time limit, logs under $OUT (at most 8 files), summary tables printed last
(benchmarks/device_run.py). The CPU-only pieces live in benchmarks/sweep_common.py.
"""

from __future__ import annotations

import os

for _k, _v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
               ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ[_k] = _v

import argparse  # noqa: E402
import datetime  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/timing.py
from timing import last_stats as timing_stats  # noqa: E402

# the CPU-only pieces (shapes, arithmetic, tables, files): benchmarks/sweep_common.py;
# re-exported here for benchmarks/collectives.py and tests/unit/test_benchmarks_cpu.py
from sweep_common import (  # noqa: E402,F401
    PK_NS, LLAMA70B, FAMILIES, FAMILY_NAMES, FusedShape, fused_shapes, priority_order, comm_ms,
    roofline_ms, bus_factor, alg_bw, bus_bw, collective_sizes, fmt_size, ratio, format_table,
    machine_tag, results_dir, write_json, have_matplotlib, FUSED_COLUMNS, summarize_fused,
    fused_table, plot_fused,
)

# ======================================================================================
# GPU pieces
# ======================================================================================


class Ctx:
    """This process's rank in the benchmark's process group."""

    def __init__(self, timeout_s: float = 90.0):
        import torch
        import torch.distributed as dist

        self.torch, self.dist = torch, dist
        if not torch.cuda.is_available():
            raise SystemExit("this benchmark needs a GPU (--list shows the shapes without one)")
        if dist.is_initialized():
            self.owns = False
        else:
            td = datetime.timedelta(seconds=timeout_s)
            if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
                local = int(os.environ.get("LOCAL_RANK", os.environ["RANK"]))
                torch.cuda.set_device(local)
                dist.init_process_group("nccl", timeout=td, device_id=torch.device("cuda", local))
            else:
                torch.cuda.set_device(0)
                dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1,
                                        timeout=td, device_id=torch.device("cuda", 0))
            self.owns = True
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.device = torch.device("cuda", torch.cuda.current_device())
        self.group = dist.group.WORLD
        self.group_name = self.group.group_name
        try:  # needed by older torch for the symm_mem ops; deprecated (a no-op) in newer
            import warnings

            import torch.distributed._symmetric_memory as symm_mem

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                symm_mem.enable_symm_mem_for_group(self.group_name)
        except Exception:
            pass

    def agree(self, flag: bool) -> bool:
        """True if ``flag`` is true on any rank (keeps the ranks in lockstep)."""
        t = self.torch.tensor([1 if flag else 0], dtype=self.torch.int32, device=self.device)
        if self.world > 1:
            self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return bool(t.item())

    def max_over_ranks(self, x: float) -> float:
        t = self.torch.tensor([x], dtype=self.torch.float64, device=self.device)
        if self.world > 1:
            self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return float(t.item())

    def barrier(self) -> None:
        self.torch.cuda.synchronize()
        if self.world > 1:
            self.dist.barrier()

    def log(self, *a) -> None:
        if self.rank == 0:
            print(*a, flush=True)

    def close(self) -> None:
        if self.owns:
            self.dist.destroy_process_group()


def time_interleaved(impls: dict, iters: int, warmup: int = 2, chunk: int = 6,
                     sleep_cycles: int = 20_000_000) -> dict[str, list[float]]:
    """Per-call GPU times (ms) of every implementation (name -> one zero-argument call),
    launched in alternation by benchmarks/timing.py, each warmed up ``warmup`` times. Same
    sequence on every rank (collectives stay matched)."""
    from timing import alternate

    return alternate({n: [f] * max(warmup, 1) for n, f in impls.items()}, iters, chunk,
                     warmup=None if warmup else 0, sleep_cycles=sleep_cycles)


def median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def compiled_ir(shape: FusedShape, world: int, dtype: str = "bf16") -> str:
    """Graph-level pk IR of the pattern (what pkc's frontend produces for it), B as [K, N]."""
    M, N, K, t = shape.M, shape.N, shape.K, dtype
    if shape.family == "ag":
        Ms = M // world
        return f"""
func.func @main(%x: tensor<{Ms}x{K}x{t}>, %b: tensor<{K}x{N}x{t}>) -> tensor<{M}x{N}x{t}> {{
  %g = pk.all_gather %x {{dim = 0 : i64, world = {world} : i64}} : tensor<{Ms}x{K}x{t}> -> tensor<{M}x{K}x{t}>
  %y = pk.matmul %g, %b : (tensor<{M}x{K}x{t}>, tensor<{K}x{N}x{t}>) -> tensor<{M}x{N}x{t}>
  func.return %y : tensor<{M}x{N}x{t}>
}}"""
    head = f"""
func.func @main(%a: tensor<{M}x{K}x{t}>, %b: tensor<{K}x{N}x{t}>) -> tensor<{{OUT}}x{N}x{t}> {{
  %c = pk.matmul %a, %b : (tensor<{M}x{K}x{t}>, tensor<{K}x{N}x{t}>) -> tensor<{M}x{N}x{t}>
"""
    if shape.family == "rs":
        Mo = M // world
        body = (f"  %o = pk.reduce_scatter %c {{dim = 0 : i64, reduce = \"sum\", world = {world} : i64}}"
                f" : tensor<{M}x{N}x{t}> -> tensor<{Mo}x{N}x{t}>\n")
    else:
        Mo = M
        body = (f"  %o = pk.all_reduce %c {{reduce = \"sum\", world = {world} : i64}}"
                f" : tensor<{M}x{N}x{t}> -> tensor<{M}x{N}x{t}>\n")
    return head.replace("{OUT}", str(Mo)) + body + f"  func.return %o : tensor<{Mo}x{N}x{t}>\n}}"


def collective_ir(op: str, rows: int, cols: int, world: int, dtype: str = "bf16") -> str:
    """Graph-level pk IR of one collective; ``rows x cols`` is the all-reduce buffer, the
    all-gather's output or the reduce-scatter's input."""
    t = dtype
    full = f"tensor<{rows}x{cols}x{t}>"
    part = f"tensor<{rows // world}x{cols}x{t}>"
    if op == "all_reduce":
        return (f"func.func @main(%x: {full}) -> {full} {{\n  %y = pk.all_reduce %x {{reduce = \"sum\", "
                f"world = {world} : i64}} : {full} -> {full}\n  func.return %y : {full}\n}}")
    if op == "all_gather":
        return (f"func.func @main(%x: {part}) -> {full} {{\n  %y = pk.all_gather %x {{dim = 0 : i64, "
                f"world = {world} : i64}} : {part} -> {full}\n  func.return %y : {full}\n}}")
    if op == "reduce_scatter":
        return (f"func.func @main(%x: {full}) -> {part} {{\n  %y = pk.reduce_scatter %x {{dim = 0 : i64, "
                f"reduce = \"sum\", world = {world} : i64}} : {full} -> {part}\n  func.return %y : {part}\n}}")
    raise ValueError(op)


class PkcProgram:
    """pkc's compiled path for one pattern: IR -> ``pipeline`` -> pkc's runtime under
    torch.distributed, with a runner shared by all programs (symmetric buffers are
    allocated on the first call and reused)."""

    _runner = None

    def __init__(self, ir: str, pipeline: str = "default"):
        from pkc.ir import parse_module
        from pkc.passes.pipelines import schedule_for_target
        from pkc.passes.registry import run_pipeline
        from pkc.passes.remarks import format_remarks

        self.module = parse_module(ir, "bench.mlir")
        run_pipeline(pipeline, self.module)
        # what the GPU runs: the kernels at the schedule level (as CompiledProgram.kernel_module)
        self.module, _ = schedule_for_target(self.module, "h200")
        self.remarks = [r.split("remark: ", 1)[-1] for r in format_remarks(self.module)]
        names = [op.name for op in self._main_ops()]
        self.kernels = names.count("pk.kernel")
        self.gemm_outside = "pk.matmul" in names
        self.fused = any(r.startswith("[pk.kernel] fused") for r in self.remarks)

    def _main_ops(self):
        from xdsl.dialects import func

        for op in self.module.walk():
            if isinstance(op, func.FuncOp) and op.sym_name.data == "main":
                return list(op.body.blocks[0].ops)
        return []

    @classmethod
    def runner(cls):
        if cls._runner is None:
            from pkc.runtime.symm import DistributedRunner

            cls._runner = DistributedRunner()
        return cls._runner

    def executable(self):
        from pkc.runtime.executable import _CACHE

        return next(ex for (mod, ex) in _CACHE.values() if mod is self.module)

    def kernel_report(self) -> list[str]:
        """Per kernel: scheduled, or why the portable path runs it (after a call)."""
        from pkc.runtime.executable import _CACHE

        return [line for (mod, ex) in _CACHE.values() if mod is self.module for line in ex.kernel_report]

    def __call__(self, *inputs):
        from pkc.runtime.execute import run_kernel_module_distributed

        return run_kernel_module_distributed(self.module, list(inputs), runner=self.runner())[0]


def measure_link_bw(ctx: Ctx, mib: int = 256, iters: int = 8) -> dict:
    """Per-rank link bandwidth (bytes/s per direction) two ways: an NCCL all-gather's bus
    bandwidth and a pull of a peer's symmetric buffer (every rank pulls at once)."""
    import torch
    import torch.distributed._symmetric_memory as symm_mem

    out: dict = {"mib": mib}
    if ctx.world == 1:
        return out
    n = mib * (1 << 20) // 2
    dev = ctx.device
    x = torch.randn(n // ctx.world, device=dev, dtype=torch.bfloat16)
    g = torch.empty(n, device=dev, dtype=torch.bfloat16)
    t = time_interleaved({"ag": lambda: ctx.dist.all_gather_into_tensor(g, x)}, iters)
    ms = median(t["ag"])
    out["nccl_ag_ms"] = ms
    out["nccl_ag_busbw"] = bus_bw("all_gather", n * 2, ctx.world, ms) * 1e9
    try:
        buf = symm_mem.empty(n, dtype=torch.bfloat16, device=dev)
        h = symm_mem.rendezvous(buf, ctx.group_name)
        buf.fill_(ctx.rank + 1)
        src = (ctx.rank + 1) % ctx.world
        peer = h.get_buffer(src, [n], torch.bfloat16)
        dst = torch.empty_like(buf)
        ctx.barrier()
        t = time_interleaved({"pull": lambda: dst.copy_(peer)}, iters)
        ms = median(t["pull"])
        out["p2p_pull_ms"] = ms
        out["p2p_pull_bw"] = n * 2 / (ms * 1e-3)
        out["p2p_ok"] = bool((dst == src + 1).all().item())  # the peer's values arrived
    except Exception as e:
        out["p2p_error"] = f"{type(e).__name__}: {e}"[:300]
    bws = [v for k, v in out.items() if k in ("nccl_ag_busbw", "p2p_pull_bw") and v]
    out["link_bw"] = max(bws) if bws else None
    # the slowest rank's figure bounds everyone
    if out["link_bw"]:
        out["link_bw"] = -ctx.max_over_ranks(-out["link_bw"])
    return out


def rel_err(x, ref) -> tuple[float, int]:
    xf, rf = x.float(), ref.float()
    nan = int(torch_isnan_count(xf))
    err = float((xf.nan_to_num(0.0) - rf).norm() / max(rf.norm().item(), 1e-30))
    return err, nan


def torch_isnan_count(t) -> int:
    import torch

    return int(torch.isnan(t).sum().item())


def bench_fused_shape(ctx: Ctx, shape: FusedShape, link_bw: float | None, args) -> dict:
    import torch
    import torch.distributed._symmetric_memory  # noqa: F401  (registers torch.ops.symm_mem.fused_*)

    from pkc.target.fused_tuning import fused_gemm_config

    W, dev, fam = ctx.world, ctx.device, shape.family
    M, N, K = shape.M, shape.N, shape.K
    shp = shape.operand_shapes(W)
    row: dict = {"label": shape.label, "family": fam, "M": M, "N": N, "K": K,
                 "comm_bytes": shape.comm_bytes(W), "link_bw": link_bw, "ms": {}, "checks": {},
                 "notes": []}
    gen = torch.Generator(device=dev).manual_seed(1000 + 17 * ctx.rank + M + 3 * N + 7 * K)
    bf = torch.bfloat16
    a = torch.randn(*shp["a"], device=dev, dtype=bf, generator=gen)
    b = (torch.randn(*shp["b"], device=dev, dtype=bf, generator=gen) * K ** -0.5).to(bf)
    b_kn = b.t()
    impls: dict = {}
    outs: dict = {}
    if fam == "ag":
        gathered = torch.empty(M, K, device=dev, dtype=bf)
        c = torch.empty(M, N, device=dev, dtype=bf)
        coll = lambda: ctx.dist.all_gather_into_tensor(gathered, a)  # noqa: E731
        gemm = lambda: torch.mm(gathered, b_kn, out=c)  # noqa: E731
        result = c
    else:
        c = torch.empty(M, N, device=dev, dtype=bf)
        gemm = lambda: torch.mm(a, b_kn, out=c)  # noqa: E731
        if fam == "rs":
            o = torch.empty(M // W, N, device=dev, dtype=bf)
            coll = lambda: ctx.dist.reduce_scatter_tensor(o, c)  # noqa: E731
            result = o
        else:
            coll = lambda: ctx.dist.all_reduce(c)  # noqa: E731
            result = c

    def base():
        if fam == "ag":
            coll()
            gemm()
        else:
            gemm()
            coll()

    base()
    torch.cuda.synchronize()
    ref = result.clone()
    impls.update(base=base, gemm=gemm, coll=coll)
    # torch's fused symmetric-memory ops
    if fam in ("ag", "rs") and not args.no_symm:
        try:
            if fam == "ag":
                def symm():
                    return torch.ops.symm_mem.fused_all_gather_matmul(
                        a, [b_kn], 0, ctx.group_name, return_A=False)[1][0]
            else:
                def symm():
                    return torch.ops.symm_mem.fused_matmul_reduce_scatter(a, b_kn, "sum", 0, ctx.group_name)
            outs["symm"] = symm()
            torch.cuda.synchronize()
            impls["symm"] = symm
            err = None
        except Exception as e:
            err = f"{type(e).__name__}: {e}"[:300]
        if ctx.agree(err is not None):
            impls.pop("symm", None)
            outs.pop("symm", None)
            row["notes"].append(f"symm failed: {err}")
    # the GEMM tile the compiled path picks for the fused kernel (fused_tuning)
    cfg = fused_gemm_config(fam, M, N, K, W, "bf16", "nk",
                            torch.cuda.get_device_properties(dev).multi_processor_count)
    row["pkc_tile"] = cfg.tag()
    # pkc's compiled path: graph-level IR -> pipeline -> Executable (fast path where planned)
    prog = None
    if not args.no_compiled:
        err = None
        try:
            t0 = time.perf_counter()
            prog = PkcProgram(compiled_ir(shape, W), args.pipeline)
            row["pkc_compile_s"] = time.perf_counter() - t0
            row["pkc_fused"] = prog.fused
            row["pkc_gemm_outside"] = prog.gemm_outside
            row["pkc_remarks"] = prog.remarks[:6]
            # B as an nn.Linear weight's transpose (a view): the fast path takes it as [N, K]
            t0 = time.perf_counter()
            outs["pkc"] = prog(a, b_kn)
            torch.cuda.synchronize()
            row["pkc_first_call_s"] = time.perf_counter() - t0
            row["pkc_path"] = prog.kernel_report()
            impls["pkc"] = lambda: prog(a, b_kn)
        except Exception as e:
            err = f"{type(e).__name__}: {e}"[:400]
            traceback.print_exc()
        if ctx.agree(err is not None):
            impls.pop("pkc", None)
            outs.pop("pkc", None)
            prog = None
            row["notes"].append(f"pkc compiled path failed on some rank: {err}")
    for name, x in outs.items():
        e, nan = rel_err(x, ref)
        row["checks"][name] = {"rel_err": e, "nan": nan, "ok": nan == 0 and e < 2e-2}
    outs.clear()
    # timing (interleaved, CUDA events)
    ctx.barrier()
    per = time_interleaved(impls, args.iters)
    row["timing"] = dict(timing_stats)      # chunks left out: the host fell behind
    for n, ts in per.items():
        row["ms"][n] = median(ts)
        row.setdefault("iqr", {})[n] = (statistics.quantiles(ts, n=4)[2] - statistics.quantiles(ts, n=4)[0]
                                        if len(ts) >= 4 else None)
    if prog is not None:   # where the compiled program's time goes, step by step
        try:
            from pkc.runtime.executable import step_times

            def calls():
                for _ in range(5):
                    prog(a, b_kn)
            row["pkc_steps_ms"] = step_times(prog.executable(), calls)
        except Exception as e:
            row["notes"].append(f"pkc step profile: {type(e).__name__}: {e}"[:200])
    # the results after many launches (epochs) are still right
    if prog is not None:
        try:
            after = prog(a, b_kn)
            torch.cuda.synchronize()
            e, nan = rel_err(after, ref)
            row["checks"]["pkc_after_timing"] = {"rel_err": e, "nan": nan, "ok": nan == 0 and e < 2e-2}
        except Exception as e:
            row["notes"].append(f"pkc after timing: {type(e).__name__}: {e}"[:300])
            row["checks"]["pkc_after_timing"] = {"ok": False, "error": str(e)[:200]}
    return row


def run_sweep(args) -> int:
    import torch

    ctx = Ctx()
    W = ctx.world
    out_dir = Path(args.out) if args.out else results_dir()
    t_start = time.time()
    res = {"bench": "fused_sweep", "world": W, "device": torch.cuda.get_device_name(ctx.device),
           "machine": machine_tag(), "date": datetime.date.today().isoformat(),
           "torch": torch.__version__, "iters": args.iters, "pipeline": args.pipeline,
           "env": {k: os.environ.get(k) for k in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST",
                                                  "NVSHMEM_DISABLE_NVLS")},
           "shapes": []}
    link = measure_link_bw(ctx)
    res["link"] = link
    ctx.log(f"fused sweep: W={W} on {res['device']}; link bandwidth {link}")
    shapes = fused_shapes(W, ns=tuple(args.ns), tokens=tuple(args.tokens), llama=not args.no_llama,
                          families=tuple(args.families))
    shapes = priority_order(shapes)
    if args.max_shapes:
        shapes = shapes[:args.max_shapes]
    for shape in shapes:
        if ctx.agree(time.time() - t_start > args.budget_s):
            res.setdefault("skipped", []).append(shape.label)
            continue
        t0 = time.time()
        try:
            row = bench_fused_shape(ctx, shape, link.get("link_bw"), args)
        except Exception as e:
            traceback.print_exc()
            row = {"label": shape.label, "family": shape.family, "M": shape.M, "N": shape.N,
                   "K": shape.K, "error": f"{type(e).__name__}: {e}"[:500]}
            res["shapes"].append(row)
            ctx.log("ERROR", shape.label, row["error"])
            if "illegal" in str(e) or "launch failed" in str(e) or "unspecified" in str(e):
                break  # the CUDA context is gone
            continue
        row["secs"] = round(time.time() - t0, 2)
        res["shapes"].append(row)
        if ctx.rank == 0:
            s = summarize_fused(row)
            print(f"[{row['secs']:6.1f} s] {shape.label:28s} base {row['ms'].get('base'):.3f} ms  "
                  f"speedups pkc {s['speedup']['pkc']}  symm {s['speedup']['symm']}  "
                  f"roof {s['speedup']['roofline']}  checks "
                  f"{ {k: round(v.get('rel_err', -1), 5) for k, v in row['checks'].items()} } "
                  f"{'; '.join(row['notes'])}" + (f" pkc steps {row['pkc_steps_ms']}"
                                                  if row.get("pkc_steps_ms") else "")
                  + (f" [late chunks {row['timing']['late_chunks']}]"
                     if row.get("timing", {}).get("late_chunks") else ""), flush=True)
            write_json(out_dir / "fused_sweep.json", res)
    res["secs"] = round(time.time() - t_start, 1)
    if ctx.rank == 0:
        write_json(out_dir / "fused_sweep.json", res)
        if not args.no_plot and plot_fused(res, out_dir / "fused_sweep.png"):
            print(f"plot: {out_dir / 'fused_sweep.png'}")
        print(f"\nfused sweep W={W} ({res['device']}), {args.iters} interleaved calls per "
              f"implementation, medians; x = speedup over cuBLAS+NCCL (base ms / ms, >1 faster);\n"
              f"symm = torch symm_mem fused op, pkc = compiled default pipeline (events per call, as all), "
              f"roof = "
              f"max(GEMM, bytes/link) limit, c/c = est. comm / GEMM time; link "
              f"{(link.get('link_bw') or 0) / 1e9:.0f} GB/s")
        print(fused_table(res))
        print(f"json: {out_dir / 'fused_sweep.json'}")
    ctx.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="results folder (default benchmarks/results/<machine>_<date>)")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--ns", type=int, nargs="+", default=list(PK_NS))
    ap.add_argument("--tokens", type=int, nargs="+", default=[8192])
    ap.add_argument("--families", nargs="+", choices=FAMILIES, default=list(FAMILIES))
    ap.add_argument("--no-llama", action="store_true")
    ap.add_argument("--no-symm", action="store_true")
    ap.add_argument("--no-compiled", action="store_true")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--pipeline", default="default")
    ap.add_argument("--budget-s", type=float, default=600.0, help="start no new shape after this")
    ap.add_argument("--max-shapes", type=int, default=0)
    ap.add_argument("--list", action="store_true", help="print the shapes and their traffic; no GPU")
    ap.add_argument("--world", type=int, default=None, help="with --list: the world size")
    ap.add_argument("--device-run", action="store_true", help="the whole issue-7 device run")
    ap.add_argument("--phase-a-s", type=int, default=120, help="device run: examples + robustness limit")
    ap.add_argument("--collectives-s", type=int, default=40, help="device run: collectives limit")
    ap.add_argument("--fused-s", type=int, default=75, help="device run: fused sweep limit")
    args = ap.parse_args(argv)
    if args.device_run:
        out = args.out or os.environ.get("OUT") or str(results_dir())
        from device_run import device_run

        return device_run(out, {"phase_a": args.phase_a_s, "collectives": args.collectives_s,
                                "fused": args.fused_s})
    if args.list:
        W = args.world or int(os.environ.get("WORLD_SIZE", "8"))
        rows = []
        for s in priority_order(fused_shapes(W, ns=tuple(args.ns), tokens=tuple(args.tokens),
                                             llama=not args.no_llama, families=tuple(args.families))):
            rows.append([s.label, FAMILY_NAMES[s.family], f"{s.M}x{s.N}x{s.K}", s.flops() / 1e12,
                         s.comm_bytes(W) / 2 ** 20])
        print(f"W={W}")
        print(format_table(["shape", "family", "MxNxK (per rank)", "TFLOP", "MiB in/rank"], rows))
        return 0
    return run_sweep(args)


if __name__ == "__main__":
    sys.exit(main())
