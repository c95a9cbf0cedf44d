"""``python -m pkc.codegen FILE.mlir``: PTX for every pk.kernel of a file (until
``pkc-opt --emit=ptx`` is wired), for lit tests and inspection.

Options: ``--target sm_90a|sm_100a|sm_80``, ``--no-bulk`` (no cp.async.bulk),
``--check`` (assemble with ptxas, report registers/smem/spills on stderr),
``--ptx-ir`` (print the ptx dialect IR instead of PTX text), ``--dump DIR``.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pkc.codegen", description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--target", default="sm_90a")
    ap.add_argument("--no-bulk", action="store_true")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--ptx-ir", action="store_true")
    ap.add_argument("--dump")
    args = ap.parse_args(argv)

    from pkc.codegen.emit import compile_module, dump_kernels
    from pkc.codegen.errors import CodegenError
    from pkc.codegen.ptxas import assemble
    from pkc.ir import PkcDiagnostic, parse_module, verify_module

    text = sys.stdin.read() if args.file == "-" else open(args.file).read()
    try:
        module = parse_module(text, args.file)
        verify_module(module, source=text, filename=args.file)
        kernels = compile_module(module, args.target, bulk=False if args.no_bulk else None)
        for name, ck in kernels.items():
            print(f"// ----- pk.kernel {name} ({ck.target})")
            print(ck.ptx_ir() if args.ptx_ir else ck.ptx)
            if args.check:
                _, rep, _ = assemble(ck.ptx, ck.target)
                for r in rep.values():
                    print(f"ptxas: {r.line()}", file=sys.stderr)
        if args.dump:
            dump_kernels(module, args.dump, (args.target,), check=args.check)
    except PkcDiagnostic as d:
        print(str(d), file=sys.stderr)
        return 1
    except CodegenError as e:
        print(f"{args.file}: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
