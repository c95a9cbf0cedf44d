"""Remarks: every decision a pass makes is written into the IR, where a user can read it.

A pass that fuses, partitions, lowers or leaves something alone records one line on the
op it produced or skipped, under the attribute ``pk.remarks`` (an array of strings, so
several passes can speak about one op), and may record the numbers behind it under
``pk.plan`` (a dictionary). ``pkc-opt --remarks`` and ``pkc.compile(explain=True)`` print
them. Keeping remarks in the IR (rather than in a log) means they survive printing,
parsing and later passes.
"""

from __future__ import annotations

from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    FileLineColLoc,
    FloatAttr,
    IntegerAttr,
    StringAttr,
    f64,
    i64,
)
from xdsl.ir import Attribute, Operation

REMARKS = "pk.remarks"
PLAN = "pk.plan"


def add_remark(op: Operation, text: str) -> None:
    """Appends one line to the op's remarks."""
    old = op.attributes.get(REMARKS)
    lines = list(old.data) if isinstance(old, ArrayAttr) else []
    op.attributes[REMARKS] = ArrayAttr([*lines, StringAttr(text)])


def remarks_of(op: Operation) -> list[str]:
    attr = op.attributes.get(REMARKS)
    return [s.data for s in attr.data] if isinstance(attr, ArrayAttr) else []


def collect_remarks(root: Operation) -> list[tuple[Operation, str]]:
    """All remarks under ``root``, in program order."""
    return [(op, text) for op in root.walk() for text in remarks_of(op)]


def set_plan(op: Operation, **values: float | int | str | bool) -> None:
    """Records the numbers behind a decision (times in seconds, counts, choices)."""
    entries: dict[str, Attribute] = {}
    old = op.attributes.get(PLAN)
    if isinstance(old, DictionaryAttr):
        entries.update(old.data)
    for key, v in values.items():
        if isinstance(v, bool):
            entries[key] = IntegerAttr(int(v), 1)
        elif isinstance(v, int):
            entries[key] = IntegerAttr(v, i64)
        elif isinstance(v, float):
            entries[key] = FloatAttr(v, f64)
        else:
            entries[key] = StringAttr(str(v))
    op.attributes[PLAN] = DictionaryAttr(entries)


def plan_of(op: Operation) -> dict[str, float | int | str | bool]:
    attr = op.attributes.get(PLAN)
    if not isinstance(attr, DictionaryAttr):
        return {}
    out: dict[str, float | int | str | bool] = {}
    for key, v in attr.data.items():
        if isinstance(v, StringAttr):
            out[key] = v.data
        elif isinstance(v, IntegerAttr) and getattr(v.type, "width", None) is not None \
                and v.type.width.data == 1:  # an index-typed entry has no width
            out[key] = bool(v.value.data)
        elif isinstance(v, (IntegerAttr, FloatAttr)):
            out[key] = v.value.data
    return out


def format_remarks(root: Operation, filename: str = "<unknown>") -> list[str]:
    """``file:line:col: remark: [op] text`` for every remark, at the op's source location."""
    return [remark_line(op, text, filename) for op, text in collect_remarks(root)]


def remark_line(op: Operation, text: str, filename: str = "<unknown>", tag: str | None = None) -> str:
    """One ``file:line:col: remark: [tag] text`` line at ``op``'s location (tag: op name)."""
    loc, where = op.location, filename
    if isinstance(loc, FileLineColLoc):
        where = f"{loc.filename.data}:{loc.line.data}:{loc.column.data}"
    return f"{where}: remark: [{tag or op.name}] {text}"
