"""schedule-matmul: graph-level ``pk.matmul`` -> a scheduled ``pk.kernel`` (schedule level).

Matches a 2-D ``pk.matmul`` of bf16 / f16 operands with a result of the same type whose N
and K are multiples of 8 (TMA needs 16-byte row strides). When its right operand is a
``pk.transpose`` of a 2-D ``[N, K]`` value (``x @ W.T`` of an ``nn.Linear``), the kernel
reads that value in its own layout (B K-major, no transpose is materialized); otherwise B
is read ``[K, N]`` (N-major, tiles a multiple of 64 columns).

Produces ``pk.kernel "matmul"`` whose body is the persistent warp-specialized GEMM of
:mod:`pkc.passes.gemm_schedule` at the schedule level, the tile configuration chosen from
the target's tuning table (:func:`pkc.target.gemm_tuning.choose_config`: waves of tiles over
the SM count, each tile's measured efficiency) and written into ``pk.plan`` (``bm``, ``bn``,
``stages``, ``consumers``, ``cluster``, ``epilogue``, ``b_layout``), with a remark.

The kernel has ``world = 1``: it is rank-local (every rank of a W-rank program runs its own
copy on its own operands, with no communication), which is how the interpreter and the
runtime run it.

A ``pk.scaled_matmul`` (fp8 operands, f32 scales, optional bias: torch's ``_scaled_mm``)
becomes ``pk.kernel "scaled_matmul"`` (arguments A, B as [N, K], SA, SB, [bias], C) with
the same GEMM on 8-bit operands and a ``pks.acc_scale`` epilogue step (sm_90a: wgmma;
sm_100a: the tensor-memory GEMM, :mod:`pkc.passes.scaled_matmul_tmem`; a remark says why
where it cannot: an f32 result, N or K not multiples of 16).
B is read K-major (both fp8 operands of wgmma are): the ``[N, K]`` value under a
``pk.transpose``, or a ``pk.transpose`` of B added here (free when B is torch's
column-major ``mat2``, a view).

Why: this is how pkc's fast GEMM is produced from IR: every later decision (a pass that
adds a stage, a lowering per target) sees and changes this body, and ``--emit=ptx`` prints
exactly what runs. A matmul that does not match stays a graph-level op and says why in a
remark.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects.builtin import (BFloat16Type, Float8E4M3FNType, Float8E5M2Type, Float16Type,
                                   ModuleOp, TensorType)
from xdsl.ir import Block, Region
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from pkc.dialects import graph as g
from pkc.dialects import kernel as k
from pkc.dialects.graph_scaled import ScaledMatmulOp
from pkc.dialects.types import BufferType
from pkc.passes.gemm_schedule import Scales, build_gemm
from pkc.passes.gemm_schedule_tmem import build_gemm_tmem
from pkc.passes.gemm_schedule_clc import ClcParts
from pkc.passes.gemm_schedule_tmem_cluster import build_gemm_tmem_cluster
from pkc.passes.gemm_schedule_tmem_pair import build_gemm_tmem_pair
from pkc.passes.registry import register_pass
from pkc.passes.scaled_matmul_tmem import schedule_scaled_tmem
from pkc.passes.remarks import add_remark, set_plan
from pkc.target.gemm_tuning import VARIANTS, BLayout, Epilogue, check_variant, choose_config
from pkc.target.gemm_tuning_sm100 import choose_tmem_config, multicast_remark
from pkc.target.targets import get_target

_DTYPE = {BFloat16Type: "bf16", Float16Type: "f16"}
_FP8 = {Float8E4M3FNType: "e4m3", Float8E5M2Type: "e5m2"}


def _dtype(t) -> str | None:
    return _DTYPE.get(type(t.element_type)) if isinstance(t, TensorType) else None


def why_not(op: g.MatmulOp) -> str | None:
    """Why ``op`` cannot become a scheduled GEMM (None: it can)."""
    a, b, r = op.lhs.type, op.rhs.type, op.result.type
    if len(a.get_shape()) != 2:
        return f"only 2-D matmuls are scheduled (lhs {a})"
    dt = _dtype(a)
    if dt is None or _dtype(b) != dt or _dtype(r) != dt:
        return f"operands and result must all be bf16 or f16 (got {a}, {b} -> {r})"
    M, K = a.get_shape()
    N = b.get_shape()[1]
    if K % 8 or N % 8:
        return f"N = {N} and K = {K} must be multiples of 8 (TMA row strides of 16 bytes)"
    if min(M, N, K) == 0:
        return "empty matmul"
    return None


@register_pass
@dataclass(frozen=True)
class ScheduleMatmul(ModulePass):
    """Rewrite 2-D bf16/f16 pk.matmul and fp8 pk.scaled_matmul ops into scheduled GEMM kernels."""

    name = "schedule-matmul"
    target: str = "h200"
    variant: str = ""           # force a named tile variant (pkc.target.gemm_tuning.VARIANTS)
    # fp8 on sm_90a: load each tile's scales (and bias) into registers before its main loop
    # (pks.scale_prefetch); false: per epilogue piece from global memory (the old form)
    scale_prefetch: bool = True
    # fp8 on sm_90a without a variant: the ping-pong 128 x 128 tile where every CTA has
    # enough work (gemm_tuning.PINGPONG_MIN_KBLOCKS); false: the cooperative table's pick
    pingpong: bool = True

    def __post_init__(self):
        get_target(self.target)
        check_variant("schedule-matmul", self.variant)

    def apply(self, ctx, module: ModuleOp) -> None:
        target = get_target(self.target)
        num_sms = target.num_sms
        # a target whose MMA accumulates in tensor memory (sm_100a) gets the GEMM whose
        # MMA and epilogue roles share CTA accumulators (gemm_schedule_tmem)
        tmem = target.sm_arch == "sm_100a"
        if tmem and self.variant:
            raise ValueError(f"schedule-matmul: variant={self.variant} names a wgmma tile; "
                             f"target {self.target} ({target.sm_arch}) builds the tensor-memory "
                             "GEMM, whose tile is chosen by gemm_tuning_sm100")
        for op in [o for o in module.walk() if isinstance(o, g.MatmulOp)]:
            reason = why_not(op)
            if reason:
                add_remark(op, f"matmul left to the graph level: {reason}")
                continue
            if tmem:
                _schedule_tmem(op, num_sms)
            else:
                _schedule(op, num_sms, self.variant)
        for op in [o for o in module.walk() if isinstance(o, ScaledMatmulOp)]:
            reason = why_not_scaled(op, target.sm_arch)
            if reason:
                add_remark(op, f"scaled matmul left to the graph level: {reason}")
                continue
            if tmem:
                schedule_scaled_tmem(op, num_sms, _dtype(op.result.type))
            else:
                _schedule_scaled(op, num_sms, self.variant, self.scale_prefetch, self.pingpong)


def _schedule(op: g.MatmulOp, num_sms: int, variant: str) -> None:
    a, rhs = op.lhs, op.rhs
    M, K = a.type.get_shape()
    N = rhs.type.get_shape()[1]
    dt = _dtype(a.type)
    src = rhs.owner
    if isinstance(src, g.TransposeOp) and len(src.input.type.get_shape()) == 2:
        b_val, layout = src.input, BLayout.NK
    else:
        b_val, layout = rhs, BLayout.KN
    if variant:
        cfg = VARIANTS[variant].with_(dtype=dt, b_layout=layout)
    else:
        cfg = choose_config(M, N, K, dt, layout, num_sms)
    if layout is BLayout.KN and cfg.bn % (64 * cfg.cluster_m):
        raise ValueError(f"schedule-matmul: variant {cfg.tag()} cannot read B as [K, N]")
    cfg.validate()
    arg_types = [BufferType(t.get_shape(), t.element_type) for t in (a.type, b_val.type, op.result.type)]
    block = Block(arg_types=arg_types)
    A, B, C = block.args
    build_gemm(block, A, B, C, M, N, K, cfg)
    block.add_op(k.YieldOp())
    kop = k.KernelOp("matmul", 1, [a, b_val], [op.result.type], Region(block))
    set_plan(kop, pattern="gemm", bm=cfg.bm, bn=cfg.bn, stages=cfg.stages,
             consumers=cfg.consumers, cluster=cfg.cluster_m, epilogue=cfg.epilogue,
             b_layout=layout, group_m=cfg.group_m, **({"pingpong": True} if cfg.pingpong else {}))
    tiles = -(-M // cfg.bm) * -(-N // cfg.bn)
    add_remark(kop, f"scheduled GEMM {M}x{N}x{K} {dt}: {cfg.tag()} "
               f"({tiles} tiles over {num_sms} SMs, B read as "
               f"{'[N, K]' if layout is BLayout.NK else '[K, N]'})")
    kop.location = op.location      # remarks and errors point at the user's matmul
    Rewriter.replace_op(op, kop)


def _operands(op: g.MatmulOp):
    """(A, B as the kernel reads it, its layout, M, N, K, dtype)."""
    a, rhs = op.lhs, op.rhs
    M, K = a.type.get_shape()
    N = rhs.type.get_shape()[1]
    src = rhs.owner
    if isinstance(src, g.TransposeOp) and len(src.input.type.get_shape()) == 2:
        return a, src.input, BLayout.NK, M, N, K, _dtype(a.type)
    return a, rhs, BLayout.KN, M, N, K, _dtype(a.type)


def _schedule_tmem(op: g.MatmulOp, num_sms: int) -> None:
    a, b_val, layout, M, N, K, dt = _operands(op)
    cfg = choose_tmem_config(M, N, K, dt, layout, num_sms)
    arg_types = [BufferType(t.get_shape(), t.element_type) for t in (a.type, b_val.type, op.result.type)]
    block = Block(arg_types=arg_types)
    A, B, C = block.args
    if cfg.multicast:
        build_gemm_tmem_cluster(block, A, B, C, M, N, K, cfg)
    elif cfg.pair:
        build_gemm_tmem_pair(block, A, B, C, M, N, K, cfg)
    else:
        build_gemm_tmem(block, A, B, C, M, N, K, cfg, ClcParts() if cfg.clc else None)
    block.add_op(k.YieldOp())
    kop = k.KernelOp("matmul", 1, [a, b_val], [op.result.type], Region(block))
    set_plan(kop, pattern="gemm", bm=cfg.bm, bn=cfg.bn, stages=cfg.stages, consumers=1,
             cluster=cfg.cluster, epilogue=Epilogue.GLOBAL, b_layout=layout, group_m=cfg.group_m,
             acc="tmem", acc_bufs=cfg.acc_bufs, **({"cta_group": 2} if cfg.pair else {}),
             **({"scheduler": "clc"} if cfg.clc else {}),
             **({"cluster_shape": cfg.pair_cluster.value, "multicast": cfg.multicast}
                if cfg.multicast else {}))
    tiles = -(-M // cfg.bm) * -(-N // cfg.bn)
    pair = (f"CTA pairs (cta_group::2, {-(-M // (2 * cfg.bm)) * -(-N // cfg.bn)} tiles of "
            f"{2 * cfg.bm}x{cfg.bn}, B split over the pair), " if cfg.pair else "")
    if cfg.multicast:
        pair += multicast_remark(cfg, M, N)
    if cfg.clc:
        pair += ("tiles handed out by cluster launch control (one CTA per tile, running CTAs "
                 "cancel and take the ones not started), ")
    add_remark(kop, f"scheduled GEMM {M}x{N}x{K} {dt}: {cfg.tag()} ({pair}{tiles} tiles over "
               f"{num_sms} SMs, accumulators in tensor memory, MMA and epilogue roles "
               f"overlapping; B read as {'[N, K]' if layout is BLayout.NK else '[K, N]'})")
    kop.location = op.location
    Rewriter.replace_op(op, kop)


def why_not_scaled(op: ScaledMatmulOp, arch: str = "sm_90a") -> str | None:
    """Why ``op`` cannot become a scheduled fp8 GEMM on ``arch`` (None: it can)."""
    if arch not in ("sm_90a", "sm_100a"):
        return f"no scheduled fp8 GEMM for {arch} yet (sm_90a wgmma, sm_100a tcgen05)"
    (M, K), N = op.lhs.type.get_shape(), op.rhs.type.get_shape()[1]
    out = _dtype(op.result.type)
    if out is None:
        return (f"result {op.result.type.element_type}: the scheduled fp8 GEMM stores bf16 or "
                "f16 (an f32 result runs on the portable path)")
    if K % 16 or N % 16:
        return f"N = {N} and K = {K} must be multiples of 16 (TMA rows and wgmma k32 of fp8)"
    if min(M, N, K) == 0:
        return "empty matmul"
    if op.bias is not None and len(op.bias.type.get_shape()) != 1:
        return f"bias {op.bias.type} is not 1-d"
    return None


def _schedule_scaled(op: ScaledMatmulOp, num_sms: int, variant: str,
                     prefetch: bool = True, pingpong: bool = True) -> None:
    """``op`` -> ``pk.kernel "scaled_matmul"``: the GEMM of 8-bit operands, B read [N, K]."""
    a, rhs = op.lhs, op.rhs
    M, K = a.type.get_shape()
    N = rhs.type.get_shape()[1]
    out = _dtype(op.result.type)
    types = (_FP8[type(a.type.element_type)], _FP8[type(rhs.type.element_type)])
    src = rhs.owner
    if isinstance(src, g.TransposeOp) and len(src.input.type.get_shape()) == 2:
        b_val, how = src.input, "the [N, K] value under its transpose"
    else:
        t = g.TransposeOp(rhs, [1, 0])
        t.location = op.location
        Rewriter.insert_op(t, InsertPoint.before(op))
        b_val, how = t.result, "a pk.transpose of [K, N] B (a view when B is column-major)"
    if variant:
        cfg = VARIANTS[variant].with_(dtype=out, b_layout=BLayout.NK, a_type=types[0],
                                      b_type=types[1])
    else:
        cfg = choose_config(M, N, K, out, BLayout.NK, num_sms, types, pingpong)
    cfg = cfg.with_(scale_prefetch=prefetch)
    cfg.validate()
    ins = [a, b_val, op.scale_lhs, op.scale_rhs] + ([op.bias] if op.bias is not None else [])
    block = Block(arg_types=[BufferType(v.type.get_shape(), v.type.element_type) for v in ins]
                  + [BufferType(op.result.type.get_shape(), op.result.type.element_type)])
    A, B, SA, SB = block.args[:4]
    bias = block.args[4] if op.bias is not None else None
    build_gemm(block, A, B, block.args[-1], M, N, K, cfg, scales=Scales(SA, SB, bias))
    block.add_op(k.YieldOp())
    kop = k.KernelOp("scaled_matmul", 1, ins, [op.result.type], Region(block))
    row = op.row_wise()
    set_plan(kop, pattern="gemm", bm=cfg.bm, bn=cfg.bn, stages=cfg.stages,
             consumers=cfg.consumers, cluster=cfg.cluster_m, epilogue=cfg.epilogue,
             b_layout=BLayout.NK, group_m=cfg.group_m,
             scales="prefetched" if prefetch else "epilogue",
             **({"pingpong": True} if cfg.pingpong else {}))
    tiles = -(-M // cfg.bm) * -(-N // cfg.bn)
    scales = "/".join("row-wise" if r else "tensor-wise" for r in row)
    add_remark(kop, f"scheduled fp8 GEMM {M}x{N}x{K} {types[0]} x {types[1]} -> {out}: "
               f"{cfg.tag()} ({tiles} tiles over {num_sms} SMs; {scales} scales"
               f"{', bias' if op.bias is not None else ''} in the epilogue"
               f"{', loaded into registers before each tile' if prefetch else ''}"
               f"; B read as {how}"
               + ("" if op.fast_accum is not None else
                  "; sums stay in the wgmma accumulator (torch's use_fast_accum=True; "
                  "cuBLASLt's default promotes partial sums: more exact on long K)") + ")")
    kop.location = op.location
    Rewriter.replace_op(op, kop)
