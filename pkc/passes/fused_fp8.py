"""The fp8 (``pk.scaled_matmul``) side of schedule-fused: which fused scaled kernels get
the scheduled fp8 GEMM, and their operands as that GEMM reads them.

Not a pass: :mod:`pkc.passes.schedule_fused` calls these for kernels whose ``pk.fusion``
says ``scaled`` (built by overlap from ``pk.scaled_matmul``, arguments ``A, B, SA, SB``
then the output: :mod:`pkc.passes.patterns_scaled`). Scheduled so far: GEMM +
reduce-scatter of row chunks on sm_90a (wgmma) and sm_100a (the tensor-memory GEMM,
tcgen05 kind::f8f6f4), every W up to ``RS_MAX_WORLD`` as the persistent
kernel that reduce-adds into the symmetric output (at W = 2 too: the fresh-output variant
of bf16 has no scaled form yet), bf16 / f16 results. Each rank's partial tile is scaled
by its own scales (tensor-wise, or A's row scales of the chunk's rows and B's column
scales) before it travels, as the kernel-level kernel does (``scale_tile``).

GEMM + all-reduce (sm_90a; sm_100a but at W = 2): the bf16 kernels with the fp8 GEMM and the scale step in their
epilogue, no new protocol - at W <= 2 the broadcast kernel of
:mod:`pkc.passes.fused_ar_build` (every partial piece scaled before it is stored, reduce-added
or summed into the fresh output at W = 2), above W = 2 the pair of
:mod:`pkc.passes.fused_ar_pair` (this module's GEMM + reduce-scatter, then the pull
all-gather of its bf16 chunks). All-gather + GEMM (:func:`ag_problem`; several weights
sharing A and A's scale: :func:`ag_many_problem`, one kernel, pkc/passes/gather_many.py),
tensor-wise or, on sm_90a, A's row-wise scale gathered with A
(:mod:`pkc.passes.fused_fp8_ag`: the put side moves each shard's scale rows too); on
sm_90a also of blocks of rows per shard (a gather along a middle dim, DTensor
``Shard(1)``: :mod:`pkc.passes.ag_blocks_schedule`, the row scales in the same layout;
sm_100a: tensor-wise), and the all-gather along K on both (:func:`agk_problem`;
:mod:`pkc.passes.ag_k_schedule` with the scaled epilogue of the plain GEMM: A's scale is
that of the whole gathered row).
"""

from __future__ import annotations

from xdsl.dialects.builtin import (BFloat16Type, Float8E4M3FNType, Float8E5M2Type, Float16Type)
from xdsl.rewriter import InsertPoint, Rewriter

from pkc.dialects import graph as g
from pkc.dialects import kernel as k
from pkc.target.cost import Pattern
from pkc.target.fused_tuning import RS_MAX_WORLD
from pkc.target.gemm_tuning import BLayout
from pkc.target.targets import get_target

_OUT = {BFloat16Type: "bf16", Float16Type: "f16"}
_FP8 = {Float8E4M3FNType: "e4m3", Float8E5M2Type: "e5m2"}


