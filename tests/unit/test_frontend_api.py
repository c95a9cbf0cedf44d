"""pkc.compile / pkc.backend entry points, parameter supply, dumps, opaque encoding,
the eager multi-rank reference."""

from __future__ import annotations

import json

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from hypothesis import given, settings
from hypothesis import strategies as st

import pkc
import pkc.api as api
from pkc.dialects.opaque import decode_call, encode_call, qualified_name, resolve_target
from pkc.frontend import PkcFrontendError, SimulationError, fake_process_group, run_ranks
from pkc.ir import parse_module, verify_module
from tests.unit import models

pytestmark = [
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::pkc.frontend.PkcNotCompiledWarning"),
]


def _tp_mlp(world: int):
    full = models.tp_mlp_full(16, 32)
    m = models.TPMLP(16, 32, world)
    m.load_state_dict(models.tp_mlp_shard(full, world, 0))
    return m, full


def test_compile_world_size_opens_and_closes_a_fake_group() -> None:
    assert not dist.is_initialized()
    prog = api.compile(lambda x: funcol.all_reduce(x * 2, "sum", dist.group.WORLD) + 1,
                       (torch.randn(4, 4),), world_size=4)
    assert not dist.is_initialized()
    assert prog.world_size == 4
    assert "pk.all_reduce" in prog.ir() and "world = 4" in prog.ir()
    xs = [(torch.full((4, 4), float(r)),) for r in range(4)]
    out = prog.run_simulated(xs)
    torch.testing.assert_close(out[3][0], torch.full((4, 4), 2.0 * 6 + 1))


def test_arguments_are_named_and_params_supplied_three_ways() -> None:
    with fake_process_group(2):
        m, full = _tp_mlp(2)
        prog = api.compile(m, (torch.randn(2, 3, 16),))
    assert [(i.name, i.kind) for i in prog.inputs if i.kind != "input"] == [
        ("fc1.weight", "parameter"), ("fc1.bias", "parameter"), ("fc2.weight", "parameter"),
        ("bias2", "parameter")]
    assert '{pk.name = "fc1.weight"}' in prog.ir()
    x = torch.randn(2, 3, 16)
    per_rank = [models.tp_mlp_shard(full, 2, r) for r in range(2)]
    got = prog.run_simulated([(x,), (x,)], params=per_rank)
    dense = torch.nn.functional.gelu(x @ full["fc1.weight"].T + full["fc1.bias"]) @ full["fc2.weight"].T
    torch.testing.assert_close(got[0][0], dense + full["bias2"], atol=1e-5, rtol=1e-5)
    # params=None: the module's own (rank 0) values on every rank.
    same = prog.run_simulated([(x,), (x,)])
    alt = prog.run_simulated([(x,), (x,)], params=[per_rank[0], per_rank[0]])
    torch.testing.assert_close(same[1][0], alt[1][0])
    # per-rank modules work as well as state dicts.
    mods = []
    for r in range(2):
        mr = models.TPMLP(16, 32, 2)
        mr.load_state_dict(per_rank[r])
        mods.append(mr)
    torch.testing.assert_close(prog.run_simulated([(x,), (x,)], params=mods)[0][0], got[0][0])


def test_dtensor_params_need_full_values() -> None:
    full = models.plain_mlp_full(16, 32)
    with fake_process_group(4):
        m = models.dtensor_mlp(full, 16, 32, 4, sequence_parallel=False)
        prog = api.compile(m, (torch.randn(2, 3, 16),))
    fc1 = next(i for i in prog.inputs if i.name == "fc1.weight")
    assert fc1.global_shape == (32, 16) and fc1.shape == (8, 16)
    x = torch.randn(2, 3, 16)
    with pytest.raises(PkcFrontendError, match="sharded DTensor"):
        prog.run_simulated([(x,)] * 4)
    out = prog.run_simulated([(x,)] * 4, params=full)
    dense = models.PlainMLP(16, 32)
    dense.load_state_dict(full)
    with torch.no_grad():
        torch.testing.assert_close(out[2][0], dense(x), atol=1e-5, rtol=1e-5)


def test_input_mutation_is_not_an_output() -> None:
    def f(x):
        dist.all_reduce(x)
        return x * 2

    prog = api.compile(f, (torch.randn(4),), world_size=2)
    assert [o.kind for o in prog.outputs] == ["mutation", "output"]
    out = prog.run_simulated([(torch.ones(4),), (torch.full((4,), 2.0),)])
    assert len(out[0]) == 1
    torch.testing.assert_close(out[0][0], torch.full((4,), 6.0))


