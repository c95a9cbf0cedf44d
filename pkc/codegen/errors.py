"""Errors of code generation: IR that cannot be lowered (an op without a lowering, a
kernel whose tiles do not fit in shared memory) and ptxas failures."""


class CodegenError(Exception):
    """The kernel cannot be compiled for the target; the message names the op or kernel.

    ``op`` is the pk.kernel being compiled (set by compile_module), so that tools can
    report the error at its source line."""

    op = None


class PtxasError(CodegenError):
    """ptxas rejected the PTX; the message holds its diagnostics."""
