#!/usr/bin/env bash
# One device call (issue 20, fp8 GEMM): the GPU tests of the scheduled fp8 GEMM, the
# emulator probe (inputs and outputs saved), then benchmarks/fp8_gemm.py; logs and JSON
# under $OUT, a table last.   run: bash benchmarks/run_fp8_device.sh   (carry .whl)
set -u
OUT=${OUT:-/tmp/fp8-out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 PKC_CACHE_DIR=/tmp/pkc-cache
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH=$PATH:/usr/local/cuda/bin
nvidia-smi -L
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
echo "=== gpu tests"
timeout -k 5 150 python3 -m pytest -q -rfEs -p no:cacheprovider tests/gpu/test_gpu_fp8.py \
    -k "scheduled_fp8_gemm ${FP8_EXTRA_K:-}" 2>&1 | tee "$OUT/gpu_tests.txt" | tail -25
echo "=== probe"
timeout -k 5 60 python3 tests/gpu/fp8_probe.py --out "$OUT" 2>&1 | tail -5
echo "=== benchmark"
timeout -k 5 ${FP8_BENCH_S:-200} python3 benchmarks/fp8_gemm.py --out "$OUT" --rounds 20 2>&1 | tee "$OUT/bench.txt" | tail -20
