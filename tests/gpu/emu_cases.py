"""The cases of tests/gpu/emu_vs_gpu.py: every sm_90a kernel kind pkc builds, small shapes,
each with how it is compiled (on the CPU and again on the GPU machine: the PTX hashes must
match), its random inputs, how the emulator runs it and how the GPU runs it (the runtime's
own runners: ScheduledKernel, VirtualWorld, ScheduledCollective, ScheduledFused,
ScheduledAgGemm, ScheduledMoe, ScheduledPair over VirtualPeers), first launch of fresh
runners on both sides (the same epochs).

Bitwise is expected where every element's arithmetic has one order. Where the hardware
leaves it open, a case carries a tolerance and its reason: only TMA reduce-adds into one
chunk from two or more peers (W > 2 GEMM + reduce-scatter), whose arrival order decides
the order of the bf16 roundings. Every other reduction here (the collectives' sums, which
load the peers' data and add in program order; W = 2 fused kernels, where the own chunk is
stored or kept before the one peer's partial is added, behind a wait) has one order.

Kernel choices the tuning tables make by size (LL below a limit, fresh outputs at W = 2)
are forced per case by setting the table's constant while compiling (``tuning``), so that
the other kind is covered at a small size; the PTX hash check covers the GPU side.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import sys
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
for _p in (ROOT, ROOT / "benchmarks"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

TIMEOUT_NS = 500_000_000        # a broken protocol costs half a second, not a hang
REDUCE_ADD_WHY = ("the peers' partials of a chunk arrive by TMA reduce-add in an order the "
                  "hardware leaves open (one bf16 rounding per add): within W bf16 steps "
                  "(2^-7 each) of the largest |result|")
CT, FT = "pkc.target.comm_tuning", "pkc.target.fused_tuning"


class Family(Enum):
    """How a case is compiled and launched."""

    GEMM = "gemm"           # schedule-matmul, one rank, ScheduledKernel
    GENERAL = "general"     # the portable path's kernel, VirtualWorld
    COMM = "comm"           # schedule-collectives, ScheduledCollective
    FUSED = "fused"         # schedule-fused GEMM + RS / AR, ScheduledFused
    AG_GEMM = "ag_gemm"     # schedule-fused all-gather + GEMM, ScheduledAgGemm
    MOE = "moe"             # schedule-moe, ScheduledMoe
    PAIR = "pair"           # schedule-fused GEMM + AR at W > 2: two kernels, ScheduledPair


@dataclass(frozen=True)
class Case:
    name: str
    family: Family
    kind: str                   # the kernel kind, as the table prints it
    W: int
    shapes: dict
    tuning: tuple = ()          # (module, constant, value) set while compiling
    tolerance: float | None = None    # max |gpu - emu| / max |emu| accepted, not bitwise
    reason: str = ""
    sms: int = 2                # the emulator's SMs per rank
    expect: str = ""            # the plan's comm_kind the compile must give (COMM); the
    # plan's other entries it must give: extra["plan"] (a tuning constant that took effect)
    extra: dict = field(default_factory=dict)


def _comm(name, coll, algo, W, nbytes, expect, tuning=(), dt="bf16", plan=None):
    label = f"{expect} {coll}" + "".join(f" {v}" for v in (plan or {}).values())
    return Case(name, Family.COMM, label + ("" if dt == "bf16" else f" {dt}"), W,
                {"bytes": nbytes, "dtype": dt}, tuning=tuning, expect=expect,
                extra={"coll": coll, "algo": algo, "plan": plan or {}})


GEMMS = [("gemm_128x128x64", (128, 128, 64), "", "nk"),
         ("gemm_200x136x72_tails", (200, 136, 72), "128x128_s6_tma", "nk"),
         ("gemm_256x256x128_kn", (256, 256, 128), "128x256_s4_kn", "kn"),
         ("gemm_256x256x128_cl2", (256, 256, 128), "128x128_s6_cl2", "nk"),
         ("gemm_256x512x192_128x256", (256, 512, 192), "128x256_s4_tma", "nk")]
# every other tile variant of the tuning table, two output tiles each (the schedule-matmul
# variants a program can run: the whole table is checked, not a sample)
GEMMS += [(f"gemm_variant_{v}", (2 * bm if bm == 256 else 256 if bm == 128 else 128, 2 * bn, 128), v, "nk")
          for v, bm, bn in (("128x160_s5_cl2", 128, 160), ("128x160_s5_tma", 128, 160),
                            ("128x192_s4_cl2", 128, 192), ("128x192_s4_tma", 128, 192),
                            ("128x224_s4_tma", 128, 224),
                            ("128x256_s3_global", 128, 256), ("128x256_s4_cl2", 128, 256),
                            ("128x256_s4_g16", 128, 256), ("128x256_s4_global", 128, 256),
                            ("256x128_s4_cl2", 256, 128), ("256x128_s4_tma", 256, 128),
                            ("64x256_c1_s5", 64, 256))]
GENERAL = ["ar_f32", "mm_rs", "ag_mm", "a2a_mm"]
# fp8 scaled matmuls fused with their collective (the portable path: no fp8 wgmma yet),
# from the fp8 overlap tests: A's row-wise scale gathered with A; a reduce-scatter of f32
GENERAL_FP8 = {"fp8_ag_mm": ("ag_ir", (2, 40, 48, 64, True)),
               "fp8_mm_rs": ("red_ir", (2, 80, 48, 64, False, "f32"))}
NO_LL = ((CT, "LL_MAX_BYTES", 0), (CT, "LL_GATHER_MAX_BYTES", 0))


def cases() -> list[Case]:
    out = [Case(n, Family.GEMM, f"gemm {v or 'default'}", 1, dict(zip("MNK", s), layout=lay),
                extra={"shape": s, "variant": v, "layout": lay}) for n, s, v, lay in GEMMS]
    out += [Case(f"general_{n}_w2", Family.GENERAL, f"general {n}", 2, {})
            for n in GENERAL + list(GENERAL_FP8)]
    out += [
        _comm("comm_ll_ar_w2", "all_reduce", "one_shot", 2, 64 << 10, "ll"),
        _comm("comm_ll_ar_w4", "all_reduce", "one_shot", 4, 32 << 10, "ll"),
        _comm("comm_ar1_w2", "all_reduce", "one_shot", 2, 64 << 10, "ar1", NO_LL),
        _comm("comm_ar2_w2", "all_reduce", "two_shot", 2, 256 << 10, "ar2"),
        _comm("comm_ar2_w4", "all_reduce", "two_shot", 4, 128 << 10, "ar2"),
        _comm("comm_ar2_pull_w4", "all_reduce", "two_shot", 4, 256 << 10, "ar2",
              ((CT, "AR2_PULL_MIN_BYTES", 0), (CT, "AR2_GROUPS_MIN_BYTES", 0)),
              plan={"gather": "pull", "groups": 2}),
        _comm("comm_f32_ll_ar_w2", "all_reduce", "one_shot", 2, 32 << 10, "ll", dt="f32"),
        _comm("comm_f16_ar2_w4", "all_reduce", "two_shot", 4, 128 << 10, "ar2", dt="f16"),
        _comm("comm_llag_w2", "all_gather", "direct", 2, 64 << 10, "llag"),
        _comm("comm_ag_w2", "all_gather", "direct", 2, 256 << 10, "ag", NO_LL),
        _comm("comm_llrs_w2", "reduce_scatter", "direct", 2, 64 << 10, "llrs"),
        _comm("comm_rs_w2", "reduce_scatter", "direct", 2, 256 << 10, "rs", NO_LL),
        _comm("comm_rs_w4", "reduce_scatter", "direct", 4, 128 << 10, "rs", NO_LL),
        _comm("comm_agp_w2", "all_gather", "pull", 2, 64 << 10, "agp"),
        _comm("comm_agp_w3", "all_gather", "pull", 3, 3 * 2 * 12344, "agp"),
        _comm("comm_a2a_w2", "all_to_all", "direct", 2, 64 << 10, "a2a"),
        _comm("comm_a2a_w3", "all_to_all", "direct", 3, 3 * 3 * 2 * 4104, "a2a"),
        # fp8 moves as bytes (no arithmetic): the data-movement kinds only
        _comm("comm_fp8_llag_w2", "all_gather", "direct", 2, 32 << 10, "llag", dt="f8E4M3FN"),
        _comm("comm_fp8_ag_w2", "all_gather", "direct", 2, 128 << 10, "ag", NO_LL, dt="f8E5M2"),
        _comm("comm_fp8_a2a_w2", "all_to_all", "direct", 2, 32 << 10, "a2a", dt="f8E4M3FN"),
    ]
    mm = {"Mc": 67, "N": 136, "K": 72, "layout": "nk"}      # reduce-scatter: chunk rows Mc

    def fused(name, kind, W, shapes, fresh, **kw):
        op = kind[5:7]
        return Case(name, Family.FUSED, kind, W, shapes, extra={"op": op, "plan": {
            "fused_kind": op, "fresh_output": fresh}}, **kw)
    out += [
        fused("fused_rs_w2_fresh", "gemm+rs fresh output", 2, mm, True),
        fused("fused_f16_rs_w2_fresh", "gemm+rs fresh output f16", 2, {**mm, "dtype": "f16"}, True),
        fused("fused_rs_w2_persistent", "gemm+rs persistent", 2, mm, False,
              tuning=((FT, "RS_INTO_OUTPUT", False),)),
        fused("fused_rs_w3", "gemm+rs reduce-add", 3, {**mm, "layout": "kn"}, False,
              tolerance=3 * 2 ** -7, reason=REDUCE_ADD_WHY),
        fused("fused_ar_w1", "gemm+ar", 1, {"M": 137, "N": 136, "K": 72, "layout": "nk"}, False),
        fused("fused_ar_w2_fresh", "gemm+ar fresh output", 2,
              {"M": 137, "N": 136, "K": 72, "layout": "kn"}, True),
        fused("fused_ar_w2_persistent", "gemm+ar persistent", 2,
              {"M": 129, "N": 72, "K": 136, "layout": "nk"}, False,
              tuning=((FT, "AR_INTO_OUTPUT", False),)),
        Case("ag_gemm_w2", Family.AG_GEMM, "ag+gemm", 2, {**mm, "gathered": True}),
        Case("ag_gemm_w3_kn", Family.AG_GEMM, "ag+gemm", 3,
             {"Mc": 45, "N": 200, "K": 136, "layout": "kn", "gathered": False}),
        Case("moe_w2", Family.MOE, "moe dispatch+grouped gemm+combine", 2,
             {"E": 2, "C": 136, "N": 72, "K": 72}, sms=4),
        Case("pair_mm_ar_w3", Family.PAIR, "gemm+ar pair (rs + agp)", 3,
             {"Mc": 33, "N": 40, "K": 72, "layout": "kn"}, tolerance=3 * 2 ** -7,
             reason=REDUCE_ADD_WHY),
    ]
    return out + new_kinds()


# The kinds added in session 10 (prefix ``new_``): the scheduled fp8 GEMM (e4m3 / e5m2,
# tensor-wise / row-wise scales, bias), the fused fp8 GEMM + reduce-scatter, and the
# GEMM + reduce-scatter layouts (columns, row blocks of a 3-D result, a bias in the
# epilogue). W = 1 and 2: every element's adds have one order (W = 2: the own partial is
# stored before the one peer's is added, behind a wait), so bitwise is expected; the W = 3
# column kernel is the fixed-order (deterministic=true, rank-ring) variant: one order too.
# The fp8 kernels are expected bitwise too: the emulator's fp8 wgmma k32 step (terms
# aligned 13 bits below the step's largest, the sum kept to 13 fraction bits: pkc/emu/
# ops_sm90.py) equalled the H200 on every fp8 case of the 2026-12-02 (t) run. Only the
# W = 3 CTA-pair case whose partials meet by TMA reduce-add keeps REDUCE_ADD_WHY.
NEW_FP8_GEMMS = [  # name, (M, N, K), row-wise, bias, A type, B type, variant
    ("new_fp8_gemm_e4m3_tensor", (136, 144, 160), False, False, "e4m3", "e4m3", "128x128_s6_tma"),
    ("new_fp8_gemm_e4m3_e5m2_row_bias", (72, 48, 96), True, True, "e4m3", "e5m2", ""),
    ("new_fp8_gemm_e5m2_row", (130, 256, 128), True, False, "e5m2", "e5m2", "64x256_c1_s5"),
]


def new_kinds() -> list[Case]:
    out = [Case(n, Family.GEMM, f"fp8 gemm {ta}x{tb} {'row' if row else 'tensor'}"
                + (" +bias" if bias else ""), 1, dict(zip("MNK", s), row=row, bias=bias),
                extra={"fp8": (s, row, bias, ta, tb), "variant": v})
           for n, s, row, bias, ta, tb, v in NEW_FP8_GEMMS]

    def rs(name, kind, W, ir, plan, opts=""):
        # W > 2 reduce-adds in arrival order, unless the adds go round the rank ring
        open_order = W > 2 and plan.get("add_order") != "rank-ring"
        tol = {"tolerance": W * 2 ** -7, "reason": REDUCE_ADD_WHY} if open_order else {}
        return Case(name, Family.FUSED, kind, W, {"ir": ir[0], "args": list(ir[1:])},
                    extra={"op": "rs", "ir": ir, "opts": opts, "plan": plan}, **tol)
    out += [
        rs("new_fp8_rs_w1_row", "fp8 gemm+rs row", 1, ("fp8_rs", 1, 40, 48, 64, True),
           {"fused_kind": "rs"}),
        rs("new_fp8_rs_w2_tensor", "fp8 gemm+rs tensor", 2, ("fp8_rs", 2, 26, 32, 128, False),
           {"fused_kind": "rs"}),
        rs("new_rs_cols_w1", "gemm+rs columns", 1, ("rs", 1, (37,), 1, 24, 40, "nk"),
           {"fused_kind": "rs", "scatter_dim": 1}),
        rs("new_rs_cols_w2", "gemm+rs columns", 2, ("rs", 2, (37,), 1, 48, 24, "kn"),
           {"fused_kind": "rs", "scatter_dim": 1}),
        rs("new_rs_cols3d_w3_det", "gemm+rs columns 3-d rank-ring", 3,
           ("rs", 3, (2, 35), 2, 72, 40, "nk"),
           {"fused_kind": "rs", "scatter_dim": 1, "add_order": "rank-ring"},
           "{deterministic=true}"),
        rs("new_rs_blocks_w2", "gemm+rs row blocks 3-d", 2, ("rs", 2, (2, 128), 1, 24, 16, "kn"),
           {"fused_kind": "rs", "scatter_dim": 0, "batches": 2}),
        rs("new_rs_blocks_odd_w2", "gemm+rs row blocks 3-d maps", 2,
           ("rs", 2, (3, 42), 1, 40, 24, "nk"), {"fused_kind": "rs", "scatter_dim": 0, "batches": 3}),
        rs("new_rs_bias_rows_w2", "gemm+bias+rs rows", 2, ("bias", 2, (74,), 0, 40, 24),
           {"fused_kind": "rs", "bias": True}),
        rs("new_rs_bias_cols3d_w1", "gemm+bias+rs columns 3-d", 1, ("bias", 1, (3, 7), 2, 32, 24),
           {"fused_kind": "rs", "bias": True}),
        # forced tiles: ping-pong consumers; CTA pairs (one row tile a chunk: a pair's
        # second tile lies past it)
        rs("new_fp8_rs_w2_pingpong", "fp8 gemm+rs ping-pong", 2,
           ("fp8_rs", 2, 2 * 136, 272, 128, True), {"fused_kind": "rs", "pingpong": True},
           "{variant=128x128_pp_s6}"),
        rs("new_fp8_rs_w3_pairs", "fp8 gemm+rs CTA pairs", 3,
           ("fp8_rs", 3, 3 * 72, 528, 128, False), {"fused_kind": "rs"},
           "{variant=128x256_s4_cl2}"),
        # the same in a fixed add order (rank-ring): no arrival-order rounding between them
        rs("new_fp8_rs_w3_ordered_pairs", "fp8 gemm+rs CTA pairs rank-ring", 3,
           ("fp8_rs", 3, 3 * 72, 528, 128, False), {"fused_kind": "rs", "add_order": "rank-ring"},
           "{variant=128x256_s4_cl2 deterministic=true}"),
    ]
    # the all-gather along K (pkc/passes/ag_k_schedule.py; Mc: the shard's rows M, K: its
    # Kc): every tile's K loop walks the shards in one order (the own one first), so
    # bitwise at any W; the slots of G other than the own one are compared (valid_mask)
    out += [Case("new_agk_w2_gathered", Family.AG_GEMM, "ag(K)+gemm", 2,
                 {"Mc": 67, "N": 136, "K": 72, "layout": "nk", "gathered": True,
                  "along_k": True}),
            Case("new_agk_w3_kn", Family.AG_GEMM, "ag(K)+gemm", 3,
                 {"Mc": 45, "N": 200, "K": 136, "layout": "kn", "gathered": False,
                  "along_k": True})]
    # the gather along dim 1 of [B, S/W, H] (pkc/passes/ag_blocks_schedule.py; Mc: the
    # shard's B*Sc rows): G returned, so every row of it is compared
    out += [Case(f"new_agblocks_w{W}_b{B}", Family.AG_GEMM, "ag(dim 1)+gemm", W,
                 {"Mc": B * Sc, "N": N, "K": K, "layout": "kn", "gathered": True,
                  "blocks": B})
            for W, B, Sc, N, K in ((2, 2, 37, 136, 72), (3, 3, 21, 200, 136))]
    # one gather feeding several matmuls, one kernel (pkc/passes/gather_many.py; "ns": the
    # weights' N, each [N_i, K] transposed): a C per weight, then G
    out += [Case("new_agmany_w2_3w", Family.AG_GEMM, "ag+3 gemms", 2,
                 {"Mc": 67, "ns": (136, 40, 72), "K": 72, "gathered": True}),
            Case("new_agmany_w3_2w", Family.AG_GEMM, "ag+2 gemms", 3,
                 {"Mc": 45, "ns": (200, 56), "K": 136, "gathered": False})]
    return out


@contextlib.contextmanager
def tuned(settings):
    """The tuning constants of ``settings`` set for the block, restored after."""
    saved = []
    try:
        for mod, name, value in settings:
            m = importlib.import_module(mod)
            saved.append((m, name, getattr(m, name)))
            setattr(m, name, value)
        yield
    finally:
        for m, name, value in reversed(saved):
            setattr(m, name, value)


# ---- compile ---------------------------------------------------------------------------


def _kernels(text: str, pipeline: str, file: str) -> list:
    from pkc.codegen.emit import kernels_of
    from pkc.ir import make_context, parse_module, verify_module
    from pkc.passes.registry import parse_pipeline

    ctx = make_context()
    m = parse_module(text, file, ctx=ctx)
    for p in parse_pipeline(pipeline):
        p.apply(ctx, m)
    verify_module(m)
    return [k for k in kernels_of(m) if k.schedule() is not None]


def _gemm(c: Case) -> list:
    from gemm_ir import module_text

    from pkc.passes.schedule_matmul import ScheduleMatmul
    from pkc.codegen.emit import kernels_of
    from pkc.ir import make_context, parse_module

    x = c.extra
    if "fp8" in x:
        from fp8_gemm import module_text as fp8_text

        shape, row, bias, ta, tb = x["fp8"]
        m = parse_module(fp8_text(*shape, row, bias, ta, tb), "fp8_gemm.mlir")
        ScheduleMatmul(variant=x["variant"]).apply(make_context(), m)
        return kernels_of(m)
    m = parse_module(module_text(*x["shape"], x["layout"]), "gemm.mlir")
    ScheduleMatmul(variant=x["variant"]).apply(make_context(), m)
    return kernels_of(m)


def _general(c: Case) -> list:
    sys.path.insert(0, str(ROOT / "tests" / "unit"))
    from test_emu_kernels import GRAPHS

    from pkc.codegen.emit import kernels_of
    from pkc.ir import make_context, parse_module
    from pkc.passes import parse_pipeline

    name, W = c.name[len("general_"):-3], c.W
    ctx = make_context()
    if name in GENERAL_FP8:
        import test_fp8_overlap

        build, args = GENERAL_FP8[name]
        text = getattr(test_fp8_overlap, build)(*args)
    else:
        text = GRAPHS[name].format(W=W, M=16 * W, M8=8 * W)
    m = parse_module(text, name, ctx=ctx)
    for p in parse_pipeline("default{force=true}"):
        p.apply(ctx, m)
    return kernels_of(m)[:1]


def _comm_kops(c: Case) -> list:
    from collectives_ir import ESIZE, module_text

    coll, W, dt = c.extra["coll"], c.W, c.shapes["dtype"]
    n = c.shapes["bytes"] // ESIZE[dt]
    if coll == "all_to_all":
        t = f"tensor<{n}x{dt}>"
        return _kernels(f"func.func @f(%x: {t}) -> {t} {{\n  %y = pk.all_to_all %x {{world = {W} : "
                        f"i64, split_dim = 0 : i64, concat_dim = 0 : i64}} : {t} -> {t}\n"
                        f"  func.return %y : {t}\n}}\n", "lower-collectives,schedule-collectives",
                        "a2a.mlir")
    if c.extra["algo"] == "pull":
        from collectives_ir import _agp_kernel

        return [_agp_kernel(W, n // W, dt)[1]]
    text, _, _ = module_text(coll, W, c.shapes["bytes"], dt)
    return _kernels(text, f"lower-collectives{{{coll}={c.extra['algo']}}},schedule-collectives",
                    "collectives.mlir")


def _fused_kops(c: Case) -> list:
    s = c.shapes
    if c.family is Family.FUSED and "ir" in c.extra:
        return _kernels(_new_fused_text(c.extra["ir"]),
                        f"default{{force=true}},schedule-fused{c.extra['opts']},dce", "new.mlir")
    if c.family is Family.FUSED:
        from fused_ar_ir import module_text

        M = s["Mc"] * c.W if c.extra["op"] == "rs" else s["M"]
        text = module_text(c.extra["op"], c.W, M, s["N"], s["K"], s["layout"], s.get("dtype", "bf16"))
        return _kernels(text, "default{force=true},schedule-fused,dce", "fused.mlir")
    if c.family is Family.AG_GEMM and s.get("blocks"):     # B blocks of Mc / B rows
        from fused_ag_blocks import scheduled_module as blocks_module
        from pkc.codegen.emit import kernels_of

        B = s["blocks"]
        m = blocks_module(c.W, B, s["Mc"] // B, s["N"], s["K"], s["gathered"])
        return [k for k in kernels_of(m) if k.schedule() is not None]
    if c.family is Family.AG_GEMM and s.get("ns"):       # several weights
        from fused_ag_many import scheduled_module as many_module
        from pkc.codegen.emit import kernels_of

        m = many_module(c.W, s["Mc"], s["K"], s["ns"], s["gathered"])
        return [k for k in kernels_of(m) if k.schedule() is not None]
    if c.family is Family.AG_GEMM:
        if s.get("along_k"):    # the gather along K: Mc = the shard's rows M, K = its Kc
            from fused_ag_k_ir import scheduled_module
        else:
            from fused_ag_ir import scheduled_module

        m = scheduled_module(c.W, s["Mc"], s["N"], s["K"], s["layout"], s["gathered"])
        from pkc.codegen.emit import kernels_of
        return [k for k in kernels_of(m) if k.schedule() is not None]
    if c.family is Family.MOE:
        from moe_ir import module_text

        text = module_text(c.W, s["E"], s["C"], s["N"], s["K"])
        return _kernels(text, "default{force=true},schedule-moe,dce", "moe.mlir")
    from fused_ar_ir import module_text

    text = module_text("ar", c.W, c.W * s["Mc"], s["N"], s["K"], s["layout"])
    return _kernels(text, "default{force=true},schedule-fused,dce", "pair.mlir")


def _new_fused_text(ir: tuple) -> str:
    """The graph-level IR of a ``new_`` fused case: the unit tests' builders."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    kind, *args = ir
    if kind == "fp8_rs":
        from tests.unit.test_fp8_overlap import red_ir

        return red_ir(*args, "bf16")
    from tests.unit.test_schedule_fused_layouts import bias_text, rs_text

    return bias_text(*args) if kind == "bias" else rs_text(*args)


