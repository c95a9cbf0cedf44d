"""Collective kernels over symmetric memory for sm_90a: all-reduce (one-shot, two-shot),
all-gather and reduce-scatter of a flat tensor, in 16-byte vectors.

These are the fast versions of what lower-collectives expresses with ``pk.put`` /
``pk.signal``: the same algorithms and the same reduction order (slots summed in rank
order 0..W-1 in f32, rounded once, so results are bitwise equal to the graph-level op),
but one launch with no host work: signal pads are monotonic ``u32`` counters compared with
the launch's epoch (zeroed once at allocation), so consecutive launches need no zeroing,
no host barrier and no host synchronization.

The epoch lives on the device (``ctl = [epoch, ctas_done]``, per rank): every thread reads
it before the CTA's first barrier and uses ``epoch + 1``; the last CTA past that barrier
(the one that takes ``ctas_done`` to G) stores the new epoch and resets the count. So the kernel's
parameters are the same on every launch, and a CUDA graph that captured it replays
correctly (an epoch passed by value would be frozen into the graph, and every replay's
waits would be satisfied by the signals of earlier replays: reads before the data).

The W ranks each run the same grid of ``G`` CTAs; CTA ``c`` of every rank handles slice
``c`` of each chunk, and synchronizes only with CTA ``c`` of the other ranks through
per-(phase, source rank, CTA) slots ``pad[(phase * W + src) * G + c]``. So a rank needs no
grid-wide barrier, but every CTA of every rank must be resident at once (the host keeps
``G`` <= the SMs a rank runs on; one CTA of 512 threads fits any SM).

Every transfer is a push: a rank stores into its peers' symmetric buffers (NVLink writes
are posted; a pull would pay a round trip per load) and reads only its own memory, where
the peers' data has landed once their signals arrived. Signals: all threads store; the CTA
synchronizes; thread 0 fences (``fence.acq_rel.sys``) and adds 1 to the slot on every
rank; threads 0..W-1 spin (``ld.acquire.sys``) on this rank's W slots.

Kinds (``sym``: the symmetric buffer; ``stage``: its half of this epoch, by parity):

* ``ar1`` one-shot all-reduce, out of place: store the input into slot ``rank`` of every
  rank's ``stage`` (``2 x W x n``); arrive (signal every rank, wait for every rank); sum
  the W local slots into the local output. Double buffering makes it safe without an
  exit barrier: a rank reaches epoch e + 2 (and overwrites the half of epoch e) only after
  every rank's CTA arrived in e + 1, i.e. after their kernels of epoch e (which read their
  own copy of that half) completed.
* ``rs`` reduce-scatter, out of place: chunk d of the input goes to slot ``rank`` of rank
  d's ``stage`` (``2 x W x chunk``); arrive; sum the W local slots.
* ``ar2`` two-shot all-reduce: ``sym = [R: n][S: W x chunk]``. Chunk d of the input (the
  rank's ``R``, in place like torch's ``two_shot_all_reduce_``; or a local tensor with
  ``copy_in``) goes to slot ``rank`` of rank d's ``S``; arrive; sum this rank's chunk
  from its W slots. In place: store the result into ``R`` of every rank; leave (signal,
  wait for every rank's chunk); the result is the rank's ``R``, and the exit barrier is
  what makes ``S`` and ``R`` safe to reuse. With ``copy_in`` the result goes to a local
  output (a fresh tensor per call: nothing persistent leaves the kernel), by
  ``gather="push"``: the result into the own output and every peer's ``R``, then each
  CTA copies its slice of the W - 1 peers' chunks from the own ``R`` (complete once
  every rank's CTA of that slice signalled); or ``"pull"``: the result only into the
  own ``R`` and the own output; signal; pull the W - 1 peers' reduced chunks from their
  ``R`` (its local reduce runs while the link is idle). Measured on 4 H200s (kernels alone, when push still
  copied all W chunks): push 1.10 vs pull 1.05x NCCL at 1 MiB, 0.88 vs 0.91x at 1 GiB.
* ``ag`` all-gather: arrive (every peer's kernel of this epoch started, so its consumers
  of the last result are done); store the input into slot ``rank`` of every rank's
  ``sym`` (``W x n``); leave. The result is the rank's ``sym``.
* ``agp`` pull all-gather of data that already lies in symmetric memory (``sym``: each
  rank's ``n``-element chunk, e.g. a fused GEMM + reduce-scatter's result): arrive
  (every rank's chunk is final: the kernel that wrote it completed on that rank's
  stream); pull the W chunks into a local output ``W x n`` (a fresh tensor per call:
  nothing persistent leaves); leave (no rank overwrites its chunk, in its next kernel,
  while a peer still reads it).

Every wait is bounded: after ``timeout`` ns a thread records (flag, kind, rank, peer,
seen, wanted, cta, epoch) in the error record and stops waiting, so a missing rank is an
error on the host, not a hang.
"""

from __future__ import annotations

from dataclasses import dataclass

from pkc.codegen.hopper.gemm import _Ptx
from pkc.codegen.hopper.report import describe_record, emit_bounded_wait, emit_timeout_record

KINDS = ("ll", "llag", "llrs", "ar1", "rs", "ar2", "ag", "agp")
LL_KINDS = ("ll", "llag", "llrs")
DTYPES = {"bf16": 2, "f16": 2, "f32": 4}
THREADS = 512
from pkc.target.comm_tuning import LL_CTA_VECS  # noqa: E402  (measured there: vectors per CTA)
# An LL line (16 data bytes, each 4-byte word paired with the epoch: 32 bytes) is stored
# as two 16-byte halves; the lines of a group of 32 (one warp's) keep their first halves
# together and their second halves LL_HALF bytes after, so each warp-wide store writes 512
# contiguous bytes (line-by-line, every store instruction would fill half of each sector)
LL_HALF = 512
ERR_PHASES = {1: "arrival of the rank's CTA (its data is ready / its kernel started)",
              2: "the rank's results written into this rank (exit)",
              3: "this rank's CTA of the previous group (ar2 groups) done with its exchange"}


@dataclass(frozen=True)
class CollectiveConfig:
    """One collective kernel: ``kind`` (see the module doc) for ``world`` ranks, element
    type ``dtype``; ``unroll`` vectors per thread per iteration; ``copy_in`` (ar2 only):
    take the input from a local tensor, the result into a local output, its chunks
    gathered by ``gather`` "push" or "pull" (see the module doc); ``groups`` (ar2): CTA
    groups that exchange one after another, so that a group's local copy-out overlaps the
    next group's link traffic."""

    kind: str = "ar1"
    world: int = 2
    dtype: str = "bf16"
    unroll: int = 4
    copy_in: bool = False
    gather: str = "push"
    groups: int = 1

    @property
    def esize(self) -> int:
        return DTYPES[self.dtype]

    @property
    def vec_elems(self) -> int:
        return 16 // self.esize

    @property
    def chunks(self) -> int:
        """Chunks of the input a CTA copies or reduces: W where data is split by rank."""
        return 1 if self.kind in ("ll", "llag", "ar1", "ag") else self.world

    @property
    def kernel_name(self) -> str:
        extra = ("_copy" + ("_pull" if self.gather == "pull" else "")) if self.copy_in else ""
        extra += f"_g{self.groups}" if self.groups > 1 else ""
        return f"pkc_coll_{self.kind}{extra}_w{self.world}_{self.dtype}_u{self.unroll}"

    def validate(self) -> None:
        def need(cond, msg):
            if not cond:
                raise ValueError(f"CollectiveConfig {self}: {msg}")
        need(self.kind in KINDS, f"kind must be one of {KINDS}")
        need(self.dtype in DTYPES, f"dtype must be one of {tuple(DTYPES)}")
        need(1 <= self.world <= 64, "world must be 1..64")
        need(1 <= self.unroll <= 8, "unroll must be 1..8")
        need(not self.copy_in or self.kind == "ar2", "copy_in is an ar2 option")
        need(self.gather in ("push", "pull"), "gather must be push or pull")
        need(self.groups == 1 or self.kind == "ar2", "groups is an ar2 option")
        need(1 <= self.groups <= 8, "groups must be 1..8")


