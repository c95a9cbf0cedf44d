"""The matchers of the ``overlap`` pass: which graph-level ops form a fusable pattern
(:func:`match` -> :class:`Match`), and why a near miss was not matched (the remarks of
``gather_near_miss``, ``reduction_near_miss``, ``moe_near_miss``). The forms each pattern
takes are listed in :mod:`pkc.passes.overlap`'s docstring; the rewrite is there too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from xdsl.dialects.builtin import BFloat16Type, Float16Type, Float32Type, TensorType
from xdsl.ir import Operation, SSAValue

from pkc.dialects import graph as g
from pkc.dialects.common import int_list
from pkc.dialects.graph_scaled import ScaledMatmulOp
from pkc.dialects.rank_groups import same_groups
from pkc.passes.patterns_bias import bias_view, split_bias
from pkc.target.cost import Pattern

_OPERAND_TYPES = (BFloat16Type, Float16Type, Float32Type)


@dataclass
class Match:
    """One instance of a pattern, ready to be replaced by a kernel."""

    pattern: Pattern
    anchor: Operation  # the collective: remarks go here when it stays unfused
    world: int
    inputs: list[SSAValue]  # kernel operands (before the 2-d views)
    views: list[TensorType | None]  # reshape operand i to this type first (None: as is)
    replaced: list[SSAValue]  # graph values the kernel's results replace, in order
    result_types: list[TensorType]  # the kernel's result types
    shapes: tuple  # for plan_fusion
    dead: list[Operation] = field(default_factory=list)  # erased afterwards, users first
    insert_before: Operation | None = None  # default: the anchor
    experts: int = 1
    capacity: int = 0
    gathered: bool = False
    scatter_dim: int = 0  # reduce-scatter: rows (0) or columns (1) of the 2-d product
    batches: int = 1  # reduce-scatter of rows: blocks of rows each scattered (3-d results)
    scaled: bool = False  # fp8 pk.scaled_matmul(s): inputs carry the scales (patterns_scaled)
    bias: bool = False  # reduce-scatter: the last input is the bias added before the sum
    problem: str | None = None  # why it cannot be fused, if it cannot
    hoisted: int = 0  # ops overlap_hoist moved before the gathered tensor's first use
    # ops of the pattern's kind left beside the kernel, each with why (remarked when fused)
    left: list[tuple[Operation, str]] = field(default_factory=list)


def match(op: Operation) -> Match | None:
    if isinstance(op, g.ReduceScatterOp):
        return _match_reduction(op, Pattern.MM_REDUCE_SCATTER)
    if isinstance(op, g.AllReduceOp):
        return _match_reduction(op, Pattern.MM_ALL_REDUCE)
    if isinstance(op, g.AllGatherOp):
        if len(shape_of(op.input)) >= 2 and op.dim.value.data == len(shape_of(op.input)) - 1:
            return _match_gather_k(op)
        return _match_all_gather(op)
    if isinstance(op, g.AllToAllOp):
        return _match_moe(op)
    return None


def shape_of(v: SSAValue) -> tuple[int, ...]:
    return tuple(v.type.get_shape())


def _owner(v: SSAValue, kind: type) -> Operation | None:
    op = v.owner
    return op if isinstance(op, kind) else None


def _single_use(v: SSAValue) -> bool:
    return v.has_one_use()


def _operand_problem(*mms: g.MatmulOp | ScaledMatmulOp) -> str | None:
    """Why the kernel's f32-accumulating MMAs cannot reproduce these matmuls, if so."""
    for mm in mms:
        t, r = mm.lhs.type.element_type, mm.result.type.element_type
        if isinstance(mm, ScaledMatmulOp):
            if mm.bias is not None:
                return ("a scaled matmul with a bias (the fused kernel adds no bias; add it "
                        "after the collective, once)")
            t = r  # fp8 operands: the MMAs take them; the result type decides
        if not isinstance(t, _OPERAND_TYPES):
            return (f"operands of {t} (the kernel's MMAs take bf16, f16 or f32 and accumulate "
                    "in f32)")
        if not isinstance(r, _OPERAND_TYPES):
            return f"a {r} result (the kernel accumulates in f32; bf16, f16 or f32 results only)"
    return None


