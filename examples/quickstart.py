"""Quickstart: parse pk IR, verify it, print it, and run it on the reference interpreter.

Runs on any machine (no GPU needed):

    python examples/quickstart.py [path/to/module.mlir] [--world 4]

Without a path it uses examples/ir/all_reduce_one_shot.mlir, a one-shot all-reduce
written at kernel level from puts and signals, and checks it against torch's sum.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


from pkc.interp import InterpError, interpret, random_inputs
from pkc.ir import PkcDiagnostic, parse_module, print_module, verify_module

HERE = Path(__file__).parent
DEFAULT = HERE / "ir" / "all_reduce_one_shot.mlir"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("module", nargs="?", default=str(DEFAULT))
    ap.add_argument("--world", type=int, default=None,
                    help="simulated ranks (default: the world size written in the IR)")
    args = ap.parse_args(argv)

    path = Path(args.module)
    try:
        module = parse_module(path.read_text(), str(path))
        verify_module(module)
    except PkcDiagnostic as d:
        print(d, file=sys.stderr)
        return 1
    print(f"// {path.name}: parsed and verified")
    print(print_module(module))

    world = args.world or _world_of(module)
    inputs = random_inputs(module, world, seed=0)
    try:
        outputs = interpret(module, inputs, world)
    except InterpError as e:
        print(f"interpreter: {e}", file=sys.stderr)
        return 1
    print(f"// ran @main on {world} simulated ranks")
    for r, outs in enumerate(outputs):
        shapes = ", ".join(f"{tuple(o.shape)} {o.dtype}" for o in outs)
        print(f"//   rank {r}: {shapes}")
    if path == DEFAULT:
        expected = sum(x[0].double() for x in inputs)
        err = max((o[0].double() - expected).abs().max().item() for o in outputs)
        print(f"// all-reduce vs torch sum over ranks: max abs error {err:.3g}")
        return 0 if err < 1e-4 else 1
    return 0


def _world_of(module) -> int:
    for op in module.walk():
        world = op.attributes.get("world")
        if world is not None:
            return world.value.data
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
