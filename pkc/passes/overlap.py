"""overlap: fuse a GEMM with the collective that feeds it or consumes it into one pk.kernel.

What it matches (graph-level ``func.func`` bodies, one block):

* ``pk.matmul -> pk.reduce_scatter`` (2-d matmul, ``sum``; the matmul result has no other
  user), along any dim: of the 2-d product (rows or columns), or of its 3-d (n-d) view
  that splits the rows (a linear layer on [B, S, H]): dim 1 of [B, S, N] owns a block of
  S/W rows in each of the B row blocks (DTensor sequence parallelism, ``Shard(1)``), the
  last dim owns columns;
* ``pk.matmul -> pk.all_reduce`` (2-d, or its n-d view, ``sum``, no other user);
* ``pk.all_gather`` (dim 0, 2-d) feeding one or several ``pk.matmul`` as their lhs. All
  such consumers whose rhs is defined before the gather's first user go into one kernel;
  when the gathered tensor has any other user (another op, a matmul taking it as rhs, a
  consumer left out, the function's return), the kernel also returns it;
* MoE, ``pk.all_to_all -> (grouped) pk.matmul -> pk.all_to_all``, in three spellings, with
  W ranks, E local experts, C token rows per (expert, rank):
  (a) 3-d: ``x: [W*E, C, K] -all_to_all(split 0, concat 1)-> [E, W*C, K]``,
      ``matmul(., w: [E, K, N]) -> [E, W*C, N] -all_to_all(split 1, concat 0)-> [W*E, C, N]``;
  (b) 2-d, one expert per rank: ``all_to_all(0, 0)`` of ``[W*C, K]``, ``matmul`` with
      ``[K, N]``, ``all_to_all(0, 0)`` back (what ``all_to_all_single`` imports to);
  (c) the torch idiom around ``all_to_all_single``: ``[W*E*C, K] -a2a(0,0)-> reshape
      [W, E, C, K] -> transpose [1,0,2,3] -> reshape [E, W*C, K] -> bmm [E, K, N] -> reshape
      [E, W, C, N] -> transpose [1,0,2,3] -> reshape [W*E*C, N] -a2a(0,0)->``.
  Every value between the two all_to_alls must have that one user. The kernel works on
  2-d row views (``pk.reshape`` around it, free at graph level): X ``[W*E*C, K]``,
  weights ``[E*K, N]``, result ``[W*E*C, N]``.

What it produces: one ``pk.kernel`` per match (``matmul_reduce_scatter``,
``matmul_all_reduce``, ``all_gather_matmul``, ``all_to_all_matmul_all_to_all``) in the
*staged* form described in patterns.py: tiles travel as soon as they are produced, in
rank-rotated order (chunk ``(r + i) mod W`` at step i), consumers start on local data,
and produced tiles go through ``pk.alloc {staging}`` buffers (buffer-elision removes
them). Inter-SM overlap gives the kernel a "compute" and a "communicate" worker; intra-SM
overlap is a single "compute" worker that also puts its tiles (see patterns.py). Worker
``sms`` stay unset (sm-partition sets them from ``pk.plan``'s ``comm_sms``).

Why / when: the decision is ``pkc.target.plan_fusion`` with the real shapes, world size and
element size. Where it says fusion does not pay, the IR is left alone and the collective
gets the plan's remark ("left unfused: ...") and ``pk.plan``; a match that cannot be fused
for a structural reason (``max`` reduction, f64 operands, ...) gets a remark saying so, as
does a reduction fed by a matmul through elementwise ops (a bias add) and an MoE combine
after an activation. An fp8 ``pk.scaled_matmul`` is fused only under ``force`` where the
target's architecture has no scheduled fp8 fused kernel of that kind and form
(``pipelines.unscheduled_fp8``; sm_90a: GEMM + reduce-scatter of row chunks): the plan
assumes a fast kernel, the portable one is far slower than cuBLASLt.
A fused kernel gets ``pk.plan`` (pattern, overlap, comm_sms, fused_time, unfused_time in
seconds, forced, target, tiles) and the plan's remark. Options: ``target``; ``force``
fuses whatever the cost model says (tests use it on small shapes); ``overlap`` forces
"intra" or "inter" instead of the plan's choice; ``tile`` / ``tile-k`` set the output
tile edge (default 128) and the contraction step (default 64), capped by the shape.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from xdsl.dialects import func
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    ModuleOp,
    TensorType,
)
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from pkc.dialects import graph as g
from pkc.dialects.common import int_list
from pkc.dialects.graph_scaled import ScaledMatmulOp
from pkc.dialects.types import is_fp8, shape_str
from pkc.dialects.rank_groups import copy_groups, group_remark, same_groups
from pkc.passes.patterns import Fusion, build_kernel
from pkc.passes.patterns_bias import bias_view, split_bias
from pkc.passes.pipelines import unscheduled_fp8
from pkc.passes.fused_fp8 import ag_problem as fp8_ag_problem
from pkc.passes.fused_fp8 import shape_problem as fp8_shape_problem
from pkc.passes.registry import register_pass
from pkc.passes.remarks import add_remark, remarks_of, set_plan
from pkc.target import PATTERNS, FusionPlan, get_target, plan_fusion
from pkc.target.cost import OverlapStyle, Pattern

_OPERAND_TYPES = (BFloat16Type, Float16Type, Float32Type)


@dataclass
class Match:
    """One instance of a pattern, ready to be replaced by a kernel."""

    pattern: Pattern
    anchor: Operation  # the collective: remarks go here when it stays unfused
    world: int
    inputs: list[SSAValue]  # kernel operands (before the 2-d views)
    views: list[TensorType | None]  # reshape operand i to this type first (None: as is)
    replaced: list[SSAValue]  # graph values the kernel's results replace, in order
    result_types: list[TensorType]  # the kernel's result types
    shapes: tuple  # for plan_fusion
    dead: list[Operation] = field(default_factory=list)  # erased afterwards, users first
    insert_before: Operation | None = None  # default: the anchor
    experts: int = 1
    capacity: int = 0
    gathered: bool = False
    scatter_dim: int = 0  # reduce-scatter: rows (0) or columns (1) of the 2-d product
    batches: int = 1  # reduce-scatter of rows: blocks of rows each scattered (3-d results)
    scaled: bool = False  # fp8 pk.scaled_matmul(s): inputs carry the scales (patterns_scaled)
    bias: bool = False  # reduce-scatter: the last input is the bias added before the sum
    problem: str | None = None  # why it cannot be fused, if it cannot


@register_pass
@dataclass(frozen=True)
class Overlap(ModulePass):
    """Fuse GEMMs with reduce-scatter / all-reduce / all-gather / MoE all-to-all into kernels."""

    name = "overlap"
    target: str = "h200"
    force: bool = False
    overlap: str = "auto"
    tile: int = 128
    tile_k: int = 64

    def __post_init__(self):
        get_target(self.target)  # ValueError naming the known targets
        if self.overlap != "auto" and self.overlap not in (OverlapStyle.INTRA, OverlapStyle.INTER):
            raise ValueError(f"overlap must be auto, intra or inter, got {self.overlap!r}")
        if self.tile < 1 or self.tile_k < 1:
            raise ValueError(f"tile sizes must be positive, got {self.tile}, {self.tile_k}")

    def apply(self, ctx, op: ModuleOp) -> None:
        for fn in [o for o in op.walk() if isinstance(o, func.FuncOp)]:
            if not fn.body.blocks:
                continue
            for candidate in list(fn.body.blocks[0].ops):
                if candidate.parent is None:  # erased by an earlier rewrite
                    continue
                m = match(candidate)
                if m is not None:
                    self._rewrite(m)
                elif isinstance(candidate, g.AllToAllOp):
                    why = moe_near_miss(candidate)
                    if why is not None:
                        _remark_once(candidate, f"left unfused: "
                                     f"{PATTERNS[Pattern.MOE]}: {why}")
                elif isinstance(candidate, g.AllGatherOp):
                    why = gather_near_miss(candidate)
                    if why is not None:
                        name = PATTERNS[Pattern.ALL_GATHER_MM]
                        _remark_once(candidate, f"left unfused: {name}: {why}")
                elif isinstance(candidate, (g.ReduceScatterOp, g.AllReduceOp)):
                    why = reduction_near_miss(candidate)
                    if why is not None:
                        pattern = Pattern.MM_REDUCE_SCATTER if isinstance(
                            candidate, g.ReduceScatterOp) else Pattern.MM_ALL_REDUCE
                        _remark_once(candidate, f"left unfused: {PATTERNS[pattern]}: {why}")

    def _rewrite(self, m: Match) -> None:
        if m.problem is not None:
            _remark_once(m.anchor, f"left unfused: {PATTERNS[m.pattern]}: {m.problem}")
            return
        dtype = _element_bytes(m.inputs[0].type.element_type)
        try:
            plan = plan_fusion(self.target, m.pattern, m.shapes, m.world, dtype)
        except ValueError as err:  # e.g. more ranks than the target's NVLink domain
            _remark_once(m.anchor, f"left unfused: {PATTERNS[m.pattern]}: cost model: {err}")
            return
        if not (plan.fuse or self.force):
            _remark_once(m.anchor, plan.remark())
            set_plan(m.anchor, **_plan_values(plan, plan.overlap, plan.comm_sms, False,
                                              self.target))
            return
        # the plan assumes a fast fused kernel; fp8 has none scheduled yet (pipelines.py)
        if m.scaled and not self.force and (why := unscheduled_fp8(
                self.target, m.pattern, _fp8_problem(m))):
            _remark_once(m.anchor, f"left unfused: {PATTERNS[m.pattern]}: {why}")
            return
        style, comm_sms = self._style(plan)
        fusion = Fusion(m.pattern, style, self.tile, self.tile, self.tile_k, m.experts,
                        m.capacity, m.gathered, m.scatter_dim, m.batches, scaled=m.scaled,
                        bias=m.bias)
        kernel = _replace(m, fusion)
        set_plan(kernel, **_plan_values(plan, style, comm_sms, not plan.fuse, self.target),
                 tile_m=self.tile, tile_n=self.tile, tile_k=self.tile_k)
        for line in self._remarks(plan, style, comm_sms):
            add_remark(kernel, line)
        if m.scaled:
            add_remark(kernel, _scaled_remark(m))
        if (note := group_remark(kernel)) is not None:
            add_remark(kernel, note)

    def _style(self, plan: FusionPlan) -> tuple[OverlapStyle, int]:
        """(overlap style, comm SMs): the plan's, or the best of the forced style."""
        forced = None if self.overlap == "auto" else OverlapStyle(self.overlap)
        if forced is None or forced is plan.overlap:
            return plan.overlap, plan.comm_sms
        if forced is OverlapStyle.INTRA:
            return OverlapStyle.INTRA, 0
        inter = {k: v for k, v in plan.alternatives.items() if k.startswith("inter:")}
        best = min(inter, key=lambda k: (inter[k], int(k.split(":")[1])))
        return OverlapStyle.INTER, int(best.split(":")[1])

    def _remarks(self, plan: FusionPlan, style: OverlapStyle, comm_sms: int) -> list[str]:
        name = PATTERNS[plan.pattern]
        lines = [plan.remark()]
        if not plan.fuse:
            lines = [f"fused {name} (force=true overrides the cost model, which says: "
                     f"{plan.remark()})"]
        if style != plan.overlap:
            how = "intra-SM" if style is OverlapStyle.INTRA else f"inter-SM, {comm_sms} comm SMs"
            lines.append(f"overlap forced to {how} (overlap={self.overlap})")
        return lines


