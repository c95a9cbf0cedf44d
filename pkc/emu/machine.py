"""The emulated GPU of one launch: every thread of every CTA of every rank, vectorized.

State is kept per thread in numpy arrays over all ``N = world * ctas * threads`` threads
(thread ``t`` is rank ``t // (ctas * threads)``, CTA ``t // threads`` counted over the
whole launch): a program counter, an alive flag, a wait flag, the bar.sync a thread
waits at, and one array per register.

Scheduling (why it is a legal GPU schedule): at each step the emulator takes the lowest
program counter among the threads that can run and executes that instruction for every
such thread at once (one vectorized step, whichever rank, CTA or warp it is in). PTX
threads may interleave in any order (independent thread scheduling, PTX ISA 9.7.13.5), so
any choice is legal; the lowest PC lets diverged threads of structured code reconverge
(the ones that skipped a body wait at its end for the ones inside it), which keeps steps
wide. A thread whose wait is not satisfied (mbarrier, a signal) stops being runnable;
waits are polled again only when nothing else can run, so a waiter sees everything the
others could do before it. When nothing can run and no poll succeeds, every live thread
waits for something no one can do: an :class:`~pkc.emu.errors.EmuDeadlock` naming each
waiting group. A bound on the number of steps turns endless polling into an error too.
"""

from __future__ import annotations

import numpy as np

from pkc.emu.errors import (EmuDeadlock, EmuError, EmuStepLimit, EmuUnsupported, EmuWarpError,
                            Where)
from pkc.emu.memory import GlobalMemory, SharedMemory
from pkc.emu.program import Instr, Program, render
from pkc.emu.registry import BRANCHED, HANDLERS, JUMPED
from pkc.emu.values import KIND_DTYPE, as_type, to_kind

DEFAULT_MAX_STEPS = 3_000_000
WARP = 32
CLUSTER_BARRIER = 1 << 20   # at_bar value of a thread waiting at barrier.cluster


class Group:
    """The threads executing one instruction now (``idx``: their thread numbers)."""

    __slots__ = ("m", "idx", "n", "full", "_cache")

    def __init__(self, m: "Machine", idx: np.ndarray):
        self.m, self.idx, self.n = m, idx, len(idx)
        self.full = self.n == m.N
        self._cache: dict = {}

    # registers
    def get(self, slot: int, t: str | None = None) -> np.ndarray:
        arr = self.m.regs[slot]
        if arr is None:
            arr = self.m.regs[slot] = self.m.new_reg(slot)
        v = arr if self.full else arr[self.idx]
        return v if t is None else as_type(v, t)

    def set(self, slot: int, value) -> None:
        kind = self.m.prog.kinds[slot]
        arr = self.m.regs[slot]
        if arr is None:
            arr = self.m.regs[slot] = self.m.new_reg(slot)
        v = np.asarray(value, dtype=np.float32) if kind.startswith("frag") else \
            to_kind(np.asarray(value), kind)
        if self.full:
            arr[:] = v
        else:
            arr[self.idx] = v

    # where the threads are
    def _per(self, name: str) -> np.ndarray:
        v = self._cache.get(name)
        if v is None:
            full = getattr(self.m, name)
            v = self._cache[name] = full if self.full else full[self.idx]
        return v

    @property
    def rank(self) -> np.ndarray:
        return self._per("rank_of")

    @property
    def cta(self) -> np.ndarray:
        """CTA number over the whole launch (rank * ctas + %ctaid.x)."""
        return self._per("cta_of")

    @property
    def tid(self) -> np.ndarray:
        return self._per("tid_of")

    @property
    def lane(self) -> np.ndarray:
        return self._per("lane_of")

    @property
    def warp(self) -> np.ndarray:
        """Warp number over the whole launch."""
        return self._per("warp_of")

    def sub(self, mask: np.ndarray) -> "Group":
        return Group(self.m, self.idx[mask])

    def where(self, ins: Instr, i: int = 0) -> Where:
        return self.m.where(int(self.idx[i]), ins)


