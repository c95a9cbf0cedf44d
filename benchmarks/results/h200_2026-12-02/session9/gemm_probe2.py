"""Probe: the auto tile with group_m 8 (today) vs 4 on the 11 benchmark shapes, vs cuBLAS."""
import json, os, sys
ROOT = os.environ.get("PKC_ROOT", os.getcwd())
sys.path.insert(0, ROOT); sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
from pkc.target.gemm_tuning import VARIANTS, choose_config
import gemm_ir
out = os.environ.get("OUT", "/tmp")
rows = []
for name, M, N, K in gemm_ir.SHAPES:
    cfg = choose_config(M, N, K, "bf16", "nk", 132)
    base = next(v for v, c in VARIANTS.items() if c == cfg)
    for g in (8, 4):
        v = base if g == 8 else base + "_g4"
        VARIANTS[v] = cfg.with_(group_m=g)
        try:
            r = gemm_ir.run_case(name, M, N, K, v, "nk", rounds=int(os.environ.get("ROUNDS", "30")))
        except Exception as e:
            r = {"case": name, "variant": v, "error": repr(e)}
        rows.append(r); print(json.dumps(r), flush=True)
json.dump(rows, open(os.path.join(out, "gemm_probe2.json"), "w"), indent=1)
print("case variant us_ir us_cublas cublas/ir")
for r in rows:
    print(r["case"], r["variant"], round(r.get("us_ir", 0), 1), round(r.get("us_cublas", 0), 1),
          round(r.get("cublas_over_ir", 0), 3), r.get("error", ""))