def test_dump_dir_and_pipeline(tmp_path) -> None:
    with fake_process_group(2):
        m, _ = _tp_mlp(2)
        prog = api.compile(m, (torch.randn(2, 3, 16),), pipeline="cse,dce", dump_dir=tmp_path)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["00-imported.mlir", "01-cse.mlir", "02-dce.mlir"]
    verify_module(parse_module((tmp_path / "00-imported.mlir").read_text()))
    assert [s for s, _ in prog.stages] == ["00-imported", "01-cse", "02-dce"]
    with pytest.raises(TypeError, match=r"\.run\(per_rank_inputs\)"):
        prog(torch.randn(2, 3, 16))


def test_default_pipeline_explains_dumps_kernels_and_runs(tmp_path, capsys) -> None:
    with fake_process_group(2):
        m, _ = _tp_mlp(2)
        prog = api.compile(m, (torch.randn(2, 3, 16),), pipeline="default{force=true}",
                           dump_dir=tmp_path, explain=True)
    out = capsys.readouterr().out
    assert "remark: [pk.kernel] fused mm+all_reduce" in out and "sm-partition:" in out
    assert prog.remarks() + prog.kernels() == out.strip().splitlines()
    # an f32 GEMM + all-reduce has no schedule-level kernel: the line says why
    (line,) = prog.kernels()
    assert "[kernels] @matmul_all_reduce: portable path (fused kernel left unscheduled" in line
    assert "bf16 or f16" in line
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names[:4] == ["00-imported.mlir", "01-collective-views.mlir", "02-dce.mlir", "03-overlap.mlir"]
    assert "kernels" in names
    ptx = list((tmp_path / "kernels").glob("*.ptx"))
    assert ptx and ".target sm_90a" in ptx[0].read_text()
    x = torch.randn(2, 3, 16)
    api._NOTED.clear()  # the note is said once per process
    with pytest.warns(RuntimeWarning, match="no GPU available; running on the reference interpreter"):
        got = prog.run([(x,), (x,)])
    assert len(got) == 2 and got[0][0].shape == (2, 3, 16)
    torch.testing.assert_close(got[0][0], got[1][0])


def test_torch_compile_backend_records_the_program(tmp_path) -> None:
    with fake_process_group(4):
        m, _ = _tp_mlp(4)
        be = pkc.backend(dump_dir=tmp_path)
        compiled = torch.compile(m, backend=be)
        x = torch.randn(2, 3, 16)
        with torch.no_grad():
            y = compiled(x)
            ref = m(x)  # the fake group's all_reduce leaves data as is, in both
        torch.testing.assert_close(y, ref)
        assert len(be.programs) == 1
        ops = [op.name for op in be.module.walk()]
        assert ops.count("pk.matmul") == 2 and ops.count("pk.all_reduce") == 1
        assert {i.kind for i in be.programs[0].inputs} == {"input", "parameter"}
        # training: the forward graph is imported, backward runs through torch.
        compiled(x).sum().backward()
        assert m.fc1.weight.grad is not None
    assert (tmp_path / "graph0" / "00-imported.mlir").exists()


@settings(max_examples=60, deadline=None)
@given(st.recursive(
    st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.text(max_size=5)
    | st.floats(allow_nan=False) | st.sampled_from([torch.bfloat16, torch.int64, torch.float32]),
    lambda inner: st.lists(inner, max_size=3), max_leaves=8))
def test_opaque_spec_round_trips(value) -> None:
    t0, t1 = torch.randn(2), torch.randn(3)
    args = [t0, value, [t1, t0]]
    kwargs = {"k": value, "dtype": torch.float16, "inf": float("-inf")}
    tensors, spec = encode_call(args, kwargs)
    json.loads(spec)
    assert len(tensors) == 3
    dargs, dkwargs = decode_call(spec, tensors)
    assert dargs[0] is t0 and dargs[2][0] is t1 and dargs[2][1] is t0
    assert dargs[1] == value and dkwargs["k"] == value
    assert dkwargs["dtype"] is torch.float16 and dkwargs["inf"] == float("-inf")


