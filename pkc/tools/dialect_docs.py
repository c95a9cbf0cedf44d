"""Writes the dialect reference (docs/dialects.md) from the op definitions themselves.

    python -m pkc.tools.dialect_docs              # rewrite docs/dialects.md
    python -m pkc.tools.dialect_docs --check      # exit 1 if the committed file is stale

Every dialect pkc defines is documented: the ones pkc-opt loads into its context
(:func:`pkc.ir.make_context`), every :class:`~xdsl.ir.Dialect` object found in a module of
``pkc.dialects`` (so a new dialect file appears without editing this tool) and the ``ptx``
dialect of code generation. For each op: its name, the first paragraph of its docstring,
operands, results, attributes, regions, traits, its custom syntax, and the verifier's
rules: the messages of the ``VerifyException`` s its ``verify_`` raises, read from the
source, so that the reference says what the verifier checks in its own words. For each
type or attribute: its name, docstring and parameters.

The output depends only on the code (no dates, no paths), so a test can compare it with
the committed file (tests/unit/test_dialect_docs.py).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import pkgutil
import sys
import textwrap
from pathlib import Path

from xdsl.ir import Dialect

OUTPUT = Path(__file__).resolve().parents[2] / "docs" / "dialects.md"

HEADER = """\
# pk dialects: reference

Generated from the op definitions by `python -m pkc.tools.dialect_docs` (do not edit by
hand; `tests/unit/test_dialect_docs.py` fails when this file is out of date). For what the
levels are for and how IR flows between them, see README.md and the pass guide
(docs/pass_guide.md).

