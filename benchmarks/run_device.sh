#!/usr/bin/env bash
# One run on the GPU machine (the device tool): correctness of every GEMM variant, then the
# benchmark against cuBLAS. Writes under $OUT: env.txt, check.jsonl, check.log,
# gemm_bench.{jsonl,log,json,png}; prints the correctness summary and the table last.
#   run: bash benchmarks/run_device.sh        (carry build/pkc_whl: the xdsl wheels that
#   pkc/codegen/__init__ needs; the GEMM itself needs only torch and cuda-bindings)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if ls build/pkc_whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --target /tmp/site build/pkc_whl/*.whl && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD
{
    nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv
    python3 -c "import torch, cuda.bindings; print('torch', torch.__version__, 'cuda-bindings', cuda.bindings.__version__)"
    ptxas --version | tail -1
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
CHECK_S=${CHECK_S:-150}
BENCH_S=${BENCH_S:-240}
if [ "$CHECK_S" != 0 ]; then
    timeout $((CHECK_S + 20)) python3 benchmarks/supervise.py 100000 "$CHECK_S" "$OUT/check.jsonl" -- \
        python3 -u tests/gpu/test_hopper_gemm.py > "$OUT/check.log" 2>&1
    python3 - "$OUT/check.jsonl" <<'PY'
import json, sys, collections
recs = [json.loads(l) for l in open(sys.argv[1])]
by = collections.OrderedDict()
for r in recs:
    k = (r.get("name") or r.get("cfg"), r.get("dtype"))
    by.setdefault(k, []).append(r)
print(f"correctness: {sum(r.get('ok', False) for r in recs)}/{len(recs)} cases ok")
for k, rs in by.items():
    bad = [r for r in rs if not r.get("ok")]
    worst = max((r.get("rel_err", 0) or 0) for r in rs)
    print(f"  {str(k[0]):22s} {str(k[1]):5s} {len(rs)-len(bad)}/{len(rs)} ok, worst rel err {worst:.1e}"
          + ("" if not bad else "  FIRST BAD: " + json.dumps(bad[0])[:300]))
PY
fi
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader >> "$OUT/env.txt"
if [ "$BENCH_S" != 0 ]; then
    timeout $((BENCH_S + 40)) python3 benchmarks/gemm.py --out "$OUT" --timeout "$BENCH_S"
fi
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader >> "$OUT/env.txt"
