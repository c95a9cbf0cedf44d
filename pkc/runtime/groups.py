"""Sub-group kernels on the GPU: each group of a kernel's ``group_ranks`` gets peers of its own.

A ``pk.kernel`` (or a scheduled collective) with ``group_ranks = [[0, 1], [2, 3]]`` is
compiled for one group (its ``world`` is the group's size, ``pk.rank`` and peer indices
are positions inside the group: :mod:`pkc.dialects.rank_groups`), so the kernel itself
needs nothing new. What the runtime gives it, per group:

* peers that are the group's members only: symmetric buffers with one copy per member,
  their device pointer arrays listing the members in group order, signal pads and epoch
  control words of that group (a launcher instance per group: its epochs count that
  group's launches), error-mailbox slots labelled with the group;
* a group-local rank: rank ``members[j]`` of the program is rank ``j`` of the kernel.

Two worlds:

* the virtual world (one GPU, every rank in this process): :class:`GroupPeers` is a view
  of the program's :class:`~pkc.runtime.peers.VirtualPeers` restricted to one group
  (member ``j`` launches on the lane, hence the SM partition, of program rank
  ``members[j]``); :func:`world_view` does the same for the portable path's
  :class:`~pkc.runtime.world.VirtualWorld`. The groups of one kernel run one after the
  other on torch's stream (each group's ranks concurrently on their lanes), which is all
  a kernel needs: ranks of different groups never wait for each other.
* ``torch.distributed`` (one process per GPU): a
  :class:`~pkc.runtime.symm.DistributedRunner` (and its
  :class:`~pkc.runtime.peers.DistributedPeers`) over the process group with exactly this
  rank's group's members, so symmetric memory's rendezvous and barriers span the group
  only. That process group is the one the user's program made (a ``DeviceMesh`` makes one
  per group of each dimension), else made here with ``new_subgroups_by_enumeration``
  (every rank prepares the same program, so every rank calls it, in the same order).

Not supported (an error names the op and its groups): groups whose members are not in
increasing order under torch.distributed (a process group numbers its ranks in increasing
order, the kernel by position in the group).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import replace

import torch

from pkc.runtime.peers import Peers, Symmetric

Step = Callable[[dict], dict]


def _label(op) -> str:
    name = getattr(op, "kernel_name", None)
    return f"'{op.name}' @{name.data}" if name is not None else f"'{op.name}'"


# ---------------------------------------------------------------------- the virtual world


class _GroupMailbox:
    """The parent's host-mapped mailbox; a slot's kernel name says which group it ran in
    (the record's ranks are positions in that group, as the kernel numbers them)."""

    def __init__(self, parent, members: list[int]):
        self.parent, self.members = parent, members

    def slot(self, kernel: str, rank: int, kinds: dict) -> int:
        return self.parent.slot(f"{kernel} [group {self.members}, ranks numbered inside it]",
                                rank, kinds)

    def reports(self, clear: bool = False) -> list[str]:
        return self.parent.reports(clear)


class GroupPeers(Peers):
    """A view of ``parent`` (a :class:`~pkc.runtime.peers.VirtualPeers`, every rank in this
    process) restricted to ``members``: ``world`` is the group's size, ``ranks`` are
    ``0 .. world-1``, rank ``j`` is program rank ``members[j]`` (its lane, its SMs).
    Allocations are the view's own (a symmetric buffer has one copy per member)."""

    def __init__(self, parent, members: Sequence[int]):
        # not Peers.__init__: the parent made the context, the mailbox and the lanes
        self.parent = parent
        self.members = list(members)
        self.world = len(self.members)
        self.ranks = list(range(self.world))
        self.device = parent.device
        self.trap = parent.trap
        self.sms = parent.sms
        self.mailbox = _GroupMailbox(parent.mailbox, self.members)
        self._sym: dict[object, Symmetric] = {}
        self._local: dict[object, dict[int, torch.Tensor]] = {}
        self._start = None

    def _make_symmetric(self, shape, dtype) -> Symmetric:
        ts = {r: torch.empty(shape, dtype=dtype, device=self.device) for r in self.ranks}
        ptrs = [ts[r].data_ptr() for r in self.ranks]
        return Symmetric(ts, ptrs, torch.tensor(ptrs, dtype=torch.int64, device=self.device))

    def _lane(self, rank: int):
        return self.parent.lanes[self.members[rank]]

    def stream(self, rank: int) -> int:
        return self.parent.stream(self.members[rank])

    def sms_of(self, rank: int) -> int:
        return self.parent.sms_of(self.members[rank])

    def begin(self) -> None:
        from pkc.runtime.driver import call, new_event, stream_handle

        if self._start is None:
            self._start = new_event()
        torch_stream = stream_handle(torch.cuda.current_stream(self.device))
        call("cuEventRecord", self._start, torch_stream)
        for r in self.ranks:
            call("cuStreamWaitEvent", self._lane(r).stream, self._start, 0)

    def end(self) -> None:
        from pkc.runtime.driver import call, stream_handle

        torch_stream = stream_handle(torch.cuda.current_stream(self.device))
        for r in self.ranks:
            lane = self._lane(r)
            call("cuEventRecord", lane.done, lane.stream)
            call("cuStreamWaitEvent", torch_stream, lane.done, 0)

    def sync_all(self) -> None:
        self.parent.sync_all()

    def raise_timeouts(self) -> None:
        self.parent.raise_timeouts()


def group_peers(parent, members: Sequence[int]) -> GroupPeers:
    """The view of ``parent`` for ``members`` (one per group and parent: a kernel that
    reads another's symmetric output, the pull all-gather after a fused reduce-scatter,
    finds it in the same view)."""
    views = parent.__dict__.setdefault("_group_views", {})
    key = tuple(members)
    if key not in views:
        views[key] = GroupPeers(parent, members)
    return views[key]


def world_view(world, members: Sequence[int]):
    """The portable path's :class:`~pkc.runtime.world.VirtualWorld` restricted to
    ``members`` (rank ``j`` launches on program rank ``members[j]``'s lane), or None when
    there is no portable runner (``world`` None)."""
    if world is None:
        return None
    views = world.__dict__.setdefault("_group_views", {})
    key = tuple(members)
    if key not in views:
        v = copy.copy(world)
        v.world = len(members)
        v.lanes = [replace(world.lanes[m], rank=j) for j, m in enumerate(members)]
        v._errors, v._unchecked = {}, {}
        v.__dict__.pop("_group_views", None)
        views[key] = v
    return views[key]


# ---------------------------------------------------------------------- torch.distributed

_DIST: dict[tuple, tuple] = {}


def process_group_of(op, groups: list[list[int]]):
    """(process group, members) of this process's group of ``op``'s ``groups``: the
    user's process group with exactly those ranks, else one made here for every group."""
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _world

    me = dist.get_rank()
    mine = next((grp for grp in groups if me in grp), None)
    if mine is None:
        raise ValueError(f"{_label(op)} runs in sub-groups {groups}, none of which lists this "
                         f"process's rank {me}")
    if list(mine) != sorted(mine):
        raise NotImplementedError(
            f"{_label(op)} runs in sub-group {mine} (of {groups}) whose ranks are not in "
            "increasing order: a torch.distributed process group numbers its ranks in "
            "increasing order, the kernel by position in the group")
    for pg, ranks in _world.pg_group_ranks.items():
        if sorted(ranks) == mine:
            return pg, list(mine)
    # none yet: make every group's (collective over all ranks); the next lookup finds it
    own, _all = dist.new_subgroups_by_enumeration(groups)
    return own, list(mine)


def distributed_group(op, groups: list[list[int]], device: torch.device):
    """(runner, members, local rank) for this process's group of ``op``: a
    :class:`~pkc.runtime.symm.DistributedRunner` over that group's process group (one per
    group, shared by every kernel of the group)."""
    from pkc.runtime.symm import DistributedRunner

    pg, members = process_group_of(op, groups)
    key = ("runner", pg, device.index)      # the process group itself: a new one, a new runner
    if key not in _DIST:
        _DIST[key] = (DistributedRunner(pg, device.index),)
    runner = _DIST[key][0]
    import torch.distributed as dist

    me = dist.get_rank()
    if runner.rank != members.index(me):
        raise NotImplementedError(
            f"{_label(op)}: rank {me} is rank {runner.rank} of its process group but "
            f"position {members.index(me)} of its group {members}")
    return runner, members, runner.rank


# ---------------------------------------------------------------------- one step per group


def grouped_step(parts: list[tuple[list[int], Step]]) -> Step:
    """One step from per-group steps: ``parts[i] = (members, step over group-local ranks)``.
    Program rank ``members[j]``'s operands go to the group's step as rank ``j``; its
    results come back under the program rank. Only the groups with a driven rank run."""

    def run(vals: dict) -> dict:
        out = {}
        for members, step in parts:
            mine = {j: vals[r] for j, r in enumerate(members) if r in vals}
            if not mine:
                continue
            res = step(mine)
            for j, v in res.items():
                out[members[j]] = v
        return out
    return run


__all__ = ["GroupPeers", "group_peers", "world_view", "process_group_of", "distributed_group",
           "grouped_step"]
