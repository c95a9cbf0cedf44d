"""Lowers a scheduled fused GEMM + collective (``pk.plan.schedule = "fused"``, built by
``schedule-fused``) to a ``ptx.entry`` for sm_90a, or for sm_100a where ``schedule-fused`` built it for a
tensor-memory target (the MMA, accumulator and epilogue-read ops then lower through
:mod:`pkc.codegen.lower_schedule_tcgen05`; the communication ops below are the same).

The kernel is the scheduled GEMM with more: its entry is the GEMM's (tensor maps by
value, one pointer per kernel buffer, shared memory and mbarriers; :func:`lower_tma_kernel`)
plus the parameters of :class:`~pkc.codegen.abi.FusedLaunch` (the signal pad's W peer
pointers and own pointer, the epoch control word, rank, error record, timeout, mailbox,
trap), bound to the same registers the collectives' lowering reads
(:class:`~pkc.codegen.lower_schedule_comm.CommState`), so that ``pks.ptr``, ``pks.epoch``,
``pks.signal_wait`` and the rest lower as they do in a collective. Nothing is decided here.

* ``pks.peer_tmap``: a by-value tensor map parameter (``TmapArg.peer``);
  ``pks.tmap_select``: a ``selp`` chain over the maps' addresses, or, over more than
  ``SELECT_CHAIN_MAX`` maps that are consecutive parameters, the first one's address plus
  128 bytes per index (W live addresses spilled at W = 72).
* ``pks.chunk_tile_loop``: the GEMM's tile loop over ``chunks`` tile spaces
  (:func:`~pkc.codegen.lower_schedule.lower_tile_loop`).
* ``pks.tma_store_or_add``: two TMA bulk ops from the warpgroup's first thread, the store
  guarded by ``!add``, the reduce-add by ``add``.
* ``pks.fence_async_global``: ``fence.proxy.async.global``; ``pks.signal_add``:
  ``red.{release,relaxed}.{sys,gpu}.global.add.u32``.
"""

from __future__ import annotations

from pkc.codegen import ptx, ptx_sm90
from pkc.codegen.abi import (CommBufferArg, FusedLaunch, FusedLaunchKind, ScheduledKernelMeta,
                             TmapArg)
from pkc.codegen.errors import CodegenError
from pkc.codegen.lower_schedule import (EXTRA_LOWERINGS, KERNEL_LOWERINGS, TMAP_ARGS, Lowering,
                                        lower_tile_loop, lower_tma_kernel, select_b64)
from pkc.codegen.lower_schedule_comm import CommState
from pkc.dialects import schedule_fused as f
from pkc.dialects.schedule_clc_chunk import ClcChunkTileLoopOp
from pkc.dialects.kernel import AllocOp, KernelOp
from pkc.dialects.plan import ScheduleKind, schedule_kind
from pkc.dialects.types import BufferType


def is_fused_kernel(kop: KernelOp) -> bool:
    return kop.schedule() is not None and plan_schedule(kop) is ScheduleKind.FUSED


def plan_schedule(kop: KernelOp) -> ScheduleKind | None:
    """The kernel's ``pk.plan.schedule``; a CodegenError for a value that is not one."""
    try:
        return schedule_kind(kop)
    except ValueError as e:
        raise CodegenError(str(e)) from None


def _elements(t: BufferType) -> int:
    n = 1
    for d in t.get_shape():
        n *= d
    return n


