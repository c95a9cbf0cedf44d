"""Loads and launches a scheduled all-gather + GEMM (a ``pk.kernel`` built by
``schedule-fused`` from an ``all_gather_mm`` kernel: ``pk.plan.fused_kind = "ag"``) over a
:class:`~pkc.runtime.peers.Peers` world.

The launch is :class:`~pkc.runtime.scheduled_fused.ScheduledFused`'s (everything from the
compiler's metadata: the grid rule with the put CTAs, the tensor-map views, the gathered
operand's peer pointers); this adds what the all-gather's results are: per rank ``C`` (a
fresh output, or the caller's) and the gathered ``A`` (the symmetric output the peers put
into: persistent, overwritten by the next launch; whether the program uses it is the
graph's business), and the all-gather's wait sites in errors.
"""

from __future__ import annotations

from pkc.codegen.abi import FusedLaunchKind, describe_record
from pkc.runtime.scheduled_fused import ScheduledFused, ScheduledFusedTimeout

AG_WAIT_SITES = {1: "a row block of the peer's shard put here (or the peer's launch started)",
                 2: "the peers' puts (exit)"}


class ScheduledAgGemm(ScheduledFused):
    """``run(a, b, *scales) -> {rank: [C, gathered A]}`` (see the module doc)."""

    def __init__(self, ptx: str, meta, peers, owner=None, timeout_ns: int = 2_000_000_000):
        super().__init__(ptx, meta, peers, owner=owner, timeout_ns=timeout_ns)
        if self.fz.kind is not FusedLaunchKind.AG:
            raise ValueError(f"kernel {meta.name} is a fused '{self.fz.kind}' kernel, not an "
                             "all-gather + GEMM")
        side = self.fz.side_ctas
        sms = peers.sms if self.fz.world == 1 else min(peers.sms_of(r) for r in peers.ranks)
        if side and self.grid > sms:
            # every CTA must be resident at once (a put CTA waits for the peers' put CTAs)
            raise ValueError(f"kernel {meta.name}: {sms} SMs per rank cannot hold its "
                             f"{side} put CTAs and a GEMM CTA at once")

    def run(self, a, b, *rest, ranks=None, outs=None) -> dict:
        """Launch every driven rank on its shard ``a[r]``, weight ``b[r]`` and the kernel's
        further inputs ``rest`` (the further weights of a kernel over several, or an fp8
        kernel's scales of A and B), each per rank: a dict by rank or a list indexed by
        rank; ``outs[r]``: where C goes (else new; a list of the Cs for several weights).
        Returns ``{rank: [C (or C0, C1, ...), gathered A]}``."""
        todo, fresh = self._launch((a, b, *rest), ranks, outs,
                                   f" (shard, weight{', more' if self.n_in > 2 else ''})")
        gath = self.sym_out[self.fz.peer_outputs[0]]
        return {r: [*fresh[r], gath.tensors[r]] for r in todo}

    def check(self) -> None:
        for r in self.peers.ranks:
            rec = self.err[r].tolist()
            if rec[0]:
                raise ScheduledFusedTimeout(describe_record(self.meta.name, rec, AG_WAIT_SITES))


def ag_step(op, ck, peers, timeout_ns: int):
    """The step of a prepared program that runs this kernel (``pk.kernel`` ``op``, compiled
    ``ck``): operands (shard, weight, and an fp8 kernel's scales) per rank in; results
    [C (fresh), gathered A (persistent)] per rank out."""
    from pkc.runtime.scheduled_step import ScheduledStep, StepKind

    ag = ScheduledAgGemm(ck.ptx, ck.meta, peers, owner=id(op), timeout_ns=timeout_ns)

    n_in = len(op.inputs)     # shard and weight(s); an fp8 kernel adds the two scales

    def run(vals):
        return ag.run(*[{r: v[i].contiguous() for r, v in vals.items()} for i in range(n_in)],
                      ranks=list(vals))
    # results: one C per weight (fresh), then the gathered A (persistent)
    return ScheduledStep(run, [False] * (len(op.outputs) - 1) + [True], StepKind.FUSED)