def why_not_scaled(kop: k.KernelOp, pattern: Pattern | None, target: str) -> str | None:
    """Why the fused scaled kernel ``kop`` gets no scheduled fp8 GEMM (None: it gets one)."""
    arch = get_target(target).sm_arch
    if arch not in ("sm_90a", "sm_100a"):
        return f"no fp8 fused GEMM schedule for {arch} yet (the portable lowering runs it)"
    if pattern is Pattern.ALL_GATHER_MM:      # sm_90a: wgmma; sm_100a: tcgen05 kind::f8f6f4
        outs = [o.type for o in kop.outputs]
        fz = kop.attributes["pk.fusion"].data
        blocks = fz["batches"].value.data if "batches" in fz else 1
        n = (len(kop.inputs) - 2) // 2
        if n == 1:
            return ag_problem(kop.world_size, *[v.type for v in kop.inputs], outs, arch,
                              blocks)
        return ag_many_problem(kop.world_size, [v.type for v in kop.inputs], outs, arch,
                               blocks)
    if pattern is Pattern.ALL_GATHER_K_MM:    # sm_90a: the wgmma GEMM's shard walk
        if len(kop.inputs) != 4:
            return f"{len(kop.inputs)} inputs (X, B, SA, SB)"
        return agk_problem(kop.world_size, kop.inputs[0].type, kop.inputs[1].type,
                           [o.type for o in kop.outputs], arch)
    if pattern is Pattern.MM_ALL_REDUCE:
        if len(kop.inputs) != 4 or len(kop.outputs) != 1:
            return f"{len(kop.inputs)} inputs and {len(kop.outputs)} outputs (A, B, SA, SB -> Y)"
        return ar_problem(kop.world_size, kop.inputs[0].type, kop.inputs[1].type,
                          kop.outputs[0].type, arch)
    if pattern is not Pattern.MM_REDUCE_SCATTER:
        return (f"pattern {pattern}: only GEMM + reduce-scatter / all-reduce and all-gather "
                "+ GEMM are scheduled for fp8 so far")
    fz = kop.attributes["pk.fusion"].data
    layout = [getattr(fz.get(key), "value", None) for key in ("scatter_dim", "batches")]
    if [d if v is None else v.data for v, d in zip(layout, (0, 1))] != [0, 1]:
        return "scattering columns or blocks of rows: not scheduled for fp8 yet"
    if len(kop.inputs) != 4 or len(kop.outputs) != 1:
        return f"{len(kop.inputs)} inputs and {len(kop.outputs)} outputs (A, B, SA, SB -> Y)"
    return shape_problem(kop.world_size, kop.inputs[0].type, kop.inputs[1].type,
                         kop.outputs[0].type)


def _gemm_problem(W: int, a, b, y) -> str | None:
    """What a fused fp8 GEMM + reduction of ``a`` x ``b`` into ``y`` over W ranks needs
    whatever the collective: a tensor map per peer (W up to RS_MAX_WORLD), 2-D operands, a
    bf16 / f16 result."""
    if W > RS_MAX_WORLD:
        return f"W = {W} above {RS_MAX_WORLD}"
    if any(len(t.get_shape()) != 2 for t in (a, b, y)):
        return f"operands are not 2-D ({a}, {b} -> {y})"
    if type(y.element_type) not in _OUT:
        return (f"result {y.element_type}: the scheduled fp8 GEMM stores bf16 or f16 (the "
                "portable lowering runs an f32 result)")
    return None


