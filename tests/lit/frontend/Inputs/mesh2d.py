"""Captures a TP-inside-DP program on a 2-D device mesh (fake process group) and prints
the imported IR (used by mesh2d-import.mlir)."""

import sys
import warnings

import torch
import torch.distributed._functional_collectives as funcol
from torch.distributed.device_mesh import init_device_mesh

import pkc
from pkc.frontend import fake_process_group

dp_size, tp_size = (int(a) for a in sys.argv[1:3])
warnings.simplefilter("ignore")
with fake_process_group(dp_size * tp_size):
    mesh = init_device_mesh("cpu", (dp_size, tp_size), mesh_dim_names=("dp", "tp"))

    def layer(x, w1, w2):
        h = funcol.all_gather_tensor(x, 0, mesh["tp"])                  # sequence parallel in
        y = torch.relu(h @ w1) @ w2
        y = funcol.reduce_scatter_tensor(y, "sum", 0, mesh["tp"])      # ... and out
        return funcol.all_reduce(y.sum(0), "avg", mesh["dp"])          # a DP reduction

    prog = pkc.compile(layer, (torch.randn(3, 8), torch.randn(8, 16), torch.randn(16, 8)))
    print(prog.ir())
