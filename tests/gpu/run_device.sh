#!/usr/bin/env bash
# One call on the GPU machine (device tool): install the carried xdsl wheels, print the
# environment, run the GPU tests in separate processes (a CUDA fault in one group cannot
# poison the next), keep logs under $OUT and print a summary table last.
#   run: bash tests/gpu/run_device.sh [groups...]   (carry .whl)
set -u
OUT=${OUT:-/tmp/pkc-gpu-out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 PKC_CACHE_DIR=/tmp/pkc-cache
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH=$PATH:/usr/local/cuda/bin
{
  nvidia-smi -L; date
  python3 -c "import torch, xdsl, cuda.bindings; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cap', torch.cuda.get_device_capability(), 'cuda-bindings', cuda.bindings.__version__)"
  python3 -c "from pkc.codegen.ptxas import find_ptxas, ptxas_version; print('ptxas', find_ptxas(), ptxas_version())"
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
GROUPS_=${*:-smoke kernels coverage passes dist}
mkdir -p /tmp/pkc-junit
for g in $GROUPS_; do
  case $g in
    smoke) file=tests/gpu/test_gpu_kernels.py; k="green_contexts or unit_all_reduce or raises or after_a_timeout or plain_streams"; t=80;;
    kernels) file=tests/gpu/test_gpu_kernels.py; k="test_collective"; t=200;;
    coverage) file=tests/gpu/test_gpu_kernels.py; k="test_coverage"; t=70;;
    passes) file=tests/gpu/test_gpu_passes.py; k=""; t=140;;
    dist) file=tests/gpu/test_gpu_distributed.py; k=""; t=50;;
    sched) file=tests/gpu/test_scheduled_gemm.py; k=""; t=240;;
    schedcomm) file=tests/gpu/test_scheduled_collectives.py; k=""; t=200;;
    agpa2a) file=tests/gpu/test_scheduled_agp_a2a.py; k=""; t=150;;
    program) file=tests/gpu/test_gpu_scheduled_program.py; k=""; t=240;;
    fusedar) file=tests/gpu/test_scheduled_fused_ar.py; k=""; t=90;;
    fusedlayouts) file=tests/gpu/test_scheduled_fused_layouts.py; k=""; t=150;;
    moe) file=tests/gpu/test_gpu_moe.py; k=""; t=90;;
    agk) file=tests/gpu/test_scheduled_ag_k.py; k=""; t=150;;
    agblocks) file=tests/gpu/test_gpu_ag_blocks.py; k=""; t=150;;
    agmany) file=tests/gpu/test_scheduled_ag_many.py; k=""; t=150;;
    fp8) file=tests/gpu/test_gpu_fp8.py; k=""; t=150;;
    fusedpp) file=tests/gpu/test_gpu_fused_pingpong.py; k=""; t=170;;
    subgroups) file=tests/gpu/test_gpu_subgroups.py; k=""; t=240;;
    world72) file=tests/gpu/test_world72.py; k=""; t=300;;
    *) echo "unknown group $g"; continue;;
  esac
  echo "=== $g"
  timeout -k 5 "$t" python3 -m pytest -q -rfEs -p no:cacheprovider --junitxml="/tmp/pkc-junit/junit_$g.xml" \
      "$file" ${k:+-k "$k"} > "$OUT/log_$g.txt" 2>&1
  echo "rc=$?" >> "$OUT/log_$g.txt"
  tail -n 4 "$OUT/log_$g.txt"
done
[ -n "${PKC_SKIP_SASS:-}" ] || { echo "=== SASS instruction mix"; timeout 120 python3 tests/gpu/sass_check.py 2>&1 | tee -a "$OUT/env.txt"; }
python3 tests/gpu/summarize.py /tmp/pkc-junit | tee "$OUT/summary.txt"
