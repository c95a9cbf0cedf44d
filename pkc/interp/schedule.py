"""Runs a scheduled ``pk.kernel`` (its body a ``pks.schedule``) on W simulated ranks.

The grid is persistent: ``ctas`` CTAs per rank (default ``min(4, tiles)`` rounded to whole
clusters), each running the schedule body once per warpgroup. Every warpgroup is one
actor (a Python generator); a ``pks.role`` region runs on the warpgroups it names (only
the first with ``single_thread``). The scheduler interleaves actors round-robin
(``schedule_seed`` 0) or in an order drawn from the seed, switching at every arrival,
copy, MMA and wait. A copy engine completes TMA loads asynchronously, at its own turns:
the box lands in shared memory and its bytes are counted on the barrier then. The result
does not depend on ``ctas`` or the order (the accumulator sums exactly, see
:class:`~pkc.interp.schedule_state.Acc`); only the protocol checks do.

Semantics of the ops are their docstrings in :mod:`pkc.dialects.schedule`; what is
modelled: mbarrier phases, arrival counts and expect-tx / complete-tx bytes (multicast
loads count on every CTA of the cluster); parity waits; MMA groups that read shared memory
until ``pks.mma_wait`` completes them; TMA stores that read it until ``pks.bulk_wait``;
``pks.fence_async_shared`` between a warpgroup's writes and a TMA store. Shared memory
holds logical tiles (boxes row-major, no swizzle); a warpgroup moves in lockstep, so
``pks.warpgroup_barrier`` has nothing to order. TMA loads outside the tensor read zeros,
stores and ``pks.acc_store_global`` are clipped. Global memory is written when a store is
issued, without race checks.

Communication (:mod:`pkc.interp.schedule_comm`, :mod:`pkc.interp.schedule_fused`): the
W ranks' CTAs run together; a warpgroup's threads run in lockstep as lanes (values derived
from the thread index are per-lane tensors, ``pks.when`` masks lanes); global memory
(:mod:`pkc.interp.schedule_world`) checks that every cross-rank read, store and reduce-add
is ordered by signals, waits or LL flags. A kernel may be launched several times in a row
(:func:`run_schedule_launches`): its ``pk.alloc`` buffers (signal pads, the epoch word)
persist, rank r's launch k + 1 starts when its launch k ended, and other ranks may still
be in launch k (as on separate GPUs). Op rules are registered in
:mod:`pkc.interp.schedule_rules`.

Protocol bugs raise :class:`~pkc.interp.values.InterpError` naming the op, rank, CTA and
role warpgroup: a deadlock (every actor blocked: what each waits for), an arrival over a
barrier's count, a wait whose phase was already overtaken, a read of shared memory that no
completed and waited-for load filled, a write over bytes an MMA / TMA store may still
read, an accumulator read with MMAs in flight, an actor that ends with work in flight.
"""

from __future__ import annotations

import random
from collections.abc import Generator, Sequence

import torch
from xdsl.dialects import arith, scf
from xdsl.ir import Block, Operation, SSAValue

from pkc.dialects import schedule as s
from pkc.dialects import schedule_ag as sag
from pkc.dialects import schedule_fused as sf
from pkc.dialects.schedule_clc import ClcTileLoopOp
from pkc.dialects.schedule_clc_chunk import ClcChunkTileLoopOp
from pkc.dialects.schedule_structure import cluster_shape
from pkc.dialects.kernel import AllocOp, KernelOp
from pkc.dialects.schedule_comm import GridValueOp
from pkc.interp import schedule_comm as comm
from pkc.interp import schedule_ag as _ag_rules  # noqa: F401  (registers its rules)
from pkc.interp import schedule_fused as _fused_rules  # noqa: F401  (registers its rules)
from pkc.interp import schedule_moe as _moe_rules  # noqa: F401  (registers its rules)
from pkc.interp import schedule_clc as _clc_rules  # noqa: F401  (registers its rules)
from pkc.interp import schedule_clc_chunk as _clc_chunk_rules  # noqa: F401  (its rules)
from pkc.interp import schedule_multimem as _mc_rules  # noqa: F401  (registers its rules)
from pkc.interp.kernel import _ARITH, _cmpi, _constant
from pkc.interp.schedule_ops import SIMPLE, Tmap, grouped_tile
from pkc.interp.schedule_rules import (BLOCKED, BLOCKING_RULES, KERNEL_RULES, SIMPLE_RULES,
                                       SWITCH, blocking, kernel_level, simple)
