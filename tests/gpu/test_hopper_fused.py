"""pkc's fused sm_90a kernels (GEMM + reduce-scatter, all-gather + GEMM) on a Hopper GPU
against torch: random inputs, outputs (and accumulators, gathered buffers) poisoned with
NaN before every launch, shapes that are and are not multiples of the tile, bf16 and fp16,
f32 and output-dtype accumulators, B as [N, K] ("nk", C = A @ B^T) and [K, N] ("kn",
C = A @ B); W = 1 (every pointer local) and W = 2, 3 in a virtual world on the one GPU
(pkc.runtime.peers.VirtualPeers: each rank on its own lane, a green context with its share
of the SMs, or a plain stream; all resident at once); repeated launches (epochs 1, 2, ...)
and the bounded-wait error path.

    python -m pytest tests/gpu/test_hopper_fused.py           # needs an sm_90 GPU
    python tests/gpu/test_hopper_fused.py --jsonl out.jsonl    # the same cases, one line each
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

sys.path.insert(0, str(ROOT))
if __name__ == "__main__":
    # device runs: import the Hopper modules without pkc/__init__ (frontend, xdsl, ...)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from hopper_only import skip_pkc_init

    skip_pkc_init()

import pytest  # noqa: E402
import torch  # noqa: E402

from pkc.codegen.hopper.fused import FusedConfig  # noqa: E402
from pkc.codegen.hopper.gemm import GemmConfig  # noqa: E402


def _have_hopper() -> bool:
    if not torch.cuda.is_available():
        return False
    try:
        import cuda.bindings.driver  # noqa: F401,F811
    except ImportError:
        return False
    return torch.cuda.get_device_capability() == (9, 0)


G256 = GemmConfig(bm=128, bn=256, stages=4, timeout_ns=6_000_000_000)
G128 = GemmConfig(bm=128, bn=128, stages=6, timeout_ns=6_000_000_000)

# (Mc, N, K): rows per rank's chunk / shard
SHAPES_W1 = [(128, 256, 64), (256, 512, 1024), (257, 136, 72), (1000, 1000, 1000),
             (2048, 2056, 520), (4096, 4096, 512)]
SHAPES_WN = [(1000, 1000, 1000), (2048, 1024, 1024)]


def _cases() -> list[dict]:
    out = []
    for dt in ("bf16", "f16"):
        for acc in ("out", "f32"):
            for s in SHAPES_W1:
                out.append(dict(kind="rs", W=1, dtype=dt, acc=acc, tile=256, shape=s))
        for s in SHAPES_W1:
            out.append(dict(kind="ag", W=1, dtype=dt, tile=256, shape=s))
    for kind in ("rs", "ag"):
        out.append(dict(kind=kind, W=1, dtype="bf16", acc="out", tile=128, shape=(1000, 1000, 1000)))
        out.append(dict(kind=kind, W=1, dtype="bf16", acc="out", tile=128, shape=(4096, 512, 4096)))
    out.append(dict(kind="rs", W=1, dtype="bf16", acc="f32", tile=256, shape=(1000, 1000, 1000),
                    sabotage=True))
    out.append(dict(kind="rs", W=1, dtype="bf16", acc="out", tile=256, shape=(1000, 1000, 1000),
                    variant="v1"))
    for W in (2, 3):
        for s in SHAPES_WN:
            out.append(dict(kind="rs", W=W, dtype="bf16", acc="out", tile=256, shape=s))
            out.append(dict(kind="rs", W=W, dtype="bf16", acc="f32", tile=256, shape=s))
            out.append(dict(kind="ag", W=W, dtype="bf16", tile=256, shape=s))
    # plain-stream lanes (no green contexts): the fallback of the virtual world
    out.append(dict(kind="rs", W=2, dtype="bf16", acc="out", tile=256, shape=SHAPES_WN[0],
                    green=False))
    out.append(dict(kind="ag", W=2, dtype="bf16", tile=256, shape=SHAPES_WN[0], green=False))
    # B as [K, N] (the x @ w of a pk.matmul): bn = 256 and 128 (bn/64 boxes per k-block)
    for W in (1, 2):
        for s in ((1000, 1000, 1000), (256, 512, 1024), (2048, 1024, 1024)):
            out.append(dict(kind="rs", W=W, dtype="bf16", acc="out", tile=256, shape=s, b="kn"))
            out.append(dict(kind="ag", W=W, dtype="bf16", tile=256, shape=s, b="kn"))
        out.append(dict(kind="rs", W=W, dtype="f16", acc="f32", tile=128, shape=(1000, 1000, 1000),
                        b="kn"))
        out.append(dict(kind="ag", W=W, dtype="f16", tile=128, shape=(257, 136, 72), b="kn"))
    # several row blocks per shard (raster groups of 8 x 128 rows; the last one ragged),
    # signalled block by block, peers served one at a time; other put rings
    for W in (2, 4):
        out.append(dict(kind="ag", W=W, dtype="bf16", tile=256, shape=(3000, 512, 1024)))
        out.append(dict(kind="ag", W=W, dtype="bf16", tile=256, shape=(4096, 256, 2048),
                        put=dict(put_ring=3, put_piece=49152, put_lag=2)))
        out.append(dict(kind="ag", W=W, dtype="bf16", tile=128, shape=(2304, 384, 520),
                        put=dict(put_ring=6, put_piece=16384, put_lag=3)))
    # GEMM + all-reduce by broadcast: every tile to every rank
    for W in (1, 2, 3):
        for s in ((1000, 1000, 1000), (256, 512, 1024), (2048, 1024, 1024)):
            out.append(dict(kind="ar", W=W, dtype="bf16", acc="out", tile=256, shape=s, b="kn"))
        out.append(dict(kind="ar", W=W, dtype="f16", acc="out", tile=128, shape=(257, 136, 72)))
    # GEMM + all-reduce by broadcast / GEMM + reduce-scatter into a caller's output (W = 2):
    # the peer's partial summed in the epilogue (ar: the own chunk copied from the
    # accumulator at the end; rs: the peer's chunk first, into its staging)
    for kind in ("ar", "rs"):
        for s in ((1000, 1000, 1000), (256, 512, 1024), (2048, 1024, 1024), (3000, 520, 512)):
            for b in ("nk", "kn"):
                out.append(dict(kind=kind, W=2, dtype="bf16", acc="out", tile=256, shape=s, b=b,
                                out=True))
        out.append(dict(kind=kind, W=2, dtype="bf16", acc="out", tile=128,
                        shape=(2048, 1024, 1024), out=True))
        out.append(dict(kind=kind, W=2, dtype="f16", acc="out", tile=128, shape=(257, 136, 72),
                        out=True))
    # GEMM + all-reduce into a fresh output (W <= 2): own tiles to the output, the peer's
    # to the staging, reducer CTAs add row block by row block (several blocks, ragged)
    for W in (1, 2):
        for s in ((1000, 1000, 1000), (2048, 1024, 1024), (3000, 520, 512)):
            out.append(dict(kind="arf", W=W, dtype="bf16", acc="out", tile=256, shape=s))
        out.append(dict(kind="arf", W=W, dtype="bf16", acc="out", tile=256, shape=(1024, 768, 256),
                        b="kn"))
        out.append(dict(kind="arf", W=W, dtype="f16", acc="out", tile=128, shape=(257, 136, 72)))
    out.append(dict(kind="arf", W=2, dtype="bf16", acc="out", tile=256, shape=(4096, 512, 512),
                    put=dict(put_ring=3, put_piece=16384, put_lag=1)))
    return out


CASES = _cases()


def _case_id(c: dict) -> str:
    acc = f"-{c.get('acc', '')}" if c["kind"] in ("rs", "ar", "arf") else ""
    sab = ("-sabotage" if c.get("sabotage") else "") + (f"-{c['variant']}" if c.get("variant") else "")
    sab += ("-kn" if c.get("b") == "kn" else "") + ("-plain" if c.get("green") is False else "")
    sab += "".join(f"-{k}{v}" for k, v in c.get("put", {}).items()) + ("-out" if c.get("out") else "")
    return f"{c['kind']}-W{c['W']}-{c['dtype']}{acc}-t{c['tile']}-{'x'.join(map(str, c['shape']))}{sab}"


def fcfg_of(c: dict) -> FusedConfig:
    g = (G256 if c["tile"] == 256 else G128).with_(dtype=c["dtype"], b_layout=c.get("b", "nk"))
    acc = "f32" if c.get("acc") == "f32" else ""
    comm = 4 if c["W"] > 1 else -1
    extra = dict(own_map="global", wait_own=True) if c.get("variant") == "v1" else {}
    extra.update(c.get("put", {}))
    return FusedConfig(kind=c["kind"], world=c["W"], gemm=g, acc=acc, comm_ctas=comm,
                       out=c.get("out", False), **extra)


def run_case(c: dict, seed: int = 0) -> dict:
    from pkc.codegen.hopper.fused import FusedWorld, SignalTimeout
    from pkc.runtime.peers import VirtualPeers

    f = fcfg_of(c)
    W = c["W"]
    Mc, N, K = c["shape"]
    tdt = torch.bfloat16 if c["dtype"] == "bf16" else torch.float16
    # W = 1 launches on torch's stream (no rank waits for another): no green lane
    peers = VirtualPeers(W, green=c.get("green", True) and W > 1)
    world = FusedWorld(f, Mc, N, K, peers=peers,
                       sig_timeout_ns=50_000_000 if c.get("sabotage") else 1_000_000_000)
    g = torch.Generator(device="cuda").manual_seed(seed * 7919 + Mc * 31 + N * 17 + K + W)
    rows = W * Mc if f.kind in ("rs", "ar", "arf") else Mc
    kn = f.gemm.b_layout == "kn"
    A = [torch.randn(rows, K, device="cuda", generator=g).to(tdt) for _ in range(W)]
    B = [torch.randn(*((K, N) if kn else (N, K)), device="cuda", generator=g).to(tdt)
         for _ in range(W)]

    def prod(a, b):                      # kn: a @ b; nk: a @ b.T
        return a.double() @ (b.double() if kn else b.double().t())

    if f.kind == "rs":
        full = sum(prod(A[r], B[r]) for r in range(W))
        refs = [full[p * Mc:(p + 1) * Mc] for p in range(W)]
    elif f.kind in ("ar", "arf"):
        full = sum(prod(A[r], B[r]) for r in range(W))
        refs = [full] * W
    else:
        Ag = torch.cat(A, 0)
        refs = [prod(Ag, B[r]) for r in range(W)]
    rec = {"case": _case_id(c), "kind": f.kind, "W": W, "dtype": c["dtype"],
           "acc": f.acc_dtype if f.kind in ("rs", "ar", "arf") else None, "tile": c["tile"],
           "b_layout": f.gemm.b_layout, "Mc": Mc, "N": N, "K": K, "grid": world.grid,
           "kernel": world.cfg.kernel_name, "lanes": getattr(world.peers, "mode", None)}

    def poison():
        for t in world.out:
            t.fill_(float("nan"))
        if f.kind in ("rs", "ar"):
            for t in world.acc:
                t.fill_(float("nan"))
        elif f.kind == "arf":
            for t in world.stage:
                t.fill_(float("nan"))
        else:
            for t in world.gath:
                t.fill_(float("nan"))

    def launch(fresh=False):
        torch.cuda.synchronize()
        if fresh:          # arf / ar out: C into new (poisoned) tensors, as the compiled path
            outs = world.run(A, B, outs=[torch.full_like(o, float("nan")) for o in world.out])
        else:
            outs = world.run(A, B)
        torch.cuda.synchronize()
        return [o.clone() for o in outs]

    if c.get("sabotage"):
        # skip epochs: the final wait wants more tiles than any launch delivers -> the
        # kernel must finish (not hang) and the host must raise naming rank and signal
        world.epoch += 3
        poison()
        t0 = time.time()
        launch()
        rec["secs_launch"] = round(time.time() - t0, 3)
        try:
            world.check()
            rec.update(ok=False, error="no SignalTimeout raised")
        except SignalTimeout as e:
            rec.update(ok="timed out waiting" in str(e) and "rank 0" in str(e), message=str(e))
        return rec

    errs, nans, same = [], 0, True
    first = None
    for it in range(3):                  # epochs 1..3: the monotonic signal counters
        poison()
        outs = launch(fresh=(f.kind == "arf" or f.out) and it > 0)
        try:
            world.check()
        except SignalTimeout as e:       # the kernel finished; the context is fine
            rec.update(ok=False, error=f"SignalTimeout: {e}"[:600], epoch=it + 1)
            return rec
        for r in range(W):
            o = outs[r].double()
            nans += int(torch.isnan(o).sum())
            ref = refs[r]
            errs.append(float(torch.linalg.norm(o.nan_to_num(0.0) - ref)
                              / torch.linalg.norm(ref).clamp_min(1e-30)))
        if (f.kind == "arf" or (f.out and f.kind == "ar")) and W == 2:   # one rounding of
            # own + peer, the same on both ranks
            same = same and torch.equal(outs[0], outs[1])
        if first is None:
            first = outs
        elif W == 1:   # one contributor: no reduction order, bit-identical launches
            same = same and all(torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0))
                                for a, b in zip(first, outs))
    tol = 1e-2 if c["dtype"] == "bf16" else 2e-3
    if f.kind in ("rs", "ar", "arf") and f.acc_dtype != "f32" and W > 1:
        tol *= 2                                  # W-1 additions rounded in bf16 / fp16
    rec.update(nan=nans, rel_err=max(errs), tol=tol, deterministic=same,
               ok=nans == 0 and max(errs) < tol and same)
    # W=1: the fused output against pkc's plain GEMM (same tile, same accumulation order)
    if W == 1 and f.kind in ("rs", "ag"):
        from pkc.codegen.hopper.launch import get_gemm
        gm = get_gemm(f.gemm)
        a_full = A[0]
        ref_pkc = gm(a_full, B[0])
        torch.cuda.synchronize()
        rec["bit_identical_to_pkc_gemm"] = bool(torch.equal(first[0], ref_pkc))
    return rec


needs_gpu = pytest.mark.skipif(not _have_hopper(), reason="needs an sm_90 GPU and cuda.bindings")


@needs_gpu
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_fused_matches_torch(case):
    r = run_case(case)
    assert r["ok"], r


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jsonl", required=True)
    ap.add_argument("--skip", type=int, default=0)
    args = ap.parse_args(argv)
    if not _have_hopper():
        print("no sm_90 GPU / cuda.bindings", flush=True)
        return 2
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from supervise import log_case

    for i, c in enumerate(CASES):
        if i < args.skip:
            continue
        if not log_case(args.jsonl, i, lambda: run_case(c), {"case": _case_id(c)}):
            return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
