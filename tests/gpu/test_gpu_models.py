"""The models of the frontend tests and examples, compiled by the default pipeline and run
by pkc on the GPU (W virtual ranks on one device), against eager PyTorch over W ranks."""

import warnings

import pytest
import torch

import pkc
from pkc.frontend import fake_process_group, run_eager
from tests.unit.models import all_cases

CASES = {c.name: c for c in all_cases()}
MODELS = ["tp_mlp_inplace", "sp_mlp_funcol", "swiglu_mlp_bf16", "tp_attention", "moe_all_to_all",
          "dtensor_sp_mlp"]


@pytest.mark.parametrize("world", [2, 4, 8])
@pytest.mark.parametrize("name", MODELS)
def test_model_on_gpu_matches_eager(name, world):
    case = CASES[name]
    with fake_process_group(world), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = pkc.compile(case.make(0, world), case.inputs(world)[0], pipeline="default{force=true}")
    assert any(op.name == "pk.kernel" for op in prog.module.walk())
    inputs = case.inputs(world)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = run_eager(lambda r: case.make(r, world), inputs, world_size=world)
    got = prog.run(inputs, params=case.params(world))
    tol = dict(rtol=5e-2, atol=5e-2) if case.dtype == torch.bfloat16 else dict(rtol=1e-3, atol=1e-3)
    for r in range(world):
        for g, e in zip(got[r], expected[r]):
            assert g.is_cuda
            torch.testing.assert_close(g.cpu(), e, **tol, msg=lambda m: f"{name} W={world} rank {r}: {m}")


def test_backend_runs_one_rank_on_the_gpu():
    import torch.nn.functional as F

    w1 = torch.randn(64, 128, device="cuda", dtype=torch.bfloat16)
    w2 = torch.randn(128, 32, device="cuda", dtype=torch.bfloat16)

    def mlp(x):
        return F.gelu(x @ w1) @ w2

    be = pkc.backend(world_size=1, pipeline="default")
    x = torch.randn(48, 64, device="cuda", dtype=torch.bfloat16)
    y = torch.compile(mlp, backend=be, dynamic=False)(x)
    assert y.is_cuda and be.programs
    torch.testing.assert_close(y.float(), mlp(x).float(), rtol=5e-2, atol=5e-1)
