"""Frontend errors: what went wrong and where in the user's code, never a deep traceback."""

from __future__ import annotations

import traceback

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.nn as nn

import pkc.api as api
from pkc.frontend import PkcFrontendError, fake_process_group

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x * 2
        return funcol.all_reduce(self.fc(h), "sum", dist.group.WORLD)  # LINE-FC


def _line(marker: str) -> int:
    with open(__file__) as f:
        return next(i for i, text in enumerate(f, 1) if f"# {marker}" in text and "_line(" not in text)


def _frames_in_pkc(err: BaseException) -> int:
    return sum("/pkc/" in f.filename for f in traceback.extract_tb(err.__traceback__))


@pytest.fixture
def world4():
    with fake_process_group(4):
        yield


def test_dynamic_shape_names_input_and_node(world4) -> None:
    x = torch.randn(3, 16)
    torch._dynamo.mark_dynamic(x, 0)
    with pytest.raises(PkcFrontendError) as info:
        api.compile(Net(), (x,))
    msg = str(info.value)
    assert "dynamic shape" in msg and "L['x'].size()[0]" in msg
    assert info.value.node is not None and f"fx node '{info.value.node}'" in msg
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_mismatched_example_shape_names_op_and_line(world4) -> None:
    with pytest.raises(PkcFrontendError) as info:
        api.compile(Net(), (torch.randn(3, 15),))
    err = info.value
    assert "example inputs do not fit" in str(err)
    assert err.op == "linear"
    assert err.source is not None and err.source.file == __file__ and err.source.line == _line("LINE-FC")
    assert "[3, 15]" in str(err)
    assert _frames_in_pkc(err) <= 3  # pkc.compile -> capture: no dynamo/aot frames


def test_mismatched_example_count(world4) -> None:
    x = torch.randn(3, 16)
    with pytest.raises(PkcFrontendError, match=r"do not match the signature of Net.forward\(x"):
        api.compile(Net(), (x, x))


def _on_subgroup(x: torch.Tensor, group) -> torch.Tensor:
    return funcol.all_reduce(x * 2, "sum", group)  # LINE-SUB


def test_subgroup_names_node_op_and_line(world4) -> None:
    # [0, 3] is no dimension of a regular mesh of 4 ranks ([1, 4] is not a group): pkc
    # cannot tell which groups the other ranks use (regular sub-groups compile:
    # tests/unit/test_subgroups.py)
    sub = dist.new_group([0, 3])
    with pytest.raises(PkcFrontendError) as info:
        api.compile(lambda x: _on_subgroup(x, sub), (torch.randn(4, 4),))
    err = info.value
    assert err.node == "all_reduce" and err.op == "_c10d_functional.all_reduce.default"
    assert "ranks [0, 3]" in str(err) and "cannot tell the other groups" in str(err)
    assert err.source.line == _line("LINE-SUB")


def test_unequal_all_to_all_splits(world4) -> None:
    def f(x):
        return funcol.all_to_all_single(x, [1, 3, 2, 2], [2, 2, 2, 2], dist.group.WORLD)

    with pytest.raises(PkcFrontendError, match="equal splits only") as info:
        api.compile(f, (torch.randn(8, 4),))
    assert info.value.op == "_c10d_functional.all_to_all_single.default"


def test_world_size_disagrees_with_process_group(world4) -> None:
    with pytest.raises(PkcFrontendError, match="initialized process group has 4 ranks"):
        api.compile(Net(), (torch.randn(3, 16),), world_size=2)


def test_graph_break_is_reported(world4) -> None:
    def f(x):
        if x.sum().item() > 0:  # data-dependent control flow: no single graph
            return x + 1
        return x - 1

    with pytest.raises(PkcFrontendError, match="cannot be captured as one graph"):
        api.compile(f, (torch.randn(4),))


def test_run_simulated_checks_inputs(world4) -> None:
    prog = api.compile(Net(), (torch.randn(3, 16),))
    x = torch.randn(3, 16)
    with pytest.raises(PkcFrontendError, match="inputs for 4 ranks"):
        prog.run_simulated([(x,)] * 3)
    with pytest.raises(PkcFrontendError, match=r"input 'x' should be a \[3, 16\]"):
        prog.run_simulated([(torch.randn(3, 15),)] * 4)
    with pytest.raises(PkcFrontendError, match=r"parameter 'fc.weight' should be a \[8, 16\]"):
        prog.run_simulated([(x,)] * 4, params={"fc.weight": torch.randn(8, 15), "fc.bias": torch.randn(8)})


def test_unknown_target() -> None:
    with pytest.raises(PkcFrontendError, match="unknown target 'a100'"):
        api.compile(lambda x: x + 1, (torch.randn(2),), target="a100")
