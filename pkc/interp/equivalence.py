"""Checks that two modules compute the same thing, on random inputs, over world sizes.

Every pass test uses this (through :func:`pkc.testing.check_transform`, which runs the
pass): interp(IR before) must equal interp(IR after). Data movement
must match exactly (``exact=True``); when a rewrite reorders floating-point sums, results
must agree within a tolerance stated per element type (DEFAULT_TOLERANCE, overridable).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from xdsl.dialects.builtin import ModuleOp

from pkc.interp.api import interpret, random_inputs

# (rtol, atol) per dtype for results whose float sums may be reordered. bf16 keeps 8 bits
# of mantissa (relative step 2^-8 = 0.004), so a sum of a few rounded terms can differ by
# a few steps; f32 sums of short random vectors agree to ~1e-6.
DEFAULT_TOLERANCE = {
    torch.bfloat16: (2e-2, 2e-2),
    torch.float16: (2e-3, 2e-3),
    torch.float32: (1e-5, 1e-5),
    torch.float64: (1e-12, 1e-12),
}
WORLD_SIZES = (1, 2, 3, 4, 8)


class EquivalenceError(AssertionError):
    """Two modules gave different results; the message says where and by how much."""


def check_equivalent(
    before: ModuleOp,
    after: ModuleOp,
    world_size: int,
    seeds: Sequence[int] = (0, 1),
    func: str = "main",
    exact: bool = False,
    tolerance: dict | None = None,
) -> None:
    """Runs both modules on the same random per-rank inputs and compares every output of
    every rank. Raises EquivalenceError naming seed, rank, output and the worst element."""
    for seed in seeds:
        inputs = random_inputs(before, world_size, seed, func)
        expected = interpret(before, _clone(inputs), world_size, func, schedule_seed=seed)
        got = interpret(after, _clone(inputs), world_size, func, schedule_seed=seed + 1)
        compare_outputs(expected, got, exact, tolerance, context=f"W={world_size} seed={seed}")


def compare_outputs(expected, got, exact=False, tolerance=None, context="") -> None:
    """Compares per-rank output lists (``outputs[rank][i]``)."""
    if len(expected) != len(got):
        raise EquivalenceError(f"{context}: {len(expected)} ranks vs {len(got)}")
    for rank, (exp_r, got_r) in enumerate(zip(expected, got)):
        if len(exp_r) != len(got_r):
            raise EquivalenceError(f"{context}: rank {rank} has {len(exp_r)} outputs vs {len(got_r)}")
        for i, (e, g) in enumerate(zip(exp_r, got_r)):
            _compare(e, g, exact, tolerance or DEFAULT_TOLERANCE, f"{context} rank {rank} output {i}")


def _compare(e: torch.Tensor, g: torch.Tensor, exact: bool, tolerance: dict, where: str) -> None:
    if e.shape != g.shape or e.dtype != g.dtype:
        raise EquivalenceError(f"{where}: {tuple(e.shape)} {e.dtype} vs {tuple(g.shape)} {g.dtype}")
    if e.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):  # only moved, never computed:
        e, g, exact = e.float(), g.float(), True               # bit-exact (as f32: eq has no fp8)
    if exact or not e.dtype.is_floating_point:
        same = (e == g) | (e.isnan() & g.isnan()) if e.is_floating_point() else e == g
        if not bool(same.all()):
            pos = _first((~same).nonzero())
            raise EquivalenceError(
                f"{where}: {int((~same).sum())} elements differ (exact comparison); first at "
                f"{pos}: expected {e[pos].item()}, got {g[pos].item()}"
            )
        return
    if bool((g.isnan() & ~e.isnan()).any()):
        pos = _first((g.isnan() & ~e.isnan()).nonzero())
        raise EquivalenceError(f"{where}: NaN at {pos} (uninitialized memory read, or never written)")
    rtol, atol = tolerance[e.dtype]
    ed, gd = e.double(), g.double()
    excess = (ed - gd).abs() - (atol + rtol * ed.abs())
    if bool((excess > 0).any()):
        pos = _first((excess == excess.max()).nonzero())
        raise EquivalenceError(
            f"{where}: {int((excess > 0).sum())} of {e.numel()} elements outside rtol={rtol} "
            f"atol={atol}; worst at {pos}: expected {ed[pos].item():.6g}, got {gd[pos].item():.6g}"
        )


def _first(nonzero: torch.Tensor) -> tuple[int, ...]:
    return tuple(int(i) for i in nonzero[0])


def _clone(inputs):
    return [[x.clone() for x in rank] for rank in inputs]

