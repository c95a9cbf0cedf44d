"""The IR-built MoE kernel (graph all_to_all -> grouped matmul -> all_to_all -> the default
pipeline (overlap forced) -> schedule-moe -> sm_90a lowering -> PTX), with tokens per
(rank, expert) known only at run time.

    python benchmarks/moe_ir.py --out DIR       # on the GPU machine (xdsl carried as wheels)
    python benchmarks/moe_ir.py --list          # the cases, no GPU

1. Correctness in the virtual world (W ranks on W green-context lanes of one H200),
   W = 2, 4, 8, unequal random loads per (rank, expert) block (some empty, some full),
   against torch (each valid row's product in f32, rounded to bf16: a few bf16 steps of
   the scale), then again with other counts (the epochs and persistent buffers reused).
2. Timing at W = 1 against torch: ``all_to_all_single`` (1-rank NCCL group) of the packed
   tokens + ``torch._grouped_mm`` (a loop of ``mm`` where it is missing) + ``all_to_all_single``
   of the result. Shapes (per rank; one GEMM of the expert MLP, the up projection: the
   dispatched tokens are hidden-wide):
   * Mixtral-8x7B-like: hidden K = 4096, ffn N = 14336, E = 8 experts, 4096 tokens top-2 =
     8192 routed rows, capacity C = 2048 per expert;
   * DeepSeek-V3-like (one rank of an EP-8 group): hidden K = 7168, expert ffn N = 2048,
     E = 32 local experts (256 / 8), 8192 routed rows, capacity C = 512.
   Loads: counts drawn from a skewed distribution (expert e's share ~ 1 / (e + 2)),
   clipped to C, summing to about the routed rows. Both sides get the same counts.
   Launches alternate, each behind a ``torch.cuda._sleep``; medians over ``rounds``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)

# correctness cases: (W, E, C, N, K)
CHECKS = [(2, 4, 200, 264, 136), (4, 2, 130, 256, 128), (8, 2, 72, 128, 64)]
# timing cases at W = 1: (name, E, C, N, K, routed rows)
TIMINGS = [("mixtral-8x7b up", 8, 2048, 14336, 4096, 8192),
           ("deepseek-v3 expert up", 32, 512, 2048, 7168, 8192)]


def module_text(W: int, E: int, C: int, N: int, K: int, dt: str = "bf16") -> str:
    """all_to_all -> grouped matmul with per-expert [N, K] weights (transposed) -> all_to_all."""
    return (
        f"func.func @moe(%x: tensor<{W * E}x{C}x{K}x{dt}>, %w: tensor<{E}x{N}x{K}x{dt}>) "
        f"-> tensor<{W * E}x{C}x{N}x{dt}> {{\n"
        f"  %wt = pk.transpose %w {{perm = [0 : i64, 2 : i64, 1 : i64]}} : tensor<{E}x{N}x{K}x{dt}> "
        f"-> tensor<{E}x{K}x{N}x{dt}>\n"
        f"  %d = pk.all_to_all %x {{split_dim = 0 : i64, concat_dim = 1 : i64, world = {W} : i64}} : "
        f"tensor<{W * E}x{C}x{K}x{dt}> -> tensor<{E}x{W * C}x{K}x{dt}>\n"
        f"  %y = pk.matmul %d, %wt : (tensor<{E}x{W * C}x{K}x{dt}>, tensor<{E}x{K}x{N}x{dt}>) "
        f"-> tensor<{E}x{W * C}x{N}x{dt}>\n"
        f"  %o = pk.all_to_all %y {{split_dim = 1 : i64, concat_dim = 0 : i64, world = {W} : i64}} : "
        f"tensor<{E}x{W * C}x{N}x{dt}> -> tensor<{W * E}x{C}x{N}x{dt}>\n"
        f"  func.return %o : tensor<{W * E}x{C}x{N}x{dt}>\n}}\n")


def compile_ir(W: int, E: int, C: int, N: int, K: int, dt: str = "bf16"):
    """(compiled kernel, its pk.kernel) of the IR path (W = 1 keeps its single-rank
    all_to_alls as the kernel's: keep-single-rank)."""
    from pkc.codegen import compile_kernel
    from pkc.codegen.emit import kernels_of
    from pkc.ir import make_context, parse_module, verify_module
    from pkc.passes.registry import parse_pipeline

    m = parse_module(module_text(W, E, C, N, K, dt), "moe_ir.mlir")
    ctx = make_context()
    for p in parse_pipeline("default{force=true},schedule-moe,dce"):
        p.apply(ctx, m)
    verify_module(m)
    (kop,) = [k for k in kernels_of(m) if k.schedule() is not None]
    return compile_kernel(kop, "sm_90a"), kop


def reference(X, Wt, counts, W: int, E: int, C: int, N: int):
    """Per rank, per block b = q*E + e: (valid rows, the f32 product of X's block b's valid
    rows with expert e of rank q)."""
    out = []
    for r in range(W):
        blocks = []
        for q in range(W):
            for e in range(E):
                n = int(counts[r][q * E + e])
                xb = X[r][(q * E + e) * C:(q * E + e) * C + n].float()
                blocks.append((n, xb @ Wt[q][e * N:(e + 1) * N].float().t()))
        out.append(blocks)
    return out


def max_error(outs, ref) -> tuple[float, float]:
    """(max abs error over valid rows, max abs reference value)."""
    err, scale = 0.0, 0.0
    for O, blocks in zip(outs, ref):
        for b, (n, want) in enumerate(blocks):
            if n:
                err = max(err, float((O[b, :n].float().cpu() - want.cpu()).abs().max()))
                scale = max(scale, float(want.abs().max()))
    return err, scale


def skewed_counts(E: int, C: int, rows: int, gen, device="cpu"):
    import torch

    share = torch.tensor([1.0 / (e + 2) for e in range(E)])
    share = share[torch.randperm(E, generator=gen)]
    c = (share / share.sum() * rows).round().clamp(max=C).to(torch.int32)
    return c.to(device)


def _check_world(W, E, C, N, K) -> dict:
    import torch
    from pkc.runtime.peers import VirtualPeers
    from pkc.runtime.scheduled_moe import ScheduledMoe

    ck, kop = compile_ir(W, E, C, N, K)
    peers = VirtualPeers(W)
    run = ScheduledMoe(ck.ptx, ck.meta, peers, owner=("moe-check", W), timeout_ns=500_000_000)
    gen = torch.Generator().manual_seed(W)
    X = [torch.randn(W * E * C, K, generator=gen).to(torch.bfloat16).cuda() for _ in range(W)]
    Wt = [(torch.randn(E * N, K, generator=gen) / K ** 0.5).to(torch.bfloat16).cuda() for _ in range(W)]
    row = {"W": W, "E": E, "C": C, "N": N, "K": K, "grid": run.grid}
    for it in range(2):
        counts = [torch.randint(0, C + 1, (W * E,), generator=gen).to(torch.int32) for _ in range(W)]
        counts[0][0], counts[-1][-1] = 0, C          # an empty block and a full one
        outs = run.run(X, Wt, [c.cuda() for c in counts])
        torch.cuda.synchronize()
        run.check()
        err, scale = max_error([outs[r] for r in range(W)],
                               reference([x.cpu() for x in X], [w.cpu() for w in Wt], counts, W, E, C, N))
        row[f"launch{it}"] = {"max_abs_err": err, "scale": scale, "rows": int(sum(int(c.sum()) for c in counts)),
                              "correct": err <= 2 ** -6 * scale}
    row["correct"] = all(row[f"launch{i}"]["correct"] for i in range(2))
    return row


def _time(fns, rounds):
    import torch

    ts = [[] for _ in fns]
    for i in range(rounds):
        order = list(range(len(fns)))
        order = order[i % len(fns):] + order[:i % len(fns)]
        for j in order:
            torch.cuda._sleep(1_000_000)
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fns[j]()
            e.record()
            torch.cuda.synchronize()
            ts[j].append(s.elapsed_time(e) * 1e-3)
    return ts


def _time_case(name, E, C, N, K, rows, rounds) -> dict:
    import torch
    import torch.distributed as dist
    from pkc.runtime.peers import VirtualPeers
    from pkc.runtime.scheduled_moe import ScheduledMoe

    ck, kop = compile_ir(1, E, C, N, K)
    peers = VirtualPeers(1)
    run = ScheduledMoe(ck.ptx, ck.meta, peers, owner=("moe-time", name), timeout_ns=2_000_000_000)
    gen = torch.Generator().manual_seed(1)
    counts = skewed_counts(E, C, rows, gen)
    torch.manual_seed(1)
    X = torch.randn(E * C, K, device="cuda").to(torch.bfloat16)
    w = (torch.randn(E, N, K, device="cuda") / K ** 0.5).to(torch.bfloat16)
    Wt = w.reshape(E * N, K)
    cnt = counts.cuda()
    # torch: packed tokens, a2a, grouped mm, a2a
    packed = torch.cat([X[e * C:e * C + int(counts[e])] for e in range(E)])
    splits = [int(packed.shape[0])]
    offs = torch.cumsum(counts, 0).to(torch.int32).cuda()
    recv = torch.empty_like(packed)
    y = torch.empty(packed.shape[0], N, device="cuda", dtype=torch.bfloat16)
    back = torch.empty_like(y)
    wk = w.transpose(1, 2)                           # [E, K, N] view of the [E, N, K] weights
    have_gmm = hasattr(torch, "_grouped_mm")

    def torch_path():
        dist.all_to_all_single(recv, packed, splits, splits)
        if have_gmm:
            yy = torch._grouped_mm(recv, wk, offs=offs)
        else:
            yy = torch.cat([recv[a:b] @ wk[e] for e, (a, b) in
                            enumerate(zip([0] + offs.tolist()[:-1], offs.tolist()))])
        dist.all_to_all_single(back, yy, splits, splits)
        return back

    def ir_path():
        return run.run([X], [Wt], [cnt])

    out = ir_path()[0]
    ref = torch_path()
    torch.cuda.synchronize()
    run.check()
    err, start = 0.0, 0
    for e in range(E):
        n = int(counts[e])
        if n:
            err = max(err, float((out[e, :n].float() - ref[start:start + n].float()).abs().max()))
        start += n
    scale = float(ref.float().abs().max())
    row = {"case": name, "E": E, "C": C, "N": N, "K": K, "rows": int(counts.sum()),
           "counts": counts.tolist(), "grouped_mm": have_gmm, "grid": run.grid,
           "max_abs_err_vs_torch": err, "scale": scale, "correct": err <= 2 ** -6 * scale,
           "registers": run.kernel.num_regs}
    for _ in range(3):
        ir_path()
        torch_path()
    t_ir, t_torch = _time([ir_path, torch_path], rounds)
    run.check()
    flops = 2.0 * int(counts.sum()) * N * K
    med = [statistics.median(t) for t in (t_ir, t_torch)]
    row.update({"us_ir": med[0] * 1e6, "us_torch": med[1] * 1e6,
                "torch_over_ir": statistics.median(b / a for a, b in zip(t_ir, t_torch)),
                "tflops_ir": flops / med[0] / 1e12, "tflops_torch": flops / med[1] / 1e12})
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out/moe_ir")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    if args.list:
        for c in CHECKS:
            print("check W=%d E=%d C=%d N=%d K=%d" % c)
        for c in TIMINGS:
            print("time", *c)
        return
    import torch
    import torch.distributed as dist

    os.makedirs(args.out, exist_ok=True)
    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29533", rank=0, world_size=1,
                            device_id=torch.device("cuda", 0))
    rows = []
    for c in CHECKS:
        try:
            row = _check_world(*c)
        except Exception as e:      # one failing case must not hide the others
            row = {"check": list(c), "error": f"{type(e).__name__}: {e}"}
        rows.append(row)
        print(json.dumps(row), flush=True)
    for c in TIMINGS:
        try:
            row = _time_case(*c, rounds=args.rounds)
        except Exception as e:
            row = {"case": c[0], "error": f"{type(e).__name__}: {e}"}
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "counts"}), flush=True)
    with open(os.path.join(args.out, "moe_ir.json"), "w") as f:
        json.dump({"torch": torch.__version__, "device": torch.cuda.get_device_name(), "rows": rows},
                  f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
