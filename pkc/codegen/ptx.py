"""The ``ptx`` dialect: PTX instructions (or small fixed groups of them) as xDSL ops.

Why a dialect and not strings: codegen is IR-to-IR (pk kernel level -> ptx), so a lowering
can be inspected, printed in MLIR's generic form and tested op by op; the last step,
:mod:`pkc.codegen.printer`, only prints. Register allocation and scheduling are ptxas's.

Registers are SSA values of type ``!ptx.reg<kind>``, kind one of ``pred b16 b32 b64 f32
f64``; the printer gives each value its own virtual register (``%r7``, ``%rd3`` ...).
Instruction types (``.s64``, ``.bf16``, ``.f32`` ...) are attributes of the ops, so one
``b32`` register may be read as ``.u32`` by one op and ``.s32`` by the next, as in PTX.

Control flow is structured (``ptx.for``, ``ptx.if``, the bounded ``ptx.spin_wait``) so
that values stay SSA; the printer turns it into labels, ``setp`` and ``bra``, and turns
loop-carried values into ``mov``s. Each op's ``render`` gives its PTX lines.
"""

# The ops live in modules by group and are re-exported here, where the dialect is assembled:
# the register type and shared helpers in ptx_core, kernel structure and control flow in
# ptx_control, register moves and arithmetic in ptx_arith, memory, atomics and fences in
# ptx_memory, mma.sync, bulk copies, mbarriers and the bounded waits in ptx_bulk.

from __future__ import annotations

from xdsl.ir import Dialect

from pkc.codegen.ptx_arith import (
    BinaryOp,
    CvtOp,
    FmaOp,
    ImmOp,
    MovOp,
    PackOp,
    PredOp,
    SelpOp,
    SetpOp,
    ShflIdxOp,
    SmemBaseOp,
    SregOp,
    UnaryOp,
)
from pkc.codegen.ptx_bulk import (
    AtomicAddCas16Op,
    BulkGroupOp,
    CpAsyncBulkLoadOp,
    CpAsyncBulkStoreOp,
    MbarrierOp,
    MbarrierWaitOp,
    MmaSyncOp,
    SpinWaitOp,
)
from pkc.codegen.ptx_control import CommentOp, EntryOp, ForOp, IfOp, YieldOp
from pkc.codegen.ptx_core import (
    B16,
    B32,
    B64,
    F32,
    F64,
    PRED,
    REG_KINDS,
    REG_PREFIX,
    Inst,
    Names,
    RegType,
    _dots,
    _guard,
    _s,
    kind_of_type,
    reg_kind,
)
from pkc.codegen.ptx_memory import (
    AtomOp,
    BarSyncOp,
    ExitOp,
    FenceOp,
    LdOp,
    RedOp,
    StOp,
    _bits,
)

# Re-exported names: other modules import them from here (PTX is built on first use, below).
__all__ = [
    "BinaryOp", "CvtOp", "FmaOp", "ImmOp", "MovOp", "PackOp", "PredOp", "SelpOp", "SetpOp",
    "ShflIdxOp", "SmemBaseOp", "SregOp", "UnaryOp", "AtomicAddCas16Op", "BulkGroupOp",
    "CpAsyncBulkLoadOp", "CpAsyncBulkStoreOp", "MbarrierOp", "MbarrierWaitOp", "MmaSyncOp",
    "SpinWaitOp", "CommentOp", "EntryOp", "ForOp", "IfOp", "YieldOp", "B16", "B32", "B64",
    "F32", "F64", "PRED", "REG_KINDS", "REG_PREFIX", "Inst", "Names", "RegType", "_dots",
    "_guard", "_s", "kind_of_type", "reg_kind", "AtomOp", "BarSyncOp", "ExitOp", "FenceOp",
    "LdOp", "RedOp", "StOp", "_bits", "PTX_OPS",
]

PTX_OPS = [
    EntryOp, YieldOp, ForOp, IfOp, CommentOp, SregOp, SmemBaseOp, ImmOp, MovOp, PackOp,
    BinaryOp, UnaryOp, FmaOp, SetpOp, PredOp, SelpOp, ShflIdxOp, CvtOp, LdOp, StOp, RedOp,
    AtomOp, FenceOp, BarSyncOp, ExitOp, MmaSyncOp, CpAsyncBulkStoreOp, CpAsyncBulkLoadOp,
    BulkGroupOp, MbarrierOp, MbarrierWaitOp, SpinWaitOp, AtomicAddCas16Op,
]

def __getattr__(name: str):
    # The dialect also holds the sm_90 / sm_100 / communication ops of pkc.codegen.ptx_sm90 /
    # ptx_sm100 / ptx_comm, which import this
    # module; assembling it on first use keeps either import order working.
    if name == "PTX":
        from pkc.codegen.ptx_sm90 import SM90_OPS, SM90_TYPES
        from pkc.codegen.ptx_comm import COMM_PTX_OPS
        from pkc.codegen.ptx_multimem import MULTIMEM_PTX_OPS
        from pkc.codegen.ptx_sm100 import SM100_OPS
        # Every ptx op, the communication ones included: the IR that --dump-kernels writes
        # parses back (through mlir-opt too) only with all of them registered.
        dialect = Dialect("ptx", [*PTX_OPS, *SM90_OPS, *SM100_OPS, *COMM_PTX_OPS,
                                  *MULTIMEM_PTX_OPS],
                          [RegType, *SM90_TYPES])
        globals()["PTX"] = dialect
        return dialect
    raise AttributeError(name)