class FusedExtend:
    """The fused kernel's additions to the GEMM's entry (see lower_tma_kernel). Subclasses
    (the MoE kernel's) say their launch kind, the symmetric outputs peers store into through
    pointers (``peer_out``) and how many tiles the grid rule counts (:meth:`tiles`)."""

    kind = FusedLaunchKind.RS

    def __init__(self, kop: KernelOp, peer_out: list[int] | None = None):
        self.kop = kop
        self.W = kop.world_size
        self.allocs = [op for op in kop.block.ops if isinstance(op, AllocOp)]
        self.args = list(kop.block.args)
        self.n_in = len(kop.inputs)
        self.peer_out = list(peer_out or [])
        # the chunked loop, static or under cluster launch control (one CTA per tile)
        self.loop = next((op for op in kop.walk()
                          if isinstance(op, (f.ChunkTileLoopOp, ClcChunkTileLoopOp))), None)

    def tiles(self) -> int | None:
        """The tiles the grid rule counts (None: the GEMM's own count)."""
        if self.loop is None:
            return None
        m, n = (const_int(v) for v in (self.loop.m, self.loop.n))
        if m is None or n is None:
            raise CodegenError(f"kernel @{self.kop.kernel_name.data}: the chunk tile loop's "
                               "M and N must be constants (the grid rule counts its tiles)")
        rows, cols = f.chunk_tiles(m, n, self.loop.bm.data, self.loop.bn.data,
                                   self.kop.schedule().cluster.data)
        return self.loop.chunks.data * rows * cols

    def meta(self, meta: ScheduledKernelMeta) -> None:
        bufs = [CommBufferArg(f"alloc{i}", _elements(a.result.type), str(a.result.type.element_type),
                              a.result.type.symmetric, a.zero is not None)
                for i, a in enumerate(self.allocs)]
        meta.fused = FusedLaunch(world=self.W, buffers=bufs,
                                 sym_outputs=[i for i, a in enumerate(self.args) if a.type.symmetric],
                                 shapes=[list(a.type.get_shape()) for a in self.args],
                                 dtype=str(self.args[0].type.element_type),
                                 inputs=self.n_in, kind=self.kind,
                                 peer_outputs=list(self.peer_out),
                                 dtypes=_dtypes(self.args))
        tiles = self.tiles()
        if tiles is not None:
            meta.tiles = tiles
        # under cluster launch control: one CTA per work index (ScheduledKernelMeta.grid)
        meta.clc = meta.clc or isinstance(self.loop, ClcChunkTileLoopOp)

    def bind(self, L: Lowering, params: list) -> None:
        regs = iter(params)
        st = CommState(world=self.W)
        L.comm = st
        syms = [a for a in self.allocs if a.result.type.symmetric]
        for a in syms:
            st.peers[a.result] = [next(regs) for _ in range(self.W)]
        for i in self.peer_out:
            st.peers[self.args[i]] = [next(regs) for _ in range(self.W)]
            st.own[self.args[i]] = L.buffers[self.args[i]]
        for a in syms:
            st.own[a.result] = next(regs)
        for a in self.allocs:
            if not a.result.type.symmetric:
                L.buffers[a.result] = next(regs)
        for name in ("rank", "err", "timeout", "mbox", "trap"):
            st.params[name] = next(regs)
        b = L.b
        st.grid = {"tid": b.sreg("%tid.x"), "cta": b.sreg("%ctaid.x"), "ctas": b.sreg("%nctaid.x")}


def _dtypes(args) -> list[str]:
    """Each kernel buffer's element type, or [] where all are the first's (the usual case:
    the metadata reads as it always did)."""
    types = [str(a.type.element_type) for a in args]
    return [] if len(set(types)) == 1 else types


def const_int(v) -> int | None:
    """The value of an ``arith.constant`` operand, None for anything else."""
    from xdsl.dialects import arith

    return v.owner.value.value.data if isinstance(v.owner, arith.ConstantOp) else None


def lower_fused_kernel(kop: KernelOp, target: str, entry_name: str
                       ) -> tuple[ptx.EntryOp, ScheduledKernelMeta]:
    """The ``ptx.entry`` and launch metadata of a scheduled fused GEMM + collective."""
    check_fused_target(kop, target)
    return lower_tma_kernel(kop, target, entry_name, FusedExtend(kop))


def check_fused_target(kop: KernelOp, target: str) -> None:
    """Scheduled fused kernels lower to sm_90a and sm_100a (a CodegenError for another)."""
    if target not in ("sm_90a", "sm_100a"):
        raise CodegenError(f"kernel @{kop.kernel_name.data}: scheduled fused kernels lower to "
                           f"sm_90a and sm_100a (asked for {target})")


