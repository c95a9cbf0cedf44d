"""Lowers one ``pk.kernel`` to a ``ptx.entry``: the general, correct-for-any-IR strategy.

* Grid: one CTA per SM that a worker gets; workers own consecutive ranges of
  ``blockIdx.x`` whose sizes are kernel parameters (see :mod:`pkc.codegen.abi`), so the
  runtime can fit them to the SMs it has while every CTA stays resident.
* A CTA is 128 threads that run every op together: tiles live in shared memory
  (:mod:`pkc.codegen.smem`), elementwise work is spread over threads, ``bar.sync`` ends
  every op that writes a tile.
* A worker's body runs in every CTA of the worker. Pure ops and waits run everywhere;
  side effects at worker scope (store, put, signal) run on the worker's leader CTA only,
  so that the program's sequential meaning holds; ``pk.foreach`` iterations are dealt
  round-robin to the worker's CTAs, each running its iterations' side effects itself.
  Worker barriers (:func:`pkc.codegen.lower_sync.worker_barrier`) order worker-scope
  code against the iterations of other CTAs.
* ``scf.for`` becomes a loop; index math (``arith``) is 64-bit.

The op lowerings live in lower_memory (load/store/put), lower_bulk (sm_90 bulk copies),
lower_sync (signal/wait/barriers), lower_compute (map/reduce/fill) and lower_mma.
"""

from __future__ import annotations

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IntegerAttr, IntegerType
from xdsl.ir import Block, Operation

from pkc.codegen import ptx
from pkc.codegen.abi import BufferArg, BufferOrigin, KernelMeta, SignalsArg, WorkerInfo
from pkc.codegen.builder import Builder
from pkc.codegen.context import BufferRef, SignalsRef, TileRef, WorkerCtx, lowering_for, lowers
from pkc.codegen.errors import CodegenError
from pkc.codegen.smem import HDR_BARRIER_GEN, HDR_MBARRIER, HDR_TIMEOUT_FLAG, SmemPlan
from pkc.codegen.targets import THREADS, CodegenTarget
from pkc.dialects import kernel as k
from pkc.dialects.types import TileType
from pkc.ir import op_where as where

# Importing the lowering modules registers their ops.
from pkc.codegen import lower_compute, lower_memory, lower_mma, lower_sync  # noqa: F401,E402
from pkc.codegen.lower_sync import worker_barrier  # noqa: E402

DEFAULT_COMM_SMS = 16


