"""buffer-elision: remove the staging buffers of fused kernels and the copies through them.

What it matches: a ``pk.kernel`` that the ``overlap`` pass produced in its staged form
(attribute ``pk.fusion = {stage = "staged", ...}``, staging buffers marked
``pk.alloc {staging}``), whose body is still exactly what overlap builds for that fusion,
operands and results. The check is structural: the staged kernel is rebuilt from
``pk.fusion`` and compared op by op (after common-subexpression elimination of both, so a
``cse`` in between is harmless), ignoring what sm-partition and remarks add (worker
``sms``, ``pk.plan``, ``pk.remarks``). Any other kernel (a lowered collective, a kernel a
later pass changed, a hand-written one) is left alone with a remark saying why.

What it produces: the elided form of the same fusion (patterns.py builds both), in which
producers write straight into the destination and every graph output lives in symmetric
memory (the kernel's output block arguments become ``symmetric``):

* matmul+reduce_scatter: the staging slots (``recv``, W x chunk) and the owner's summing
  pass go; partial tiles are ``pk.put ... add`` into the owner's zero-initialized f32
  accumulator. For an f32 result the accumulator is the output itself, zeroed in the
  kernel and announced to the peers with a ``zeroed`` signal before any add lands;
  otherwise the owner keeps the one f32 -> result-type conversion (correctness first:
  adding 16-bit values in place would round after every add).
* matmul+all_reduce: the slots and the ``bcast`` staging go; partials are put-added into the
  owner's f32 accumulator and the owner puts each reduced tile (converted once) straight
  into every rank's output.
* all_gather+matmul: the ``stage`` buffer and the copy out of it go; peers put their
  shards straight into the GEMM operand (symmetric; the kernel's gathered output when
  there is one), which the MMAs read as they arrive.
* MoE all_to_all+matmul+all_to_all: the dispatch and combine staging go; tokens land in the
  expert GEMM's symmetric operand, results in the source rank's symmetric output.

Why: staging is what NCCL-style collectives do (small intermediate buffers, handshakes,
an extra copy per hop); writing into pre-allocated symmetric destinations is where PK
measured up to 1.79x on all-reduce (DESIGN.md). The rewrite is a rebuild from
``pk.fusion`` rather than op-by-op surgery, so every elided kernel is one the pattern
builders (and their interpreter tests) know to be race- and deadlock-free.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects.builtin import Float32Type, ModuleOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter
from xdsl.transforms.common_subexpression_elimination import cse

from pkc.dialects import kernel as k
from pkc.dialects.rank_groups import copy_groups
from pkc.passes.patterns import FUSION, STAGING, Fusion, build_kernel
from pkc.passes.registry import register_pass
from pkc.passes.remarks import PLAN, REMARKS, add_remark, remarks_of
from pkc.target.cost import Pattern

_IGNORED = (PLAN, REMARKS, "sms")  # attributes later passes may add; not part of the form


@register_pass
@dataclass(frozen=True)
class BufferElision(ModulePass):
    """Remove staging buffers: producers write straight into symmetric destinations."""

    name = "buffer-elision"

    def apply(self, ctx, op: ModuleOp) -> None:
        for kernel in [o for o in op.walk() if isinstance(o, k.KernelOp)]:
            _elide(kernel)


def _elide(kernel: k.KernelOp) -> None:
    parsed = Fusion.from_attr(kernel.attributes.get(FUSION))
    if parsed is None:
        staging = _staging_allocs(kernel)
        what = f"{len(staging)} staging buffer(s) but " if staging else ""
        _remark_once(kernel, f"buffer-elision: left alone: {what}not a kernel of the overlap "
                             "pass (no pk.fusion), so its protocol is not known to this pass")
        return
    fusion, stage = parsed
    if stage != "staged":
        return  # already elided
    outputs = [r.type for r in kernel.outputs]
    if not _is_staged_form(kernel, fusion, outputs):
        _remark_once(kernel, "buffer-elision: left alone: the body is no longer the staged "
                             f"{fusion.pattern} form that overlap built (changed by a later pass?)")
        return
    elided = build_kernel(fusion, kernel.world_size, kernel.inputs, outputs, elide=True)
    copy_groups(kernel, elided)
    _carry_over(kernel, elided)
    elided.location = kernel.location
    add_remark(elided, _describe(kernel, fusion))
    Rewriter.replace_op(kernel, elided)


def _staging_allocs(kernel: k.KernelOp) -> list[k.AllocOp]:
    return [op for op in kernel.block.ops if isinstance(op, k.AllocOp) and STAGING in op.attributes]


def _remark_once(op: Operation, text: str) -> None:
    if text not in remarks_of(op):
        add_remark(op, text)


def _is_staged_form(kernel: k.KernelOp, fusion: Fusion, outputs: list) -> bool:
    """Rebuilds the staged kernel of ``fusion`` for this kernel's operands and compares."""
    try:
        staged = build_kernel(fusion, kernel.world_size, kernel.inputs, outputs, elide=False)
    except Exception:  # operands that fit no builder: a pk.fusion written by someone else
        return False
    copy_groups(kernel, staged)
    same = _same_form(staged, kernel)
    staged.erase()
    return same