def _remark_once(op: Operation, text: str) -> None:
    if text not in remarks_of(op):
        add_remark(op, text)


def _plan_values(plan: FusionPlan, style: OverlapStyle, comm_sms: int, forced: bool,
                 target: str) -> dict:
    fused = plan.alternatives.get(style if style is OverlapStyle.INTRA else f"inter:{comm_sms}",
                                  plan.fused_time)
    sh = plan.shapes  # what the prediction was made from, so it can be redrawn (trace)
    return dict(pattern=plan.pattern, fuse=plan.fuse, overlap=style, comm_sms=comm_sms,
                fused_time=fused, unfused_time=plan.unfused_time, forced=forced, target=target,
                M=sh.M, N=",".join(str(n) for n in sh.N), K=sh.K, groups=sh.groups, W=plan.W,
                dtype_bytes=plan.dtype_bytes)


def _fp8_problem(m: Match) -> str | None:
    """Why the fp8 fusion ``m`` would have no scheduled kernel although its kind has one
    (pkc/passes/fused_fp8.py: row chunks, no bias, one weight and tensor-wise scales for
    an all-gather, bf16 / f16, N and K multiples of 16)."""
    if m.pattern is Pattern.ALL_GATHER_MM:
        if len(m.inputs) != 4:
            return "several matmuls of one gather"
        x, sx, b, sb = (v or i.type for v, i in zip(m.views[:4] + [None] * 4, m.inputs))
        return fp8_ag_problem(m.world, x, sx, b, sb, m.result_types)
    if m.pattern is not Pattern.MM_REDUCE_SCATTER:
        return None
    if m.scatter_dim != 0 or m.batches != 1 or m.bias:
        return "scatters columns or blocks of rows, or adds a bias"
    a, b = (v or x.type for v, x in zip(m.views[:2], m.inputs[:2]))
    return fp8_shape_problem(m.world, a, b, m.result_types[0])


