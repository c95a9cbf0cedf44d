"""schedule-moe: the MoE ``pk.kernel`` that ``overlap`` fused (all_to_all dispatch ->
grouped matmul -> all_to_all combine, kernel level) -> one scheduled kernel: sm_90a's
wgmma GEMM, or for an sm_100a target the tensor-memory GEMM
(:func:`pkc.passes.fused_schedule.build_fused_gemm`) with the same parts.

Matches the ``pk.kernel``s with ``pk.fusion.pattern = "all_to_all_mm_all_to_all"`` (on 2-D
row views: tokens ``X [W*E*C, K]``, expert weights ``[E*K, N]``) whose weights are a
reshaped ``pk.transpose`` of ``[E, N, K]`` (per-expert ``nn.Linear`` weights: each expert's
B is read in its own ``[N, K]`` layout, the experts stacked along rows, so a tile's B rows
are ``e*N + n0`` and no copy of the weights is made). The kernel becomes the persistent
warp-specialized GEMM of :mod:`pkc.passes.gemm_schedule` with the tile loop, dispatch
prologue and combine epilogue of :class:`pkc.passes.moe_schedule.MoeParts` (the protocol
is written there).

The new kernel takes a third input, the valid rows of each (destination rank, expert)
block (``counts [W*E] i32``, read at run time): the variable tokens per expert of a real
router. From the graph, whose all_to_all splits evenly, the counts are a ``pk.constant``
of C (every row valid); a caller with run-time counts launches the same kernel with its
own (``pkc.runtime.scheduled_moe``). Its outputs: the result in the symmetric ``[W*E, C,
N]`` (reshaped to the graph's rows) and, with W > 1, the expert operand (symmetric, the
peers' tokens; internal).

Decisions (``pk.plan``: ``schedule = "moe"``, the tile, ``capacity``, ``experts``,
``pieces``; and a remark): the tile from the GEMM table for the whole product with
``bm = 128`` (a block's last tile idles up to ``bm - 1`` rows; 256-row tiles would double
that), ``b_layout = nk``, no cluster (the B tile changes with the expert), TMA epilogue
(the combine is the epilogue's TMA stores into the source's output). Intra-SM: the
dispatch runs before the roles on every CTA and the combine from the consumers'
epilogue; sm-partition's communicate SMs, if planned, are not used (the remark says so).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects.builtin import BFloat16Type, Float16Type, IntegerType, ModuleOp, TensorType
from xdsl.ir import Block, Region
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from pkc.dialects import graph as g
from pkc.dialects import kernel as k
from pkc.dialects.plan import ScheduleKind
from pkc.dialects.types import LOCAL, SYMMETRIC, BufferType
from pkc.passes.fused_clc import ClcKind, static_words
from pkc.passes.fused_schedule import arrangement, build_fused_gemm, tmem_config
from pkc.passes.moe_schedule import MoeParts, pieces
from pkc.passes.pipelines import unlowered_arch
from pkc.passes.registry import register_pass
from pkc.passes.remarks import add_remark, plan_of, set_plan
from pkc.target.cost import OverlapStyle, Pattern
from pkc.target.gemm_tuning import VARIANTS, BLayout, Epilogue, check_variant, choose_config
from pkc.target.targets import get_target

PATTERN = Pattern.MOE
_DTYPE = {BFloat16Type: "bf16", Float16Type: "f16"}


def _fusion(kop: k.KernelOp) -> dict:
    a = kop.attributes.get("pk.fusion")
    return {key: getattr(v, "data", v) for key, v in a.data.items()} if a is not None else {}


def _int(v) -> int:
    while not isinstance(v, int):       # IntegerAttr -> IntAttr -> int
        v = v.value if hasattr(v, "value") else v.data
    return v


def weights_nk(w):
    """The ``[E, N, K]`` value the kernel's ``[E*K, N]`` weight rows are a view of (a
    ``pk.reshape`` of a ``pk.transpose`` swapping the last two dimensions), or None."""
    src = w.owner
    if isinstance(src, g.ReshapeOp):
        src = src.input.owner
    if isinstance(src, g.TransposeOp) and [_int(p) for p in src.perm.data] == [0, 2, 1]:
        return src.input
    return None


def why_not(kop: k.KernelOp) -> str | None:
    """Why an MoE kernel cannot be scheduled (None: it can)."""
    fz = _fusion(kop)
    if len(kop.inputs) != 2 or len(kop.outputs) != 1:
        return f"{len(kop.inputs)} inputs and {len(kop.outputs)} outputs (tokens, weights -> rows)"
    x, w, y = kop.inputs[0].type, kop.inputs[1].type, kop.outputs[0].type
    if any(not isinstance(t, TensorType) or len(t.get_shape()) != 2 for t in (x, w, y)):
        return f"operands are not 2-D row views ({x}, {w} -> {y})"
    dt = _DTYPE.get(type(x.element_type))
    if dt is None or w.element_type != x.element_type or y.element_type != x.element_type:
        return f"tokens, weights and result must all be bf16 or f16 ({x}, {w} -> {y})"
    E, C, W = _int(fz.get("experts", 0)), _int(fz.get("capacity", 0)), kop.world_size
    (rows, K), (EK, N) = x.get_shape(), w.get_shape()
    if not E or rows != W * E * C or EK != E * K:
        return f"tokens {x} and weights {w} are not {W} ranks x {E} experts x {C} rows"
    if weights_nk(kop.inputs[1]) is None:
        return ("the expert weights are not a transposed [E, N, K] value: the kernel reads "
                "each expert's B in its [N, K] layout ([E, K, N] weights need a per-expert k "
                "offset of B that the GEMM builder has no hook for yet)")
    if E > 384:
        return f"{E} experts per rank: at most 384 (a CTA's threads send the counts)"
    if K % 8 or N % 8:
        return f"N = {N} and K = {K} must be multiples of 8 (TMA row strides)"
    return None


@register_pass
@dataclass(frozen=True)
class ScheduleMoe(ModulePass):
    """Rewrite MoE dispatch + grouped GEMM + combine kernels into scheduled (pks) kernels."""

    name = "schedule-moe"
    target: str = "h200"
    variant: str = ""           # force a GEMM tile variant (pkc.target.gemm_tuning.VARIANTS)

    def __post_init__(self):
        get_target(self.target)
        check_variant("schedule-moe", self.variant)

    def apply(self, ctx, module: ModuleOp) -> None:
        for kop in [o for o in module.walk() if isinstance(o, k.KernelOp)]:
            if _fusion(kop).get("pattern") != PATTERN or kop.schedule() is not None:
                continue
            # an architecture with no lowering of this kernel (FUSED_ARCHS): say why
            reason = unlowered_arch(self.target) or why_not(kop)
            if reason:
                add_remark(kop, f"MoE kernel left unscheduled: {reason}")
                continue
            schedule_moe_kernel(kop, self.target, self.variant)


def moe_config(rows: int, N: int, K: int, dt: str, sms: int, variant: str = "",
               target: str = ""):
    """The MoE kernel's GEMM tile; for an sm_100a ``target`` the tensor-memory one (128
    rows, like every tile here)."""
    if target and get_target(target).sm_arch == "sm_100a":
        return tmem_config("schedule-moe", rows, N, K, dt, BLayout.NK, target, variant)
    cfg = VARIANTS[variant] if variant else choose_config(rows, N, K, dt, BLayout.NK, sms)
    if cfg.bm != 128 or cfg.consumers != 2:
        cfg = VARIANTS["128x256_s4_tma"]
    cfg = cfg.with_(dtype=dt, b_layout=BLayout.NK, cluster_m=1, epilogue=Epilogue.TMA)
    cfg.validate()
    return cfg


def schedule_moe_kernel(kop: k.KernelOp, target: str, variant: str = "") -> k.KernelOp:
    fz = _fusion(kop)
    W, E, C = kop.world_size, _int(fz["experts"]), _int(fz["capacity"])
    x, w = kop.inputs
    (rows, K), N = x.type.get_shape(), w.type.get_shape()[1]
    el = x.type.element_type
    dt = _DTYPE[type(el)]
    cfg = moe_config(rows, N, K, dt, get_target(target).num_sms, variant, target)
    i32 = IntegerType(32)
    # graph-level operands: the weights' [E, N, K] source as stacked rows, the counts
    w_enk = weights_nk(w)
    b_rows = g.ReshapeOp(w_enk, TensorType(el, [E * N, K]))
    counts = g.ConstantOp(C, TensorType(i32, [W * E]))
    Rewriter.insert_op([b_rows, counts], InsertPoint.before(kop))
    outs = [TensorType(el, [W * E, C, N])]
    if W > 1:                                   # the expert operand the peers put into
        outs.append(TensorType(el, [E * W * C, K]))
    block = Block(arg_types=[BufferType([rows, K], el), BufferType([E * N, K], el),
                             BufferType([W * E], i32),
                             *[BufferType(t.get_shape(), el, SYMMETRIC) for t in outs]])
    X, B, CNT, O = block.args[:4]
    if W > 1:
        R = block.args[4]
        pad = k.AllocOp(BufferType([E * W + 2 * W], i32, SYMMETRIC), zero=True)
        cin = k.AllocOp(BufferType([E * W], i32, SYMMETRIC), zero=True)
        ctl = k.AllocOp(BufferType([2], i32, LOCAL), zero=True)
        for a in (pad, cin, ctl):
            block.add_op(a)
        parts = MoeParts(W, E, C, N, K, cfg, X, CNT, O, R, pad.result, cin.result, ctl.result)
        build_fused_gemm(block, R, B, O, E * W * C, N, K, cfg, parts)
    else:                                       # one rank: no exchange, A is X
        parts = MoeParts(W, E, C, N, K, cfg, X, CNT, O, None, None, None, None)
        build_fused_gemm(block, X, B, O, E * C, N, K, cfg, parts)
    block.add_op(k.YieldOp())
    attrs = {key: v for key, v in kop.attributes.items() if key not in ("kernel_name", "world")}
    new = k.KernelOp("moe_dispatch_gemm_combine", W, [x, b_rows.result, counts.result], outs,
                     Region(block), attributes=attrs)
    Rewriter.insert_op(new, InsertPoint.before(kop))
    out = g.ReshapeOp(new.results[0], kop.results[0].type)
    Rewriter.insert_op(out, InsertPoint.before(kop))
    kop.results[0].replace_all_uses_with(out.result)
    plan = plan_of(kop)
    comm_sms = plan.get("comm_sms", 0) or 0
    tmem_plan, tmem_words = arrangement(cfg)
    # sm_100a: never under cluster launch control (fused_clc says why)
    clc_plan, clc_words = static_words(ClcKind.MOE, cfg)
    set_plan(new, schedule=ScheduleKind.MOE, bm=cfg.bm, bn=cfg.bn, stages=cfg.stages,
             consumers=cfg.consumers, b_layout=BLayout.NK, experts=E, capacity=C,
             pieces=pieces(C), scheduled_overlap=OverlapStyle.INTRA, comm_ctas=0, **tmem_plan,
             **clc_plan)
    why = ("dispatch copies run on every CTA before its roles, the combine from the "
           "consumers' epilogue by TMA (intra-SM, no communicate CTAs)" if W > 1 else
           "one rank: counts read by the tile loop, tokens straight from X, no signals")
    planned = OverlapStyle.parse(plan.get("overlap", OverlapStyle.INTRA),
                                 f"kernel @{kop.kernel_name.data}: pk.plan.overlap")
    if planned is OverlapStyle.INTER and comm_sms:
        why += f"; sm-partition's {comm_sms} communicate SMs are not used"
    add_remark(new, f"scheduled MoE W={W} E={E} C={C} {N}x{K} {dt}: {cfg.tag()}; counts per "
                    f"(rank, expert) read at run time (from the graph: every row, {C}); "
                    f"blocks of {C} rows, own tokens first, a block's tiles start when its "
                    f"{pieces(C)} pieces arrived; {why}{tmem_words}{clc_words}")
    new.location = kop.location
    Rewriter.erase_op(kop)
    return new


__all__ = ["ScheduleMoe", "schedule_moe_kernel", "why_not", "weights_nk", "moe_config"]
