"""Runs a module's function with every ``pk.kernel`` both in the emulator (compiled for a
target) and in the reference interpreter, on the same inputs, and compares each kernel's
outputs: what ``python -m pkc.emu`` does.

The function runs as :func:`pkc.interp.graph.run_function` runs it (graph-level ops by
the interpreter's rules); at each kernel, its operands go to both, the emulator's outputs
are compared with the interpreter's and the interpreter's go on, so that the first
difference is reported at the kernel that made it.

Comparison: integers and booleans bitwise; floats bitwise, else within a tolerance per
element type (``TOLERANCE``) because the interpreter and the kernel may sum in different
orders (a tile's K loop, the ranks' partials of a reduction) and the interpreter upcasts
(``exact=True`` asks for bitwise equality). NaN matches NaN.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp

from pkc.codegen.emit import compile_kernel
from pkc.dialects import graph as g
from pkc.dialects.kernel import KernelOp

# (rtol, atol) per element type when outputs are not bitwise equal.
TOLERANCE = {torch.float32: (1e-5, 1e-5), torch.float64: (1e-12, 1e-12),
             torch.bfloat16: (1.6e-2, 1e-2), torch.float16: (2e-3, 1e-3)}


@dataclass
class Difference:
    kernel: str
    output: int
    rank: int
    index: tuple
    emulated: float
    reference: float
    count: int

    def __str__(self) -> str:
        return (f"kernel @{self.kernel}: output {self.output} of rank {self.rank} differs at "
                f"index {list(self.index)}: emulator {self.emulated!r}, interpreter "
                f"{self.reference!r} ({self.count} element(s) differ)")


@dataclass
class KernelReport:
    kernel: str
    world: int
    seconds: float
    exact: bool
    max_abs: float


@dataclass
class Result:
    kernels: list[KernelReport] = field(default_factory=list)
    difference: Difference | None = None
    outputs: list[list[torch.Tensor]] | None = None   # per rank, when every kernel matched

    @property
    def ok(self) -> bool:
        return self.difference is None


def compare(kernel: str, i: int, rank: int, emu: torch.Tensor, ref: torch.Tensor,
            exact: bool, tolerance: dict | None = None) -> tuple[Difference | None, bool, float]:
    """(first difference or None, bitwise equal, max abs difference)."""
    if emu.shape != ref.shape or emu.dtype != ref.dtype:
        return (Difference(kernel, i, rank, (), f"{tuple(emu.shape)} {emu.dtype}",
                           f"{tuple(ref.shape)} {ref.dtype}", -1), False, float("inf"))
    if not emu.dtype.is_floating_point:
        bad = emu != ref
        same = not bool(bad.any())
        if same:
            return None, True, 0.0
        return _first(kernel, i, rank, emu, ref, bad), False, float("inf")
    e, r = emu.double(), ref.double()
    nan_e, nan_r = torch.isnan(e), torch.isnan(r)
    equal = (e == r) | (nan_e & nan_r)
    ints = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[emu.element_size()]
    same_bits = emu.contiguous().view(ints) == ref.contiguous().view(ints)
    bitwise = bool((same_bits | (nan_e & nan_r)).all())
    diff = torch.where(equal, torch.zeros_like(e), (e - r).abs())
    max_abs = float(diff.max()) if diff.numel() else 0.0
    if bitwise:
        return None, True, 0.0
    if exact:
        return _first(kernel, i, rank, emu, ref, ~equal), False, max_abs
    rtol, atol = (tolerance or TOLERANCE).get(emu.dtype, (1e-5, 1e-5))
    close = equal | ((e - r).abs() <= atol + rtol * r.abs())
    if bool(close.all()):
        return None, False, max_abs
    return _first(kernel, i, rank, emu, ref, ~close), False, max_abs


def _first(kernel, i, rank, emu, ref, bad) -> Difference:
    pos = bad.nonzero()[0].tolist() if bad.dim() else []
    idx = tuple(pos)
    return Difference(kernel, i, rank, idx, emu[idx].item(), ref[idx].item(), int(bad.sum()))


def check_module(module: ModuleOp, inputs: list[list[torch.Tensor]], world: int, *,
                 target: str = "sm_90a", func_name: str = "main", exact: bool = False,
                 sms: int | None = None, check_races: bool = True, seed: int = 0,
                 log=None, tolerance: dict | None = None, forward_emulated: bool = False) -> Result:
    """Runs ``@func_name``; see the module docstring. ``log(line)`` gets a line per kernel.
    ``tolerance``: (rtol, atol) per dtype instead of ``TOLERANCE``; ``forward_emulated``:
    the emulator's outputs (not the interpreter's) go on to the next ops, so
    ``Result.outputs`` (the function's results per rank) is what the kernels computed."""
    from pkc.emu.launch import DEFAULT_SMS, emulate
    from pkc.interp.graph import LOCAL_RULES, WORLD_RULES, find_function, run_opaque
    from pkc.interp.kernel import run_kernel
    from pkc.interp.values import InterpError, where
    from pkc.dialects.rank_groups import rank_groups

    fn = find_function(module, func_name)
    env: dict = {}
    for i, arg in enumerate(fn.body.blocks[0].args):
        env[arg] = [inputs[r][i] for r in range(world)]
    result = Result()
    for op in fn.body.blocks[0].ops:
        if isinstance(op, func.ReturnOp):
            result.outputs = [[env[v][r] for v in op.arguments] for r in range(world)]
            return result
        operands = [env[v] for v in op.operands]
        if isinstance(op, KernelOp):
            ref = run_kernel(op, operands, world, seed)
            ck = compile_kernel(op, target)
            # a kernel over sub-groups is one group's kernel: emulated once per group, the
            # group's members as its ranks 0 .. size-1 (pkc/dialects/rank_groups.py)
            groups = rank_groups(op) or [list(range(world))]
            size = len(groups[0])
            if getattr(ck.meta, "world", size) != size or len(groups) * size != world:
                raise InterpError(f"{where(op)} is compiled for {ck.meta.world} ranks"
                                  + (f" in groups {groups}" if len(groups) > 1 else "")
                                  + f", the check runs {world}")
            t0 = time.perf_counter()
            emu: list = [None] * world
            for grp in groups:
                outs = emulate(ck, [[o[r] for o in operands] for r in grp],
                               sms=sms or DEFAULT_SMS, check_races=check_races, kop=op)
                for j, r in enumerate(grp):
                    emu[r] = outs[j]
            secs = time.perf_counter() - t0
            all_exact, worst = True, 0.0
            for j, per_rank in enumerate(ref):
                for r in range(world):
                    d, same, mx = compare(ck.name, j, r, emu[r][j], per_rank[r], exact, tolerance)
                    all_exact &= same
                    worst = max(worst, mx)
                    if d is not None:
                        result.difference = d
                        return result
            rep = KernelReport(ck.name, world, secs, all_exact, worst)
            result.kernels.append(rep)
            if log:
                how = "bitwise" if all_exact else f"within tolerance (max abs diff {worst:.3g})"
                log(f"ok   @{ck.name}: {world} rank(s), {target}, {secs:.2f} s, {how}")
            outs = ([[emu[r][j] for r in range(world)] for j in range(len(ref))]
                    if forward_emulated else ref)
        elif isinstance(op, g.COLLECTIVE_OPS):
            outs = [WORLD_RULES[type(op)](op, operands[0], world)]
        elif isinstance(op, g.OpaqueOp):
            per = [run_opaque(op, [o[r] for o in operands]) for r in range(world)]
            outs = [[per[r][i] for r in range(world)] for i in range(len(op.outputs))]
        elif type(op) in LOCAL_RULES:
            outs = [[LOCAL_RULES[type(op)](op, *[o[r] for o in operands]) for r in range(world)]]
        else:
            raise InterpError(f"{where(op)} cannot be run at graph level")
        for res, val in zip(op.results, outs):
            env[res] = val
    return result


def world_of(module: ModuleOp) -> int | None:
    """The number of ranks the module's collectives or kernels are written for (over
    sub-groups: all groups' ranks, the program's)."""
    from pkc.dialects.rank_groups import program_world

    for op in module.walk():
        if isinstance(op, (KernelOp, *g.COLLECTIVE_OPS)):
            return program_world(op, op.world_size)
    return None
