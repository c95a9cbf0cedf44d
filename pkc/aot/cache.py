"""``pkc.aot_compile``: a layer compiled once, loaded by later processes without compiling.

    layer = pkc.aot_compile(model, (x,), target="h200", pipeline="default")
    with torch.no_grad():
        y = layer(x)

The first process compiles the layer as ``torch.compile(model, backend=pkc.backend(...))``
does (dynamo, pkc's capture and passes, Inductor) and stores pkc's program as an
AOTInductor package (a shared library with Inductor's kernels, :mod:`pkc.aot_build`).
A later process computes the same key and loads that package through torch's C++ loader
(``torch._C._aoti.AOTIModelPackageLoader``): it imports neither ``torch._dynamo`` nor
``torch._inductor`` nor xDSL, which is what a second ``torch.compile`` process pays
seconds for (docs/PERF_NOTES.md, issue 18). This module is that fast path and may import
only torch and the standard library (tests/unit/test_aot.py checks it in a subprocess).

The key is computed before any tracing, from what decides the program: the module tree
(each module's class, the source file of each class outside torch, the simple attributes
such as ``eps`` and ``training``, hooks), every parameter's and buffer's name, shape,
strides, dtype and device (not their values: the package reads the module's tensors at
each call, so loaded or updated weights are used), the example inputs' metadata, the
target, the pipeline and ``version=`` (a string the user bumps when code the key cannot
see changed, e.g. a helper in another file). The package's ``meta.json`` records torch's
version, pkc's sources digest (:mod:`pkc.sources`) and the GPU's compute capability; a
package built under others is stale: a warning says which changed and the layer is
compiled again (and re-packaged).

The package is built (``build=``): in a detached background process after the first
call (``"background"``, the default: the first process's compile time stays that of
``torch.compile``), inside ``aot_compile`` (``"now"``), or never. Where pkc's program
cannot be one (several ranks, pkc kernel calls, an input mutated in place, a graph
break), the layer runs through ``torch.compile`` in every process and its remarks say
why. Inference only: the package records no autograd graph, so a call with grad enabled
on a tensor that requires grad is refused (run under ``torch.no_grad()``).

Folder: ``$PKC_AOT_CACHE_DIR``, else ``$PKC_CACHE_DIR/aot``, else ``~/.cache/pkc/aot``;
``PKC_AOT_CACHE=0`` turns loading and packaging off.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import os
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils import _pytree as pytree    # imported by torch itself: free

from pkc.kinds import Kind
from pkc.sources import sources_digest

__all__ = ["aot_compile", "AotLayer", "AotError", "Build", "layer_key", "cache_root"]

log = logging.getLogger("pkc.compile")

FORMAT = 2          # of meta.json and the package layout; bump on change
PACKAGE = "model.pt2"
META = "meta.json"
PENDING = "meta.pending.json"   # a built package before its check in a fresh process
FAILED = "failed.json"
LOCK = "building"
LOCK_STALE_S = 1800  # a build lock older than this is a crashed build: ignored


class AotError(RuntimeError):
    """A call the aot-compiled layer cannot run as compiled (shape, dtype, device, grad)."""


class ArgSource(Kind):
    """Where a package's graph argument comes from at each call (meta.json's ``args``)."""

    INPUT = "input"            # the user's call argument of that index
    PARAMETER = "parameter"    # the module's parameter / buffer of that dotted name
    BUFFER = "buffer"


class Build(Kind):
    """When ``aot_compile`` builds the package of a layer it compiled."""

    BACKGROUND = "background"   # a detached process, after the first call
    NOW = "now"                 # inside aot_compile (its time counts in the first call)
    NEVER = "never"             # no package: torch.compile in every process


def cache_root() -> Path:
    d = os.environ.get("PKC_AOT_CACHE_DIR")
    if d:
        return Path(d)
    if os.environ.get("PKC_CACHE_DIR"):
        return Path(os.environ["PKC_CACHE_DIR"]) / "aot"
    return Path.home() / ".cache" / "pkc" / "aot"


def cache_enabled() -> bool:
    return os.environ.get("PKC_AOT_CACHE", "1") != "0"


# ---------------------------------------------------------------------- the key

_FILE_DIGESTS: dict[str, str] = {}
_SIMPLE = (bool, int, float, str, type(None), torch.dtype, torch.device)
_TORCH_DIR = os.path.dirname(torch.__file__)


def _file_digest(path: str | None) -> str:
    """A source file's content hash; torch's own files are covered by torch's version."""
    if not path or path.startswith(_TORCH_DIR):
        return ""
    if path not in _FILE_DIGESTS:
        try:
            _FILE_DIGESTS[path] = hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
        except OSError:
            _FILE_DIGESTS[path] = "?"
    return _FILE_DIGESTS[path]


