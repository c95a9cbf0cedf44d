"""benchmarks/models.py without a GPU: ``--list`` prints every case (Llama-3 70B / 8B TP
layers, prefill and decode token counts, bf16 and f32) in priority order, and the layers
it times build and run eagerly (tiny sizes, CPU, a 1-rank gloo group)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import models as mb  # noqa: E402

sys.path.pop(0)


def test_list_prints_every_case_without_a_gpu():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "models.py"), "--list"],
                         capture_output=True, text=True, timeout=120,
                         env={"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[-1] == "72 cases"               # 2 models x 3 layers x 6 token counts x 2 dtypes
    cases = lines[:-1]
    assert cases[0].startswith("llama3-70b mlp prefill T=4096 bf16 TP-8")
    assert "(D=8192 F/W=3584 heads/W=8 kv/W=1)" in cases[0]
    for t in (512, 4096, 8192):
        assert any(f"prefill T={t} " in c for c in cases)
    for t in (1, 16, 64):
        assert any(f"decode T={t} " in c for c in cases)
    for word in ("llama3-8b", "attn", "decoder", " f32 "):
        assert any(word in c for c in cases)
    assert len(set(cases)) == len(cases)


def test_list_with_cuda_graph_modes_adds_decode_cases():
    cases = mb.all_cases(modes=("default", "reduce-overhead"))
    extra = [c for c in cases if c.mode == "reduce-overhead"]
    assert len(cases) == 72 + len(extra) and len(extra) == 36   # decode only
    assert all(c.phase == "decode" for c in extra)


@pytest.mark.parametrize("layer", mb.LAYERS)
@pytest.mark.parametrize("tokens", [4, 1])
def test_layers_run_eagerly_on_tiny_sizes(monkeypatch, layer, tokens):
    monkeypatch.setattr(mb, "ARCHS", {"llama3-8b": dict(d=32, f=128, heads=16, kv_heads=8, head_dim=8)})
    monkeypatch.setattr(mb, "DECODE", (1,))
    monkeypatch.setattr(mb, "CACHE_LEN", 8)
    fresh = not dist.is_initialized()
    if fresh:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        case = mb.Case("llama3-8b", layer, tokens, "f32")
        m, x = mb.build(case, device="cpu")
        with torch.no_grad():
            y = m(x)
    finally:
        if fresh:
            dist.destroy_process_group()
    assert y.shape == x.shape == (1, tokens, 32)
    assert torch.isfinite(y).all() and not torch.equal(y, x)
