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
* GEMM + all-reduce (W <= 2) and the fresh-output reduce-scatter (W = 2): not built here:
  their epilogues carry per-tile load phases and chunk-entry state through the static
  loop (``fused_ar_schedule``); left static;
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
    AR = "ar"            # GEMM + all-reduce by broadcast (W <= 2)
    AG = "ag"            # all-gather + GEMM
    MOE = "moe"          # MoE dispatch + grouped GEMM + combine


_NEVER = {
    ClcKind.AG: "the put CTAs share the grid with the GEMM CTAs: a cancel could take a put "
                "CTA's launch (its puts would never run), and GEMM CTAs waiting for row blocks "
                "could hold every SM while the put CTAs wait to start",
    ClcKind.MOE: "every CTA dispatches its share of the tokens before the roles; a cancelled "
                 "CTA would never run its share",
    ClcKind.RS_OUT: "its summed epilogue carries per-tile load phases and the own chunk's "
                    "single wait through the static loop; not built under CLC",
    ClcKind.AR: "its epilogue carries the owners-ready mask and load phases through the static "
                "loop; not built under CLC",
}


def clc_decision(kind: ClcKind, work: int, num_sms: int, arch: str,
                 choice: ClcChoice = ClcChoice.AUTO) -> tuple[bool, str]:
    """(whether the kernel's tile loop runs under cluster launch control, why), for
    ``work`` work indices (chunks x tiles) on a target of ``num_sms`` SMs; ``choice``
    forces it (on for a kind that cannot take it is a ValueError saying why)."""
    if arch != "sm_100a":
        if choice is ClcChoice.ON:
            raise ValueError(f"clc=on: cluster launch control is an sm_100a feature (target "
                             f"is {arch})")
        return False, ""
    if kind in _NEVER:
        if choice is ClcChoice.ON:
            raise ValueError(f"clc=on: the {kind} kernel is not built under cluster launch "
                             f"control: {_NEVER[kind]}")
        return False, f"static tile loop, not cluster launch control: {_NEVER[kind]}"
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
    indices. Needs ``rank``, ``epoch``, ``ctl`` and ``W`` (the RsParts fields)."""

    READERS = 2                 # the tensor-memory arrangement: mma and epilogue roles

    ring: tuple[SSAValue, ...] | None = None
    tick: SSAValue | None = None

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
        loop = r.add(ClcChunkTileLoopOp(M, N, self.rank, self.epoch, self.tick, self.ctl,
                                        self.ring, inits, cfg.bm, cfg.bn, cfg.group_m, self.W,
                                        issuer))
        m0, n0, chunk, *carried = loop.block.args
        return loop, [m0, n0, chunk], carried


class ClcRsParts(ClcChunkMixin, RsParts):
    """:class:`RsParts` under cluster launch control."""


class ClcRsOrderedParts(ClcChunkMixin, RsOrderedParts):
    """:class:`RsOrderedParts` (adds in a fixed rank order) under cluster launch control."""


def rs_parts(ordered: bool, clc: bool) -> type:
    """The reduce-scatter parts class for the choices."""
    if clc:
        return ClcRsOrderedParts if ordered else ClcRsParts
    return RsOrderedParts if ordered else RsParts


__all__ = ["ClcChoice", "ClcKind", "clc_decision", "with_clc", "ClcChunkMixin", "ClcRsParts",
           "ClcRsOrderedParts", "rs_parts"]


def decide_rs(cfg, world: int, mc: int, n: int, num_sms: int, choice: ClcChoice,
              ordered: bool) -> tuple[object, type, dict, str]:
    """(config, parts class, plan entries, remark words) of a persistent GEMM +
    reduce-scatter: under cluster launch control on sm_100a where :func:`clc_decision`
    says so, the static chunked loop otherwise (the wgmma kernel: always, no entries)."""
    if not isinstance(cfg, TmemView):
        clc_decision(ClcKind.RS, 0, num_sms, "sm_90a", choice)     # clc=on: refused
        return cfg, rs_parts(ordered, False), {}, ""
    work = world * -(-mc // cfg.bm) * -(-n // cfg.bn)
    on, why = clc_decision(ClcKind.RS, work, num_sms, "sm_100a", choice)
    plan = {"scheduler": "clc" if on else "static"}
    return (with_clc(cfg) if on else cfg), rs_parts(ordered, on), plan, f"; {why}"


__all__ += ["decide_rs"]
