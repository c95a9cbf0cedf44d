"""Start-up and shut-down of short-lived command-line tools (``pkc-opt``), made cheap.

``pkc-opt`` runs once per lit test; most of its time is importing xDSL (about 2,000
classes built at import) and tearing the interpreter down again. Four measured costs
(docs/PERF_NOTES.md, "pkc-opt start-up"), each removed here without changing behaviour:

- ``typing_extensions.deprecated`` (used by xDSL's builtin dialect on plain functions)
  imports ``asyncio.coroutines`` to ask whether the function is a coroutine; that import
  runs ``asyncio/__init__`` (ssl, socket, subprocess, concurrent.futures, logging):
  30-80 ms. While xDSL is imported we answer that question with ``inspect`` instead, and
  remove the stand-in again, so a later ``import asyncio`` gets the real package.
- ``@dataclass`` writes the source of every generated method (``__init__``, ``__eq__``,
  ``__repr__``, ...) and compiles it: xDSL's import compiles about 1,100 such snippets,
  a third of its import time. Compiling a given text always gives the same code object,
  so :class:`_CodeCache` keeps the code objects, keyed by their source text, in a file
  next to Python's own byte-code cache and reuses them in the next process.
- The cyclic garbage collector runs many times while thousands of classes are built,
  and finds nothing to free (classes live until exit): it is paused during the imports
  and what they built is moved out of its view (``gc.freeze``).
- Tearing down the interpreter (clearing every module's objects) takes longer than the
  work of a small input: :func:`exit_now` flushes the standard streams and ends the
  process at once. Use it only where every file was closed (pkc-opt writes with ``with``).
"""

from __future__ import annotations

import builtins
import dataclasses
import gc
import inspect
import marshal
import os
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["light_imports", "exit_now", "code_cache_path"]


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


# A cache of more entries than this is started afresh from what the current process used
# (texts of an older xDSL or Python would otherwise pile up forever).
_CACHE_MAX_ENTRIES = 20_000


def code_cache_path() -> Path | None:
    """The file of compiled ``@dataclass`` methods: in pkc's ``__pycache__`` (ignored by
    git, like the byte code), one per Python version (marshal's format is per version).
    The environment variable ``PKC_CODE_CACHE`` names another file, or with ``0`` turns
    the cache off (``None``)."""
    chosen = os.environ.get("PKC_CODE_CACHE")
    if chosen == "0":
        return None
    if chosen:
        return Path(chosen)
    package = Path(__file__).resolve().parents[1]
    return package / "__pycache__" / f"dataclass_code.{sys.implementation.cache_tag}.marshal"


class _CodeCache:
    """Code objects of the source texts ``dataclasses`` executes, by text (each stored
    marshalled: a run unmarshals only the ones it uses, a third of the file's load time).

    Installed as ``dataclasses.exec`` (the module looks ``exec`` up in its globals before
    the builtins): a text seen before runs its stored code object instead of being
    compiled again. The code is compiled exactly as ``exec`` would (file ``<string>``, no
    inherited ``__future__`` flags), so the functions made are the same. A missing,
    unreadable or corrupt cache file is an empty cache; a failed write is ignored.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.codes: dict[str, bytes] = {}  # text -> marshalled code object
        self.used: dict[str, types.CodeType] = {}  # what this process ran, by text
        self.missed = 0
        try:
            loaded = marshal.loads(path.read_bytes())
            if isinstance(loaded, dict) and all(type(v) is bytes for v in loaded.values()):
                self.codes = loaded
        except (OSError, EOFError, ValueError, TypeError):
            pass  # no cache yet, or one written by something else: start empty

    def exec(self, source: object, globals_: dict | None = None, locals_: dict | None = None) -> None:
        if not isinstance(source, str):
            return builtins.exec(source, globals_, locals_)  # type: ignore[arg-type]
        code = self.used.get(source)
        if code is None:
            code = self._stored(source)
            if code is None:
                code = compile(source, "<string>", "exec", dont_inherit=True)
                self.codes[source] = marshal.dumps(code)
                self.missed += 1
            self.used[source] = code
        return builtins.exec(code, globals_, locals_)

    def _stored(self, source: str) -> types.CodeType | None:
        stored = self.codes.get(source)
        if stored is None:
            return None
        try:
            code = marshal.loads(stored)
        except (EOFError, ValueError, TypeError):
            return None  # a damaged entry: compiled again (and rewritten)
        return code if isinstance(code, types.CodeType) else None

    def save(self) -> None:
        """Write the cache if this process compiled something new (atomically: parallel
        runs each replace the whole file; the last one wins, the others refill it later)."""
        if not self.missed or sys.dont_write_bytecode:
            return
        codes = self.codes
        if len(codes) > _CACHE_MAX_ENTRIES:
            codes = {text: marshal.dumps(code) for text, code in self.used.items()}
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_bytes(marshal.dumps(codes))
            os.replace(tmp, self.path)
        except (OSError, ValueError):
            try:  # a read-only install, a full disk: run without the cache
                tmp.unlink(missing_ok=True)
            except OSError:
                pass
        self.missed = 0


_depth = 0  # light_imports blocks entered and not yet left (they nest)
_cache: _CodeCache | None = None


@contextmanager
def light_imports() -> Iterator[None]:
    """Import heavy modules inside this block: no asyncio, no garbage collection, and
    ``@dataclass`` methods from the code cache. Blocks nest; the outermost one sets up
    and restores."""
    global _depth, _cache
    stand_in = None
    installed_cache = False
    if _depth == 0:
        if "asyncio" not in sys.modules:
            stand_in = _asyncio_stand_in()
            sys.modules["asyncio"], sys.modules["asyncio.coroutines"] = stand_in
        path = code_cache_path()
        if "exec" not in vars(dataclasses) and path is not None:
            if _cache is None or _cache.path != path:
                _cache = _CodeCache(path)
            dataclasses.exec = _cache.exec  # type: ignore[attr-defined]
            installed_cache = True
    _depth += 1
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        _depth -= 1
        if installed_cache:
            if vars(dataclasses).get("exec") == _cache.exec:  # type: ignore[union-attr]
                del dataclasses.exec  # type: ignore[attr-defined]
            _cache.save()  # type: ignore[union-attr]
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
