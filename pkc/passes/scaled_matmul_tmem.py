"""schedule-matmul's fp8 kernel for sm_100a targets (b200, nvl72): ``pk.scaled_matmul`` ->
``pk.kernel "scaled_matmul"`` (arguments A, B as [N, K], SA, SB, [bias], C) on the
tensor-memory GEMM (:mod:`pkc.passes.gemm_schedule_tmem`, CTA pairs
:mod:`pkc.passes.gemm_schedule_tmem_pair`) instead of the wgmma one.

Not a pass: :mod:`pkc.passes.schedule_matmul` calls :func:`schedule_scaled_tmem` for a
target whose ``sm_arch`` is sm_100a. The kernel is the plain tensor-memory GEMM's with
8-bit operands (``TmemGemmConfig.a_type`` / ``b_type``: 128 elements of K per 128-byte
stage row, ``pks.mma_async`` lowered to ``tcgen05.mma.kind::f8f6f4``) and the scales and
bias applied by the epilogue (``pks.acc_scale`` per piece, lowered after ``tcgen05.ld``).
The tile is ``choose_tmem_config``'s for the shape (single CTAs, CTA pairs, two pairs
multicasting a shared operand, cluster launch control where it chooses them); nothing of it
is measured (no Blackwell GPU here).
B is read K-major, as by the sm_90a kernel: the ``[N, K]`` value under a ``pk.transpose``
of B, or a ``pk.transpose`` added here.
"""

from __future__ import annotations

from xdsl.dialects.builtin import Float8E4M3FNType, Float8E5M2Type
from xdsl.ir import Block, Region
from xdsl.rewriter import InsertPoint, Rewriter

from pkc.dialects import graph as g
from pkc.dialects import kernel as k
from pkc.dialects.graph_scaled import ScaledMatmulOp
from pkc.dialects.types import BufferType
from pkc.passes.gemm_schedule import Scales
from pkc.passes.gemm_schedule_clc import ClcParts
from pkc.passes.gemm_schedule_tmem import build_gemm_tmem
from pkc.passes.gemm_schedule_tmem_cluster import build_gemm_tmem_cluster
from pkc.passes.gemm_schedule_tmem_pair import build_gemm_tmem_pair
from pkc.passes.remarks import add_remark, set_plan
from pkc.target.gemm_tuning import BLayout, Epilogue
from pkc.target.gemm_tuning_sm100 import choose_tmem_config, multicast_remark

FP8_NAMES = {Float8E4M3FNType: "e4m3", Float8E5M2Type: "e5m2"}


def b_nk(op: ScaledMatmulOp):
    """(B as [N, K], how it was found): the value under ``op``'s rhs transpose, or a
    ``pk.transpose`` of rhs inserted before ``op`` (a view when B is column-major)."""
    src = op.rhs.owner
    if isinstance(src, g.TransposeOp) and len(src.input.type.get_shape()) == 2:
        return src.input, "the [N, K] value under its transpose"
    t = g.TransposeOp(op.rhs, [1, 0])
    t.location = op.location
    Rewriter.insert_op(t, InsertPoint.before(op))
    return t.result, "a pk.transpose of [K, N] B (a view when B is column-major)"


def schedule_scaled_tmem(op: ScaledMatmulOp, num_sms: int, out: str) -> None:
    """Replaces ``op`` by its sm_100a kernel (``out``: the result's bf16 / f16)."""
    a = op.lhs
    M, K = a.type.get_shape()
    N = op.rhs.type.get_shape()[1]
    types = (FP8_NAMES[type(a.type.element_type)], FP8_NAMES[type(op.rhs.type.element_type)])
    b_val, how = b_nk(op)
    cfg = choose_tmem_config(M, N, K, out, BLayout.NK, num_sms, types)
    ins = [a, b_val, op.scale_lhs, op.scale_rhs] + ([op.bias] if op.bias is not None else [])
    block = Block(arg_types=[BufferType(v.type.get_shape(), v.type.element_type) for v in ins]
                  + [BufferType(op.result.type.get_shape(), op.result.type.element_type)])
    A, B, SA, SB = block.args[:4]
    scales = Scales(SA, SB, block.args[4] if op.bias is not None else None)
    C = block.args[-1]
    if cfg.multicast:
        build_gemm_tmem_cluster(block, A, B, C, M, N, K, cfg, scales)
    elif cfg.pair:
        build_gemm_tmem_pair(block, A, B, C, M, N, K, cfg, scales)
    else:
        build_gemm_tmem(block, A, B, C, M, N, K, cfg, ClcParts() if cfg.clc else None, scales)
    block.add_op(k.YieldOp())
    kop = k.KernelOp("scaled_matmul", 1, ins, [op.result.type], Region(block))
    set_plan(kop, pattern="gemm", bm=cfg.bm, bn=cfg.bn, stages=cfg.stages, consumers=1,
             cluster=cfg.cluster, epilogue=cfg.epilogue, b_layout=BLayout.NK,
             group_m=cfg.group_m, acc="tmem", acc_bufs=cfg.acc_bufs,
             **({"cta_group": 2} if cfg.pair else {}),
             **({"scheduler": "clc"} if cfg.clc else {}),
             **({"cluster_shape": cfg.pair_cluster.value, "multicast": cfg.multicast}
                if cfg.multicast else {}))
    tiles = -(-M // cfg.bm) * -(-N // cfg.bn)
    pair = (f"CTA pairs (cta_group::2, {-(-M // (2 * cfg.bm)) * -(-N // cfg.bn)} tiles of "
            f"{2 * cfg.bm}x{cfg.bn}), " if cfg.pair else "")
    if cfg.multicast:
        pair += multicast_remark(cfg, M, N)
    if cfg.clc:
        pair += "tiles handed out by cluster launch control, "
    scaled = "/".join("row-wise" if r else "tensor-wise" for r in op.row_wise())
    add_remark(kop, f"scheduled fp8 GEMM {M}x{N}x{K} {types[0]} x {types[1]} -> {out}: "
               f"{cfg.tag()} ({pair}{tiles} tiles over {num_sms} SMs; sm_100a kernel: "
               f"tcgen05.mma kind::f8f6f4 into tensor memory, {scaled} scales"
               f"{', bias' if op.bias is not None else ''} applied after tcgen05.ld in the "
               f"epilogue; B read as {how})")
    kop.location = op.location
    Rewriter.replace_op(op, kop)


__all__ = ["schedule_scaled_tmem", "b_nk", "FP8_NAMES"]
