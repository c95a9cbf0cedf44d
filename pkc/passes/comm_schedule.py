"""Builds the schedule-level (``pks``) program of a collective over symmetric memory.

Written with the communication ops of :mod:`pkc.dialects.schedule_comm`; the algorithm
and its options come in as a :class:`~pkc.target.comm_tuning.CommConfig` (the pass
``schedule-collectives`` chooses it). W ranks each run the same grid of ``G`` CTAs; CTA
``c`` of every rank handles slice ``c`` of each chunk (``slice`` vectors, a launch
parameter from the grid rule) and synchronizes only with CTA ``c`` of the other ranks,
through pad slot ``(phase * W + src) * G + c``: no grid-wide barrier, but every CTA of
every rank must be resident at once (the launch keeps ``G`` within the SMs).

Buffers (``sym``: the data's symmetric buffer; ``stage``: its half of this epoch, by
parity, so that a rank reaches epoch e + 2, and overwrites the half of epoch e, only after
every peer's kernel of epoch e read it):

* ``ll`` / ``llag``: push each vector as an LL line into slot ``rank`` of every peer's
  ``stage`` (the own slot stays in registers), then poll the W slots' lines and sum them
  (``ll``) or copy them out in rank order (``llag``); ``llrs``: chunk d to slot ``rank`` of
  rank d, then poll and sum the own chunk's W slots.
* ``ar1``: push the input into slot ``rank`` of every rank's ``stage``; arrive (signal
  every rank, wait for every rank); sum the W local slots into the output.
* ``rs``: chunk d of the input into slot ``rank`` of rank d's ``stage``; arrive; sum.
* ``ag``: arrive (every peer's kernel of this epoch started: its readers of the last
  result are done); push the input into slot ``rank`` of every rank's output (symmetric);
  leave (signal, wait: every rank's slot of this CTA's slice has landed).
* ``agp``: the input is already symmetric (``sym``: each rank's chunk, e.g. a fused
  GEMM + reduce-scatter's result): arrive (every rank's chunk is final: the kernel that
  wrote it completed on that rank's stream); pull chunk q of every rank q, own first, into
  ``out[q * n:]`` (a fresh output); leave (no rank's next kernel overwrites its chunk
  while a peer still reads it).
* ``a2a``: arrive (as ``ag``); chunk d of the input into slot ``rank`` of rank d's output
  (symmetric); leave.
* ``ar2`` (two-shot, into a fresh output): see :meth:`CommBuilder.ar2`; ``groups`` CTA
  groups take turns on the exchange (a group's copy-out overlaps the next one's traffic).
* ``armc`` / ``agmc`` (NVLS, targets with ``nvls`` only): the switch reduces / copies;
  see :meth:`CommBuilder.armc`, :meth:`CommBuilder.agmc` (``pks.mc_*`` ops on multicast
  addresses; the barriers signal every rank with one ``pks.mc_signal``).

Loops over peers visit d = rank + 1, ..., rank + W (mod W): at every step the ranks'
destinations form a permutation (no incast on rank 0).

Large worlds (up to 72, an NVL72 domain): a loop that stores each vector to several peers
takes at most ``PUSH_DESTS`` of them (the peer addresses stay in registers across the loop:
at W = 72 one loop of 72 destinations spilled, ptxas -arch=sm_90a, 616 bytes in the
all-gather); more destinations run as several loops over the same slice (the source is
read again, from L2). A reduce over more than ``SUM_UNROLLED_MAX`` slots is one
``pks.vec_sum_slots`` per vector (a loop over the slots, not W loads in flight), and the
two-shot's copy-out takes ``GATHER_SOURCES`` chunks per loop. The LL kinds and the
two-shot's push gather hold W values per vector: the tuning table uses them only up to
``LL_MAX_WORLD`` / ``AR2_PUSH_MAX_WORLD`` ranks (:mod:`pkc.target.comm_tuning`).
"""

from __future__ import annotations

from contextlib import contextmanager

from xdsl.dialects import arith
from xdsl.dialects.builtin import IntegerAttr, i32
from xdsl.ir import Block, Operation, SSAValue

