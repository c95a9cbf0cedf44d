"""pkc's sm_90a GEMM on a Hopper GPU against torch: random inputs, output poisoned with NaN
before every launch, shapes that are and are not multiples of the tile, bf16 and fp16,
both B layouts, every named variant.

    python -m pytest tests/gpu/test_hopper_gemm.py          # needs an sm_90 GPU
    python tests/gpu/test_hopper_gemm.py --jsonl out.jsonl   # the same cases, one line each

A wrong mbarrier protocol would hang; the kernels trap after ``timeout_ns`` instead (the
configs here use 5 s), which poisons the CUDA context, so the command-line form is what
``benchmarks/run_device.sh`` runs under a supervisor that restarts it past a failed case.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from pkc.codegen.hopper.gemm import VARIANTS, GemmConfig  # noqa: E402


def _have_hopper() -> bool:
    if not torch.cuda.is_available():
        return False
    try:
        import cuda.bindings.driver  # noqa: F401
    except ImportError:
        return False
    return torch.cuda.get_device_capability() == (9, 0)


SHAPES = [
    (128, 256, 64),        # one tile, one k-block
    (256, 512, 1024),      # exact multiples, several k-blocks
    (1, 8, 8),             # tiny: everything out of bounds but one row
    (257, 136, 72),        # M, N, K tails
    (1000, 1000, 1000),    # tails everywhere, several tiles
    (2048, 2056, 520),     # N tail on a bigger grid
    (4096, 4096, 4096),    # many waves of the persistent scheduler
    (3000, 1280, 8192),    # long K
]
CASES = [(name, dtype) for name in VARIANTS for dtype in ("bf16",)] + \
        [("128x256_s4_tma", "f16"), ("128x128_s6_tma", "f16")]


def _cfg(name: str, dtype: str) -> GemmConfig:
    return VARIANTS[name].with_(dtype=dtype, timeout_ns=5_000_000_000)


def run_case(cfg: GemmConfig, M: int, N: int, K: int, seed: int = 0) -> dict:
    from pkc.codegen.hopper.launch import get_gemm

    tdt = torch.bfloat16 if cfg.dtype == "bf16" else torch.float16
    g = torch.Generator(device="cuda").manual_seed(seed * 7919 + M * 31 + N * 17 + K)
    a = torch.randn(M, K, device="cuda", dtype=torch.float32, generator=g).to(tdt)
    b_nk = torch.randn(N, K, device="cuda", dtype=torch.float32, generator=g).to(tdt)
    b = b_nk if cfg.b_layout == "nk" else b_nk.t().contiguous()
    out = torch.full((M, N), float("nan"), device="cuda", dtype=tdt)
    kern = get_gemm(cfg)
    kern(a, b, out)
    torch.cuda.synchronize()
    ref = a.double() @ b_nk.double().t()
    o = out.double()
    nan = int(torch.isnan(o).sum())
    err = float(torch.linalg.norm(o.nan_to_num(0.0) - ref) / torch.linalg.norm(ref).clamp_min(1e-30))
    tol = 1e-2 if cfg.dtype == "bf16" else 2e-3
    # a second launch into a freshly poisoned buffer must agree bit for bit (no races)
    out2 = torch.full_like(out, float("nan"))
    kern(a, b, out2)
    torch.cuda.synchronize()
    same = bool(torch.equal(out.nan_to_num(0.0), out2.nan_to_num(0.0))) and nan == 0
    return {"cfg": cfg.tag(), "dtype": cfg.dtype, "M": M, "N": N, "K": K, "nan": nan,
            "rel_err": err, "tol": tol, "deterministic": same,
            "ok": nan == 0 and err < tol and same}


needs_gpu = pytest.mark.skipif(not _have_hopper(), reason="needs an sm_90 GPU and cuda.bindings")


@needs_gpu
@pytest.mark.parametrize("name,dtype", CASES)
@pytest.mark.parametrize("M,N,K", SHAPES)
def test_gemm_matches_torch(name, dtype, M, N, K):
    r = run_case(_cfg(name, dtype), M, N, K)
    assert r["nan"] == 0, r
    assert r["rel_err"] < r["tol"], r
    assert r["deterministic"], r


@needs_gpu
def test_gemm_entry_point_picks_a_config():
    from pkc.codegen.hopper.launch import gemm

    a = torch.randn(1000, 512, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(768, 512, device="cuda", dtype=torch.bfloat16)   # nn.Linear weight [N, K]
    y = gemm(a, w)
    ref = a.float() @ w.float().t()
    assert float((y.float() - ref).norm() / ref.norm()) < 1e-2


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jsonl", required=True, help="append one JSON line per case")
    ap.add_argument("--skip", type=int, default=0, help="skip the first N cases")
    args = ap.parse_args(argv)
    if not _have_hopper():
        print("no sm_90 GPU / cuda.bindings", flush=True)
        return 2
    cases = [(n, d, s) for (n, d) in CASES for s in SHAPES]
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
    from supervise import crashed, log_case
    crashes = crashed(args.jsonl, lambda r: (r.get("name") or r.get("cfg"), r.get("dtype")))
    for i, (name, dtype, (M, N, K)) in enumerate(cases):
        if i < args.skip:
            continue
        if crashes.get((name, dtype), 0) >= 2:
            r = {"index": i, "name": name, "cfg": name, "dtype": dtype, "M": M, "N": N, "K": K,
                 "ok": False, "error": "skipped: this variant crashed twice"}
            with open(args.jsonl, "a") as f:
                f.write(json.dumps(r) + "\n")
            continue
        ok = log_case(args.jsonl, i, lambda: dict(run_case(_cfg(name, dtype), M, N, K), name=name),
                      {"cfg": name, "name": name, "dtype": dtype, "M": M, "N": N, "K": K})
        if not ok:
            return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
