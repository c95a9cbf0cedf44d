"""schedule-collectives: a lowered collective ``pk.kernel`` -> a scheduled one (schedule level).

Matches every ``pk.kernel`` that lower-collectives wrote (``pk.plan.collective``): an
all_reduce, or an all_gather / reduce_scatter / all_to_all (equal splits) whose chunks
are contiguous (the kernel's 3-d view has one row), of bf16 / f16 / f32 data in whole
16-byte vectors (per chunk); an all_gather / all_to_all of 1-byte data (fp8, u8) too: they
move 16-byte vectors and never read an element (reductions of it stay unscheduled). An
all_gather whose input buffer is already symmetric (a producer kernel left its chunk
there) becomes the pull all-gather (``agp``: every rank pulls the W chunks into a fresh
output; schedule-fused builds one after a fused GEMM + reduce-scatter with
:func:`build_collective`).
Replaces its worker body with a ``pks.schedule`` of communication ops
(:mod:`pkc.passes.comm_schedule`) over a symmetric data buffer, a signal pad and the
rank's epoch control word (``pk.alloc``; the pad and the control word zeroed once and
kept across launches: epochs make them reusable without a reset).

The decisions come from lower-collectives' plan (one-shot / two-shot, direct) and the
tuning table :mod:`pkc.target.comm_tuning` (LL below a size, the two-shot's gather and
CTA groups; for a target with NVLS - b200, nvl72, never h100 / h200 - the multimem
all-reduce ``armc`` and all-gather ``agmc`` above the LL limits): written into ``pk.plan`` (``schedule = "collective"``, ``comm_kind``,
``unroll``, ``cta_vecs``, ``ctas_per_sm``, ``gather``, ``groups``, ``fresh_output``) and a
remark. Kinds not scheduled (rings, non-leading dims, max / min reductions) stay as they
are, and a remark says why.

Why: this is how pkc's collectives are produced from IR: a later pass can change the
body (a signal, an unroll, a push for a pull) and ``--emit=ptx`` prints what runs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from xdsl.dialects.builtin import IntegerType, ModuleOp
from xdsl.ir import Block, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from pkc.dialects import kernel as k
from pkc.dialects import schedule as s
from pkc.dialects.plan import ScheduleKind
from pkc.dialects.types import LOCAL, SYMMETRIC, BufferType
from pkc.passes.comm_schedule import CommBuilder, sym_vecs
from pkc.passes.registry import register_pass
from pkc.passes.remarks import add_remark, plan_of, set_plan
from pkc.target.collectives import Algorithm, Collective
from pkc.target.comm_tuning import (BYTE_TYPES, ESIZE, THREADS, VEC_BYTES, CommConfig,
                                    CommKind, choose, choose_pull_gather)
from pkc.target.targets import get_target

SCHEDULED = (CommKind.LL, CommKind.LLAG, CommKind.LLRS, CommKind.AR1, CommKind.RS, CommKind.AG,
             CommKind.AR2, CommKind.AGP, CommKind.A2A, CommKind.ARMC, CommKind.AGMC)
# a ring gather / scatter runs as the direct kernel (what the ring's steps would move in
# W - 1 hops goes in one; measured on H200s as the hand kernels, which were direct)
ALGORITHMS = {Collective.ALL_REDUCE: (Algorithm.ONE_SHOT, Algorithm.TWO_SHOT),
              Collective.ALL_GATHER: (Algorithm.DIRECT, Algorithm.RING),
              Collective.REDUCE_SCATTER: (Algorithm.DIRECT, Algorithm.RING),
              Collective.ALL_TO_ALL: (Algorithm.DIRECT,)}


def _dtype(t) -> str | None:
    name = str(t.element_type)
    return name if name in ESIZE else None


def why_not(kop: k.KernelOp, force: CommKind | None = None, target: str = "h200") -> str | None:
    """Why a lowered collective kernel cannot be scheduled (None: it can)."""
    plan = plan_of(kop)
    coll = plan.get("collective")
    if coll not in ALGORITHMS:
        return f"no scheduled kernel for {coll}"
    coll = Collective(coll)
    algo = plan.get("algorithm")
    if algo not in ALGORITHMS[coll]:
        return f"{coll} {algo}: only one-shot, two-shot, direct and ring are scheduled"
    # the reduction is in the lowered body (rank-order sums of the slots): only sums are
    # scheduled (a max / min all-reduce keeps its lowered kernel)
    combine = {op.fn.data for op in kop.walk() if isinstance(op, k.TileMapOp)} - {"cast", "add"}
    if combine:
        return f"{coll} reducing with {', '.join(sorted(combine))}: only sums are scheduled"
    if len(kop.inputs) != 1 or len(kop.outputs) != 1:
        return f"{coll} with {len(kop.inputs)} inputs and {len(kop.outputs)} outputs"
    x, y = kop.inputs[0].type, kop.outputs[0].type
    dt = _dtype(x)
    if dt is None or _dtype(y) != dt:
        return (f"element type {x.element_type}: bf16, f16 or f32 (1-byte types, fp8 / u8: "
                "all_gather and all_to_all only)")
    if dt in BYTE_TYPES and coll in (Collective.ALL_REDUCE, Collective.REDUCE_SCATTER):
        # the scheduled kernels add in f32 from 16-bit / 32-bit words; a 1-byte sum has no
        # vec_sum lowering (and an fp8 sum would round at every rank)
        return (f"{coll} of {x.element_type}: reductions of 1-byte element types are not "
                "scheduled (only the data-moving all_gather / all_to_all are)")
    shape = x.get_shape()
    if coll is not Collective.ALL_REDUCE and (len(shape) != 3 or shape[0] != 1):
        return f"{coll} along a non-leading dim (view {list(shape)}): chunks are not contiguous"
    elems = 1
    for d in shape:
        elems *= d
    ve = VEC_BYTES // ESIZE[dt]
    W = kop.world_size
    chunk = elems // W if coll in (Collective.REDUCE_SCATTER, Collective.ALL_TO_ALL) else elems
    if elems % ve or chunk % ve:
        return f"{coll} of {elems} elements: chunks are not whole 16-byte vectors"
    if force is not None and force.multicast and not get_target(target).nvls:
        return (f"kind={force.value} is an NVLS kernel and target {target} has no NVLS "
                "(never chosen for the lent Hopper machines: NVLink multicast stays off)")
    cfg = _config(kop, force, target=target)
    if cfg.kind not in SCHEDULED:
        return f"{cfg.tag()}: not scheduled yet (the portable path runs it)"
    return None


# the kinds a forced ``kind`` option may give each collective (agp: chosen, not forced:
# it needs an input that already lies in symmetric memory)
FORCIBLE = {Collective.ALL_REDUCE: (CommKind.LL, CommKind.AR1, CommKind.AR2, CommKind.ARMC),
            Collective.ALL_GATHER: (CommKind.LLAG, CommKind.AG, CommKind.AGMC),
            Collective.REDUCE_SCATTER: (CommKind.LLRS, CommKind.RS),
            Collective.ALL_TO_ALL: (CommKind.A2A,)}


def _config(kop: k.KernelOp, force: CommKind | None = None, groups: int = 0,
            target: str = "h200") -> CommConfig:
    """The tuning table's choice; an all-gather whose input already lies in symmetric memory
    (the kernel's input buffer is symmetric: a producer left it there) is pulled.
    ``force``: this kind instead (where the collective has it), ``groups``: the two-shot's
    CTA groups instead of the table's (the pass options: tests and experiments). NVLS
    kinds only where ``target`` has NVLS (:attr:`pkc.target.targets.Target.nvls`)."""
    plan = plan_of(kop)
    coll, W = Collective.parse(plan["collective"], "pk.plan.collective"), kop.world_size
    x = kop.inputs[0].type
    dt = _dtype(x)
    elems = 1
    for d in x.get_shape():
        elems *= d
    if coll is Collective.ALL_GATHER and kop.block.args[0].type.symmetric:
        return choose_pull_gather(W, dt, elems)
    nvls = get_target(target).nvls
    cfg = choose(coll, plan["algorithm"], W, dt, elems, nvls=nvls)
    if force is not None and force in FORCIBLE[coll] and force is not cfg.kind:
        base = CommConfig(force, W, dt)
        if force is CommKind.AR2:      # the table's two-shot at any size (its unroll)
            base = choose(coll, Algorithm.TWO_SHOT, W, dt, elems)
        cfg = replace(base, reason=f"kind={force.value} forced (the table: {cfg.kind.value})")
    if cfg.kind.multicast:
        cfg = replace(cfg, reason=cfg.reason + "; " + _nvls_prediction(coll, target, W, elems * ESIZE[dt]))
    if groups and cfg.kind is CommKind.AR2 and groups != cfg.groups:
        cfg = replace(cfg, groups=groups, reason=f"{cfg.reason}; groups={groups} forced")
    return cfg


def _nvls_prediction(coll: Collective, target: str, W: int, in_bytes: int) -> str:
    """The cost model's NVLS time and the kernel it replaces (two-shot all-reduce, direct
    all-gather), both predictions for ``target``."""
    from pkc.target.cost_collectives import all_gather_time, all_reduce_time, nvls_time

    n = in_bytes * W if coll is Collective.ALL_GATHER else in_bytes
    mine = nvls_time(target, coll, n, W)
    other, name = ((all_reduce_time(target, n, W, Algorithm.TWO_SHOT), "two-shot")
                   if coll is Collective.ALL_REDUCE else
                   (all_gather_time(target, n, W, Algorithm.DIRECT), "direct"))
    return f"predicted {mine * 1e6:.1f} us on {target} ({name} {other * 1e6:.1f} us)"


@register_pass
@dataclass(frozen=True)
class ScheduleCollectives(ModulePass):
    """Rewrite lowered collective kernels into scheduled (pks) collective kernels."""

    name = "schedule-collectives"
    target: str = "h200"
    kind: str = ""              # force a CommKind (e.g. ar1) where the collective has it
    groups: int = 0             # force the two-shot's CTA groups (0: the tuning table's)

    def __post_init__(self):
        get_target(self.target)
        if self.kind and self.kind not in {k.value for k in CommKind}:
            raise ValueError(f"schedule-collectives: kind={self.kind} is not one of "
                             f"{', '.join(k.value for k in CommKind)}")
        if not 0 <= self.groups <= 8:
            raise ValueError(f"schedule-collectives: groups={self.groups}: 0 (the table's) .. 8")

    def apply(self, ctx, module: ModuleOp) -> None:
        sms = get_target(self.target).num_sms
        force = CommKind(self.kind) if self.kind else None
        for kop in [o for o in module.walk() if isinstance(o, k.KernelOp)]:
            if "collective" not in plan_of(kop) or kop.schedule() is not None:
                continue
            reason = why_not(kop, force, self.target)
            if reason:
                add_remark(kop, f"collective left unscheduled: {reason}")
                continue
            _schedule(kop, sms, _config(kop, force, self.groups, self.target))


def _schedule(kop: k.KernelOp, sms: int, cfg: CommConfig) -> None:
    plan = plan_of(kop)
    coll = plan["collective"]
    attrs = {key: v for key, v in kop.attributes.items() if key not in ("kernel_name", "world")}
    new = build_collective(f"{coll}_{cfg.kind.value}", cfg, list(kop.inputs),
                           kop.inputs[0].type, kop.outputs[0].type, sms, attrs)
    if plan.get("algorithm") == Algorithm.RING:
        add_remark(new, f"lower-collectives planned a ring {coll}; scheduled as the direct "
                        "kernel (every chunk in one hop, no ring kernel at the schedule level)")
    new.location = kop.location
    Rewriter.replace_op(kop, new)


def build_collective(name: str, cfg: CommConfig, inputs: list[SSAValue], x, y, sms: int,
                     attributes: dict | None = None) -> k.KernelOp:
    """The scheduled collective kernel ``name`` running ``cfg`` on ``inputs`` (one tensor
    of type ``x``) into one ``y``, with its plan and remark; ``sms``: the target's SM count
    (the pads have slots for the grid). Also used by schedule-fused (the pull all-gather
    after a fused GEMM + reduce-scatter)."""
    W = cfg.world
    dt = cfg.dtype
    elems = 1
    for d in x.get_shape():
        elems *= d
    ve = VEC_BYTES // ESIZE[dt]
    nv = elems // ve
    cv = -(-nv // W) if cfg.kind.chunked else nv     # the two-shot's last chunk may be short
    # peers put into the output of ag / a2a; agp pulls from the (symmetric) input
    out_space = SYMMETRIC if cfg.kind in (CommKind.AG, CommKind.A2A, CommKind.ARMC,
                                          CommKind.AGMC) else LOCAL
    in_space = SYMMETRIC if cfg.kind is CommKind.AGP else LOCAL
    block = Block(arg_types=[BufferType(x.get_shape(), x.element_type, in_space),
                             BufferType(y.get_shape(), y.element_type, out_space)])
    src, out = block.args
    i32 = IntegerType(32)
    gmax = cfg.ctas_per_sm * sms
    allocs = []
    sym = {CommKind.AG: out, CommKind.A2A: out, CommKind.AGP: src, CommKind.AGMC: out}.get(cfg.kind)
    if sym is None:
        sym = k.AllocOp(BufferType([sym_vecs(cfg, nv, cv) * ve], x.element_type, SYMMETRIC))
        allocs.append(sym)
        sym = sym.result
    # phases 1, 2: W x G slots each, then G more (CTA-group turns); zeroed once
    pads = k.AllocOp(BufferType([(2 * W + 1) * gmax], i32, SYMMETRIC), zero=True)
    ctl = k.AllocOp(BufferType([2], i32, LOCAL), zero=True)
    for op in (*allocs, pads, ctl):
        block.add_op(op)
    sched = s.ScheduleOp(THREADS)
    block.add_op(sched)
    CommBuilder(sched.block, cfg, nv, cv, src, out, sym, pads.result, ctl.result).build()
    block.add_op(k.YieldOp())
    new = k.KernelOp(name, W, inputs, [y], Region(block), attributes=dict(attributes or {}))
    set_plan(new, schedule=ScheduleKind.COLLECTIVE, comm_kind=cfg.kind.value, unroll=cfg.unroll,
             vecs=nv, chunk_vecs=cv, cta_vecs=cfg.cta_vecs, slice_align=cfg.slice_align,
             shrink_threads=cfg.kind.is_ll, ctas_per_sm=cfg.ctas_per_sm,
             min_ctas_per_sm=cfg.min_ctas_per_sm, max_ctas=gmax, fresh_output=out_space == LOCAL,
             **({"gather": cfg.gather.value, "groups": cfg.groups} if cfg.kind is CommKind.AR2 else {}))
    where = "into a fresh output" if out_space == LOCAL else "result in symmetric memory"
    if cfg.kind is CommKind.AGP:
        where += ", pulled from every rank's symmetric input"
    if cfg.kind.multicast:
        where += ", through NVLS (multimem on multicast objects)"
    add_remark(new, f"scheduled collective {cfg.tag()} ({cfg.reason}): "
               f"{nv} vectors ({cv} per chunk), up to {cfg.cta_vecs} per CTA, "
               f"{cfg.ctas_per_sm} CTA(s) per SM, {where}")
    return new
