#!/usr/bin/env bash
# The emulator against the H200 in one call on the GPU machine (device tool, carry .whl):
# install the carried xdsl wheels, prepare the cases on the CPU there (compile, random
# inputs, emulate; skipped when DIR already holds index.json), then compile again, launch
# on the GPU and compare (tests/gpu/emu_vs_gpu.py). Logs and OUT/emu_vs_gpu/emu_vs_gpu.json
# under $OUT; the table (case, kind, W, bitwise, differing, max diff, tolerance) last.
# About 2 minutes: prepare ~45 s on one core, then 8 short GPU processes; at most ~6.
#   run: bash tests/gpu/run_emu_vs_gpu.sh [DIR]
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 || exit 1
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PKC_CACHE_DIR=/tmp/pkc-cache PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/pkc-gpu-out}; mkdir -p "$OUT/emu_vs_gpu"
DIR=${1:-/tmp/emu_prep}
nvidia-smi -L 2>&1 | head -2; date
start=$(date +%s); deadline=$((start + 330))       # the whole script within ~6 minutes
if [ ! -f "$DIR/index.json" ]; then
  timeout -k 5 150 python3 tests/gpu/emu_vs_gpu.py prepare "$DIR" > "$OUT/prepare.log" 2>&1
  echo "prepare rc=$? $(( $(date +%s) - start )) s"; tail -n 3 "$OUT/prepare.log"
  cp "$DIR/index.json" "$OUT/emu_vs_gpu/index.json" 2>/dev/null
fi
# one process per group (a CUDA fault in one cannot poison the next); results merged
rm -f "$OUT/emu_vs_gpu/emu_vs_gpu.json"
for g in gemm_ general_ comm_ fused_ ag_gemm_ moe_ pair_ new_; do
  left=$((deadline - $(date +%s))); [ "$left" -gt 60 ] && left=60
  if [ "$left" -lt 5 ]; then echo "run $g skipped: out of time"; continue; fi
  timeout -k 5 "$left" python3 tests/gpu/emu_vs_gpu.py run "$DIR" "$OUT/emu_vs_gpu" --only "$g" >> "$OUT/run.log" 2>&1
  echo "run $g rc=$? $(( $(date +%s) - start )) s"
done
python3 tests/gpu/emu_vs_gpu.py table "$OUT/emu_vs_gpu"
