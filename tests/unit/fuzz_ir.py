"""A mutation fuzzer for pkc-opt (not a test module: test_fuzz_pkc_opt.py uses it).

It takes the hand-written IR of the repository (examples/ir, tests/lit), cuts it into
chunks at ``// -----`` lines, and makes mutants of three kinds:

* text mutations: delete, duplicate or swap spans and lines, insert punctuation, truncate;
* token mutations aimed at the classes of bad input users meet: numbers replaced by
  extremes (0, -1, 2^40, 1e39, nan), element types by ones pk does not support (none,
  index, complex, f8), SSA uses pointed at values defined later or in other regions,
  unterminated strings, a bad first character, deep nesting of regions;
* random small pk programs built from the graph-level ops (shapes and worlds drawn at
  random, sometimes wrong).

:func:`run_one` runs one mutant through ``pkc.tools.pkc_opt.main`` in this process (a
subprocess per mutant would cost a second of start-up each) with a time limit, and
returns the exit status, the stderr text and the seconds it took.
"""

from __future__ import annotations

import contextlib
import io
import random
import re
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SPLIT = re.compile(r"^[ \t]*// -----[ \t]*$", re.M)

# The command lines a mutant goes through (the issue's three: plain, -p default, PTX).
MODES: tuple[tuple[str, ...], ...] = (
    (),
    ("-p", "default"),
    ("--emit=ptx",),
    ("-p", "default", "--emit=ptx"),
)

_ELEMENT = re.compile(r"\b(bf16|f16|f32|f64|i1|i8|i32|i64)\b")
_NUMBER = re.compile(r"(?<![%\w#^@.])-?\d+(\.\d+)?(e[+-]?\d+)?\b")
_SSA_USE = re.compile(r"%[A-Za-z_][\w$.-]*|%\d+")
_BAD_ELEMENTS = (
    "none", "index", "complex<f32>", "f8E4M3FN", "f8E5M2", "i7", "i128", "f80", "tf32", "ui8",
)
_EXTREME_NUMBERS = (
    "0", "-1", "1", "3", "1099511627776", "100000", "2147483648", "9223372036854775807",
    "18446744073709551616", "1.0e39", "-1.0e39", "3.5e38", "1.0e400", "7.0e4", "0.0", "-0.0", "nan", "0x7FC00000",
)
_PUNCT = list('{}()<>[]%^@#!,:="x-+*/.\\ \n') + ["//", "->", "loc(", '"abc', "0x"]


@dataclass(frozen=True)
class Seed:
    name: str  # file[:chunk]
    text: str


_COMMENT_OR_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"|//[^\n]*')


def _strip_comments(text: str) -> str:
    """The IR without ``//`` comments (RUN and CHECK lines, prose) and blank lines: a
    mutation of a comment changes nothing, and would only cost a run of pkc-opt."""
    text = _COMMENT_OR_STRING.sub(lambda m: m.group() if m.group().startswith('"') else "", text)
    return "".join(line for line in text.splitlines(keepends=True) if line.strip())


_FUNC_START = re.compile(r"^(?:  )?func\.func ", re.M)


def _functions(chunk: str) -> list[str]:
    """A chunk cut before each top-level ``func.func`` (small seeds make fast mutants; a
    function is a program of its own unless it calls another)."""
    starts = [m.start() for m in _FUNC_START.finditer(chunk)]
    if len(starts) < 2:
        return [chunk]
    pieces = [chunk[a:b] for a, b in zip(starts, starts[1:] + [len(chunk)])]
    if chunk.lstrip().startswith("builtin.module") or "module {" in chunk[: starts[0]]:
        return [chunk]  # an explicit module: keep it whole
    return pieces


def corpus() -> list[Seed]:
    """Every function of every chunk of examples/ir/*.mlir and tests/lit/**/*.mlir (not
    lit's Output/ folders: files a test run wrote)."""
    files = sorted(REPO.glob("examples/ir/*.mlir")) + sorted(REPO.glob("tests/lit/**/*.mlir"))
    seeds = []
    for path in files:
        if "Output" in path.relative_to(REPO).parts:
            continue
        chunks = SPLIT.split(path.read_text(encoding="utf-8"))
        for i, chunk in enumerate(map(_strip_comments, chunks)):
            if "func.func" not in chunk and "pk." not in chunk:
                continue
            for j, piece in enumerate(_functions(chunk)):
                name = f"{path.relative_to(REPO)}:{i}:{j}"
                seeds.append(Seed(name, piece))
    return seeds


# --------------------------------------------------------------------------------------
# Mutations: each takes (rng, text) and returns new text.


def _span(rng: random.Random, text: str, most: int = 12) -> tuple[int, int]:
    a = rng.randrange(len(text) + 1)
    return a, min(len(text), a + rng.randint(1, most))


