"""The kernels of ``schedule-fused`` (:mod:`pkc.passes.schedule_fused`) for the fused GEMM +
all-reduce at W <= 2 and the fresh-output GEMM + reduce-scatter at W = 2: the decisions,
the new ``pk.kernel`` (the GEMM of :func:`pkc.passes.gemm_schedule.build_gemm` with the
parts of :mod:`pkc.passes.fused_ar_schedule`), its ``pk.plan`` and its remark.

Decisions, from the kernel's plan and :mod:`pkc.target.fused_tuning`:

* the variant: at W = 2 the result goes into a fresh output (``AR_INTO_OUTPUT``,
  ``RS_INTO_OUTPUT``: measured faster end to end than the persistent result and a copy of
  it) - nothing persistent is returned, the output is new per call; else (W = 1, or the
  table says no) the persistent symmetric output the runtime keeps;
* the tile: the GEMM's table for the whole product, 128 x 128 where the link bounds the
  kernel at W <= 2 (``fused_gemm_config``; the ratio link / GEMM time is in the plan);
* intra-SM: the partials travel by TMA from the consumers' epilogue (as in the hand
  kernels); an inter-SM plan of sm-partition is not followed, and the remark says so.
"""

from __future__ import annotations

from xdsl.dialects.builtin import IntegerType
from xdsl.ir import Block, Region
from xdsl.rewriter import Rewriter

from pkc.dialects import kernel as k
from pkc.dialects.plan import ScheduleKind
from pkc.dialects.types import LOCAL, SYMMETRIC, BufferType
from pkc.passes.fused_ar_schedule import ArOutParts, ArParts, RsOutParts, chunk_rows
from pkc.passes.fused_clc import ClcChoice, decide
from pkc.passes.fused_schedule import arrangement, b_operand, build_fused_gemm, fused_config
from pkc.passes.gemm_schedule import Scales
from pkc.passes.remarks import add_remark, plan_of, set_plan
from pkc.target import fused_tuning as ft
from pkc.target.cost import OverlapStyle
from pkc.target.targets import get_target

MAX_AR_WORLD = 2        # above, GEMM + reduce-scatter and an all-gather (not built here)


def ar_into_output(world: int) -> bool:
    """GEMM + all-reduce into a fresh output (the W = 2 variant) or the persistent one."""
    return world == 2 and ft.AR_INTO_OUTPUT


def why_not_ar(kop: k.KernelOp, dtype_of) -> str | None:
    """Why a fused GEMM + all-reduce cannot be scheduled here (None: it can)."""
    W = kop.world_size
    if W > MAX_AR_WORLD:
        return (f"mm_all_reduce at W = {W}: one kernel only at W <= {MAX_AR_WORLD} (above, "
                "GEMM + reduce-scatter and an all-gather)")
    if len(kop.inputs) != 2 or len(kop.outputs) != 1:
        return f"mm_all_reduce with {len(kop.inputs)} inputs and {len(kop.outputs)} outputs"
    a, b, y = kop.inputs[0].type, kop.inputs[1].type, kop.outputs[0].type
    if any(len(t.get_shape()) != 2 for t in (a, b, y)):
        return f"mm_all_reduce: operands are not 2-D ({a}, {b} -> {y})"
    dt = dtype_of(a)
    if dt is None or dtype_of(b) != dt or dtype_of(y) != dt:
        return f"mm_all_reduce: operands and result must all be bf16 or f16 ({a}, {b} -> {y})"
    (M, K), (K2, N) = a.get_shape(), b.get_shape()
    if K != K2 or tuple(y.get_shape()) != (M, N):
        return f"mm_all_reduce: A {a} x B {b} -> {y} is not an all-reduce of the product"
    if K % 8 or N % 8:
        return f"mm_all_reduce: N = {N} and K = {K} must be multiples of 8 (TMA row strides)"
    if M < W or min(M, N, K) == 0:
        return f"mm_all_reduce: {M} rows cannot be split into {W} chunks"
    return None


def _choice(clc: str) -> ClcChoice:
    return ClcChoice.parse(clc, "schedule-fused: clc")


