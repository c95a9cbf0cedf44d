"""Runs a graph-level function on the GPU: its ``pk.kernel`` ops as compiled kernels in a
virtual world (or under torch.distributed), everything else through torch on CUDA
tensors with the interpreter's own per-op rules, so the result compares directly with
:func:`pkc.interp.interpret`."""

from __future__ import annotations

import os

import torch
from xdsl.dialects.builtin import ModuleOp

from pkc.codegen.emit import CompiledKernel, compile_kernel
from pkc.dialects.kernel import KernelOp
from pkc.runtime.world import DEFAULT_TIMEOUT_S, VirtualWorld

_DEFAULT_RUNNER = None
_COMPILED: dict[tuple[str, str, bool | None], CompiledKernel] = {}


_ARCH_OF_CAPABILITY = {(9, 0): "sm_90a", (10, 0): "sm_100a"}


def target_for(capability: tuple[int, int], target=None) -> str:
    """The architecture the kernels are compiled for. ``target``: what the program was
    compiled for (a GPU name such as ``"h200"``, a :class:`~pkc.target.targets.Target`, or
    an architecture such as ``"sm_90a"``): its architecture, which this GPU must run (an
    error names both otherwise). Without one: ``$PKC_TARGET``, else the GPU's own (sm_90a
    on Hopper, sm_100a on Blackwell, else the portable sm_80 path)."""
    if target is None:
        env = os.environ.get("PKC_TARGET")
        if env:
            return env
        return _ARCH_OF_CAPABILITY.get(tuple(capability), "sm_80")
    arch = getattr(target, "sm_arch", None)
    name = getattr(target, "name", target)
    if arch is None and not str(target).startswith("sm_"):
        from pkc.target.targets import get_target

        arch = get_target(str(target)).sm_arch
    arch = arch or str(target)
    own = _ARCH_OF_CAPABILITY.get(tuple(capability))
    if arch in _ARCH_OF_CAPABILITY.values() and arch != own:
        from pkc.runtime.errors import RuntimeUnavailable

        raise RuntimeUnavailable(
            f"pkc: the program was compiled for {name} ({arch}) but this GPU is compute "
            f"capability {capability[0]}.{capability[1]}"
            + (f" ({own})" if own else "") + ": compile it with the target of this GPU "
            "(e.g. target='h200' on Hopper)")
    return arch


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
    tensors). ``target``: what the program was compiled for (a GPU name or an architecture;
    default: the GPU's own, see :func:`target_for`); ``bulk`` chooses the portable codegen
    path's variant. The module's scheduled kernels run as built, the others on the portable
    path. Prepared once per (module, world, options): see :mod:`pkc.runtime.executable`."""
    from pkc.runtime.executable import Executable, executable_for
    from pkc.runtime.peers import VirtualPeers

    def make():
        general = runner or VirtualWorld(world, device, green)
        peers = VirtualPeers(world, general.device, green)
        return Executable(module, peers, general, target=target_for(general.capability, target),
                          func_name=func_name, timeout_s=timeout_s, bulk=bulk)
    ex = executable_for(module, ("virtual", world, str(device), func_name, target, bulk,
                                 timeout_s, green, id(runner)), make)
    outs = ex.run({r: per_rank_inputs[r] for r in range(world)})
    return [outs[r] for r in range(world)]


def run_kernel_module_distributed(module: ModuleOp, inputs: list[torch.Tensor], *,
                                  func_name: str = "main", target: str | None = None,
                                  timeout_s: float = DEFAULT_TIMEOUT_S,
                                  runner=None) -> list[torch.Tensor]:
    """The same under torch.distributed: this rank's inputs -> this rank's outputs.
    Collectives must have been lowered into kernels."""
    from pkc.runtime.executable import Executable, executable_for
    from pkc.runtime.symm import DistributedRunner

    global _DEFAULT_RUNNER
    if runner is None:
        _DEFAULT_RUNNER = _DEFAULT_RUNNER or DistributedRunner()
        runner = _DEFAULT_RUNNER

    def make():
        return Executable(module, runner.peers, runner, target=target_for(runner.capability, target),
                          func_name=func_name, timeout_s=timeout_s, distributed=True)
    ex = executable_for(module, ("dist", func_name, target, timeout_s, id(runner)), make)
    return ex.run({runner.rank: inputs})[runner.rank]
