"""Hand-scheduled sm_90a kernels generated from Python: the compute core of pkc's fused
kernels on Hopper (H100 / H200).

``gemm.emit_gemm_ptx(GemmConfig)`` writes a complete PTX kernel for C = A @ B (bf16 / fp16
in, f32 accumulate): persistent, warp-specialized (a TMA producer warp, one or two wgmma
consumer warpgroups), a multi-stage mbarrier ring with 128-byte swizzle, setmaxnreg, and an
epilogue hook that fused kernels replace. ``launch.HopperGemm`` loads and launches it
through cuda.bindings on torch's current stream. ``tools`` assembles with ptxas and reads
the SASS, the check that the pipeline we meant survived.

The modules here use only the standard library, torch and cuda.bindings (no xdsl, nothing
else from pkc); importing them as ``pkc.codegen.hopper`` still runs ``pkc/codegen/__init__``,
which needs xdsl.
"""

from pkc.codegen.hopper.gemm import GemmConfig, GemmKernel, emit_gemm_ptx

__all__ = ["GemmConfig", "GemmKernel", "emit_gemm_ptx"]