def _element_bytes(t) -> int:
    return 4 if isinstance(t, Float32Type) else 1 if is_fp8(t) else 2


def _scaled_remark(m: Match) -> str:
    """Names the fp8 fusion and where its scales go (inputs: see patterns_scaled.py)."""
    ag = m.pattern is Pattern.ALL_GATHER_MM
    sa, sb = (m.inputs[1], m.inputs[-1]) if ag else (m.inputs[2], m.inputs[3])
    kinds = ["row-wise" if len(_shape(s)) == 2 else "tensor-wise" for s in (sa, sb)]
    if ag and kinds[0] == "row-wise":
        how = "A's row-wise scale is gathered with A by the same kernel"
    else:
        how = "each f32 product tile is scaled before it " + ("is stored" if ag else "travels")
    a = m.inputs[0].type
    return (f"fp8 scaled matmul ({shape_str(a.get_shape())}x{a.element_type} A, {kinds[0]} "
            f"A scale, {kinds[1]} B scale): {how}")


# ----------------------------------------------------------------------------------------
# Rewriting a match.


def _replace(m: Match, fusion: Fusion) -> Operation:
    """Builds the kernel (with its 2-d views), replaces the matched values, erases the
    matched ops; returns the kernel."""
    views = [g.ReshapeOp(v, t) if t is not None else None for v, t in zip(m.inputs, m.views)]
    for op, v in zip(views, m.inputs):
        if op is not None:
            op.result.name_hint = _view_name(v)
    operands = [op.result if op is not None else v for op, v in zip(views, m.inputs)]
    kernel = build_kernel(fusion, m.world, operands, m.result_types, elide=False)
    copy_groups(m.anchor, kernel)  # a sub-group collective's kernel runs in each group
    new_ops: list[Operation] = [op for op in views if op is not None] + [kernel]
    results: list[SSAValue] = []
    for value, res in zip(m.replaced, kernel.results):
        if value.type != res.type:
            res.name_hint = _view_name(value)
            reshape = g.ReshapeOp(res, value.type)
            new_ops.append(reshape)
            res = reshape.result
        res.name_hint = value.name_hint
        results.append(res)
    for op in new_ops:  # diagnostics and remarks point at the user's collective
        op.location = m.anchor.location
    Rewriter.insert_op(new_ops, InsertPoint.before(m.insert_before or m.anchor))
    for value, res in zip(m.replaced, results):
        value.replace_all_uses_with(res)
    for op in m.dead:
        Rewriter.erase_op(op)
    return kernel


