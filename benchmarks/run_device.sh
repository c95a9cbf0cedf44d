#!/usr/bin/env bash
# One run on the GPU machine (the device tool, one H200): the single-GPU benchmarks of the
# IR-built kernels against their baselines. Parts (default: all, in this order):
#   gemm       benchmarks/gemm_ir.py: the 11 shapes and the tile variants, IR GEMM vs cuBLAS
#   fused      benchmarks/fused_ir.py, fused_ar_ir.py, fused_ag_ir.py: each fused kernel vs
#              the IR GEMM alone of its per-rank problem on the same lanes (W = 1..4)
#   coll       benchmarks/collectives_ir.py: every graph collective, then the extra groups
#              (bitwise vs the rank-order reference; time vs torch on the whole GPU)
#   transfer   benchmarks/transfer.py: TMA / ld-st / copy-engine rates per SM
# Logs and JSON under $OUT/<part>; the tables last. The multi-GPU sweeps (fused_sweep.py,
# collectives.py: vs cuBLAS + NCCL, torch symm_mem) run under torchrun instead.
#   bash benchmarks/run_device.sh [part ...]       (carry .whl: the xdsl wheels)
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 PKC_CACHE_DIR=/tmp/pkc-cache
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PARTS=${*:-gemm fused coll transfer}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > "$OUT/env.txt" 2>&1
for part in $PARTS; do
  mkdir -p "$OUT/$part"
  case $part in
    gemm)
      timeout 400 python3 benchmarks/gemm_ir.py --out "$OUT/gemm" --rounds 30 > "$OUT/gemm/gemm.log" 2>&1 ;;
    fused)
      timeout 200 python3 benchmarks/fused_ir.py --out "$OUT/fused" --rounds 40 > "$OUT/fused/rs.log" 2>&1
      timeout 240 python3 benchmarks/fused_ar_ir.py --out "$OUT/fused" --rounds 30 > "$OUT/fused/ar.log" 2>&1
      timeout 240 python3 benchmarks/fused_ag_ir.py --out "$OUT/fused" --rounds 40 > "$OUT/fused/ag.log" 2>&1 ;;
    coll)
      timeout 330 python3 benchmarks/collectives_ir.py --out "$OUT/coll" --iters 60 --budget-s 300 \
          > "$OUT/coll/main.log" 2>&1
      timeout 200 python3 benchmarks/collectives_ir.py --out "$OUT/coll" --extra --iters 60 --budget-s 180 \
          > "$OUT/coll/extra.log" 2>&1
      timeout 60 python3 benchmarks/collectives_ir.py --out "$OUT/coll" --missing-peer \
          > "$OUT/coll/missing_peer.log" 2>&1
      python3 benchmarks/collectives_ir.py --out "$OUT/coll" --summary > "$OUT/coll/summary.txt" 2>&1 ;;
    transfer)
      timeout 300 python3 benchmarks/transfer.py --out "$OUT/transfer" > "$OUT/transfer/transfer.log" 2>&1 ;;
    *) echo "unknown part $part" ;;
  esac
done
for part in $PARTS; do
  echo "=== $part"
  case $part in
    gemm) tail -24 "$OUT/gemm/gemm.log" ;;
    fused) for f in rs ar ag; do grep -A40 "^case" "$OUT/fused/$f.log" || tail -5 "$OUT/fused/$f.log"; done ;;
    coll) cat "$OUT/coll/summary.txt" ;;
    transfer) tail -44 "$OUT/transfer/transfer.log" ;;
  esac
done
