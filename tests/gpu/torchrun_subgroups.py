"""Sub-group kernels under torch.distributed (one process per rank): a 2-D DeviceMesh, the
kernels over its TP dimension with symmetric memory rendezvoused on each TP group's
process group (pkc/runtime/groups.py), against torch per group.

    torchrun --nproc_per_node=4 tests/gpu/torchrun_subgroups.py [tp]      # one GPU per rank

It needs one GPU per rank: with every rank on one GPU (gloo for the host side), torch's
symmetric memory refuses the rendezvous ("detected allocations from overlapping devices
from different ranks", seen on the H200, 2026-12-02). Not run on several GPUs yet.

Every rank makes all ranks' inputs from one seed, runs its own, and checks its outputs
against torch_reference of tests/gpu/test_gpu_subgroups.py; prints one line per rank and
call, exits 1 on a mismatch.
"""

import os
import sys

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

sys.path.insert(0, os.getcwd())


def main() -> int:
    from torch.distributed.device_mesh import init_device_mesh

    from pkc.interp import random_inputs
    from pkc.ir import parse_module
    from pkc.passes.registry import run_pipeline
    from pkc.runtime.execute import run_kernel_module_distributed
    from pkc.runtime.symm import DistributedRunner
    from tests.gpu.helpers import check_outputs, gemm_atol
    from tests.gpu.test_gpu_subgroups import program, torch_reference, tp_groups

    rank, W = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dist.init_process_group("nccl", rank=rank, world_size=W)
    tp = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    init_device_mesh("cuda", (W // tp, tp), mesh_dim_names=("dp", "tp"))   # the TP groups
    groups = tp_groups(W, tp)
    ir = program(groups, "bf16", Mc=37, K=200, N=136)
    module = parse_module(ir, "mesh.mlir")
    run_pipeline("default{force=true},schedule", module)
    runner = DistributedRunner()
    ok = True
    for call in range(3):
        inputs = random_inputs(parse_module(ir), W, call)    # every rank knows all inputs
        out = run_kernel_module_distributed(module, inputs[rank], runner=runner, timeout_s=5.0)
        want = torch_reference(groups, inputs)
        try:
            check_outputs(f"rank {rank} call {call}", [[o.cpu() for o in out]], [want[rank]],
                          gemm_atol(want, tp), 2e-2)
            print(f"rank {rank} call {call}: PASS ({len(out)} outputs, groups {groups})", flush=True)
        except AssertionError as e:
            ok = False
            print(f"rank {rank} call {call}: FAIL {str(e).splitlines()[0]}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
