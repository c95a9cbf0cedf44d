"""Errors the frontend reports to users, and where in the user's code they come from.

A :class:`PkcFrontendError` says *what* is wrong, *which* fx node and torch op it is about,
and *where* in the user's program that node came from (the innermost frame of the node's
``stack_trace`` that lies outside torch and pkc). It is raised ``from None``: the user sees
the message, not a traceback through dynamo, aot_autograd and pkc.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import torch

__all__ = ["PkcFrontendError", "SourceLine", "user_frame", "node_source", "op_name"]

_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))
_PKC_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>[^\n]+)\n(?P<code>[^\n]*)')


@dataclass(frozen=True)
class SourceLine:
    """One frame of user code: ``file:line`` in ``function``, and the line's text."""

    file: str
    line: int
    function: str
    code: str

    def __str__(self) -> str:
        text = f'File "{self.file}", line {self.line}, in {self.function}'
        return f"{text}\n    {self.code}" if self.code else text


def _is_library(path: str) -> bool:
    path = os.path.abspath(path)
    return path.startswith(_TORCH_DIR + os.sep) or path.startswith(_PKC_DIR + os.sep)


def user_frame(stack_trace: str | None) -> SourceLine | None:
    """The innermost frame of ``stack_trace`` (fx's formatted trace) in the user's code.

    Frames inside torch (nn.Linear's forward, funcol's all_reduce) and pkc are skipped, so a
    collective issued through ``dist.all_reduce`` points at the user's call. Falls back to
    the innermost frame when every frame is a library's."""
    if not stack_trace:
        return None
    frames = [
        SourceLine(m["file"], int(m["line"]), m["fn"].strip(), m["code"].strip())
        for m in _FRAME.finditer(stack_trace)
    ]
    if not frames:
        return None
    for f in reversed(frames):
        if not _is_library(f.file):
            return f
    return frames[-1]


def node_source(node: torch.fx.Node | None) -> SourceLine | None:
    if node is None:
        return None
    return user_frame(node.meta.get("stack_trace") or node.stack_trace)


def op_name(target: object) -> str:
    """``aten.cumsum.default`` for an OpOverload, the qualified name for anything else."""
    if isinstance(target, torch._ops.OpOverload):
        return str(target)
    if isinstance(target, str):
        return target
    mod = getattr(target, "__module__", None)
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or repr(target)
    return f"{mod}.{name}" if mod else name


class PkcFrontendError(Exception):
    """A program pkc's frontend cannot capture or import, explained in the user's terms.

    Attributes: ``reason`` (the one-line what), ``node`` (the fx node's name or None),
    ``op`` (the torch op, ``aten.foo.default`` style, or None) and ``source`` (the user's
    line as a :class:`SourceLine`, or None).
    """

    def __init__(
        self,
        reason: str,
        *,
        node: torch.fx.Node | str | None = None,
        op: object | None = None,
        source: SourceLine | None = None,
        hint: str | None = None,
    ) -> None:
        fx_node = node if isinstance(node, torch.fx.Node) else None
        self.reason = reason
        self.node = fx_node.name if fx_node is not None else node
        if op is None and fx_node is not None and fx_node.op == "call_function":
            op = fx_node.target
        self.op = op_name(op) if op is not None else None
        self.source = source if source is not None else node_source(fx_node)
        self.hint = hint
        super().__init__(self._format())

    def _format(self) -> str:
        lines = [f"pkc: {self.reason}"]
        if self.node is not None or self.op is not None:
            what = []
            if self.node is not None:
                what.append(f"fx node '{self.node}'")
            if self.op is not None:
                what.append(f"op {self.op}")
            lines.append("  at " + ", ".join(what))
        if self.source is not None:
            lines.append(f"  in user code: {self.source.file}:{self.source.line} ({self.source.function})")
            if self.source.code:
                lines.append(f"      {self.source.code}")
        if self.hint:
            lines.append(f"  hint: {self.hint}")
        return "\n".join(lines)
