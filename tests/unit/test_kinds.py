"""Kinds are enums, not strings (issue 15).

- No source of pkc compares a ``kind`` (a name or attribute called ``kind`` or ending in
  ``_kind``, its ``.data``, or a ``.get("..._kind")`` / ``["..._kind"]`` lookup) with a
  string literal, nor matches one against string cases: such a family is a
  :class:`pkc.kinds.Kind`. PTX spellings (pkc/emu, pkc/codegen/ptx*.py) are not
  scanned; numpy's ``dtype.kind`` is numpy's.
- A kind prints, formats and serializes as the string it replaced (IR attributes, JSON
  metadata and remarks stay byte-identical), and a bad value read from text is an error
  that names it and the valid ones.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "pkc"
SKIP_DIRS = ("pkc/emu/",)


def _scanned() -> list[Path]:
    out = []
    for p in sorted(PKG.rglob("*.py")):
        rel = p.relative_to(ROOT).as_posix()
        if rel.startswith(SKIP_DIRS) or rel.startswith("pkc/codegen/ptx"):
            continue
        out.append(p)
    return out


def _kind_name(name: str) -> bool:
    return name == "kind" or name.endswith("_kind")


def _is_kind(node: ast.AST) -> bool:
    """A kind-valued expression: ``kind``, ``x.kind``, ``x.fused_kind``, ``kind.data``,
    ``plan.get("fused_kind")``, ``plan["comm_kind"]`` (not numpy's ``dtype.kind``)."""
    if isinstance(node, ast.Name):
        return _kind_name(node.id)
    if isinstance(node, ast.Attribute):
        if node.attr == "data":
            return _is_kind(node.value)
        if isinstance(node.value, ast.Attribute) and node.value.attr == "dtype":
            return False
        return _kind_name(node.attr)
    key = None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
            node.func.attr == "get" and node.args:
        key = node.args[0]
    elif isinstance(node, ast.Subscript):
        key = node.slice
    return isinstance(key, ast.Constant) and isinstance(key.value, str) and _kind_name(key.value)


def _is_str(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_is_str(e) for e in node.elts)
    return False


def kind_string_comparisons(path: Path) -> list[str]:
    """``file:line: code`` of every comparison of a kind with a string literal in ``path``."""
    rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
    found = []
    for node in ast.walk(ast.parse(path.read_text(), rel)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(_is_kind(o) for o in operands) and any(_is_str(o) for o in operands):
                found.append((node.lineno, f"{rel}:{node.lineno}: {ast.unparse(node)}"))
        elif isinstance(node, ast.Match) and _is_kind(node.subject):
            for case in node.cases:
                if any(isinstance(p, ast.MatchValue) and _is_str(p.value)
                       for p in ast.walk(case.pattern)):
                    line = case.pattern.lineno
                    found.append((line, f"{rel}:{line}: match {ast.unparse(node.subject)} "
                                        f"case {ast.unparse(case.pattern)}"))
    return [text for _, text in sorted(found)]


def test_no_kind_is_compared_with_a_string():
    found = [hit for p in _scanned() for hit in kind_string_comparisons(p)]
    assert not found, ("kinds compared with string literals (make the family a pkc.kinds.Kind "
                       "and compare members):\n" + "\n".join(found))


def test_the_scan_finds_what_it_forbids(tmp_path):
    src = tmp_path / "bad.py"
    src.write_text(
        "def f(site, plan, kind, op, x):\n"
        "    a = site.kind == 'wait'\n"
        "    b = kind in ('ar', 'rs')\n"
        "    c = plan.get('fused_kind').data != 'ag'\n"
        "    d = plan['comm_kind'] == 'agp'\n"
        "    e = x.dtype.kind == 'i'\n"            # numpy's: allowed
        "    g = op.kind is KIND.WAIT\n"          # a member: allowed
        "    match op.fused_kind:\n"
        "        case 'rs':\n"
        "            pass\n")
    lines = [int(h.split(":")[1]) for h in kind_string_comparisons(src)]
    assert lines == [2, 3, 4, 5, 9], lines


def test_a_kind_prints_as_its_string():
    from pkc.codegen.abi import SiteKind
    from pkc.target.collectives import Algorithm

    assert f"{SiteKind.WAIT}" == str(SiteKind.WAIT) == "wait" == SiteKind.WAIT
    assert json.dumps({"k": Algorithm.ONE_SHOT}) == '{"k": "one_shot"}'
    assert f"{Algorithm.TWO_SHOT}".replace("_", "-") == "two-shot"


def test_kernel_metadata_json_keeps_the_strings_and_reads_members():
    from pkc.codegen.abi import (FusedLaunch, FusedLaunchKind, KernelMeta, ScheduledKernelMeta,
                                 SiteKind, WaitSite)

    meta = KernelMeta("k", "sm_90a", 128, 0, [], [], [],
                      sites=[WaitSite(0, SiteKind.MBARRIER, "x", 0)])
    text = meta.to_json()
    assert '"kind": "mbarrier"' in text
    assert KernelMeta.from_json(text).sites[0].kind is SiteKind.MBARRIER

    fused = FusedLaunch(world=2, buffers=[], sym_outputs=[], shapes=[], dtype="bf16",
                        kind=FusedLaunchKind.MOE)
    smeta = ScheduledKernelMeta("k", "sm_90a", 128, 1, 0, [], [], 1, fused=fused)
    text = smeta.to_json()
    assert '"kind": "moe"' in text
    assert ScheduledKernelMeta.from_json(text).fused.kind is FusedLaunchKind.MOE


def test_a_bad_kind_read_from_text_names_it_and_the_valid_ones():
    from pkc.codegen.abi import KernelMeta
    from pkc.target.comm_tuning import choose

    bad = json.dumps({"name": "k", "target": "sm_90a", "threads": 1, "smem_bytes": 0,
                      "buffers": [], "signals": [], "workers": [],
                      "sites": [{"id": 3, "kind": "spin", "where": "x", "worker": 0}]})
    with pytest.raises(ValueError, match=r"wait site 3's kind: 'spin' is not a valid SiteKind "
                                         r"\(one of 'wait', 'barrier', 'mbarrier'\)"):
        KernelMeta.from_json(bad)
    with pytest.raises(ValueError,
                       match=r"'broadcast' is not a valid Collective \(one of 'all_reduce'"):
        choose("broadcast", "direct", 2, "bf16", 1024)


def test_a_bad_fused_kind_in_the_ir_is_a_codegen_error():
    from xdsl.dialects.builtin import DictionaryAttr, StringAttr

    from pkc.codegen.errors import CodegenError
    from pkc.codegen.lower_schedule_ag import is_ag_kernel

    class _Kop:   # what is_ag_kernel reads of a pk.kernel
        kernel_name = StringAttr("mm")
        attributes = {"pk.plan": DictionaryAttr({"schedule": StringAttr("fused"),
                                                 "fused_kind": StringAttr("gather")})}

        def schedule(self):
            return object()

    with pytest.raises(CodegenError, match=r"kernel @mm: pk.plan.fused_kind: 'gather' is not a "
                                           r"valid FusedKind \(one of 'rs', 'ar', 'ag', 'agp'\)"):
        is_ag_kernel(_Kop())


def test_a_bad_schedule_kind_in_the_ir_is_a_codegen_error():
    from xdsl.dialects.builtin import DictionaryAttr, StringAttr

    from pkc.codegen.errors import CodegenError
    from pkc.codegen.lower_schedule_fused import is_fused_kernel
    from pkc.dialects.plan import ScheduleKind, schedule_kind

    class _Kop:
        kernel_name = StringAttr("mm")
        attributes = {"pk.plan": DictionaryAttr({"schedule": StringAttr("fuse")})}

        def schedule(self):
            return object()

    with pytest.raises(CodegenError, match=r"kernel @mm: pk.plan.schedule: 'fuse' is not a valid "
                                           r"ScheduleKind \(one of 'collective', 'fused', 'moe'\)"):
        is_fused_kernel(_Kop())
    _Kop.attributes = {"pk.plan": DictionaryAttr({"schedule": StringAttr("moe")})}
    assert schedule_kind(_Kop()) is ScheduleKind.MOE
