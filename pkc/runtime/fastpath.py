"""The fast path: ``pk.kernel`` ops whose plan matches one of pkc's hand-tuned sm_90a
kernels run on that kernel instead of the general (portable smem-tile) codegen.

Matched (:func:`plan_fast`, pure IR analysis, so it is tested without a GPU):

* lowered ``all_reduce`` (lower-collectives, ``pk.plan.collective``): one-shot ->
  collectives ``ll`` up to ``ll_limit(LL_MAX_BYTES, W)``, ``ar1`` above; two-shot -> ``ar2`` with
  copy-in. ``all_gather`` / ``reduce_scatter``
  along the leading dim (the kernel's 3-d view has one row: every chunk contiguous) ->
  ``ag`` / ``rs`` (``llag`` / ``llrs`` up to ``ll_limit(LL_GATHER_MAX_BYTES, W)``). The algorithm is
  the one the cost model chose.
* fused ``mm_reduce_scatter`` (overlap, ``pk.fusion.pattern``) -> the GEMM + reduce-scatter
  kernel (TMA reduce-add of each tile into its owner's output, output-dtype accumulator;
  at W = 2 the peer's partial staged and summed in the owner's epilogue, into a fresh
  output);
  ``all_gather_mm`` with one matmul -> the all-gather + GEMM kernel (gathered A is one of
  its buffers, returned when the IR asks for it); with several matmuls -> the ``ag``
  collective, then one cuBLAS GEMM per weight; ``mm_all_reduce`` -> GEMM + reduce-scatter,
  then a pull all-gather (``agp``) of the reduced chunks into a fresh output (W > 2), or
  at W <= 2 the GEMM + all-reduce kernel that sends every partial tile to every rank
  inside the GEMM (at W = 2 into a fresh output: no copy after it).
Anything else (all_to_all, MoE patterns, f64/integer data, shapes that are not whole
16-byte vectors, a chunk that is not contiguous, 3-d operands) keeps the general path;
the reason is recorded (:attr:`Executable.fast_report`).

Semantics: the collectives sum in rank order in f32 and round once, like the graph-level
ops (bitwise equal). The GEMM kernels accumulate in f32 in a different order than the
interpreter's torch.matmul, and GEMM + reduce-scatter adds the bf16/f16 partial tiles with
TMA reduce-add (the W = 2 result is the one rounding of the exact sum; for W > 2 each add
rounds), so fused results agree within the tolerance of a 16-bit GEMM, not bitwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr, StringAttr, TensorType

from pkc.dialects.kernel import KernelOp, TileMapOp

_DTYPES = {"bf16": "bf16", "f16": "f16", "f32": "f32"}
_ESIZE = {"bf16": 2, "f16": 2, "f32": 4}

# The collectives' size thresholds (LL limits, the two-shot's pull gather and CTA groups),
# with where each was measured, live in the tuning table that schedule-collectives uses
from pkc.target.comm_tuning import (  # noqa: E402,F401  (re-exported: fastpath.LL_MAX_BYTES ...)
    AR2_GROUPS_MIN_BYTES,
    AR2_PULL_MIN_BYTES,
    LL_GATHER_MAX_BYTES,
    LL_MAX_BYTES,
    ll_limit,
)

# The fused kernels' figures and rules (PUT_CTA_BW, LINK_BOUND, the fresh-output switches,
# the tile rule) live in the tuning table that schedule-fused uses, with where measured
from pkc.target.fused_tuning import (  # noqa: E402,F401  (re-exported)
    AR_INTO_OUTPUT,
    ARF_ENABLED,
    LINK_BOUND,
    LINK_BOUND_TILE,
    PUT_CTA_BW,
    RS_INTO_OUTPUT,
)
from pkc.target.fused_tuning import fused_gemm_config  # noqa: E402,F401
from pkc.target.fused_tuning import link_over_gemm as _link_over_gemm  # noqa: E402,F401
from pkc.target.fused_tuning import side_ctas_for as _side_ctas_for  # noqa: E402


def ag_put_ctas(M: int, N: int, K: int, world: int, target: str = "h200") -> int:
    """Put CTAs for an all-gather + GEMM with gathered A ``[M, K]``: enough to deliver
    the remote rows at 1.25x the rate the GEMM consumes them (the (W-1)/W remote part of
    A over the whole GEMM's predicted time), a multiple of 4 in [4, 16]. Every CTA more
    is an SM less for the GEMM: compute-bound shapes (Llama up+gate) want few; measured
    on 2 and 4 H200s, 16 won where A's bytes outrun the GEMM (8 lost 8-17% there), 8
    won over 12 and 16 on N = 32768 at W = 4 (by 7%), 4 over 8 on up+gate at W = 2."""
    from pkc.target.cost import gemm_time

    return _side_ctas_for((world - 1) / world * M * K * 2 / gemm_time(target, M, N, K))


def collective_config(kind: str, world: int, dtype: str, elems: int):
    """The collective kernel the fast path runs for ``kind`` on ``elems`` elements: the
    two-shot (``ar2``) into a fresh output, gathered by push or pull and in CTA groups by
    size (the thresholds above); the other kinds as they are."""
    from pkc.codegen.hopper.collectives import CollectiveConfig

    if kind != "ar2":
        return CollectiveConfig(kind, world, dtype)
    nbytes = elems * _ESIZE[dtype]
    pull = world > 2 and nbytes >= AR2_PULL_MIN_BYTES
    return CollectiveConfig(kind, world, dtype, copy_in=True, gather="pull" if pull else "push",
                            groups=2 if nbytes >= AR2_GROUPS_MIN_BYTES else 1)


def mm_ar_kind(M: int, N: int, K: int, world: int, target: str = "h200") -> str:
    """The GEMM + all-reduce kernel at W <= 2: at W = 2 "ar_out" (the broadcast kernel
    into a fresh output: :data:`AR_INTO_OUTPUT`), or "arf" (reducer CTAs add the peer's
    staged partial; off: :data:`ARF_ENABLED`) where the link moves the result more slowly
    than the GEMM makes it; else "ar" (the broadcast into the persistent accumulator, its
    result copied out; W = 1 always)."""
    if world != 2:
        return "ar"
    if ARF_ENABLED and _link_over_gemm("ar", M, N, K, 2, target) >= 1:
        return "arf"
    return "ar_out" if AR_INTO_OUTPUT else "ar"


def mm_rs_kind(world: int) -> str:
    """The GEMM + reduce-scatter kernel: "rs_out" at W = 2 (into a fresh output:
    :data:`RS_INTO_OUTPUT`), else "rs" (reduce-adds into the persistent accumulator)."""
    return "rs_out" if world == 2 and RS_INTO_OUTPUT else "rs"


# the fused kernels that write a fresh output per call (nothing persistent to copy)
FRESH_FUSED = ("arf", "ar_out", "rs_out")


def fused_kind(plan_kind: str, M: int, N: int, K: int, world: int) -> str:
    """The fused kernel of a GEMM + reduce-scatter / all-reduce plan (mm_rs / mm_ar)."""
    return mm_rs_kind(world) if plan_kind == "mm_rs" else mm_ar_kind(M, N, K, world)


def arf_reducer_ctas(M: int, N: int, K: int, world: int, target: str = "h200") -> int:
    """Reducer CTAs of the "arf" kernel: the peer's partial (M x N, 16-bit) added at 1.25x
    the rate the kernel delivers it (over max(GEMM, link) time), at the put CTAs' ~24 GB/s
    each, a multiple of 4 in [4, 16]."""
    from pkc.target.cost import gemm_time
    from pkc.target.targets import get_target

    nbytes = M * N * 2
    t = max(gemm_time(target, M, N, K), nbytes / get_target(target).nvlink_achievable_bw)
    return _side_ctas_for(nbytes / t)


@dataclass
class FastPlan:
    """What the fast path runs for one kernel: ``kind`` is a collective kind (ar1, ar2,
    ag, rs) or a fused pattern (mm_rs, mm_ar, ag_mm, ag_mms); ``dtype``; the shapes."""

    kind: str
    world: int
    dtype: str
    shapes: dict = field(default_factory=dict)

    def describe(self) -> str:
        dims = " ".join(f"{k}={v}" for k, v in self.shapes.items())
        extra = f" ({self.dtype} accumulator)" if self.kind in ("mm_rs", "mm_ar") else ""
        if self.kind in ("mm_rs", "mm_ar") and self.world <= 2:
            from pkc.target.targets import get_target

            s = self.shapes
            cfg = fused_gemm_config(self.kind[3:], s["M"], s["N"], s["K"], self.world,
                                    self.dtype, "nk", get_target("h200").num_sms)
            into = fused_kind(self.kind, s["M"], s["N"], s["K"], self.world) in FRESH_FUSED
            extra += f" ({cfg.bm}x{cfg.bn} tiles{', into a fresh output' if into else ''})"
        if self.kind == "ar2":          # what the size decides (collective_config)
            cfg = collective_config("ar2", self.world, self.dtype, self.shapes["elems"])
            extra = f" ({cfg.gather} gather, {cfg.groups} CTA group{'s' * (cfg.groups > 1)})"
        return f"fast path: {self.kind} W={self.world} {self.dtype} {dims}".rstrip() + extra


def _dtype(t: TensorType) -> str | None:
    return _DTYPES.get(str(t.element_type))


def _shape(t) -> tuple[int, ...]:
    return tuple(t.get_shape())


def _dict(op: KernelOp, name: str) -> dict:
    a = op.attributes.get(name)
    if not isinstance(a, DictionaryAttr):
        return {}
    out = {}
    for k, v in a.data.items():
        if isinstance(v, StringAttr):
            out[k] = v.data
        elif isinstance(v, IntegerAttr):
            out[k] = v.value.data
        else:
            out[k] = v
    return out


def plan_fast(op: KernelOp, target: str = "sm_90a") -> FastPlan | str:
    """The fast plan of a ``pk.kernel``, or a string saying why it has none."""
    if target != "sm_90a":
        return f"no fast kernels for {target} (sm_90a only)"
    W = op.world_size
    ins = [o.type for o in op.inputs]
    outs = [r.type for r in op.outputs]
    dts = {_dtype(t) for t in ins + outs}
    if None in dts or len(dts) != 1:
        return "element types other than one of bf16/f16/f32"
    dtype = dts.pop()
    plan, fusion = _dict(op, "pk.plan"), _dict(op, "pk.fusion")
    if "collective" in plan:
        # the fast collectives sum; the reduction of a lowered collective is in its body
        combine = {o.fn.data for o in op.walk() if isinstance(o, TileMapOp)} - {"cast", "add"}
        if combine:
            return (f"{plan['collective']} reducing with {', '.join(sorted(combine))}: "
                    "the fast kernels only sum")
        return _plan_collective(plan, ins, outs, W, dtype)
    if fusion.get("pattern"):
        return _plan_fused(fusion, ins, outs, W, dtype)
    return "not a lowered collective or a fused pattern"


def fast_path_lines(root, target: str = "sm_90a", filename: str = "<unknown>") -> list[str]:
    """``file:line:col: remark: [fast-path] @kernel: plan`` for every pk.kernel under
    ``root``: what ``pkc-opt --fast-path`` and ``CompiledProgram.fast_path()`` show."""
    from pkc.passes.remarks import remark_line

    out = []
    for op in root.walk():
        if isinstance(op, KernelOp):
            plan = plan_fast(op, target)
            text = f"general path ({plan})" if isinstance(plan, str) else plan.describe()
            out.append(remark_line(op, f"@{op.kernel_name.data}: {text}", filename, "fast-path"))
    return out


def _plan_collective(plan, ins, outs, W, dtype) -> FastPlan | str:
    coll, algo = plan["collective"], plan.get("algorithm", "")
    vec = 16 // {"f32": 4}.get(dtype, 2)
    x, y = _shape(ins[0]), _shape(outs[0])
    elems = 1
    for d in x:
        elems *= d
    if coll == "all_reduce":
        if elems % vec:
            return f"all_reduce of {elems} elements: not whole 16-byte vectors"
        if algo == "one_shot":
            kind = "ll" if elems * _ESIZE[dtype] <= ll_limit(LL_MAX_BYTES, W) else "ar1"
        else:
            kind = "ar2"
        return FastPlan(kind, W, dtype, {"elems": elems})
    if coll in ("all_gather", "reduce_scatter"):
        rows = x[0] if len(x) == 3 else None
        if rows != 1:
            return f"{coll} along a non-leading dim (view {x}): chunks are not contiguous"
        chunk = elems if coll == "all_gather" else elems // W
        if chunk % vec:
            return f"{coll} chunk of {chunk} elements: not whole 16-byte vectors"
        full_bytes = chunk * W * (16 // vec)
        small = full_bytes <= ll_limit(LL_GATHER_MAX_BYTES, W)
        kind = ("llag" if small else "ag") if coll == "all_gather" else ("llrs" if small else "rs")
        return FastPlan(kind, W, dtype, {"elems": elems, "out": y})
    return f"no fast kernel for {coll}"


def _plan_fused(fusion, ins, outs, W, dtype) -> FastPlan | str:
    pattern = fusion["pattern"]
    if dtype == "f32":
        return "fused GEMM kernels take bf16/f16 operands"
    if any(len(_shape(t)) != 2 for t in ins):
        return f"{pattern}: operands are not 2-d"
    a = _shape(ins[0])
    if fusion.get("scatter_dim", 0) != 0 or fusion.get("batches", 1) != 1:
        return f"{pattern}: the hand kernel scatters contiguous row chunks only"
    if pattern in ("mm_reduce_scatter", "mm_all_reduce"):
        if len(ins) != 2:
            return f"{pattern} with {len(ins)} operands"
        (M, K), (K2, N) = a, _shape(ins[1])
        if K != K2 or M % W:
            return f"{pattern}: A {a} x B {(K2, N)} does not split into {W} row chunks"
        if K % 8 or N % 8 or (pattern == "mm_all_reduce" and (M // W * N) % 8):
            return f"{pattern}: K={K}, N={N} not multiples of 8 (16-byte rows)"
        kind = "mm_rs" if pattern == "mm_reduce_scatter" else "mm_ar"
        return FastPlan(kind, W, dtype, {"M": M, "N": N, "K": K})
    if pattern == "all_gather_mm":
        Mc, K = a
        Ns = [_shape(t)[1] for t in ins[1:]]
        if any(_shape(t)[0] != K for t in ins[1:]):
            return f"all_gather_mm: weights {[_shape(t) for t in ins[1:]]} do not match K={K}"
        if K % 8 or any(n % 8 for n in Ns):
            return f"all_gather_mm: K={K}, N={Ns} not multiples of 8 (16-byte rows)"
        gathered = len(outs) == len(Ns) + 1
        kind = "ag_mm" if len(Ns) == 1 else "ag_mms"
        return FastPlan(kind, W, dtype, {"Mc": Mc, "K": K, "N": Ns, "gathered": gathered})
    return f"no fast kernel for pattern {pattern}"


# ---- running a plan (needs CUDA) -------------------------------------------------------
class FastStep:
    """Runs one :class:`FastPlan` over a Peers world: ``step({rank: operands}) ->
    {rank: results}``. Kernels and their persistent buffers are made on the first call
    (per B layout for the GEMMs: a weight given as ``w.t()`` of an ``[N, K]`` tensor runs
    as B ``[N, K]``, with no copy)."""

    def __init__(self, plan: FastPlan, peers, out_shapes: list[tuple[int, ...]],
                 timeout_s: float = 2.0):
        self.plan, self.peers, self.out_shapes = plan, peers, out_shapes
        self.timeout_ns = int(timeout_s * 1e9)
        self._made: dict = {}
        # results that live in a persistent buffer (overwritten by the next call): the
        # Executable copies them when they leave the graph; the rest are fresh tensors
        # ar2 (copy-in) and mm_ar at W > 2 pull their result into a fresh output
        s = plan.shapes
        self.fused_kind = fused_kind(plan.kind, s["M"], s["N"], s["K"], plan.world) \
            if plan.kind in ("mm_rs", "mm_ar") else None
        fresh = plan.kind in ("ll", "llag", "llrs", "ar1", "rs", "ar2") or \
            self.fused_kind in FRESH_FUSED or (plan.kind == "mm_ar" and plan.world > 2)
        self.persistent = [not fresh] * len(out_shapes)
        if plan.kind in ("ag_mm", "ag_mms"):   # the products are fresh; the gathered A is not
            self.persistent = [False] * len(plan.shapes["N"]) + [True] * plan.shapes["gathered"]

    def __call__(self, args: dict) -> dict:
        kind = self.plan.kind
        if kind in ("ll", "llag", "llrs", "ar1", "ar2", "ag", "rs"):
            return self._collective(args)
        return getattr(self, "_" + kind)(args)

    def _fresh(self, shape, dtype, ranks) -> dict:
        """A new output tensor per driven rank (results that need no copy at the end)."""
        import torch

        return {r: torch.empty(shape, dtype=dtype, device=self.peers.device) for r in ranks}

    # ---- pieces, made once ---------------------------------------------------------
    def _coll(self, kind: str, elems: int, source=None):
        from pkc.codegen.hopper.collectives import CollectiveRunner

        key = ("coll", kind, elems)
        if key not in self._made:
            cfg = collective_config(kind, self.plan.world, self.plan.dtype, elems)
            self._made[key] = CollectiveRunner(cfg, elems, self.peers, timeout_ns=self.timeout_ns,
                                               source=source)
        return self._made[key]

    def _fused(self, kind: str, Mc: int, N: int, K: int, b_layout: str):
        from pkc.codegen.hopper.fused import FusedConfig, FusedWorld

        key = ("fused", kind, Mc, N, K, b_layout)
        if key not in self._made:
            W = self.plan.world
            sms = min(self.peers.sms_of(r) for r in self.peers.ranks)
            put = {}
            if kind == "ag" and W > 1:
                put = dict(comm_ctas=ag_put_ctas(W * Mc, N, K, W))
            elif kind == "arf" and W > 1:
                put = dict(comm_ctas=arf_reducer_ctas(W * Mc, N, K, W))
            if kind in ("ar_out", "rs_out"):    # into a caller's output
                kind, put = kind[:2], dict(out=True)
            gemm = fused_gemm_config(kind, W * Mc, N, K, W, self.plan.dtype, b_layout, sms)
            fcfg = FusedConfig(kind=kind, world=W, gemm=gemm, **put)
            # owner: this step's own buffers; a second kernel of the same shape in the
            # program must not overwrite this one's result
            self._made[key] = FusedWorld(fcfg, Mc, N, K, peers=self.peers,
                                         sig_timeout_ns=self.timeout_ns, owner=id(self))
        return self._made[key]

    # ---- the plans -----------------------------------------------------------------
    def _collective(self, args: dict) -> dict:
        elems = self.plan.shapes["elems"]
        run = self._coll(self.plan.kind, elems)
        fresh = None
        if run.local_output:                # a new tensor per call: no copy at the end
            fresh = self._fresh(self.out_shapes[0], run.tdt, args)
        outs = run.run({r: a[0].contiguous().view(-1) for r, a in args.items()},
                       outs=None if fresh is None else {r: t.view(-1) for r, t in fresh.items()})
        return {r: [outs[r].view(self.out_shapes[0])] for r in outs}

    @staticmethod
    def _b_operand(b):
        """(layout, tensor): a contiguous [K, N] weight is "kn"; the transpose of a
        contiguous [N, K] one is "nk" (its .t())."""
        if b.is_contiguous():
            return "kn", b
        if b.t().is_contiguous():
            return "nk", b.t()
        return "kn", b.contiguous()

    def _run_fused(self, kind: str, Mc: int, N: int, args: dict, out_shape=None):
        """(the fused kernel's world, its outputs by rank): A and B of every driven rank
        in; with ``out_shape``, into a new tensor per rank, else the world's buffers."""
        lay = {r: self._b_operand(a[1]) for r, a in args.items()}
        fw = self._fused(kind, Mc, N, self.plan.shapes["K"], next(iter(lay.values()))[0])
        fresh = None if out_shape is None else self._fresh(out_shape, fw.tdt, args)
        return fw, fw.run({r: a[0].contiguous() for r, a in args.items()},
                          {r: lay[r][1] for r in args}, outs=fresh)

    def _mm_rs(self, args: dict) -> dict:
        s, W = self.plan.shapes, self.plan.world
        kind = self.fused_kind
        _, outs = self._run_fused(kind, s["M"] // W, s["N"], args,
                                  (s["M"] // W, s["N"]) if kind in FRESH_FUSED else None)
        return {r: [outs[r]] for r in args}

    def _mm_ar(self, args: dict) -> dict:
        s = self.plan.shapes
        W = self.plan.world
        if W <= 2:
            # broadcast: every partial tile to every rank, overlapped with the GEMM (same
            # link bytes as RS + AG at W = 2; W > 2 would send (W-1) / (2(W-1)/W) times
            # more, measured 0.5-1.0x: RS then AG there); at W = 2 into a fresh output
            # (mm_ar_kind), at W = 1 into the persistent accumulator (then copied)
            kind = self.fused_kind
            _, outs = self._run_fused(kind, s["M"] // W, s["N"], args,
                                      (s["M"], s["N"]) if kind in FRESH_FUSED else None)
            return {r: [outs[r]] for r in args}
        # reduce-scatter fused into the GEMM; the reduced chunks stay in its symmetric
        # accumulators, and every rank pulls them into a fresh output (no copy at the end)
        fw, _ = self._run_fused("rs", s["M"] // W, s["N"], args)
        elems = s["M"] // W * s["N"]
        run = self._coll("agp", elems, source=fw.acc_sym)
        fresh = self._fresh((s["M"], s["N"]), run.tdt, args)
        outs = run.run(outs={r: t.view(-1) for r, t in fresh.items()})
        return {r: [outs[r].view(s["M"], s["N"])] for r in args}

    def _ag_mm(self, args: dict) -> dict:
        s = self.plan.shapes
        W, Mc, K = self.plan.world, s["Mc"], s["K"]
        # C: a new tensor per call, no copy
        fw, outs = self._run_fused("ag", Mc, s["N"][0], args, (W * Mc, s["N"][0]))
        res = {r: [outs[r]] for r in args}
        if s["gathered"]:
            for r in args:
                res[r].append(fw.gath[r].view(W * Mc, K))
        return res

    def _ag_mms(self, args: dict) -> dict:
        import torch

        s = self.plan.shapes
        W, Mc, K = self.plan.world, s["Mc"], s["K"]
        g = self._coll("ag", Mc * K).run({r: a[0].contiguous().view(-1) for r, a in args.items()})
        res = {}
        for r, a in args.items():
            full = g[r].view(W * Mc, K)
            res[r] = [torch.mm(full, b) for b in a[1:]] + ([full] if s["gathered"] else [])
        return res
