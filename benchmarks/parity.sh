#!/usr/bin/env bash
# The IR-built kernels against the hand-written generators they replace, every kind in one
# device run (the evidence "parity before deletion" asks for), after a correctness pass of
# the scheduled programs. Parts (default: all, in this order):
#   tests      tests/gpu groups $PARITY_TESTS (default program fusedar agpa2a moe: the scheduled path)
#   fused      benchmarks/fused_ir.py, fused_ar_ir.py, fused_ag_ir.py (hand / IR)
#   coll       benchmarks/collectives_ir.py: every graph collective, then the extra groups
#   gemm       benchmarks/gemm_ir.py (the 11 shapes: IR vs hand vs cuBLAS)
# Logs and JSON under $OUT/<part>; the tables last.
#   bash benchmarks/parity.sh [part ...]       (carry .whl: the xdsl wheels)
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 PKC_CACHE_DIR=/tmp/pkc-cache
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PARTS=${*:-tests fused coll gemm}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > "$OUT/env.txt" 2>&1
for part in $PARTS; do
  mkdir -p "$OUT/$part"
  case $part in
    tests)
      PKC_SKIP_SASS=1 OUT="$OUT/tests" bash tests/gpu/run_device.sh ${PARITY_TESTS:-program fusedar agpa2a moe} \
          > "$OUT/tests/run.log" 2>&1 ;;
    fused)
      timeout 200 python3 benchmarks/fused_ir.py --out "$OUT/fused" --rounds 40 > "$OUT/fused/rs.log" 2>&1
      timeout 200 python3 benchmarks/fused_ar_ir.py --out "$OUT/fused" --rounds 30 > "$OUT/fused/ar.log" 2>&1
      timeout 200 python3 benchmarks/fused_ag_ir.py --out "$OUT/fused" --rounds 40 > "$OUT/fused/ag.log" 2>&1 ;;
    coll)
      timeout 330 python3 benchmarks/collectives_ir.py --out "$OUT/coll" --iters 60 --budget-s 300 \
          > "$OUT/coll/main.log" 2>&1
      timeout 200 python3 benchmarks/collectives_ir.py --out "$OUT/coll" --extra --iters 60 --budget-s 180 \
          > "$OUT/coll/extra.log" 2>&1
      python3 benchmarks/collectives_ir.py --out "$OUT/coll" --summary > "$OUT/coll/summary.txt" 2>&1 ;;
    gemm)
      timeout 400 python3 benchmarks/gemm_ir.py --out "$OUT/gemm" --rounds 30 > "$OUT/gemm/gemm.log" 2>&1 ;;
    *) echo "unknown part $part" ;;
  esac
done
for part in $PARTS; do
  echo "=== $part"
  case $part in
    tests) cat "$OUT/tests/summary.txt" 2>/dev/null || tail -20 "$OUT/tests/run.log" ;;
    fused) for f in rs ar ag; do grep -A40 "^case" "$OUT/fused/$f.log" | grep -v "^{" || tail -5 "$OUT/fused/$f.log"; done ;;
    coll) cat "$OUT/coll/summary.txt" ;;
    gemm) tail -16 "$OUT/gemm/gemm.log" ;;
  esac
done
