"""Start-up and shut-down of short-lived command-line tools (``pkc-opt``), made cheap.

``pkc-opt`` runs once per lit test; most of its time is importing xDSL (about 2,000
classes built at import) and tearing the interpreter down again. Three measured costs
(docs/PERF_NOTES.md, "pkc-opt start-up"), each removed here without changing behaviour:

- ``typing_extensions.deprecated`` (used by xDSL's builtin dialect on plain functions)
  imports ``asyncio.coroutines`` to ask whether the function is a coroutine; that import
  runs ``asyncio/__init__`` (ssl, socket, subprocess, concurrent.futures, logging):
  30-80 ms. While xDSL is imported we answer that question with ``inspect`` instead, and
  remove the stand-in again, so a later ``import asyncio`` gets the real package.
- The cyclic garbage collector runs many times while thousands of classes are built,
  and finds nothing to free (classes live until exit): it is paused during the imports
  and what they built is moved out of its view (``gc.freeze``).
- Tearing down the interpreter (clearing every module's objects) takes longer than the
  work of a small input: :func:`exit_now` flushes the standard streams and ends the
  process at once. Use it only where every file was closed (pkc-opt writes with ``with``).
"""

from __future__ import annotations

import gc
import inspect
import os
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["light_imports", "exit_now"]


def _asyncio_stand_in() -> tuple[types.ModuleType, types.ModuleType]:
    package = types.ModuleType("asyncio")
    coroutines = types.ModuleType("asyncio.coroutines")
    # All that typing_extensions.deprecated reads from it (Python 3.11's asyncio:
    # iscoroutinefunction is inspect's test or the marker below).
    coroutines.iscoroutinefunction = inspect.iscoroutinefunction  # type: ignore[attr-defined]
    coroutines._is_coroutine = object()  # type: ignore[attr-defined]
    package.coroutines = coroutines  # type: ignore[attr-defined]
    package.__path__ = []  # a package, so that 'import asyncio.coroutines' resolves
    return package, coroutines


@contextmanager
def light_imports() -> Iterator[None]:
    """Import heavy modules inside this block: no asyncio, no garbage collection."""
    stand_in = None
    if "asyncio" not in sys.modules:
        stand_in = _asyncio_stand_in()
        sys.modules["asyncio"], sys.modules["asyncio.coroutines"] = stand_in
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if stand_in is not None:
            # Only our stand-ins are removed (a real asyncio imported meanwhile stays).
            for name, module in zip(("asyncio", "asyncio.coroutines"), stand_in):
                if sys.modules.get(name) is module:
                    del sys.modules[name]
        gc.freeze()  # what the imports built lives until exit: never scan it again
        if was_enabled:
            gc.enable()


def exit_now(status: int) -> None:
    """Flush stdout / stderr and end the process with ``status``, skipping the teardown."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass  # a closed pipe: nothing more can be said on it
    os._exit(status)
