"""Fuzzing pkc-opt: no input makes it crash (exit 2) or hang.

Mutants of the repository's IR (examples/ir, tests/lit) and random pk programs go
through ``pkc-opt`` (plain, ``-p default``, ``--emit=ptx``), in this process. Each must
exit 0, or exit 1 with a ``<stdin>:line:col: error:`` diagnostic, within a time bound.

CI runs 2,000 mutants (seeded, so a failure reproduces). For a longer run::

    PKC_FUZZ_MUTANTS=50000 PKC_FUZZ_SEED=7 python -m pytest -q tests/unit/test_fuzz_pkc_opt.py

A failing mutant is written to ``$PKC_FUZZ_OUT`` (default: pytest's tmp dir) with the
command line that reproduces it.
"""

from __future__ import annotations

import functools
import os
import re
import time

import pytest

from tests.unit import fuzz_ir

MUTANTS = int(os.environ.get("PKC_FUZZ_MUTANTS", "2000"))
SEED = int(os.environ.get("PKC_FUZZ_SEED", "20261201"))
# Per input: generous for a slow CI core (the slowest mutants take ~2 s here: a 400-deep
# nest through -p default --emit=ptx).
LIMIT_S = float(os.environ.get("PKC_FUZZ_LIMIT_S", "20"))
# The mutants run as SHARDS tests (mutant i in shard i % SHARDS), so that pytest-xdist's
# workers share them (scripts/test); together they are the same MUTANTS mutants.
SHARDS = 4


@functools.cache
def _numbered_mutants() -> list[tuple[int, tuple[str, str, tuple[str, ...]]]]:
    """The whole seeded sequence, made once per process (each shard takes its share)."""
    return list(enumerate(fuzz_ir.mutants(SEED, MUTANTS)))


@pytest.mark.parametrize("shard", range(SHARDS))
def test_fuzz_mutants_never_crash_or_hang(tmp_path, shard):
    out_dir = os.environ.get("PKC_FUZZ_OUT") or str(tmp_path)
    failures: list[str] = []
    seen_errors = seen_ok = 0
    t0 = time.perf_counter()
    mine = _numbered_mutants()[shard::SHARDS]
    for i, (origin, text, args) in mine:
        outcome = fuzz_ir.run_one(text, args, LIMIT_S)
        problem = fuzz_ir.problem(outcome)
        if outcome.status == 0:
            seen_ok += 1
        elif outcome.status == 1:
            seen_errors += 1
        if problem is None:
            continue
        path = os.path.join(out_dir, f"mutant_{SEED}_{i}.mlir")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        first = (outcome.stderr.strip().splitlines() or ["(no output)"])[0][:200]
        failures.append(
            f"{problem} (from {origin}): pkc-opt {path} {' '.join(args)}\n    {first}"
        )
        if len(failures) >= 20:
            break
    elapsed = time.perf_counter() - t0
    assert not failures, f"{len(failures)} bad outcome(s):\n" + "\n".join(failures)
    # The mutants exercise both outcomes (a fuzzer whose mutants all fail to parse, or
    # that never runs pkc-opt at all, would pass vacuously).
    # (In each shard, hence in all of them together.)
    assert seen_errors > len(mine) // 10 and seen_ok > len(mine) // 20, (seen_ok, seen_errors)
    print(f"{len(mine)} of {MUTANTS} mutants in {elapsed:.1f} s: {seen_ok} exit 0, {seen_errors} exit 1")


# One hand-written case per class of bad input the issue found, so that a regression
# names its class (the fuzzer would find them too, but less legibly).
GRAPH = """\
func.func @main(%x: tensor<16x64xbf16>) -> tensor<16x64xbf16> {
  %y = pk.all_reduce %x {reduce = "sum", world = 4 : i64} : tensor<16x64xbf16> -> tensor<16x64xbf16>
  func.return %y : tensor<16x64xbf16>
}
"""

KERNEL = """\
func.func @main(%x: tensor<64x32xf32>) -> tensor<64x32xf32> {
  %y = pk.kernel "k" (%x) {world = 2 : i64} : (tensor<64x32xf32>) -> tensor<64x32xf32> {
  ^bb0(%in: !pk.buffer<64x32xf32>, %out: !pk.buffer<64x32xf32>):
    pk.worker "compute" attributes {sms = 8 : i64} {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c2 = arith.constant 2 : index
      %t = pk.load %in[%c0, %c0] : !pk.buffer<64x32xf32> -> !pk.tile<64x32xf32>
      %z = pk.tile_fill {value = 0.0 : f32} : !pk.tile<64x32xf32>
      %s = scf.for %i = %c0 to %c2 step %c1 iter_args(%acc = %z) -> (!pk.tile<64x32xf32>) {
        %n = pk.tile_map "add" %acc, %t : (!pk.tile<64x32xf32>, !pk.tile<64x32xf32>) -> !pk.tile<64x32xf32>
        scf.yield %n : !pk.tile<64x32xf32>
      }
      pk.store %s, %out[%c0, %c0] : !pk.tile<64x32xf32>, !pk.buffer<64x32xf32>
      pk.yield
    }
    pk.yield
  }
  func.return %y : tensor<64x32xf32>
}
"""


