"""Runtime: loads PTX through the CUDA driver (cuda-python), caches kernel images on
disk, and runs kernels for W ranks: a virtual world on one GPU (green contexts) or one
process per GPU under torch.distributed (symmetric memory).

Imports of the CUDA parts are lazy: ``import pkc.runtime`` works without a GPU.
"""

from pkc.runtime.errors import (
    CudaDriverError,
    KernelTimeoutError,
    PeerTimeoutError,
    RuntimeUnavailable,
)


def run_kernel_module(*args, **kwargs):
    """See :func:`pkc.runtime.execute.run_kernel_module`."""
    from pkc.runtime.execute import run_kernel_module as run

    return run(*args, **kwargs)


def gpu_available() -> bool:
    try:
        import torch

        if not torch.cuda.is_available():
            return False
        from pkc.runtime.driver import cu

        cu()
        return True
    except Exception:
        return False


__all__ = ["CudaDriverError", "KernelTimeoutError", "PeerTimeoutError", "RuntimeUnavailable", "gpu_available",
           "run_kernel_module"]