def build(c: Case) -> list:
    """[(pk.kernel op, compiled kernel)] of the case (two for the pair, else one)."""
    from pkc.codegen import compile_kernel
    from pkc.passes.remarks import plan_of

    with tuned(c.tuning):
        kops = {Family.GEMM: _gemm, Family.GENERAL: _general, Family.COMM: _comm_kops}.get(
            c.family, _fused_kops)(c)
        want = 2 if c.family is Family.PAIR else 1
        if len(kops) != want:
            raise RuntimeError(f"{c.name}: {len(kops)} scheduled kernels, expected {want}")
        want_plan = {**({"comm_kind": c.expect} if c.expect else {}), **c.extra.get("plan", {})}
        got = {k: plan_of(kops[0]).get(k) for k in want_plan}
        if got != want_plan:
            raise RuntimeError(f"{c.name}: the pass chose {got}, not {want_plan} (a tuning "
                               "constant not applied?)")
        return [(k, compile_kernel(k, "sm_90a")) for k in kops]


def ptx_hash(kernels) -> str:
    h = hashlib.sha256()
    for _, ck in kernels:
        h.update(ck.ptx.encode())
    return h.hexdigest()


# ---- inputs and the emulator ------------------------------------------------------------


def make_inputs(c: Case, kernels, seed: int) -> list[list[torch.Tensor]]:
    from pkc.interp.values import torch_dtype

    kop = kernels[0][0]
    gen = torch.Generator().manual_seed(seed)
    xs = [[torch.randn(tuple(v.type.get_shape()), generator=gen).to(torch_dtype(v.type.element_type))
           for v in kop.inputs] for _ in range(c.W)]
    if "fp8" in c.extra or c.extra.get("ir", ("",))[0] == "fp8_rs":   # scales in [0.5, 1.5)
        for r in range(c.W):
            for i in (2, 3):
                xs[r][i] = torch.rand(xs[r][i].shape, generator=gen) + 0.5
    if c.extra.get("ir", ("",))[0] == "bias":       # the graph's scale constant of the bias
        for r in range(c.W):
            xs[r][3] = torch.ones_like(xs[r][3])
    if c.family is Family.MOE:          # unequal loads: random rows per block, one full, one empty
        C, blocks = c.shapes["C"], c.W * c.shapes["E"]
        for r in range(c.W):
            xs[r][2] = torch.randint(0, C + 1, (blocks,), generator=gen, dtype=torch.int32)
        xs[0][2][0], xs[-1][2][-1] = C, 0
    return xs


