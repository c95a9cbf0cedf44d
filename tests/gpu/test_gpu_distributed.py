"""The torch.distributed path (symmetric memory from torch.distributed._symmetric_memory).
Run alone it uses a 1-rank NCCL group on one GPU; under torchrun it uses the launched
world (one GPU per process)."""

from __future__ import annotations

import os

import pytest
import torch

from tests.gpu import kernels as K
from tests.gpu.helpers import check_outputs


@pytest.fixture(scope="module")
def group():
    import torch.distributed as dist

    if not dist.is_initialized():
        if "WORLD_SIZE" not in os.environ:
            os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29517", RANK="0", WORLD_SIZE="1")
        rank = int(os.environ["RANK"])
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
        dist.init_process_group("nccl", rank=rank, world_size=int(os.environ["WORLD_SIZE"]),
                                device_id=torch.device("cuda", torch.cuda.current_device()))
    yield dist.group.WORLD


@pytest.mark.parametrize("maker", ["unit_all_reduce", "all_reduce", "gemm_ar", "all_gather"])
def test_distributed_kernel(group, maker):
    import torch.distributed as dist
    from pkc.interp import random_inputs
    from pkc.ir import parse_module, verify_module
    from pkc.runtime.execute import run_kernel_module_distributed
    from pkc.runtime.symm import DistributedRunner

    W, rank = dist.get_world_size(), dist.get_rank()
    case = {"unit_all_reduce": lambda: K.unit_all_reduce(W, "bf16"),
            "all_reduce": lambda: K.all_reduce(W, 100, 200, "bf16"),
            "gemm_ar": lambda: K.gemm_ar(W, 100, 72, 96, "f16"),
            "all_gather": lambda: K.all_gather(W, 70, 130, "bf16")}[maker]()
    module = parse_module(case.ir, case.name)
    verify_module(module)
    inputs = random_inputs(module, W, 3)  # same seed on every rank: everyone knows all inputs
    if case.reference is not None:
        expected = case.reference(inputs)[rank]
    else:
        from pkc.interp import interpret

        expected = interpret(module, inputs, W)[rank]
    runner = DistributedRunner()
    for _ in range(2):  # buffers are reused across calls
        out = run_kernel_module_distributed(module, inputs[rank], runner=runner, timeout_s=2.0)
        check_outputs(case.name, [out], [expected], case.atol, case.rtol)