def _peer_tmap_arg(op: f.PeerTmapOp, args) -> TmapArg:
    t = op.result.type
    return TmapArg(args.index(op.buffer), t.element.data, t.box_dims, t.swizzle.data,
                   peer=op.peer.data, dims=op.dim_list or [])


# Up to this many maps a pks.tmap_select is a selp chain (the PTX the H200 measurements ran,
# W <= 8); above, an offset from the first map: a chain keeps every map's address live
# through the tile loop, and at W = 72 those 72 addresses spilled 348 bytes (ptxas sm_90a).
SELECT_CHAIN_MAX = 8
TMAP_PARAM_BYTES = 128      # a by-value CUtensorMap: .param .align 64 .b8 [128]


def _consecutive_params(regs: list) -> bool:
    """Whether ``regs`` are the entry's parameters k, k + 1, ... (tensor map parameters
    come first and are all 128 bytes aligned to 64, so such maps lie back to back in the
    parameter space, and their generic addresses (``cvta.param``) too)."""
    idx = [getattr(r, "index", None) for r in regs]
    return None not in idx and idx == list(range(idx[0], idx[0] + len(idx)))


def _tmap_select(L: Lowering, op: f.TmapSelectOp) -> None:
    regs = [L.v(m) for m in op.tmaps]
    if len(regs) <= SELECT_CHAIN_MAX or not _consecutive_params(regs):
        L.vals[op.result] = select_b64(L, regs, op.index, "'pks.tmap_select'")
        return
    b = L.b
    off = b.bin("mul.wide", "u32", L.v(op.index), TMAP_PARAM_BYTES, result_kind="b64")
    L.vals[op.result] = b.add64(off, regs[0])


def _scale_select(L: Lowering, op: f.ScaleSelectOp) -> None:
    # the buffers' addresses (kernel arguments): a selp chain, as for a few maps
    L.vals[op.result] = select_b64(L, [L.v(v) for v in op.scales], op.index,
                                   "'pks.scale_select'")


def _chunk_tile_loop(L: Lowering, op: f.ChunkTileLoopOp) -> None:
    lower_tile_loop(L, op, chunks=op.chunks.data)


def _tma_store_or_add(L: Lowering, op: f.TmaStoreOrAddOp) -> None:
    b = L.b
    src = L.slot_addr(op.src, op.slot)
    tmap, coords = L.v(op.tmap), [L.v(c) for c in op.coords]
    add = L.v(op.add)
    lead = L.lead()
    store = b.pand(lead, b.un("not", "pred", add))
    b.add(ptx_sm90.TmaStoreOp(tmap, coords, src, store))
    b.add(ptx_sm90.TmaStoreOp(tmap, coords, src, b.pand(lead, add), "add"))


def _fence_async_global(L: Lowering, op: f.FenceAsyncGlobalOp) -> None:
    L.b.fence("proxy.async.global")


def _signal_add(L: Lowering, op: f.SignalAddOp) -> None:
    b = L.b
    addr = b.add64(b.bin("mul.wide", "u32", L.v(op.slot), 4, result_kind="b64"), L.v(op.pad))
    b.add(ptx.RedOp("add", "u32", addr, L.v(op.value), sem=op.sem.data, scope=op.scope.data))


TMAP_ARGS[f.PeerTmapOp] = _peer_tmap_arg
EXTRA_LOWERINGS.update({
    f.PeerTmapOp: lambda L, op: None,      # a parameter (bound with the tensor maps)
    f.TmapSelectOp: _tmap_select, f.ScaleSelectOp: _scale_select,
    f.ChunkTileLoopOp: _chunk_tile_loop,
    f.TmaStoreOrAddOp: _tma_store_or_add, f.FenceAsyncGlobalOp: _fence_async_global,
    f.SignalAddOp: _signal_add,
})
# before the collectives' entry (a fused kernel holds communication ops too)
KERNEL_LOWERINGS.insert(0, (is_fused_kernel, lower_fused_kernel))

from pkc.codegen import lower_schedule_fused_ar  # noqa: E402,F401  (registers its lowerings)