def _match_reduction(coll: g.ReduceScatterOp | g.AllReduceOp, pattern: Pattern) -> Match | None:
    """A 2-d matmul whose product, directly or through a reshape that only splits its rows
    (the 3-d result of a linear layer), is all-reduced or reduce-scattered along any dim.
    The kernel works on the 2-d product [R, N]: a scatter along the last dim owns columns,
    along another dim d blocks of rows (one block per index of the dims before d)."""
    rs = isinstance(coll, g.ReduceScatterOp)  # a bias before a scatter: patterns_bias.py
    src, chain = coll.input, [coll]
    biased = split_bias(src) if rs else None
    view = _owner(biased[0] if biased else src, g.ReshapeOp)
    inner = view.input if view is not None else (biased[0] if biased else src)
    if rs and biased is None and (biased := split_bias(inner)) is not None:
        inner = biased[0]
    chain += [op for op in (biased and biased[2], view) if op]
    mm = _owner(inner, (g.MatmulOp, ScaledMatmulOp))
    if mm is None or len(shape_of(mm.result)) != 2 or (biased and not isinstance(mm, g.MatmulOp)):
        return None
    (R, N), shape = shape_of(mm.result), shape_of(coll.input)
    if view is not None and (not shape or shape[-1] != N):
        return None  # the reshape mixes the product's columns into rows: not a linear's view
    if not _single_use(mm.result) or (view is not None and not _single_use(view.result)):
        return None  # the unreduced product is needed elsewhere: not this pattern
    (M, K) = shape_of(mm.lhs)
    W = coll.world_size
    scatter_dim, batches, out = 0, 1, (R, N)
    if isinstance(coll, g.ReduceScatterOp):
        d = coll.dim.value.data
        if d == len(shape) - 1:
            scatter_dim, out = 1, (R, N // W)
        else:
            batches, out = math.prod(shape[:d]), (R // W, N)
    dead = sorted(chain, key=lambda op: -op.parent.get_operation_index(op)) + [mm]
    scaled = isinstance(mm, ScaledMatmulOp)
    inputs = [mm.lhs, mm.rhs] + ([mm.scale_lhs, mm.scale_rhs] if scaled else [])
    views = [None] * len(inputs) + ([bias_view(biased[1])] if biased else [])
    m = Match(pattern, coll, W, inputs + ([biased[1]] if biased else []), views, [coll.result],
              [TensorType(coll.result.type.element_type, out)], (M, N, K), dead=dead,
              scatter_dim=scatter_dim, batches=batches, scaled=scaled, bias=bool(biased))
    m.problem = _operand_problem(mm)
    if coll.reduce.data != "sum":
        m.problem = f"reduction \"{coll.reduce.data}\" (puts can only add)"
    return m


def gather_near_miss(ag: g.AllGatherOp) -> str | None:
    """Why a gather whose result reaches a matmul's lhs through views was not matched: it
    gathers along K through a reshape that mixes K into the rows. (A gather along a middle
    dim, DTensor sequence parallelism's [B, S/W, H] along dim 1, is overlap_gather_blocks'.)"""
    shape, d = shape_of(ag.input), ag.dim.value.data
    if d == 0 and len(shape) == 2:
        return None
    lhs_of_mm = lambda v: any(isinstance(u.operation, (g.MatmulOp, ScaledMatmulOp))  # noqa: E731
                              and u.index == 0 for u in v.uses)
    if d == len(shape) - 1 and any(isinstance(u.operation, g.ReshapeOp) and
                                   lhs_of_mm(u.operation.result) for u in ag.result.uses):
        # (a reshape to [rows, K] is matched by _match_gather_k)
        return (f"gather along dim {d} of {list(shape)}, the matmul's contraction dim K, "
                "through a reshape that does not keep K as the last dim of a 2-d [rows, K] "
                "operand: the fused kernel's K loop runs over whole shards of K")
    # a gather along a middle dim into a rows view: of one block, collective-views moves
    # the view before it; of several, overlap_gather_blocks matches it or says why not
    return None


def reduction_near_miss(coll: g.ReduceScatterOp | g.AllReduceOp) -> str | None:
    """Why a reduction whose input comes from a matmul through elementwise ops (a bias
    add, an activation) was not matched: the kernel reduces the GEMM's tiles as they are
    produced and has no epilogue between the MMA and the transfer."""
    maps: list[str] = []
    v = coll.input
    while True:
        op = v.owner
        if isinstance(op, g.MapOp):
            maps.append(op.fn.data)
        elif not isinstance(op, g.ReshapeOp):
            break
        v = op.operands[0]
    if not maps or not isinstance(v.owner, (g.MatmulOp, ScaledMatmulOp)):
        return None
    fns = ", ".join(f'"{f}"' for f in reversed(maps))
    return (f"the matmul's result goes through {fns} before the {coll.name.removeprefix('pk.')}; "
            "the fused kernel sends GEMM tiles as they are produced and has no epilogue to "
            "apply it (a bias can be added after the collective, once)")


def _match_all_gather(ag: g.AllGatherOp) -> Match | None:
    if ag.dim.value.data != 0 or len(shape_of(ag.input)) != 2:
        return None
    block = ag.parent
    users = list(dict.fromkeys(use.operation for use in ag.result.uses))
    if block is None or not users or any(u.parent is not block for u in users):
        return None
    users.sort(key=block.get_operation_index)  # program order
    first = users[0]
    limit = block.get_operation_index(first)

    def defined_before_first(v: SSAValue) -> bool:
        owner = v.owner
        return not isinstance(owner, Operation) or (
            owner.parent is block and block.get_operation_index(owner) < limit)

    consumers = [u for u in users if isinstance(u, (g.MatmulOp, ScaledMatmulOp))
                 and u.lhs == ag.result and u.rhs != ag.result and defined_before_first(u.rhs)]
    scales, scale_gather, problem = [], None, None
    scaled = [u for u in consumers if isinstance(u, ScaledMatmulOp)]
    if scaled:  # fp8: the consumers that share A's scale (others stay as they are)
        src, scale_gather, problem = _lhs_scale_source(ag, scaled[0])
        consumers = scaled if problem else [
            u for u in scaled if _lhs_scale_source(ag, u)[0] == src]
        others = [u for u in scaled if u not in consumers]
        scales = [src if problem is None else scaled[0].scale_lhs]
        if problem is None and not all(defined_before_first(v) for v in
                                       [src, *[u.scale_rhs for u in consumers]]):
            problem = "the scales are computed after the gathered tensor's first use"
    if not consumers:
        return None
    gathered = len(consumers) < len(users) or any(
        len([x for x in u.operands if x == ag.result]) > 1 for u in consumers)
    K = shape_of(ag.input)[1]
    replaced = [mm.result for mm in consumers] + ([ag.result] if gathered else [])
    inputs = [ag.input, *scales[:1], *[mm.rhs for mm in consumers]]
    if scales:
        inputs += [mm.scale_rhs for mm in consumers]
    dead = [*consumers, ag]
    if scale_gather is not None and all(u.operation in consumers
                                        for u in scale_gather.result.uses):
        dead.append(scale_gather)  # gathered by the kernel, with A
    m = Match(Pattern.ALL_GATHER_MM, ag, ag.world_size, inputs,
              [None] * len(inputs), replaced, [v.type for v in replaced],
              (shape_of(ag.result)[0], tuple(shape_of(mm.rhs)[1] for mm in consumers), K),
              dead=dead, insert_before=first, gathered=gathered, scaled=bool(scales))
    m.problem = problem or _operand_problem(*consumers)
    if scaled:      # one kernel scales every weight's tiles by one A scale
        m.left = [(u, "left unfused: a scaled matmul of the gathered fp8 tensor whose A "
                      "scale is not the fused matmuls' (the kernel over several weights "
                      "scales every tile by one A scale); it reads the gathered tensor")
                  for u in others]
    return m


def _match_gather_k(ag: g.AllGatherOp) -> Match | None:
    """An all-gather along the last dim feeding a matmul as its lhs: the contraction dim K
    (2-d ``[M, Kc]``, or n-d ``[..., Kc]`` through the reshape to ``[R, K]`` a linear
    layer makes). The first such matmul in program order is fused (its 2-d weight
    ``[K, N]`` defined before the gather's first use); when the gathered tensor has any
    other user the kernel also returns it (``[R, K]``, the gathered layout)."""
    block, shape = ag.parent, shape_of(ag.input)
    users = list(dict.fromkeys(use.operation for use in ag.result.uses))
    if block is None or not users or any(u.parent is not block for u in users):
        return None
    K = shape_of(ag.result)[-1]
    R = math.prod(shape[:-1])

    def consumer_of(v: SSAValue):
        return [u.operation for u in v.uses if u.index == 0 and
                isinstance(u.operation, (g.MatmulOp, ScaledMatmulOp))]

    view = None
    mms = consumer_of(ag.result) if len(shape) == 2 else []
    if len(shape) > 2:
        views = [u for u in users if isinstance(u, g.ReshapeOp) and
                 shape_of(u.result) == (R, K) and consumer_of(u.result)]
        if not views:
            return None
        view = min(views, key=block.get_operation_index)
        mms = consumer_of(view.result)
    if not mms:
        return None
    users.sort(key=block.get_operation_index)
    first = users[0]
    mm = min(mms, key=block.get_operation_index)
    gathered = any(u not in (mm, view) for u in users) or mm.rhs in (ag.result, mm.lhs) or (
        view is not None and any(u.operation is not mm for u in view.result.uses))
    xt = ag.input.type
    # fp8: torch's scale_a [R, 1] scales the row of the whole gathered K (one [R, 1]
    # tensor on every rank, not gathered) and the kernel sums every shard's product in
    # f32 before its epilogue scales it once, as _scaled_mm does: A's and B's scales are
    # operands as they are (patterns_scaled: X, B, SA, SB)
    scaled = isinstance(mm, ScaledMatmulOp)
    inputs = [ag.input, mm.rhs] + ([mm.scale_lhs, mm.scale_rhs] if scaled else [])
    views_ = [None if len(shape) == 2 else TensorType(xt.element_type, [R, shape[-1]])]
    views_ += [None] * (len(inputs) - 1)
    replaced = [mm.result] + ([ag.result] if gathered else [])
    types = [mm.result.type] + ([TensorType(xt.element_type, [R, K])] if gathered else [])
    dead = [mm] + ([view] if view is not None and view.result.has_one_use() else []) + [ag]
    N = shape_of(mm.rhs)[-1]
    m = Match(Pattern.ALL_GATHER_K_MM, ag, ag.world_size, inputs, views_, replaced, types,
              (R, N, K), dead=dead, insert_before=first, gathered=gathered, scaled=scaled)

    def late(v: SSAValue) -> bool:
        owner = v.owner
        return isinstance(owner, Operation) and (owner.parent is not block or
                                                 block.get_operation_index(owner) >
                                                 block.get_operation_index(first))

    if len(shape_of(mm.rhs)) != 2 or len(shape_of(mm.result)) != 2:
        m.problem = f"a matmul with a {len(shape_of(mm.rhs))}-d weight (the kernel takes [K, N])"
    elif late(mm.rhs):
        m.problem = ("the weight is computed after the gathered tensor's first use (the "
                     "fused kernel runs there)")
    elif scaled and (late(mm.scale_lhs) or late(mm.scale_rhs)):
        m.problem = ("the scales are computed after the gathered tensor's first use (the "
                     "fused kernel runs there)")
    else:
        m.problem = _operand_problem(mm)
    return m


def _lhs_scale_source(ag: g.AllGatherOp, mm: Operation):
    """(what the kernel takes as A's scale, the gather of it or None, why not) for a scaled
    consumer of ``ag``: a tensor-wise scale as it is; a row-wise one must be the all_gather
    (same dim, ranks and groups) of the shard's [Ms, 1] scale, which the kernel gathers
    with A instead."""
    s = mm.scale_lhs
    if len(shape_of(s)) == 1:
        return s, None, None
    sg = _owner(s, g.AllGatherOp)
    if sg is None or sg.dim.value.data != 0 or sg.world_size != ag.world_size or \
            not same_groups(sg, ag):
        return None, None, ("A's row-wise scale is not the all_gather of the shard's scale "
                            "(the fused kernel gathers each rank's scale rows with its rows "
                            "of A)")
    return sg.input, sg, None


def _match_moe(a2: g.AllToAllOp) -> Match | None:
    """a2 is the combining all_to_all; see the module docstring for forms (a), (b), (c)."""
    W = a2.world_size
    found = _moe_down(a2)
    if found is None:
        return None
    mm, down, E = found
    up = _moe_up(mm, W, E, len(shape_of(a2.input)))
    if up is None:
        return None
    a1, up_chain = up
    if not same_groups(a1, a2):
        return None  # dispatch and combine over different groups: not one kernel
    chain_values = [a1.result, *[o.result for o in up_chain], mm.result,
                    *[o.result for o in down]]
    if not all(_single_use(v) for v in chain_values):
        return None
    x, w = a1.input, mm.rhs
    K, N = shape_of(w)[-2:]
    R = a1.input.type.element_count() // K  # token rows on each rank: W*E*C
    C = R // (W * E)
    if shape_of(x)[-1] != K or shape_of(a2.result)[-1] != N:
        return None
    xt, wt = x.type, w.type
    views = [None if len(shape_of(x)) == 2 else TensorType(xt.element_type, [R, K]),
             None if len(shape_of(w)) == 2 else TensorType(wt.element_type, [E * K, N])]
    out = TensorType(a2.result.type.element_type, [R, N])
    m = Match(Pattern.MOE, a2, W, [x, w], views, [a2.result], [out],
              (R, N, K, E), dead=[a2, *reversed(down), mm, *reversed(up_chain), a1],
              experts=E, capacity=C)
    m.problem = _operand_problem(mm)
    return m


_VIEWS = (g.ReshapeOp, g.TransposeOp)


def moe_near_miss(a2: g.AllToAllOp) -> str | None:
    """Why an all_to_all that combines expert outputs was not matched, when elementwise
    ops sit between the expert matmul and it (``a2a -> matmul -> gelu -> a2a``): the fused
    kernel sends each matmul tile as it is produced and has no epilogue for them."""
    maps: list[str] = []
    v = a2.input
    while True:
        op = v.owner
        if isinstance(op, g.MapOp) and len(op.inputs) == 1:
            maps.append(op.fn.data)
        elif not isinstance(op, _VIEWS):
            break
        v = op.operands[0]
    if not maps or not isinstance(v.owner, g.MatmulOp):
        return None
    lhs = v.owner.lhs
    while isinstance(lhs.owner, _VIEWS):
        lhs = lhs.owner.input
    if not isinstance(lhs.owner, g.AllToAllOp):
        return None
    fns = ", ".join(f'"{f}"' for f in reversed(maps))
    return (f"the expert matmul's output goes through {fns} before the combining all_to_all; "
            "the fused kernel sends matmul tiles as they are produced and has no epilogue "
            "to apply it (move the activation after the all_to_all to fuse)")


def _a2a(v: SSAValue, rank: int, split: int, concat: int, world: int) -> g.AllToAllOp | None:
    op = _owner(v, g.AllToAllOp)
    if op is None or len(shape_of(op.input)) != rank or op.world_size != world:
        return None
    if (op.split_dim.value.data, op.concat_dim.value.data) != (split, concat):
        return None
    return op


def _is_swap01(op: Operation | None) -> bool:
    return isinstance(op, g.TransposeOp) and int_list(op.perm) == [1, 0, 2, 3]


def _moe_down(a2: g.AllToAllOp):
    """(matmul, view ops from the matmul to a2 in order, experts E) or None."""
    W, rank = a2.world_size, len(shape_of(a2.input))
    split, concat = a2.split_dim.value.data, a2.concat_dim.value.data
    if rank == 3 and (split, concat) == (1, 0):  # form (a)
        mm = _owner(a2.input, g.MatmulOp)
        if mm is None or len(shape_of(mm.result)) != 3:
            return None
        return mm, [], shape_of(mm.result)[0]
    if rank != 2 or (split, concat) != (0, 0):
        return None
    mm = _owner(a2.input, g.MatmulOp)
    if mm is not None:  # form (b)
        return (mm, [], 1) if len(shape_of(mm.result)) == 2 else None
    r4 = _owner(a2.input, g.ReshapeOp)  # form (c)
    t2 = _owner(r4.input, g.TransposeOp) if r4 else None
    r3 = _owner(t2.input, g.ReshapeOp) if _is_swap01(t2) else None
    mm = _owner(r3.input, g.MatmulOp) if r3 else None
    if mm is None or len(shape_of(mm.result)) != 3:
        return None
    E, T, N = shape_of(mm.result)
    if T % W or shape_of(r3.result) != (E, W, T // W, N):
        return None
    return mm, [r3, t2, r4], E


def _moe_up(mm: g.MatmulOp, W: int, E: int, rank: int):
    """(first all_to_all, view ops from it to the matmul in order) or None."""
    lhs = shape_of(mm.lhs)
    if len(lhs) == 3:
        _, T, K = lhs
        if T % W:
            return None
        if rank == 3:  # form (a)
            a1 = _a2a(mm.lhs, 3, 0, 1, W)
            return (a1, []) if a1 is not None and shape_of(a1.input)[0] == W * E else None
        r2 = _owner(mm.lhs, g.ReshapeOp)  # form (c)
        t = _owner(r2.input, g.TransposeOp) if r2 else None
        r1 = _owner(t.input, g.ReshapeOp) if _is_swap01(t) else None
        a1 = _a2a(r1.input, 2, 0, 0, W) if r1 else None
        if a1 is None or shape_of(r1.result) != (W, E, T // W, K):
            return None
        return a1, [r1, t, r2]
    a1 = _a2a(mm.lhs, 2, 0, 0, W)  # form (b)
    if a1 is None or rank != 2 or shape_of(mm.lhs)[0] % W:
        return None
    return a1, []
