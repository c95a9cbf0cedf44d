"""Eager PyTorch over W simulated ranks on the CPU: the reference pkc is checked against.

:func:`run_ranks` runs ``fn(rank)`` on W threads, each with rank ``rank`` of torch's threaded
process group (``torch.testing._internal.distributed.multi_threaded_pg``, the one
``MultiThreadedTestCase`` uses). Collectives have their real semantics: in-place
``dist.all_reduce``, funcol, DeviceMesh and DTensor (``parallelize_module``) all work, so
the user's unmodified model runs as it would under ``torchrun``.

Notes:
- The threads share torch's global RNG: create weights and inputs *before* calling
  :func:`run_ranks` (or seed a ``torch.Generator`` per rank), never with ``torch.randn``
  inside ``fn``.
- A process group initialized in the calling thread (e.g. the fake one used for tracing)
  is set aside while the threads run and restored afterwards.
- One simulation at a time per process (a lock enforces it).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.distributed as dist

__all__ = ["run_ranks", "run_eager", "SimulationError"]

_LOCK = threading.Lock()


class SimulationError(RuntimeError):
    """A rank failed (or hung) while running the eager reference."""


@contextlib.contextmanager
def _threaded_world() -> Iterator[Any]:
    from torch.testing._internal.distributed.multi_threaded_pg import (
        ProcessLocalGroup,
        _install_threaded_pg,
        _uninstall_threaded_pg,
    )

    with _LOCK:
        torch._C._distributed_c10d._set_thread_isolation_mode(True)
        try:
            world = _install_threaded_pg()
            try:
                yield world
            finally:
                ProcessLocalGroup.reset()
                _uninstall_threaded_pg()
        finally:
            torch._C._distributed_c10d._set_thread_isolation_mode(False)


def run_ranks(world_size: int, fn: Callable[[int], Any], *, timeout: float = 120.0) -> list[Any]:
    """``[fn(0), ..., fn(W-1)]``, each call on its own thread as one rank of a W-rank
    threaded process group (initialized before ``fn`` runs, destroyed after)."""
    from torch.testing._internal.distributed.multi_threaded_pg import ProcessLocalGroup

    results: list[Any] = [None] * world_size
    errors: list[tuple[int, BaseException]] = []

    with _threaded_world():
        store = dist.HashStore()

        def worker(rank: int) -> None:
            try:
                dist.init_process_group("threaded", rank=rank, world_size=world_size, store=store)
                with torch.no_grad():
                    results[rank] = fn(rank)
            except BaseException as err:  # noqa: BLE001 - reported below
                errors.append((rank, err))
                ProcessLocalGroup.exception_handle(err)  # wake up ranks waiting on this one
            finally:
                if dist.is_initialized():
                    dist.destroy_process_group()

        threads = [threading.Thread(target=worker, args=(r,), daemon=True) for r in range(world_size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout)
        hung = [r for r, t in enumerate(threads) if t.is_alive()]
    if errors:
        # Ranks woken up by another rank's failure exit with SystemExit: report the cause.
        causes = [e for e in errors if not isinstance(e[1], SystemExit)] or errors
        rank, err = min(causes, key=lambda e: e[0])
        raise SimulationError(f"rank {rank} of {world_size} failed: {type(err).__name__}: {err}") from err
    if hung:
        raise SimulationError(f"ranks {hung} of {world_size} did not finish within {timeout} s")
    return results


def run_eager(
    make: Callable[[int], Callable[..., Any]],
    per_rank_inputs: Sequence[Sequence[Any]],
    *,
    world_size: int | None = None,
) -> list[list[torch.Tensor]]:
    """Run a program eagerly on W simulated ranks and flatten each rank's outputs.

    ``make(rank)`` builds rank ``rank``'s callable inside its thread (so that
    ``init_device_mesh``/``parallelize_module`` see that rank's process group; load weights
    created beforehand). It is called with ``*per_rank_inputs[rank]``.
    """
    w = world_size if world_size is not None else len(per_rank_inputs)
    if len(per_rank_inputs) != w:
        raise ValueError(f"expected inputs for {w} ranks, got {len(per_rank_inputs)}")

    def one(rank: int) -> list[torch.Tensor]:
        out = make(rank)(*per_rank_inputs[rank])
        return _flatten(out)

    return run_ranks(w, one)


def _flatten(out: Any) -> list[torch.Tensor]:
    from torch.utils._pytree import tree_leaves

    leaves = []
    for x in tree_leaves(out):
        if isinstance(x, torch.Tensor):
            try:
                from torch.distributed.tensor import DTensor

                if isinstance(x, DTensor):
                    x = x.to_local()
            except ImportError:  # pragma: no cover
                pass
            leaves.append(x.detach().clone())
    return leaves
