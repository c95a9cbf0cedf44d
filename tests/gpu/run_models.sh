#!/usr/bin/env bash
# One device call: the smoke group (green contexts really used), the models on the GPU,
# the backend, and the example; logs under $OUT, summary last.  (carry .whl)
set -u
OUT=${OUT:-/tmp/pkc-gpu-out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 PKC_CACHE_DIR=/tmp/pkc-cache
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
timeout -k 5 120 python3 -m pytest -q -rfEs -p no:cacheprovider tests/gpu/test_gpu_kernels.py \
  -k "green_contexts or raises or after_a_timeout" > "$OUT/log_smoke.txt" 2>&1; echo "smoke rc=$?"; tail -n 3 "$OUT/log_smoke.txt"
timeout -k 5 300 python3 -m pytest -q -rfEs -p no:cacheprovider tests/gpu/test_gpu_models.py > "$OUT/log_models.txt" 2>&1; echo "models rc=$?"; tail -n 12 "$OUT/log_models.txt"
for w in 2 4 8; do timeout -k 5 90 python3 examples/tp_mlp.py --world $w > "$OUT/log_example_w$w.txt" 2>&1; echo "tp_mlp W=$w rc=$?"; tail -n 2 "$OUT/log_example_w$w.txt"; done
n=$(nvidia-smi -L | wc -l)
if [ "$n" -ge 2 ]; then
  timeout -k 5 180 torchrun --nproc_per_node=$n tests/gpu/torchrun_smoke.py > "$OUT/log_torchrun.txt" 2>&1; echo "torchrun W=$n rc=$?"; grep "^W=" "$OUT/log_torchrun.txt" || tail -n 30 "$OUT/log_torchrun.txt"
fi
