"""The one place where passes register, and where pipeline strings are parsed.

A pk pass is one file in ``pkc/passes/`` with one ``ModulePass`` subclass::

    from dataclasses import dataclass
    from xdsl.passes import ModulePass
    from pkc.passes.registry import register_pass

    @register_pass
    @dataclass(frozen=True)
    class SmPartition(ModulePass):
        \"\"\"Set the SM count of each worker from the cost model.\"\"\"   # --help line
        name = "sm-partition"
        comm_sms: int | None = None                                    # option

        def apply(self, ctx, op): ...

The registry imports every module of the ``pkc.passes`` package the first time the
passes are asked for (:func:`available_passes`), so that each registers itself; a module
that fails to import is an error (:class:`PassLoadError`), never a silently missing pass.
A few generic xDSL passes (canonicalize, cse, dce) are available too. A pipeline imports
only the modules of the passes it names where it can (:func:`_passes_for`: pass
``sm-partition`` lives in ``sm_partition.py``, by convention), so that ``pkc-opt -p cse``
or ``-p lower-collectives`` does not pay for importing every pass (issue 19); a name not
found that way loads every module, as before.

Pipelines are strings in xDSL's syntax: ``a,b{opt=1 other=x}`` (options are the pass's
dataclass fields; ``opt-name`` and ``opt_name`` both work).
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import pkgutil
import re
from collections.abc import Callable
from typing import Any, get_type_hints

from xdsl.passes import ModulePass, get_pass_option_infos
from xdsl.utils.arg_spec import ArgSpecParseError
from xdsl.utils.arg_spec import parse_pipeline as _xdsl_parse_pipeline
from xdsl.utils.hints import type_repr

__all__ = [
    "PassLoadError",
    "PipelineError",
    "available_passes",
    "describe_pass",
    "load_pass_modules",
    "parse_pipeline",
    "pass_options",
    "register_pass",
    "unregister_pass",
]

_KEBAB = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")

# Generic xDSL passes offered next to pk's own: name -> (module, class, description).
_XDSL_PASSES: dict[str, tuple[str, str, str]] = {
    "canonicalize": (
        "xdsl.transforms.canonicalize",
        "CanonicalizePass",
        "Apply all canonicalization patterns and fold constants (xDSL).",
    ),
    "cse": (
        "xdsl.transforms.common_subexpression_elimination",
        "CommonSubexpressionElimination",
        "Eliminate common subexpressions (xDSL).",
    ),
    "dce": (
        "xdsl.transforms.dead_code_elimination",
        "DeadCodeElimination",
        "Remove operations whose results are unused and that have no side effects (xDSL).",
    ),
}

# Modules of this package that are not passes.
_NOT_PASS_MODULES = {"registry", "pipelines", "remarks", "patterns"}

_PK_PASSES: dict[str, type[ModulePass]] = {}
_loaded = False


class PassLoadError(RuntimeError):
    """A module of ``pkc.passes`` could not be imported (a bug in that pass file)."""


class PipelineError(ValueError):
    """A pipeline string names an unknown pass, has bad options, or bad syntax."""


# --------------------------------------------------------------------------------------
# Registration
# --------------------------------------------------------------------------------------


def register_pass(cls: type[ModulePass]) -> type[ModulePass]:
    """Class decorator: register a ``ModulePass`` subclass under its kebab-case ``name``.

    Registering the same class twice is harmless (module reloads); two classes under one
    name, a name taken by a generic xDSL pass, or a non-kebab-case name is an error.
    """
    if not (isinstance(cls, type) and issubclass(cls, ModulePass)):
        raise TypeError(f"register_pass expects a ModulePass subclass, got {cls!r}")
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not _KEBAB.match(name):
        raise ValueError(
            f"pass {cls.__qualname__} must have a kebab-case class attribute `name` "
            f"(like 'sm-partition'), got {name!r}"
        )
    own_fields = {k for k in cls.__dict__.get("__annotations__", {}) if k != "name"}
    if own_fields and "__dataclass_fields__" not in cls.__dict__:
        raise TypeError(
            f"pass {cls.__qualname__} declares options {sorted(own_fields)} but is not a "
            "dataclass: decorate it with @dataclass(frozen=True) below @register_pass"
        )
    if name in _XDSL_PASSES:
        raise ValueError(f"pass name '{name}' is taken by the generic xDSL pass")
    previous = _PK_PASSES.get(name)
    if previous is not None and not _same_class(previous, cls):
        raise ValueError(
            f"pass name '{name}' registered twice: by {_qualified(previous)} and {_qualified(cls)}"
        )
    _PK_PASSES[name] = cls
    return cls


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _same_class(a: type, b: type) -> bool:
    # A re-imported module gives a new class object with the same qualified name.
    return a is b or _qualified(a) == _qualified(b)


def unregister_pass(name: str) -> None:
    """Remove a pk pass (for tests that register throw-away passes)."""
    _PK_PASSES.pop(name, None)


def load_pass_modules() -> None:
    """Import every pass module of ``pkc.passes`` once (they register on import)."""
    global _loaded
    if _loaded:
        return
    import pkc.passes as package

    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if info.name.startswith("_") or info.name in _NOT_PASS_MODULES:
            continue
        module_name = f"{package.__name__}.{info.name}"
        try:
            importlib.import_module(module_name)
        except Exception as err:  # a broken pass file must not look like a missing pass
            raise PassLoadError(
                f"failed to import pass module '{module_name}': {type(err).__name__}: {err}"
            ) from err
    _loaded = True


def available_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    """All passes by name (xDSL generic ones, then pk's), as lazy class getters."""
    load_pass_modules()
    return _registered_passes()


def _registered_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    """xDSL's generic passes and the pk passes registered so far, by name."""
    passes: dict[str, Callable[[], type[ModulePass]]] = {}
    for name, (module, cls_name, _) in _XDSL_PASSES.items():
        passes[name] = _xdsl_getter(module, cls_name)
    for name in sorted(_PK_PASSES):
        passes[name] = _pk_getter(name)
    return passes


def _xdsl_getter(module: str, cls_name: str) -> Callable[[], type[ModulePass]]:
    def get() -> type[ModulePass]:
        return getattr(importlib.import_module(module), cls_name)

    return get


def _pk_getter(name: str) -> Callable[[], type[ModulePass]]:
    cls = _PK_PASSES[name]
    return lambda: cls


# --------------------------------------------------------------------------------------
# Descriptions (for --help)
# --------------------------------------------------------------------------------------


def describe_pass(name: str, cls: type[ModulePass]) -> str:
    """One-line description: the first line of the class docstring."""
    if name in _XDSL_PASSES:
        return _XDSL_PASSES[name][2]
    doc = cls.__dict__.get("__doc__") or ""
    # @dataclass invents a docstring "Name(field: type = ...)" when there is none.
    if doc.startswith(f"{cls.__name__}("):
        doc = ""
    for line in doc.strip().splitlines():
        if line.strip():
            return line.strip()
    return "(no description)"


def pass_options(cls: type[ModulePass]) -> list[str]:
    """Options of a pass, as ``name: type = default`` strings (pipeline spelling)."""
    try:  # resolve string annotations (`from __future__ import annotations`)
        hints = get_type_hints(cls)
    except Exception:
        hints = {}
    options = []
    for info in get_pass_option_infos(cls):
        hint = hints.get(info.name)
        type_text = type_repr(hint) if hint is not None else info.expected_type.strip("'")
        type_text = re.sub(r"\s*\|\s*", " | ", type_text)
        text = f"{info.name.replace('_', '-')}: {type_text}"
        if info.default_value is not None:
            text += f" = {info.default_value}"
        options.append(text)
    return options


# --------------------------------------------------------------------------------------
# Pipelines
# --------------------------------------------------------------------------------------


def _format_spec_error(err: ArgSpecParseError, text: str) -> str:
    """xDSL's pipeline syntax error (a caret picture) as one line."""
    lines = [line for line in str(err).splitlines() if line.strip()]
    message = lines[-1].strip() if lines else "syntax error"
    col = None
    for line in lines:
        m = re.match(r"^pass-pipeline:\d+:(\d+)$", line.strip())
        if m:
            col = int(m.group(1))
    where = f" at column {col}" if col is not None else ""
    return f"invalid pass pipeline '{text}'{where}: {message}"


def _unknown_pass_message(name: str, passes: dict[str, Any]) -> str:
    msg = f"unknown pass '{name}'"
    close = difflib.get_close_matches(name, list(passes), n=1)
    if close:
        msg += f" (did you mean '{close[0]}'?)"
    return msg + "; available passes: " + ", ".join(passes)


def _expand_named_pipelines(specs: list, passes: dict) -> list:
    """Replaces a named pipeline (pkc.passes.pipelines) by its passes, handing each of
    its options to the passes that accept an option of that name."""
    from xdsl.utils.arg_spec import ArgSpec

    from pkc.passes.pipelines import PIPELINES

    out = []
    for spec in specs:
        if spec.name not in PIPELINES or spec.name in passes:
            out.append(spec)
            continue
        unused = set(spec.parameters)
        for name in PIPELINES[spec.name]:
            accepted = {o.name.replace("_", "-") for o in get_pass_option_infos(passes[name]())}
            args = {k: v for k, v in spec.parameters.items() if k.replace("_", "-") in accepted}
            unused -= set(args)
            out.append(ArgSpec(name, args))
        if unused:
            raise PipelineError(
                f"pipeline '{spec.name}': no pass in it takes option(s) {', '.join(sorted(unused))}"
            )
    return out


_TRUE = {1, "1", "true", "on", "yes"}
_FALSE = {0, "0", "false", "off", "no"}


def _booleans(spec: Any, cls: type[ModulePass]) -> Any:
    """MLIR spells a bool option ``opt=1`` / ``opt=0`` / ``opt=true`` / ``opt=false``;
    xDSL takes only true / false: convert the others for the pass's bool options."""
    try:
        hints = get_type_hints(cls)
    except Exception:  # noqa: BLE001 - unresolvable hints: leave the values to xDSL
        return spec
    params = dict(spec.parameters)
    for key, values in spec.parameters.items():
        if hints.get(key.replace("-", "_")) not in (bool, bool | None) or len(values) != 1:
            continue
        v = values[0]
        v = v.lower() if isinstance(v, str) else v
        if v is True or v is False:
            continue
        if v in _TRUE:
            params[key] = (True,)
        elif v in _FALSE:
            params[key] = (False,)
    return type(spec)(spec.name, params)


def _passes_for(names: set[str]) -> dict[str, Callable[[], type[ModulePass]]]:
    """The passes a pipeline naming ``names`` (passes and named pipelines) needs: xDSL's,
    and pk passes imported each from the module named after it (``a-b`` from
    ``pkc/passes/a_b.py``). When a name is not found so (a pass in a module of another
    name, a plugin's, a misspelt one: the error lists every pass), every pass module is
    imported, as :func:`available_passes` does."""
    from pkc.passes.pipelines import PIPELINES

    wanted = set(names)
    for name in names:
        wanted.update(PIPELINES.get(name, ()))
    wanted -= set(PIPELINES) - set(_PK_PASSES)
    if not _loaded:
        import pkc.passes as package

        for name in sorted(wanted - set(_XDSL_PASSES) - set(_PK_PASSES)):
            module = name.replace("-", "_")
            if not _KEBAB.match(name) or module in _NOT_PASS_MODULES:
                continue
            if importlib.util.find_spec(f"{package.__name__}.{module}") is None:
                continue
            try:
                importlib.import_module(f"{package.__name__}.{module}")
            except Exception as err:  # as load_pass_modules: a broken file is an error
                raise PassLoadError(f"failed to import pass module '{package.__name__}."
                                    f"{module}': {type(err).__name__}: {err}") from err
    if not wanted <= set(_XDSL_PASSES) | set(_PK_PASSES):
        return available_passes()
    return _registered_passes()


def parse_pipeline(text: str) -> list[ModulePass]:
    """Parse ``a,b{opt=1 other=x}`` into pass instances; raise :class:`PipelineError`."""
    if not text.strip():
        return []  # no pass modules to import for an empty pipeline
    try:
        specs = list(_xdsl_parse_pipeline(text))
    except ArgSpecParseError as err:  # a BaseException in xDSL: catch it by name
        raise PipelineError(_format_spec_error(err, text)) from None
    passes = _passes_for({spec.name for spec in specs})
    result: list[ModulePass] = []
    for spec in _expand_named_pipelines(specs, passes):
        if spec.name not in passes:
            raise PipelineError(_unknown_pass_message(spec.name, passes))
        cls = passes[spec.name]()
        spec = _booleans(spec, cls)
        try:
            result.append(cls.from_pass_spec(spec))
        except (ValueError, TypeError) as err:
            options = pass_options(cls)
            accepted = ", ".join(options) if options else "none"
            raise PipelineError(
                f"bad options for pass '{spec.name}': {err}; its options: {accepted}"
            ) from None
    return result


def run_pipeline(text: str, module: "ModuleOp") -> None:
    """Parses ``text`` and runs its passes on ``module`` in place, verifying after each."""
    from pkc.ir import make_context

    ctx = make_context()
    for p in parse_pipeline(text):
        p.apply(ctx, module)
        module.verify()