def emulate_case(c: Case, kernels, x) -> list[list[torch.Tensor]]:
    from pkc.emu import emulate

    kop, ck = kernels[0]
    sms = c.sms + (getattr(ck.meta.fused, "side_ctas", 0) if c.family is Family.AG_GEMM else 0)
    out = emulate(ck, x, kop=kop, sms=sms)
    if c.family is Family.PAIR:         # the pull all-gather of the chunks the first left
        ag_op, ag_ck = kernels[1]
        out = [o + g for o, g in zip(out, emulate(ag_ck, [[o[0]] for o in out], kop=ag_op, sms=sms))]
    return out


def reference_equal(c: Case, x, out) -> bool | None:
    """A collective's emulated outputs against torch, bitwise (the kernels sum the ranks
    in rank order in f32 and round once): a check of the emulator run itself, recorded by
    ``prepare``; None for the other families (their tests compare within bounds)."""
    if c.family is not Family.COMM:
        return None
    W, coll = c.W, c.extra["coll"]
    xs = [x[r][0].reshape(-1) for r in range(W)]
    acc = xs[0].float()
    for t in xs[1:]:
        acc = acc + t.float()
    total = acc.to(xs[0].dtype)
    for r in range(W):
        want = {"all_reduce": lambda: total, "reduce_scatter": lambda: total.chunk(W)[r],
                "all_gather": lambda: torch.cat(xs),
                "all_to_all": lambda: torch.cat([xs[p].reshape(W, -1)[r] for p in range(W)])}[coll]()
        if not torch.equal(out[r][0].reshape(-1), want):
            return False
    return True