def shape_problem(W: int, a, b, y) -> str | None:
    """Why a W-rank fp8 GEMM + reduce-scatter of row chunks of ``a`` [M, K] x ``b`` [K, N]
    into ``y`` [M / W, N] has no scheduled kernel (None: it has one); overlap asks this
    before it fuses, so that nothing it fuses falls to the portable path."""
    if (why := _gemm_problem(W, a, b, y)):
        return why
    (M, K), N = a.get_shape(), b.get_shape()[1]
    if M % W or tuple(y.get_shape()) != (M // W, N):
        return f"A {a} x B {b} -> {y} is not a reduce-scatter of {W} row chunks"
    if K % 16 or N % 16:
        return f"N = {N} and K = {K} must be multiples of 16 (fp8 TMA rows, wgmma k32)"
    return None


def ar_problem(W: int, a, b, y, arch: str = "sm_90a") -> str | None:
    """Why a W-rank fp8 GEMM ``a`` [M, K] x ``b`` [K, N] + all-reduce into ``y`` [M, N] has
    no scheduled kernel (None: it has one)."""
    from pkc.passes.fused_ar_build import ar_into_output

    if arch == "sm_100a" and ar_into_output(W):
        return (f"GEMM + all-reduce at W = {W} on sm_100a: the fresh-output kernel scales "
                "each piece in one of two branches (stored, or summed with the peer's), "
                "which the tcgen05 scale lowering refuses (it checks statically that no "
                "region is scaled twice before a store); scheduled at W = 1 and above 2")
    if (why := _gemm_problem(W, a, b, y)):
        return why
    (M, K), N = a.get_shape(), b.get_shape()[1]
    if tuple(y.get_shape()) != (M, N):
        return f"A {a} x B {b} -> {y} is not an all-reduce of the product"
    if K % 16 or N % 16:
        return f"N = {N} and K = {K} must be multiples of 16 (fp8 TMA rows, wgmma k32)"
    if M < W or (W > 2 and M % W):
        return (f"M = {M} rows do not split into {W} chunks (above W = 2: a reduce-scatter "
                "of whole chunks, then an all-gather)")
    return None


def schedule_scaled_ar(kop: k.KernelOp, target: str, variant: str, build_rs,
                       clc: str = "auto") -> None:
    """The fp8 GEMM + all-reduce ``kop`` (:func:`ar_problem` said yes) as the bf16 kernels
    build it: W <= 2 the broadcast kernel, above the pair whose GEMM + reduce-scatter
    ``build_rs(kop, chunk type)`` builds (schedule-fused's, with the scales)."""
    from pkc.passes import fused_ar_pair
    from pkc.passes.fused_ar_build import schedule_ar

    dt = _OUT[type(kop.outputs[0].type.element_type)]
    if fused_ar_pair.is_pair(kop, Pattern.MM_ALL_REDUCE):
        fused_ar_pair.schedule_pair(kop, target, dt, build_rs)
    else:
        schedule_ar(kop, target, variant, dt, clc)


def ag_problem(W: int, x, sx, b, sb, outs, arch: str = "sm_90a",
               blocks: int = 1) -> str | None:
    """Why a W-rank fp8 all-gather of ``x`` [Mc, K] + scaled matmul with ``b`` [K, N]
    (scales ``sx``: tensor-wise, or A's row-wise [Mc, 1] shard scale gathered with A;
    ``sb``) into ``outs`` (Y [W Mc, N], and G) has no scheduled kernel on ``arch``;
    ``blocks`` > 1: the shard is that many blocks of rows (a gather along a middle dim,
    :mod:`pkc.passes.ag_blocks_schedule`; its row scales in the same layout)."""
    if len(sx.get_shape()) == 2 and arch != "sm_90a" and W > 1:
        return (f"A's row-wise scale (gathered with A): scheduled on sm_90a only, not {arch} "
                "(the tensor-wise form is)")
    if blocks > 1 and x.get_shape()[0] % blocks:
        return f"the shard's {x.get_shape()[0]} rows are not {blocks} blocks"
    if any(len(t.get_shape()) != 2 for t in (x, b, *outs)):
        return f"operands are not 2-D ({x}, {b})"
    if type(outs[0].element_type) not in _OUT:
        return (f"result {outs[0].element_type}: the scheduled fp8 GEMM stores bf16 or f16 (the "
                "portable lowering runs an f32 result)")
    (Mc, K), N = x.get_shape(), b.get_shape()[1]
    if tuple(outs[0].get_shape()) != (W * Mc, N):
        return f"shard {x} x B {b} -> {outs[0]} is not a gather of {W} shards"
    if K % 16 or N % 16:
        return f"N = {N} and K = {K} must be multiples of 16 (fp8 TMA rows, wgmma k32)"
    if W * Mc * K >= 1 << 31:
        return f"the gathered A ({W * Mc * K} bytes) needs 64-bit offsets"
    return None


def ag_many_problem(W: int, ins, outs, arch: str = "sm_90a", blocks: int = 1) -> str | None:
    """Why a W-rank fp8 all-gather + several scaled matmuls (``ins``: X, SX, B0.., SB0..;
    ``outs``: Y0.. (and G)) has no scheduled kernel over every weight
    (:class:`pkc.passes.gather_many.ManyWeights`: each tile's B and C maps and B scale
    selected by its weight): each weight's as :func:`ag_problem` says, one fp8 type and
    one scale kind (tensor-wise or row-wise) for every B, one result type; sm_90a, and
    sm_100a where one weight is (the tensor-memory GEMM's epilogue reads the selected
    scale as the wgmma one does; A's row scales gathered with A are sm_90a only)."""
    n = (len(ins) - 2) // 2
    x, sx, bs, sbs = ins[0], ins[1], ins[2:2 + n], ins[2 + n:2 + 2 * n]
    if arch not in ("sm_90a", "sm_100a"):
        return f"{n} fp8 weights of one gather on {arch}: no fused fp8 GEMM schedule"
    if len({str(b.element_type) for b in bs}) > 1 or len({len(s.get_shape()) for s in sbs}) > 1:
        return (f"the {n} weights differ in fp8 type or in B's scale kind (tensor-wise / "
                "row-wise): one kernel multiplies one pair of types, selects one kind")
    if len({str(o.element_type) for o in outs[:n]}) > 1:
        return f"the {n} results differ in type"
    for b, sb, y in zip(bs, sbs, outs[:n]):
        if (why := ag_problem(W, x, sx, b, sb, [y], arch, blocks)):
            return why
    return None


def agk_problem(W: int, x, b, outs, arch: str = "sm_90a") -> str | None:
    """Why a W-rank fp8 all-gather along K of ``x`` [M, Kc] + scaled matmul with ``b``
    [W Kc, N] into ``outs`` (Y [M, N], and G [M, W Kc]) has no scheduled kernel (the
    scales take any form torch's ``_scaled_mm`` does: the plain epilogue scales the sum
    over every shard once, so the tensor-memory GEMM of sm_100a takes it as well)."""
    if any(len(t.get_shape()) != 2 for t in (x, b, *outs)):
        return f"operands are not 2-D ({x}, {b})"
    if type(outs[0].element_type) not in _OUT:
        return (f"result {outs[0].element_type}: the scheduled fp8 GEMM stores bf16 or f16 (the "
                "portable lowering runs an f32 result)")
    (M, Kc), (K, N) = x.get_shape(), b.get_shape()
    if K != W * Kc or tuple(outs[0].get_shape()) != (M, N):
        return f"shard {x} x B {b} -> {outs[0]} is not a gather of {W} K shards"
    if Kc % 16 or N % 16:
        return (f"N = {N} and the shard's K = {Kc} must be multiples of 16 (fp8 TMA rows, "
                "wgmma k32)")
    if W * M * Kc >= 1 << 31:
        return f"the gathered A ({W * M * Kc} bytes) needs 64-bit offsets"
    return None


def fp8_operands(kop: k.KernelOp, a=None, b=None):
    """(B as the fp8 GEMM reads it: [N, K], K-major; its layout; the result's type name;
    (A's, B's) fp8 type names). A B given [K, N] gets a ``pk.transpose`` before the kernel
    (a view when B is torch's column-major ``mat2``). ``a``, ``b``: the operands where they
    are not the kernel's first two inputs (all-gather: X, SX, B, SB)."""
    from pkc.passes.fused_schedule import b_operand   # (the GEMM builders, imported late)

    if a is None:
        a, b = kop.inputs[:2]
    b_val, layout = b_operand(b)
    if layout is BLayout.KN:
        t = g.TransposeOp(b, [1, 0])
        t.location = kop.location
        Rewriter.insert_op(t, InsertPoint.before(kop))
        b_val, layout = t.result, BLayout.NK
    out = _OUT[type(kop.outputs[0].type.element_type)]
    return b_val, layout, out, (_FP8[type(a.type.element_type)], _FP8[type(b.type.element_type)])


__all__ = ["why_not_scaled", "fp8_operands", "shape_problem", "ag_problem", "ag_many_problem",
           "agk_problem",
           "ar_problem", "schedule_scaled_ar"]
