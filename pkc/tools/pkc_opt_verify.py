"""pkc-opt's ``--verify-diagnostics`` (:mod:`pkc.tools.pkc_opt`): the ``expected-error
{{...}}`` annotations of an input chunk (as MLIR writes them) and their matching with the
diagnostics the chunk produced.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pkc.ir import PkcDiagnostic
from pkc.tools.pkc_opt_io import Chunk

# --------------------------------------------------------------------------------------
# --verify-diagnostics
# --------------------------------------------------------------------------------------

_EXPECTED = re.compile(
    r"expected-(?P<sev>error|warning|remark|note)(?P<re>-re)?"
    r"[ \t]*(?:@(?P<where>[+-]\d+|above|below|unknown))?"
    r"[ \t]*\{\{(?P<msg>.*)\}\}[ \t]*$"
)


@dataclass
class Expected:
    severity: str
    message: str
    regex: bool
    line: int | None  # None: @unknown
    at_line: int  # where the annotation is written
    at_col: int
    matched: bool = False

    def matches(self, text: str) -> bool:
        if not self.regex:
            return self.message in text
        # -re: {{...}} parts are regexes, the rest is literal (as in MLIR).
        parts = re.split(r"\{\{(.*?)\}\}", self.message)
        pattern = "".join(p if i % 2 else re.escape(p) for i, p in enumerate(parts))
        return re.search(pattern, text) is not None


def parse_expectations(chunk: Chunk) -> tuple[list[Expected], list[str]]:
    """The expected-* annotations of a chunk, and errors about the annotations."""
    expected: list[Expected] = []
    problems: list[str] = []
    below: list[Expected] = []
    last_plain_line: int | None = None
    for offset, line in enumerate(chunk.text.splitlines()):
        number = chunk.first_line + offset
        m = _EXPECTED.search(line)
        if m is None:
            for e in below:
                e.line = number
            below.clear()
            last_plain_line = number
            continue
        where = m.group("where")
        e = Expected(
            m.group("sev"), m.group("msg"), m.group("re") is not None, number, number, m.start() + 1
        )
        if where is None:
            pass
        elif where == "unknown":
            e.line = None
        elif where == "above":
            if last_plain_line is None:
                problems.append(f"{number}:{e.at_col}: @above with no line above it")
                continue
            e.line = last_plain_line
        elif where == "below":
            below.append(e)
        else:
            e.line = number + int(where)
        expected.append(e)
    for e in below:
        problems.append(f"{e.at_line}:{e.at_col}: @below with no line below it")
    return expected, problems


def check_diagnostics(chunk: Chunk, filename: str, diagnostics: list[PkcDiagnostic]) -> list[str]:
    """Failures (as printable lines) of matching ``diagnostics`` with the annotations."""
    expected, problems = parse_expectations(chunk)
    failures = [f"{filename}:{p}" for p in problems]
    for diag in diagnostics:
        line = diag.line if diag.file in (filename, None) else -1
        for e in expected:
            if (
                not e.matched
                and e.severity == diag.severity
                and e.line == line
                and e.matches(diag.message)
            ):
                e.matched = True
                break
        else:
            failures.append(f"{diag.where}error: unexpected {diag.severity}: {diag.message}")
    for e in expected:
        if not e.matched:
            where = "" if e.line is None else f" on line {e.line}"
            failures.append(
                f"{filename}:{e.at_line}:{e.at_col}: error: expected {e.severity} "
                f'"{e.message}" was not produced{where}'
            )
    return failures
