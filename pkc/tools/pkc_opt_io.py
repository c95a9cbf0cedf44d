"""pkc-opt's input, output and timing (:mod:`pkc.tools.pkc_opt`): reading a file or stdin,
splitting it at ``// -----`` lines, writing the result, and the ``--timing`` report.
"""

from __future__ import annotations

import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from pkc.tools.pkc_opt_args import UserError

# a line that separates chunks: pkc_opt_args.SPLIT_MARKER alone, blanks around it allowed
_SPLIT_LINE = re.compile(r"^[ \t]*// -----[ \t]*$")


# --------------------------------------------------------------------------------------
# Input
# --------------------------------------------------------------------------------------


def read_input(path: str) -> tuple[str, str]:
    """(text, name used in diagnostics) of a file, or of stdin for '-'."""
    if path == "-":
        return sys.stdin.read(), "<stdin>"
    try:
        return Path(path).read_text(encoding="utf-8"), path
    except FileNotFoundError:
        raise UserError(f"could not open input file '{path}': no such file") from None
    except IsADirectoryError:
        raise UserError(f"could not open input file '{path}': is a directory") from None
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"could not read input file '{path}': {err}") from None


@dataclass
class Chunk:
    text: str
    first_line: int  # line of the input file on which this chunk starts (1-based)


def split_input(text: str, split: bool) -> list[Chunk]:
    """The input as chunks separated by lines '// -----' (one chunk unless ``split``)."""
    if not split:
        return [Chunk(text, 1)]
    chunks: list[Chunk] = []
    current: list[str] = []
    start = 1
    for number, line in enumerate(text.splitlines(keepends=True), start=1):
        if _SPLIT_LINE.match(line.rstrip("\r\n")):
            chunks.append(Chunk("".join(current), start))
            current, start = [], number + 1
        else:
            current.append(line)
    chunks.append(Chunk("".join(current), start))
    return chunks


# --------------------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------------------


def process_age() -> float:
    """Seconds since this process started (interpreter start-up and imports included),
    from /proc on Linux; elsewhere, since this module was imported."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return time.perf_counter() - _IMPORTED


_IMPORTED = time.perf_counter()


@dataclass
class Timer:
    """Wall time per phase, in first-seen order (like mlir-opt's -mlir-timing); the first
    row is the start-up before the timer existed (Python, imports), so that the total is
    what the user waited for."""

    enabled: bool = False
    start: float = field(default_factory=time.perf_counter)
    phases: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.enabled:
            startup = process_age()
            self.start -= startup
            self.phases["Start-up (Python, imports)"] = startup

    def add(self, name: str, seconds: float) -> None:
        self.phases[name] = self.phases.get(name, 0.0) + seconds

    def report(self) -> str:
        total = time.perf_counter() - self.start
        rows = dict(self.phases)
        rows["Rest"] = max(0.0, total - sum(self.phases.values()))
        bar = "===" + "-" * 73 + "==="
        lines = [
            bar,
            "... Execution time report ...".center(len(bar)).rstrip(),
            bar,
            f"  Total Execution Time: {total:.4f} seconds",
            "",
            "  ----Wall Time----  ----Name----",
        ]
        for name, seconds in list(rows.items()) + [("Total", total)]:
            pct = 100.0 * seconds / total if total > 0 else 0.0
            lines.append(f"  {seconds:10.4f} ({pct:5.1f}%)  {name}")
        return "\n".join(lines) + "\n"


class _Clock:
    def __init__(self, timer: Timer, name: str) -> None:
        self.timer, self.name = timer, name

    def __enter__(self) -> None:
        self.t0 = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.timer.add(self.name, time.perf_counter() - self.t0)


def write_output(text: str, path: str) -> None:
    if path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as err:
        raise UserError(f"could not write output file '{path}': {err}") from None
