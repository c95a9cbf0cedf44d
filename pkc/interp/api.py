"""Entry points: run a module's function for W ranks, and make random per-rank inputs."""

from __future__ import annotations

import torch
from xdsl.dialects.builtin import ModuleOp, TensorType

from pkc.interp.graph import find_function, run_function
from pkc.interp.values import InterpError, torch_dtype


def interpret(
    module: ModuleOp,
    inputs: list[list[torch.Tensor]],
    world_size: int,
    func: str = "main",
    schedule_seed: int = 0,
    ctas: int | None = None,
) -> list[list[torch.Tensor]]:
    """Runs ``@func`` on ``world_size`` simulated ranks.

    ``inputs[r]`` is rank r's list of arguments (torch tensors with the argument types'
    shapes and dtypes). Returns ``outputs[r]``, rank r's results. ``schedule_seed`` picks
    how concurrent workers interleave inside kernels (for a scheduled kernel: 0 round-robin,
    else a random order drawn from it); ``ctas`` is the CTAs per rank of a scheduled
    kernel's persistent grid (None: min(4, tiles)). Protocol bugs raise InterpError.
    """
    fn = find_function(module, func)
    arg_types = fn.function_type.inputs.data
    if len(inputs) != world_size:
        raise InterpError(f"expected inputs for {world_size} ranks, got {len(inputs)}")
    for r, rank_inputs in enumerate(inputs):
        if len(rank_inputs) != len(arg_types):
            raise InterpError(
                f"@{func} takes {len(arg_types)} arguments, rank {r} has {len(rank_inputs)}"
            )
        for i, (t, x) in enumerate(zip(arg_types, rank_inputs)):
            _check_argument(func, r, i, t, x)
    return run_function(fn, inputs, world_size, schedule_seed, ctas)


def _check_argument(func: str, rank: int, i: int, t, x) -> None:
    if not isinstance(t, TensorType):
        raise InterpError(f"@{func} argument {i} has type {t}; only tensors can be passed in")
    shape, dtype = tuple(t.get_shape()), torch_dtype(t.element_type)
    if not isinstance(x, torch.Tensor) or tuple(x.shape) != shape or x.dtype != dtype:
        got = f"{tuple(x.shape)} {x.dtype}" if isinstance(x, torch.Tensor) else type(x).__name__
        raise InterpError(
            f"@{func} argument {i} on rank {rank} should be a {shape} {dtype} tensor, got {got}"
        )


def random_inputs(module: ModuleOp, world_size: int, seed: int, func: str = "main",
                  scale: float = 1.0) -> list[list[torch.Tensor]]:
    """Random arguments, different on every rank: floats ~ N(0, scale^2), integers in
    [0, 8), booleans fair coins. Never zeros, so a dropped write shows."""
    fn = find_function(module, func)
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(world_size):
        args = []
        for t in fn.function_type.inputs.data:
            shape, dtype = tuple(t.get_shape()), torch_dtype(t.element_type)
            if dtype.is_floating_point:
                x = (torch.randn(shape, generator=gen, dtype=torch.float64) * scale).to(dtype)
            elif dtype == torch.bool:
                x = torch.rand(shape, generator=gen) < 0.5
            else:
                x = torch.randint(0, 8, shape, generator=gen, dtype=dtype)
            args.append(x)
        out.append(args)
    return out
