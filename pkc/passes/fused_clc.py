"""Cluster launch control for the fused kernels on sm_100a: which kinds take it, and the
parts that put their chunked tile loops under it (``pks.clc_chunk_tile_loop``,
:mod:`pkc.dialects.schedule_clc_chunk`).

A fused GEMM + reduce-scatter under CLC launches one CTA per work index (W chunks x tiles
per chunk); a running CTA takes more work by cancelling CTAs that have not started. The
work index maps to (chunk, tile) exactly as the static ``pks.chunk_tile_loop`` does (slot
``t / tiles`` is chunk ``(rank + slot) mod W``: the own chunk first, then the rotated
owner order, so that each peer's chunk finishes in turn), and indices come from a
per-rank ticket counter in the order CTAs start (the op's docstring says why not the
cancelled CTA's id: the chunk waits need the earliest work held by running CTAs, which
the hardware's order of cancels does not promise). The reduce-scatter epilogue needs
nothing else: it signals its pending tiles whenever the chunk changes and waits for the
owner (or, deterministic, the previous rank) once per chunk entry, so a CTA whose indices
are not one contiguous run per chunk is still correct.

Per kind (:func:`clc_decision`; the remark says the reason):

* GEMM + reduce-scatter (persistent, arrival order or deterministic; also the first
  kernel of the W > 2 all-reduce pair): CLC where there are more work indices than SMs
  (as the plain GEMM's rule, unmeasured), else the static loop (every tile has its CTA
  from the start: nothing to balance);
* GEMM + all-reduce by broadcast into the symmetric output (W = 1; ``ArParts``) and the
  fresh-output reduce-scatter (W = 2; ``RsOutParts``, the peer's chunk first): the same
  rule. Their epilogue state (the owners-ready mask, the once-only wait for the staged
  partial, the load phases) does not depend on which indices a CTA gets, and a CTA's
  tickets increase, so its chunks still come in the static loop's order;
* GEMM + all-reduce into a fresh output (W = 2; ``ArOutParts``): never: after the tiles
  the own chunk is copied from the accumulator by every CTA of the grid, a slice per CTA
  id; a cancelled CTA's slice would never be copied;
* all-gather + GEMM: never: its put CTAs share the grid with the GEMM CTAs; a cancel may
  take a put CTA's launch (its puts would never run), and GEMM CTAs waiting for row blocks
  could hold every SM while the put CTAs wait to start;
* MoE: never: every CTA dispatches its share of the tokens before the roles; a cancelled
  CTA never runs its share.
"""

from __future__ import annotations

from xdsl.dialects.builtin import IntegerType
from xdsl.ir import SSAValue

from pkc.dialects import kernel as k
from pkc.dialects import schedule as s
from pkc.dialects.schedule_clc_chunk import RING, SLOT_BYTES, ClcChunkTileLoopOp
from pkc.dialects.types import LOCAL, BufferType
from pkc.kinds import Kind
from pkc.passes.fused_ar_schedule import ArOutParts, ArParts, RsOutParts
from pkc.passes.fused_rs_ordered import RsOrderedParts
from pkc.passes.fused_schedule import RsParts
from pkc.passes.gemm_schedule import _Ops
from pkc.passes.gemm_schedule_tmem import TmemView


class ClcChoice(Kind):
    """``schedule-fused{clc=...}``: the tuning rule's choice, or forced on / off."""

    AUTO = "auto"
    ON = "on"
    OFF = "off"


class ClcKind(Kind):
    """The fused kernels as the CLC decision tells them apart."""

    RS = "rs"            # GEMM + reduce-scatter, persistent (RsParts / RsOrderedParts)
    RS_OUT = "rs_out"    # GEMM + reduce-scatter into a fresh output (W = 2)
    AR = "ar"            # GEMM + all-reduce by broadcast, symmetric output (ArParts)
    AR_OUT = "ar_out"    # GEMM + all-reduce into a fresh output (W = 2, ArOutParts)
    AG = "ag"            # all-gather + GEMM
    MOE = "moe"          # MoE dispatch + grouped GEMM + combine


_NEVER = {
    ClcKind.AG: "the put CTAs share the grid with the GEMM CTAs: a cancel could take a put "
                "CTA's launch (its puts would never run), and GEMM CTAs waiting for row blocks "
                "could hold every SM while the put CTAs wait to start",
    ClcKind.MOE: "every CTA dispatches its share of the tokens before the roles; a cancelled "
                 "CTA would never run its share",
    ClcKind.AR_OUT: "after the tiles every CTA of the grid copies a slice of the own chunk "
                    "(by CTA id); a cancelled CTA's slice would never be copied",
}


def check_choice(choice: ClcChoice, arch: str, pass_name: str) -> None:
    """``clc=on`` for a target without cluster launch control: a ValueError naming it."""
    if choice is ClcChoice.ON and arch != "sm_100a":
        raise ValueError(f"{pass_name}: clc=on: cluster launch control is an sm_100a feature "
                         f"(the target's architecture is {arch})")


