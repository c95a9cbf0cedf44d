"""The layering of pkc, read from the sources (every ``import`` / ``from ... import``,
including those inside functions and under TYPE_CHECKING, and literal
``importlib.import_module("pkc....")`` calls):

- pkc/codegen imports none of pkc/runtime, pkc/frontend, pkc/interp (the compiler does
  not depend on what runs or captures programs);
- pkc/runtime imports no private name (``_x``) or private module of another package;
- pkc/interp imports neither pkc/passes nor pkc/frontend (the oracle stays independent of
  what it checks; the pass harness is pkc/testing.py);
- no import cycle between the packages (the subpackages of pkc and its top-level modules,
  ``pkc/__init__.py`` counted as the unit ``pkc``);
- no file of pkc is over MAX_LINES lines except the known offenders listed below.

A failure names file:line and the import.
"""

from __future__ import annotations

import ast
import functools
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "pkc"

MAX_LINES = 650
# Files over MAX_LINES allowed to stay so (none since the splits of 2026-12-01). Do not add
# to this set: split the file instead.
KNOWN_LONG: set[str] = set()


@dataclass(frozen=True)
class Import:
    file: str          # relative to the repository root
    line: int
    source: str        # the importing module, e.g. pkc.runtime.peers
    target: str        # the imported module, e.g. pkc.interp.graph
    name: str | None   # the imported name of a from-import

    def __str__(self) -> str:
        what = f"from {self.target} import {self.name}" if self.name else f"import {self.target}"
        return f"{self.file}:{self.line}: {what}"


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports_of(path: Path, root: Path = ROOT) -> list[Import]:
    rel = str(path.relative_to(root))
    source = _module_name(path, root)
    package = source if path.name == "__init__.py" else source.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), rel)):
        if isinstance(node, ast.Import):
            out += [Import(rel, node.lineno, source, a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out += [Import(rel, node.lineno, source, target, a.name) for a in node.names]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            out.append(Import(rel, node.lineno, source, node.args[0].value, None))
    return [i for i in out if i.target == "pkc" or i.target.startswith("pkc.")]


@functools.cache
def _all_imports() -> tuple[Import, ...]:
    # Read once per process: four tests filter the same scan (~2.6 s of CPU each before);
    # the sources do not change during a test run.
    return tuple(i for p in sorted(PKG.rglob("*.py")) for i in _imports_of(p, ROOT))


def _units() -> set[str]:
    """pkc's subpackages and top-level modules."""
    subs = {p.parent.name for p in PKG.glob("*/__init__.py")}
    mods = {p.stem for p in PKG.glob("*.py") if p.name != "__init__.py"}
    return subs | mods


UNITS = _units()


def unit_of(module: str, name: str | None = None) -> str:
    """The unit of a module: ``pkc.runtime.peers`` -> runtime, ``pkc.api`` -> api, ``pkc``
    -> pkc (its ``__init__``); ``from pkc import runtime`` -> runtime."""
    parts = module.split(".")
    if len(parts) == 1:
        return name if name in UNITS else "pkc"
    return parts[1]


def _src_unit(i: Import) -> str:
    return unit_of(i.source)


def _dst_unit(i: Import) -> str:
    return unit_of(i.target, i.name)


def _report(title: str, bad: list[Import]) -> str:
    return title + ":\n" + "\n".join(f"  {b}" for b in bad)


def test_the_scan_sees_imports_inside_functions_and_relative_ones(tmp_path):
    """The scanner itself: a nested import, a relative import and import_module count."""
    f = tmp_path / "pkc" / "codegen" / "probe.py"
    f.parent.mkdir(parents=True)
    f.write_text("def f():\n    from pkc.runtime.peers import VirtualPeers\n"
                 "from ..interp import graph\n"
                 "import importlib\nimportlib.import_module('pkc.frontend.errors')\n"
                 "import os\n")
    found = [(i.line, _src_unit(i), _dst_unit(i), i.name) for i in _imports_of(f, tmp_path)]
    assert sorted(found) == [(2, "codegen", "runtime", "VirtualPeers"),
                             (3, "codegen", "interp", "graph"),
                             (5, "codegen", "frontend", None)]


def test_codegen_imports_no_runtime_frontend_or_interp():
    bad = [i for i in _all_imports()
           if _src_unit(i) == "codegen" and _dst_unit(i) in ("runtime", "frontend", "interp")]
    assert not bad, _report("pkc/codegen imports pkc/runtime, pkc/frontend or pkc/interp", bad)


def test_runtime_imports_no_private_name_of_another_package():
    def private(i: Import) -> bool:
        inner = i.target.split(".")[2:]
        return (i.name is not None and i.name.startswith("_") and i.name != "__version__") \
            or any(p.startswith("_") for p in inner)

    bad = [i for i in _all_imports()
           if _src_unit(i) == "runtime" and _dst_unit(i) != "runtime" and private(i)]
    assert not bad, _report("pkc/runtime imports private names of other packages "
                            "(make the name public, with a docstring, or move the code)", bad)


def test_interp_imports_neither_passes_nor_frontend():
    bad = [i for i in _all_imports()
           if _src_unit(i) == "interp" and _dst_unit(i) in ("passes", "frontend")]
    assert not bad, _report("pkc/interp imports pkc/passes or pkc/frontend", bad)


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one unit (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_cycle_finder():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_between_packages():
    edges: dict[str, set[str]] = defaultdict(set)
    witness: dict[tuple[str, str], Import] = {}
    for i in _all_imports():
        s, d = _src_unit(i), _dst_unit(i)
        if s != d:
            edges[s].add(d)
            witness.setdefault((s, d), i)
    cycles = _cycles(edges)
    lines = []
    for comp in cycles:
        lines.append(" <-> ".join(comp) + ":")
        lines += [f"  {s} -> {d}: {witness[s, d]}" for s in comp for d in sorted(edges[s])
                  if d in comp]
    assert not cycles, "import cycles between pkc's packages:\n" + "\n".join(lines)


def test_no_file_over_the_line_limit_but_the_known_ones():
    long = {}
    for p in sorted(PKG.rglob("*.py")):
        rel = str(p.relative_to(ROOT))
        n = len(p.read_text().splitlines())
        if n > MAX_LINES and rel not in KNOWN_LONG:
            long[rel] = n
    assert not long, (f"files over {MAX_LINES} lines (split them): "
                      + ", ".join(f"{f} ({n})" for f, n in long.items()))