def m_delete(rng, text):
    a, b = _span(rng, text)
    return text[:a] + text[b:]


def m_duplicate(rng, text):
    a, b = _span(rng, text, 40)
    return text[:b] + text[a:b] + text[b:]


def m_insert(rng, text):
    a = rng.randrange(len(text) + 1)
    return text[:a] + rng.choice(_PUNCT) + text[a:]


def m_lines(rng, text):
    lines = text.splitlines(keepends=True)
    if len(lines) < 2:
        return text
    i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
    kind = rng.randrange(3)
    if kind == 0:
        lines[i], lines[j] = lines[j], lines[i]  # a use may now come before its def
    elif kind == 1:
        del lines[i]
    else:
        lines.insert(j, lines[i])
    return "".join(lines)


def m_truncate(rng, text):
    return text[: rng.randrange(len(text) + 1)]


def m_number(rng, text):
    found = list(_NUMBER.finditer(text))
    if not found:
        return text
    m = rng.choice(found)
    return text[: m.start()] + rng.choice(_EXTREME_NUMBERS) + text[m.end():]


def m_element(rng, text):
    found = list(_ELEMENT.finditer(text))
    if not found:
        return text
    new = rng.choice(_BAD_ELEMENTS)
    if rng.random() < 0.5:  # every occurrence of that type, so the IR stays consistent
        old = rng.choice(found).group(1)
        return re.sub(rf"\b{old}\b", new, text)
    m = rng.choice(found)
    return text[: m.start()] + new + text[m.end():]


def m_zero_dim(rng, text):
    found = list(re.finditer(r"(?<=[<x])\d+(?=x)", text))
    if not found:
        return text
    dim = rng.choice(found).group(0)
    # Every occurrence of this dimension size, so shapes stay consistent.
    return re.sub(rf"(?<=[<x]){dim}(?=x)", "0", text)


def m_ssa(rng, text):
    """Point a use at another value (often one defined later, or inside another region)."""
    found = list(_SSA_USE.finditer(text))
    if len(found) < 2:
        return text
    m = rng.choice(found)
    other = rng.choice(found).group(0)
    return text[: m.start()] + other + text[m.end():]


def m_string(rng, text):
    a = rng.randrange(len(text) + 1)
    body = rng.choice(["a", "\\", "\\\"", "ab\\n"]) * rng.randint(5, 60)
    return text[:a] + '"' + body + text[a:]


def m_first_char(rng, text):
    return rng.choice(list("}%^#!@$&*~`|\x00\x7f\u00e9\\'")) + text


def m_nest(rng, text):
    """Wrap the body of the first func in many nested scf.execute_region ops."""
    depth = rng.choice([30, 120, 1200])  # 400 is a fixed case in the test (slow: ~1 s)
    inner = "%c = arith.constant 0 : index\n"
    for _ in range(depth):
        inner = "scf.execute_region {\n" + inner + "scf.yield\n}\n"
    return "func.func @deep() {\n" + inner + "func.return\n}\n" + text


def m_attr(rng, text):
    """Replace an attribute value inside braces with an extreme or wrongly typed one."""
    found = list(re.finditer(r"(\w+) = ([^,}]+)", text))
    if not found:
        return text
    m = rng.choice(found)
    new = rng.choice([
        "1099511627776 : i64", "100000 : i64", "0 : i64", "-1 : i64", '"x"', "1.5 : f32",
        "1.0e39 : f32", "7 : i64", "1.0e39 : bf16", "70000.0 : f16", "3 : i64", "[]", "[0, 0]", "unit", "0 : index", "5 : i64",
    ])
    return text[: m.start(2)] + new + text[m.end(2):]


def m_step(rng, text):
    """A loop step of 0 or a negative one (scf.for's step must be positive)."""
    found = list(re.finditer(r"step (%[\w.$-]+)", text))
    if not found:
        return text
    m = rng.choice(found)
    const = f"%zero_step = arith.constant {rng.choice(['0', '-1'])} : index\n"
    # Define it right before the loop's line.
    line_start = text.rfind("\n", 0, m.start()) + 1
    return text[:line_start] + const + text[line_start : m.start(1)] + "%zero_step" + text[m.end(1):]


MUTATIONS = (
    m_delete, m_duplicate, m_insert, m_lines, m_truncate, m_number, m_number, m_element,
    m_zero_dim, m_ssa, m_ssa, m_string, m_first_char, m_nest, m_attr, m_attr, m_step,
)


def mutate(rng: random.Random, text: str) -> str:
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        text = rng.choice(MUTATIONS)(rng, text)
    return text


# --------------------------------------------------------------------------------------
# Random graph-level programs


