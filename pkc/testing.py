"""The pass-test harness: :func:`check_transform` runs a pass (or a pipeline) on a module
and checks with the reference interpreter that the result computes what the input does.

It joins the passes and the interpreter, so it lives above both: ``pkc.interp`` must not
import ``pkc.passes`` (tests/unit/test_layering.py), and the passes never import the
interpreter (they run without torch).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from xdsl.dialects.builtin import ModuleOp

from pkc.interp.equivalence import WORLD_SIZES, check_equivalent

__all__ = ["check_transform"]


def check_transform(
    make_module: Callable[[int], ModuleOp],
    transform: Callable[[ModuleOp], object] | str,
    world_sizes: Sequence[int] = WORLD_SIZES,
    seeds: Sequence[int] = (0, 1),
    exact: bool = False,
    tolerance: dict | None = None,
    func: str = "main",
) -> None:
    """For each world size W: builds ``make_module(W)``, applies ``transform`` (a callable
    that rewrites a module in place, or a pass pipeline string) to a copy, verifies the
    copy and checks that it computes what the original computes."""
    for w in world_sizes:
        before = make_module(w)
        before.verify()
        after = before.clone()
        _apply(transform, after)
        after.verify()
        check_equivalent(before, after, w, seeds, func, exact, tolerance)


def _apply(transform, module: ModuleOp) -> None:
    if isinstance(transform, str):
        from pkc.passes.registry import run_pipeline

        run_pipeline(transform, module)
    else:
        transform(module)
