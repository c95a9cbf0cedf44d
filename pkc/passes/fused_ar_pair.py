"""The GEMM + all-reduce above two ranks as a pair of scheduled kernels (used by
``schedule-fused``, :mod:`pkc.passes.schedule_fused`):

    rank r: C_r = A_r @ B_r;  y = sum over ranks of C_r  (every rank gets all of y)
    ->  chunk_r = matmul_reduce_scatter(A, B)   (the fused GEMM + reduce-scatter, RsParts:
                                                 rank r's reduced rows [r*Mc, (r+1)*Mc) in
                                                 its symmetric output)
        y       = all_gather_agp(chunk)         (every rank pulls the W reduced chunks
                                                 from the peers' symmetric outputs into a
                                                 fresh output)

Why two kernels: above W = 2 the broadcast kernel (every partial tile to every rank, the
reduction done by each) sends each rank's whole partial product to W - 1 peers, while a
reduce-scatter then an all-gather sends 2 (W - 1) / W of it (the hand fast path measured
the broadcast 0.5-1.0x of RS + AG there). The reduce-scatter is overlapped with the GEMM
(its tiles leave from the epilogue); the all-gather waits for every rank's chunk, and
reads it where the GEMM's kernel left it: no copy in, nothing persistent out.

The runtime runs the two in order with no choice of its own: the all-gather's input is
the GEMM kernel's symmetric output (:func:`pkc.runtime.scheduled_fused.run_mm_all_reduce`
or any runner that hands a kernel's symmetric output to the next kernel).
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.dialects.builtin import TensorType
from xdsl.rewriter import Rewriter

from pkc.dialects import kernel as k
from pkc.dialects.rank_groups import copy_groups
from pkc.passes.remarks import add_remark, set_plan
from pkc.passes.schedule_collectives import build_collective
from pkc.target.comm_tuning import choose_pull_gather
from pkc.target.cost import Pattern
from pkc.target.fused_tuning import RS_MAX_WORLD, FusedKind
from pkc.target.targets import get_target

PATTERN = Pattern.MM_ALL_REDUCE


def is_pair(kop: k.KernelOp, pattern: Pattern | None) -> bool:
    """A fused GEMM + all-reduce that runs as GEMM + reduce-scatter then a pull all-gather."""
    return pattern is PATTERN and kop.world_size > 2


def why_not(kop: k.KernelOp, dtype_of: Callable) -> str | None:
    """Why the pair cannot be built (None: it can)."""
    if len(kop.inputs) != 2 or len(kop.outputs) != 1:
        return f"{PATTERN} with {len(kop.inputs)} inputs and {len(kop.outputs)} outputs"
    a, b, y = kop.inputs[0].type, kop.inputs[1].type, kop.outputs[0].type
    if any(len(t.get_shape()) != 2 for t in (a, b, y)):
        return f"{PATTERN}: operands are not 2-D ({a}, {b} -> {y})"
    dt = dtype_of(a)
    if dt is None or dtype_of(b) != dt or dtype_of(y) != dt:
        return f"{PATTERN}: operands and result must all be bf16 or f16 ({a}, {b} -> {y})"
    W = kop.world_size
    if W > RS_MAX_WORLD:
        return (f"{PATTERN} at W = {W}: its GEMM + reduce-scatter kernel takes a tensor map "
                f"per peer as a kernel parameter, checked up to W = {RS_MAX_WORLD} "
                "(pkc.target.fused_tuning.RS_MAX_WORLD); the portable path runs it")
    (M, K), (K2, N) = a.get_shape(), b.get_shape()
    if K != K2 or tuple(y.get_shape()) != (M, N):
        return f"{PATTERN}: A {a} x B {b} -> {y} is not a product"
    if M % W:
        return (f"{PATTERN}: M = {M} rows do not split into {W} chunks (the reduce-scatter "
                "then all-gather needs whole chunks)")
    if K % 8 or N % 8:
        return f"{PATTERN}: N = {N} and K = {K} must be multiples of 8 (TMA row strides)"
    if min(M, N, K) == 0:
        return f"{PATTERN}: empty product"
    return None


def schedule_pair(kop: k.KernelOp, target: str, dtype: str, build_rs: Callable) -> None:
    """Replace ``kop`` by the GEMM + reduce-scatter kernel that ``build_rs(kop, chunk type)``
    builds (not yet in the IR) and the pull all-gather of its symmetric output."""
    W = kop.world_size
    y = kop.outputs[0].type
    M, N = y.get_shape()
    Mc = M // W
    chunk_t = TensorType(y.element_type, [Mc, N])
    rs = build_rs(kop, chunk_t)
    cfg = choose_pull_gather(W, dtype, Mc * N)
    sms = get_target(target).num_sms
    # no pk.fusion: the all-gather is a plain collective (its plan says which pair)
    ag = build_collective("all_gather_agp", cfg, [rs.results[0]], chunk_t, y, sms)
    link_pair = 2 * (W - 1) / W
    why = (f"{PATTERN} W={W} {M}x{N} as GEMM + reduce-scatter then a pull all-gather: each "
           f"rank sends {link_pair:.2f}x its product (2(W-1)/W) where the one-kernel "
           f"broadcast sends {W - 1}x (W-1)")
    set_plan(rs, pair=PATTERN, pair_role="reduce_scatter")
    set_plan(ag, pair=PATTERN, pair_role="all_gather", fused_kind=FusedKind.AGP)
    add_remark(rs, why + "; this kernel's reduced chunk stays in its symmetric output for "
               "the all-gather")
    add_remark(ag, why + "; this kernel pulls every rank's reduced chunk from the GEMM "
               "kernel's symmetric output into a fresh output")
    rs.location = ag.location = kop.location
    copy_groups(kop, rs, ag)     # over sub-groups: both kernels run in the pair's groups
    Rewriter.replace_op(kop, [rs, ag], [ag.results[0]])


__all__ = ["PATTERN", "is_pair", "schedule_pair", "why_not"]