def _code_desc(obj: Any) -> str:
    """A class or function: its qualified name and its source file's digest (for a class,
    of every class in its MRO below nn.Module: an inherited forward counts)."""
    if isinstance(obj, type):
        parts = []
        for c in obj.__mro__:
            if c in (torch.nn.Module, object):
                break
            try:
                f = inspect.getsourcefile(c)
            except TypeError:
                f = None
            parts.append(f"{c.__module__}.{c.__qualname__}@{_file_digest(f)}")
        return "<".join(parts)
    fn = inspect.unwrap(obj)
    code = getattr(fn, "__code__", None)
    f = code.co_filename if code is not None else None
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}@{_file_digest(f)}"


def _simple(v: Any) -> str | None:
    if isinstance(v, _SIMPLE):
        return repr(v)
    if isinstance(v, (tuple, list)) and all(isinstance(x, _SIMPLE) for x in v):
        return repr(tuple(v))
    return None


def _module_desc(mod: torch.nn.Module) -> list[str]:
    out = [_code_desc(type(mod))]
    for k, v in sorted(mod.__dict__.items()):
        text = _simple(v)
        if text is not None and k not in ("_is_full_backward_hook",):
            out.append(f"{k}={text}")
        elif k.endswith("hooks") and isinstance(v, dict) and v:
            out.append(f"{k}=" + ",".join(_code_desc(h) for h in v.values()))
    return out


def tensor_meta(t: torch.Tensor) -> list:
    """[shape, strides, dtype, device type] of a tensor, as meta.json stores them."""
    return [list(t.shape), list(t.stride()), str(t.dtype).removeprefix("torch."), t.device.type]


def layer_key(model: Any, example_inputs: Sequence[Any], *, target: str, pipeline: str | None,
              version: str = "") -> str:
    """The key of ``model`` compiled for ``example_inputs``: computed without tracing
    (see the module docstring for what it covers)."""
    h = hashlib.sha256()

    def put(*xs: Any) -> None:
        h.update(("|".join(str(x) for x in xs) + "\n").encode())

    dist = torch.distributed
    world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
    put("pkc-aot", FORMAT, version, target, pipeline, world, torch.are_deterministic_algorithms_enabled())
    if isinstance(model, torch.nn.Module):
        for name, mod in model.named_modules(remove_duplicate=False):
            put("module", name, *_module_desc(mod))
        for name, t in list(model.named_parameters(remove_duplicate=False)) + list(
                model.named_buffers(remove_duplicate=False)):
            put("tensor", name, *tensor_meta(t), t.requires_grad)
    else:
        put("function", _code_desc(model))
    for i, x in enumerate(example_inputs):
        if isinstance(x, torch.Tensor):
            put("input", i, *tensor_meta(x))
        else:
            put("input", i, type(x).__qualname__, _simple(x))
    return h.hexdigest()[:32]


def versions(device: torch.device) -> dict[str, str]:
    """What a package is valid for besides its key: torch, pkc's sources, the GPU."""
    cap = ""
    if device.type == "cuda":
        cap = "%d.%d" % torch.cuda.get_device_capability(device)
    return {"torch": torch.__version__, "pkc": sources_digest(), "device": device.type,
            "capability": cap}


def _device_of(tensors: Sequence[Any]) -> torch.device:
    for x in tensors:
        if isinstance(x, torch.Tensor):
            return x.device
    return torch.device("cpu")


# ---------------------------------------------------------------------- the layer