from pkc.dialects import schedule as s
from pkc.dialects import schedule_comm as c
from pkc.dialects.schedule_comm_sum import VecSumSlotsOp
from pkc.target.comm_tuning import THREADS, CommConfig, CommKind

# peers one push loop stores each vector to (see the module doc: registers at large W)
PUSH_DESTS = 8
# ranks whose slots a reduce loads at once (W loads, one pks.vec_sum); above, a loop over
# the slots (pks.vec_sum_slots): the W-load form spilled at W = 64 and 72 (reduce-scatter
# W = 72: 1348 bytes) and assembled without at 16, 32 and 48 (ptxas -arch=sm_90a)
SUM_UNROLLED_MAX = 16
# other ranks' chunks one copy-out loop of the two-shot takes (their addresses live across
# the loop); at W = 72 one loop of 71 spilled (ptxas -arch=sm_90a)
GATHER_SOURCES = 8


class _B:
    """Appends ops to the current block; constants once per block scope."""

    def __init__(self, block: Block):
        self.block = block

    def add(self, op: Operation) -> Operation:
        self.block.add_op(op)
        return op

    def r(self, op: Operation) -> SSAValue:
        return self.add(op).results[0]

    def c(self, v: int) -> SSAValue:
        return self.r(arith.ConstantOp(IntegerAttr(v, i32)))

    def _v(self, x) -> SSAValue:
        return self.c(x) if isinstance(x, int) else x

    def add_(self, a, b):
        return self.r(arith.AddiOp(self._v(a), self._v(b)))

    def sub(self, a, b):
        return self.r(arith.SubiOp(self._v(a), self._v(b)))

    def mul(self, a, b):
        return self.r(arith.MuliOp(self._v(a), self._v(b)))

    def min(self, a, b):
        return self.r(arith.MinUIOp(self._v(a), self._v(b)))

    def and_(self, a, b):
        return self.r(arith.AndIOp(self._v(a), self._v(b)))

    def cmp(self, pred: str, a, b):
        return self.r(arith.CmpiOp(self._v(a), self._v(b), pred))

    def select(self, cond, a, b):
        return self.r(arith.SelectOp(cond, self._v(a), self._v(b)))

    @contextmanager
    def at(self, block: Block):
        saved = self.block
        self.block = block
        try:
            yield
        finally:
            self.block = saved


