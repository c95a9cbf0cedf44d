"""GPU tests: skipped where there is no CUDA device or no cuda-bindings (CI)."""

import os

import pytest

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")


def pytest_collection_modifyitems(config, items):
    from pkc.runtime import gpu_available

    if gpu_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU and cuda-bindings")
    for item in items:
        if "tests/gpu" in str(item.fspath):
            item.add_marker(skip)
