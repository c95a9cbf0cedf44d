"""Frontend: capture + import of tensor-, sequence- and expert-parallel models, W in {2, 4, 8},
and interp(imported IR) == eager torch over W simulated ranks."""

from __future__ import annotations

import functools
import warnings
from collections import Counter

import pytest
import torch

from pkc.api import CompiledProgram, compile as pkc_compile
from pkc.frontend import fake_process_group, run_eager
from pkc.ir import parse_module, verify_module

from tests.unit.models import Case, all_cases

pytestmark = [
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::pkc.frontend.PkcNotCompiledWarning"),
]

CASES = {c.name: c for c in all_cases()}
PARAMS = [pytest.param(name, w, id=f"{name}-W{w}") for name, c in CASES.items() for w in c.worlds]


@functools.lru_cache(maxsize=None)
def compiled(name: str, world: int) -> CompiledProgram:
    case = CASES[name]
    with fake_process_group(world):
        model = case.make(0, world)
        example = case.inputs(world)[0]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return pkc_compile(model, example)


def op_counts(prog: CompiledProgram) -> Counter:
    return Counter(op.name for op in prog.module.walk())


@pytest.mark.parametrize("name,world", PARAMS)
def test_capture_and_import(name: str, world: int) -> None:
    case = CASES[name]
    prog = compiled(name, world)
    assert prog.world_size == world
    verify_module(prog.module)
    counts = op_counts(prog)
    for op, n in case.expected.items():
        assert counts[op] == n, f"{op}: expected {n}, got {counts[op]}\n{prog.ir()}"
    for op in counts:
        assert op.startswith(("pk.", "func.", "builtin.")), op
    # Every collective spans the whole world.
    for op in prog.module.walk():
        if op.name in ("pk.all_reduce", "pk.all_gather", "pk.reduce_scatter", "pk.all_to_all"):
            assert op.world_size == world
    assert set(prog.not_compiled) == case.not_compiled
    # The IR prints, parses back and verifies, in both forms.
    for generic in (False, True):
        text = prog.ir(generic=generic)
        verify_module(parse_module(text))
    # Arguments are named after the user's inputs and parameters.
    kinds = {i.kind for i in prog.inputs}
    assert "input" in kinds and "parameter" in kinds


@pytest.mark.parametrize("name,world", PARAMS)
def test_interp_matches_eager(name: str, world: int) -> None:
    case: Case = CASES[name]
    prog = compiled(name, world)
    inputs = case.inputs(world)
    expected = run_eager(lambda rank: case.make(rank, world), inputs, world_size=world)
    got = prog.run_simulated(inputs, params=case.params(world))
    assert len(got) == world
    tol = dict(atol=3e-2, rtol=3e-2) if case.dtype == torch.bfloat16 else dict(atol=2e-5, rtol=2e-4)
    for rank in range(world):
        assert len(got[rank]) == len(expected[rank])
        for g, e in zip(got[rank], expected[rank]):
            assert g.dtype == e.dtype and g.shape == e.shape
            torch.testing.assert_close(g, e, **tol, msg=lambda m: f"{name} W={world} rank {rank}: {m}")


def test_ranks_differ_where_they_should() -> None:
    """Sanity of the reference: sequence-parallel outputs differ across ranks, TP outputs
    (after all_reduce) agree."""
    for name, same in (("sp_mlp_funcol", False), ("tp_mlp_inplace", True)):
        case = CASES[name]
        out = run_eager(lambda r: case.make(r, 4), case.inputs(4), world_size=4)
        equal = all(torch.allclose(out[0][0], out[r][0], atol=1e-5) for r in range(1, 4))
        assert equal == same, name
