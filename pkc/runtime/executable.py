"""A graph-level function prepared once for a world, then run many times.

Preparing walks ``@main`` once: every op becomes a step over per-rank values
(``{rank: [tensors]}``), so a call does no IR work (no printing, no hashing, no lookups by
op type). Steps:

* ``pk.kernel`` built at the schedule level (the ``schedule`` pipeline): the compiler's
  kernel, launched as its launch metadata says (:mod:`pkc.runtime.scheduled_step`) over a
  :class:`~pkc.runtime.peers.Peers` world, with persistent symmetric buffers and
  epoch-counted signals: no allocation, zeroing, host barrier or host synchronization per
  call;
* any other ``pk.kernel``: the portable codegen path (compiled once here), run by a
  :class:`~pkc.runtime.world.VirtualWorld` or :class:`~pkc.runtime.symm.DistributedRunner`;
* a kernel over sub-groups (``group_ranks``, a device mesh's dimension): either of the
  above per group, over that group's peers (:mod:`pkc.runtime.groups`);
* graph-level ops: torch on CUDA tensors with the interpreter's per-op rules (cuBLAS for a
  matmul the overlap pass left alone); collectives outside kernels in a virtual world by
  the interpreter's rules (under torch.distributed they must have been lowered).

A scheduled kernel whose bounded wait expires (a peer that never arrived) writes a record into
the peers' host-mapped mailbox; under torch.distributed it then traps, so the launch fails
and the next synchronization raises instead of returning outputs nobody wrote; the next
call (or :func:`pkc.runtime.peers.describe_timeouts`) names kernel, rank and peer.

Values produced by a scheduled kernel may live in its persistent buffers, which its next
call overwrites; the outputs of :meth:`Executable.run` are therefore copied
(``copy_outputs``), intermediates are not. :attr:`Executable.kernel_report` says, per
kernel, which path it takes and, for the portable path, why (the schedule passes' remark).
No kernel is chosen here: the module says what runs.
"""

from __future__ import annotations

from typing import Callable

import torch
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp

from pkc.dialects.kernel import KernelOp
from pkc.dialects.rank_groups import rank_groups
from pkc.runtime.world import DEFAULT_TIMEOUT_S

Step = Callable[[dict], dict]