class CommBuilder:
    """The body of one collective kernel (see the module doc)."""

    def __init__(self, sched_block: Block, cfg: CommConfig, nv: int, cv: int, src: SSAValue,
                 out: SSAValue, sym: SSAValue, pads: SSAValue, ctl: SSAValue):
        self.b = _B(sched_block)
        self.cfg, self.W = cfg, cfg.world
        self.nv_n, self.cv_n = nv, cv      # sizes in vectors; the kernel reads them as
                                           # launch parameters (see CommParam.VECS)
        self.src, self.out, self.sym, self.pads, self.ctl = src, out, sym, pads, ctl

    # ---- pieces ----------------------------------------------------------------------
    def prologue(self) -> None:
        b = self.b
        self.tid = b.r(c.GridValueOp(c.GridValue.TID))
        self.cta = b.r(c.GridValueOp(c.GridValue.CTA))
        self.G = b.r(c.GridValueOp(c.GridValue.CTAS))
        self.rank = b.r(c.LaunchParamOp(c.CommParam.RANK))
        self.per = b.r(c.LaunchParamOp(c.CommParam.SLICE))
        self.nv = b.r(c.LaunchParamOp(c.CommParam.VECS))
        self.cv = b.r(c.LaunchParamOp(c.CommParam.CHUNK))
        self.t0 = b.cmp("eq", self.tid, 0)

    def epoch(self) -> None:
        self.ep = self.b.r(c.EpochOp(self.ctl))
        self.b.add(s.ClusterSyncOp())          # bar.sync 0: see pks.epoch

    def publish(self, pred: SSAValue | None = None) -> None:
        self.b.add(c.EpochPublishOp(self.ctl, self.ep, pred))

    def chunk_slice(self, chunk, limit, base: bool = True) -> tuple[SSAValue, SSAValue]:
        """[lo, hi): this CTA's slice of chunk ``chunk`` (clipped to ``limit``); with
        ``base=False`` relative to the chunk's start."""
        b = self.b
        c0 = b.mul(chunk, self.cv)
        end = b.min(b.add_(c0, self.cv), limit)
        lo = b.add_(b.mul(self.cta, self.per), c0)
        hi = b.min(b.add_(lo, self.per), end)
        lo = b.min(lo, hi)
        if not base:
            lo, hi = b.sub(lo, c0), b.sub(hi, c0)
        return lo, hi

    def stage(self, slot_vecs: SSAValue) -> SSAValue:
        """First vector of this epoch's half: (epoch & 1) * slot_vecs * W."""
        b = self.b
        return b.mul(b.mul(b.and_(self.ep, 1), slot_vecs), self.W)

    def rank_plus(self, i: int) -> SSAValue:
        b = self.b
        d = b.add_(self.rank, i % self.W)
        return b.select(b.cmp("uge", d, self.W), b.sub(d, self.W), d)

    def peer(self, buf: SSAValue, d) -> SSAValue:
        return self.b.r(c.BufferPtrOp(buf, self.b._v(d)))

    def ptr(self, buf: SSAValue) -> SSAValue:
        return self.b.r(c.BufferPtrOp(buf))

    def slot(self, phase: int, src: SSAValue) -> SSAValue:
        """Pad slot (phase, src, this CTA): (src + phase * W) * G + cta."""
        b = self.b
        return b.add_(b.mul(b.add_(src, phase * self.W), self.G), self.cta)

    def barrier_phase(self, phase: int, mc_pads: SSAValue | None = None) -> None:
        """Every thread's stores so far reach every rank; signal slot (phase, rank, cta) of
        every rank (with ``mc_pads``, the pads' multicast address: one ``pks.mc_signal``);
        threads 0..W-1 wait for slot (phase, q, cta) of the own pad."""
        b, W = self.b, self.W
        b.add(s.ClusterSyncOp())
        when = b.add(c.WhenOp(self.t0))
        with b.at(when.block):
            b.add(c.FenceSysOp())
            sl = self.slot(phase - 1, self.rank)
            if mc_pads is not None:
                b.add(c.McSignalOp(mc_pads, sl))
            for d in range(W if mc_pads is None else 0):
                b.add(c.SignalOp(self.peer(self.pads, d), sl))
        when = b.add(c.WhenOp(b.cmp("ult", self.tid, W)))
        with b.at(when.block):
            b.add(c.SignalWaitOp(self.ptr(self.pads), self.slot(phase - 1, self.tid), self.ep,
                                 self.tid, c.WaitSite(phase)))
        b.add(s.ClusterSyncOp())

    def loop(self, lo, hi, unroll: int):
        op = self.b.add(c.VecLoopOp(lo, hi, unroll, THREADS))
        return op, list(op.block.args)

    def push(self, lo, hi, src_ptr, dests: list[tuple[SSAValue, SSAValue | None]],
             cache=c.CacheHint.NC) -> None:
        """x = src[v]; x to ``base + (v + off)`` for every (base, off) of ``dests`` (in
        loops of at most PUSH_DESTS destinations)."""
        b = self.b
        if len(dests) > PUSH_DESTS:
            for i in range(0, len(dests), PUSH_DESTS):
                self.push(lo, hi, src_ptr, dests[i:i + PUSH_DESTS], cache)
            return
        op, vs = self.loop(lo, hi, self.cfg.unroll)
        with b.at(op.block):
            xs = [b.r(c.VecLoadOp(src_ptr, v, hi, cache)) for v in vs]
            for v, x in zip(vs, xs):
                for base, off in dests:
                    b.add(c.VecStoreOp(base, v, hi, x, off))

    def reduce(self, lo, hi, src_off, stride: SSAValue, dests) -> None:
        """r = rank-order sum over q of own ``sym[src_off + q * stride + v]``; r to every
        (base, off[, pred]) of ``dests`` (where pred holds). Above SUM_UNROLLED_MAX ranks
        one ``pks.vec_sum_slots`` per vector (a loop over the slots) instead of W loads."""
        b, W = self.b, self.W
        own = self.ptr(self.sym)
        if W > SUM_UNROLLED_MAX:
            op, (v,) = self.loop(lo, hi, 1)
            with b.at(op.block):
                z = b.r(VecSumSlotsOp(own, v, src_off, stride, hi, W, self.cfg.dtype))
                for base, off, *pred in dests:
                    b.add(c.VecStoreOp(base, v, hi, z, off, pred[0] if pred else None))
            return
        offs = [b.add_(b.mul(stride, q), src_off) if q else src_off for q in range(W)]
        # W loads of 4 registers per vector: about 8 vectors in flight per thread
        op, vs = self.loop(lo, hi, max(1, min(self.cfg.unroll, 8 // W)))
        with b.at(op.block):
            ys = [[b.r(c.VecLoadOp(own, v, hi, c.CacheHint.CG, offs[q])) for q in range(W)]
                  for v in vs]
            for v, y in zip(vs, ys):
                z = b.r(c.VecSumOp(y, self.cfg.dtype))
                for base, off, *pred in dests:
                    b.add(c.VecStoreOp(base, v, hi, z, off, pred[0] if pred else None))

    def each_chunk_to_its_rank(self, slot_off: SSAValue, push) -> None:
        """For chunk d = rank+1, ..., rank: [lo, hi) = this CTA's slice of input chunk d,
        shift = slot_off - d * cv (v lands at slot_off + (v - chunk start) of rank d)."""
        b = self.b
        for i in range(1, self.W + 1):
            d = self.rank_plus(i)
            lo, hi = self.chunk_slice(d, self.nv)
            shift = b.sub(slot_off, b.mul(d, self.cv))
            push(lo, hi, self.peer(self.sym, d), shift)

    # ---- the kinds -------------------------------------------------------------------
    def build(self) -> None:
        kind = self.cfg.kind
        self.prologue()
        if kind in (CommKind.LL, CommKind.LLAG):
            self.ll_gather_or_reduce()
            return
        self.epoch()
        if kind is CommKind.LLRS:
            self.llrs()
            return
        self.publish()
        {CommKind.AR1: self.ar1, CommKind.RS: self.rs, CommKind.AG: self.ag,
         CommKind.AR2: self.ar2, CommKind.AGP: self.agp, CommKind.A2A: self.a2a,
         CommKind.ARMC: self.armc, CommKind.AGMC: self.agmc}[kind]()

    # ---- NVLS (multimem; only for targets with NVLS) ----------------------------------
    def armc(self) -> None:
        """sym = a copy of the input (the switch reads symmetric memory only); the output
        is symmetric with a multicast object. Copy slice c of every chunk into sym; arrive
        (every rank's copy of this CTA's slices is in, and every peer's kernel of this
        epoch started: its readers of the last result are done); sum this rank's chunk's
        slice over the ranks (``mc_ld_reduce``) and store it into every rank's output
        (``mc_store``); leave (every rank's chunk slice has landed). Each byte crosses the
        rank's link once each way, the switch adds."""
        b, W = self.b, self.W
        mc_pads = b.r(c.McPtrOp(self.pads))
        own, src = self.ptr(self.sym), self.ptr(self.src)
        for q in range(W):
            lo, hi = self.chunk_slice(q, self.nv)
            self.push(lo, hi, src, [(own, None)])
        self.barrier_phase(1, mc_pads)
        lo, hi = self.chunk_slice(self.rank, self.nv)
        sym_mc, out_mc = b.r(c.McPtrOp(self.sym)), b.r(c.McPtrOp(self.out))
        op, vs = self.loop(lo, hi, self.cfg.unroll)
        with b.at(op.block):
            zs = [b.r(c.McLoadReduceOp(sym_mc, v, hi, self.cfg.dtype)) for v in vs]
            for v, z in zip(vs, zs):
                b.add(c.McStoreOp(out_mc, v, hi, z))
        self.barrier_phase(2, mc_pads)

    def agmc(self) -> None:
        """The output is symmetric with a multicast object: arrive (as ``ag``); store the
        input's slice into slot ``rank`` of every rank's output with one ``mc_store`` per
        vector (the switch copies it W times); leave."""
        b = self.b
        mc_pads = b.r(c.McPtrOp(self.pads))
        self.barrier_phase(1, mc_pads)
        lo, hi = self.chunk_slice(0, self.nv)
        shift = b.mul(self.rank, self.nv)
        src, out_mc = self.ptr(self.src), b.r(c.McPtrOp(self.out))
        op, vs = self.loop(lo, hi, self.cfg.unroll)
        with b.at(op.block):
            xs = [b.r(c.VecLoadOp(src, v, hi, c.CacheHint.NC)) for v in vs]
            for v, x in zip(vs, xs):
                b.add(c.McStoreOp(out_mc, v, hi, x, shift))
        self.barrier_phase(2, mc_pads)

    def ar1(self) -> None:
        b = self.b
        st = self.stage(self.nv)
        off = b.add_(b.mul(self.rank, self.nv), st)
        lo, hi = self.chunk_slice(0, self.nv)
        src = self.ptr(self.src)
        self.push(lo, hi, src, [(self.peer(self.sym, d), off) for d in range(self.W)])
        self.barrier_phase(1)
        self.reduce(lo, hi, st, self.nv, [(self.ptr(self.out), None)])

    def rs(self) -> None:
        b = self.b
        st = self.stage(self.cv)
        off = b.add_(b.mul(self.rank, self.cv), st)
        src = self.ptr(self.src)
        self.each_chunk_to_its_rank(off, lambda lo, hi, base, sh: self.push(lo, hi, src, [(base, sh)]))
        self.barrier_phase(1)
        lo, hi = self.chunk_slice(0, self.cv)
        self.reduce(lo, hi, st, self.cv, [(self.ptr(self.out), None)])

    def ag(self) -> None:
        b = self.b
        self.barrier_phase(1)
        lo, hi = self.chunk_slice(0, self.nv)
        shift = b.mul(self.rank, self.nv)
        src = self.ptr(self.src)
        self.push(lo, hi, src, [(self.peer(self.out, d), shift) for d in range(self.W)])
        self.barrier_phase(2)

    def agp(self) -> None:
        """Pull: sym is the (symmetric) input; rank q's chunk into ``out[q * nv:]``, sources
        rank, rank+1, ...: at every step the ranks' sources form a permutation; peer data
        loaded ``.cg`` (L2: L1 could hold a line of an earlier launch)."""
        b = self.b
        self.barrier_phase(1)
        lo, hi = self.chunk_slice(0, self.nv)
        out = self.ptr(self.out)
        for i in range(self.W):
            q = self.rank_plus(i)
            self.push(lo, hi, self.peer(self.sym, q), [(out, b.mul(q, self.nv))], c.CacheHint.CG)
        self.barrier_phase(2)

    def a2a(self) -> None:
        """sym is the (symmetric) output: chunk d of the input to slot ``rank`` of rank d,
        d = rank+1, ..., rank (a permutation of destinations at every step)."""
        b = self.b
        self.barrier_phase(1)
        off = b.mul(self.rank, self.cv)
        src = self.ptr(self.src)
        self.each_chunk_to_its_rank(off, lambda lo, hi, base, sh: self.push(lo, hi, src, [(base, sh)]))
        self.barrier_phase(2)

    def ar2(self) -> None:
        """sym = [R: nv][S: W x cv]. Chunk d of the input into slot ``rank`` of rank d's S;
        arrive; sum this rank's chunk from its W slots; the result into the output and
        (push gather) every peer's R or (pull) the own R; leave (the exit signals: S and R
        are safe to reuse next launch, and every rank's chunk has landed / is final); copy
        the W - 1 other chunks into the output, from the own R (push) or the peers' (pull)."""
        b, W, cv, nv = self.b, self.W, self.cv, self.nv
        push_gather = self.cfg.gather.value == "push"
        off = b.add_(b.mul(self.rank, cv), nv)          # S + rank * cv
        src = self.ptr(self.src)
        if self.cfg.groups > 1:
            self.group_turn(wait=True)
        self.each_chunk_to_its_rank(off, lambda lo, hi, base, sh: self.push(lo, hi, src, [(base, sh)]))
        self.barrier_phase(1)
        lo, hi = self.chunk_slice(self.rank, nv, base=False)
        r0 = b.mul(self.rank, cv)
        out = self.ptr(self.out)
        if push_gather:
            dests = [(out, r0, None)] + [(self.peer(self.sym, d), r0, b.cmp("ne", self.rank, d))
                                         for d in range(W)]
        else:
            dests = [(self.ptr(self.sym), r0, None), (out, r0, None)]
        self.reduce(lo, hi, nv, cv, dests)
        self.barrier_phase(2)
        if self.cfg.groups > 1:
            self.group_turn(wait=False)
        # above GATHER_SOURCES peers: loops of GATHER_SOURCES chunks, each computing its
        # chunks' ranks and addresses just before it (not all W - 1 live across them)
        groups = ([range(1, W)] if W - 1 <= GATHER_SOURCES else
                  [range(g, min(W, g + GATHER_SOURCES)) for g in range(1, W, GATHER_SOURCES)])
        for peers in groups:
            if push_gather:
                mine = self.ptr(self.sym)
                sources = [(self.rank_plus(i), mine) for i in peers]
            else:
                sources = []
                for i in peers:
                    q = self.rank_plus(i)
                    sources.append((q, self.peer(self.sym, q)))
            self.gather_chunks(sources)

    def group_turn(self, wait: bool) -> None:
        """CTA c belongs to group c / ceil(G / groups). Wait: a CTA of a later group waits
        until CTA c - ceil(G / groups) of this rank passed its exchange (own pad slot
        2 W G + c reaches the epoch); pass: signal that slot (release, this GPU)."""
        b, W = self.b, self.W
        n = self.cfg.groups
        gsz = b.r(arith.DivUIOp(b.add_(self.G, n - 1), b.c(n)))
        mine = self.ptr(self.pads)
        if not wait:
            when = b.add(c.WhenOp(self.t0))
            with b.at(when.block):
                b.add(c.SignalOp(mine, b.add_(b.mul(self.G, 2 * W), self.cta), "gpu", "release"))
            return
        later = b.add(c.WhenOp(b.cmp("uge", self.cta, gsz)))
        with b.at(later.block):
            lead = b.add(c.WhenOp(self.t0))
            with b.at(lead.block):
                prev = b.sub(self.cta, gsz)
                b.add(c.SignalWaitOp(mine, b.add_(b.mul(self.G, 2 * W), prev), self.ep, self.rank,
                                     c.WaitSite.GROUP, scope="gpu", sleep_ns=256))
        b.add(s.ClusterSyncOp())

    def gather_chunks(self, sources) -> None:
        """out[q * cv + v] = base_q[q * cv + v] for v in this CTA's slice of a chunk and
        every (q, base_q) of ``sources``: 4 chunks' loads in flight together (a loop per
        chunk would wait W load latencies in a row; 8 spill at W = 8)."""
        b, cv = self.b, self.cv
        lo, hi = self.chunk_slice(0, self.nv)
        out = self.ptr(self.out)
        nv = self.nv
        op, (v,) = self.loop(lo, hi, 1)
        with b.at(op.block):
            for b0 in range(0, len(sources), 4):
                batch = sources[b0:b0 + 4]
                idx = [b.add_(b.mul(q, cv), v) for q, _ in batch]
                ys = [b.r(c.VecLoadOp(base, i, nv, c.CacheHint.CG)) for i, (_, base) in zip(idx, batch)]
                for i, y in zip(idx, ys):
                    b.add(c.VecStoreOp(out, i, nv, y))

    # ---- LL ------------------------------------------------------------------------
    def ll_push(self, x, slot, st, dests, skip_own: bool) -> None:
        """x as LL line ``slot + st`` of every base in ``dests`` (not the own with
        ``skip_own``: the thread keeps it). LL loops take one vector per trip, so every
        trip's vector is inside the slice: no bound."""
        b = self.b
        line = b.add_(slot, st)
        for d, base in enumerate(dests):
            pred = b.cmp("ne", self.rank, d) if skip_own else None
            b.add(c.LlStoreOp(b.r(c.LlAddrOp(base, line)), x, self.ep, pred))

    def ll_pull(self, v, st, own=None) -> None:
        """Poll the W slots' lines of vector v (own slot: ``own``), then sum them into the
        output (ll, llrs) or copy them out in rank order (llag)."""
        b, W, cv = self.b, self.W, self.cv
        mine = self.ptr(self.sym)
        addrs = [b.r(c.LlAddrOp(mine, b.add_(b.add_(b.mul(cv, q), v) if q else v, st)))
                 for q in range(W)]
        wait = b.add(c.LlWaitOp(addrs, self.ep, own, self.rank if own is not None else None))
        out = self.ptr(self.out)
        if self.cfg.kind is CommKind.LLAG:
            for q in range(W):
                b.add(c.VecStoreOp(out, v, None, wait.results[q], b.mul(cv, q) if q else None))
        else:
            z = b.r(c.VecSumOp(list(wait.results), self.cfg.dtype))
            b.add(c.VecStoreOp(out, v, None, z))

    def ll_gather_or_reduce(self) -> None:
        """ll / llag: the thread's first vector is loaded before the epoch (the two
        latencies overlap); then one loop that pushes a vector and polls its W slots (a
        rank pushes trip t before it waits for trip t, so no wait keeps a push back);
        thread 0's first trip publishes the epoch, after its pushes."""
        b, W = self.b, self.W
        lo, hi = self.chunk_slice(0, self.nv)
        v0 = b.add_(lo, self.tid)
        src = self.ptr(self.src)
        xp = b.r(c.VecLoadOp(src, v0, hi, c.CacheHint.NC))
        self.epoch()
        st = self.stage(self.cv)
        shift = b.mul(self.rank, self.cv)
        dests = [self.peer(self.sym, d) for d in range(W)]
        op, (v,) = self.loop(lo, hi, 1)
        with b.at(op.block):
            first = b.cmp("eq", v, v0)
            x = b.r(c.VecLoadOp(src, v, None, c.CacheHint.NC, pred=b.cmp("ne", v, v0), other=xp))
            self.ll_push(x, b.add_(v, shift), st, dests, skip_own=True)
            self.publish(first)
            self.ll_pull(v, st, own=x)

    def llrs(self) -> None:
        b = self.b
        st = self.stage(self.cv)
        shift = b.mul(self.rank, self.cv)
        src = self.ptr(self.src)

        def push(lo, hi, base, sh):
            op, (v,) = self.loop(lo, hi, 1)
            with b.at(op.block):
                x = b.r(c.VecLoadOp(src, v, None, c.CacheHint.NC))
                self.ll_push(x, b.add_(v, sh), st, [base], skip_own=False)
        self.each_chunk_to_its_rank(shift, push)
        lo, hi = self.chunk_slice(0, self.cv)
        self.publish()          # its atomic's round trip overlaps the pushes' flight
        op, (v,) = self.loop(lo, hi, 1)
        with b.at(op.block):
            self.ll_pull(v, st)


def sym_vecs(cfg: CommConfig, nv: int, cv: int) -> int:
    """Vectors of the kind's symmetric data buffer."""
    W = cfg.world
    if cfg.kind.is_ll:
        # 2 epochs x W slots of LL lines (2 vectors each), whole groups of 32 lines
        return 2 * (-(-2 * W * cv // 32) * 32)
    return {CommKind.AR1: 2 * W * nv, CommKind.RS: 2 * W * cv, CommKind.AG: W * nv,
            CommKind.AR2: nv + W * cv, CommKind.AGP: nv, CommKind.A2A: nv,
            CommKind.ARMC: nv, CommKind.AGMC: W * nv}[cfg.kind]
