"""pkc.compile / CompiledProgram.run_simulated on bad input: clear PkcFrontendErrors, never
a raw exception from deep inside, never a silently wrong answer (issue 19)."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.nn.functional as F

import pkc
from pkc.frontend import fake_process_group

pytestmark = pytest.mark.filterwarnings("ignore")


class Proj(torch.nn.Module):
    """A row-parallel projection: local matmul, then all_reduce."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8, bias=False)

    def forward(self, x):
        return funcol.all_reduce(self.lin(x), "sum", dist.group.WORLD)


def _error(fn) -> str:
    with pytest.raises(pkc.PkcFrontendError) as info:
        fn()
    return str(info.value)


def test_zero_size_input():
    def go():
        with fake_process_group(2):
            pkc.compile(Proj(), (torch.randn(0, 8),), pipeline="default")

    msg = _error(go)
    assert "input 'x' is empty (shape [0, 8])" in msg


def test_group_given_as_a_rank_list_that_is_no_group():
    def f(x):
        return funcol.all_reduce(x * 2, "sum", [0])

    def go():
        with fake_process_group(2):
            pkc.compile(f, (torch.randn(4, 8),))

    msg = _error(go)
    assert "group is not a process group torch knows" in msg
    assert "test_frontend_bad_input.py" in msg and "funcol.all_reduce(x * 2" in msg  # the line


def test_group_given_as_the_list_of_all_ranks_works():
    def f(x):
        return funcol.all_reduce(x * 2, "sum", [0, 1])

    with fake_process_group(2):
        prog = pkc.compile(f, (torch.randn(4, 8),))
    outs = prog.run_simulated([(torch.ones(4, 8),), (torch.ones(4, 8),)])
    assert torch.equal(outs[1][0], torch.full((4, 8), 4.0))


def test_int64_inputs_to_a_float_model():
    with fake_process_group(2):
        prog = pkc.compile(Proj(), (torch.randn(4, 8),))
    ints = torch.ones(4, 8, dtype=torch.int64)
    msg = _error(lambda: prog.run_simulated([(ints,), (ints,)]))
    assert "input 'x' should be a [4, 8] torch.float32 tensor" in msg and "torch.int64" in msg

    def trace_with_ints():
        with fake_process_group(2):
            pkc.compile(Proj(), (ints,))

    msg = _error(trace_with_ints)
    assert "example inputs do not fit the program" in msg


def test_missing_process_group():
    def f(x):
        return funcol.all_reduce(x * 2, "sum", dist.group.WORLD)

    assert not dist.is_initialized()
    msg = _error(lambda: pkc.compile(f, (torch.randn(4, 8),)))
    assert "no process group is initialized" in msg and "world_size=W" in msg


def test_extra_per_rank_inputs():
    with fake_process_group(2):
        prog = pkc.compile(Proj(), (torch.randn(4, 8),))
    x = torch.randn(4, 8)
    msg = _error(lambda: prog.run_simulated([(x, x), (x, x)]))
    assert "rank 0: got 2 inputs, but the program was compiled with 1 example input(s)" in msg


# --------------------------------------------------------------------------------------
# Rank-dependent code: the rank read at trace time must not be baked in.


def test_rank_read_in_an_all_reduce_is_refused_at_the_users_line():
    def f(x):
        return funcol.all_reduce(x * (dist.get_rank() + 1), "sum", dist.group.WORLD)

    # Eager over W = 2 ranks sums 1*x + 2*x = 3; a program traced on rank 0 would give 2.
    def go():
        with fake_process_group(2):
            pkc.compile(f, (torch.ones(4, 8),))

    msg = _error(go)
    assert "reads its rank while tracing" in msg
    assert "dist.get_rank() + 1" in msg  # the user's line is quoted


class VocabParallelEmbedding(torch.nn.Module):
    """Megatron's vocab-parallel embedding, written with dist.get_rank()."""

    def __init__(self, vocab: int, dim: int, world: int) -> None:
        super().__init__()
        self.per_rank = vocab // world
        self.weight = torch.nn.Parameter(torch.randn(self.per_rank, dim))

    def forward(self, ids):
        start = dist.get_rank() * self.per_rank
        outside = (ids < start) | (ids >= start + self.per_rank)
        local = torch.where(outside, torch.zeros_like(ids), ids - start)
        y = F.embedding(local, self.weight) * (~outside).unsqueeze(-1)
        return funcol.all_reduce(y, "sum", dist.group.WORLD)


def test_vocab_parallel_embedding_with_get_rank_is_refused():
    def go():
        with fake_process_group(3):
            pkc.compile(VocabParallelEmbedding(12, 4, 3), (torch.tensor([[0, 5, 11]]),))

    msg = _error(go)
    assert "reads its rank while tracing" in msg and "start = dist.get_rank() * self.per_rank" in msg


def test_rank_as_a_per_rank_input_gives_eager_results_at_w2():
    """The remedy the error suggests: the rank as a per-rank input tensor."""

    def f(x, rank):
        return funcol.all_reduce(x * (rank + 1), "sum", dist.group.WORLD)

    with fake_process_group(2):
        prog = pkc.compile(f, (torch.ones(4, 8), torch.tensor(0.0)))
    outs = prog.run_simulated([(torch.ones(4, 8), torch.tensor(float(r))) for r in range(2)])
    for r in range(2):
        assert torch.equal(outs[r][0], torch.full((4, 8), 3.0))  # 1*1 + 1*2, as eager


def test_rank_reads_outside_the_traced_program_still_work():
    """Only reads that dynamo traces are refused; construction code may read the rank."""
    with warnings.catch_warnings(), fake_process_group(2):
        warnings.simplefilter("ignore")
        assert dist.get_rank() == 0
        prog = pkc.compile(Proj(), (torch.randn(4, 8),))
        assert dist.get_rank() == 0
    assert prog.world_size == 2
