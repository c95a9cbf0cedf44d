"""schedule-fused: a fused GEMM + collective ``pk.kernel`` (kernel level) -> a scheduled one.

Matches the ``pk.kernel``s that ``overlap`` fused (``pk.fusion.pattern``) and that the
rest of the default pipeline (buffer-elision, sm-partition) left at the kernel level.
Scheduled so far: ``mm_reduce_scatter`` (GEMM + reduce-scatter) of 2-D bf16 / f16
operands ``A [M, K]`` and ``B [K, N]`` (or ``W.T`` of a ``pk.transpose``d ``[N, K]`` value,
read in its own layout) with ``M = W x Mc`` and N, K multiples of 8 (TMA row strides). Its
body becomes the persistent warp-specialized GEMM of :mod:`pkc.passes.gemm_schedule` with
the tile space, C maps and epilogue of :class:`pkc.passes.fused_schedule.RsParts`: each
output tile goes by TMA to its chunk owner's copy of the symmetric output (stored for the
own chunk, reduce-added for the others) and epoch-counted signals tell the owner when its
chunk is whole. The same kernel scatters columns (2-D dim 1, 3-D last dim) and blocks
of rows (3-D dim 1) with their own tile ownership: :mod:`pkc.passes.fused_rs_layouts`.
The other patterns stay as they are, with a remark saying why.

Decisions (written into ``pk.plan``: ``schedule = "fused"``, ``fused_kind``, the tile,
``overlap``, ``comm_ctas``, ``fresh_output``; and a remark), from the kernel's plan and the
tuning table :mod:`pkc.target.fused_tuning`:

* the tile: the GEMM's table for the whole product, 128 x 128 where the link bounds the
  kernel at W <= 2 (``fused_gemm_config``);
* intra- vs inter-SM: the transfers are issued from the consumers' epilogue and run on
  the TMA engine while the SM computes the next tile, so the kernel is intra-SM (no
  communicate CTAs). Where sm-partition planned communicate SMs (``pk.plan.comm_sms``),
  the remark says that plan is not followed and why (the hand kernel is intra-SM too);
* the output: the reduced chunk stays in the symmetric output (persistent, overwritten by
  the next launch), except at W = 2 where the tuning table prefers a fresh output
  (``RS_INTO_OUTPUT``): that variant, and ``mm_all_reduce`` at W <= 2 (a broadcast of
  every partial tile; into a fresh output at W = 2, ``AR_INTO_OUTPUT``), are built by
  :mod:`pkc.passes.fused_ar_build` with the same decisions in ``pk.plan``.

Targets: for an sm_90a target the GEMM is the wgmma one (producer and consumer
warpgroups, register accumulators). For an sm_100a target (b200, nvl72) every pattern
gets the tensor-memory GEMM of :mod:`pkc.passes.gemm_schedule_tmem` (producer, one MMA
thread, one epilogue warpgroup reading tensor memory) with the same parts, so the
communication (tile stores / reduce-adds / puts / signals) is the same IR and only the MMA
path differs; the plan says ``acc = "tmem"`` and the remark names it. Another
architecture (not in ``pipelines.FUSED_ARCHS``) leaves the kernels with a remark.

Why: the fused kernel that runs is then the compiler's IR: ``--emit=ptx`` prints it and
a later pass can change its epilogue or tile loop.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects.builtin import BFloat16Type, Float16Type, IntegerType, ModuleOp, TensorType
from xdsl.ir import Block, Region
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from pkc.dialects import kernel as k
from pkc.dialects.plan import ScheduleKind
from pkc.dialects.types import LOCAL, SYMMETRIC, BufferType
from pkc.passes import fused_ar_pair, fused_rs_layouts
from pkc.passes.fused_ar_build import schedule_ar, schedule_rs_out, why_not_ar
from pkc.passes.ag_blocks_schedule import batches_of, schedule_ag_blocks
from pkc.passes.ag_gemm_schedule import schedule_all_gather_mm
from pkc.passes.ag_k_schedule import schedule_all_gather_k_mm
from pkc.passes.fused_clc import ClcChoice, check_choice, decide
from pkc.passes.fused_rs_ordered import RsOrderedParts, add_order
from pkc.passes.fused_fp8 import fp8_operands, schedule_scaled_ar, why_not_scaled
from pkc.passes.fused_schedule import (RsParts, arrangement, b_operand, build_fused_gemm,
                                       fp8_fused_config, fused_config)
from pkc.passes.gemm_schedule import Scales
from pkc.passes.gather_many import is_gather_many, split_gather_many, why_not_fused
from pkc.passes.pipelines import unlowered_arch
from pkc.ir import diagnostic_at
from pkc.passes.registry import register_pass
from pkc.passes.remarks import add_remark, plan_of, set_plan
from pkc.target.cost import OverlapStyle, Pattern
from pkc.target.fused_tuning import RS_MAX_WORLD, FusedKind, rs_into_output
from pkc.target.gemm_tuning import check_variant
from pkc.target.targets import get_target

_DTYPE = {BFloat16Type: "bf16", Float16Type: "f16"}
SCHEDULED_PATTERNS = (Pattern.MM_REDUCE_SCATTER, Pattern.MM_ALL_REDUCE)


def _dtype(t) -> str | None:
    return _DTYPE.get(type(t.element_type)) if isinstance(t, (TensorType, BufferType)) else None


def _fusion(kop: k.KernelOp) -> dict:
    a = kop.attributes.get("pk.fusion")
    return {key: getattr(v, "data", v) for key, v in a.data.items()} if a is not None else {}


def fusion_pattern(kop: k.KernelOp) -> Pattern | None:
    """The pattern of a kernel fused by overlap (``pk.fusion.pattern``), None for others;
    a ValueError naming the kernel for a value that is not a pattern."""
    pattern = _fusion(kop).get("pattern")
    return None if pattern is None else \
        Pattern.parse(pattern, f"kernel @{kop.kernel_name.data}: pk.fusion.pattern")


def rs_world_reason(pattern, W: int) -> str:
    """Why a GEMM + reduce-scatter over W > RS_MAX_WORLD ranks stays unscheduled."""
    return (f"{pattern} at W = {W}: the scheduled GEMM + reduce-scatter takes a tensor map "
            f"per peer as a kernel parameter, checked up to W = {RS_MAX_WORLD} "
            "(pkc.target.fused_tuning.RS_MAX_WORLD); the portable path runs it")


def why_not(kop: k.KernelOp) -> str | None:
    """Why a fused kernel cannot be scheduled (None: it can)."""
    pattern = fusion_pattern(kop)
    if pattern not in SCHEDULED_PATTERNS:
        return f"pattern {pattern}: not scheduled yet (the portable path runs it)"
    if pattern is Pattern.MM_ALL_REDUCE:
        return why_not_ar(kop, _dtype)
    if kop.world_size > RS_MAX_WORLD:
        return rs_world_reason(pattern, kop.world_size)
    fz = _fusion(kop)  # overlap's column / row-block scatter layouts are not built here
    layout = [getattr(fz.get(key), "value", None) for key in ("scatter_dim", "batches")]
    layout = [d if v is None else v.data for v, d in zip(layout, (0, 1))]
    if layout != [0, 1]:
        return (f"{pattern} scattering columns or blocks of rows (scatter_dim {layout[0]}, "
                f"batches {layout[1]}): not scheduled yet")
    if len(kop.inputs) != 2 or len(kop.outputs) != 1:
        return f"{pattern} with {len(kop.inputs)} inputs and {len(kop.outputs)} outputs"
    a, b, y = kop.inputs[0].type, kop.inputs[1].type, kop.outputs[0].type
    if any(len(t.get_shape()) != 2 for t in (a, b, y)):
        return f"{pattern}: operands are not 2-D ({a}, {b} -> {y})"
    dt = _dtype(a)
    if dt is None or _dtype(b) != dt or _dtype(y) != dt:
        return f"{pattern}: operands and result must all be bf16 or f16 ({a}, {b} -> {y})"
    W = kop.world_size
    (M, K), (K2, N) = a.get_shape(), b.get_shape()
    if K != K2 or M % W or tuple(y.get_shape()) != (M // W, N):
        return f"{pattern}: A {a} x B {b} -> {y} is not a reduce-scatter of {W} row chunks"
    if K % 8 or N % 8:
        return f"{pattern}: N = {N} and K = {K} must be multiples of 8 (TMA row strides)"
    if min(M, N, K) == 0:
        return f"{pattern}: empty product"
    return None


@register_pass
@dataclass(frozen=True)
class ScheduleFused(ModulePass):
    """Rewrite fused GEMM + collective kernels into scheduled (pks) kernels."""

    name = "schedule-fused"
    target: str = "h200"
    variant: str = ""           # force a GEMM tile variant (pkc.target.gemm_tuning.VARIANTS)
    deterministic: bool = False  # W > 2 reduce-scatter adds in a fixed rank order (fused_rs_ordered)
    clc: str = "auto"           # sm_100a cluster launch control: auto / on / off (fused_clc)

    def __post_init__(self):
        get_target(self.target)
        check_variant("schedule-fused", self.variant)
        ClcChoice.parse(self.clc, "schedule-fused: clc")

    def apply(self, ctx, module: ModuleOp) -> None:
        # here, not at construction: pkc-opt --target=sm_100a sets the cost target after
        check_choice(ClcChoice.parse(self.clc, "schedule-fused: clc"),
                     get_target(self.target).sm_arch, "schedule-fused")
        for kop in [o for o in module.walk() if isinstance(o, k.KernelOp)]:
            pattern = fusion_pattern(kop)
            if pattern is None or kop.schedule() is not None:
                continue
            try:
                self._schedule(kop, pattern)
            except ValueError as exc:
                if not self.variant:
                    raise           # (a bug: the pass's own choices must build)
                # a forced tile this kernel cannot take: the user's option, at the kernel
                why = str(exc)
                if not why.startswith("schedule-fused"):
                    why = f"schedule-fused: variant={self.variant}: {why}"
                raise diagnostic_at(kop, why) from None

    def _schedule(self, kop: k.KernelOp, pattern: Pattern) -> None:
        """Schedules ``kop`` (a fused kernel of ``pattern``) or leaves it with a remark."""
        # an architecture with no lowering of these kernels (FUSED_ARCHS): say why
        if (why := unlowered_arch(self.target)):
            add_remark(kop, f"fused kernel left unscheduled: {why}")
            return
        if _fusion(kop).get("scaled") is not None and _fusion(kop)["scaled"].value.data:
            reason = why_not_scaled(kop, pattern, self.target)
            if reason:
                add_remark(kop, f"fused kernel left unscheduled: fp8 scaled matmul: {reason}")
            elif pattern is Pattern.ALL_GATHER_MM and batches_of(kop) > 1:
                schedule_ag_blocks(kop, self.target, self.variant)
            elif pattern is Pattern.ALL_GATHER_MM:
                schedule_all_gather_mm(kop, self.target, self.variant)
            elif pattern is Pattern.ALL_GATHER_K_MM:
                schedule_all_gather_k_mm(kop, self.target, self.variant)
            elif pattern is Pattern.MM_ALL_REDUCE:
                schedule_scaled_ar(kop, self.target, self.variant,
                                   lambda kop, y: _schedule_rs(kop, self.target, self.variant,
                                                               y, self.deterministic,
                                                               self.clc), self.clc)
            else:
                _schedule_rs(kop, self.target, self.variant, None, self.deterministic,
                             self.clc)
            return
        # several weights: one kernel (below), or the gather then the GEMMs, saying why
        if is_gather_many(kop, pattern) and (why := why_not_fused(kop)) is not None:
            split_gather_many(kop, self.target, why)
            return
        if pattern is Pattern.ALL_GATHER_MM:     # its own builder
            if batches_of(kop) > 1:             # blocks of rows per shard (Shard(1))
                schedule_ag_blocks(kop, self.target, self.variant)
            else:
                schedule_all_gather_mm(kop, self.target, self.variant)
            return
        if pattern is Pattern.ALL_GATHER_K_MM:   # gathered along K: ag_k_schedule
            schedule_all_gather_k_mm(kop, self.target, self.variant)
            return
        if fused_ar_pair.is_pair(kop, pattern):   # W > 2: two kernels
            reason = fused_ar_pair.why_not(kop, _dtype)
            if reason:
                add_remark(kop, f"fused kernel left unscheduled: {reason}")
            else:
                fused_ar_pair.schedule_pair(kop, self.target, _dtype(kop.inputs[0].type),
                                            lambda kop, y: _schedule_rs(kop, self.target,
                                                                        self.variant, y,
                                                                        self.deterministic,
                                                                        self.clc))
            return
        fz = _fusion(kop)   # columns / blocks of rows: fused_rs_layouts' kernels
        if pattern is Pattern.MM_REDUCE_SCATTER and fused_rs_layouts.is_other_layout(fz):
            reason = fused_rs_layouts.why_not(kop, fz, _dtype)
            if reason:
                add_remark(kop, f"fused kernel left unscheduled: {reason}")
            else:
                fused_rs_layouts.schedule_rs_layout(kop, fz, self.target, self.variant,
                                                    self.deterministic, _dtype)
            return
        reason = why_not(kop)
        if reason:
            add_remark(kop, f"fused kernel left unscheduled: {reason}")
            return
        if pattern is Pattern.MM_ALL_REDUCE:
            schedule_ar(kop, self.target, self.variant, _dtype(kop.inputs[0].type), self.clc)
        elif rs_into_output(kop.world_size):
            schedule_rs_out(kop, self.target, self.variant, _dtype(kop.inputs[0].type),
                            self.clc)
        else:
            _schedule_rs(kop, self.target, self.variant, None, self.deterministic, self.clc)


def _schedule_rs(kop: k.KernelOp, target: str, variant: str, chunk=None,
                 deterministic: bool = False, clc: str = "auto") -> k.KernelOp:
    """The GEMM + reduce-scatter kernel of ``kop``, replacing it; with ``chunk`` (the
    reduced chunk's tensor type) built for a caller that places it (not replacing). An
    fp8 kernel (inputs A, B, SA, SB: patterns_scaled) gets the fp8 GEMM with the scales
    in its epilogue (:mod:`pkc.passes.fused_fp8`)."""
    W = kop.world_size
    a, b = kop.inputs[:2]
    M, K = a.type.get_shape()
    N = b.type.get_shape()[1]
    scaled = len(kop.inputs) == 4
    Mc = M // W
    y = chunk or kop.outputs[0].type
    if scaled:
        b_val, layout, dt, types = fp8_operands(kop)
    else:
        (b_val, layout), dt, types = b_operand(b), _dtype(a.type), ("", "")
    cfg = fused_config(FusedKind.RS, M, N, K, W, dt, layout, target, variant)
    if scaled:      # (CTA pairs where the plain fp8 GEMM takes them)
        cfg = fp8_fused_config(cfg, types, M, N, K, target, variant, RsParts)
    extra = [BufferType(v.type.get_shape(), v.type.element_type) for v in kop.inputs[2:]]
    block = Block(arg_types=[BufferType(a.type.get_shape(), a.type.element_type),
                             BufferType(b_val.type.get_shape(), b_val.type.element_type),
                             *extra, BufferType(y.get_shape(), y.element_type, SYMMETRIC)])
    A, B, C = block.args[0], block.args[1], block.args[-1]
    scales = Scales(block.args[2], block.args[3], rows=M) if scaled else None
    i32 = IntegerType(32)
    pad = k.AllocOp(BufferType([W], i32, SYMMETRIC), zero=True)
    ctl = k.AllocOp(BufferType([2], i32, LOCAL), zero=True)
    block.add_op(pad)
    block.add_op(ctl)
    ordered = deterministic and W > 2      # at W <= 2 the one add has a fixed order
    # sm_100a: the chunked loop under cluster launch control where it pays (fused_clc)
    cfg, parts_cls, clc_plan, clc_words = decide(
        RsOrderedParts if ordered else RsParts, cfg, W, Mc, N, get_target(target).num_sms,
        ClcChoice.parse(clc, "schedule-fused: clc"))
    parts = parts_cls(W, Mc, N, cfg, pad.result, ctl.result)
    build_fused_gemm(block, A, B, C, Mc, N, K, cfg, parts, scales)
    block.add_op(k.YieldOp())
    attrs = {key: v for key, v in kop.attributes.items() if key not in ("kernel_name", "world")}
    new = k.KernelOp("scaled_matmul_reduce_scatter" if scaled else "matmul_reduce_scatter", W,
                     [a, b_val, *kop.inputs[2:]], [y], Region(block), attributes=attrs)
    plan = plan_of(kop)
    planned = OverlapStyle.parse(plan.get("overlap", OverlapStyle.INTRA),
                                 f"kernel @{kop.kernel_name.data}: pk.plan.overlap")
    comm_sms = plan.get("comm_sms", 0) or 0
    tmem_plan, tmem_words = arrangement(cfg)
    set_plan(new, schedule=ScheduleKind.FUSED, fused_kind=FusedKind.RS, bm=cfg.bm, bn=cfg.bn,
             stages=cfg.stages, consumers=cfg.consumers, group_m=cfg.group_m, b_layout=layout,
             chunk_rows=Mc, tiles_per_chunk=parts.tiles_per_chunk,
             scheduled_overlap=OverlapStyle.INTRA, comm_ctas=0, fresh_output=False,
             add_order=add_order(W, ordered), **tmem_plan, **clc_plan)
    why_intra = ("tiles move by TMA from the consumers' epilogue while the SM computes the "
                 "next tile (intra-SM, no communicate CTAs)")
    if planned is OverlapStyle.INTER and comm_sms:
        why_intra += (f"; sm-partition's inter-SM plan ({comm_sms} communicate SMs) is not "
                      "followed: the TMA engine, not SMs, moves the tiles, as in the hand kernel")
    head = (f"scheduled fp8 GEMM ({types[0]} x {types[1]} -> {dt}, scales in the epilogue) "
            f"+ reduce-scatter W={W} {M}x{N}x{K}" if scaled else
            f"scheduled GEMM + reduce-scatter W={W} {M}x{N}x{K} {dt}")
    add_remark(new, f"{head}: {cfg.tag()}, "
               f"{W} chunks of {parts.tiles_per_chunk} tiles, own chunk first; {why_intra}; "
               "result in the symmetric output (persistent)"
               + ("; adds in a fixed rank order (deterministic: each chunk's adds wait for "
                  "the previous rank's)" if ordered else "") + tmem_words + clc_words)
    new.location = kop.location
    if chunk is None:
        Rewriter.replace_op(kop, new)
    return new
