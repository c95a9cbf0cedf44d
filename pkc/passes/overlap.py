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
  consumer left out, the function's return), the kernel also returns it. Independent
  pure ops computing a later consumer's weight after the first use are moved before it
  first (overlap_hoist.py), so that consumer joins the kernel; the same for a
  gather along a middle dim whose 2-d rows view feeds the matmuls (``[B, S/W, H]`` along
  dim 1, DTensor ``Shard(1)``: ``pk.fusion.batches = B`` blocks of rows per shard,
  overlap_gather_blocks.py);
* ``pk.all_gather`` along the last dim (the matmul's contraction dim K) feeding a
  ``pk.matmul`` (or an fp8 ``pk.scaled_matmul``, whose A scale is the whole gathered
  row's) as its lhs, 2-d or through the ``[rows, K]`` reshape of an n-d gathered
  tensor (a linear layer on ``[B, S, K]``): the first such matmul, its 2-d weight defined
  before the gather's first user, goes into an ``all_gather_k_matmul`` kernel (pattern
  ``all_gather_k_mm``, patterns_gather_k.py: a K loop over the shards); the gathered
  tensor is returned too when it has another user;
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
(``pipelines.unscheduled_fp8``; sm_90a: GEMM + reduce-scatter of row chunks, GEMM +
all-reduce, all-gather + GEMM of one weight with tensor- or row-wise scales, of rows or
of blocks of rows, of several weights sharing A and A's scale (one kernel, each tile's B
scale selected by its weight: gather_many.py), and the all-gather along K): the plan
assumes a fast kernel, the portable one is far slower than cuBLASLt.
A fused kernel gets ``pk.plan`` (pattern, overlap, comm_sms, fused_time, unfused_time in
seconds, forced, target, tiles) and the plan's remark. Options: ``target``; ``force``
fuses whatever the cost model says (tests use it on small shapes); ``overlap`` forces
"intra" or "inter" instead of the plan's choice; ``tile`` / ``tile-k`` set the output
tile edge (default 128) and the contraction step (default 64), capped by the shape.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects import func
from xdsl.dialects.builtin import Float32Type, ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from pkc.dialects import graph as g
from pkc.dialects.types import is_fp8, shape_str
from pkc.dialects.rank_groups import copy_groups, group_remark
from pkc.passes.fused_fp8 import ag_many_problem as fp8_ag_many_problem
from pkc.passes.fused_fp8 import ag_problem as fp8_ag_problem
from pkc.passes.fused_fp8 import agk_problem as fp8_agk_problem
from pkc.passes.fused_fp8 import ar_problem as fp8_ar_problem
from pkc.passes.fused_fp8 import shape_problem as fp8_shape_problem
from pkc.passes.overlap_gather_blocks import blocks_near_miss, blocks_remark, match_gather_blocks
from pkc.passes.overlap_hoist import hoist_gather_operands
from pkc.passes.overlap_match import (
    Match,
    gather_near_miss,
    match,
    moe_near_miss,
    reduction_near_miss,
    shape_of,
)
from pkc.passes.patterns import Fusion, build_kernel
from pkc.passes.pipelines import unscheduled_fp8
from pkc.passes.registry import register_pass
from pkc.passes.remarks import add_remark, remarks_of, set_plan
from pkc.target import PATTERNS, FusionPlan, get_target, plan_fusion
from pkc.target.cost import OverlapStyle, Pattern


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
                hoisted = hoist_gather_operands(candidate) if isinstance(
                    candidate, g.AllGatherOp) else 0
                m = match(candidate) or match_gather_blocks(candidate)
                if m is not None:
                    m.hoisted = hoisted
                    self._rewrite(m)
                elif isinstance(candidate, g.AllToAllOp):
                    why = moe_near_miss(candidate)
                    if why is not None:
                        _remark_once(candidate, f"left unfused: "
                                     f"{PATTERNS[Pattern.MOE]}: {why}")
                elif isinstance(candidate, g.AllGatherOp):
                    why = blocks_near_miss(candidate) or gather_near_miss(candidate)
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
                self.target, m.pattern, _fp8_problem(m, get_target(self.target).sm_arch))):
            _remark_once(m.anchor, f"left unfused: {PATTERNS[m.pattern]}: {why}")
            return
        style, comm_sms = self._style(plan)
        fusion = Fusion(m.pattern, style, self.tile, self.tile, self.tile_k, m.experts,
                        m.capacity, m.gathered, m.scatter_dim, m.batches, scaled=m.scaled,
                        bias=m.bias)
        kernel = _replace(m, fusion)
        for op, why in m.left:
            _remark_once(op, why)
        if m.hoisted:
            add_remark(kernel, f"moved {m.hoisted} op(s) computing a later matmul's operands "
                       "before the gathered tensor's first use, so that matmul fuses too")
        set_plan(kernel, **_plan_values(plan, style, comm_sms, not plan.fuse, self.target),
                 tile_m=self.tile, tile_n=self.tile, tile_k=self.tile_k)
        for line in self._remarks(plan, style, comm_sms):
            add_remark(kernel, line)
        if m.scaled:
            add_remark(kernel, _scaled_remark(m))
        if m.batches > 1 and m.pattern is Pattern.ALL_GATHER_MM:
            add_remark(kernel, blocks_remark(m))
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
                **({"blocks": sh.blocks} if sh.blocks > 1 else {}),
                dtype_bytes=plan.dtype_bytes)


def _fp8_problem(m: Match, arch: str) -> str | None:
    """Why the fp8 fusion ``m`` would have no scheduled kernel on ``arch`` although its
    kind has one (pkc/passes/fused_fp8.py: row chunks, no bias, one weight for an
    all-gather, bf16 / f16, N and K multiples of 16)."""
    if m.pattern is Pattern.ALL_GATHER_MM:
        ins = [v or i.type for v, i in zip(m.views + [None] * len(m.inputs), m.inputs)]
        if len(ins) != 4:   # several weights: one kernel, each tile's B scale selected
            return fp8_ag_many_problem(m.world, ins, m.result_types, arch, m.batches)
        return fp8_ag_problem(m.world, *ins, m.result_types, arch, m.batches)
    if m.pattern is Pattern.ALL_GATHER_K_MM:
        x, b = (v or i.type for v, i in zip(m.views[:2], m.inputs[:2]))
        return fp8_agk_problem(m.world, x, b, m.result_types, arch)
    if m.pattern is Pattern.MM_ALL_REDUCE:
        a, b = (v or x.type for v, x in zip(m.views[:2], m.inputs[:2]))
        return "adds a bias" if m.bias else fp8_ar_problem(m.world, a, b, m.result_types[0],
                                                            arch)
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
    kinds = ["row-wise" if len(shape_of(s)) >= 2 else "tensor-wise" for s in (sa, sb)]
    if ag and kinds[0] == "row-wise":
        how = "A's row-wise scale is gathered with A by the same kernel"
    elif m.pattern is Pattern.ALL_GATHER_K_MM:
        how = ("each f32 output tile, summed over every shard of K, is scaled once before "
               "it is stored (A's scale is the gathered row's, not gathered)")
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