def valid_mask(c: Case, x, r: int, j: int, t: torch.Tensor):
    """Where output ``j`` of rank ``r`` is part of the result (None: everywhere). MoE: the
    rows below the counts of the result [W*E, C, N] and of the expert operand [E*W*C, K]
    (block (e, s): rank s's tokens for expert e of rank r; the own block is read from the
    input, not copied; pkc/passes/moe_schedule.py); all-gather + GEMM without the gathered
    result: the gathered operand but the own shard (read from the input, not copied)."""
    if c.family is Family.AG_GEMM and j == len(c.shapes.get("ns", (0,))) \
            and not c.shapes["gathered"]:
        mask = torch.ones(t.shape, dtype=torch.bool)
        mask[r * c.shapes["Mc"]:(r + 1) * c.shapes["Mc"]] = False
        return mask
    if c.family is not Family.MOE:
        return None
    W, E, C = c.W, c.shapes["E"], c.shapes["C"]
    mask = torch.zeros(t.shape, dtype=torch.bool)
    if j == 0 and tuple(t.shape[:2]) == (W * E, C):
        for b in range(W * E):
            mask[b, :int(x[r][2][b])] = True
        return mask
    if j == 1 and tuple(t.shape[:1]) == (E * W * C,):
        for e in range(E):
            for s in range(W):
                if s != r:
                    first = (e * W + s) * C
                    mask[first:first + int(x[s][2][r * E + e])] = True
        return mask
    raise RuntimeError(f"{c.name}: no rule for the valid part of output {j} {list(t.shape)}")