def _nest(depth: int) -> str:
    inner = "%c = arith.constant 0 : index\n"
    for _ in range(depth):
        inner = "scf.execute_region {\n" + inner + "scf.yield\n}\n"
    return "func.func @deep() {\n" + inner + "func.return\n}\n"


CASES = {
    "bad-first-character": ("~" + GRAPH, (), r"1:1: error: Unexpected character"),
    "f32-overflow": (
        KERNEL.replace("value = 0.0 : f32", "value = 1.0e39 : f32"), (), r"out of the range of its type"
    ),
    "bf16-overflow": (
        GRAPH.replace("  %y = pk.all_reduce",
                      "  %c = arith.constant 1.0e39 : bf16\n  %y = pk.all_reduce"),
        (), r"'1.0e39 : bf16' is out of the range",
    ),
    "use-before-def": (
        KERNEL.replace("      %c2 = arith.constant 2 : index\n", "").replace(
            "      %t = pk.load", "      %c2 = arith.constant 2 : index\n      %t = pk.load"
        ).replace("%c0 = arith.constant 0 : index", "%c9 = arith.addi %c1, %c1 : index\n"
                  "      %c0 = arith.constant 0 : index"),
        (), r"operand #0 \(%c1\) is used before it is defined",
    ),
    "use-in-region-before-def": (  # the loop body uses %late, defined after the loop
        KERNEL.replace('"add" %acc, %t', '"add" %acc, %late').replace(
            "      pk.store %s", "      %late = pk.tile_fill {value = 1.0 : f32} : !pk.tile<64x32xf32>\n"
            "      pk.store %s"),
        ("-p", "default", "--emit=ptx"),
        r"'pk.tile_map' op operand #1 \(%late\) is used before it is defined \(on line 14\)",
    ),
    "element-none": (GRAPH.replace("bf16", "none"), ("-p", "default"), r"element type none"),
    "element-index": (GRAPH.replace("bf16", "index"), ("-p", "default"), r"element type index"),
    "element-complex": (GRAPH.replace("bf16", "complex<f32>"), (), r"element type complex<f32>"),
    "element-f8": (GRAPH.replace("bf16", "f8E4M3FN"), ("-p", "default"), r"element type f8E4M3FN"),
    "zero-size": (GRAPH.replace("16x64", "0x64"), ("-p", "default"), r"is empty \(a dimension of size 0\)"),
    "nesting-400": (_nest(400), ("-p", "default"), None),  # works, as in mlir-opt
    "nesting-too-deep": (_nest(1500), (), r"nest more than 1000 levels deep"),
    "unterminated-string": (
        GRAPH.replace('"sum"', '"' + "a" * 40), (), r"End of file reached before closing string"
    ),
    "scf-for-step-0": (
        KERNEL.replace("step %c1", "step %c0"), ("--emit=ptx",), r"'scf.for' constant step operand must be positive, got 0"
    ),
    "world-2^40": (GRAPH.replace("world = 4", "world = 1099511627776"), ("-p", "default"),
                   r"world size must be between 1 and 1024"),
    "kernel-world-2^40": (KERNEL.replace("world = 2", "world = 1099511627776"), ("--emit=ptx",),
                          r"world size must be between 1 and 1024"),
    "sms-100000": (KERNEL.replace("sms = 8", "sms = 100000"), ("--emit=ptx",),
                   r"sms = 100000 is more than any GPU has"),
    "i64-fill-of-f32-tile": (KERNEL.replace("value = 0.0 : f32", "value = 0 : i64"), ("--emit=ptx",),
                             r"'pk.tile_fill' value 0 : i64 does not fit element type f32"),
    "no-kernel-to-emit": (GRAPH, ("--emit=ptx",), r"1:1: error: --emit=ptx: the module has no pk.kernel"),
    "f80-constant": (GRAPH.replace("world = 4 : i64", "world = 4 : f80"), (), r"f80 constants are not supported"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_class(name):
    text, args, expected = CASES[name]
    outcome = fuzz_ir.run_one(text, args, LIMIT_S)
    if expected is None:
        assert outcome.status == 0, outcome.stderr
        return
    assert outcome.status == 1, (outcome.status, outcome.stderr)
    assert fuzz_ir.LOCATED.search(outcome.stderr), outcome.stderr
    assert re.search(expected, outcome.stderr), outcome.stderr


def test_unterminated_string_is_linear_time():
    """xDSL's string pattern backtracked exponentially: 30 characters took minutes."""
    text = GRAPH.replace('"sum"', '"' + "ab" * 20000)
    outcome = fuzz_ir.run_one(text, (), LIMIT_S)
    assert outcome.status == 1 and outcome.seconds < 5, outcome