def random_program(rng: random.Random) -> str:
    """A small graph-level pk function: matmuls, maps and collectives on random shapes."""
    elem = rng.choice(["bf16", "f16", "f32", "f32", "f64", "i32", "none", "index"])
    world = rng.choice([1, 2, 3, 4, 8, 0, 1 << 40])
    m, k, n = (rng.choice([0, 1, 4, 8, 16, 24, 64]) for _ in range(3))
    lines = [f"func.func @main(%x: tensor<{m}x{k}x{elem}>, %w: tensor<{k}x{n}x{elem}>) -> tensor<{m}x{n}x{elem}> {{"]
    cur, shape = "%x", (m, k)
    lines.append(f"  %h = pk.matmul %x, %w : (tensor<{m}x{k}x{elem}>, tensor<{k}x{n}x{elem}>) -> tensor<{m}x{n}x{elem}>")
    cur, shape = "%h", (m, n)
    t = f"tensor<{m}x{n}x{elem}>"
    for i in range(rng.randint(0, 4)):
        kind = rng.choice(["map", "all_reduce", "fill", "rs_ag", "a2a"])
        if kind == "map":
            fn = rng.choice(["gelu", "relu", "exp", "neg", "silu", "bogus"])
            lines.append(f'  %v{i} = pk.map "{fn}" {cur} : ({t}) -> {t}')
        elif kind == "all_reduce":
            lines.append(f'  %v{i} = pk.all_reduce {cur} {{reduce = "sum", world = {world} : i64}} : {t} -> {t}')
        elif kind == "fill":
            value = rng.choice(["0.0 : f32", "1.0e39 : f32", "2 : i64", "1.5 : bf16", "7.0e4 : f16"])
            lines.append(f"  %c{i} = pk.constant {{value = {value}}} : {t}")
            lines.append(f'  %v{i} = pk.map "add" {cur}, %c{i} : ({t}, {t}) -> {t}')
        elif kind == "rs_ag":
            w = max(1, world) if world < 64 else 2
            if m % w:
                lines.append(f'  %v{i} = pk.map "relu" {cur} : ({t}) -> {t}')
            else:
                s = f"tensor<{m // w}x{n}x{elem}>"
                lines.append(f'  %s{i} = pk.reduce_scatter {cur} {{dim = 0 : i64, reduce = "sum", world = {world} : i64}} : {t} -> {s}')
                lines.append(f"  %v{i} = pk.all_gather %s{i} {{dim = 0 : i64, world = {world} : i64}} : {s} -> {t}")
        else:
            lines.append(f"  %v{i} = pk.all_to_all {cur} {{concat_dim = 0 : i64, split_dim = 0 : i64, world = {world} : i64}} : {t} -> {t}")
        cur = f"%v{i}"
    lines.append(f"  func.return {cur} : {t}")
    lines.append("}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------
# Running a mutant


class TimeLimit(BaseException):
    """Raised by the alarm: a BaseException, so pkc-opt's ``except Exception`` lets it out."""


@dataclass
class Outcome:
    status: int | str  # exit status, or "timeout"
    stderr: str
    seconds: float


def run_one(text: str, args: tuple[str, ...], limit_s: float) -> Outcome:
    from pkc.tools.pkc_opt import main

    def on_alarm(signum, frame):
        raise TimeLimit

    out, err = io.StringIO(), io.StringIO()
    old_handler = signal.signal(signal.SIGALRM, on_alarm)
    saved_stdin = sys.stdin
    sys.stdin = io.StringIO(text)
    t0 = time.perf_counter()
    try:
        signal.setitimer(signal.ITIMER_REAL, limit_s)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status: int | str = main(["-", *args])
    except TimeLimit:
        status = "timeout"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_handler)
        sys.stdin = saved_stdin
    return Outcome(status, err.getvalue(), time.perf_counter() - t0)


LOCATED = re.compile(r"^<stdin>:\d+:\d+: error: ", re.M)


def problem(outcome: Outcome) -> str | None:
    """What is wrong with an outcome (None: exit 0, or exit 1 with a located error)."""
    if outcome.status == "timeout":
        return "timeout"
    if outcome.status == 0:
        return None
    if outcome.status != 1:
        return f"exit {outcome.status}"
    if not LOCATED.search(outcome.stderr):
        return "exit 1 without a file:line:col diagnostic"
    return None


def mutants(seed: int, count: int) -> list[tuple[str, str, tuple[str, ...]]]:
    """``count`` (origin, text, args) triples, reproducible from ``seed``."""
    rng = random.Random(seed)
    seeds = corpus()
    result = []
    for i in range(count):
        if rng.random() < 0.15:
            origin, text = f"random-program-{i}", random_program(rng)
        else:
            s = rng.choice(seeds)
            origin, text = s.name, mutate(rng, s.text)
        # Mostly plain (parse, verify, print: the cheap path where most bad input is
        # caught); the passes and codegen on a share of them.
        args = MODES[rng.choices(range(len(MODES)), weights=(10, 3, 1, 1))[0]]
        result.append((origin, text, args))
    return result