class Executable:
    """``@func_name`` of ``module`` prepared for ``peers`` (the ranks this process drives)
    with ``general`` (VirtualWorld or DistributedRunner) for kernels that are not scheduled."""

    def __init__(self, module: ModuleOp, peers, general, *, target: str, func_name: str = "main",
                 timeout_s: float = DEFAULT_TIMEOUT_S,
                 copy_outputs: bool = True, distributed: bool = False, bulk: bool | None = None):
        from pkc.interp.graph import find_function

        self.peers, self.general, self.target = peers, general, target
        self.timeout_s, self.copy_outputs, self.distributed = timeout_s, copy_outputs, distributed
        self.profile: dict | None = None   # {step: [event pairs]} while profiling
        self.bulk = bulk
        self.kernel_report: list[str] = []
        fn = find_function(module, func_name)
        block = fn.body.blocks[0]
        self.args = list(block.args)
        self.steps: list[tuple[list, list, Step]] = []
        self.step_names: list[tuple] = []
        self.aliased: set = set()          # values that may live in persistent buffers
        self.arg_views: set = set()        # reshapes (views) of the function's arguments
        self.returns: list = []
        self.nresults = 0
        for op in block.ops:
            if isinstance(op, func.ReturnOp):
                self.returns = list(op.arguments)
                break
            self.steps.append((list(op.operands), list(op.results), self._step(op)))
            self.nresults += len(op.results)
            label = op.kernel_name.data if isinstance(op, KernelOp) else op.name
            self.step_names.append((op, len(self.steps) - 1, label))
            if not isinstance(op, KernelOp) and any(v in self.aliased for v in op.operands):
                self.aliased.update(op.results)     # a view of a persistent buffer
            from pkc.dialects import graph as g
            if isinstance(op, g.ReshapeOp) and (op.operands[0] in self.args or
                                                op.operands[0] in self.arg_views):
                self.arg_views.update(op.results)   # a view of the caller's input
        else:
            raise ValueError(f"function @{func_name} has no func.return")
        self._index_values()

    def _index_values(self) -> None:
        """SSA values -> slots of a per-call list (hashing xDSL values on every call was
        half of the host time of a small program)."""
        slot = {v: i for i, v in enumerate(self.args)}
        for _, results, _ in self.steps:
            for v in results:
                slot[v] = len(slot)
        self.nslots = len(slot)
        self.plan = [([slot[v] for v in operands], [slot[v] for v in results], step)
                     for operands, results, step in self.steps]
        copy = self.arg_views | (self.aliased if self.copy_outputs else set())
        self.out_plan = [(slot[v], v in copy) for v in self.returns]
        self.out_plan_nocopy = [(slot[v], v in self.arg_views) for v in self.returns]

    # ---- preparing -----------------------------------------------------------------
    def _step(self, op) -> Step:
        from pkc.dialects import graph as g
        from pkc.interp.graph import LOCAL_RULES, WORLD_RULES, run_opaque

        dev = self.peers.device
        if isinstance(op, KernelOp):
            groups = rank_groups(op)
            return self._kernel_step(op) if groups is None else self._group_step(op, groups)
        if isinstance(op, g.COLLECTIVE_OPS):
            if self.distributed:
                raise NotImplementedError(
                    f"'{op.name}' outside a pk.kernel under torch.distributed: run a pipeline "
                    f"with lower-collectives")
            rule, W = WORLD_RULES[type(op)], self.peers.world
            return lambda vals: {r: [o] for r, o in enumerate(rule(op, [vals[q][0] for q in range(W)], W))}
        if isinstance(op, g.OpaqueOp):
            return lambda vals: {r: [t.to(dev) for t in run_opaque(op, v)] for r, v in vals.items()}
        if isinstance(op, g.MatmulOp):
            return _gpu_matmul(op)
        if isinstance(op, g.ReshapeOp):
            # a view, not the interpreter's copy: lowered collectives sit between two of
            # these, and a copy of the whole tensor on each side costs more than the
            # collective at small sizes (the Executable never writes into a value in place)
            shape = tuple(op.results[0].type.get_shape())
            return lambda vals: {r: [v[0].reshape(shape)] for r, v in vals.items()}
        if type(op) in LOCAL_RULES:  # .to(dev): pk.constant makes its tensor on the CPU
            rule = LOCAL_RULES[type(op)]
            return lambda vals: {r: [rule(op, *v).to(dev)] for r, v in vals.items()}
        raise NotImplementedError(f"'{op.name}' cannot run at graph level on the GPU")

    def _kernel_step(self, op: KernelOp, peers=None, general=None, ck=None,
                     report: str = "") -> Step:
        """``op`` over ``peers`` / ``general`` (default: the program's; a sub-group's for a
        kernel with ``group_ranks``, see :meth:`_group_step`); ``ck``: already compiled."""
        peers = peers or self.peers
        general = general or self.general
        name = op.kernel_name.data
        if op.schedule() is not None:
            self.kernel_report.append(f"@{name}: scheduled kernel (built from schedule-level IR)"
                                      + report)
            return self._scheduled_step(op, peers, ck)
        from pkc.passes.pipelines import unscheduled_reason

        self.kernel_report.append(f"@{name}: portable path ({unscheduled_reason(op)})" + report)
        from pkc.runtime.execute import compiled

        ck = compiled(op, self.target, self.bulk)
        if self.distributed:
            return lambda vals: {r: general.run(ck, v, self.timeout_s) for r, v in vals.items()}
        W = peers.world

        def run_virtual(vals):
            outs = general.run(ck, [vals[r] for r in range(W)], self.timeout_s)
            return dict(enumerate(outs))
        return run_virtual

    def _scheduled_step(self, op: KernelOp, peers=None, ck=None) -> Step:
        """A kernel the compiler scheduled: its PTX and launch metadata, run by the launcher
        the metadata names (:mod:`pkc.runtime.scheduled_step`); nothing is chosen here."""
        from pkc.runtime.scheduled_step import scheduled_step

        peers = peers or self.peers
        step = (scheduled_step(op, peers, self.target, self.timeout_s) if ck is None else
                scheduled_step(op, peers, self.target, self.timeout_s, ck=ck))
        self.aliased.update(v for v, keep in zip(op.results, step.persistent) if keep)
        return step.run

    def _group_step(self, op: KernelOp, groups: list[list[int]]) -> Step:
        """A kernel over sub-groups (:mod:`pkc.runtime.groups`): compiled once for one
        group, launched per group over that group's peers (its symmetric buffers, signal
        pads and epochs), program rank ``members[j]`` being the kernel's rank ``j``. In a
        virtual world every group runs; under torch.distributed this rank's group."""
        from pkc.runtime import groups as G

        ck = None
        if op.schedule() is not None:
            from pkc.codegen import compile_kernel

            ck = compile_kernel(op, self.target)   # once for every group
        note = f" in {len(groups)} groups of {len(groups[0])} ranks {groups}"
        if self.distributed:
            runner, members, _ = G.distributed_group(op, groups, self.peers.device)
            return G.grouped_step([(members, self._kernel_step(op, runner.peers, runner, ck,
                                                               note))])
        if self.peers.world != len(groups) * len(groups[0]):
            raise ValueError(f"'{op.name}' @{op.kernel_name.data} runs in {len(groups)} groups "
                             f"of {len(groups[0])} ranks {groups}, but the world has "
                             f"{self.peers.world} ranks")
        parts, first = [], len(self.kernel_report)
        for members in groups:
            peers = G.group_peers(self.peers, members)
            parts.append((members, self._kernel_step(op, peers, G.world_view(self.general, members),
                                                     ck, note)))
        del self.kernel_report[first + 1:]          # one line per kernel, not per group
        return G.grouped_step(parts)

    # ---- running -------------------------------------------------------------------
    def run(self, inputs: dict) -> dict:
        """``inputs[rank]``: that rank's arguments of the function (every driven rank).
        Returns ``{rank: [results]}`` as CUDA tensors."""
        dev = self.peers.device
        ranks = self.peers.ranks
        self.peers.raise_timeouts()       # a scheduled kernel of an earlier call reported one
        env: list = [None] * self.nslots
        for i in range(len(self.args)):
            env[i] = {r: inputs[r][i].to(dev) for r in ranks}
        prof = self.profile
        for k, (operands, results, step) in enumerate(self.plan):
            vals = {r: [env[i][r] for i in operands] for r in ranks}
            if prof is not None:
                ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
                ev[0].record()
            outs = step(vals)
            if prof is not None:
                ev[1].record()
                prof.setdefault(k, []).append(ev)
            for j, i in enumerate(results):
                env[i] = {r: outs[r][j] for r in ranks}
        plan = self.out_plan if self.copy_outputs else self.out_plan_nocopy
        return {r: [env[i][r].clone() if copy else env[i][r] for i, copy in plan] for r in ranks}