def clc_decision(kind: ClcKind, work: int, num_sms: int,
                 choice: ClcChoice = ClcChoice.AUTO) -> tuple[bool, str]:
    """(whether an sm_100a kernel's tile loop runs under cluster launch control, why),
    for ``work`` work indices (chunks x tiles) on a target of ``num_sms`` SMs; ``choice``
    forces it where the kind can take it (a kind that never can stays static, saying
    why, also under ``clc=on``)."""
    if kind in _NEVER:
        forced = " (clc=on does not apply)" if choice is ClcChoice.ON else ""
        return False, f"static tile loop, not cluster launch control{forced}: {_NEVER[kind]}"
    if choice is ClcChoice.OFF:
        return False, "static tile loop (clc=off)"
    if choice is ClcChoice.ON:
        return True, (f"cluster launch control (clc=on): one CTA per work index ({work}), "
                      "running CTAs cancel not-started ones and take the next index from a "
                      "ticket counter, in the static loop's (chunk, tile) order")
    if work > num_sms:
        return True, (f"cluster launch control: {work} work indices over {num_sms} SMs; CTAs "
                      "that finish early or start late take the remaining indices (tickets in "
                      "the static loop's (chunk, tile) order) instead of a fixed tile += grid "
                      "split (rule unmeasured)")
    return False, (f"static tile loop: {work} work indices fit the {num_sms} SMs at once "
                   "(nothing for cluster launch control to balance)")


def with_clc(cfg: TmemView) -> TmemView:
    """The config whose tag says ``_clc`` (what the plan and remark print)."""
    return TmemView(cfg.cfg.with_(clc=True))


class ClcChunkMixin:
    """``tile_loop`` of a chunked fused kernel under cluster launch control: the
    producer issues the requests and takes the tickets, the mma and epilogue roles read the
    indices. Needs ``rank``, ``epoch``, ``ctl`` and ``W`` (the RsParts fields); the first
    chunk is :meth:`clc_first` (the rank: own chunk first)."""

    cluster_pairs_problem = "sm_100a's chunked loop under cluster launch control"

    READERS = 2                 # the tensor-memory arrangement: mma and epilogue roles

    ring: tuple[SSAValue, ...] | None = None
    tick: SSAValue | None = None

    tile_loop_reads_epoch = True     # the tickets are counted per launch

    def tile_loop(self, r: _Ops, M, N, inits, cfg):
        role = r.block.parent_op()
        if not isinstance(role, s.RoleOp):
            raise ValueError("ClcChunkMixin.tile_loop: the loop of a pks.role")
        if self.ring is None:
            sched = role.parent_op()
            ops = [s.SmemAllocOp(RING, SLOT_BYTES), s.MbarrierAllocOp(RING, 1),
                   s.MbarrierAllocOp(RING, 1), s.MbarrierAllocOp(RING, self.READERS)]
            for op in ops:
                sched.block.insert_op_before(op, role)
            self.ring = tuple(op.result for op in ops)
            # the ticket counter: one u32 per rank, zeroed once (kernel level, as pad / ctl)
            tick = k.AllocOp(BufferType([1], IntegerType(32), LOCAL), zero=True)
            sched.parent_block().insert_op_before(tick, sched)
            self.tick = tick.result
        issuer = s.RoleKind(role.kind.data) is s.RoleKind.PRODUCER
        loop = r.add(ClcChunkTileLoopOp(M, N, self.clc_first(), self.epoch, self.tick, self.ctl,
                                        self.ring, inits, cfg.bm, cfg.bn, cfg.group_m, self.W,
                                        issuer))
        m0, n0, chunk, *carried = loop.block.args
        return loop, [m0, n0, chunk], carried

    def clc_first(self) -> SSAValue:
        return self.rank


class ClcRsParts(ClcChunkMixin, RsParts):
    """:class:`RsParts` under cluster launch control."""


class ClcRsOrderedParts(ClcChunkMixin, RsOrderedParts):
    """:class:`RsOrderedParts` (adds in a fixed rank order) under cluster launch control."""


class ClcArParts(ClcChunkMixin, ArParts):
    """:class:`ArParts` (all-reduce by broadcast) under cluster launch control."""


class ClcRsOutParts(ClcChunkMixin, RsOutParts):
    """:class:`RsOutParts` (W = 2, fresh output) under cluster launch control: the peer's
    chunk first, as its static loop."""

    def clc_first(self) -> SSAValue:
        return self.other


_CLC_PARTS = {RsParts: ClcRsParts, RsOrderedParts: ClcRsOrderedParts, ArParts: ClcArParts,
              RsOutParts: ClcRsOutParts}
_KIND_OF = {RsParts: ClcKind.RS, RsOrderedParts: ClcKind.RS, ArParts: ClcKind.AR,
            RsOutParts: ClcKind.RS_OUT, ArOutParts: ClcKind.AR_OUT}


__all__ = ["ClcChoice", "ClcKind", "clc_decision", "with_clc", "ClcChunkMixin", "ClcRsParts",
           "ClcRsOrderedParts"]


def decide(static: type, cfg, world: int, mc: int, n: int, num_sms: int,
           choice: ClcChoice) -> tuple[object, type, dict, str]:
    """(config, parts class, plan entries, remark words) of a chunked fused kernel whose
    static parts class is ``static`` (W chunks of ``mc`` rows x ``n`` columns): under
    cluster launch control on sm_100a where :func:`clc_decision` says so, the static loop
    otherwise (the wgmma kernel: always, no entries)."""
    if not isinstance(cfg, TmemView):
        return cfg, static, {}, ""
    work = world * -(-mc // cfg.bm) * -(-n // cfg.bn)
    on, why = clc_decision(_KIND_OF[static], work, num_sms, choice)
    plan = {"scheduler": "clc" if on else "static"}
    return ((with_clc(cfg), _CLC_PARTS[static]) if on else (cfg, static)) + (plan, f"; {why}")


def static_words(kind: ClcKind, cfg) -> tuple[dict, str]:
    """(plan entries, remark words) of a kernel of a ``kind`` that never takes cluster
    launch control, on sm_100a (nothing for the wgmma kernel)."""
    if not isinstance(cfg, TmemView):
        return {}, ""
    return {"scheduler": "static"}, f"; {clc_decision(kind, 0, 0)[1]}"


__all__ += ["decide", "static_words", "check_choice", "ClcArParts", "ClcRsOutParts"]
