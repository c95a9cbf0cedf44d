"""Probe: GEMM tile configurations on one shape vs cuBLAS (not a committed benchmark)."""
import json, os, sys
ROOT = os.environ.get("PKC_ROOT", os.getcwd())
sys.path.insert(0, ROOT); sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
from pkc.target.gemm_tuning import VARIANTS, GemmConfig
import gemm_ir
specs = {
    "128x160_s5_tma": None,
    "p_128x160_s5_g4": dict(bm=128, bn=160, stages=5, group_m=4),
    "p_128x160_s5_g16": dict(bm=128, bn=160, stages=5, group_m=16),
    "p_128x160_s5_g2": dict(bm=128, bn=160, stages=5, group_m=2),
    "p_128x160_s4_g8": dict(bm=128, bn=160, stages=4, group_m=8),
    "p_128x160_s5_e16": dict(bm=128, bn=160, stages=5, epi_w=16),
    "128x256_s4_tma": None,
    "128x128_s6_tma": None,
    "p_128x128_s6_g16": dict(bm=128, bn=128, stages=6, group_m=16),
}
for k, v in specs.items():
    if v is not None:
        VARIANTS[k] = GemmConfig(**v)
shapes = [("qkv", 8192, 1280, 8192), ("ag4096", 4096, 512, 4096), ("ag8192", 8192, 1024, 8192)]
out = os.environ.get("OUT", "/tmp")
rows = []
for name, M, N, K in shapes:
    for v in (specs if name == "qkv" else ["", "p_128x160_s5_g4", "128x128_s6_tma", "p_128x128_s6_g16"]):
        try:
            r = gemm_ir.run_case(name, M, N, K, v, "nk", rounds=int(os.environ.get("ROUNDS", "40")))
        except Exception as e:
            r = {"case": name, "variant": v, "error": repr(e)}
        rows.append(r); print(json.dumps(r), flush=True)
json.dump(rows, open(os.path.join(out, "gemm_probe.json"), "w"), indent=1)
print("case variant us_ir us_cublas ir/cublas")
for r in rows:
    print(r["case"], r["variant"] or "auto", round(r.get("us_ir", 0), 1), round(r.get("us_cublas", 0), 1),
          r.get("cublas_over_ir", r.get("error", "")))