def _operands(kop: k.KernelOp):
    """(A, B as read, B's layout, (A's, B's) fp8 type names: ("", "") for 16-bit). An fp8
    kernel (inputs A, B, SA, SB: patterns_scaled) reads B as the fp8 GEMM does."""
    if len(kop.inputs) == 4:
        from pkc.passes.fused_fp8 import fp8_operands    # (imports this module's builders)

        b_val, layout, _, types = fp8_operands(kop)
        return kop.inputs[0], b_val, layout, types
    a, b = kop.inputs
    return (a, *b_operand(b), ("", ""))


def schedule_ar(kop: k.KernelOp, target: str, variant: str, dt: str, clc: str = "auto") -> None:
    """Replace the fused ``mm_all_reduce`` kernel ``kop`` (W <= 2) by its scheduled kernel
    (``clc``: cluster launch control on sm_100a, :mod:`pkc.passes.fused_clc`). An fp8
    kernel (A, B, SA, SB: :mod:`pkc.passes.fused_fp8` checked it) gets the fp8 GEMM, each
    partial piece scaled by the rank's scales before it travels or is summed."""
    W = kop.world_size
    a, b_val, layout, types = _operands(kop)
    scaled = len(kop.inputs) == 4
    M, K = a.type.get_shape()
    N = kop.inputs[1].type.get_shape()[1]
    fresh = ar_into_output(W)
    cfg = fused_config(ft.FusedKind.AR, M, N, K, W, dt, layout, target, variant, fresh)
    cfg = cfg.with_(a_type=types[0], b_type=types[1]) if scaled else cfg
    y = kop.outputs[0].type
    block = Block(arg_types=[BufferType(a.type.get_shape(), a.type.element_type),
                             BufferType(b_val.type.get_shape(), b_val.type.element_type),
                             *[BufferType(v.type.get_shape(), v.type.element_type)
                               for v in kop.inputs[2:]],
                             BufferType(y.get_shape(), y.element_type,
                                        LOCAL if fresh else SYMMETRIC)])
    A, B, C = block.args[0], block.args[1], block.args[-1]
    scales = Scales(block.args[2], block.args[3], rows=M) if scaled else None
    i32 = IntegerType(32)
    pad = k.AllocOp(BufferType([W * W], i32, SYMMETRIC), zero=True)
    ctl = k.AllocOp(BufferType([2], i32, LOCAL), zero=True)
    for op in (pad, ctl):
        block.add_op(op)
    mc, rows = chunk_rows(M, W)
    cfg, cls, clc_plan, clc_words = decide(ArOutParts if fresh else ArParts, cfg, W, mc, N,
                                           get_target(target).num_sms, _choice(clc))
    if fresh:
        acc = k.AllocOp(BufferType([M, N], y.element_type, SYMMETRIC))
        block.add_op(acc)
        parts = cls(W, M, N, cfg, pad.result, ctl.result, acc.result)
    else:
        parts = cls(W, M, N, cfg, pad.result, ctl.result)
    build_fused_gemm(block, A, B, C, parts.mc, N, K, cfg, parts, scales)
    block.add_op(k.YieldOp())
    what = (f"fp8 GEMM ({types[0]} x {types[1]} -> {dt}, scales in the epilogue) + all-reduce "
            f"W={W} {M}x{N}x{K}" if scaled else f"GEMM + all-reduce W={W} {M}x{N}x{K} {dt}")
    where = ("a fresh output (the peer's chunk summed in the epilogue, the own chunk copied "
             "from the accumulator after the final wait; nothing persistent returned)"
             if fresh else "the symmetric output (persistent, overwritten by the next launch)")
    _replace(kop, "scaled_matmul_all_reduce" if scaled else "matmul_all_reduce", a, b_val,
             block, cfg, layout, ft.FusedKind.AR, fresh, parts,
             f"scheduled {what}: {cfg.tag()}, {W} chunks of "
             f"{parts.tiles_per_chunk} tiles (rows {'/'.join(map(str, rows))}), own chunk "
             f"first, every tile to every rank (broadcast); result in {where}",
             chunk_rows=mc, M=M, N=N, K=K, clc=(clc_plan, clc_words))


