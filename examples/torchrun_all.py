"""The three torchrun examples in one process group (one NCCL start instead of three):

    torchrun --nproc_per_node=W examples/torchrun_all.py [--pipelines default "default{force=true}"]

Runs examples/torchrun_tp_mlp.py, torchrun_sp_block.py and torchrun_moe.py (each as its own
``run``) for every pipeline given, then prints one summary table on rank 0 and, with
``--json``, writes every rank's results there (rank r to PATH with ``.rank{r}`` before the
extension).
"""

from __future__ import annotations

import json
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torchrun_common as common  # noqa: E402  (sets the no-multicast environment first)

import torch.distributed as dist  # noqa: E402
import torchrun_moe  # noqa: E402
import torchrun_sp_block  # noqa: E402
import torchrun_tp_mlp  # noqa: E402

EXAMPLES = {"tp_mlp": torchrun_tp_mlp, "sp_block": torchrun_sp_block, "moe": torchrun_moe}


def main(argv: list[str] | None = None) -> int:
    ap = common.base_args(__doc__.splitlines()[0])
    ap.add_argument("--pipelines", nargs="+", default=["default", "default{force=true}"])
    ap.add_argument("--only", nargs="+", choices=list(EXAMPLES), default=list(EXAMPLES))
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    ctx = common.init_distributed()
    rows = []
    for pipeline in args.pipelines:
        for name in args.only:
            args.pipeline = pipeline
            try:
                r = EXAMPLES[name].run(ctx, args)
                rows.append({"example": name, "pipeline": pipeline, **r.__dict__})
            except Exception as e:  # report and go on: one failing model must not hide the rest
                traceback.print_exc()
                rows.append({"example": name, "pipeline": pipeline, "ok": False,
                             "error": f"{type(e).__name__}: {e}"[:800]})
                print(f"[rank {ctx.rank}/{ctx.world}] {name} ({pipeline}): ERROR {rows[-1]['error']}",
                      flush=True)
                if ctx.world > 1:
                    break  # the ranks may now disagree on what runs next: stop here
        else:
            continue
        break
    if args.json:
        base, ext = os.path.splitext(args.json)
        with open(f"{base}.rank{ctx.rank}{ext or '.json'}", "w") as fh:
            json.dump({"rank": ctx.rank, "world": ctx.world, "device": str(ctx.device), "rows": rows},
                      fh, indent=1, default=str)
    ok = all(r["ok"] for r in rows) and len(rows) == len(args.pipelines) * len(args.only)
    gathered = [None] * ctx.world
    if ctx.world > 1:
        dist.all_gather_object(gathered, rows)
    else:
        gathered = [rows]
    if ctx.rank == 0:
        print(f"\ntorchrun examples, W={ctx.world} ({ctx.backend}): max abs error per rank "
              "(pkc compiled vs the same model eager)")
        print(f"{'example':10s} {'pipeline':22s} {'mode':8s} {'kernels':>7s}  "
              + " ".join(f"{'rank' + str(r):>10s}" for r in range(ctx.world))
              + f"  {'pkc ms':>8s} {'eager ms':>8s}  ok")
        for i, row in enumerate(rows):
            errs = []
            for rr in gathered:
                other = rr[i] if rr and i < len(rr) else {}
                errs.append(f"{other.get('max_err', float('nan')):10.3g}" if "max_err" in other
                            else f"{'ERR':>10s}")
            oks = all(rr and i < len(rr) and rr[i].get("ok") for rr in gathered)
            pm, em = row.get("pkc_ms"), row.get("eager_ms")
            print(f"{row['example']:10s} {row['pipeline']:22s} {str(row.get('mode', '-')):8s} "
                  f"{row.get('kernels', 0):>7}  " + " ".join(errs)
                  + f"  {pm if pm is None else f'{pm:8.3f}'!s:>8s} {em if em is None else f'{em:8.3f}'!s:>8s}"
                  + f"  {'ok' if oks else 'FAILED'}")
    return common.finish(ctx, ok)


if __name__ == "__main__":
    raise SystemExit(main())