class CollectiveKernel:
    """Emits the PTX of one :class:`CollectiveConfig`.

    Parameters (in order): ``src`` (u64, local input; ar2 in place: unused), ``out`` (u64,
    local output: ll / ar1 / rs), ``symp0..`` (u64, the W ranks' symmetric buffers),
    ``padp0..`` (u64, the W ranks' signal pads, ``2 * W * G`` u32 each), ``mysym``,
    ``mypad`` (this rank's of each), ``nv`` (u32, 16-byte vectors of the whole tensor: ar1 / ar2 the tensor, rs the input
    ``W x chunk``, ag the local input), ``cv`` (u32, vectors per chunk), ``per`` (u32,
    vectors per CTA slice of a chunk), ``rank`` (u32), ``ctl`` (u64, this rank's
    ``[epoch, ctas_done]`` u32 pair, zeroed once), ``err`` (u64, 8 u32),
    ``timeout`` (u64 ns), ``mbox`` (u64, a host-mapped error slot or 0), ``trap`` (u32:
    trap after reporting a timeout; see :mod:`pkc.codegen.hopper.report`).
    """

    def params(self) -> list[tuple[str, str]]:
        """Peer addresses travel by value (constant across launches), not through a device
        array: no dependent global load before the first store."""
        W = self.cfg.world
        return ([("src", "u64"), ("out", "u64")] + [(f"symp{d}", "u64") for d in range(W)]
                + [(f"padp{d}", "u64") for d in range(W)]
                + [("mysym", "u64"), ("mypad", "u64"), ("nv", "u32"), ("cv", "u32"),
                   ("per", "u32"), ("rank", "u32"), ("ctl", "u64"), ("err", "u64"),
                   ("timeout", "u64"), ("mbox", "u64"), ("trap", "u32")])

    def __init__(self, cfg: CollectiveConfig):
        cfg.validate()
        self.cfg = cfg
        self.p = _Ptx()
        # vectors per thread per loop trip; the out-of-place two-shot holds more live
        # registers (3 loops) and must stay within 64 for 2 CTAs per SM
        # (3 live loops; the push gather's reduce also stores to W ranks: 2, or ptxas spills)
        cap = 2 if cfg.gather == "push" else 3
        self.unroll = min(cfg.unroll, cap) if cfg.kind == "ar2" and cfg.copy_in else cfg.unroll

    # ---- small helpers ---------------------------------------------------------------
    def _pname(self, s: str) -> str:
        return f"{self.cfg.kernel_name}_param_{s}"

    def _slot(self, dst: str, base: str, phase: int, src) -> None:
        """dst = base + 4 * ((phase * W + src) * G + cta)."""
        p = self.p
        s = p.r32("slot")
        p(f"add.u32 {s}, {src}, {phase * self.cfg.world};")
        p(f"mad.lo.u32 {s}, {s}, %G, %cta;")
        p(f"mul.wide.u32 {dst}, {s}, 4;")
        p(f"add.s64 {dst}, {dst}, {base};")

    def _spin_wait(self, addr: str, want: str, phase: int, peer: str) -> None:
        """Wait until (s32)(ld.acquire.sys [addr] - want) >= 0, bounded by %timeout; on
        expiry record the first error of this rank and stop waiting (later waits too)."""
        emit_bounded_wait(self.p, addr, want, timeout="%timeout", sleep_ns=32, scope="sys",
                          gave=self.p.r32("gave"), err="%err", mbox="%mbox", trap="%trap",
                          tag="sw", record=[str(phase), "%rank", peer, "%seen", want, "%cta",
                                            "%epoch"])

    def _barrier_phase(self, phase: int) -> None:
        """Every thread's stores so far are visible to all ranks; then signal slot
        (phase, rank, cta) of every rank and wait for slot (phase, q, cta) of every q."""
        p, W = self.p, self.cfg.world
        p.comment(f"---- phase {phase}: signal every rank, wait for every rank")
        p("bar.sync 0;")
        t0 = p.pred("t0")
        skip = p.fresh("sig_done")
        p(f"@!{t0} bra {skip};")
        p("fence.acq_rel.sys;")
        addr = p.r64("sig_addr")
        for d in range(W):
            self._slot(addr, f"%padp{d}", phase - 1, "%rank")
            p(f"red.relaxed.sys.global.add.u32 [{addr}], 1;")   # ordered by the fence
        p.label(skip)
        waits = p.fresh("wait_done")
        tw = p.pred("tw")
        p(f"setp.lt.u32 {tw}, %tidx, {W};")
        p(f"@!{tw} bra {waits};")
        self._slot(addr, "%mypad", phase - 1, "%tidx")
        self._spin_wait(addr, "%epoch", phase, "%tidx")
        p.label(waits)
        p("bar.sync 0;")

    def _rank_plus(self, i: int) -> str:
        """A register with (rank + i) mod W."""
        p, W = self.p, self.cfg.world
        d, q = p.r32(f"rot{i}"), p.pred("rotq")
        p(f"add.u32 {d}, %rank, {i % W};")
        p(f"setp.ge.u32 {q}, {d}, {W};")
        p(f"@{q} sub.u32 {d}, {d}, {W};")
        return d

    def _rotated(self, i: int) -> tuple[str, str]:
        """(d, base): d = (rank + i) mod W and the address of rank d's symmetric buffer.
        Loops over chunks visit d = rank+1, rank+2, ..., rank: at every step the ranks'
        destinations (or sources) form a permutation, so no rank's link is the target of
        all the others at once (chunk 0 first everywhere would be an incast on rank 0)."""
        p, W = self.p, self.cfg.world
        d, base, q = self._rank_plus(i), p.r64(f"rotp{i}"), p.pred("rotq")
        p(f"mov.u64 {base}, %symp0;")
        for k in range(1, W):
            p(f"setp.eq.u32 {q}, {d}, {k};")
            p(f"selp.u64 {base}, %symp{k}, {base}, {q};")
        return d, base

    def _each_chunk_to_its_rank(self, lo: str, hi: str, slot_off: str, push) -> None:
        """For chunk d = rank+1, ..., rank (see :meth:`_rotated`): [lo, hi) = this CTA's
        slice of chunk d of the input, ``shift`` = slot_off - d * cv, so that input vector
        v lands at ``slot_off + (v - chunk start)`` of rank d; ``push(base, shift)`` emits
        the copy to rank d's buffer."""
        p = self.p
        shift = p.r32("dshift")
        for i in range(1, self.cfg.world + 1):
            d, base = self._rotated(i)
            self._chunk_slice(d, lo, hi, "%nv")
            p(f"mul.lo.u32 {shift}, %cv, {d};")
            p(f"sub.u32 {shift}, {slot_off}, {shift};")     # mod 2^32
            push(base, shift)

    # ---- vector loops ------------------------------------------------------------------
    def _slice_loop(self, lo: str, hi: str, body, unroll: int | None = None) -> None:
        """For v in [lo, hi) in steps of THREADS * unroll, each thread ``unroll`` vectors
        (v + tid + u * THREADS), guarded by predicates: ``body(vregs, preds)``."""
        p, U = self.p, unroll or self.unroll
        top, end = p.fresh("loop"), p.fresh("loop_end")
        base = p.r32("lbase")
        p(f"add.u32 {base}, {lo}, %tidx;")
        p.label(top)
        pe = p.pred("lpe")
        p(f"setp.ge.u32 {pe}, {base}, {hi};")
        p(f"@{pe} bra {end};")
        vs = []
        for u in range(U):
            v = p.r32(f"v{u}")
            p(f"add.u32 {v}, {base}, {u * THREADS};")
            vs.append(v)
        self._hi = hi
        body(vs)
        p(f"add.u32 {base}, {base}, {U * THREADS};")
        p(f"bra.uni {top};")
        p.label(end)

    def _addr(self, dst: str, base: str, v: str, extra_vecs: str | None = None) -> None:
        """dst = base + 16 * (v [+ extra_vecs])."""
        p = self.p
        if extra_vecs is None:
            p(f"mul.wide.u32 {dst}, {v}, 16;")
        else:
            t = p.r32("avt")
            p(f"add.u32 {t}, {v}, {extra_vecs};")
            p(f"mul.wide.u32 {dst}, {t}, 16;")
        p(f"add.s64 {dst}, {dst}, {base};")

    def _guard(self, v: str) -> str:
        """A predicate for "vector v is inside the loop's range", computed where it is
        used (a predicate kept live per unrolled vector makes ptxas spill them)."""
        q = self.p.pred("pg")
        self.p(f"setp.lt.u32 {q}, {v}, {self._hi};")
        return q

    def _load(self, regs: list[str], addr: str, v: str, peer: bool) -> None:
        # peer data: .cg (L2, not L1: L1 could hold a line from an earlier launch)
        cache = "cg" if peer else "nc"
        q = self._guard(v)
        self.p(f"@{q} ld.global.{cache}.v4.b32 {{{', '.join(regs)}}}, [{addr}];")

    def _store(self, regs: list[str], addr: str, v: str) -> None:
        q = self._guard(v)
        self.p(f"@{q} st.global.v4.b32 [{addr}], {{{', '.join(regs)}}};")

    def _push(self, lo: str, hi: str, src: str, dests: list[tuple[str, str | None]],
              src_peer: bool = False) -> None:
        """For v in [lo, hi): x = src[v]; store x at ``base + 16 * (v + off)`` for every
        (base, off) in ``dests`` (peers' symmetric buffers: remote stores, posted)."""
        p = self.p
        a = p.r64("paddr")

        def body(vs):
            for u, v in enumerate(vs):
                self._addr(a, src, v)
                self._load([p.r32(f"x{u}_{k}") for k in range(4)], a, v, peer=src_peer)
            for u, v in enumerate(vs):
                regs = [p.r32(f"x{u}_{k}") for k in range(4)]
                for base, off in dests:
                    self._addr(a, base, v, off)
                    self._store(regs, a, v)
        self._slice_loop(lo, hi, body)

    def _reduce(self, lo: str, hi: str, src_off: str, stride: str,
                dests: list[tuple[str, str | None]]) -> None:
        """For v in [lo, hi): r = sum over q (rank order) of this rank's
        ``sym[src_off + q * stride + v]`` (the slots the peers pushed); store r at every
        (base, off) of ``dests``."""
        p, W = self.p, self.cfg.world
        a = p.r64("raddr")
        offs = []
        for q in range(W):
            o = p.r32(f"roff{q}")
            p(f"mad.lo.u32 {o}, {stride}, {q}, {src_off};")
            offs.append(o)

        def body(vs):
            for u, v in enumerate(vs):
                for q in range(W):
                    self._addr(a, "%mysym", v, offs[q])
                    self._load([p.r32(f"y{u}_{q}_{k}") for k in range(4)], a, v, peer=True)
            for u, v in enumerate(vs):
                res = [p.r32(f"z{u}_{k}") for k in range(4)]
                for k in range(4):
                    self._sum_word(res[k], [f"%y{u}_{q}_{k}" for q in range(W)])
                for base, off in dests:
                    self._addr(a, base, v, off)
                    self._store(res, a, v)
        # W loads of 4 registers per vector: about 8 vectors (32 registers) in flight per thread
        self._slice_loop(lo, hi, body, max(1, min(self.unroll, 8 // W)))

    def _sum_word(self, dst: str, words: list[str]) -> None:
        """dst (b32) = the rank-order f32 sum of the words (2 x 16-bit or 1 x f32 each),
        rounded once."""
        p, dt = self.p, self.cfg.dtype
        if dt == "f32":
            acc, x = p.reg("f_acc", ".f32"), p.reg("f_x", ".f32")
            p(f"mov.b32 {acc}, {words[0]};")
            for w in words[1:]:
                p(f"mov.b32 {x}, {w};")
                p(f"add.rn.f32 {acc}, {acc}, {x};")
            p(f"mov.b32 {dst}, {acc};")
            return
        lo, hi = p.reg("f_lo", ".f32"), p.reg("f_hi", ".f32")
        xl, xh = p.reg("f_xl", ".f32"), p.reg("f_xh", ".f32")
        for i, w in enumerate(words):
            tl, th = (lo, hi) if i == 0 else (xl, xh)
            self._unpack(tl, th, w)
            if i:
                p(f"add.rn.f32 {lo}, {lo}, {xl};")
                p(f"add.rn.f32 {hi}, {hi}, {xh};")
        p(f"cvt.rn.{dt}x2.f32 {dst}, {hi}, {lo};")

    def _unpack(self, lo: str, hi: str, word: str) -> None:
        self.p.unpack_16x2(self.cfg.dtype, lo, hi, word, "u")

    def _chunk_slice(self, chunk, lo: str, hi: str, limit: str, base: bool = True) -> None:
        """[lo, hi) = CTA %cta's slice of chunk ``chunk`` (clipped to ``limit``); with
        ``base=False`` the slice's offsets inside the chunk (chunk-relative)."""
        p = self.p
        t = p.r32("cs_t")
        p(f"mul.lo.u32 {lo}, {chunk}, %cv;")
        p(f"add.u32 {t}, {lo}, %cv;")
        p(f"min.u32 {t}, {t}, {limit};")               # the chunk's end
        p(f"mad.lo.u32 {lo}, %cta, %per, {lo};")
        p(f"add.u32 {hi}, {lo}, %per;")
        p(f"min.u32 {hi}, {hi}, {t};")
        p(f"min.u32 {lo}, {lo}, {hi};")
        if not base:
            c0 = p.r32("cs_c0")
            p(f"mul.lo.u32 {c0}, {chunk}, %cv;")
            p(f"sub.u32 {lo}, {lo}, {c0};")
            p(f"sub.u32 {hi}, {hi}, {c0};")

    # ---- the kernel --------------------------------------------------------------------
    def emit(self) -> str:
        cfg, p = self.cfg, self.p
        for name, ty in self.params():
            p.reg(name, ".b64" if ty == "u64" else ".b32")
            p(f"ld.param.{ty} %{name}, [{self._pname(name)}];")
        for name in ("tidx", "cta", "G"):
            p.reg(name, ".b32")
        p("mov.u32 %tidx, %tid.x;")
        p("mov.u32 %cta, %ctaid.x;")
        p("mov.u32 %G, %nctaid.x;")
        p(f"setp.eq.u32 {p.pred('t0')}, %tidx, 0;")
        p(f"mov.u32 {p.r32('gave')}, 0;")         # set once a wait expired (sticky)
        if cfg.kind in ("ll", "llag"):
            self._ll_prefetch()                    # in flight with the epoch's load
        p.reg("epoch", ".b32")
        p("ld.global.u32 %epoch, [%ctl];")         # before the first bar.sync: see _publish
        p("add.u32 %epoch, %epoch, 1;")
        p("bar.sync 0;")
        if cfg.kind not in LL_KINDS:               # LL: after the pushes (latency-bound)
            self._publish()
        {"ll": self._emit_ll, "llag": self._emit_ll, "llrs": self._emit_ll,
         "ar1": self._emit_ar1, "rs": self._emit_rs, "ar2": self._emit_ar2,
         "ag": self._emit_ag, "agp": self._emit_agp}[cfg.kind]()
        p("exit;")
        return self._assemble()

    def _stage(self, slot_vecs: str) -> str:
        """This epoch's staging half (double buffering by epoch parity): vector offset
        (epoch & 1) * W * slot_vecs."""
        p = self.p
        st = p.r32("stage")
        p("and.b32 %stage, %epoch, 1;")
        p(f"mul.lo.u32 %stage, %stage, {slot_vecs};")
        p(f"mul.lo.u32 %stage, %stage, {self.cfg.world};")
        return st

    def _emit_ll(self) -> None:
        """One-shot collectives with the flags in the data (NCCL's "LL" idea): every 4-byte
        word travels with the epoch in one 8-byte pair, so a reader polls the data itself:
        no fence, no signal, no barrier; twice the bytes, for small messages. ``ll``
        all-reduce: the input to slot ``rank`` of every rank, the W slots summed; ``llag``:
        the same push, the slots copied out in rank order; ``llrs``: chunk d to slot
        ``rank`` of rank d, the W slots of this rank's chunk summed. Slots are double
        buffered by epoch parity, as in ``ar1``."""
        p, W, kind = self.p, self.cfg.world, self.cfg.kind
        lo, hi = p.r32("lo"), p.r32("hi")
        slot_vecs = "%cv"                 # vectors per slot: the input (ll, llag), a chunk (llrs)
        st = self._stage(slot_vecs)       # first line of this epoch's half: W slots
        a, b = p.r64("lla"), p.r64("llb")
        slot = p.r32("llslot")

        prefetched = kind in ("ll", "llag")      # see _ll_prefetch
        x = [p.r32(f"x0_{k}") for k in range(4)]
        # ll / llag: the own slot is neither stored nor polled (the thread holds the vector)
        selfs = [p.pred(f"llself{d}") for d in range(W)] if prefetched else None
        if selfs:
            for d in range(W):
                p(f"setp.eq.u32 {selfs[d]}, %rank, {d};")

        def push_to(dests, shift):
            def push(vs):
                (v,) = vs
                self._addr(a, "%src", v)
                if prefetched:                  # the first trip's vector is in xp
                    first = p.pred("llfirst")
                    p(f"setp.eq.u32 {first}, {v}, %llv0;")
                    for k in range(4):
                        p(f"@{first} mov.b32 {x[k]}, %xp_{k};")
                    q, again = self._guard(v), p.pred("llagain")
                    p(f"not.pred {again}, {first};")
                    p(f"and.pred {again}, {again}, {q};")
                    p(f"@{again} ld.global.nc.v4.b32 {{{', '.join(x)}}}, [{a}];")
                else:
                    self._load(x, a, v, peer=False)
                p(f"add.u32 {slot}, {v}, {shift};")      # slot rank's vector (v - chunk start)
                line = p.r64("llline")
                self._ll_line(line, slot, st)
                for i, d in enumerate(dests):
                    p(f"add.s64 {b}, {line}, {d};")
                    q = self._guard(v)
                    if selfs:
                        p(f"and.pred {q}, {q}, !{selfs[i]};")
                    p(f"@{q} st.volatile.global.v4.b32 [{b}], {{{x[0]}, %epoch, {x[1]}, %epoch}};")
                    p(f"@{q} st.volatile.global.v4.b32 [{b}+{LL_HALF}], {{{x[2]}, %epoch, {x[3]}, %epoch}};")
            return push

        def pull(vs):
            (v,) = vs
            words = [[p.r32(f"y0_{q}_{k}") for k in range(4)] for q in range(W)]
            skip = p.fresh("ll_skip")
            q_ = self._guard(v)
            p(f"@!{q_} bra {skip};")
            addrs = [p.r64(f"llb{q}") for q in range(W)]
            for q in range(W):
                p(f"mad.lo.u32 {slot}, {q}, {slot_vecs}, {v};")
                self._ll_line(addrs[q], slot, st)
                p(f"add.s64 {addrs[q]}, {addrs[q]}, %mysym;")
            self._ll_wait(addrs, words, own=(x, selfs) if selfs else None)
            if kind == "llag":                       # out[q * n + v] = slot q's vector
                for q in range(W):
                    o = p.r32("llo")
                    p(f"mad.lo.u32 {o}, {q}, {slot_vecs}, {v};")
                    self._addr(a, "%out", o)
                    p(f"st.global.v4.b32 [{a}], {{{', '.join(words[q])}}};")
            else:
                res = [p.r32(f"z0_{k}") for k in range(4)]
                for k in range(4):
                    self._sum_word(res[k], [words[q][k] for q in range(W)])
                self._addr(a, "%out", v)
                p(f"st.global.v4.b32 [{a}], {{{', '.join(res)}}};")
            p.label(skip)

        shift = p.r32("llshift")
        if kind == "llrs":
            p(f"mul.lo.u32 {shift}, %rank, %cv;")          # slot rank (LL vectors: x 32 B)
            self._each_chunk_to_its_rank(lo, hi, shift, lambda base, sh: self._slice_loop(
                lo, hi, push_to([base], sh), 1))
            self._chunk_slice(0, lo, hi, "%cv")
            self._publish()          # its atomic's round trip overlaps the pushes' flight
            self._slice_loop(lo, hi, pull, 1)
            return
        # ll / llag: push a vector, then wait for its W - 1 peers' copies, in one loop (a
        # rank pushes trip t before it waits for trip t, so no rank waits on a push that a
        # wait keeps back); plan_grid leaves no CTA an empty slice, so thread 0's first
        # trip publishes the epoch, after its pushes
        self._chunk_slice(0, lo, hi, "%nv")
        p(f"mul.lo.u32 {shift}, %rank, %cv;")
        push = push_to([f"%symp{d}" for d in range(W)], shift)

        def push_pull(vs):
            push(vs)
            self._publish(cond="%llfirst")
            pull(vs)
        self._slice_loop(lo, hi, push_pull, 1)

    def _ll_line(self, dst: str, vec: str, stage: str) -> None:
        """dst = byte offset of LL line ``vec + stage``'s first half (see :data:`LL_HALF`):
        lines are grouped by 32, a group's first halves before its second halves."""
        p = self.p
        t = p.r32("lll")
        p(f"add.u32 {t}, {vec}, {stage};")
        g = p.r32("llg")
        p(f"shr.u32 {g}, {t}, 5;")
        p(f"and.b32 {t}, {t}, 31;")
        p(f"mul.wide.u32 {dst}, {g}, {2 * LL_HALF};")
        p(f"mad.wide.u32 {dst}, {t}, 16, {dst};")

    def _ll_prefetch(self) -> None:
        """ll / llag: load this thread's first input vector before the epoch (the two
        loads' latencies overlap; the push uses it instead of loading it again)."""
        p = self.p
        lo, hi = p.r32("lo"), p.r32("hi")
        self._chunk_slice(0, lo, hi, "%nv")
        v0, a = p.r32("llv0"), p.r64("lla")
        p(f"add.u32 {v0}, {lo}, %tidx;")
        self._hi = hi
        self._addr(a, "%src", v0)
        self._load([p.r32(f"xp_{k}") for k in range(4)], a, v0, peer=False)

    def _ll_wait(self, addrs: list[str], words: list[list[str]], own=None) -> None:
        """Poll the W slots' LL lines (two 16-byte lines each, at ``addrs``) until every
        flag is this epoch: all W slots' loads are issued before any flag is checked, so
        a thread waits about one latency, not W in a row (bounded: a timeout records the
        first slot still short and takes whatever is there). ``own = (regs, selfs)``: slot
        q is this thread's own vector ``regs`` where predicate ``selfs[q]`` holds (no load)."""
        p, W = self.p, self.cfg.world
        top, done, late = p.fresh("llw"), p.fresh("llw_ok"), p.fresh("llw_late")
        f = [[p.r32(f"llf{q}_{k}") for k in range(4)] for q in range(W)]
        ok, tmp = p.pred("llok"), p.pred("lltmp")
        oq = [p.pred(f"llok{q}") for q in range(W)]
        dl, now = p.r64("lldl"), p.r64("llnow")
        gave, short = p.pred("llgave"), p.r32("llshort")
        given = p.r32("gave")          # set once a wait timed out: later waits return at once
        p(f"setp.ne.u32 {tmp}, {given}, 0;")
        p(f"@{tmp} bra {done};")
        p(f"mov.u64 {dl}, 0;")
        if own:
            regs, selfs = own
            for q in range(W):
                for k in range(4):
                    p(f"@{selfs[q]} mov.b32 {words[q][k]}, {regs[k]};")
        p.label(top)
        for q in range(W):
            w, fq = words[q], f[q]
            g = f"@!{own[1][q]} " if own else ""
            p(f"{g}ld.volatile.global.v4.b32 {{{w[0]}, {fq[0]}, {w[1]}, {fq[1]}}}, [{addrs[q]}];")
            p(f"{g}ld.volatile.global.v4.b32 {{{w[2]}, {fq[2]}, {w[3]}, {fq[3]}}}, [{addrs[q]}+{LL_HALF}];")
        for q in range(W):
            p(f"setp.eq.u32 {oq[q]}, {f[q][0]}, %epoch;")
            for k in range(1, 4):
                p(f"setp.eq.and.u32 {oq[q]}, {f[q][k]}, %epoch, {oq[q]};")
            if own:
                p(f"or.pred {oq[q]}, {oq[q]}, {own[1][q]};")
        p(f"mov.pred {ok}, {oq[0]};")
        for q in range(1, W):
            p(f"and.pred {ok}, {ok}, {oq[q]};")
        p(f"@{ok} bra {done};")
        p(f"mov.u64 {now}, %globaltimer;")
        p(f"setp.eq.u64 {tmp}, {dl}, 0;")              # first miss: start the clock
        p(f"@{tmp} add.u64 {dl}, {now}, %timeout;")
        p(f"setp.gt.u64 {gave}, {now}, {dl};")
        p(f"@{gave} bra {late};")
        p(f"bra {top};")
        p.label(late)
        p(f"mov.u32 {given}, 1;")
        p(f"mov.u32 {short}, 0;")
        for q in reversed(range(W)):                   # the first slot still short
            p(f"@!{oq[q]} mov.u32 {short}, {q};")
        seen = p.r32("llseen")
        p(f"mov.u32 {seen}, {f[0][0]};")
        for q in range(1, W):
            p(f"setp.eq.u32 {tmp}, {short}, {q};")
            p(f"@{tmp} mov.u32 {seen}, {f[q][0]};")
        emit_timeout_record(p, "%err", "%mbox", "%trap",
                            ["1", "%rank", short, seen, "%epoch", "%cta", "%epoch"], "ll")
        p.label(done)

    def _emit_ar1(self) -> None:
        """Push the input into slot ``rank`` of every rank's staging; arrive; sum the W
        local slots into the output."""
        p, W = self.p, self.cfg.world
        lo, hi = p.r32("lo"), p.r32("hi")
        st = self._stage("%nv")
        off = p.r32("slot_off")
        p(f"mad.lo.u32 {off}, %rank, %nv, {st};")
        self._chunk_slice(0, lo, hi, "%nv")
        self._push(lo, hi, "%src", [(f"%symp{d}", off) for d in range(W)])
        self._barrier_phase(1)
        self._reduce(lo, hi, st, "%nv", [("%out", None)])

    def _emit_rs(self) -> None:
        """Push chunk d of the input into slot ``rank`` of rank d's staging; arrive; sum the
        W local slots into the output (this rank's chunk)."""
        p = self.p
        lo, hi = p.r32("lo"), p.r32("hi")
        st = self._stage("%cv")
        off = p.r32("slot_off")
        p(f"mad.lo.u32 {off}, %rank, %cv, {st};")
        self._each_chunk_to_its_rank(lo, hi, off,
                                     lambda base, shift: self._push(lo, hi, "%src", [(base, shift)]))
        self._barrier_phase(1)
        self._chunk_slice(0, lo, hi, "%cv")
        self._reduce(lo, hi, st, "%cv", [("%out", None)])

    def _emit_ar2(self) -> None:
        """sym = [R: nv][S: W x cv]. Push chunk d of the input (the local tensor, or R in
        place) into slot ``rank`` of rank d's S; arrive; sum this rank's chunk from its W
        slots and push the result into R of every rank; leave."""
        p, W, cfg = self.p, self.cfg.world, self.cfg
        lo, hi = p.r32("lo"), p.r32("hi")
        off = p.r32("slot_off")
        src = "%src" if cfg.copy_in else "%mysym"
        p(f"mad.lo.u32 {off}, %rank, %cv, %nv;")     # S + rank * cv
        if cfg.groups > 1:
            self._group_turn("wait")
        self._each_chunk_to_its_rank(lo, hi, off, lambda base, shift: self._push(
            lo, hi, src, [(base, shift)], src_peer=not cfg.copy_in))

        def leave() -> None:
            """Exit signals; then the next CTA group may start its exchange."""
            self._barrier_phase(2)
            if cfg.groups > 1:
                self._group_turn("pass")
        self._barrier_phase(1)
        self._chunk_slice("%rank", lo, hi, "%nv", base=False)
        r0 = p.r32("r0")
        p("mul.lo.u32 %r0, %rank, %cv;")
        if not cfg.copy_in:
            self._reduce(lo, hi, "%nv", "%cv", [(f"%symp{d}", r0) for d in range(W)])
            leave()
            return
        # out of place, into a fresh local output: nothing persistent is returned. R and S
        # are safe to reuse next epoch: a peer writes them only after the next arrival,
        # i.e. after this rank's kernel (and its reads of R) completed.
        if cfg.gather == "push":
            # the result into the own output and every peer's R; after the exit signals,
            # slice %cta of every peer's chunk in the own R is complete (each rank's CTA
            # %cta wrote that slice): copy those W - 1 chunks out
            dests = []
            for d in range(W):
                base, own = p.r64(f"rdst{d}"), p.pred("rdst_own")
                p(f"setp.eq.u32 {own}, %rank, {d};")
                p(f"selp.u64 {base}, %out, %symp{d}, {own};")
                dests.append((base, r0))
            self._reduce(lo, hi, "%nv", "%cv", dests)
            leave()
            self._gather_chunks(lo, hi, [(self._rank_plus(i), "%mysym") for i in range(1, W)])
            return
        # the own chunk goes to the output here, while the link is idle
        self._reduce(lo, hi, "%nv", "%cv", [("%mysym", r0), ("%out", r0)])
        leave()
        self._gather_chunks(lo, hi, [self._rotated(i) for i in range(1, W)])

    def _group_turn(self, what: str) -> None:
        """ar2 ``groups``: CTA c belongs to group c / ceil(G / groups). "wait": a CTA of
        group g > 0 waits until CTA c - ceil(G / groups) of this rank passed its exchange
        (slot ``2 W G + c`` of the own pad reaches the epoch); "pass": signal that slot
        after the exchange, before the local copy-out."""
        p, W, n = self.p, self.cfg.world, self.cfg.groups
        gsz, slot, addr = p.r32("grp_sz"), p.r32("grp_slot"), p.r64("grp_addr")
        p(f"add.u32 {gsz}, %G, {n - 1};")
        p(f"div.u32 {gsz}, {gsz}, {n};")

        def turn_of(cta: str) -> None:
            """addr = the own pad's turn slot of CTA ``cta``."""
            p(f"mad.lo.u32 {slot}, %G, {2 * W}, {cta};")
            p(f"mul.wide.u32 {addr}, {slot}, 4;")
            p(f"add.s64 {addr}, {addr}, %mypad;")

        if what == "pass":
            done = p.fresh("grp_passed")
            p(f"@!%t0 bra {done};")
            turn_of("%cta")
            p(f"red.release.gpu.global.add.u32 [{addr}], 1;")
            p.label(done)
            return
        done, first = p.fresh("grp_go"), p.pred("grp_first")
        p(f"setp.lt.u32 {first}, %cta, {gsz};")
        p(f"@{first} bra {done};")
        p(f"@!%t0 bra {done};")
        prev = p.r32("grp_prev")
        p(f"sub.u32 {prev}, %cta, {gsz};")
        turn_of(prev)
        emit_bounded_wait(p, addr, "%epoch", timeout="%timeout", sleep_ns=256, scope="gpu",
                          gave=p.r32("gave"), err="%err", mbox="%mbox", trap="%trap",
                          tag="gw", record=["3", "%rank", "%rank", "%seen", "%epoch", "%cta",
                                            "%epoch"])
        p.label(done)
        p("bar.sync 0;")

    def _gather_chunks(self, lo: str, hi: str, sources) -> None:
        """out[q * cv + v] = source_q[q * cv + v] for v in this CTA's chunk-relative slice
        [lo, hi) and every chunk q: the W loads of a vector are in flight together (a loop
        per chunk would wait W load latencies in a row: 1 MiB at W = 4 ran 5 us slower).
        ``sources``: a base register per chunk, or (chunk register, base) pairs in any
        chunk order (the pull from rank+0, rank+1, ...)."""
        p = self.p
        a, idx = p.r64("gaddr"), p.r32("gidx")
        pairs = [s if isinstance(s, tuple) else (str(q), s) for q, s in enumerate(sources)]
        self._chunk_slice(0, lo, hi, "%nv")      # a full chunk's slice (the last may be short)

        def at(q, base, v, j) -> tuple[str, str]:
            """(predicate, registers) of chunk q's vector v, its address in ``a``."""
            g = p.pred("gq")
            p(f"mad.lo.u32 {idx}, {q}, %cv, {v};")
            p(f"setp.lt.u32 {g}, {idx}, %nv;")
            self._addr(a, base, idx)
            return g, ", ".join(p.r32(f"y0_{j % 4}_{k}") for k in range(4))

        def body(vs):
            (v,) = vs
            for b0 in range(0, len(pairs), 4):      # 4 chunks in flight (8 spill at W = 8)
                batch = list(enumerate(pairs))[b0:b0 + 4]
                for j, (q, base) in batch:
                    g, regs = at(q, base, v, j)
                    p(f"@{g} ld.global.cg.v4.b32 {{{regs}}}, [{a}];")
                for j, (q, _) in batch:
                    g, regs = at(q, "%out", v, j)
                    p(f"@{g} st.global.v4.b32 [{a}], {{{regs}}};")
        self._slice_loop(lo, hi, body, 1)

    def _emit_ag(self) -> None:
        """Arrive (every peer's kernel of this epoch started: its consumers of the last
        result are done); push the input into slot ``rank`` of every rank's buffer; leave."""
        p, W = self.p, self.cfg.world
        lo, hi = p.r32("lo"), p.r32("hi")
        self._barrier_phase(1)
        self._chunk_slice(0, lo, hi, "%nv")
        shift = p.r32("gshift")
        p(f"mul.lo.u32 {shift}, %rank, %nv;")
        self._push(lo, hi, "%src", [(f"%symp{d}", shift) for d in range(W)])
        self._barrier_phase(2)

    def _emit_agp(self) -> None:
        """Arrive; pull chunk q of every rank q (from rank+0, rank+1, ...: a permutation of
        sources at every step) into ``out[q * n:]``; leave."""
        p, W = self.p, self.cfg.world
        lo, hi = p.r32("lo"), p.r32("hi")
        self._barrier_phase(1)
        self._chunk_slice(0, lo, hi, "%nv")
        shift = p.r32("gshift")
        for i in range(W):
            q, base = self._rotated(i)
            p(f"mul.lo.u32 {shift}, {q}, %nv;")
            self._push(lo, hi, base, [("%out", shift)], src_peer=True)
        self._barrier_phase(2)

    def _publish(self, cond: str | None = None) -> None:
        """Thread 0 of the last CTA to get here publishes the epoch for the next launch.
        Every thread of every CTA read the epoch before its CTA's first bar.sync, which
        thread 0 has passed, so no read of this launch can see the new value; done at the
        start, the atomic's round trip overlaps the transfers instead of ending the kernel."""
        p = self.p
        done = p.fresh("pub")
        p(f"@!%t0 bra {done};")
        if cond:                                   # once per CTA: where cond holds
            p(f"@!{cond} bra {done};")
        old, last = p.r32("fin_old"), p.pred("fin_last")
        p(f"atom.global.add.u32 {old}, [%ctl+4], 1;")
        p(f"add.u32 {old}, {old}, 1;")
        p(f"setp.eq.u32 {last}, {old}, %G;")
        p(f"@{last} st.global.u32 [%ctl+4], 0;")
        p(f"@{last} st.global.u32 [%ctl], %epoch;")
        p.label(done)

    def _assemble(self) -> str:
        cfg, p = self.cfg, self.p
        params = ",\n".join(f"\t.param .{ty} {self._pname(n)}" for n, ty in self.params())
        head = [f"// pkc collective {cfg.kind} W={cfg.world} {cfg.dtype} (sm_90a)",
                ".version 8.5", ".target sm_90a", ".address_size 64", "",
                f".visible .entry {cfg.kernel_name}(", params,
                f") .maxntid {THREADS}, 1, 1" + ("" if cfg.kind in LL_KINDS else " .minnctapersm 2"), "{"]
        return "\n".join(head + p.declarations() + p.lines + ["}", ""])


def emit_collective_ptx(cfg: CollectiveConfig) -> str:
    return CollectiveKernel(cfg).emit()


def plan_grid(cfg: CollectiveConfig, elems: int, max_ctas: int,
              ll_cta_vecs: int | None = None) -> tuple[int, int, int, int]:
    """(nv, cv, per, G) for a tensor of ``elems`` elements (the input of the kernel: for
    rs the ``W x chunk`` tensor, for ag the local shard). Raises if the size is not a
    whole number of 16-byte vectors (per chunk, where chunks exist). LL kinds give each
    CTA ``ll_cta_vecs`` vectors of a slot (default :data:`LL_CTA_VECS`), the others
    ``THREADS x unroll``."""
    ve = cfg.vec_elems
    if elems % ve:
        raise ValueError(f"{cfg.kind}: {elems} elements is not a multiple of 16 bytes")
    nv = elems // ve
    W = cfg.world
    if cfg.kind in ("rs", "llrs"):
        if nv % W:
            raise ValueError(f"{cfg.kind}: {elems} elements do not split into {W} chunks of 16-byte vectors")
        cv = nv // W
    elif cfg.kind == "ar2":
        cv = -(-nv // W)
    else:
        cv = nv
    if cfg.kind in LL_KINDS:
        work = ll_cta_vecs or LL_CTA_VECS
        if not 1 <= work <= THREADS:
            raise ValueError(f"{cfg.kind}: {work} vectors per CTA; LL takes 1..{THREADS}")
    else:
        work = THREADS * cfg.unroll
    G = max(1, min(max_ctas, -(-cv // work)))
    per = -(-cv // G)
    if cfg.kind in LL_KINDS and work >= 32:      # whole warps of whole LL line groups
        per = -(-per // 32) * 32
    G = max(1, -(-cv // per))        # no CTA with an empty slice (LL publishes in its loop)
    return nv, cv, per, G


def _blocks_per_sm(kernel) -> int:
    from pkc.codegen.hopper.launch import _check, _cu

    return int(_check(_cu().cuOccupancyMaxActiveBlocksPerMultiprocessor(kernel.func, THREADS, 0),
                      "cuOccupancyMaxActiveBlocksPerMultiprocessor"))


class CollectiveTimeout(RuntimeError):
    """A collective kernel's bounded wait ran out: names kernel, rank, CTA and peer."""


class CollectiveRunner:
    """One collective of a fixed size over a :class:`~pkc.runtime.peers.Peers` world, with
    persistent symmetric buffers and signal pads: ``run({rank: input})`` launches on the
    ranks driven here and returns ``{rank: output}``.

    Outputs that live in symmetric memory (ar2, ag) are overwritten by the next launch:
    copy them if they must outlive it. ``ar2`` without ``copy_in`` is in place: write the
    input into :meth:`buffer` (the result replaces it); ``run`` then takes no inputs.
    Errors (a peer that never arrived) are recorded on the device; :meth:`check` reads the
    records (it synchronizes) and raises :class:`CollectiveTimeout`.
    """

    def __init__(self, cfg: CollectiveConfig, elems: int, peers, timeout_ns: int = 2_000_000_000,
                 ctas_per_sm: int | None = None, source=None, ll_cta_vecs: int | None = None):
        import torch
        from pkc.codegen.hopper.launch import load_kernel

        cfg.validate()
        if cfg.world != peers.world:
            raise ValueError(f"{cfg.kernel_name} is built for {cfg.world} ranks, the peers are {peers.world}")
        self.cfg, self.peers, self.elems = cfg, peers, elems
        self.tdt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[cfg.dtype]
        self.kernel = load_kernel(emit_collective_ptx(cfg), cfg.kernel_name, 0, peers.device)
        # every CTA of every rank must be resident at once: at most what fits per SM
        fit = _blocks_per_sm(self.kernel)
        # bandwidth kinds: 2 per SM (with 1 the spilling first version reached 189 GB/s
        # on a 1 GiB all-gather, with 2 342 GB/s; docs/FACTS.md has the caveat)
        if ctas_per_sm is None:
            ctas_per_sm = min(fit, 2 if cfg.kind in ("ag", "agp", "rs", "ar2") else 1)
        if ctas_per_sm > fit:
            raise ValueError(f"{cfg.kernel_name}: {ctas_per_sm} CTAs per SM requested, {fit} fit")
        max_ctas = ctas_per_sm * min(peers.sms_of(r) for r in peers.ranks)
        self.nv, self.cv, self.per, self.grid = plan_grid(cfg, elems, max_ctas, ll_cta_vecs)
        # LL: one vector per thread when a CTA's slice fits (no idle warps to launch)
        self.threads = min(THREADS, -(-self.per // 32) * 32) if cfg.kind in LL_KINDS \
            else THREADS
        W, ve = cfg.world, cfg.vec_elems
        ll_vecs = 2 * (-(-2 * W * self.cv // 32) * 32)     # 2 x W slots of LL lines, whole groups
        sym_vecs = {"ll": ll_vecs, "llag": ll_vecs, "llrs": ll_vecs,
                    "ar1": 2 * W * self.nv, "rs": 2 * W * self.cv, "ag": W * self.nv,
                    "ar2": self.nv + W * self.cv, "agp": self.nv}[cfg.kind]
        key = ("collective", cfg, elems, id(self))
        if (source is not None) != (cfg.kind == "agp"):
            raise ValueError(f"{cfg.kernel_name}: a source (symmetric chunks) is what agp, "
                             "and only agp, gathers from")
        if source is not None:
            bad = [r for r, t in source.tensors.items() if t.dtype != self.tdt or t.numel() != elems
                   or not t.is_contiguous()]
            if bad:
                raise ValueError(f"{cfg.kernel_name}: the source must hold a contiguous {self.tdt} "
                                 f"chunk of {elems} elements per rank (rank {bad[0]} does not)")
        self.sym = source if source is not None else \
            peers.symmetric(key + ("sym",), [sym_vecs * ve], self.tdt)
        # phases 1, 2: W x G slots each; ar2 groups: G more (one per CTA, local)
        self.pads = peers.symmetric(key + ("pads",), [(2 * W + 1) * self.grid], torch.int32,
                                    zero=True)
        self.err = peers.local(key + ("err",), [8], torch.int32, zero=True)
        self.ctl = peers.local(key + ("ctl",), [2], torch.int32, zero=True)
        self.mbox = {r: peers.mailbox.slot(cfg.kernel_name, r, ERR_PHASES) for r in peers.ranks}
        self.timeout_ns = int(timeout_ns)
        n = elems
        self.out = {}
        for r in peers.ranks:
            s = self.sym.tensors[r]
            if cfg.kind in ("ar1", "ll"):
                self.out[r] = torch.empty(n, dtype=self.tdt, device=peers.device)
            elif cfg.kind == "llag":
                self.out[r] = torch.empty(W * n, dtype=self.tdt, device=peers.device)
            elif cfg.kind == "agp":
                self.out[r] = torch.empty(W * n, dtype=self.tdt, device=peers.device)
            elif cfg.kind in ("rs", "llrs"):
                self.out[r] = torch.empty(n // W, dtype=self.tdt, device=peers.device)
            elif cfg.kind == "ar2":
                self.out[r] = torch.empty(n, dtype=self.tdt, device=peers.device) \
                    if cfg.copy_in else s[:n]
            else:
                self.out[r] = s
        self._args: dict = {}

    @property
    def in_place(self) -> bool:
        return self.cfg.kind == "ar2" and not self.cfg.copy_in

    @property
    def takes_input(self) -> bool:
        """False where the data is already in the symmetric buffer (ar2 in place, agp)."""
        return not self.in_place and self.cfg.kind != "agp"

    def buffer(self, rank: int):
        """ar2 in place: the symmetric tensor rank ``rank`` writes its input into."""
        if not self.in_place:
            raise ValueError(f"{self.cfg.kernel_name} is not in place")
        return self.out[rank]

    def _bind(self, rank: int, src, out=None):
        """Packed arguments of one rank, cached by the input and output addresses."""
        import ctypes
        from pkc.codegen.hopper.launch import KernelArgs

        local_out = self.local_output
        out = (out if out is not None else self.out[rank]) if local_out else None
        key = (rank, 0 if src is None else src.data_ptr(), 0 if out is None else out.data_ptr())
        hit = self._args.get(key)
        if hit is None:
            u32, u64 = ctypes.c_uint32, ctypes.c_uint64
            vals = ([u64(0 if src is None else src.data_ptr()), u64(0 if out is None else out.data_ptr())]
                    + [u64(x) for x in self.sym.ptrs] + [u64(x) for x in self.pads.ptrs]
                    + [u64(self.sym.ptrs[rank]), u64(self.pads.ptrs[rank]),
                       u32(self.nv), u32(self.cv), u32(self.per), u32(rank),
                       u64(self.ctl[rank].data_ptr()), u64(self.err[rank].data_ptr()),
                       u64(self.timeout_ns), u64(self.mbox[rank]), u32(int(self.peers.trap))])
            if len(self._args) >= 64:
                self._args.pop(next(iter(self._args)))
            # addresses are all the arguments depend on: nothing is kept alive, so a fresh
            # output per call reuses the caching allocator's block (and this entry)
            hit = self._args[key] = (KernelArgs(vals), None)
        return hit

    def _check_input(self, rank: int, x):
        if x is None:
            raise ValueError(f"{self.cfg.kernel_name}: rank {rank} needs an input")
        if x.dtype != self.tdt or x.numel() != self.elems or not x.is_contiguous() \
                or x.data_ptr() % 16 or x.device != self.peers.device:
            raise ValueError(
                f"{self.cfg.kernel_name}: rank {rank}'s input must be a contiguous, 16-byte "
                f"aligned {self.tdt} tensor of {self.elems} elements on {self.peers.device}; "
                f"got {tuple(x.shape)} {x.dtype} on {x.device}")

    @property
    def local_output(self) -> bool:
        """ll / ar1 / rs / agp (and ar2 with copy-in) write a local output, which a caller may supply per launch
        (``run(..., outs=)``): then nothing persistent is returned."""
        return self.cfg.kind in LL_KINDS + ("ar1", "rs", "agp") or \
            (self.cfg.kind == "ar2" and self.cfg.copy_in)

    def run(self, inputs=None, ranks=None, outs=None) -> dict:
        """Launch every driven rank (``inputs[rank]``: its local input; none in place).
        ``outs[rank]``: where a local output goes (default: the runner's own buffer).
        ``ranks``: launch only these (tests of a missing peer)."""
        from pkc.codegen.hopper.launch import launch

        self.peers.begin()
        for r in (self.peers.ranks if ranks is None else ranks):
            x = None
            if self.takes_input:
                x = inputs[r] if inputs is not None else None
                self._check_input(r, x)
            o = None if outs is None else outs[r]
            if o is not None:
                self._check_output(r, o)
            args, _ = self._bind(r, x, o)
            launch(self.kernel, self.grid, self.threads, args, self.peers.stream(r))
        self.peers.end()
        return {r: (self.out[r] if outs is None else outs[r]) for r in self.peers.ranks}

    def _check_output(self, rank: int, o) -> None:
        want = self.out[rank]
        if not self.local_output or o.dtype != want.dtype or o.numel() != want.numel() \
                or not o.is_contiguous() or o.data_ptr() % 16:
            raise ValueError(f"{self.cfg.kernel_name}: rank {rank}'s output must be a contiguous, "
                             f"16-byte aligned {want.dtype} tensor of {want.numel()} elements")

    def check(self) -> None:
        for r in self.peers.ranks:
            rec = self.err[r].tolist()
            if rec[0]:
                raise CollectiveTimeout(describe_record(self.cfg.kernel_name, rec, ERR_PHASES))


def hand_collective_config(kind: str, world: int, dtype: str, elems: int) -> CollectiveConfig:
    """The hand kernel's config for ``kind`` on ``elems`` elements, by the tuning table the
    schedule pass uses: the two-shot (``ar2``) into a fresh output, gathered by push or pull
    and in CTA groups by size; the other kinds as they are (the baseline the IR-built
    collectives are measured against)."""
    from pkc.target.comm_tuning import AR2_GROUPS_MIN_BYTES, AR2_PULL_MIN_BYTES

    if kind != "ar2":
        return CollectiveConfig(kind, world, dtype)
    nbytes = elems * {"f32": 4}.get(dtype, 2)
    pull = world > 2 and nbytes >= AR2_PULL_MIN_BYTES
    return CollectiveConfig(kind, world, dtype, copy_in=True, gather="pull" if pull else "push",
                            groups=2 if nbytes >= AR2_GROUPS_MIN_BYTES else 1)