# ---- the GPU --------------------------------------------------------------------------

_PEERS: dict = {}
# every runner stays alive to the end: ScheduledCollective keys its persistent buffers by
# id(self), and a reused id would hand a later case the pads (epochs) of an earlier one
_KEEP: list = []


def _peers(W: int):
    from pkc.runtime.peers import VirtualPeers

    if W not in _PEERS:
        _PEERS[W] = VirtualPeers(W)
    return _PEERS[W]


def _nan(shape, dt):
    return torch.full(tuple(shape), float("nan"), dtype=dt, device="cuda")


def launch_case(c: Case, kernels, x) -> list[list[torch.Tensor]]:
    """The case on the GPU, its outputs per rank (on the host), as the emulator gives them."""
    kop, ck = kernels[0]
    W = c.W
    xs = [[t.cuda().contiguous() for t in per] for per in x]
    if c.family is Family.GEMM:
        from pkc.runtime.scheduled import ScheduledKernel

        k = ScheduledKernel(ck.ptx, ck.meta)
        from pkc.interp.values import torch_dtype

        res = [_nan(v.type.get_shape(), torch_dtype(v.type.element_type)) for v in kop.results]
        k(xs[0] + res)
        torch.cuda.synchronize()
        return [[t.cpu() for t in res]]
    if c.family is Family.GENERAL:
        from pkc.runtime.world import VirtualWorld

        return [[t.cpu() for t in per] for per in VirtualWorld(W).run(ck, xs)]
    owner = ("emu-vs-gpu", c.name)
    if c.family is Family.COMM:
        from pkc.runtime.scheduled_comm import ScheduledCollective

        tin, tout = kop.inputs[0].type, kop.results[0].type
        sc = ScheduledCollective(ck.ptx, ck.meta, _peers(W), tin.get_shape(), tout.get_shape(),
                                 str(tin.element_type), timeout_ns=TIMEOUT_NS)
        _KEEP.append(sc)
        outs = {r: _nan(tout.get_shape(), xs[r][0].dtype) for r in range(W)}
        got = sc.run({r: xs[r][0] for r in range(W)}, outs=outs)
        torch.cuda.synchronize()
        sc.check()
        return [[got[r].cpu().reshape(tuple(tout.get_shape()))] for r in range(W)]
    if c.family is Family.PAIR:
        from pkc.runtime.scheduled_comm import ScheduledPair

        (rs_op, rs_ck), (ag_op, ag_ck) = kernels
        pr = ScheduledPair(rs_op, rs_ck, ag_op, ag_ck, _peers(W), owner=owner, timeout_ns=TIMEOUT_NS)
        _KEEP.append(pr)
        outs = {r: _nan(ag_op.results[0].type.get_shape(), xs[r][0].dtype) for r in range(W)}
        got = pr.run({r: xs[r][0] for r in range(W)}, {r: xs[r][1] for r in range(W)}, outs=outs)
        torch.cuda.synchronize()
        pr.check()
        chunk = pr.rs.sym_out[pr.rs.n_in]
        return [[chunk.tensors[r].cpu(), got[r].cpu()] for r in range(W)]
    if c.family is Family.MOE:
        from pkc.runtime.scheduled_moe import ScheduledMoe

        run = ScheduledMoe(ck.ptx, ck.meta, _peers(W), owner=owner, timeout_ns=TIMEOUT_NS)
        _KEEP.append(run)
        run.run(*[[xs[r][i] for r in range(W)] for i in range(run.n_in)])
        torch.cuda.synchronize()
        run.check()
        return [[run.sym_out[i].tensors[r].cpu() for i in run.fz.sym_outputs] for r in range(W)]
    if c.family is Family.AG_GEMM:
        from pkc.runtime.scheduled_ag import ScheduledAgGemm as Runner
    else:
        from pkc.runtime.scheduled_fused import ScheduledFused as Runner
    f = Runner(ck.ptx, ck.meta, _peers(W), owner=owner, timeout_ns=TIMEOUT_NS)
    _KEEP.append(f)
    if len(f.fresh) > 1 and c.family is not Family.AG_GEMM:
        raise RuntimeError(f"{c.name}: {len(f.fresh)} fresh outputs (one is supported)")
    fresh = {r: [_nan(f.fz.shapes[i], f._dt(i)) for i in f.fresh] for r in range(W)}
    ins = [[xs[r][i] for r in range(W)] for i in range(f.n_in)]
    if c.family is Family.AG_GEMM:      # (a C per weight where there are several)
        f.run(*ins, outs={r: fresh[r] if len(f.fresh) > 1 else fresh[r][0] for r in range(W)})
    else:
        f.run(*ins, out={r: fresh[r][0] for r in range(W)} if f.fresh else None)
    torch.cuda.synchronize()
    f.check()
    return [[(f.sym_out[i].tensors[r] if i in f.sym_out else fresh[r][f.fresh.index(i)]).cpu()
             for i in range(f.n_in, len(f.fz.shapes))] for r in range(W)]