def _view_name(v: SSAValue) -> str | None:
    return None if v.name_hint is None else f"{v.name_hint}_rows"


# ----------------------------------------------------------------------------------------
# Matching.


def match(op: Operation) -> Match | None:
    if isinstance(op, g.ReduceScatterOp):
        return _match_reduction(op, Pattern.MM_REDUCE_SCATTER)
    if isinstance(op, g.AllReduceOp):
        return _match_reduction(op, Pattern.MM_ALL_REDUCE)
    if isinstance(op, g.AllGatherOp):
        return _match_all_gather(op)
    if isinstance(op, g.AllToAllOp):
        return _match_moe(op)
    return None


def _shape(v: SSAValue) -> tuple[int, ...]:
    return tuple(v.type.get_shape())


def _owner(v: SSAValue, kind: type) -> Operation | None:
    op = v.owner
    return op if isinstance(op, kind) else None


def _single_use(v: SSAValue) -> bool:
    return v.has_one_use()


def _operand_problem(*mms: g.MatmulOp | ScaledMatmulOp) -> str | None:
    """Why the kernel's f32-accumulating MMAs cannot reproduce these matmuls, if so."""
    for mm in mms:
        t, r = mm.lhs.type.element_type, mm.result.type.element_type
        if isinstance(mm, ScaledMatmulOp):
            if mm.bias is not None:
                return ("a scaled matmul with a bias (the fused kernel adds no bias; add it "
                        "after the collective, once)")
            t = r  # fp8 operands: the MMAs take them; the result type decides
        if not isinstance(t, _OPERAND_TYPES):
            return (f"operands of {t} (the kernel's MMAs take bf16, f16 or f32 and accumulate "
                    "in f32)")
        if not isinstance(r, _OPERAND_TYPES):
            return f"a {r} result (the kernel accumulates in f32; bf16, f16 or f32 results only)"
    return None


