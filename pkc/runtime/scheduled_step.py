"""One scheduled ``pk.kernel`` as a step of a prepared program: ``step({rank: operands})
-> {rank: results}`` over a :class:`~pkc.runtime.peers.Peers` world.

The kernel was built by the compiler (schedule-matmul, schedule-collectives,
schedule-fused) and lowered by :func:`pkc.codegen.compile_kernel`; which launcher runs it
follows from its launch metadata (:class:`~pkc.codegen.abi.ScheduledKernelMeta`), not from
a choice made here:

* ``meta.comm``: a collective (:class:`~pkc.runtime.scheduled_comm.ScheduledCollective`);
* ``meta.fused``: a fused GEMM + collective (:class:`~pkc.runtime.scheduled_fused.ScheduledFused`);
* neither: a rank-local kernel (the GEMM), launched per rank on fresh outputs.

Bounded waits that ran out are recorded in the peers' host-mapped mailbox (read without a
CUDA call at the next call, :meth:`~pkc.runtime.peers.Peers.raise_timeouts`): a call does
no host synchronization. ``persistent[i]`` says whether result ``i`` lives in a buffer the
kernel's next launch overwrites (the caller copies it before it leaves the program).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from pkc.codegen.abi import FusedLaunchKind
from pkc.kinds import Kind

Step = Callable[[dict], dict]


class StepKind(Kind):
    """Which launcher a scheduled step runs (for reports)."""

    KERNEL = "kernel"            # a rank-local kernel (the GEMM)
    COLLECTIVE = "collective"    # a scheduled collective
    FUSED = "fused"              # a fused GEMM + collective (or all-gather + GEMM)
    MOE = "moe"                  # the MoE kernel


@dataclass
class ScheduledStep:
    """A runnable scheduled kernel: ``run`` and which of its results are persistent."""

    run: Step
    persistent: list[bool]
    kind: StepKind


def _dtype_name(t) -> str:
    from pkc.interp.values import torch_dtype

    return {torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32",
            # 1-byte data: the scheduled all-gather / all-to-all move it as bytes
            torch.float8_e4m3fn: "f8E4M3FN", torch.float8_e5m2: "f8E5M2"}[
        torch_dtype(t.element_type)]


def scheduled_step(op, peers, target: str, timeout_s: float, ck=None) -> ScheduledStep:
    """The step of scheduled kernel ``op`` (compiled for ``target``, e.g. ``sm_90a``;
    ``ck``: already compiled, e.g. once for every sub-group that launches it)."""
    from pkc.codegen import compile_kernel

    ck = ck or compile_kernel(op, target)
    timeout_ns = int(timeout_s * 1e9)
    if getattr(ck.meta, "comm", None) is not None:
        return _collective(op, ck, peers, timeout_ns)
    fused = getattr(ck.meta, "fused", None)
    if fused is not None and fused.kind is FusedLaunchKind.MOE:
        from pkc.runtime.scheduled_moe import moe_step      # the MoE kernel's launcher
        return moe_step(op, ck, peers, timeout_ns)
    if fused is not None and fused.kind is FusedLaunchKind.AG:
        from pkc.runtime.scheduled_ag import ag_step        # C and the gathered A
        return ag_step(op, ck, peers, timeout_ns)
    if fused is not None:
        return _fused(op, ck, peers, timeout_ns)
    return _local(op, ck, peers)


def _local(op, ck, peers) -> ScheduledStep:
    from pkc.interp.values import torch_dtype
    from pkc.runtime.scheduled import ScheduledKernel

    if op.world_size != 1:
        raise NotImplementedError(
            f"kernel @{op.kernel_name.data}: a scheduled kernel over {op.world_size} ranks "
            "without a communication launch description cannot run")
    kernel = ScheduledKernel(ck.ptx, ck.meta, peers.device)
    outs = [(tuple(r.type.get_shape()), torch_dtype(r.type.element_type)) for r in op.results]

    def run(vals):
        res = {}
        for r, ins in vals.items():
            ys = [torch.empty(shape, dtype=dt, device=peers.device) for shape, dt in outs]
            kernel([t.contiguous() for t in ins] + ys)
            res[r] = ys
        return res
    return ScheduledStep(run, [False] * len(outs), StepKind.KERNEL)


def _collective(op, ck, peers, timeout_ns: int) -> ScheduledStep:
    from pkc.runtime.scheduled_comm import ScheduledCollective

    x, y = op.inputs[0].type, op.results[0].type
    coll = ScheduledCollective(ck.ptx, ck.meta, peers, x.get_shape(), y.get_shape(),
                               _dtype_name(x), timeout_ns=timeout_ns)

    def run(vals):
        outs = coll.run({r: v[0].contiguous() for r, v in vals.items()}, ranks=list(vals))
        return {r: [o] for r, o in outs.items()}
    return ScheduledStep(run, [not coll.fresh_output], StepKind.COLLECTIVE)


def _fused(op, ck, peers, timeout_ns: int) -> ScheduledStep:
    from pkc.runtime.scheduled_fused import ScheduledFused

    fused = ScheduledFused(ck.ptx, ck.meta, peers, owner=id(op), timeout_ns=timeout_ns)
    n_in = len(op.inputs)
    # which results live in the kernel's persistent buffers: the launcher knows (from the
    # metadata); by default all of them (the reduced chunk stays in the symmetric output)
    persistent = list(getattr(fused, "persistent", [True] * len(op.results)))

    def run(vals):
        outs = fused.run(*[{r: v[i].contiguous() for r, v in vals.items()} for i in range(n_in)],
                         ranks=list(vals))
        return {r: outs[r] if isinstance(outs[r], list) else [outs[r]] for r in outs}
    return ScheduledStep(run, persistent, StepKind.FUSED)


__all__ = ["ScheduledStep", "scheduled_step"]
