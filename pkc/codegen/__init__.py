"""Code generation: kernel-level pk IR -> the ``ptx`` dialect -> PTX text.

``emit_ptx(module, target)`` gives ``{kernel name: PTX}``; ``compile_kernel`` gives the
PTX with the ABI metadata the runtime needs; ``ptxas.assemble`` checks it and reports
registers, shared memory and spills. Targets: sm_90a, sm_100a, and the portable sm_80.
"""

from pkc.codegen.emit import CompiledKernel, compile_kernel, compile_module, dump_kernels, emit_ptx
from pkc.codegen.errors import CodegenError, PtxasError

__all__ = ["CompiledKernel", "CodegenError", "PtxasError", "compile_kernel", "compile_module",
           "dump_kernels", "emit_ptx"]