def _match_reduction(coll: g.ReduceScatterOp | g.AllReduceOp, pattern: Pattern) -> Match | None:
    """A 2-d matmul whose product, directly or through a reshape that only splits its rows
    (the 3-d result of a linear layer), is all-reduced or reduce-scattered along any dim.
    The kernel works on the 2-d product [R, N]: a scatter along the last dim owns columns,
    along another dim d blocks of rows (one block per index of the dims before d)."""
    rs = isinstance(coll, g.ReduceScatterOp)  # a bias before a scatter: patterns_bias.py
    src, chain = coll.input, [coll]
    biased = split_bias(src) if rs else None
    view = _owner(biased[0] if biased else src, g.ReshapeOp)
    inner = view.input if view is not None else (biased[0] if biased else src)
    if rs and biased is None and (biased := split_bias(inner)) is not None:
        inner = biased[0]
    chain += [op for op in (biased and biased[2], view) if op]
    mm = _owner(inner, (g.MatmulOp, ScaledMatmulOp))
    if mm is None or len(_shape(mm.result)) != 2 or (biased and not isinstance(mm, g.MatmulOp)):
        return None
    (R, N), shape = _shape(mm.result), _shape(coll.input)
    if view is not None and (not shape or shape[-1] != N):
        return None  # the reshape mixes the product's columns into rows: not a linear's view
    if not _single_use(mm.result) or (view is not None and not _single_use(view.result)):
        return None  # the unreduced product is needed elsewhere: not this pattern
    (M, K) = _shape(mm.lhs)
    W = coll.world_size
    scatter_dim, batches, out = 0, 1, (R, N)
    if isinstance(coll, g.ReduceScatterOp):
        d = coll.dim.value.data
        if d == len(shape) - 1:
            scatter_dim, out = 1, (R, N // W)
        else:
            batches, out = math.prod(shape[:d]), (R // W, N)
    dead = sorted(chain, key=lambda op: -op.parent.get_operation_index(op)) + [mm]
    scaled = isinstance(mm, ScaledMatmulOp)
    inputs = [mm.lhs, mm.rhs] + ([mm.scale_lhs, mm.scale_rhs] if scaled else [])
    views = [None] * len(inputs) + ([bias_view(biased[1])] if biased else [])
    m = Match(pattern, coll, W, inputs + ([biased[1]] if biased else []), views, [coll.result],
              [TensorType(coll.result.type.element_type, out)], (M, N, K), dead=dead,
              scatter_dim=scatter_dim, batches=batches, scaled=scaled, bias=bool(biased))
    m.problem = _operand_problem(mm)
    if coll.reduce.data != "sum":
        m.problem = f"reduction \"{coll.reduce.data}\" (puts can only add)"
    return m


def gather_near_miss(ag: g.AllGatherOp) -> str | None:
    """Why a gather whose result reaches a matmul's lhs through views was not matched: it
    gathers along another dim than the rows of the matmul's operand (DTensor sequence
    parallelism gathers [B, S/W, H] along dim 1: B blocks of rows per rank)."""
    shape, d = _shape(ag.input), ag.dim.value.data
    if d == 0 and len(shape) == 2:
        return None
    lhs_of_mm = lambda v: any(isinstance(u.operation, (g.MatmulOp, ScaledMatmulOp))  # noqa: E731
                              and u.index == 0 for u in v.uses)
    if d == len(shape) - 1 and (lhs_of_mm(ag.result) or any(
            isinstance(u.operation, g.ReshapeOp) and lhs_of_mm(u.operation.result)
            for u in ag.result.uses)):
        return (f"gather along dim {d} of {list(shape)}, the matmul's contraction dim K: every "
                "output tile needs every rank's shard (a K loop over shards as they arrive), "
                "and the fused kernel gathers blocks of rows (dim 0)")
    for use in ag.result.uses:
        view = use.operation
        if not isinstance(view, g.ReshapeOp):
            continue
        if any(isinstance(u.operation, (g.MatmulOp, ScaledMatmulOp)) and u.index == 0
               for u in view.result.uses):
            blocks = math.prod(shape[:d])
            if blocks == 1:
                return None  # collective-views moves this reshape before the gather
            return (f"gather along dim {d} of {list(shape)}: every rank's shard is {blocks} "
                    "separate blocks of the matmul's rows, and the fused kernel gathers one "
                    "contiguous block of rows per rank (dim 0)")
    return None


def reduction_near_miss(coll: g.ReduceScatterOp | g.AllReduceOp) -> str | None:
    """Why a reduction whose input comes from a matmul through elementwise ops (a bias
    add, an activation) was not matched: the kernel reduces the GEMM's tiles as they are
    produced and has no epilogue between the MMA and the transfer."""
    maps: list[str] = []
    v = coll.input
    while True:
        op = v.owner
        if isinstance(op, g.MapOp):
            maps.append(op.fn.data)
        elif not isinstance(op, g.ReshapeOp):
            break
        v = op.operands[0]
    if not maps or not isinstance(v.owner, (g.MatmulOp, ScaledMatmulOp)):
        return None
    fns = ", ".join(f'"{f}"' for f in reversed(maps))
    return (f"the matmul's result goes through {fns} before the {coll.name.removeprefix('pk.')}; "
            "the fused kernel sends GEMM tiles as they are produced and has no epilogue to "
            "apply it (a bias can be added after the collective, once)")


def _match_all_gather(ag: g.AllGatherOp) -> Match | None:
    if ag.dim.value.data != 0 or len(_shape(ag.input)) != 2:
        return None
    block = ag.parent
    users = list(dict.fromkeys(use.operation for use in ag.result.uses))
    if block is None or not users or any(u.parent is not block for u in users):
        return None
    users.sort(key=block.get_operation_index)  # program order
    first = users[0]
    limit = block.get_operation_index(first)

    def defined_before_first(v: SSAValue) -> bool:
        owner = v.owner
        return not isinstance(owner, Operation) or (
            owner.parent is block and block.get_operation_index(owner) < limit)

    consumers = [u for u in users if isinstance(u, (g.MatmulOp, ScaledMatmulOp))
                 and u.lhs == ag.result and u.rhs != ag.result and defined_before_first(u.rhs)]
    scales, scale_gather, problem = [], None, None
    scaled = [u for u in consumers if isinstance(u, ScaledMatmulOp)]
    if scaled:  # fp8: the consumers that share A's scale (others stay as they are)
        src, scale_gather, problem = _lhs_scale_source(ag, scaled[0])
        consumers = scaled if problem else [
            u for u in scaled if _lhs_scale_source(ag, u)[0] == src]
        scales = [src if problem is None else scaled[0].scale_lhs]
        if problem is None and not all(defined_before_first(v) for v in
                                       [src, *[u.scale_rhs for u in consumers]]):
            problem = "the scales are computed after the gathered tensor's first use"
    if not consumers:
        return None
    gathered = len(consumers) < len(users) or any(
        len([x for x in u.operands if x == ag.result]) > 1 for u in consumers)
    K = _shape(ag.input)[1]
    replaced = [mm.result for mm in consumers] + ([ag.result] if gathered else [])
    inputs = [ag.input, *scales[:1], *[mm.rhs for mm in consumers]]
    if scales:
        inputs += [mm.scale_rhs for mm in consumers]
    dead = [*consumers, ag]
    if scale_gather is not None and all(u.operation in consumers
                                        for u in scale_gather.result.uses):
        dead.append(scale_gather)  # gathered by the kernel, with A
    m = Match(Pattern.ALL_GATHER_MM, ag, ag.world_size, inputs,
              [None] * len(inputs), replaced, [v.type for v in replaced],
              (_shape(ag.result)[0], tuple(_shape(mm.rhs)[1] for mm in consumers), K),
              dead=dead, insert_before=first, gathered=gathered, scaled=bool(scales))
    m.problem = problem or _operand_problem(*consumers)
    return m


def _lhs_scale_source(ag: g.AllGatherOp, mm: Operation):
    """(what the kernel takes as A's scale, the gather of it or None, why not) for a scaled
    consumer of ``ag``: a tensor-wise scale as it is; a row-wise one must be the all_gather
    (same dim, ranks and groups) of the shard's [Ms, 1] scale, which the kernel gathers
    with A instead."""
    s = mm.scale_lhs
    if len(_shape(s)) == 1:
        return s, None, None
    sg = _owner(s, g.AllGatherOp)
    if sg is None or sg.dim.value.data != 0 or sg.world_size != ag.world_size or \
            not same_groups(sg, ag):
        return None, None, ("A's row-wise scale is not the all_gather of the shard's scale "
                            "(the fused kernel gathers each rank's scale rows with its rows "
                            "of A)")
    return sg.input, sg, None


def _match_moe(a2: g.AllToAllOp) -> Match | None:
    """a2 is the combining all_to_all; see the module docstring for forms (a), (b), (c)."""
    W = a2.world_size
    found = _moe_down(a2)
    if found is None:
        return None
    mm, down, E = found
    up = _moe_up(mm, W, E, len(_shape(a2.input)))
    if up is None:
        return None
    a1, up_chain = up
    if not same_groups(a1, a2):
        return None  # dispatch and combine over different groups: not one kernel
    chain_values = [a1.result, *[o.result for o in up_chain], mm.result,
                    *[o.result for o in down]]
    if not all(_single_use(v) for v in chain_values):
        return None
    x, w = a1.input, mm.rhs
    K, N = _shape(w)[-2:]
    R = a1.input.type.element_count() // K  # token rows on each rank: W*E*C
    C = R // (W * E)
    if _shape(x)[-1] != K or _shape(a2.result)[-1] != N:
        return None
    xt, wt = x.type, w.type
    views = [None if len(_shape(x)) == 2 else TensorType(xt.element_type, [R, K]),
             None if len(_shape(w)) == 2 else TensorType(wt.element_type, [E * K, N])]
    out = TensorType(a2.result.type.element_type, [R, N])
    m = Match(Pattern.MOE, a2, W, [x, w], views, [a2.result], [out],
              (R, N, K, E), dead=[a2, *reversed(down), mm, *reversed(up_chain), a1],
              experts=E, capacity=C)
    m.problem = _operand_problem(mm)
    return m


_VIEWS = (g.ReshapeOp, g.TransposeOp)


def moe_near_miss(a2: g.AllToAllOp) -> str | None:
    """Why an all_to_all that combines expert outputs was not matched, when elementwise
    ops sit between the expert matmul and it (``a2a -> matmul -> gelu -> a2a``): the fused
    kernel sends each matmul tile as it is produced and has no epilogue for them."""
    maps: list[str] = []
    v = a2.input
    while True:
        op = v.owner
        if isinstance(op, g.MapOp) and len(op.inputs) == 1:
            maps.append(op.fn.data)
        elif not isinstance(op, _VIEWS):
            break
        v = op.operands[0]
    if not maps or not isinstance(v.owner, g.MatmulOp):
        return None
    lhs = v.owner.lhs
    while isinstance(lhs.owner, _VIEWS):
        lhs = lhs.owner.input
    if not isinstance(lhs.owner, g.AllToAllOp):
        return None
    fns = ", ".join(f'"{f}"' for f in reversed(maps))
    return (f"the expert matmul's output goes through {fns} before the combining all_to_all; "
            "the fused kernel sends matmul tiles as they are produced and has no epilogue "
            "to apply it (move the activation after the all_to_all to fuse)")


def _a2a(v: SSAValue, rank: int, split: int, concat: int, world: int) -> g.AllToAllOp | None:
    op = _owner(v, g.AllToAllOp)
    if op is None or len(_shape(op.input)) != rank or op.world_size != world:
        return None
    if (op.split_dim.value.data, op.concat_dim.value.data) != (split, concat):
        return None
    return op


def _is_swap01(op: Operation | None) -> bool:
    return isinstance(op, g.TransposeOp) and int_list(op.perm) == [1, 0, 2, 3]


def _moe_down(a2: g.AllToAllOp):
    """(matmul, view ops from the matmul to a2 in order, experts E) or None."""
    W, rank = a2.world_size, len(_shape(a2.input))
    split, concat = a2.split_dim.value.data, a2.concat_dim.value.data
    if rank == 3 and (split, concat) == (1, 0):  # form (a)
        mm = _owner(a2.input, g.MatmulOp)
        if mm is None or len(_shape(mm.result)) != 3:
            return None
        return mm, [], _shape(mm.result)[0]
    if rank != 2 or (split, concat) != (0, 0):
        return None
    mm = _owner(a2.input, g.MatmulOp)
    if mm is not None:  # form (b)
        return (mm, [], 1) if len(_shape(mm.result)) == 2 else None
    r4 = _owner(a2.input, g.ReshapeOp)  # form (c)
    t2 = _owner(r4.input, g.TransposeOp) if r4 else None
    r3 = _owner(t2.input, g.ReshapeOp) if _is_swap01(t2) else None
    mm = _owner(r3.input, g.MatmulOp) if r3 else None
    if mm is None or len(_shape(mm.result)) != 3:
        return None
    E, T, N = _shape(mm.result)
    if T % W or _shape(r3.result) != (E, W, T // W, N):
        return None
    return mm, [r3, t2, r4], E


def _moe_up(mm: g.MatmulOp, W: int, E: int, rank: int):
    """(first all_to_all, view ops from it to the matmul in order) or None."""
    lhs = _shape(mm.lhs)
    if len(lhs) == 3:
        _, T, K = lhs
        if T % W:
            return None
        if rank == 3:  # form (a)
            a1 = _a2a(mm.lhs, 3, 0, 1, W)
            return (a1, []) if a1 is not None and _shape(a1.input)[0] == W * E else None
        r2 = _owner(mm.lhs, g.ReshapeOp)  # form (c)
        t = _owner(r2.input, g.TransposeOp) if r2 else None
        r1 = _owner(t.input, g.ReshapeOp) if _is_swap01(t) else None
        a1 = _a2a(r1.input, 2, 0, 0, W) if r1 else None
        if a1 is None or _shape(r1.result) != (W, E, T // W, K):
            return None
        return a1, [r1, t, r2]
    a1 = _a2a(mm.lhs, 2, 0, 0, W)  # form (b)
    if a1 is None or rank != 2 or _shape(mm.lhs)[0] % W:
        return None
    return a1, []

