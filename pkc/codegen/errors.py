"""Errors of code generation: IR that cannot be lowered (an op without a lowering, a
kernel whose tiles do not fit in shared memory) and ptxas failures."""


class CodegenError(Exception):
    """The kernel cannot be compiled for the target; the message names the op or kernel."""


class PtxasError(CodegenError):
    """ptxas rejected the PTX; the message holds its diagnostics."""