from pkc.interp.schedule_state import Acc, Actor, Mbarrier, Smem, TmaLoad, join
from pkc.interp.schedule_world import GlobalBuf, World
from pkc.interp.values import InterpError, poison, torch_dtype, where

PerRank = list[torch.Tensor]
MAX_STEPS = 5_000_000
DEFAULT_CTAS = 4
MAX_DEADLOCK_LINES = 24

_BITS = {
    arith.XOrIOp: lambda op, a, b: a ^ b,
    arith.AndIOp: lambda op, a, b: a & b,
    arith.OrIOp: lambda op, a, b: a | b,
    arith.ShLIOp: lambda op, a, b: a << b,
    arith.ShRUIOp: lambda op, a, b: a >> b,
    arith.ShRSIOp: lambda op, a, b: a >> b,
}


class ScheduleRun:
    def __init__(self, op: KernelOp, launches: list[list[PerRank]], world: int, seed: int,
                 ctas: int | None):
        # A kernel written for one rank (what schedule-matmul writes) runs on every rank on
        # its own; one written for W ranks (a collective, a fused kernel) needs W.
        if op.world_size not in (1, world):
            raise InterpError(f"{where(op)} @{op.kernel_name.data} is written for a world of "
                              f"{op.world_size} ranks, but the interpreter runs {world}")
        self.op, self.world, self.sched = op, world, op.schedule()
        self.cluster = self.sched.cluster.data
        self.threads = self.sched.threads.data
        # a cluster of 2 whose accumulators are the CTAs' (tensor memory) is a CTA pair
        # (sm_100a cta_group::2): pkc.interp.schedule_ops' pair rules
        # (a cluster of 4 is two pairs, ranks 2p and 2p + 1)
        self.pair = self.cluster in (2, 4) and any(isinstance(o, s.AccAllocOp)
                                                   for o in self.sched.block.ops)
        self.rng = random.Random(seed) if seed else None
        # per-thread values come only from the thread index: kernels that read it run
        # their arith element-wise over a warpgroup's lanes (pkc.interp.schedule_comm)
        self.lanes_mode = any(isinstance(o, GridValueOp) for o in self.sched.walk())
        self.comm = comm.CommGrid.of(op, ctas)       # a scheduled collective's launch rule
        if self.comm is not None:
            self.ctas, self.threads = self.comm.grid, self.comm.threads
        else:
            self.ctas = self._grid(ctas)
        self.wgs = -(-self.threads // 128)
        self.version = 0
        self.steps = 0
        self._compiled: dict[int, list[tuple]] = {}
        self.loads: list[TmaLoad] = []
        self.launches = launches
        self.memory = World()
        self.gbufs: dict[tuple[SSAValue, int], GlobalBuf] = {}
        self.data: dict[SSAValue, PerRank] = {}
        for op_ in self.op.block.ops:       # persistent across launches (pads, epoch word)
            if isinstance(op_, AllocOp):
                t = op_.result.type
                dt = torch_dtype(t.element_type)
                self.data[op_.result] = [torch.zeros(t.get_shape(), dtype=dt) if op_.zero
                                         is not None else poison(t.get_shape(), dt)
                                         for _ in range(world)]
        n_in = len(op.inputs)
        for i, arg in enumerate(op.block.args[n_in:]):
            t = arg.type         # outputs: a symmetric one persists, a local one is fresh
            self.data[arg] = [poison(t.get_shape(), torch_dtype(t.element_type))
                              for _ in range(world)]
        for arg in op.block.args[:n_in]:
            self.data[arg] = [None] * world

    def gbuf(self, buf: SSAValue, rank: int) -> GlobalBuf:
        """Rank ``rank``'s copy of kernel buffer ``buf`` with its access records."""
        g = self.gbufs.get((buf, rank))
        if g is None:
            owner = buf.owner
            written = (isinstance(owner, AllocOp) and owner.zero is not None) or (
                buf in self.op.block.args[:len(self.op.inputs)])
            name = f"%{buf.name_hint}" if buf.name_hint else (
                f"kernel buffer #{buf.index}" if not isinstance(owner, AllocOp) else
                f"pk.alloc {buf.type}")
            g = self.gbufs[buf, rank] = GlobalBuf(self.memory, f"{name} of rank {rank}",
                                                 self.data[buf][rank], written)
        return g

    def _grid(self, ctas: int | None) -> int:
        cl = self.cluster
        if ctas is not None:
            if ctas < 1 or ctas % cl:
                raise InterpError(f"{where(self.sched)}: ctas = {ctas} must be a positive "
                                  f"multiple of the cluster size {cl}")
            return ctas
        tiles = 1
        for op in self.sched.walk():
            if isinstance(op, (s.TileLoopOp, sf.ChunkTileLoopOp, ClcTileLoopOp,
                               ClcChunkTileLoopOp)):
                m, n = op.m.owner, op.n.owner
                if isinstance(m, arith.ConstantOp) and isinstance(n, arith.ConstantOp):
                    num_m = -(-_constant(m) // op.bm.data)
                    cm, cn = cluster_shape(op)
                    tiles = -(-num_m // cm) * -(-(-(-_constant(n) // op.bn.data)) // cn)
                    if isinstance(op, (sf.ChunkTileLoopOp, ClcChunkTileLoopOp)):
                        tiles *= op.chunks.data
                break
        side = sum(op.side.data for op in self.sched.walk() if isinstance(op, sag.CtaPartitionOp))
        return max(1, min(max(1, DEFAULT_CTAS // cl), tiles)) * cl + side

    # -- setup and scheduling ------------------------------------------------------------

    def run(self) -> list[list[PerRank]]:
        """Every launch in turn on each rank; returns ``outputs[launch][i][rank]``."""
        env: dict = {}
        for op in self.op.block.ops:
            rule = KERNEL_RULES.get(type(op))
            if rule is not None:
                rule(self, op, env)
            elif isinstance(op, arith.ConstantOp):
                env[op.result] = _constant(op)
            elif isinstance(op, AllocOp):
                env[op.result] = op.result
        for a in self.op.block.args:
            env[a] = a
        self.env = env
        self.cta_objs: dict[tuple[int, int], dict] = {}
        self.syncs: dict[tuple[int, int], dict] = {}
        self.actors: list[Actor] = []
        self.live: list[Actor] = []
        self.left: dict[tuple[int, int], list] = {}     # (rank, launch) -> [actors left, clock]
        n_out = len(self.op.block.args) - len(self.op.inputs)
        self.results = [[[None] * self.world for _ in range(n_out)] for _ in self.launches]
        for rank in range(self.world):
            self._spawn(rank, 0, {})
        self._schedule()
        return self.results

    def _spawn(self, rank: int, launch: int, clock: dict) -> None:
        """Rank ``rank``'s launch ``launch``: its inputs and fresh outputs bound, its CTAs'
        actors started with ``clock`` (what the rank's earlier launches did)."""
        n_in = len(self.op.inputs)
        for i, arg in enumerate(self.op.block.args):
            if i < n_in:
                self.data[arg][rank] = self.launches[launch][i][rank].clone()
            elif launch and not arg.type.symmetric:
                t = arg.type
                self.data[arg][rank] = poison(t.get_shape(), torch_dtype(t.element_type))
            else:
                continue
            self.gbufs.pop((arg, rank), None)
        self.left[rank, launch] = [self.ctas * self.wgs, dict(clock)]
        for cta in range(self.ctas):
            self.cta_objs[rank, cta] = self._allocate(rank, cta, launch)
            for wg in range(self.wgs):
                aid = len(self.actors)
                a = Actor(aid, rank, cta, wg, {**clock, aid: 1}, launch=launch,
                          lanes=min(128, self.threads - 128 * wg))
                a.gen = self._actor(a, dict(self.env))
                self.actors.append(a)
                self.live.append(a)

    def _launch_ended(self, rank: int, launch: int) -> None:
        """The host reads the rank's outputs: complete, and ordered before its next launch."""
        clock = self.left[rank, launch][1]
        n_in = len(self.op.inputs)
        host = self.memory.kid(("host", rank, launch), f"the host of rank {rank} reading the "
                               f"outputs of launch {launch + 1}")
        for i, arg in enumerate(self.op.block.args[n_in:]):
            g = self.gbufs.get((arg, rank))
            if g is not None:
                g.check_final(clock, f"kernel @{self.op.kernel_name.data} output {i} on rank "
                              f"{rank} (launch {launch + 1})")
                g.host_read(host)
            self.results[launch][i][rank] = self.data[arg][rank].clone()
        if launch + 1 < len(self.launches):
            self._spawn(rank, launch + 1, {**clock, ("host", rank, launch): 1})

    def _allocate(self, rank: int, cta: int, launch: int = 0) -> dict:
        """This CTA's shared memory and mbarriers, named for messages by their SSA name
        when the IR has one (else by their order among the allocations of their kind)."""
        objs: dict = {}
        n_smem = n_bars = 0
        for op in self.sched.block.ops:
            t = op.results[0].type if op.results else None
            hint = op.results[0].name_hint if op.results else None
            if isinstance(op, s.SmemAllocOp):
                name = f"%{hint}" if hint else f"shared memory #{n_smem}"
                objs[op.result] = Smem(f"{name} {t} of CTA {cta}", t.count.data, t.bytes.data)
                n_smem += 1
            elif isinstance(op, s.MbarrierAllocOp):
                name = f"%{hint}" if hint else f"mbarriers #{n_bars}"
                objs[op.result] = [Mbarrier((rank, cta, n_bars, i, launch),
                                            f"{name}[{i}] {t} of CTA "
                                            f"{cta}", t.arrivals.data)
                                   for i in range(t.count.data)]
                n_bars += 1
            elif isinstance(op, s.AccAllocOp):      # a CTA accumulator (tensor memory)
                objs[op.result] = Acc(t.rows.data, t.cols.data)
        return objs

    def _schedule(self) -> None:
        live = self.live
        while live or self.loads:
            order: list = list(live) + ["engine"]
            if self.rng is not None:
                self.rng.shuffle(order)
            progressed = False
            for a in order:
                if isinstance(a, str):
                    progressed |= self._engine(all_blocked=False)
                    continue
                if a.blocked is not None and a.seen_version == self.version:
                    continue   # nothing changed since it last looked
                a.seen_version = before = self.version
                try:
                    event = next(a.gen)
                except StopIteration:
                    live.remove(a)
                    self._finished(a)
                    progressed = True
                    continue
                # a step that changed what others observe progressed, even if it then blocked
                if event is not BLOCKED or self.version != before:
                    progressed = True
                self._count()
            if not progressed and not self._engine(all_blocked=True):
                raise InterpError(self._deadlock(live))

    def _count(self) -> None:
        """Steps and loop iterations: a bound instead of a hang on a loop that never ends."""
        self.steps += 1
        if self.steps > MAX_STEPS:
            raise InterpError(f"{where(self.op)} @{self.op.kernel_name.data} ran more than "
                              f"{MAX_STEPS} steps (a loop that never ends?)")

    def _engine(self, all_blocked: bool) -> bool:
        """The copy engine's turn: completes the TMA loads in flight (round-robin: all; a
        seeded order: a random subset, at least one when nothing else can run)."""
        if not self.loads:
            return False
        if self.rng is None or all_blocked:
            done = list(self.loads) if self.rng is None else [self.rng.choice(self.loads)]
        else:
            done = [ld for ld in self.loads if self.rng.random() < 0.5]
        for ld in done:
            self.loads.remove(ld)
            self._complete_load(ld)
        if done:
            self.version += 1
        return bool(done)

    def _complete_load(self, ld: TmaLoad) -> None:
        """The box lands in every target CTA; its bytes count on the phase open now."""
        payload = ld.box().contiguous().view(-1).view(torch.uint8)
        for smem, slot, rec, bar in ld.targets:
            rec.bar, rec.phase = bar, bar.completed
            smem.finish_write(slot, rec, payload)
            bar.complete_tx(payload.numel(), ld.who)

    def _finished(self, a: Actor) -> None:
        self._drained(a)
        self.version += 1
        for key in list(self.syncs):
            self._try_release_sync(key)
        left = self.left[a.rank, a.launch]
        left[0] -= 1
        # the kernel's end orders the warpgroup's completed TMA writes (pks.bulk_wait 0)
        # before what follows it on the rank (the host's read, the next launch): a kernel
        # boundary is a fence for every proxy, as a plain GEMM's TMA-store epilogue relies
        # on (no pks.fence_async_global needed where no peer reads them during the kernel)
        key = ("bulk", a.aid)
        a.clock[key] = max(a.clock.get(key, 0), a.bulk_done)
        join(left[1], a.clock)
        if not left[0]:
            self._launch_ended(a.rank, a.launch)

    def _drained(self, a: Actor) -> None:
        """A warpgroup leaving its role (or ending) has no MMA or TMA store in flight."""
        if a.mma_open or a.mma_groups:
            raise InterpError(f"{a.describe()} ends with {len(a.mma_open)} uncommitted MMAs and "
                              f"{len(a.mma_groups)} MMA groups in flight (no pks.mma_wait 0)")
        if a.bulk_open or a.bulk_groups:
            raise InterpError(f"{a.describe()} ends with {len(a.bulk_open)} uncommitted TMA "
                              f"stores and {len(a.bulk_groups)} bulk groups in flight (no "
                              "pks.bulk_wait 0)")

    def _deadlock(self, live: list[Actor]) -> str:
        lines = [f"deadlock in kernel @{self.op.kernel_name.data}: every remaining warpgroup "
                 "waits for something no running warpgroup or copy can provide"]
        blocked = sorted(live, key=lambda a: a.aid)
        for a in blocked[:MAX_DEADLOCK_LINES]:
            op, what = a.blocked
            lines.append(f"  {a.at(op)}: waits for {what}")
        if len(blocked) > MAX_DEADLOCK_LINES:
            lines.append(f"  ... and {len(blocked) - MAX_DEADLOCK_LINES} more warpgroups")
        return "\n".join(lines)

    # -- execution of an actor ------------------------------------------------------------

    def _actor(self, a: Actor, env: dict) -> Generator:
        yield from self._block(a, self.sched.block, env)

    def _alloc(self, a: Actor, op: s.SmemAllocOp | s.MbarrierAllocOp, env: dict) -> Generator:
        env[op.result] = self.cta_objs[a.rank, a.cta][op.result]    # one per CTA, shared
        yield from ()

    def _role(self, a: Actor, op: s.RoleOp, env: dict) -> Generator:
        first, count = op.first.data, op.warpgroups.data
        last = first + (1 if op.single_thread is not None else count)
        # a pair's MMA issuer is the even CTA's (its MMAs cover both CTAs)
        skip = self.pair and op.role is s.RoleKind.MMA and a.cta % 2
        if first <= a.wg < last and not skip:
            a.role, a.role_wg = op.role.value, a.wg - first
            yield from self._block(a, op.block, env)
            self._drained(a)
            a.role = None

    def _block(self, a: Actor, block: Block, env: dict, args: Sequence = ()) -> Generator:
        for arg, v in zip(block.args, args):
            env[arg] = v
        for kind, op, fn, operands, result in self._steps(block):
            if kind is _PURE:
                env[result] = fn(*[env[v] for v in operands])
            elif kind is _CONST:
                env[result] = fn
            elif kind is _SIMPLE_OP:
                try:
                    switch = fn(self, a, op, env)
                except InterpError:
                    raise
                except Exception as e:  # a bad value in the IR, not a crash of ours
                    raise InterpError(f"{a.at(op)}: {type(e).__name__}: {e}") from e
                if switch:
                    yield SWITCH
            elif kind is _GEN:
                yield from fn(self, a, op, env)
            elif kind is _END:
                return [env[v] for v in operands]
            else:
                raise InterpError(f"{a.at(op)}: cannot be interpreted at the schedule level "
                                  "(no rule in pkc.interp.schedule_rules for this op)")
        return []

    run_block = _block          # for rules of ops with regions (pkc.interp.schedule_rules)

    def _steps(self, block: Block) -> list[tuple]:
        """The block's ops, each with its handler and operands looked up once (reading
        xDSL's operand properties per execution is most of an interpreter's time)."""
        steps = self._compiled.get(id(block))
        if steps is None:
            steps = [_step(op, self.lanes_mode) for op in block.ops]
            self._compiled[id(block)] = steps
        return steps

    def _for(self, a: Actor, op: scf.ForOp, env: dict) -> Generator:
        carried = [env[v] for v in op.iter_args]
        body = op.body.blocks[0]
        if env[op.step] <= 0:
            raise InterpError(f"{a.at(op)}: step {env[op.step]}; scf.for's step must be positive")
        for i in range(env[op.lb], env[op.ub], env[op.step]):
            self._count()
            carried = yield from self._block(a, body, env, [i, *carried])
        for r, v in zip(op.results, carried):
            env[r] = v

    def _tile_loop(self, a: Actor, op: s.TileLoopOp, env: dict) -> Generator:
        """Tiles cluster, cluster + clusters, ... in grouped order (TileLoopOp's doc)."""
        cl, bm, bn, gm = self.cluster, op.bm.data, op.bn.data, op.group_m.data
        cm, cn = cluster_shape(op)
        num_m, num_n = -(-env[op.m] // bm), -(-env[op.n] // bn)
        num_mc, num_nc = -(-num_m // cm), -(-num_n // cn)
        carried = [env[v] for v in op.inits]
        for tile in range(a.cta // cl, num_mc * num_nc, (a.loop_ctas or self.ctas) // cl):
            mc, nc = grouped_tile(tile, num_mc, num_nc, gm)
            mb, nb = mc * cm + a.cta % cl % cm, nc * cn + a.cta % cl // cm
            self._count()
            carried = yield from self._block(a, op.block, env, [mb * bm, nb * bn, *carried])
        for res, v in zip(op.res, carried):
            env[res] = v

    # -- synchronization ------------------------------------------------------------------

    def _bar(self, a: Actor, op, env, bars_v: SSAValue, index_v: SSAValue, cta: int | None = None):
        bars = self.cta_objs[a.rank, a.cta if cta is None else cta][bars_v]
        i = env[index_v]
        if not 0 <= i < len(bars):
            raise InterpError(f"{a.at(op)}: mbarrier index {i} is outside 0..{len(bars) - 1}")
        return bars[i]

    def _wait(self, a: Actor, op: s.MbarrierWaitOp, env: dict) -> Generator:
        bar = self._bar(a, op, env, op.bars, op.index)
        p = env[op.parity]
        if p not in (0, 1):
            raise InterpError(f"{a.at(op)}: parity {p} on {bar.name} (a parity is 0 or 1)")
        seen = a.seen.get(bar.key, 0)
        # the phase this wait means: the next one (from what this warpgroup has seen) whose
        # completion leaves the barrier's current phase with parity != p; a wait in turns
        # (pks.mbarrier_wait {turns}) from the barrier's own count, as the hardware's
        if op.turns is not None:
            seen = bar.completed
        target = seen if seen % 2 == 1 - p else seen + 1
        while bar.completed < target:
            a.blocked = (op, f"phase {target - 1} of {bar.name} to complete (parity {p}); "
                             f"{bar.status()}")
            yield BLOCKED
        a.blocked = None
        if bar.completed > target:
            raise InterpError(
                f"{a.at(op)}: waits with parity {p} for the completion of phase {target - 1} of "
                f"{bar.name}, but it has already completed {bar.completed} phases: this "
                "warpgroup fell behind by a whole phase and the parity wait can never mean the "
                "phase it wants (too many arrivals, or a wrong stage count / parity)")
        a.seen[bar.key] = target
        join(a.clock, bar.done_clock)

    def _cluster_sync(self, a: Actor, op: s.ClusterSyncOp, env: dict) -> Generator:
        key = (a.rank, a.cta // self.cluster)
        st = self.syncs.setdefault(key, {"gen": 0, "arrived": set(), "clock": {}, "done": {}})
        gen = st["gen"]
        st["arrived"].add(a.aid)
        join(st["clock"], a.clock)
        self._try_release_sync(key)
        while st["gen"] == gen:
            a.blocked = (op, "every warpgroup of the cluster to reach a pks.cluster_sync")
            yield BLOCKED
        a.blocked = None
        join(a.clock, st["done"])
        a.clock[a.aid] += 1

    def _try_release_sync(self, key) -> None:
        st = self.syncs[key]
        rank, cid = key
        members = [x for x in self.actors if x.rank == rank and x.cta // self.cluster == cid
                   and x.gen is not None and x.gen.gi_frame is not None]
        if st["arrived"] and all(x.aid in st["arrived"] for x in members):
            st["gen"] += 1
            st["done"] = dict(st["clock"])
            st["arrived"], st["clock"] = set(), {}
            self.version += 1


# ----------------------------------------------------------------------------------------
_END, _PURE, _CONST, _SIMPLE_OP, _GEN, _UNKNOWN = range(6)
for _t, _fn in {
    scf.ForOp: ScheduleRun._for,
    s.TileLoopOp: ScheduleRun._tile_loop,
    s.MbarrierWaitOp: ScheduleRun._wait,
    s.ClusterSyncOp: ScheduleRun._cluster_sync,
    s.RoleOp: ScheduleRun._role,
    s.SmemAllocOp: ScheduleRun._alloc,
    s.MbarrierAllocOp: ScheduleRun._alloc,
}.items():
    blocking(_t)(_fn)
for _t, _fn in SIMPLE.items():
    simple(_t)(_fn)
kernel_level(s.TmapOp)(lambda R, op, env: env.__setitem__(op.result, Tmap(op, op.buffer.type)))


def _step(op: Operation, lanes: bool = False) -> tuple:
    """(kind, op, handler or value, operands, result) of one op. ``lanes``: values may be
    per-lane tensors (a kernel with communication ops)."""
    t = type(op)
    if t in (s.YieldOp, scf.YieldOp):
        return (_END, op, None, tuple(op.operands), None)
    if t in BLOCKING_RULES:
        return (_GEN, op, BLOCKING_RULES[t], None, None)
    if t in SIMPLE_RULES:
        return (_SIMPLE_OP, op, SIMPLE_RULES[t], None, None)
    if t is arith.ConstantOp:
        return (_CONST, op, _constant(op), None, op.result)
    if lanes:
        fn = comm.lane_arith(op)
        if fn is not None:
            return (_PURE, op, fn, tuple(op.operands), op.results[0])
    if t is arith.CmpiOp:
        pred = op.predicate.value.data
        return (_PURE, op, lambda x, y: _cmpi(pred, x, y), tuple(op.operands), op.results[0])
    fn = _ARITH.get(t) or _BITS.get(t)
    if fn is not None:
        return (_PURE, op, lambda *xs: fn(op, *xs), tuple(op.operands), op.results[0])
    return (_UNKNOWN, op, None, None, None)


def run_schedule_launches(op: KernelOp, launches: list[list[PerRank]], world: int,
                          seed: int = 0, ctas: int | None = None) -> list[list[PerRank]]:
    """Runs the scheduled kernel ``op`` ``len(launches)`` times in a row on ``world`` ranks;
    ``launches[k][i][r]`` is rank r's i-th operand of launch k; returns
    ``outputs[k][i][r]``. ``seed`` 0 interleaves the warpgroups round-robin, another seed
    in a random order drawn from it; ``ctas``: CTAs per rank (a collective: at most that
    many, its slice by the launch's grid rule)."""
    # The MMAs are small: torch's intra-op threads only contend for the cores (on a busy
    # 2-core machine, 5x slower), so the run uses one and gives the setting back.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return ScheduleRun(op, launches, world, seed, ctas).run()
    finally:
        torch.set_num_threads(threads)


def run_schedule(op: KernelOp, inputs: list[PerRank], world: int, seed: int = 0,
                 ctas: int | None = None) -> list[PerRank]:
    """One launch of ``op`` (see :func:`run_schedule_launches`): ``outputs[i][r]``."""
    return run_schedule_launches(op, [inputs], world, seed, ctas)[0]
