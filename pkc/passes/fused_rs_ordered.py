"""GEMM + reduce-scatter whose adds land in a fixed rank order: bitwise repeatable results.

In :class:`pkc.passes.fused_schedule.RsParts` the owner of chunk p stores its own partial
first and the W - 1 peers then TMA reduce-add theirs into it in whatever order they
arrive; each add rounds to bf16 / f16, so at W > 2 two identical calls can differ in the
last bits (measured on the H200 at W = 4, issue 19). At W <= 2 there is one add: the order
is fixed already.

Here the adds into chunk p come in the order p, p - 1, p - 2, ..., p - (W - 1) (mod W):
rank q adds its tiles of chunk p only after rank q + 1 (mod W) signalled that all of its
tiles of chunk p landed there (its slot on p's pad reached this epoch's count; for
q = p - 1 that is the owner's own stores, the wait RsParts makes anyway). Why that order:
the tile loop gives slot s to chunk (rank + s) mod W, so rank q reaches chunk p at step
(p - q) mod W, one step after rank q + 1 did; every wait is for an earlier step of another
rank, so no cycle of waits can form (deadlock-free), and the ranks run as a pipeline
shifted by one step. Only the order changes: no staging buffer, no extra traffic. The
cost is the waiting: a rank's first add into a chunk waits for its neighbour's whole
chunk instead of only for the owner's (measured: docs/PERF_NOTES.md, "repeatable results").

``schedule-fused{deterministic=true}`` builds it at W > 2 (``pk.plan.add_order =
"rank-ring"``; otherwise ``"arrival"``); pkc.compile and pkc.backend set that option when
``torch.use_deterministic_algorithms(True)`` is on.
"""

from __future__ import annotations

from xdsl.dialects import arith
from xdsl.ir import SSAValue

from pkc.passes.fused_schedule import RsParts
from pkc.passes.gemm_schedule import _Ops


class RsOrderedParts(RsParts):
    """:class:`RsParts` with the adds into every chunk in the fixed order above."""

    def adds_after(self, o: _Ops, chunk: SSAValue) -> SSAValue:
        # rank + 1 (mod W): the rank that reached this chunk one step earlier
        nxt = o.bin(arith.AddiOp, self.rank, 1)
        wrap = o.cmp("eq", nxt, self.W)
        return o.select(wrap, o.c(0), nxt)


def add_order(world: int, deterministic: bool) -> str:
    """What ``pk.plan.add_order`` records: ``rank-ring`` where the order is fixed by this
    variant, ``single`` where there is at most one add, ``arrival`` otherwise."""
    if world <= 2:
        return "single"
    return "rank-ring" if deterministic else "arrival"


__all__ = ["RsOrderedParts", "add_order"]