class Machine:
    def __init__(self, prog: Program, *, world: int, ctas: int, threads: int, smem_bytes: int,
                 gmem: GlobalMemory, params: list[list[int]], cluster: int = 1,
                 max_steps: int = DEFAULT_MAX_STEPS, target: str = "sm_90a",
                 names: dict | None = None, resident: int | None = None):
        self.prog, self.code = prog, prog.code
        self.kernel = prog.name
        if cluster < 1 or ctas % cluster:
            # cudaLaunchKernelEx refuses a grid that is not whole clusters
            raise EmuError(f"kernel @{prog.name}: a grid of {ctas} CTAs is not a whole number "
                           f"of clusters of {cluster} (the cluster size must divide the grid)")
        self.world, self.ctas, self.threads, self.cluster = world, ctas, threads, cluster
        self.target = target
        self.N = N = world * ctas * threads
        t = np.arange(N, dtype=np.int64)
        self.rank_of = t // (ctas * threads)
        self.cta_of = t // threads
        self.ctaid_of = self.cta_of % ctas
        self.tid_of = t % threads
        self.lane_of = self.tid_of % WARP
        self.warp_of = t // WARP
        self.cluster_base_of = self.cta_of - self.ctaid_of % cluster
        self.gmem = gmem
        self.smem = SharedMemory(world * ctas, smem_bytes)
        self.pc = np.zeros(N, dtype=np.int64)
        self.alive = np.ones(N, dtype=bool)
        self.waiting = np.zeros(N, dtype=bool)
        self.at_bar = np.full(N, -1, dtype=np.int32)
        self.bar_count: dict[tuple[int, int], int] = {}   # (cta, barrier) -> expected threads
        self.regs: list[np.ndarray | None] = [None] * len(prog.kinds)
        self.steps = 0
        self.max_steps = max_steps
        # None: every step runs the lowest program counter over all ranks. A permutation
        # of the ranks: each step runs the lowest program counter of the first rank in it
        # that can run, so the earlier ranks run ahead until they wait (another legal
        # schedule: it changes the order in which ranks' writes to a peer arrive).
        self.rank_order: list[int] | None = None
        self.state: dict = {}      # per-handler state (mbarriers, bulk groups, clocks ...)
        self.names = names or {}
        self.check_races = True
        for i, slot in enumerate(prog.params):
            vals = np.array([params[r][i] for r in range(world)], dtype=np.uint64)
            per_thread = vals[self.rank_of]
            self.regs[slot] = to_kind(per_thread.astype(np.uint64), "b64") \
                if prog.kinds[slot] == "b64" else to_kind(per_thread.astype(np.uint32), "b32")
        for ins in self.code:
            if ins.fn is None:
                ins.fn = _bind(ins)
        # Clusters launched later (cluster launch control): with ``resident`` clusters per
        # rank running at once, the others wait in launch order ({rank: [first CTA, ..]})
        # and start when a running cluster's threads have all exited, unless a
        # clusterlaunchcontrol.try_cancel took them first (pkc.emu.ops_sm100_ext).
        self.pending: dict[int, list[int]] = {}
        if resident is not None and resident * cluster < ctas:
            for r in range(world):
                firsts = [r * ctas + c for c in range(resident * cluster, ctas, cluster)]
                self.pending[r] = firsts
                for c in firsts:
                    self.alive[c * threads:(c + cluster) * threads] = False

    def new_reg(self, slot: int) -> np.ndarray:
        kind = self.prog.kinds[slot]
        if kind.startswith("frag:"):
            return np.zeros((self.N, int(kind[5:])), dtype=np.float32)
        return np.zeros(self.N, dtype=KIND_DTYPE[kind])

    # ---- naming -------------------------------------------------------------------
    def where(self, thread: int, ins: Instr) -> Where:
        return Where(self.kernel, int(self.rank_of[thread]), int(self.ctaid_of[thread]),
                     int(self.tid_of[thread] // WARP), int(self.lane_of[thread]),
                     render(ins, self.prog), ins.comment)

    def fail(self, cls, message: str, g: Group, ins: Instr, i: int = 0):
        raise cls(message, g.where(ins, i))

    # ---- running ------------------------------------------------------------------
    def run(self) -> None:
        code = self.code
        big = self.big = len(code) + 1
        # eff[t]: thread t's program counter while it can run, else big (kept up to date
        # by _refresh), so that a step is one min and one compare over the threads
        self.eff = self.pc.copy()
        while True:
            self.steps += 1
            if self.steps > self.max_steps:
                self._step_limit()
            if self.rank_order is not None:
                p, idx = self._next_by_rank(big)
            else:
                p = int(self.eff.min())
                idx = None
            if p == big:
                if not self.alive.any():
                    return
                if not self._poll():
                    self._deadlock()
                continue
            if idx is None:
                idx = (self.eff == p).nonzero()[0]
            self._apply(code[p], Group(self, idx), idx, p)

    def _next_by_rank(self, big: int) -> tuple[int, np.ndarray | None]:
        """The lowest program counter of the first rank of :attr:`rank_order` that has a
        runnable thread, and those threads (threads are numbered rank by rank)."""
        per_rank = self.eff.reshape(self.world, -1)
        lowest = per_rank.min(axis=1)
        for r in self.rank_order:
            p = int(lowest[r])
            if p != big:
                return p, (per_rank[r] == p).nonzero()[0] + r * per_rank.shape[1]
        return big, None

    def _refresh(self, idx) -> None:
        ok = self.alive[idx] & ~self.waiting[idx] & (self.at_bar[idx] < 0)
        self.eff[idx] = np.where(ok, self.pc[idx], self.big)

    def _apply(self, ins: Instr, g: Group, idx: np.ndarray, p: int) -> bool:
        """Runs ``ins`` for ``g``; returns whether any thread got past it."""
        r = ins.fn(self, ins, g)
        if r is None:
            self.pc[idx] = p + 1
            self.waiting[idx] = False
            self.eff[idx] = p + 1
            return True
        if r is JUMPED:
            self.eff[idx] = self.pc[idx]
            return True
        if r is BRANCHED:
            self.waiting[idx] = False
            self._refresh(idx)
            return True
        r = np.asarray(r, dtype=bool)
        done, wait = idx[r], idx[~r]
        self.pc[done] = p + 1
        self.waiting[done] = False
        self.waiting[wait] = True
        self._refresh(idx)
        return done.size > 0

    def _poll(self) -> bool:
        """Retries every waiting group once; whether any thread got past its wait."""
        w = np.flatnonzero(self.alive & self.waiting)
        if w.size == 0:
            return False
        progress = False
        for p in np.unique(self.pc[w]):
            idx = w[self.pc[w] == p]
            self.steps += 1
            progress |= self._apply(self.code[int(p)], Group(self, idx), idx, int(p))
        return progress

    # ---- threads leaving, barriers -------------------------------------------------
    def exit_threads(self, idx: np.ndarray) -> None:
        self.alive[idx] = False
        self.release_barriers(np.unique(self.cta_of[idx]))
        if self.cluster > 1:
            self.release_cluster(np.unique(self.cluster_base_of[idx]))
        if self.pending:
            self._launch_pending(np.unique(self.cluster_base_of[idx]))

    def _launch_pending(self, bases: np.ndarray) -> None:
        """Starts the next waiting cluster of the rank for each cluster that has exited."""
        T, C = self.threads, self.cluster
        for base in bases.tolist():
            rank = base // self.ctas
            queue = self.pending.get(rank)
            if not queue or self.alive[base * T:(base + C) * T].any():
                continue
            nxt = queue.pop(0)
            sl = slice(nxt * T, (nxt + C) * T)
            self.alive[sl] = True
            self.pc[sl] = 0
            if hasattr(self, "eff"):
                self._refresh(sl)

    def release_cluster(self, bases: np.ndarray) -> None:
        """Lets a cluster's threads through ``barrier.cluster`` once every live thread of
        its CTAs waits there."""
        T = self.threads
        for base in bases.tolist():
            sl = slice(base * T, (base + self.cluster) * T)
            at, live = self.at_bar[sl], self.alive[sl]
            arrived = (at == CLUSTER_BARRIER) & live
            if arrived.any() and int(arrived.sum()) == int(live.sum()):
                self.pc[sl][arrived] += 1
                at[arrived] = -1
                if hasattr(self, "eff"):
                    self._refresh(sl)

    def release_barriers(self, ctas: np.ndarray) -> None:
        """Lets the threads of each CTA in ``ctas`` through a ``bar.sync`` that every
        live thread (or the barrier's thread count) has reached."""
        T = self.threads
        for c in ctas.tolist():
            sl = slice(c * T, (c + 1) * T)
            at = self.at_bar[sl]
            live = self.alive[sl]
            for b in np.unique(at[(at >= 0) & (at != CLUSTER_BARRIER) & live]).tolist():
                arrived = (at == b) & live
                want = self.bar_count.get((c, b)) or int(live.sum())
                if int(arrived.sum()) >= want:
                    self.pc[sl][arrived] += 1
                    at[arrived] = -1
                    self.bar_count.pop((c, b), None)
            if hasattr(self, "eff"):
                self._refresh(sl)

    # ---- errors -------------------------------------------------------------------
    def _groups_of(self, mask: np.ndarray, limit: int = 8) -> list[str]:
        out = []
        w = np.flatnonzero(mask)
        key = self.pc[w] * (self.world * self.ctas) + self.cta_of[w]
        for k in np.unique(key)[:limit]:
            t = int(w[np.flatnonzero(key == k)[0]])
            ins = self.code[int(self.pc[t])]
            members = w[key == k]
            line = f"  {self.where(t, ins)} ({members.size} thread(s))"
            explain = EXPLAIN.get(type(ins.op)) if ins.op is not None else None
            if explain is not None:
                try:
                    line += ": " + explain(self, ins, Group(self, members[:1]))
                except Exception as e:  # pragma: no cover - the explanation is a courtesy
                    line += f" (no detail: {e})"
            out.append(line)
        more = len(np.unique(key)) - limit
        if more > 0:
            out.append(f"  ... and {more} more group(s)")
        return out

    def _deadlock(self) -> None:
        stuck = self.alive & (self.waiting | (self.at_bar >= 0))
        first = int(np.flatnonzero(stuck)[0])
        lines = self._groups_of(stuck)
        bars = self.alive & (self.at_bar >= 0)
        msg = ("deadlock: every live thread waits and no arrival, signal or barrier can "
               "release any of them; waiting:\n" + "\n".join(lines))
        if bars.any():
            msg += "\n(a bar.sync waits for threads that are blocked elsewhere or never come)"
        cls = EmuDeadlock
        for t in np.flatnonzero(stuck).tolist():
            op = self.code[int(self.pc[t])].op
            if op is not None and type(op) in DEADLOCK_CLASS:
                cls, first = DEADLOCK_CLASS[type(op)], t
                break
        raise cls(msg, self.where(first, self.code[int(self.pc[first])]))

    def _step_limit(self) -> None:
        live = np.flatnonzero(self.alive)
        first = int(live[0])
        lines = self._groups_of(self.alive)
        raise EmuStepLimit(f"more than {self.max_steps} steps (a wait that keeps polling or an "
                           "endless loop); threads are at:\n" + "\n".join(lines),
                           self.where(first, self.code[int(self.pc[first])]))


# Optional per-op explanations for deadlock reports: fn(m, ins, g) -> str.
EXPLAIN: dict[type, object] = {}
# Ops whose endless wait is a misuse of its own kind (setmaxnreg: a register budget that
# never fits), raised instead of EmuDeadlock.
DEADLOCK_CLASS: dict[type, type] = {}


def _bind(ins: Instr):
    from pkc.emu import control  # noqa: F401  (registers the pseudo instructions)

    if ins.op is None:
        return control.PSEUDO[ins.kind]
    fn = HANDLERS.get(type(ins.op))
    if fn is None:
        def unsupported(m, ins, g):
            raise EmuUnsupported(f"'{ins.op.name}' has no emulator handler (see docs/emulator.md, "
                                 "'Adding an instruction')", g.where(ins))
        return unsupported
    return fn


def check_bad(m: Machine, ins: Instr, g: Group, bad: np.ndarray, cls: type[EmuError],
              describe) -> None:
    """Raises ``cls`` for the first thread flagged in ``bad`` (``describe(i)``: what is
    wrong with the i-th thread's access)."""
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        m.fail(cls, describe(i), g, ins, i)
