"""The collectives pkc lowers and the algorithms the cost model rates for them.

Their values are the words the IR and the remarks have always used (``pk.plan.collective``,
``pk.plan.algorithm``, kernel names such as ``all_reduce_one_shot``, the
``lower-collectives`` options), so members print and compare as those strings did.
"""

from __future__ import annotations

from pkc.kinds import Kind


class Collective(Kind):
    """A collective operation (the graph-level ``pk.<value>`` op)."""

    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_TO_ALL = "all_to_all"


class Algorithm(Kind):
    """How a lowered collective moves its data (chosen from the cost model)."""

    ONE_SHOT = "one_shot"    # every rank pushes all of its data to every peer
    TWO_SHOT = "two_shot"    # reduce-scatter, then all-gather of the reduced chunks
    RING = "ring"            # W - 1 neighbour steps
    DIRECT = "direct"        # each chunk straight to its rank, all at once
