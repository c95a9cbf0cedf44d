"""The cost model of standalone collectives (all SMs: the unfused baseline and pkc's
lowerings): predicted times of one-shot / two-shot / ring all-reduce, direct / ring
all-gather and reduce-scatter, all-to-all, and the choice among them.

How the times grow with the world size W (each term's figures are in
:mod:`pkc.target.targets`, with their sources):

* Synchronization: every barrier among W ranks costs
  :func:`~pkc.target.cost_basics.barrier_time` - the two-GPU flag round trip plus, per
  further peer, the signalling thread's next flag and the next flag landing in the
  waiter's pad (per-peer issue and fan-in: pkc's kernels flag every peer directly). A
  ring step waits one one-way flag latency, and a ring has W - 1 (or 2(W - 1)) of them.
* Data: a rank's NVLink port carries (W - 1) x n bytes for a one-shot all-reduce (it
  pushes its whole buffer to every peer and receives every peer's: link-bound at about
  W x the message per GPU), 2(W - 1)/W x n for a two-shot (nearly flat in W), (W - 1)/W
  x n for a direct all-gather / reduce-scatter / all-to-all.
* Local traffic (HBM): the one-shot writes and reads W slots (2W + 2 messages); the
  other kinds move a W-independent multiple of n.

So at large W the one-shot loses its latency edge to the two-shot early (its link bytes
grow with W), and every algorithm's small-message time grows with W through its
barriers: on nvl72 a 1 MiB two-shot all-reduce is predicted 16 us at W = 8 and 31 us at
W = 72 (three barriers of 3.45 and 8.25 us), where a model without per-peer terms gave
15 us for both. Predictions, not measurements: no Blackwell machine has run them.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping, Sequence

from pkc.target.collectives import Algorithm, Collective
from pkc.target.targets import Target

from pkc.target.cost_basics import (_check_world, _target, barrier_time, launch_time, link_time)

# --------------------------------------------------------------------------------------
# collectives (standalone kernels on all SMs: the unfused baseline and pkc's lowerings)


@dataclass(frozen=True)
class Choice:
    """A picked algorithm, its predicted time, and the time of every alternative."""
    kind: Algorithm
    time: float
    alternatives: Mapping[Algorithm, float]


def _xfer(t: Target, link_bytes: float, hbm_bytes: float, mechanism: str) -> float:
    """Bandwidth term of a standalone collective on all SMs: the slower of link and HBM
    plus half the faster. Measured on 2 H200s (benchmarks/results/h200x2_2026-11-29b): a
    1 GiB one-shot all-reduce took 3.86 ms and a two-shot 3.38 ms with the same link bytes
    (2.89 ms at 371 GB/s); the gap follows their local traffic (6n vs 4n bytes) at about
    half its own time, so the two overlap only partly."""
    link = link_time(t, link_bytes, t.num_sms, mechanism)
    hbm = hbm_bytes / t.hbm_achievable_bw
    return max(link, hbm) + 0.5 * min(link, hbm)


def all_reduce_time(target, nbytes: float, W: int,
                    algo: Algorithm | str = Algorithm.TWO_SHOT) -> float:
    """All-reduce of an nbytes tensor on each of W ranks, over symmetric memory.

    one_shot: every rank pushes its whole buffer to all W-1 peers (ld/st) and sums the W
      slots it received: (W-1)*nbytes over its link; 2 barriers of W ranks.
    two_shot: reduce-scatter (push chunk c to rank c) then all-gather (push the reduced
      1/W to W-1 peers): 2*(W-1)/W*nbytes over the link; 3 barriers of W ranks.
    ring: one barrier, then 2(W-1) neighbour steps of nbytes/W, each waiting one one-way
      flag latency.
    """
    t = _target(target)
    _check_world(t, W)
    algo = _algorithm(algo, Collective.ALL_REDUCE, _ALL_REDUCE_ALGOS)
    if W == 1:
        return 0.0
    n = float(nbytes)
    if algo is Algorithm.ONE_SHOT:
        # local traffic: read the input, W slots written (pushed), W slots read, output
        body = barrier_time(t, W, 2) + _xfer(t, (W - 1) * n, (2 * W + 2) * n, "ldst")
    elif algo is Algorithm.TWO_SHOT:
        # per phase: n read and n written locally (slots in, results out)
        body = barrier_time(t, W, 3) + 2 * _xfer(t, (W - 1) / W * n, 2 * n, "ldst")
    else:
        step = t.one_way_latency + _xfer(t, n / W, 3 * n / W, "ldst")
        body = barrier_time(t, W) + 2 * (W - 1) * step
    return launch_time(t) + body


_ALL_REDUCE_ALGOS = (Algorithm.ONE_SHOT, Algorithm.TWO_SHOT, Algorithm.RING)
_GATHER_ALGOS = (Algorithm.DIRECT, Algorithm.RING)


def _algorithm(algo: Algorithm | str, op: Collective, known: Sequence[Algorithm]) -> Algorithm:
    """``algo`` as one of the algorithms the model rates for ``op``; a ValueError naming it
    and the known ones otherwise."""
    if algo not in known:
        raise ValueError(f"unknown {op} algo {algo!r}; known: {', '.join(known)}")
    return Algorithm(algo)


def _gather_like(t: Target, nbytes: float, W: int, algo: Algorithm | str, mechanism: str,
                 op: Collective) -> float:
    """All-gather / reduce-scatter with nbytes = the full (W-shard) tensor on each rank.

    direct: barrier, each rank moves (W-1)/W*nbytes to/from all peers at once, barrier
      (both of W ranks).
    ring: a barrier, then W-1 neighbour steps of nbytes/W, each waiting one one-way flag
      latency.
    """
    _check_world(t, W)
    algo = _algorithm(algo, op, _GATHER_ALGOS)
    if W == 1:
        return 0.0
    n = float(nbytes)
    if algo is Algorithm.DIRECT:
        body = barrier_time(t, W, 2) + _xfer(t, (W - 1) / W * n, n, mechanism)
    else:
        body = barrier_time(t, W) + (W - 1) * (t.one_way_latency + _xfer(t, n / W, 2 * n / W, mechanism))
    return launch_time(t) + body


def nvls_time(target, op: Collective | str, nbytes: float, W: int) -> float:
    """The NVLS (multimem) kernels of a target with ``nvls`` (schedule-collectives' armc /
    agmc); ``nbytes``: the all-reduce's tensor, the all-gather's output.

    all-reduce: copy-in, barrier, ``multimem.ld_reduce`` of the rank's chunk (the switch
      reads n/W from every GPU: a GPU's port sends n in all) and ``multimem.st`` of it (the
      switch delivers every chunk to every GPU: n received), barrier: n each way per port,
      where the two-shot moves 2(W-1)/W x n.
    all-gather: barrier, ``multimem.st`` of the shard (n/W sent, (W-1)/W x n received),
      barrier.
    The barriers are priced as the others' (:func:`barrier_time`; a ``multimem.red``
    flags every rank at once, so this overestimates their issue). An estimate from the
    link figures: no NVLS machine has run these kernels."""
    t = _target(target)
    _check_world(t, W)
    if not t.nvls:
        raise ValueError(f"nvls_time: target {t.name} has no NVLS (Target.nvls)")
    op = Collective.parse(op, "nvls_time")
    if W == 1:
        return 0.0
    n = float(nbytes)
    if op is Collective.ALL_REDUCE:
        body = barrier_time(t, W, 2) + _xfer(t, n, 3 * n, "ldst")
    elif op is Collective.ALL_GATHER:
        body = barrier_time(t, W, 2) + _xfer(t, (W - 1) / W * n, n, "ldst")
    else:
        raise ValueError(f"nvls_time: no NVLS kernel for {op} (all_reduce, all_gather)")
    return launch_time(t) + body


def all_gather_time(target, nbytes: float, W: int,
                    algo: Algorithm | str = Algorithm.DIRECT) -> float:
    """All-gather producing an nbytes tensor (W shards of nbytes/W); TMA copies."""
    return _gather_like(_target(target), nbytes, W, algo, "tma", Collective.ALL_GATHER)


def reduce_scatter_time(target, nbytes: float, W: int,
                        algo: Algorithm | str = Algorithm.DIRECT) -> float:
    """Reduce-scatter of an nbytes tensor on each rank into nbytes/W; TMA reduce-add puts
    (cp.reduce.async.bulk) so the link, not the adds, bounds it."""
    return _gather_like(_target(target), nbytes, W, algo, "tma", Collective.REDUCE_SCATTER)


def all_to_all_time(target, nbytes: float, W: int) -> float:
    """All-to-all where each rank sends nbytes in total (nbytes/W to each rank, itself
    included): barrier, (W-1)/W*nbytes over the link with TMA, barrier (of W ranks)."""
    t = _target(target)
    _check_world(t, W)
    if W == 1:
        return 0.0
    return launch_time(t) + barrier_time(t, W, 2) + _xfer(t, (W - 1) / W * nbytes, 2 * nbytes, "tma")


def _choose(times: dict) -> Choice:
    """Fastest entry; near-ties (1e-9 relative, float noise) go to the earlier, simpler one."""
    best = min(times.values())
    kind = next(k for k, v in times.items() if v <= best * (1 + 1e-9))
    return Choice(kind, times[kind], MappingProxyType(dict(times)))


def choose_all_reduce(target, nbytes: float, W: int) -> Choice:
    """Fastest of one_shot / two_shot / ring for this message size."""
    return _choose({a: all_reduce_time(target, nbytes, W, a) for a in _ALL_REDUCE_ALGOS})


def choose_all_gather(target, nbytes: float, W: int) -> Choice:
    """Fastest of direct / ring."""
    return _choose({a: all_gather_time(target, nbytes, W, a) for a in _GATHER_ALGOS})


def choose_reduce_scatter(target, nbytes: float, W: int) -> Choice:
    """Fastest of direct / ring."""
    return _choose({a: reduce_scatter_time(target, nbytes, W, a) for a in _GATHER_ALGOS})


def choose_all_to_all(target, nbytes: float, W: int) -> Choice:
    """Only the direct algorithm is modelled (NVSwitch gives every pair a path)."""
    return _choose({Algorithm.DIRECT: all_to_all_time(target, nbytes, W)})