class AotLayer:
    """A compiled layer: call it like the module (positional inputs). ``loaded``: it runs
    the package an earlier process built (no compile in this process); ``remarks``: how it
    was obtained, one line each; ``key`` / ``folder``: its cache entry."""

    def __init__(self, run: Callable[..., Any], *, key: str, folder: Path, loaded: bool,
                 inputs: list[list], remarks: list[str]) -> None:
        self._run = run
        self.key, self.folder, self.loaded = key, folder, loaded
        self._inputs = inputs           # tensor_meta of each example input (None: not a tensor)
        # the same as (torch.Size, strides, dtype, device type): compared field by field
        self._fast = [None if m is None else (torch.Size(m[0]), tuple(m[1]), getattr(torch, m[2]), m[3])
                      for m in inputs]
        self.remarks = remarks

    def __call__(self, *args: Any) -> Any:
        if len(args) != len(self._fast):
            raise AotError(f"pkc.aot_compile'd layer takes {len(self._inputs)} input(s) (as "
                           f"compiled), got {len(args)}")
        for i, (x, want) in enumerate(zip(args, self._fast)):
            if want is not None and (not isinstance(x, torch.Tensor) or x.shape != want[0]
                                     or x.dtype != want[2] or x.stride() != want[1]
                                     or x.device.type != want[3]):
                got = tensor_meta(x) if isinstance(x, torch.Tensor) else type(x).__name__
                raise AotError(f"input {i}: compiled for shape, strides, dtype, device "
                               f"{self._inputs[i]}, got {got}; compile the layer again for these "
                               "inputs (pkc.aot_compile)")
        return self._run(*args)

    def package_ready(self) -> bool:
        """Whether this layer's package exists (a later process will load it)."""
        return (self.folder / META).is_file() and (self.folder / PACKAGE).is_file()

    def wait_for_package(self, timeout: float = 600.0) -> bool:
        """Wait until a background build of this layer's package ends (True: it exists)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if not (self.folder / LOCK).exists():
                break
            time.sleep(0.1)
        return self.package_ready()


def _no_grad_check(tensors: Sequence[torch.Tensor], what: str) -> None:
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        raise AotError(f"{what}: a pkc.aot_compile'd layer runs inference only (the package "
                       "records no backward); call it under torch.no_grad() or "
                       "torch.inference_mode()")


def _resolver(model: Any, kind: str, ref: Any, meta: list) -> Callable[[tuple], torch.Tensor]:
    """How to fetch one argument of the package: user input ``ref``, or the module's
    parameter / buffer ``ref`` (read at each call: replaced or updated weights count)."""
    if ArgSource.parse(kind, "package argument source") is ArgSource.INPUT:
        return lambda args: args[ref]
    prefix, _, leaf = ref.rpartition(".")
    try:
        owner = model.get_submodule(prefix) if prefix else model
    except AttributeError:
        raise AotError(f"the module has no submodule '{prefix}' (the package reads '{ref}')") from None

    seen: list = [None, 0]     # the tensor checked last and its storage address

    def get(_args: tuple) -> torch.Tensor:
        t = getattr(owner, leaf)
        # a weight is checked once, and again when it (or its storage: `.data =`) changes:
        # the per-call cost of a full check is microseconds per tensor
        if t is not seen[0] or t.data_ptr() != seen[1]:
            if not isinstance(t, torch.Tensor) or tensor_meta(t) != meta:
                got = tensor_meta(t) if isinstance(t, torch.Tensor) else type(t).__name__
                raise AotError(f"{kind} '{ref}' is {got}, the package was built for {meta}")
            seen[:] = [t, t.data_ptr()]
        return t

    return get


def _load(folder: Path, model: Any, example_inputs: Sequence[Any], device: torch.device
          ) -> tuple[Callable[..., Any] | None, str]:
    """The package's runner, or None and why not."""
    meta_path = folder / META
    if not meta_path.is_file():
        if (folder / FAILED).is_file():
            try:
                err = str(json.loads((folder / FAILED).read_text()).get("error", ""))[:300]
            except (OSError, ValueError):
                err = ""
            return None, f"an earlier package build failed ({err or 'no message'}; {folder})"
        return None, "no package yet" + (" (a build is running)" if _build_running(folder) else "")
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError) as err:
        return None, f"unreadable {meta_path}: {err}"
    now = versions(device)
    if meta.get("format") != FORMAT:
        return None, f"stale package: format {meta.get('format')} (now {FORMAT})"
    changed = [f"{k} {meta['versions'].get(k)!r} -> {v!r}" for k, v in now.items()
               if meta["versions"].get(k) != v]
    if changed:
        return None, "stale package (" + ", ".join(changed) + ")"
    try:
        resolvers = [_resolver(model, kind, ref, m) for (kind, ref), m in zip(meta["args"], meta["arg_meta"])]
        out_spec = pytree.treespec_loads(meta["out_spec"])
    except (AotError, KeyError, ValueError, TypeError) as err:
        return None, f"stale package: {err}"
    try:
        loader = torch._C._aoti.AOTIModelPackageLoader(
            str(folder / PACKAGE), "model", False, 1, device.index if device.type == "cuda" else -1)
    except Exception as err:  # noqa: BLE001 - a damaged or foreign package: compile again
        return None, f"the package did not load: {str(err).splitlines()[0] if str(err) else err!r}"

    def run(*args: Any) -> Any:
        flat = [r(args) for r in resolvers]
        _no_grad_check(flat, "pkc.aot_compile")
        return pytree.tree_unflatten(loader.boxed_run(flat), out_spec)

    return run, "loaded"


