#!/usr/bin/env bash
# Device calls of issue 20 (fp8 on the scheduled GEMM): install the carried wheels, then the
# steps named (default: all): tests (tests/gpu/test_gpu_fp8.py), probe (tests/gpu/fp8_probe.py:
# inputs and outputs saved for the emulator), gemm (benchmarks/fp8_gemm.py), fused
# (benchmarks/fp8_fused.py); logs and JSON under $OUT, tables last.
#   run: bash benchmarks/run_fp8_device.sh [tests] [probe] [gemm] [fused]   (carry .whl)
set -u
OUT=${OUT:-/tmp/fp8-out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 PKC_CACHE_DIR=/tmp/pkc-cache
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH=$PATH:/usr/local/cuda/bin
nvidia-smi -L
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
for step in ${*:-tests probe gemm fused}; do
  echo "=== $step"
  case $step in
    tests) timeout -k 5 200 python3 -m pytest -q -rfEs -p no:cacheprovider tests/gpu/test_gpu_fp8.py \
             2>&1 | tee "$OUT/gpu_tests.txt" | tail -25;;
    probe) timeout -k 5 60 python3 tests/gpu/fp8_probe.py --out "$OUT" 2>&1 | tail -5;;
    gemm) timeout -k 5 200 python3 benchmarks/fp8_gemm.py --out "$OUT" --rounds 20 2>&1 \
             | tee "$OUT/bench.txt" | tail -20;;
    fused) timeout -k 5 150 python3 benchmarks/fp8_fused.py --out "$OUT" --rounds 20 2>&1 \
             | tee "$OUT/fused.txt" | tail -12;;
    *) echo "unknown step $step";;
  esac
done
