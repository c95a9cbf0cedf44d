"""``python -m pkc.aot.verify <folder>``: load and run a just-built package once, in a fresh
process that imports what a loading process imports (torch and :mod:`pkc.aot.cache`), on
zero inputs of the recorded shapes.

A package that crashes its loader (every package as torch linked it on the H200 machine:
SIGSEGV in the process that loaded it; :mod:`pkc.aot.link`) must never reach ``meta.json``:
a crash here ends only this process, and the builder relinks the wrapper or records a
failed build instead (:func:`pkc.aot.build.build_checked`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from pkc.aot.cache import PACKAGE, PENDING


def main(argv: list[str] | None = None) -> int:
    folder = Path((argv if argv is not None else sys.argv[1:])[0])
    meta = json.loads((folder / PENDING).read_text())
    args = [torch.empty_strided(shape, stride, dtype=getattr(torch, dtype), device=dev).zero_()
            for (shape, stride, dtype, _), dev in zip(meta["arg_meta"], meta["devices"])]
    dev = next((torch.device(d) for d in meta["devices"] if d.startswith("cuda")), None)
    loader = torch._C._aoti.AOTIModelPackageLoader(str(folder / PACKAGE), "model", False, 1,
                                                  -1 if dev is None else (dev.index or 0))
    with torch.no_grad():
        outs = loader.boxed_run(args)
    if dev is not None:
        torch.cuda.synchronize(dev)
    if not outs or not all(isinstance(t, torch.Tensor) for t in outs):
        print(f"pkc.aot.verify: the package returned {type(outs).__name__}", file=sys.stderr)
        return 1
    if "n_outputs" in meta and len(outs) != meta["n_outputs"]:
        print(f"pkc.aot.verify: {len(outs)} outputs, the layer returns {meta['n_outputs']}", file=sys.stderr)
        return 1
    print(f"pkc.aot.verify: ok ({len(outs)} outputs)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