def _build_running(folder: Path) -> bool:
    try:
        return time.time() - (folder / LOCK).stat().st_mtime < LOCK_STALE_S
    except OSError:
        return False


def aot_compile(model: Any, example_inputs: Sequence[Any] | torch.Tensor, *, target: str = "h200",
                pipeline: str | None = "default", build: str | Build = Build.BACKGROUND,
                version: str = "", cache: bool = True, options: dict | None = None,
                explain: bool = False) -> AotLayer:
    """``model`` (a module or function) compiled by pkc for ``example_inputs`` (one rank's
    positional inputs), loaded from the package an earlier process built where there is
    one (see the module docstring). The first process compiles with dynamo, pkc and
    Inductor (``torch.compile(model, backend=pkc.backend(target=, pipeline=))``) and runs
    the layer once on ``example_inputs`` (under ``torch.no_grad``) to do so. ``options``:
    Inductor config for the package's build (part of the key)."""
    t0 = time.perf_counter()
    build = Build.parse(build, "pkc.aot_compile build")
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    example_inputs = tuple(example_inputs)
    if options:
        version = f"{version}|{json.dumps(options, sort_keys=True, default=str)}"
    key = layer_key(model, example_inputs, target=target, pipeline=pipeline, version=version)
    folder = cache_root() / key
    device = _device_of(example_inputs)
    inputs = [tensor_meta(x) if isinstance(x, torch.Tensor) else None for x in example_inputs]
    remarks: list[str] = []
    if cache and cache_enabled():
        run, why = _load(folder, model, example_inputs, device)
        if run is not None:
            remarks.append(f"pkc.aot: loaded the package {folder / PACKAGE} "
                           f"({time.perf_counter() - t0:.3f} s: no compile in this process)")
            log.info("%s", remarks[-1])
            if explain:
                print(remarks[-1], flush=True)
            return AotLayer(run, key=key, folder=folder, loaded=True, inputs=inputs, remarks=remarks)
        if why.startswith(("stale", "the package did not load", "unreadable")):
            warnings.warn(f"pkc.aot_compile: {why} in {folder}; compiling again", RuntimeWarning,
                          stacklevel=2)
        remarks.append(f"pkc.aot: {why}; compiling")
    else:
        build = Build.NEVER
        remarks.append("pkc.aot: the package cache is off (cache=False or PKC_AOT_CACHE=0); compiling")
    from pkc.aot.build import compile_layer

    run = compile_layer(model, example_inputs, folder=folder, target=target, pipeline=pipeline,
                        build=build, versions=versions(device), remarks=remarks, options=options)
    if explain:
        print("\n".join(remarks), flush=True)
    return AotLayer(run, key=key, folder=folder, loaded=False, inputs=inputs, remarks=remarks)
