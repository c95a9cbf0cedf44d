"""Whole layers as users run them: eager vs Inductor vs pkc's backend (issue 18).

Llama-3-70B and Llama-3-8B tensor-parallel layers at TP-``--tp`` per-rank sizes (default
TP-8: 70B F/W = 3584, 8 query heads and 1 KV head per rank), run at W = 1 on one GPU in a
1-rank NCCL group (every collective of one rank is the identity):

* ``mlp``: RMSNorm -> gate, up -> SiLU(gate) * up -> down -> all_reduce -> residual add;
* ``attn``: RMSNorm -> q, k, v -> RoPE -> SDPA (causal for prefill; decode attends to a
  4096-token KV cache concatenated with the T new tokens) -> o -> all_reduce -> residual;
* ``decoder``: ``attn`` then ``mlp``.

Prefill T in {512, 4096, 8192}, decode T in {1, 16, 64}; bf16 and f32. Each case times
eager, ``torch.compile`` (Inductor) and ``torch.compile(backend=pkc.backend(...))`` on the
same module: per call as a user sees it (host included: calls back to back, one
synchronization, wall time / calls) and GPU time (each launch between CUDA events, the
implementations alternated, the host queued ahead by a sleep kernel; medians). First-call
(compile) times are recorded too. ``--modes reduce-overhead`` adds CUDA-graph variants.

    python benchmarks/models.py --list                      # the cases (no GPU needed)
    python benchmarks/models.py --out DIR [--budget-s 300]  # run (GPU), table + JSON + plot

Results go to ``benchmarks/results/<machine>_<date>/models.{json,md,png}`` unless ``--out``.
Cases run in priority order (the issue's 70B MLP at T = 4096 first) until the budget is
spent; the JSON says which were left out.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass

ARCHS = {
    # hidden, FFN, query heads, KV heads, head dim (Meta's Llama-3 configs)
    "llama3-70b": dict(d=8192, f=28672, heads=64, kv_heads=8, head_dim=128),
    "llama3-8b": dict(d=4096, f=14336, heads=32, kv_heads=8, head_dim=128),
}
LAYERS = ("mlp", "attn", "decoder")
PREFILL = (512, 4096, 8192)
DECODE = (1, 16, 64)
DTYPES = ("bf16", "f32")
CACHE_LEN = 4096


@dataclass(frozen=True)
class Case:
    model: str
    layer: str
    tokens: int
    dtype: str
    tp: int = 8
    mode: str = "default"

    @property
    def phase(self) -> str:
        return "decode" if self.tokens in DECODE else "prefill"

    @property
    def label(self) -> str:
        m = "" if self.mode == "default" else f" {self.mode}"
        return f"{self.model} {self.layer} {self.phase} T={self.tokens} {self.dtype} TP-{self.tp}{m}"

    def sizes(self) -> dict:
        a = ARCHS[self.model]
        return dict(d=a["d"], f=a["f"] // self.tp, heads=a["heads"] // self.tp,
                    kv_heads=max(1, a["kv_heads"] // self.tp), head_dim=a["head_dim"])


def all_cases(tp: int = 8, modes=("default",)) -> list[Case]:
    """Every case once, in priority order (a run with a time budget gets the most telling
    first): the issue's 70B MLP at T = 4096; bf16 at T = 4096 and decode T = 1 of every
    layer; CUDA graphs at T = 1 (if asked for); f32 of the 8B MLP and decoder at T = 512
    and 1; then the other token counts, then everything else."""
    every = []
    for dtype in DTYPES:
        for mode in modes:
            for t in PREFILL + DECODE:
                for model in ARCHS:
                    for layer in LAYERS:
                        if mode != "default" and t not in DECODE:
                            continue        # CUDA graphs matter where the host dominates
                        every.append(Case(model, layer, t, dtype, tp, mode))

    def pick(**want):
        return [c for c in every if all(
            getattr(c, k) in v if isinstance(v, tuple) else getattr(c, k) == v for k, v in want.items())]
    tiers = [
        pick(model="llama3-70b", layer="mlp", tokens=4096, dtype="bf16", mode="default"),
        pick(dtype="bf16", mode="default", tokens=(4096, 1)),
        pick(dtype="bf16", mode="reduce-overhead", tokens=1),
        pick(dtype="f32", mode="default", model="llama3-8b", layer=("mlp", "decoder"), tokens=(512, 1)),
        pick(dtype="bf16", mode="default", tokens=(512, 16)),
        pick(dtype="bf16", mode="default", tokens=(8192, 64)),
        every,
    ]
    out: list[Case] = []
    for tier in tiers:
        out += [c for c in tier if c not in out]
    return out


# ---------------------------------------------------------------------- the layers


def build(case: Case, device: str = "cuda", seed: int = 0):
    """The layer of ``case`` (weights: seeded normals, scaled) and its input."""
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F

    s = case.sizes()
    d, f, hq, hkv, hd = s["d"], s["f"], s["heads"], s["kv_heads"], s["head_dim"]
    dtype = {"bf16": torch.bfloat16, "f32": torch.float32}[case.dtype]
    T = case.tokens
    decode = case.phase == "decode"

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.RMSNorm(d, eps=1e-5)
            self.gate = nn.Linear(d, f, bias=False)
            self.up = nn.Linear(d, f, bias=False)
            self.down = nn.Linear(f, d, bias=False)

        def forward(self, x):
            h = self.norm(x)
            y = self.down(F.silu(self.gate(h)) * self.up(h))
            dist.all_reduce(y)
            return x + y

    def rope(x, cos, sin):
        x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.RMSNorm(d, eps=1e-5)
            self.q = nn.Linear(d, hq * hd, bias=False)
            self.k = nn.Linear(d, hkv * hd, bias=False)
            self.v = nn.Linear(d, hkv * hd, bias=False)
            self.o = nn.Linear(hq * hd, d, bias=False)
            pos = torch.arange(CACHE_LEN if decode else 0, (CACHE_LEN if decode else 0) + T).float()
            inv = 1.0 / (500000.0 ** (torch.arange(0, hd, 2).float() / hd))
            ang = torch.outer(pos, inv).repeat(1, 2)
            self.register_buffer("cos", ang.cos())
            self.register_buffer("sin", ang.sin())
            if decode:
                self.register_buffer("k_cache", torch.randn(1, hkv, CACHE_LEN, hd))
                self.register_buffer("v_cache", torch.randn(1, hkv, CACHE_LEN, hd))

        def forward(self, x):
            B = x.shape[0]
            h = self.norm(x)
            q = self.q(h).view(B, T, hq, hd).transpose(1, 2)
            k = self.k(h).view(B, T, hkv, hd).transpose(1, 2)
            v = self.v(h).view(B, T, hkv, hd).transpose(1, 2)
            q, k = rope(q, self.cos, self.sin), rope(k, self.cos, self.sin)
            if decode:
                k = torch.cat((self.k_cache, k), dim=2)
                v = torch.cat((self.v_cache, v), dim=2)
            S = k.shape[2]
            k = k[:, :, None].expand(B, hkv, hq // hkv, S, hd).reshape(B, hq, S, hd)
            v = v[:, :, None].expand(B, hkv, hq // hkv, S, hd).reshape(B, hq, S, hd)
            o = F.scaled_dot_product_attention(q, k, v, is_causal=not decode)
            y = self.o(o.transpose(1, 2).reshape(B, T, hq * hd))
            dist.all_reduce(y)
            return x + y

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn, self.mlp = Attention(), MLP()

        def forward(self, x):
            return self.mlp(self.attn(x))

    gen = torch.Generator().manual_seed(seed)
    m = {"mlp": MLP, "attn": Attention, "decoder": Decoder}[case.layer]()
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * p.shape[-1] ** -0.5)
    m = m.to(device=device, dtype=dtype).eval()
    x = torch.randn(1, T, d, generator=gen).to(device=device, dtype=dtype)
    return m, x


# ---------------------------------------------------------------------- timing


def _host_ms(fn, calls: int, rounds: int) -> list[float]:
    import torch

    out = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) * 1e3 / calls)
    return out


def _no_addmm():
    """A context in which Inductor does not fold ``mm + add`` into ``addmm`` (an A/B probe
    of that heuristic: pkc's program at W = 1 has the residual add right after the down
    projection, where Inductor's own graph has the all_reduce in between)."""
    import contextlib

    from torch._inductor.fx_passes import post_grad

    @contextlib.contextmanager
    def ctx():
        old = post_grad.should_prefer_unfused_addmm
        post_grad.should_prefer_unfused_addmm = lambda match: True
        try:
            yield
        finally:
            post_grad.should_prefer_unfused_addmm = old
    return ctx()


def run_case(case: Case, iters: int = 24, ab_addmm: bool = False) -> dict:
    import torch

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import timing

    import pkc

    torch._dynamo.reset()
    m, x = build(case)
    row = {"case": asdict(case), "label": case.label}
    mode = None if case.mode == "default" else case.mode
    variants = {"eager": m}
    variants["inductor"] = torch.compile(m, fullgraph=True, dynamic=False, mode=mode)
    be = pkc.backend(pipeline="default")
    variants["pkc"] = torch.compile(m, backend=be, fullgraph=True, dynamic=False, mode=mode)
    if ab_addmm:
        variants["pkc_noaddmm"] = torch.compile(m, backend=pkc.backend(pipeline="default", cache=False),
                                                fullgraph=True, dynamic=False, mode=mode)
    outs, first = {}, {}
    with torch.no_grad():
        for name, fn in variants.items():
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            try:
                if name == "pkc_noaddmm":
                    with _no_addmm():
                        outs[name] = fn(x).float()
                else:
                    outs[name] = fn(x).float()
            except Exception as err:  # noqa: BLE001 - one failing variant is reported, the rest timed
                row[f"{name}_error"] = f"{type(err).__name__}: {str(err)[:400]}"
                continue
            torch.cuda.synchronize()
            first[name] = time.perf_counter() - t0
        row["first_call_s"] = first
        ref = outs["eager"]
        scale = ref.abs().max().item()
        row["max_err_rel"] = {n: (o - ref).abs().max().item() / scale for n, o in outs.items() if n != "eager"}
        if be.compile_times:
            row["pkc_compile"] = be.compile_times[-1]
            row["pkc_remarks"] = [r for r in be.programs[-1].remarks() if r.startswith("pkc:")]
        live = {n: (lambda f=variants[n]: f(x)) for n in outs}
        for f in live.values():              # warm-up (CUDA graphs record here)
            for _ in range(3):
                f()
        gpu = timing.alternate({n: [f] for n, f in live.items()}, iters, chunk=4)
        row["gpu_ms"] = {n: statistics.median(v) for n, v in gpu.items()}
        calls = 50 if case.phase == "decode" else max(3, min(20, int(20 * 512 / case.tokens)))
        host = {n: [] for n in live}
        for _ in range(5):                   # alternated rounds
            for n, f in live.items():
                host[n] += _host_ms(f, calls, 1)
        row["host_ms"] = {n: statistics.median(v) for n, v in host.items()}
    for k in ("gpu_ms", "host_ms"):
        t = row[k]
        if "pkc" in t and "inductor" in t:
            row[f"{k[:-3]}_pkc_vs_inductor"] = t["inductor"] / t["pkc"]
        if "pkc" in t and "eager" in t:
            row[f"{k[:-3]}_pkc_vs_eager"] = t["eager"] / t["pkc"]
    del variants, live, outs, m, x
    torch._dynamo.reset()
    torch.cuda.empty_cache()
    return row


# ---------------------------------------------------------------------- output


def table(rows: list[dict]) -> str:
    head = ("| case | eager ms (host / GPU) | Inductor ms | pkc ms | pkc/Ind host | pkc/Ind GPU | "
            "first call s (Ind / pkc) | err (pkc) |")
    lines = [head, "|" + "---|" * 8]
    for r in rows:
        h, g = r.get("host_ms", {}), r.get("gpu_ms", {})

        def pair(n):
            return f"{h[n]:.3f} / {g[n]:.3f}" if n in h and n in g else r.get(f"{n}_error", "n/a")[:40]
        fc = r.get("first_call_s", {})
        lines.append(
            f"| {r['label']} | {pair('eager')} | {pair('inductor')} | {pair('pkc')} | "
            f"{r.get('host_pkc_vs_inductor', math.nan):.2f}x | {r.get('gpu_pkc_vs_inductor', math.nan):.2f}x | "
            f"{fc.get('inductor', math.nan):.1f} / {fc.get('pkc', math.nan):.1f} | "
            f"{r.get('max_err_rel', {}).get('pkc', math.nan):.1e} |")
    return "\n".join(lines)


def plot(rows: list[dict], path: str) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    rows = [r for r in rows if "gpu_pkc_vs_inductor" in r]
    if not rows:
        return
    fig, ax = plt.subplots(figsize=(max(6, 0.45 * len(rows)), 4.5))
    xs = range(len(rows))
    ax.bar([i - 0.2 for i in xs], [r["host_pkc_vs_inductor"] for r in rows], 0.4, label="host-inclusive")
    ax.bar([i + 0.2 for i in xs], [r["gpu_pkc_vs_inductor"] for r in rows], 0.4, label="GPU time")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(list(xs))
    ax.set_xticklabels([r["label"].replace(" TP-8", "") for r in rows], rotation=75, fontsize=7)
    ax.set_ylabel("pkc speed / Inductor (higher is better)")
    ax.set_title("pkc backend vs Inductor at W = 1 (one GPU, 1-rank NCCL group)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def default_out() -> str:
    import datetime

    name = "cpu"
    try:
        import torch

        if torch.cuda.is_available():
            name = torch.cuda.get_device_name().split()[-1].lower()
    except Exception:  # noqa: BLE001
        pass
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(here, "results", f"{name}_{datetime.date.today().isoformat()}")


def probe(label_words: str, device: str) -> dict:
    """One process's compile of one case with pkc's backend: the first call's time (capture,
    passes or the disk cache, Inductor) - run twice with the same cache folders to see a
    cold and a warm compile."""
    import torch

    import pkc

    case = next(c for c in all_cases() if all(w in c.label for w in label_words.split()))
    m, x = build(case, device=device)
    be = pkc.backend(pipeline="default")
    cm = torch.compile(m, backend=be, fullgraph=True, dynamic=False)
    t0 = time.perf_counter()
    with torch.no_grad():
        y = cm(x)
        if device != "cpu":
            torch.cuda.synchronize()
    first = time.perf_counter() - t0
    with torch.no_grad():
        err = ((y.float() - m(x).float()).abs().max() / m(x).float().abs().max()).item()
    return {"label": case.label, "device": device, "first_call_s": first,
            "compile": be.compile_times[-1], "max_err_rel": err}


def _init_group(device: str) -> None:
    import torch
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    if device == "cpu":
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    else:
        dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--list", action="store_true", help="print the cases and exit (no GPU needed)")
    ap.add_argument("--tp", type=int, default=8, help="per-rank sizes of this TP degree (default 8)")
    ap.add_argument("--modes", default="default", help="comma-separated: default, reduce-overhead")
    ap.add_argument("--only", default="", help="run the cases whose label contains every word of this; "
                    "'|' separates alternatives ('8b T=8192 f32|decode f32')")
    ap.add_argument("--max-cases", type=int, default=0)
    ap.add_argument("--budget-s", type=float, default=0, help="start no case after this many seconds")
    ap.add_argument("--iters", type=int, default=24)
    ap.add_argument("--ab-addmm", action="store_true",
                    help="also time pkc with Inductor's mm + add -> addmm folding off (pkc_noaddmm)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--probe", default="", help="time one process's compile of the first case "
                    "whose label has these words (JSON on stdout)")
    ap.add_argument("--device", default="cuda", help="for --probe: cuda or cpu")
    args = ap.parse_args(argv)
    if args.probe:
        _init_group(args.device)
        print(json.dumps(probe(args.probe, args.device)))
        return 0
    cases = all_cases(args.tp, tuple(args.modes.split(",")))
    if args.only:
        alternatives = [a.split() for a in args.only.split("|")]
        cases = [c for c in cases if any(all(w in c.label for w in words) for words in alternatives)]
    if args.max_cases:
        cases = cases[: args.max_cases]
    if args.list:
        for c in cases:
            s = c.sizes()
            print(f"{c.label}  (D={s['d']} F/W={s['f']} heads/W={s['heads']} kv/W={s['kv_heads']})")
        print(f"{len(cases)} cases")
        return 0
    import torch
    import torch.distributed as dist

    if not torch.cuda.is_available():
        print("models.py: no GPU; --list prints the cases", file=sys.stderr)
        return 2
    torch._dynamo.config.cache_size_limit = 1024
    if hasattr(torch._dynamo.config, "recompile_limit"):
        torch._dynamo.config.recompile_limit = 1024
    _init_group("cuda")
    out = args.out or default_out()
    os.makedirs(out, exist_ok=True)
    rows, left = [], []
    t_start = time.perf_counter()
    for c in cases:
        if args.budget_s and time.perf_counter() - t_start > args.budget_s:
            left.append(c.label)
            continue
        t0 = time.perf_counter()
        try:
            row = run_case(c, args.iters, args.ab_addmm)
        except Exception as err:  # noqa: BLE001 - the case is reported, the run goes on
            row = {"case": asdict(c), "label": c.label, "error": f"{type(err).__name__}: {str(err)[:600]}"}
        row["case_s"] = time.perf_counter() - t0
        rows.append(row)
        print(table([row]).splitlines()[-1] if "error" not in row else f"{c.label}: {row['error']}", flush=True)
        with open(os.path.join(out, "models.json"), "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "world": 1, "rows": rows, "left_out": left}, f, indent=1)
    with open(os.path.join(out, "models.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                   "world": 1, "rows": rows, "left_out": left}, f, indent=1)
    with open(os.path.join(out, "models.md"), "w") as f:
        f.write(table(rows) + "\n")
        if left:
            f.write(f"\nnot run (budget): {len(left)} cases\n")
    plot(rows, os.path.join(out, "models.png"))
    print(table(rows))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