def schedule_rs_out(kop: k.KernelOp, target: str, variant: str, dt: str,
                    clc: str = "auto") -> None:
    """Replace the fused ``mm_reduce_scatter`` kernel ``kop`` (W = 2) by its fresh-output
    scheduled kernel (``clc`` as for :func:`schedule_ar`)."""
    W = kop.world_size
    a, b_val, layout, _ = _operands(kop)
    M, K = a.type.get_shape()
    N = kop.inputs[1].type.get_shape()[1]
    Mc = M // W
    cfg = fused_config(ft.FusedKind.RS, M, N, K, W, dt, layout, target, variant, True)
    y = kop.outputs[0].type
    block = Block(arg_types=[BufferType(a.type.get_shape(), a.type.element_type),
                             BufferType(b_val.type.get_shape(), b_val.type.element_type),
                             BufferType(y.get_shape(), y.element_type, LOCAL)])
    A, B, C = block.args
    i32 = IntegerType(32)
    pad = k.AllocOp(BufferType([W], i32, SYMMETRIC), zero=True)
    ctl = k.AllocOp(BufferType([2], i32, LOCAL), zero=True)
    stage = k.AllocOp(BufferType([2 * Mc, N], y.element_type, SYMMETRIC))
    for op in (pad, ctl, stage):
        block.add_op(op)
    cfg, cls, clc_plan, clc_words = decide(RsOutParts, cfg, W, Mc, N,
                                           get_target(target).num_sms, _choice(clc))
    parts = cls(W, Mc, N, cfg, pad.result, ctl.result, stage.result)
    build_fused_gemm(block, A, B, C, Mc, N, K, cfg, parts)
    block.add_op(k.YieldOp())
    _replace(kop, "matmul_reduce_scatter", a, b_val, block, cfg, layout, ft.FusedKind.RS, True,
             parts,
             f"scheduled GEMM + reduce-scatter W={W} {M}x{N}x{K} {dt}: {cfg.tag()}, {W} chunks "
             f"of {parts.tiles_per_chunk} tiles, the peer's chunk first (its partial stored "
             "into the peer's staging, the half of the epoch's parity), the own chunk summed "
             "in the epilogue; result in a fresh output (the tuning table's W = 2 variant)",
             chunk_rows=Mc, M=M, N=N, K=K, clc=(clc_plan, clc_words))


def _replace(kop, name, a, b_val, block, cfg, layout, kind: ft.FusedKind, fresh, parts, text,
             *, chunk_rows, M, N, K, clc=({}, "")) -> None:
    W = kop.world_size
    y = kop.outputs[0].type
    attrs = {key: v for key, v in kop.attributes.items() if key not in ("kernel_name", "world")}
    new = k.KernelOp(name, W, [a, b_val, *kop.inputs[2:]], [y], Region(block), attributes=attrs)
    plan = plan_of(kop)
    comm_sms = plan.get("comm_sms", 0) or 0
    tmem_plan, tmem_words = arrangement(cfg)
    ratio = ft.link_over_gemm(kind, M, N, K, W) if W > 1 else 0.0
    link_bound = W <= 2 and W > 1 and ratio >= ft.LINK_BOUND
    set_plan(new, schedule=ScheduleKind.FUSED, fused_kind=kind, bm=cfg.bm, bn=cfg.bn,
             stages=cfg.stages, consumers=cfg.consumers, group_m=cfg.group_m, b_layout=layout,
             chunk_rows=chunk_rows, tiles_per_chunk=parts.tiles_per_chunk,
             scheduled_overlap=OverlapStyle.INTRA, comm_ctas=0, fresh_output=fresh,
             link_over_gemm=round(ratio, 3), link_bound_tile=link_bound, **tmem_plan, **clc[0])
    why = ("tiles move by TMA from the consumers' epilogue while the SM computes the next "
           "tile (intra-SM, no communicate CTAs)")
    planned = OverlapStyle.parse(plan.get("overlap", OverlapStyle.INTRA),
                                 f"kernel @{kop.kernel_name.data}: pk.plan.overlap")
    if planned is OverlapStyle.INTER and comm_sms:
        why += (f"; sm-partition's inter-SM plan ({comm_sms} communicate SMs) is not followed: "
                "the TMA engine, not SMs, moves the tiles, as in the hand kernel")
    if link_bound:
        why += (f"; link-bound (link / GEMM time {ratio:.2f} >= {ft.LINK_BOUND}): "
                f"{cfg.bm}x{cfg.bn} tiles, the partials travel in finer steps")
    add_remark(new, f"{text}; {why}{tmem_words}{clc[1]}")
    new.location = kop.location
    Rewriter.replace_op(kop, new)


__all__ = ["schedule_ar", "schedule_rs_out", "why_not_ar", "ar_into_output", "MAX_AR_WORLD"]
