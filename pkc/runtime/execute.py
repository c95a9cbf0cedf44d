"""Runs a graph-level function on the GPU: its ``pk.kernel`` ops as compiled kernels in a
virtual world (or under torch.distributed), everything else through torch on CUDA
tensors with the interpreter's own per-op rules, so the result compares directly with
:func:`pkc.interp.interpret`."""

from __future__ import annotations

import os

import torch
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp

from pkc.codegen.emit import CompiledKernel, compile_kernel
from pkc.dialects.kernel import KernelOp
from pkc.runtime.world import DEFAULT_TIMEOUT_S, VirtualWorld

_COMPILED: dict[tuple[str, str, bool | None], CompiledKernel] = {}


def target_for(capability: tuple[int, int]) -> str:
    """``$PKC_TARGET``, else the GPU's own: sm_90a (Hopper), sm_100a (Blackwell), else
    the portable sm_80 path."""
    env = os.environ.get("PKC_TARGET")
    if env:
        return env
    return {(9, 0): "sm_90a", (10, 0): "sm_100a"}.get(tuple(capability), "sm_80")


def compiled(kop: KernelOp, target: str, bulk: bool | None = None) -> CompiledKernel:
    key = (str(kop), target, bulk)
    if key not in _COMPILED:
        _COMPILED[key] = compile_kernel(kop, target, bulk=bulk)
    return _COMPILED[key]


def run_kernel_module(module: ModuleOp, per_rank_inputs: list[list[torch.Tensor]], world: int,
                      device: int | torch.device | None = None, *, func_name: str = "main",
                      target: str | None = None, bulk: bool | None = None,
                      timeout_s: float = DEFAULT_TIMEOUT_S, green: bool = True,
                      runner: VirtualWorld | None = None) -> list[list[torch.Tensor]]:
    """Runs ``@func_name`` for ``world`` ranks on one GPU; returns ``outputs[r]`` (CUDA
    tensors). ``target``/``bulk`` choose the codegen path (default: the GPU's own)."""
    from pkc.interp.graph import _LOCAL, _WORLD, _run_opaque, find_function
    from pkc.dialects import graph as g

    runner = runner or VirtualWorld(world, device, green)
    target = target or target_for(runner.capability)
    fn = find_function(module, func_name)
    dev = runner.device
    env: dict = {}
    for i, arg in enumerate(fn.body.blocks[0].args):
        env[arg] = [per_rank_inputs[r][i].to(dev) for r in range(world)]
    for op in fn.body.blocks[0].ops:
        if isinstance(op, func.ReturnOp):
            results = [env[v] for v in op.arguments]
            return [[res[r] for res in results] for r in range(world)]
        operands = [env[v] for v in op.operands]
        if isinstance(op, KernelOp):
            ck = compiled(op, target, bulk)
            per_rank = runner.run(ck, [[o[r] for o in operands] for r in range(world)], timeout_s)
            outs = [[per_rank[r][i] for r in range(world)] for i in range(len(op.outputs))]
        elif isinstance(op, g.COLLECTIVE_OPS):
            outs = [_WORLD[type(op)](op, operands[0], world)]
        elif isinstance(op, g.OpaqueOp):
            rr = [_run_opaque(op, [o[r] for o in operands]) for r in range(world)]
            outs = [[rr[r][i] for r in range(world)] for i in range(len(op.outputs))]
        elif type(op) in _LOCAL:  # .to(dev): pk.constant makes its tensor on the CPU
            outs = [[_LOCAL[type(op)](op, *[o[r] for o in operands]).to(dev) for r in range(world)]]
        else:
            raise NotImplementedError(f"'{op.name}' cannot run at graph level on the GPU")
        for res, val in zip(op.results, outs):
            env[res] = val
    raise ValueError(f"function @{func_name} has no func.return")


def run_kernel_module_distributed(module: ModuleOp, inputs: list[torch.Tensor], *,
                                  func_name: str = "main", target: str | None = None,
                                  timeout_s: float = DEFAULT_TIMEOUT_S, runner=None) -> list[torch.Tensor]:
    """The same under torch.distributed: this rank's inputs -> this rank's outputs.
    Collectives outside kernels go through torch.distributed's functional collectives."""
    from pkc.dialects import graph as g
    from pkc.interp.graph import _LOCAL, _run_opaque, find_function
    from pkc.runtime.symm import DistributedRunner

    runner = runner or DistributedRunner()
    target = target or target_for(runner.capability)
    fn = find_function(module, func_name)
    env: dict = {a: inputs[i].to(runner.device) for i, a in enumerate(fn.body.blocks[0].args)}
    for op in fn.body.blocks[0].ops:
        if isinstance(op, func.ReturnOp):
            return [env[v] for v in op.arguments]
        operands = [env[v] for v in op.operands]
        if isinstance(op, KernelOp):
            outs = runner.run(compiled(op, target), operands, timeout_s)
        elif isinstance(op, g.OpaqueOp):  # torch ops pkc does not compile run as they are
            outs = [o.to(runner.device) for o in _run_opaque(op, operands)]
        elif type(op) in _LOCAL:
            outs = [_LOCAL[type(op)](op, *operands).to(runner.device)]
        else:
            raise NotImplementedError(f"'{op.name}' outside a pk.kernel under torch.distributed")
        for res, val in zip(op.results, outs):
            env[res] = val
    raise ValueError(f"function @{func_name} has no func.return")
