"""``python -m pkc.emu FILE.mlir [-p PIPELINE] [--target sm_90a|sm_100a|sm_80] [--world W]``

Parses FILE (``-`` for stdin), runs the pipeline, then runs every function (or
``--func``) on random inputs
(``--inputs FILE.pt``: a list of per-rank argument lists saved with ``torch.save``) with
every ``pk.kernel`` compiled for the target and run in the emulator, each compared with
the reference interpreter (:mod:`pkc.emu.check`).

Exit status: 0 when every kernel matches; 1 with the first difference (kernel, output,
rank, index, values), an emulator error (misuse named with kernel, rank, CTA, warp and
instruction) or bad input; 2 on an internal error (``PKC_DEBUG=1`` for the traceback).
"""

from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pkc.emu", description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("-p", "--passes", default="", help="pipeline to run first (e.g. default)")
    ap.add_argument("--target", default="sm_90a", choices=["sm_90a", "sm_100a", "sm_80"])
    ap.add_argument("--world", type=int, default=None,
                    help="ranks (default: the world the module's collectives/kernels name)")
    ap.add_argument("--func", default=None, help="only this function (default: every one)")
    ap.add_argument("--split-input-file", action="store_true",
                    help="run each '// -----' chunk of FILE as its own module")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--inputs", help="torch.save'd list of per-rank argument lists")
    ap.add_argument("--sms", type=int, default=None, help="SMs to fit each kernel's CTAs to")
    ap.add_argument("--exact", action="store_true", help="demand bitwise-equal outputs")
    ap.add_argument("--no-race-check", action="store_true")
    args = ap.parse_args(argv)
    try:
        return _run(args)
    except Exception as e:  # noqa: BLE001 - the command reports, never dumps a traceback
        if os.environ.get("PKC_DEBUG"):
            raise
        print(f"pkc.emu: internal error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2


def _run(args) -> int:
    from pkc.tools.pkc_opt import split_input

    text = sys.stdin.read() if args.file == "-" else open(args.file).read()
    status, total = 0, 0
    for chunk in split_input(text, args.split_input_file):
        source = "\n" * (chunk.first_line - 1) + chunk.text
        st, n = _run_chunk(args, chunk.text, source, chunk.first_line)
        status, total = max(status, st), total + n
        if st:
            return st
    print(f"{total} kernel(s) match the interpreter")
    return status


def _run_chunk(args, text: str, source: str, first_line: int) -> tuple[int, int]:
    import torch
    from xdsl.dialects import func

    from pkc.codegen.errors import CodegenError
    from pkc.emu.check import check_module, world_of
    from pkc.emu.errors import EmuError
    from pkc.interp import InterpError, random_inputs
    from pkc.ir import PkcDiagnostic, make_context, parse_module, verify_module
    from pkc.passes import PipelineError, parse_pipeline

    try:
        ctx = make_context()
        module = parse_module(text, args.file, ctx=ctx, first_line=first_line)
        verify_module(module, source=source, filename=args.file)
        for p in parse_pipeline(args.passes) if args.passes else []:
            p.apply(ctx, module)
            verify_module(module, source=source, filename=args.file)
    except (PkcDiagnostic, PipelineError) as d:
        print(str(d), file=sys.stderr)
        return 1, 0
    funcs = [op for op in module.walk() if isinstance(op, func.FuncOp)
             and (args.func is None or op.sym_name.data == args.func)]
    if not funcs:
        print(f"{args.file}: error: no function {'@' + args.func if args.func else ''} in the "
              "module", file=sys.stderr)
        return 1, 0
    n = 0
    for fn in funcs:
        name = fn.sym_name.data
        named = world_of(fn)
        world = args.world or named or 1
        if named is not None and named != world:
            print(f"{args.file}: error: @{name} is written for a world of {named} ranks, "
                  f"--world is {world}", file=sys.stderr)
            return 1, n
        try:
            if args.inputs:
                inputs = torch.load(args.inputs)
            else:
                inputs = random_inputs(module, world, args.seed, name)
            res = check_module(module, inputs, world, target=args.target, func_name=name,
                               exact=args.exact, sms=args.sms,
                               check_races=not args.no_race_check, seed=args.seed, log=print)
        except EmuError as e:
            print(f"{args.file}: @{name}: emulator error: {e}", file=sys.stderr)
            return 1, n
        except (InterpError, CodegenError, PkcDiagnostic) as e:
            print(f"{args.file}: @{name}: error: {e}", file=sys.stderr)
            return 1, n
        if not res.ok:
            print(f"{args.file}: @{name}: MISMATCH {res.difference}", file=sys.stderr)
            return 1, n
        n += len(res.kernels)
    return 0, n


if __name__ == "__main__":
    sys.exit(main())
