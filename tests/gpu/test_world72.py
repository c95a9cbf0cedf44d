"""W = 72 on one H200 (issue 17): the sm_90a kernels compiled for 72 ranks, launched for
72 ranks in one process (the virtual world), results checked against torch.

Green contexts cannot give 72 ranks an SM partition each (at least 8 SMs per partition,
132 SMs), so the virtual world runs on plain streams (pkc/runtime/green.py's fallback: one
stream per rank, ``132 // 72 = 1`` SM's worth of CTAs per rank). The spin-waits need every
rank's CTAs resident at once: the collectives' grid is at most ``ctas_per_sm x 1`` CTA
per rank (1 at these sizes: 72 CTAs of <= 512 threads on 132 SMs), the fused GEMM +
reduce-scatter's persistent grid ``min(SMs, tiles) = 1`` CTA per rank (230 KB of shared
memory: one per SM, 72 of the 132 SMs). Every wait is bounded, so a rank that never
became resident is a timeout error, not a hang.

The fused kernel at W = 72 passes ~10 KB of parameters (74 tensor maps by value), over
the old 4096-byte limit: pkc/runtime/param_space.py checks it against the driver's limit
before the load (32764 bytes: CUDA 12.1+, PTX ISA 8.1+)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))


def _hopper() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


pytestmark = pytest.mark.skipif(not _hopper(), reason="needs an sm_90 GPU")

W = 72
TIMEOUT_NS = 2_000_000_000
# forced kind -> (collective, lower-collectives algorithm)
KINDS = {"ll": ("all_reduce", "one_shot"), "ar1": ("all_reduce", "one_shot"),
         "llag": ("all_gather", "direct"), "ag": ("all_gather", "direct"),
         "llrs": ("reduce_scatter", "direct"), "rs": ("reduce_scatter", "direct")}
_PEERS: list = []


def peers():
    from pkc.runtime.peers import VirtualPeers

    if not _PEERS:
        _PEERS.append(VirtualPeers(W))
    return _PEERS[0]


def compile_collective(kind: str, vecs: int):
    """The sm_90a kernel of ``kind`` for 72 ranks, ``vecs`` 16-byte vectors per rank's
    chunk (bf16): lower-collectives planned for nvl72 (h200's NVLink domain stops at 8),
    schedule-collectives with the kind forced (above 8 ranks the tuning avoids LL)."""
    from collectives_ir import module_text

    from pkc.codegen import compile_kernel
    from pkc.codegen.emit import kernels_of
    from pkc.ir import parse_module
    from pkc.passes.registry import run_pipeline
    from pkc.passes.remarks import plan_of

    coll, algo = KINDS[kind]
    text, n_in, n_out = module_text(coll, W, 16 * vecs * W, "bf16")
    m = parse_module(text, "w72.mlir")
    run_pipeline(f"lower-collectives{{target=nvl72 {coll}={algo}}},schedule-collectives{{kind={kind}}}", m)
    (kop,) = kernels_of(m)
    assert plan_of(kop)["comm_kind"] == kind
    return compile_kernel(kop, "sm_90a"), coll, n_in, n_out


def test_virtual_world_of_72_runs_on_plain_streams():
    pr = peers()
    assert pr.mode.startswith("plain streams"), pr.mode
    assert len(pr.lanes) == W and all(pr.sms_of(r) == pr.sms // W for r in range(W))


@pytest.mark.parametrize("vecs", [24])
@pytest.mark.parametrize("kind", list(KINDS))
def test_collective_at_72_equals_torch(kind, vecs):
    from collectives_ir import reference

    from pkc.runtime.param_space import ptx_param_bytes
    from pkc.runtime.scheduled_comm import ScheduledCollective

    ck, coll, n_in, n_out = compile_collective(kind, vecs)
    pr = peers()
    ir = ScheduledCollective(ck.ptx, ck.meta, pr, [n_in], [n_out], "bf16", timeout_ns=TIMEOUT_NS)
    # every CTA of every rank resident at once: 72 ranks x grid within the SMs' occupancy
    assert ir.grid == 1, (kind, ir.grid)
    assert W * ir.grid <= pr.sms
    assert ptx_param_bytes(ck.ptx, ck.meta.name) > 8 * W       # W peer pointers at least
    g = torch.Generator(device="cuda").manual_seed(vecs)
    for launch in range(3):      # epochs advance, staging halves alternate
        X = torch.randn(W, n_in, device="cuda", dtype=torch.bfloat16, generator=g)
        xs = [X[r] for r in range(W)]
        outs = {r: torch.full((n_out,), float("nan"), device="cuda", dtype=torch.bfloat16)
                for r in range(W)}
        got = {r: t.clone() for r, t in ir.run({r: xs[r] for r in range(W)}, outs=outs).items()}
        torch.cuda.synchronize()
        ir.check()
        pr.raise_timeouts()
        want = reference(coll, xs, W)
        bad = [r for r in range(W) if not torch.equal(got[r].view(-1), want[r].view(-1))]
        assert not bad, f"{kind} W=72 vecs={vecs} launch {launch}: ranks {bad[:8]} differ from torch"


def test_fused_gemm_reduce_scatter_at_72_equals_torch():
    """72 ranks' GEMM + reduce-scatter (each rank [72*128, 256] x [256, 256]^T, chunk 128
    rows): one CTA per rank, ~10 KB of parameters, the reduced chunks against the f32 torch
    sum of the 72 products."""
    from fused_ir import module_text

    from pkc.codegen import compile_kernel
    from pkc.codegen.emit import kernels_of
    from pkc.ir import parse_module
    from pkc.passes.registry import run_pipeline
    from pkc.passes.remarks import plan_of
    from pkc.runtime.param_space import ptx_param_bytes
    from pkc.runtime.scheduled_fused import ScheduledFused

    Mc, N, K = 128, 256, 256
    m = parse_module(module_text(W, Mc, N, K, "nk"), "fused72.mlir")
    run_pipeline("default{target=nvl72 force=true},schedule-fused,dce", m)
    (kop,) = [k for k in kernels_of(m) if k.schedule() is not None]
    assert plan_of(kop)["schedule"] == "fused"
    ck = compile_kernel(kop, "sm_90a")
    nbytes = ptx_param_bytes(ck.ptx, ck.meta.name)
    assert 4096 < nbytes < 32764, nbytes
    pr = peers()
    ir = ScheduledFused(ck.ptx, ck.meta, pr, owner=("world72",), timeout_ns=TIMEOUT_NS)
    assert ir.grid == 1 and W * ir.grid <= pr.sms, ir.grid
    g = torch.Generator(device="cuda").manual_seed(72)
    a = [torch.randn(W * Mc, K, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(W)]
    w = [(torch.randn(N, K, device="cuda", generator=g) / K ** 0.5).to(torch.bfloat16) for _ in range(W)]
    full = torch.zeros(W * Mc, N, device="cuda")
    for r in range(W):
        full += a[r].float() @ w[r].float().t()
    tol = 2 ** -7 * float(full.abs().max()) * (W + 1)      # a bf16 rounding per add
    for launch in range(2):
        outs = ir.run(a, w)
        torch.cuda.synchronize()
        ir.check()
        pr.raise_timeouts()
        errs = [float((outs[r].float() - full[r * Mc:(r + 1) * Mc]).abs().max()) for r in range(W)]
        nan = [r for r in range(W) if bool(torch.isnan(outs[r]).any())]
        assert not nan and max(errs) <= tol, (launch, max(errs), tol, nan[:8])


def test_oversized_parameters_refused_before_the_load():
    from pkc.runtime.param_space import KernelParamsTooLarge
    from pkc.runtime.tma_launch import load_kernel

    params = ",\n".join(f"  .param .u64 p{i}" for i in range(4200))     # 33600 bytes
    ptx = (".version 8.7\n.target sm_90a\n.address_size 64\n"
           f".visible .entry too_big(\n{params}\n)\n{{\n  ret;\n}}\n")
    with pytest.raises(KernelParamsTooLarge, match="kernel too_big: its parameters take 33600 bytes"):
        load_kernel(ptx, "too_big", 0)
