"""The schedule-level ops that never block, run by one actor of
:class:`pkc.interp.schedule.ScheduleRun` (``R``): copies, MMAs, accumulator stores, tensor
maps. Each handler returns True where other actors may now observe something (a point
where the scheduler may switch).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from pkc.dialects import schedule as s
from pkc.dialects.kernel import AllocOp
from pkc.dialects.schedule_fused import ScaleSelectOp
from pkc.dialects.types import BufferType
from pkc.interp.schedule_state import Acc, Actor, Mma, Read, Smem, TmaLoad, Write
from pkc.interp.values import InterpError, torch_dtype, where

ROW_BYTES = 128        # an MMA operand row: 64 16-bit elements of K (the 128-byte swizzle span)
_DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32,
           "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


class Tmap:
    """A tensor map evaluated: the kernel buffer it describes and its box."""

    def __init__(self, op: s.TmapOp, buf_type: BufferType, dims: Sequence[int] | None = None):
        t: s.TmapType = op.result.type
        self.op, self.buffer = op, op.buffer
        self.dtype = _DTYPES[t.element.data]
        self.box = list(reversed(t.box_dims))        # outermost first, as torch indexes
        self.box_bytes = t.box_bytes
        self.dims = list(dims) if dims else None     # the buffer seen as these (pks.tmap_view)
        shape = self.dims or buf_type.get_shape()
        if torch_dtype(buf_type.element_type) != self.dtype or len(shape) != len(self.box):
            raise InterpError(f"{where(op)} describes {buf_type} with a {t}: the element type "
                              "and rank must match")
        inner = shape[-1] * self.dtype.itemsize
        if len(shape) > 1 and inner % 16:
            raise InterpError(f"{where(op)}: rows of {buf_type} are {inner} bytes; TMA needs "
                              "global strides that are multiples of 16 bytes")

    peer = -1            # >= 0: over rank ``peer``'s copy (pks.peer_tmap, pks.rows_tmap)
    rows: slice | None = None    # a window of the buffer's rows (pks.rows_tmap)

    def target(self, R, a: Actor) -> tuple[int, torch.Tensor, torch.Tensor]:
        """(rank, its whole copy of the buffer, the part the map describes)."""
        rank = self.peer if self.peer >= 0 else a.rank
        full = R.data[self.buffer][rank]
        if self.dims:
            return rank, full, full.view(self.dims)
        return rank, full, (full[self.rows] if self.rows is not None else full)

    def tracked(self) -> bool:
        """Whether accesses are checked for ordering (memory other ranks or launches write:
        symmetric buffers and pk.allocs; a GEMM's own inputs and outputs are not)."""
        return self.buffer.type.symmetric or isinstance(self.buffer.owner, AllocOp)

    def words(self, full: torch.Tensor, bs) -> torch.Tensor:
        """The 32-bit words of ``full`` that the in-bounds box ``bs`` covers."""
        elems = torch.arange(full.numel()).view(self.dims or full.shape)
        if self.rows is not None:
            elems = elems[self.rows]
        return torch.unique(elems[bs].reshape(-1) * full.element_size() // 4)

    def window(self, coords: Sequence[int], shape: Sequence[int]):
        """(buffer slices, box slices) of the in-bounds part of the box at ``coords``
        (innermost first, as the op takes them)."""
        bs, ts = [], []
        for c, b, n in zip(reversed(list(coords)), self.box, shape):
            lo, hi = max(c, 0), min(c + b, n)
            hi = max(hi, lo)
            bs.append(slice(lo, hi))
            ts.append(slice(lo - c, hi - c))
        return tuple(bs), tuple(ts)


def grouped_tile(tile: int, num_mc: int, num_n: int, group_m: int) -> tuple[int, int]:
    """(row block of clusters, column block) of tile ``tile`` in grouped order
    (``pks.tile_loop``'s doc): ``group_m`` row blocks share a column sweep."""
    group = num_n * group_m
    g = tile // group
    first = g * group_m
    gsz = min(num_mc - first, group_m)
    r = tile - g * group
    return first + r % gsz, r // gsz


def _arrive(R, a: Actor, op: s.MbarrierArriveOp, env) -> bool:
    if op.pred is not None and not env[op.pred]:
        return False
    tx = op.tx_bytes.data if op.tx_bytes is not None else 0
    if op.all_ctas is not None and getattr(R, "pair", False):
        ctas = [a.cta - a.cta % 2, a.cta - a.cta % 2 + 1]     # the CTAs of its pair
    elif op.all_ctas is not None and R.cluster > 1:
        base = a.cta - a.cta % R.cluster
        ctas = range(base, base + R.cluster)
    else:
        ctas = [a.cta]
    for c in ctas:
        R._bar(a, op, env, op.bars, op.index, c).arrive(a, op, tx)
    a.clock[a.aid] += 1
    R.version += 1
    return True


def pair_targets(R, a: Actor, mask: int, place: int | None = None) -> list[int]:
    """The CTA at ``a``'s place (or ``place``) in each pair of ``mask`` of its cluster."""
    if not getattr(R, "pair", False) or mask >> (R.cluster // 2):
        raise InterpError(f"pair multicast {mask:#b} in a cluster of {R.cluster} CTAs "
                          f"{'' if getattr(R, 'pair', False) else '(not CTA pairs)'}")
    base = a.cta - a.cta % R.cluster
    pl = a.cta % 2 if place is None else place
    return [base + 2 * p + pl for p in range(R.cluster // 2) if mask >> p & 1]


def _tma_load(R, a: Actor, op: s.TmaLoadOp, env) -> bool:
    tm: Tmap = env[op.tmap]
    coords = [env[c] for c in op.coords]
    slot, off = env[op.slot], env[op.offset]
    mc = op.multicast.data if op.multicast is not None else 0
    if mc > 1 and mc != R.cluster:
        raise InterpError(f"{a.at(op)}: multicast to {mc} CTAs in clusters of {R.cluster}")
    base = a.cta - a.cta % R.cluster
    ctas = range(base, base + R.cluster) if mc > 1 else [a.cta]
    if op.pair_multicast is not None:   # this CTA's place in each pair of the mask
        ctas = pair_targets(R, a, op.pair_multicast.data)
    at = a.at(op)
    targets = []
    for c in ctas:
        smem: Smem = R.cta_objs[a.rank, c][op.dst]
        smem.check_range(at, slot, off, off + tm.box_bytes)
        smem.check_write(a, at, slot, off, off + tm.box_bytes)
        # a CTA pair counts both CTAs' loads on the even CTA's mbarrier (its MMA waits there)
        bar = R._bar(a, op, env, op.bars, op.bar, c - c % 2 if getattr(R, "pair", False) else c)
        rec = Write(off, off + tm.box_bytes, op, f"{at} at coordinates {coords}", pending=True)
        smem.begin_write(slot, rec)
        targets.append((smem, slot, rec, bar))
    rank, full, src = tm.target(R, a)
    if tm.tracked():             # what another rank or launch wrote: ordered before the load
        bs, _ = tm.window(coords, src.shape)
        words = tm.words(full, bs)
        if words.numel():
            R.gbuf(tm.buffer, rank).read(a, at, words)

    def box() -> torch.Tensor:
        out = torch.zeros(tm.box, dtype=tm.dtype)
        bs, ts = tm.window(coords, src.shape)
        out[ts] = src[bs]
        return out

    R.loads.append(TmaLoad(op, at, box, targets))
    return True


def _mma(R, a: Actor, op: s.MmaAsyncOp, env) -> bool:
    if getattr(R, "pair", False):
        return _pair_mma(R, a, op, env)
    acc: Acc = env[op.acc]
    ta, tb = op.types
    dt, dtb = _DTYPES[ta], _DTYPES[tb]
    kd = op.k_depth                     # 64 (16-bit) or 128 (fp8) elements of K
    at = a.at(op)
    A: Smem = env[op.a]
    B: Smem = env[op.b]
    a_slot, a_row, b_slot = env[op.a_slot], env[op.a_row], env[op.b_slot]
    a0, a1 = a_row * ROW_BYTES, (a_row + acc.rows) * ROW_BYTES
    b1 = acc.cols * ROW_BYTES
    A.check_range(at, a_slot, a0, a1)
    B.check_range(at, b_slot, 0, b1)
    A.check_read(a, at, a_slot, a0, a1, async_proxy=True)
    B.check_read(a, at, b_slot, 0, b1, async_proxy=True)
    av = A.bytes(a_slot, a0, a1).view(dt).view(acc.rows, kd)
    bv = B.bytes(b_slot, 0, b1).view(dtb)
    if op.b_major.data == s.BMajor.K.value:
        bt = bv.view(acc.cols, kd).t()                          # rows of B^T: [n][k]
    else:
        bt = bv.view(acc.cols // 64, 64, 64).permute(1, 0, 2).reshape(64, acc.cols)  # [nb][k][n]
    # fp8 and 16-bit products and their sums over a k-block are exact in f64
    _accumulate(acc, av.double() @ bt.double(), env[op.accumulate], at)
    reads = []
    for smem, slot, lo, hi in ((A, a_slot, a0, a1), (B, b_slot, 0, b1)):
        rec = Read(lo, hi, op, at, a.aid, "MMA")
        smem.add_read(slot, rec)
        reads.append((smem, slot, rec))
    a.mma_open.append(Mma(acc, reads))
    return True


def _accumulate(acc: Acc, prod, accumulate: bool, at: str) -> None:
    """An MMA's product into ``acc`` (added where ``accumulate``), now in flight."""
    if accumulate:
        if acc.data is None:
            raise InterpError(f"{at}: accumulates into an accumulator no MMA wrote")
        acc.data = acc.data + prod
    else:
        acc.data = prod
    acc.in_flight += 1


def _pair_mma(R, a: Actor, op: s.MmaAsyncOp, env) -> bool:
    """A CTA pair's MMA (sm_100a cta_group::2), issued by the even CTA: A's rows from both
    CTAs' ``a`` slot (the even CTA's first), B's columns half from each CTA's ``b`` slot,
    the 2 x rows result split over the two CTAs' accumulators (the same one of each);
    fp8 operands as for one CTA (128 elements of K per 128-byte row)."""
    acc: Acc = env[op.acc]
    ta, tb = op.types
    dt, dtb = _DTYPES[ta], _DTYPES[tb]
    kd = op.k_depth
    at = a.at(op)
    if op.b_major.data != s.BMajor.K.value:
        raise InterpError(f"{at}: a CTA pair reads B as [N, K] (K-major) only")
    even = a.cta - a.cta % 2
    key = next(k for k, v in R.cta_objs[a.rank, a.cta].items() if v is acc)
    accs = [R.cta_objs[a.rank, c][key] for c in (even, even + 1)]
    a_slot, a_row, b_slot = env[op.a_slot], env[op.a_row], env[op.b_slot]
    a0, a1 = a_row * ROW_BYTES, (a_row + acc.rows) * ROW_BYTES
    b1 = acc.cols // 2 * ROW_BYTES
    avs, bvs, reads = [], [], []
    for c in (even, even + 1):
        A: Smem = R.cta_objs[a.rank, c][op.a]
        B: Smem = R.cta_objs[a.rank, c][op.b]
        for smem, slot, lo, hi in ((A, a_slot, a0, a1), (B, b_slot, 0, b1)):
            smem.check_range(at, slot, lo, hi)
            smem.check_read(a, at, slot, lo, hi, async_proxy=True)
            rec = Read(lo, hi, op, at, a.aid, "MMA")
            smem.add_read(slot, rec)
            reads.append((smem, slot, rec))
        avs.append(A.bytes(a_slot, a0, a1).view(dt).view(acc.rows, kd))
        bvs.append(B.bytes(b_slot, 0, b1).view(dtb).view(acc.cols // 2, kd))
    prod = torch.cat(avs).double() @ torch.cat(bvs).t().double()
    for j, acc_j in enumerate(accs):
        _accumulate(acc_j, prod[j * acc.rows:(j + 1) * acc.rows], env[op.accumulate], at)
        a.mma_open.append(Mma(acc_j, reads if j == 0 else []))
    return True


def _mma_commit(R, a: Actor, op, env) -> bool:
    a.mma_groups.append(a.mma_open)
    a.mma_open = []
    return False


def _mma_wait(R, a: Actor, op: s.MmaWaitOp, env) -> bool:
    while len(a.mma_groups) > op.pending.data:
        for m in a.mma_groups.pop(0):
            m.acc.in_flight -= 1
            for _, _, rec in m.reads:
                rec.epoch = a.epoch
    return True


def acc_value(a: Actor, op, acc: Acc) -> torch.Tensor:
    if acc.data is None:
        raise InterpError(f"{a.at(op)}: reads an accumulator that no MMA wrote")
    if acc.in_flight:
        raise InterpError(f"{a.at(op)}: reads an accumulator while {acc.in_flight} MMAs on it "
                          "are in flight (no pks.mma_wait completed them)")
    return acc.data.float()                                  # the f32 accumulator


def _acc_store_smem(R, a: Actor, op: s.AccStoreSmemOp, env) -> bool:
    acc: Acc = env[op.acc]
    sl, c, w = op.slice.data, op.col.data, op.width.data
    piece = acc_value(a, op, acc)[64 * sl:64 * (sl + 1), c:c + w].to(_DTYPES[op.dtype.data])
    payload = piece.contiguous().view(-1).view(torch.uint8)
    dst: Smem = env[op.dst]
    slot, at = env[op.slot], a.at(op)
    dst.check_range(at, slot, 0, payload.numel())
    dst.check_write(a, at, slot, 0, payload.numel())
    rec = Write(0, payload.numel(), op, at, actor=a.aid, epoch=a.epoch, fenced=False)
    dst.finish_write(slot, rec, payload)
    a.unfenced.append(rec)
    return True


def _fence(R, a: Actor, op, env) -> bool:
    for rec in a.unfenced:
        rec.fenced = True
    a.unfenced = []
    return False


def _tma_store(R, a: Actor, op: s.TmaStoreOp, env) -> bool:
    tm: Tmap = env[op.tmap]
    src: Smem = env[op.src]
    slot, at = env[op.slot], a.at(op)
    coords = [env[c] for c in op.coords]
    src.check_range(at, slot, 0, tm.box_bytes)
    src.check_read(a, at, slot, 0, tm.box_bytes, async_proxy=True)
    box = src.bytes(slot, 0, tm.box_bytes).view(tm.dtype).view(tm.box)
    bulk_write(R, a, at, tm, coords, box, op.reduce is not None)
    rec = Read(0, tm.box_bytes, op, at, a.aid, "TMA store")
    src.add_read(slot, rec)
    a.bulk_open.append(rec)
    return True


class BulkDone:
    """A marker in the warpgroup's bulk group: ``pks.bulk_wait`` completing the group (it
    sets ``epoch``) completes the warpgroup's global TMA write number ``seq``."""

    def __init__(self, a: Actor, seq: int):
        self.a, self.seq = a, seq

    @property
    def epoch(self):
        return None

    @epoch.setter
    def epoch(self, _value) -> None:
        self.a.bulk_done = max(self.a.bulk_done, self.seq)


def bulk_write(R, a: Actor, at: str, tm: Tmap, coords, box: torch.Tensor, add: bool) -> None:
    """A TMA store (or reduce-add) of ``box`` at ``coords``, clipped to the map. On tracked
    memory it is recorded under the warpgroup's bulk key: ordered before another rank's
    access once a bulk_wait completed it and a fence_async_global and a release followed."""
    rank, full, dst = tm.target(R, a)
    bs, ts = tm.window(coords, dst.shape)
    if tm.tracked():
        words = tm.words(full, bs)
        if words.numel():
            g = R.gbuf(tm.buffer, rank)
            a.bulk_issued += 1
            key = R.memory.kid(("bulk", a.aid), f"the TMA writes of {a.describe()}")
            if add:
                g.note_add(a, at, words, key, a.bulk_issued)
            else:
                g.write(a, at, words, g.words[words].clone(), key, a.bulk_issued)
            a.bulk_open.append(BulkDone(a, a.bulk_issued))
            R.version += 1
    if add:
        dst[bs] = (dst[bs].float() + box[ts].float()).to(dst.dtype)
    else:
        dst[bs] = box[ts]


def _bulk_commit(R, a: Actor, op, env) -> bool:
    a.bulk_groups.append(a.bulk_open)
    a.bulk_open = []
    return False


def _bulk_wait(R, a: Actor, op: s.BulkWaitOp, env) -> bool:
    """Completes the older groups (``read``: only their reads of shared memory; their
    global writes complete at the next full wait)."""
    read_only = op.read is not None
    while len(a.bulk_groups) > op.pending.data:
        for rec in a.bulk_groups.pop(0):
            if read_only and isinstance(rec, BulkDone):
                a.bulk_writes.append(rec)
            else:
                rec.epoch = a.epoch
    if not read_only:
        for rec in a.bulk_writes:
            rec.epoch = a.epoch
        a.bulk_writes = []
    return True


def _acc_store_global(R, a: Actor, op: s.AccStoreGlobalOp, env) -> bool:
    acc: Acc = env[op.acc]
    val = acc_value(a, op, acc)
    dst = R.data[op.buffer][a.rank]
    if dst.dim() != 2:
        raise InterpError(f"{a.at(op)}: stores to a rank-{dst.dim()} buffer (needs a matrix)")
    row, col = env[op.row], env[op.col]
    rows, cols = min(env[op.rows], dst.shape[0]), min(env[op.cols], dst.shape[1])
    r1, c1 = min(row + acc.rows, rows), min(col + acc.cols, cols)
    if r1 > row and c1 > col:
        dst[row:r1, col:c1] = val[:r1 - row, :c1 - col].to(dst.dtype)
    return False


def _acc_scale(R, a: Actor, op: s.AccScaleOp, env) -> bool:
    """The f32 accumulator times its scales (+ bias), each step rounded to f32, as the op
    says; elements outside rows x cols get scale 0."""
    acc: Acc = env[op.acc]
    val = acc_value(a, op, acc)
    row, col = env[op.row], env[op.col]
    rows, cols = env[op.rows], env[op.cols]
    ri = torch.arange(row, row + acc.rows)
    ci = torch.arange(col, col + acc.cols)
    ok_r, ok_c = ri < rows, ci < cols

    def pick(buf, idx, ok) -> torch.Tensor:
        v = R.data[buf][a.rank].reshape(-1).float()
        return torch.where(ok, v[idx.clamp(max=v.numel() - 1)], torch.zeros(()))

    row_a, row_b = op.row_wise()
    # a pks.scale_select's result: the kernel buffer it picked for this tile
    bufs = [env[v] if isinstance(v.owner, ScaleSelectOp) else v
            for v in (op.scale_a, op.scale_b)]
    sa = R.data[bufs[0]][a.rank].reshape(-1)[0].float()
    sb = R.data[bufs[1]][a.rank].reshape(-1)[0].float()
    if not row_a and not row_b:
        out = val * (sa * sb)
    else:
        out = val * (pick(bufs[0], ri, ok_r)[:, None] if row_a else sa)
        out = out * (pick(bufs[1], ci, ok_c)[None, :] if row_b else sb)
    if op.bias is not None:
        out = out + pick(op.bias, ci, ok_c)[None, :]
    slices, blocks = op.region()            # a piece: only its rows and columns change
    rs = slice(64 * slices.start, 64 * slices.stop)
    cs = slice(8 * blocks.start, 8 * blocks.stop)
    val[rs, cs] = out[rs, cs]
    acc.data = val.double()
    return False


def _acc_alloc(R, a: Actor, op: s.AccAllocOp, env) -> bool:
    if isinstance(op.parent_op(), s.ScheduleOp):     # the CTA's (tensor memory): shared
        env[op.result] = R.cta_objs[a.rank, a.cta][op.result]
        return False
    t = op.result.type
    env[op.result] = Acc(t.rows.data, t.cols.data)
    return False


def _acc_select(R, a: Actor, op: s.AccSelectOp, env) -> bool:
    i = env[op.index]
    if not 0 <= i < len(op.accs):
        raise InterpError(f"{a.at(op)}: accumulator index {i} outside 0..{len(op.accs) - 1}")
    env[op.result] = env[op.accs[i]]
    return False


def _mma_commit_arrive(R, a: Actor, op: s.MmaCommitArriveOp, env) -> bool:
    """The warpgroup's MMAs so far complete (their operands and accumulators are free),
    then one arrival: completing them at the commit is one of the orders the hardware may
    take, and every later reader is ordered after the arrival."""
    for m in a.mma_open + [m for grp in a.mma_groups for m in grp]:
        m.acc.in_flight -= 1
        for _, _, rec in m.reads:
            rec.epoch = a.epoch
    a.mma_open, a.mma_groups = [], []
    # a pair's commit arrives on the mbarrier of both CTAs (multicast), or of both CTAs of
    # every pair its pair_multicast names
    ctas = [a.cta]
    if getattr(R, "pair", False):
        pm = op.attributes.get("pair_multicast")
        ctas = [a.cta - a.cta % 2, a.cta - a.cta % 2 + 1]
        if pm is not None:
            ctas = [c + d for c in pair_targets(R, a, pm.data, place=0) for d in (0, 1)]
    for c in ctas:
        R._bar(a, op, env, op.bars, op.index, c).arrive(a, op, 0)
    a.clock[a.aid] += 1
    R.version += 1
    return True


def _set(fn):
    return lambda R, a, op, env: (env.__setitem__(op.result, fn(R, a)), False)[1]


SIMPLE = {
    s.MbarrierArriveOp: _arrive,
    s.TmaLoadOp: _tma_load,
    s.MmaAsyncOp: _mma,
    s.MmaCommitOp: _mma_commit,
    s.MmaWaitOp: _mma_wait,
    s.AccStoreSmemOp: _acc_store_smem,
    s.FenceAsyncSharedOp: _fence,
    s.TmaStoreOp: _tma_store,
    s.BulkCommitOp: _bulk_commit,
    s.BulkWaitOp: _bulk_wait,
    s.AccStoreGlobalOp: _acc_store_global,
    s.AccScaleOp: _acc_scale,
    # registers of what acc_scale reads (it reads the buffers itself: same values)
    s.ScalePrefetchOp: _set(lambda R, a: None),
    s.AccAllocOp: _acc_alloc,
    s.AccSelectOp: _acc_select,
    s.MmaCommitArriveOp: _mma_commit_arrive,
    s.WarpgroupBarrierOp: lambda R, a, op, env: False,   # a warpgroup is one actor
    s.TmaPrefetchOp: lambda R, a, op, env: False,        # a cache hint
    s.WarpgroupIndexOp: _set(lambda R, a: a.role_wg),
    s.ClusterRankOp: _set(lambda R, a: a.cta % R.cluster),
}