def _gpu_matmul(op) -> Step:
    """A matmul the overlap pass left alone: cuBLAS in the operands' 16-bit type (f32
    accumulation, one rounding: the graph's semantics up to summation order), not the
    interpreter's f32 upcast, which runs at a tenth of the tensor-core rate."""
    from pkc.interp.graph import LOCAL_RULES
    from pkc.dialects import graph as g

    from pkc.interp.values import torch_dtype

    rule = LOCAL_RULES[g.MatmulOp]
    out_dt = torch_dtype(op.results[0].type.element_type)

    def run(vals):
        out = {}
        for r, (a, b) in vals.items():
            native = a.dtype == b.dtype == out_dt and out_dt in (torch.bfloat16, torch.float16)
            out[r] = [torch.matmul(a, b) if native else rule(op, a, b)]
        return out
    return run


def step_times(ex: Executable, calls) -> list[tuple[str, float]]:
    """(step name, median ms) of each step over ``calls()`` (run a few calls of the
    program), timed with CUDA events around each step on torch's stream: where a
    compiled program's time goes."""
    import statistics

    ex.profile = {}
    try:
        calls()
        torch.cuda.synchronize()
        names = [name for _, _, name in ex.step_names]
        return [(names[k], statistics.median(a.elapsed_time(b) for a, b in evs))
                for k, evs in sorted(ex.profile.items())]
    finally:
        ex.profile = None


_CACHE: dict = {}


def executable_for(module: ModuleOp, key: tuple, make: Callable[[], Executable]) -> Executable:
    """One Executable per (module, world, options): calls after the first do no IR work.
    The module is kept in the entry, so its id cannot be reused while cached."""
    k = (id(module),) + key
    hit = _CACHE.get(k)
    if hit is None:
        hit = _CACHE[k] = (module, make())
    return hit[1]