def default_sms(workers: list[k.WorkerOp], num_sms: int) -> list[tuple[int, bool]]:
    """Each worker's SM count: its ``sms``, or a default split of what is left (a
    communicate worker without ``sms`` gets 16, compute workers share the rest)."""
    fixed = sum(w.sm_count or 0 for w in workers)
    unset = [w for w in workers if w.sm_count is None]
    comm = [w for w in unset if w.role_kind is k.WorkerRole.COMMUNICATE]
    comp = [w for w in unset if w.role_kind is not k.WorkerRole.COMMUNICATE]
    left = max(num_sms - fixed, len(unset))
    comm_each = min(DEFAULT_COMM_SMS, max(1, left // max(1, len(unset)))) if comm else 0
    comp_left = max(left - comm_each * len(comm), len(comp))
    out = []
    for w in workers:
        if w.sm_count is not None:
            out.append((w.sm_count, True))
        elif w.role_kind is k.WorkerRole.COMMUNICATE:
            out.append((comm_each, False))
        else:
            out.append((max(1, comp_left // len(comp)), False))
    return out


def _dtype(t) -> str:
    return str(t.element_type)


def _written_buffers(kop: k.KernelOp) -> set:
    out = set()
    for op in kop.walk():
        if isinstance(op, (k.StoreOp, k.PutOp)):
            out.add(op.buffer)
    return out


def kernel_meta(kop: k.KernelOp, target: CodegenTarget, plans: list[SmemPlan]) -> KernelMeta:
    n_in = len(kop.inputs)
    buffers = []
    for i, arg in enumerate(kop.block.args):
        t = arg.type
        origin, idx = (BufferOrigin.INPUT, i) if i < n_in else (BufferOrigin.OUTPUT, i - n_in)
        buffers.append(BufferArg(arg.name_hint or f"{origin}{idx}", origin, idx,
                                 list(t.get_shape()), _dtype(t), t.symmetric))
    signals = []
    n_alloc = 0
    for op in kop.block.ops:
        if isinstance(op, k.AllocOp):
            t = op.result.type
            buffers.append(BufferArg(op.result.name_hint or f"alloc{n_alloc}", BufferOrigin.ALLOC, n_alloc,
                                     list(t.get_shape()), _dtype(t), t.symmetric,
                                     zero=op.zero is not None))
            n_alloc += 1
        elif isinstance(op, k.AllocSignalsOp):
            signals.append(SignalsArg(op.result.name_hint or f"signals{len(signals)}",
                                      op.result.type.count.data))
    workers = [WorkerInfo(w.role.data, sms, explicit)
               for w, (sms, explicit) in zip(kop.workers(), default_sms(kop.workers(), target.num_sms))]
    return KernelMeta(kop.kernel_name.data, target.name, THREADS, max(p.bytes for p in plans),
                      buffers, signals, workers, world=kop.world_size)


def lower_kernel(kop: k.KernelOp, target: CodegenTarget, entry_name: str) -> tuple[ptx.EntryOp, KernelMeta]:
    workers = kop.workers()
    plans = [SmemPlan(w) for w in workers]
    meta = kernel_meta(kop, target, plans)
    if meta.smem_bytes > target.smem_limit:
        detail = ", ".join(f"worker {i} '{w.role.data}': {p.describe()}"
                           for i, (w, p) in enumerate(zip(workers, plans)))
        raise CodegenError(
            f"kernel @{meta.name} needs {meta.smem_bytes} bytes of shared memory per CTA "
            f"({detail}), more than target {target.name} allows ({target.smem_limit}); "
            "use smaller tiles"
        )
    entry = ptx.EntryOp(entry_name, meta.params(), THREADS, meta.smem_bytes)
    b = Builder(entry.block)
    args = list(entry.block.args)
    nb, ns = len(meta.buffers), len(meta.signals)
    buf_params, sig_params = args[:nb], args[nb:nb + ns]
    rank, world, error, workspace, timeout = args[nb + ns:nb + ns + 5]
    ctas = args[nb + ns + 5:]

    b.comment(f"pk.kernel @{meta.name}: world {meta.world}, {len(workers)} worker(s), "
              f"{THREADS} threads/CTA, {meta.smem_bytes} bytes shared memory")
    tid = b.sreg("%tid.x")
    bid = b.sreg("%ctaid.x")
    smem = b.r(ptx.SmemBaseOp())
    _init_header(b, tid, smem, target)

    rank64 = b.cvt("u64", "u32", rank)
    env_shared: dict = {}
    written = _written_buffers(kop)
    buffer_values = list(kop.block.args) + [op.result for op in kop.block.ops if isinstance(op, k.AllocOp)]
    for v, barg, param in zip(buffer_values, meta.buffers, buf_params):
        own = _peer_pointer(b, param, rank64) if barg.symmetric else param
        env_shared[v] = BufferRef(barg, v.type, param, own, v in written)
    sig_values = [op.result for op in kop.block.ops if isinstance(op, k.AllocSignalsOp)]
    for i, (v, sarg, param) in enumerate(zip(sig_values, meta.signals, sig_params)):
        env_shared[v] = SignalsRef(i, sarg.name, param, _peer_pointer(b, param, rank64))
    consts = [op for op in kop.block.ops if isinstance(op, arith.ConstantOp)]

    lo = b.u32(0)
    for wi, (wop, plan, ncta) in enumerate(zip(workers, plans, ctas)):
        hi = b.add32(lo, ncta)
        inside = b.pand(b.setp("ge", "u32", bid, lo), b.setp("lt", "u32", bid, hi))
        with b.if_(inside):
            b.comment(f"worker {wi} \"{wop.role.data}\" ({where(wop)})")
            ctx = WorkerCtx(b, target, meta, plan, wi, wop.role.data, dict(env_shared), tid, smem,
                            rank, world, error, workspace, timeout, b.bin("sub", "u32", bid, lo),
                            ncta, bid)
            ctx.warm()
            for c in consts:
                lower_op(ctx, c)
            lower_block(ctx, wop.body.blocks[0])
        lo = hi
    b.add(ptx.YieldOp())
    return entry, meta


def _init_header(b: Builder, tid, smem, target: CodegenTarget) -> None:
    t0 = b.setp("eq", "u32", tid, 0)
    with b.if_(t0):
        b.st("shared", "u32", b.add32(smem, HDR_TIMEOUT_FLAG), b.u32(0))
        b.st("shared", "u32", b.add32(smem, HDR_BARRIER_GEN), b.u32(0))
        if target.bulk_copies:
            b.add(ptx.MbarrierOp("init", b.add32(smem, HDR_MBARRIER), b.u32(THREADS)))
            b.fence("mbarrier_init.release.cluster")
    if target.bulk_copies:
        b.fence("proxy.async.shared::cta")
    b.bar()


def _peer_pointer(b: Builder, array, peer64):
    """``array[peer]`` of a device array of u64 pointers."""
    addr = b.r(ptx.FmaOp(peer64, b.u64(8), array, "u64", "mad.lo"))
    return b.ld("global", "u64", addr)


def peer_pointer(ctx: WorkerCtx, array, peer_s64):
    return _peer_pointer(ctx.b, array, peer_s64)


def lower_block(ctx: WorkerCtx, block: Block) -> list:
    """Lowers the ops of a block; returns the operands of its terminator (yield)."""
    for op in block.ops:
        if isinstance(op, (k.YieldOp, scf.YieldOp)):
            return list(op.operands)
        lower_op(ctx, op)
    return []


def lower_op(ctx: WorkerCtx, op: Operation) -> None:
    fn = lowering_for(ctx.target.name, type(op))
    if fn is None:
        raise CodegenError(f"{where(op)} has no lowering to PTX (inside pk.worker \"{ctx.role}\")")
    fn(ctx, op)


# ----------------------------------------------------------------------------------------
# Structure: pk.rank, pk.foreach, scf.for, arith.


@lowers(k.RankOp)
def _rank(ctx: WorkerCtx, op: k.RankOp) -> None:
    ctx.env[op.result] = ctx.b.cvt("s64", "u32", ctx.rank)


@lowers(k.ForeachOp)
def _foreach(ctx: WorkerCtx, op: k.ForeachOp) -> None:
    b = ctx.b
    grid = op.grid()
    total = 1
    for g in grid:
        total *= g
    top = ctx.in_foreach == 0
    if top:
        if ctx.wrote or ctx.read:
            worker_barrier(ctx, op)
        start, step = b.cvt("s64", "u32", ctx.cta), b.cvt("s64", "u32", ctx.ncta)
        b.comment(f"pk.foreach {grid}: iterations round-robin over the worker's CTAs")
    else:
        start, step = b.s64(0), b.s64(1)
    with b.for_(start, b.s64(total), step, "s64") as it:
        rest = it
        idx = [None] * len(grid)
        for d in reversed(range(len(grid))):
            if d == 0:
                idx[d] = rest
            else:
                idx[d] = b.bin("rem", "s64", rest, grid[d])
                rest = b.bin("div", "s64", rest, grid[d])
        for arg, v in zip(op.body.blocks[0].args, idx):
            ctx.env[arg] = v
        ctx.in_foreach += 1
        lower_block(ctx, op.body.blocks[0])
        ctx.in_foreach -= 1
    if top:
        worker_barrier(ctx, op)


def _has_worker_scope(op: Operation, kinds: tuple) -> bool:
    """Whether ``op``'s regions hold ops of ``kinds`` outside any pk.foreach."""
    for region in op.regions:
        for block in region.blocks:
            for inner in block.ops:
                if isinstance(inner, kinds):
                    return True
                if not isinstance(inner, k.ForeachOp) and _has_worker_scope(inner, kinds):
                    return True
    return False


@lowers(scf.ForOp)
def _scf_for(ctx: WorkerCtx, op: scf.ForOp) -> None:
    from pkc.codegen.lower_compute import copy_tile

    b = ctx.b
    body = op.body.blocks[0]
    iv, *args = body.args
    index_pos = [i for i, a in enumerate(args) if not isinstance(a.type, TileType)]
    tile_pos = [i for i, a in enumerate(args) if isinstance(a.type, TileType)]
    for i in tile_pos:
        carried, init = ctx.tile(args[i]), ctx.tile(op.iter_args[i])
        if carried.offset != init.offset:
            copy_tile(ctx, init, carried)
    inits = [_scalar(ctx, op.iter_args[i]) for i in index_pos]
    if ctx.in_foreach == 0:
        # One barrier before the loop for what came before it; inside, the flags assume
        # that the previous iteration did everything the body does.
        writes = _has_worker_scope(op, (k.StoreOp, k.PutOp, k.SignalOp))
        loads = _has_worker_scope(op, (k.LoadOp,))
        if (writes and ctx.read) or (loads and ctx.wrote):
            worker_barrier(ctx, op)
        ctx.wrote |= writes
        ctx.read |= loads
    wrote, read = ctx.wrote, ctx.read
    loop, block = b.for_carried(ctx.index(op.lb), ctx.index(op.ub), ctx.index(op.step), inits)
    with b.at(block):
        ctx.env[iv] = block.args[0]
        for j, i in enumerate(index_pos):
            ctx.env[args[i]] = block.args[1 + j]
        yielded = lower_block(ctx, body)
        for i in tile_pos:
            src, dst = ctx.tile(yielded[i]), ctx.tile(args[i])
            if src.offset != dst.offset:
                copy_tile(ctx, src, dst)
        b.add(ptx.YieldOp([_scalar(ctx, yielded[i]) for i in index_pos]))
    ctx.wrote, ctx.read = ctx.wrote or wrote, ctx.read or read
    for j, i in enumerate(index_pos):
        ctx.env[op.results[i]] = loop.res[j]
    for i in tile_pos:
        ctx.env[op.results[i]] = TileRef(ctx.tile(args[i]).offset, op.results[i].type)


def _scalar(ctx: WorkerCtx, v):
    r = ctx.env.get(v)
    if r is None or isinstance(r, (TileRef, BufferRef, SignalsRef)):
        raise CodegenError(f"loop-carried value {v.name_hint or v} of type {v.type} has no lowering")
    return r


@lowers(arith.ConstantOp)
def _constant(ctx: WorkerCtx, op: arith.ConstantOp) -> None:
    v = op.value
    if not isinstance(v, IntegerAttr):
        raise CodegenError(f"{where(op)}: only integer/index constants lower inside a worker, got {v}")
    if isinstance(op.result.type, IntegerType) and op.result.type.width.data == 1:
        ctx.env[op.result] = ctx.b.setp("ne", "s32", ctx.b.imm(v.value.data, "s32"), ctx.b.imm(0, "s32"))
    else:
        ctx.env[op.result] = ctx.b.imm(v.value.data, "s64")


_BIN = {
    arith.AddiOp: "add", arith.SubiOp: "sub", arith.MuliOp: "mul.lo",
    arith.DivUIOp: ("div", "u64"), arith.DivSIOp: "div", arith.RemUIOp: ("rem", "u64"),
    arith.RemSIOp: "rem", arith.MinUIOp: ("min", "u64"), arith.MaxUIOp: ("max", "u64"),
    arith.MinSIOp: "min", arith.MaxSIOp: "max",
}


@lowers(*_BIN)
def _binary(ctx: WorkerCtx, op: Operation) -> None:
    spec = _BIN[type(op)]
    opcode, t = (spec, "s64") if isinstance(spec, str) else spec
    a, c = (ctx.index(v) for v in op.operands)
    ctx.env[op.results[0]] = ctx.b.bin(opcode, t, a, c)


@lowers(arith.FloorDivSIOp)
def _floordiv(ctx: WorkerCtx, op: Operation) -> None:
    b = ctx.b
    a, c = (ctx.index(v) for v in op.operands)
    q = b.bin("div", "s64", a, c)
    r = b.bin("rem", "s64", a, c)
    # q - 1 when the remainder is non-zero and its sign differs from the divisor's.
    adjust = b.pand(b.setp("ne", "s64", r, 0),
                    b.setp("lt", "s64", b.bin("xor", "b64", r, c), 0))
    ctx.env[op.results[0]] = b.selp("s64", b.bin("sub", "s64", q, 1), q, adjust)


@lowers(arith.CeilDivUIOp)
def _ceildiv(ctx: WorkerCtx, op: Operation) -> None:
    b = ctx.b
    a, c = (ctx.index(v) for v in op.operands)
    ctx.env[op.results[0]] = b.bin("div", "u64", b.bin("sub", "s64", b.add64(a, c), 1), c)


@lowers(arith.IndexCastOp)
def _index_cast(ctx: WorkerCtx, op: Operation) -> None:
    ctx.env[op.results[0]] = ctx.index(op.operands[0])


_CMPI = ["eq", "ne", ("lt", "s64"), ("le", "s64"), ("gt", "s64"), ("ge", "s64"),
         ("lo", "u64"), ("ls", "u64"), ("hi", "u64"), ("hs", "u64")]


@lowers(arith.CmpiOp)
def _cmpi(ctx: WorkerCtx, op: arith.CmpiOp) -> None:
    spec = _CMPI[op.predicate.value.data]
    cmp, t = (spec, "s64") if isinstance(spec, str) else spec
    a, c = (ctx.index(v) for v in op.operands)
    ctx.env[op.result] = ctx.b.setp(cmp, t, a, c)


@lowers(arith.SelectOp)
def _select(ctx: WorkerCtx, op: arith.SelectOp) -> None:
    cond = ctx.index(op.cond)
    ctx.env[op.result] = ctx.b.selp("s64", ctx.index(op.lhs), ctx.index(op.rhs), cond)
