"""Sub-group collectives: the ``group_ranks`` attribute of collectives and kernels.

A program runs on W ranks. A collective (``pk.all_reduce``, ...) or a ``pk.kernel``
without ``group_ranks`` spans all of them (its ``world`` is W). With
``group_ranks = [[0, 1], [2, 3]]`` it runs inside each listed group independently: its
``world`` is the size of one group (shapes depend on it: an all-gather over a group of 2
doubles its dim), and every rank takes part in the collective of the group that lists
it. Inside a group, the rank's position in the list is its rank for the collective
(chunk order, ``pk.rank`` inside a kernel, peer indices of ``pk.put`` / ``pk.signal``),
so a kernel's body is the same code for a sub-group as for a whole world of that size:
a kernel over sub-groups is the kernel of one group, launched once per group.

This is how a 2-D device mesh looks: ``init_device_mesh((2, 2), ("dp", "tp"))`` over 4
ranks has TP groups ``[[0, 1], [2, 3]]`` and DP groups ``[[0, 2], [1, 3]]``.

Rules (checked by the verifiers of the ops that carry the attribute): every group lists
``world`` ranks; the groups are disjoint and together are the ranks ``0 .. G*world - 1``
of the program (G groups), each listed once. All collectives and kernels of one program
must describe the same total W (the interpreter checks that when it runs them).
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import ArrayAttr, IntegerAttr, i64
from xdsl.ir import Attribute, Operation
from xdsl.utils.exceptions import VerifyException

ATTR = "group_ranks"

Groups = list[list[int]]


def groups_attr(groups: Sequence[Sequence[int]]) -> ArrayAttr:
    return ArrayAttr([ArrayAttr([IntegerAttr(r, i64) for r in grp]) for grp in groups])


def parse_groups(attr: Attribute | None) -> Groups | None:
    """The groups an attribute lists, or None when it is absent. Raises ValueError for an
    attribute that is not a list of lists of integers."""
    if attr is None:
        return None
    if not isinstance(attr, ArrayAttr):
        raise ValueError(f"must be a list of rank lists, got {attr}")
    out = []
    for grp in attr.data:
        if not isinstance(grp, ArrayAttr) or not all(isinstance(r, IntegerAttr) for r in grp.data):
            raise ValueError(f"must be a list of rank lists, got {attr}")
        out.append([r.value.data for r in grp.data])
    return out


def rank_groups(op: Operation) -> Groups | None:
    """``op``'s sub-groups (None: the whole world)."""
    return parse_groups(op.attributes.get(ATTR))


def program_world(op: Operation, world: int) -> int:
    """The number of ranks of the program ``op`` belongs to, ``world`` being its own."""
    groups = rank_groups(op)
    return world if groups is None else len(groups) * world


def same_groups(a: Operation, b: Operation) -> bool:
    return rank_groups(a) == rank_groups(b)


def copy_groups(src: Operation, *dst: Operation) -> None:
    """Gives ``dst`` the sub-groups of ``src`` (a rewrite keeps the group of what it replaces)."""
    attr = src.attributes.get(ATTR)
    if attr is not None:
        for op in dst:
            op.attributes[ATTR] = attr


def check_groups(groups: Groups, world: int) -> str | None:
    """Why ``groups`` is not a partition of ranks 0..G*world-1 into groups of ``world``
    ranks, or None when it is."""
    if not groups:
        return "lists no group"
    for i, grp in enumerate(groups):
        if len(grp) != world:
            return f"group {i} {grp} has {len(grp)} ranks, but the op's world is {world}"
    seen: dict[int, int] = {}
    for i, grp in enumerate(groups):
        for r in grp:
            if r in seen:
                where = "twice in" if seen[r] == i else f"in groups {seen[r]} and"
                return f"rank {r} is listed {where} group {i}; groups must be disjoint"
            seen[r] = i
    total = len(groups) * world
    missing = sorted(set(range(total)) - set(seen))
    if missing:
        outside = sorted(r for r in seen if not 0 <= r < total)
        return (f"the groups must cover ranks 0..{total - 1} of the program; rank(s) {missing} "
                f"are missing (listed instead: {outside})")
    return None


def verify_groups(op: Operation, world: int) -> None:
    """The verifier's check of ``group_ranks`` on ``op`` (absent: nothing to check)."""
    try:
        groups = rank_groups(op)
    except ValueError as err:
        raise VerifyException(f"'{op.name}' group_ranks {err}") from None
    if groups is None:
        return
    why = check_groups(groups, world)
    if why is not None:
        raise VerifyException(f"'{op.name}' group_ranks {why}")


def group_remark(op: Operation) -> str | None:
    """The remark a pass writes on a kernel it built over sub-groups (None: whole world)."""
    groups = rank_groups(op)
    if groups is None:
        return None
    return (f"runs in each of {len(groups)} groups of {len(groups[0])} ranks {groups}: one "
            "group's kernel, ranks and peers numbered inside the group")


def infer_partition(group: Sequence[int], world: int) -> Groups | None:
    """All groups of a device-mesh dimension from the one a rank was traced in.

    A capture sees only its own rank's group (``[0, 1]`` of a 2x2 mesh's TP dimension).
    The other groups of that dimension are its translates: the mesh is a regular grid of
    ranks (``init_device_mesh`` lays ranks out in row-major order), so group ``g + b``
    for the smallest rank ``b`` not yet placed. Returns None when the translates do not
    tile ``0 .. world-1`` (not a regular mesh dimension; pkc cannot tell the other groups).
    """
    base = sorted(group)
    if not base or base[0] < 0 or world % len(base):
        return None
    offsets = [r - base[0] for r in base]
    left = set(range(world))
    out: Groups = []
    while left:
        b = min(left)
        grp = [b + o for o in offsets]
        if not all(r in left for r in grp):
            return None
        left -= set(grp)
        out.append(grp)
    return out if any(base == g for g in out) else None