"""


# --------------------------------------------------------------------------------------
# Finding the dialects


def pkc_dialects() -> list[Dialect]:
    """Every dialect defined in pkc, by name."""
    found: dict[str, Dialect] = {}

    def add(d: object, module: object = None) -> None:
        if isinstance(d, Dialect) and _defined_in_pkc(d):
            found.setdefault(d.name, d)
            if module is not None:
                _HOME.setdefault(d.name, module)

    from pkc.ir import make_context

    ctx = make_context()
    for name in list(ctx.registered_dialect_names):  # registered dialects load on first use
        ctx.get_optional_dialect(name)
    for d in ctx.loaded_dialects:
        add(d)
    import pkc.dialects as package

    modules = [package] + [
        importlib.import_module(f"{package.__name__}.{m.name}")
        for m in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name)
    ]
    for module in modules:
        for value in vars(module).values():
            add(value, module)
    from pkc.codegen import ptx

    add(getattr(ptx, "PTX", None), ptx)
    return [found[name] for name in sorted(found)]


_HOME: dict[str, object] = {}  # dialect name -> the module that defines it (its docstring)


def _defined_in_pkc(d: Dialect) -> bool:
    classes = [*d.operations, *d.attributes]
    return bool(classes) and all(c.__module__.startswith("pkc.") for c in classes)


# --------------------------------------------------------------------------------------
# Formatting


def _doc(cls: type) -> str:
    doc = cls.__dict__.get("__doc__") or ""
    if doc.startswith(f"{cls.__name__}("):  # the docstring @dataclass invents
        return ""
    return inspect.cleandoc(doc)


def _constraint(c: object) -> str:
    name = type(c).__name__
    if name == "BaseAttr":
        return getattr(c, "attr").__name__
    if name == "EqAttrConstraint":
        return str(getattr(c, "attr"))
    if name == "AnyAttr":
        return "any"
    if name == "RangeLengthConstraint":
        return _constraint(getattr(c, "constraint"))
    if name in ("RangeOf", "SingleOf"):
        return _constraint(getattr(c, "constr"))
    if name == "AnyOf":
        return " or ".join(_constraint(a) for a in getattr(c, "attr_constrs"))
    if name == "ArrayOfConstraint":
        return f"array of {_constraint(getattr(c, 'elem_range_constraint'))}"
    if name == "ParamAttrConstraint":
        return getattr(c, "base_attr").__name__
    text = str(c)
    return text if len(text) <= 60 else name


def _arg(name: str, definition: object) -> str:
    kind = type(definition).__name__
    prefix = "variadic " if kind.startswith("Var") else "optional " if kind.startswith("Opt") else ""
    return f"`{name}`: {prefix}{_constraint(getattr(definition, 'constr'))}"


def _traits(op_def: object) -> list[str]:
    names = []
    for t in getattr(op_def, "traits"):
        text = type(t).__name__
        parents = getattr(t, "op_types", None) or getattr(t, "parameters", None)
        if text in ("HasParent", "HasAncestor") and parents:
            ops = parents if isinstance(parents, tuple) else (parents,)
            text += "(" + ", ".join(getattr(p, "name", str(p)) for p in ops if isinstance(p, type)) + ")"
        names.append(text)
    return sorted(names)  # xDSL keeps traits in a set: sort for a stable file


def verifier_rules(cls: type) -> list[str]:
    """The messages the op's own ``verify_`` raises, as written (f-string fields in {}),
    and those of the pkc helper functions and methods it calls (``verify_map``,
    ``_check_indices`` ...), in source order, each once."""
    fn = _unwrap(cls.__dict__.get("verify_"))
    if fn is None:
        return []
    rules: list[str] = []
    _collect_rules(fn, rules, depth=3, seen=set(), cls=cls)
    return list(dict.fromkeys(rules))


def _unwrap(fn: object) -> object:
    """The op's own ``verify_``: irdl_op_definition wraps it in one that first checks the
    op definition (its closure holds the original as ``custom_verify``)."""
    code = getattr(fn, "__code__", None)
    if code is not None and "custom_verify" in code.co_freevars:
        return fn.__closure__[code.co_freevars.index("custom_verify")].cell_contents
    return fn


def _collect_rules(fn: object, rules: list[str], depth: int, seen: set,
                   cls: type | None = None) -> None:
    if fn in seen or not callable(fn):
        return
    seen.add(fn)
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return
    env = getattr(fn, "__globals__", {})
    nodes = sorted((n for n in ast.walk(tree) if isinstance(n, (ast.Raise, ast.Call))),
                   key=lambda n: (n.lineno, n.col_offset))  # source order
    for node in nodes:
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            if getattr(node.exc.func, "id", None) == "VerifyException" and node.exc.args:
                rules.append(_message(node.exc.args[0]))
        elif isinstance(node, ast.Call) and depth > 1:
            helper = None
            if isinstance(node.func, ast.Name):
                helper = env.get(node.func.id)
            elif (isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
                  and node.func.value.id == "self" and cls is not None):
                helper = getattr(cls, node.func.attr, None)  # self._check_world() ...
            if inspect.isfunction(helper) and helper.__module__.startswith("pkc."):
                _collect_rules(helper, rules, depth - 1, seen, cls)


def _message(node: ast.expr) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                parts.append(str(v.value))
            elif isinstance(v, ast.FormattedValue):
                parts.append("{" + ast.unparse(v.value) + "}")
        return "".join(parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _message(node.left) + _message(node.right)
    return ast.unparse(node)


def _op_section(cls: type) -> list[str]:
    op_def = cls.get_irdl_definition()
    lines = [f"### `{op_def.name}`", ""]
    doc = _doc(cls)
    if doc:
        lines += [doc, ""]
    rows = []
    if op_def.operands:
        rows.append(("operands", ", ".join(_arg(n, d) for n, d in op_def.operands)))
    if op_def.results:
        rows.append(("results", ", ".join(_arg(n, d) for n, d in op_def.results)))
    attrs = {**op_def.attributes, **op_def.properties}
    if attrs:
        rows.append(("attributes", ", ".join(_arg(n, d) for n, d in attrs.items())))
    if op_def.regions:
        rows.append(("regions", ", ".join(f"`{n}`" for n, _ in op_def.regions)))
    traits = _traits(op_def)
    if traits:
        rows.append(("traits", ", ".join(traits)))
    if op_def.assembly_format:
        rows.append(("syntax", f"`` {op_def.name} {op_def.assembly_format} ``"))
    elif "parse" in cls.__dict__:
        rows.append(("syntax", "custom (see the class's parse / print)"))
    lines += [f"- {k}: {v}" for k, v in rows]
    rules = verifier_rules(cls)
    for trait in sorted(getattr(op_def, "traits"), key=lambda t: type(t).__name__):  # PkTensors
        if type(trait).__module__.startswith("pkc."):
            _collect_rules(type(trait).__dict__.get("verify"), rules, depth=2, seen=set())
    rules = list(dict.fromkeys(rules))
    if rules:
        lines += ["- verifier rejects:"] + [f"  - {r}" for r in rules]
    return lines + [""]


def _attr_section(cls: type) -> list[str]:
    lines = [f"### `{cls.name}`", ""]
    doc = _doc(cls)
    if doc:
        lines += [doc, ""]
    try:
        params = cls.get_irdl_definition().parameters
    except Exception:  # noqa: BLE001 - a non-irdl attribute: no parameter list
        params = []
    if params:
        lines.append("- parameters: " + ", ".join(
            f"`{n}`: {_constraint(p.constr)}" for n, p in params))
    rules = verifier_rules_of_attribute(cls)
    if rules:
        lines += ["- verifier rejects:"] + [f"  - {r}" for r in rules]
    return lines + [""]


def verifier_rules_of_attribute(cls: type) -> list[str]:
    fn = cls.__dict__.get("verify")
    if fn is None:
        return []
    holder = type("_Holder", (), {"verify_": fn})
    return verifier_rules(holder)


def render() -> str:
    out = [HEADER]
    dialects = pkc_dialects()
    out.append("Dialects: " + ", ".join(
        f"[`{d.name}`](#dialect-{d.name}) ({len(list(d.operations))} ops)" for d in dialects) + "\n")
    for d in dialects:
        ops, attrs = list(d.operations), list(d.attributes)
        out += [f"## Dialect `{d.name}`", ""]
        module = _HOME.get(d.name) or inspect.getmodule(ops[0] if ops else attrs[0])
        mdoc = (getattr(module, "__doc__", None) or "").strip()
        if mdoc:
            out += [mdoc.split("\n\n")[0], ""]
        if attrs:
            out += ["Types and attributes: " + ", ".join(f"`{a.name}`" for a in attrs), ""]
            for a in attrs:
                out += _attr_section(a)
        out += ["Operations: " + ", ".join(f"`{o.name}`" for o in ops), ""]
        for o in ops:
            out += _op_section(o)
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pkc.tools.dialect_docs", description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--output", default=str(OUTPUT), help="file to write (default docs/dialects.md)")
    ap.add_argument("--check", action="store_true", help="exit 1 if the file differs from what would be written")
    args = ap.parse_args(argv)
    text = render()
    path = Path(args.output)
    if args.check:
        current = path.read_text(encoding="utf-8") if path.exists() else ""
        if current != text:
            sys.stderr.write(f"{path} is out of date: run python -m pkc.tools.dialect_docs\n")
            return 1
        return 0
    path.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
