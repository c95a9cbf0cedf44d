"""Writes the hand-written collective kernels that the IR-built ones replaced (deleted in
ec93917; generated from the tree before it) as PTX files plus their launch plans, for
benchmarks/collectives_vs_hand.py, which launches them on the GPU beside the IR kernels.

    git worktree add /tmp/old ec93917^
    python benchmarks/hand_collectives_gen.py --old /tmp/old \
        --out benchmarks/results/hand_collectives        # CPU only

Per case of collectives_vs_hand.cases(): the IR plan (this tree: the kind the schedule
pass chose, the two-shot's gather and CTA groups), then, in a subprocess on the old tree,
the hand kernel of the same kind and options (``CollectiveConfig``; its PTX does not
depend on the size) and the hand runner's launch plan (``plan_grid``: vectors, chunk
vectors, slice, grid; the threads; the symmetric buffer's vectors) for every CTA budget
the virtual world can give it on an H200 (``ctas_per_sm x`` the lane's SMs: 64 / 32 with
green contexts at W = 2 / 4, 66 / 33 on plain streams), so that the GPU run takes the grid
the hand runner itself would have taken."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BUDGETS = (32, 33, 64, 66, 128, 132)


def _old_side(cases: list[dict], out: str) -> None:
    """Runs with the old tree first on sys.path: hand PTX and plans."""
    from pkc.codegen.hopper.collectives import (LL_KINDS, THREADS, CollectiveConfig,
                                                emit_collective_ptx, plan_grid)

    for c in cases:
        kind, W, dt = c["kind"], c["W"], c["dtype"]
        if kind == "ar2":
            cfg = CollectiveConfig(kind, W, dt, copy_in=True, gather=c["gather"] or "push",
                                   groups=c["groups"] or 1)
        else:
            cfg = CollectiveConfig(kind, W, dt)
        cfg.validate()
        ptx = emit_collective_ptx(cfg)
        path = os.path.join(out, cfg.kernel_name + ".ptx")
        with open(path, "w") as f:
            f.write(ptx)
        plans = {}
        for b in BUDGETS:
            nv, cv, per, G = plan_grid(cfg, c["n_in"], b)
            threads = min(THREADS, -(-per // 32) * 32) if kind in LL_KINDS else THREADS
            plans[str(b)] = {"nv": nv, "cv": cv, "per": per, "grid": G, "threads": threads}
        nv, cv = plans[str(BUDGETS[0])]["nv"], plans[str(BUDGETS[0])]["cv"]
        ll_vecs = 2 * (-(-2 * W * cv // 32) * 32)
        sym_vecs = {"ll": ll_vecs, "llag": ll_vecs, "llrs": ll_vecs, "ar1": 2 * W * nv,
                    "rs": 2 * W * cv, "ag": W * nv, "ar2": nv + W * cv}[kind]
        c["hand"] = {"kernel": cfg.kernel_name, "ptx": os.path.basename(path), "plans": plans,
                     "ctas_per_sm": 2 if kind in ("ag", "agp", "rs", "ar2") else 1,
                     "sym_vecs": sym_vecs, "vec_elems": cfg.vec_elems,
                     "config": {"kind": kind, "world": W, "dtype": dt, "unroll": cfg.unroll,
                                "copy_in": cfg.copy_in, "gather": cfg.gather,
                                "groups": cfg.groups}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", required=True, help="a checkout of ec93917^ (the hand generators)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "hand_collectives"))
    ap.add_argument("--old-side", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.old_side:                      # the subprocess on the old tree
        cases = json.load(open(args.old_side))
        _old_side(cases, args.out)
        json.dump(cases, open(args.old_side, "w"), indent=1)
        return
    sys.path.insert(0, os.path.dirname(HERE))
    sys.path.insert(0, HERE)
    from collectives_vs_hand import cases as all_cases
    from collectives_ir import compile_ir

    os.makedirs(args.out, exist_ok=True)
    rows = []
    for coll, algo, W, nbytes, dt in all_cases():
        ck, plan, n_in, n_out = compile_ir(coll, algo, W, nbytes, dt)
        rows.append({"collective": coll, "algorithm": algo, "W": W, "bytes": nbytes, "dtype": dt,
                     "kind": plan["comm_kind"], "gather": plan.get("gather"),
                     "groups": plan.get("groups"), "n_in": n_in, "n_out": n_out})
    tmp = os.path.join(args.out, "cases.json")
    json.dump(rows, open(tmp, "w"), indent=1)
    env = dict(os.environ, PYTHONPATH=os.path.abspath(args.old))
    subprocess.run([sys.executable, os.path.abspath(__file__), "--old", args.old, "--out",
                    os.path.abspath(args.out), "--old-side", os.path.abspath(tmp)], check=True, env=env,
                   cwd=os.path.abspath(args.old))
    print(f"{len(rows)} cases, kernels in {args.out}")


if __name__ == "__main__":
    main()