def _same_form(staged: k.KernelOp, kernel: k.KernelOp) -> bool:
    """Is ``kernel`` the freshly built ``staged`` kernel, up to attributes later passes add?"""
    probe = kernel.clone()
    for op in probe.walk():
        if op is probe or isinstance(op, k.WorkerOp):
            for key in _IGNORED:
                op.attributes.pop(key, None)
    cse(staged)  # a cse run between overlap and this pass changes nothing that matters
    cse(probe)
    same = staged.is_structurally_equivalent(probe)
    probe.erase()
    return same


def _carry_over(old: k.KernelOp, new: k.KernelOp) -> None:
    """Keeps the decisions recorded on the kernel and its workers (plans, remarks, sms)."""
    for key in _IGNORED:
        if key in old.attributes:
            new.attributes[key] = old.attributes[key]
    for w_old, w_new in zip(old.workers(), new.workers()):
        for key in _IGNORED:
            if key in w_old.attributes:
                w_new.attributes[key] = w_old.attributes[key]


def _describe(kernel: k.KernelOp, f: Fusion) -> str:
    gone = ", ".join(f"{op.result.name_hint or 'buffer'} ({op.result.type})"
                     for op in _staging_allocs(kernel))
    odt = kernel.outputs[0].type.element_type
    if f.pattern is Pattern.MM_REDUCE_SCATTER:
        how = ("partial tiles put-add straight into the owner's symmetric f32 output, zeroed "
               "in the kernel behind a 'zeroed' signal" if isinstance(odt, Float32Type) else
               "partial tiles put-add into the owner's zeroed f32 accumulator; the final "
               f"f32 -> {odt} conversion stays (correctness first)")
    elif f.pattern is Pattern.MM_ALL_REDUCE:
        how = ("partial tiles put-add into the owner's zeroed f32 accumulator; the owner "
               "converts each reduced tile once" + ("" if isinstance(odt, Float32Type) else
                                                    f" (f32 -> {odt}, kept: correctness first)")
               + " and puts it straight into every rank's symmetric output")
    elif f.pattern is Pattern.ALL_GATHER_MM:
        how = ("peers put their shards straight into the GEMM operand (symmetric), which the "
               "MMAs read as row blocks arrive, with no copy"
               + ("; that operand is the kernel's gathered output" if f.gathered else ""))
    elif f.pattern is Pattern.ALL_GATHER_K_MM:
        how = ("peers put their K shards straight into the GEMM operand (symmetric), whose "
               "K loop reads a shard's row block once it arrived, with no copy"
               + ("; that operand is the kernel's gathered output" if f.gathered else ""))
    else:
        how = ("dispatched tokens land in the expert GEMM's symmetric operand and results in "
               "the source rank's symmetric output")
    return f"buffer-elision: removed staging {gone}: {how}; outputs in symmetric memory"