def test_resolve_target() -> None:
    op = torch.ops.aten.native_dropout.default
    assert qualified_name(op) == "aten::native_dropout.default"
    assert resolve_target("aten::native_dropout.default") is op
    assert resolve_target("aten.cumsum.default") is torch.ops.aten.cumsum.default
    assert resolve_target("_c10d_functional::all_reduce.default") is torch.ops._c10d_functional.all_reduce.default
    with pytest.raises(ValueError, match="unknown torch op"):
        resolve_target("aten::no_such_op.default")


def test_run_ranks_real_collectives_and_failures() -> None:
    def body(rank: int):
        x = torch.full((2,), float(rank))
        dist.all_reduce(x)
        g = funcol.all_gather_tensor(torch.tensor([rank]), 0, dist.group.WORLD)
        return x, g

    out = run_ranks(4, body)
    assert all(o[0].tolist() == [6.0, 6.0] and o[1].tolist() == [0, 1, 2, 3] for o in out)

    def failing(rank: int):
        if rank == 1:
            raise ValueError("boom")
        x = torch.ones(2)
        dist.all_reduce(x)  # the other ranks wait here for rank 1
        return x

    with pytest.raises(SimulationError, match="rank 1 of 3 failed: ValueError: boom"):
        run_ranks(3, failing, timeout=30)
    assert not dist.is_initialized()


def test_tp_mlp_example_runs(capsys) -> None:
    import runpy
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "examples" / "tp_mlp.py"
    main = runpy.run_path(str(path))["main"]
    # The example runs the default pipeline (which leaves its small shapes unfused, see
    # tests/unit/test_everyday_use.py); forced, fc2's matmul and the all_reduce fuse.
    assert main(["--world", "2", "--pipeline", "default{force=true}"]) == 0
    out = capsys.readouterr().out
    assert '{pk.name = "x"}' in out and 'pk.kernel "matmul_all_reduce"' in out and "world = 2" in out
    assert "remark: [pk.kernel] fused mm+all_reduce" in out
    assert float(out.rsplit("max abs error", 1)[1]) < 1e-4


def _collectives(x: torch.Tensor):
    group = dist.group.WORLD
    a = funcol.all_reduce(x, "avg", group)
    b = funcol.all_reduce(x, "max", group)
    c = funcol.all_gather_tensor(x, 1, group)         # all_gather dim 0 + chunk + cat(dim 1)
    d = funcol.reduce_scatter_tensor(x, "sum", 1, group)
    e, f = funcol.all_reduce_coalesced([x, x * 2], "sum", group)
    g = funcol.all_gather_into_tensor_coalesced([x, x + 1], group)
    h = torch.ops._dtensor.shard_dim_alltoall(x, 0, 1, group.group_name)
    return a, b, c, d, e, f, *g, h


def test_collective_forms_match_eager() -> None:
    world = 4
    xs = [(torch.randn(4, 8, generator=torch.Generator().manual_seed(r)),) for r in range(world)]
    with fake_process_group(world):
        prog = api.compile(_collectives, xs[0])
    ops = [op for op in prog.module.walk() if op.name.startswith("pk.all") or op.name.startswith("pk.reduce_")]
    gathers = [op.dim.value.data for op in ops if op.name == "pk.all_gather"]
    scatters = [op.dim.value.data for op in ops if op.name == "pk.reduce_scatter"]
    assert sorted(gathers) == [0, 0, 1] and scatters == [1]  # canonicalized along dim 1
    assert [op.name for op in ops].count("pk.all_to_all") == 1
    got = prog.run_simulated(xs)
    expected = run_ranks(world, lambda r: [t.clone() for t in _collectives(*xs[r])])
    for r in range(world):
        assert len(got[r]) == len(expected[r]) == 9
        for g, e in zip(got[r], expected[r]):
            torch.testing.assert_close(g, e)


def test_backend_runs_one_rank_on_the_interpreter_without_a_gpu() -> None:
    import torch.nn.functional as F

    w1, w2 = torch.randn(16, 32), torch.randn(32, 8)

    def mlp(x):
        return F.gelu(x @ w1) @ w2 + 1.0

    be = pkc.backend(world_size=1, pipeline="default", inductor=False)
    compiled = torch.compile(mlp, backend=be, dynamic=False)
    x = torch.randn(4, 16)
    api._NOTED.clear()  # the note is said once per process
    with pytest.warns(RuntimeWarning, match="reference interpreter"):
        y = compiled(x)
    torch.testing.assert_close(y, mlp(x), rtol=1e-5, atol=1e-5)
    assert be.programs and any(op.name == "pk.matmul" for op in be.module.walk())
