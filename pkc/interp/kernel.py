"""Runs one ``pk.kernel`` on W simulated ranks with a simulated shared memory.

Each (rank, worker) pair is a Python generator; a scheduler interleaves them, switching at
every put, signal and unsatisfied wait, in an order drawn from a seed so that different
runs explore different interleavings. Nothing can hang: when every live worker waits and
no signal changed since they last looked, the kernel deadlocked, and the error names each
blocked wait with its rank, slot, value and threshold.

Protocol bugs are caught with vector clocks, as a race detector does. Each worker carries
a clock; ``pk.signal`` publishes the signaller's clock into the counter it bumps (release)
and ``pk.wait`` merges it into the waiter's (acquire). Every element of every buffer
remembers which worker last wrote it and at which epoch, and which workers read it since.
Reading an element whose write is not ordered before the read ("read before the data
arrived") or overwriting an element whose earlier read is not ordered before the write is
an error naming the op, the rank, the worker and the other party. Two unordered ``add``
puts to one element are fine: they are atomic and commute.
"""

from __future__ import annotations

import random
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field

import torch
from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IntegerAttr
from xdsl.ir import Block, Operation, SSAValue

from pkc.dialects import kernel as k
from pkc.dialects.common import int_list
from pkc.dialects.types import BufferType, TileType
from pkc.interp.values import (
    InterpError,
    apply_map,
    apply_reduce,
    compute_dtype,
    poison,
    torch_dtype,
    where,
)

PerRank = list[torch.Tensor]
MAX_SCHEDULER_STEPS = 10_000_000


# ----------------------------------------------------------------------------------------
# Vector clocks and per-element access history.

Clock = dict[int, int]


def join(a: Clock, b: Clock) -> None:
    for key, t in b.items():
        if a.get(key, 0) < t:
            a[key] = t


@dataclass
class Shadow:
    """Access history of one rank's copy of a buffer, element by element."""

    writer: torch.Tensor  # worker id of the last write, -1 for none
    epoch: torch.Tensor  # that writer's epoch at the write
    was_add: torch.Tensor  # the last write was an atomic add
    reads: dict[int, torch.Tensor] = field(default_factory=dict)  # worker id -> epoch, 0 none

    @staticmethod
    def fresh(shape) -> "Shadow":
        return Shadow(
            torch.full(shape, -1, dtype=torch.int32),
            torch.zeros(shape, dtype=torch.int32),
            torch.zeros(shape, dtype=torch.bool),
        )


@dataclass
class Worker:
    wid: int
    rank: int
    role: str
    op: k.WorkerOp
    clock: Clock
    gen: Generator | None = None
    blocked_on: tuple | None = None  # (wait op, slot, expected) while waiting

    @property
    def epoch(self) -> int:
        return self.clock[self.wid]

    def describe(self) -> str:
        return f"rank {self.rank} (worker {self.wid}, \"{self.role}\")"


@dataclass
class Buffer:
    type: BufferType
    data: PerRank
    shadows: list[Shadow]


@dataclass
class Signals:
    counts: list[list[int]]  # [rank][slot]
    clocks: list[list[Clock]]  # published clock per [rank][slot]


class Blocked:
    """Yielded by a worker whose wait is not satisfied yet."""


class Switch:
    """Yielded after a put or a signal: a point where another worker may run."""


# ----------------------------------------------------------------------------------------


class KernelRun:
    def __init__(self, op: k.KernelOp, inputs: list[PerRank], world: int, seed: int):
        if op.world_size != world:
            raise InterpError(
                f"{where(op)} @{op.kernel_name.data} is written for a world of {op.world_size} "
                f"ranks, but the interpreter runs {world}"
            )
        self.op, self.world = op, world
        self.rng = random.Random(seed)
        self.buffers: dict[SSAValue, Buffer] = {}
        self.signals: dict[SSAValue, Signals] = {}
        self.version = 0  # bumped by every signal: tells waiters something changed
        self._bind_arguments(inputs)

    # -- setup -------------------------------------------------------------------------

    def _new_buffer(self, value: SSAValue, data: PerRank) -> None:
        t = value.type
        assert isinstance(t, BufferType)
        shadows = [Shadow.fresh(t.get_shape()) for _ in range(self.world)]
        self.buffers[value] = Buffer(t, data, shadows)

    def _bind_arguments(self, inputs: list[PerRank]) -> None:
        args = self.op.block.args
        n_in = len(self.op.inputs)
        for i, arg in enumerate(args):
            t = arg.type
            if i < n_in:
                data = [inputs[i][r].clone() for r in range(self.world)]
            else:
                data = [poison(t.get_shape(), torch_dtype(t.element_type)) for _ in range(self.world)]
            self._new_buffer(arg, data)

    def _allocate(self, op: Operation, env: dict) -> None:
        if isinstance(op, k.AllocOp):
            t = op.result.type
            dtype = torch_dtype(t.element_type)
            make = (lambda: torch.zeros(t.get_shape(), dtype=dtype)) if op.zero is not None \
                else (lambda: poison(t.get_shape(), dtype))
            self._new_buffer(op.result, [make() for _ in range(self.world)])
        elif isinstance(op, k.AllocSignalsOp):
            n = op.result.type.count.data
            self.signals[op.result] = Signals(
                [[0] * n for _ in range(self.world)], [[{} for _ in range(n)] for _ in range(self.world)]
            )
        elif isinstance(op, arith.ConstantOp):
            env[op.result] = _constant(op)

    # -- run ---------------------------------------------------------------------------

    def run(self) -> list[PerRank]:
        shared_env: dict = {}
        for op in self.op.block.ops:
            self._allocate(op, shared_env)
        workers: list[Worker] = []
        self._names: dict[int, str] = {}
        for rank in range(self.world):
            for wop in self.op.workers():
                wid = len(workers)
                w = Worker(wid, rank, wop.role.data, wop, {wid: 1})
                self._names[wid] = w.describe()
                w.gen = self._exec_block(w, wop.body.blocks[0], dict(shared_env))
                workers.append(w)
        self._schedule(workers)
        n_in = len(self.op.inputs)
        outs = self.op.block.args[n_in:]
        return [[self.buffers[v].data[r].clone() for r in range(self.world)] for v in outs]

    def _schedule(self, workers: list[Worker]) -> None:
        live = list(workers)
        seen_version: dict[int, int] = {}
        steps = 0
        while live:
            self.rng.shuffle(live)
            progressed = False
            for w in list(live):
                if w.blocked_on is not None and seen_version.get(w.wid) == self.version:
                    continue  # nothing changed since it last looked
                seen_version[w.wid] = self.version
                try:
                    event = next(w.gen)
                except StopIteration:
                    live.remove(w)
                    progressed = True
                    continue
                if not isinstance(event, Blocked):
                    progressed = True
                steps += 1
                if steps > MAX_SCHEDULER_STEPS:
                    raise InterpError(f"{where(self.op)} ran more than {MAX_SCHEDULER_STEPS} steps")
            if not progressed and all(
                w.blocked_on is not None and seen_version.get(w.wid) == self.version for w in live
            ):
                raise InterpError(self._deadlock_message(live))

    def _deadlock_message(self, live: list[Worker]) -> str:
        lines = [f"deadlock in kernel @{self.op.kernel_name.data}: every remaining worker waits "
                 "on a signal that no running worker can send"]
        for w in sorted(live, key=lambda w: w.wid):
            op, slot, expected = w.blocked_on
            count = self.signals[op.signals].counts[w.rank][slot]
            lines.append(
                f"  {where(op)} on {w.describe()}: waits for signal slot {slot} >= {expected}, "
                f"it is {count}"
            )
        return "\n".join(lines)

    # -- interpretation of a worker's code ----------------------------------------------

    def _exec_block(self, w: Worker, block: Block, env: dict, args: Sequence = ()) -> Generator:
        for a, v in zip(block.args, args):
            env[a] = v
        for op in block.ops:
            if isinstance(op, (k.YieldOp, scf.YieldOp)):
                return [env[v] for v in op.operands]
            yield from self._exec_op(w, op, env)
        return []

    def _exec_op(self, w: Worker, op: Operation, env: dict) -> Generator:
        if isinstance(op, scf.ForOp):
            lb, ub, step = env[op.lb], env[op.ub], env[op.step]
            if step <= 0:  # scf.for's step must be positive (a computed one is known only here)
                raise InterpError(f"{where(op)} has step {step} on rank {w.rank}; it must be positive")
            carried = [env[v] for v in op.iter_args]
            for i in range(lb, ub, step):
                carried = yield from self._exec_block(w, op.body.blocks[0], env, [i, *carried])
            for r, v in zip(op.results, carried):
                env[r] = v
        elif isinstance(op, k.ForeachOp):
            for point in _grid_points(op.grid()):
                yield from self._exec_block(w, op.body.blocks[0], env, point)
        elif isinstance(op, k.WaitOp):
            yield from self._wait(w, op, env)
        elif isinstance(op, k.PutOp):
            self._put(w, op, env)
            yield Switch()
        elif isinstance(op, k.SignalOp):
            self._signal(w, op, env)
            yield Switch()
        else:
            self._exec_simple(w, op, env)

    def _exec_simple(self, w: Worker, op: Operation, env: dict) -> None:
        if isinstance(op, k.RankOp):
            env[op.result] = w.rank
        elif isinstance(op, k.LoadOp):
            env[op.result] = self._load(w, op, env)
        elif isinstance(op, k.StoreOp):
            self._store(w, op, env)
        elif isinstance(op, k.MmaOp):
            a, b, c = env[op.a], env[op.b], env[op.acc]
            ct = compute_dtype(a.dtype)
            env[op.result] = (c + torch.matmul(a.to(ct), b.to(ct)).to(c.dtype))
        elif isinstance(op, k.TileMapOp):
            t = op.result.type
            env[op.result] = apply_map(op.fn.data, [env[v] for v in op.inputs],
                                       t.get_shape(), torch_dtype(t.element_type))
        elif isinstance(op, k.TileReduceOp):
            env[op.result] = apply_reduce(op.fn.data, env[op.input], int_list(op.dims),
                                          op.keepdim is not None)
        elif isinstance(op, k.TileFillOp):
            t = op.result.type
            env[op.result] = torch.full(t.get_shape(), op.value.value.data,
                                        dtype=torch_dtype(t.element_type))
        elif isinstance(op, arith.ConstantOp):
            env[op.result] = _constant(op)
        elif type(op) in _ARITH:
            env[op.results[0]] = _ARITH[type(op)](op, *[env[v] for v in op.operands])
        else:
            raise InterpError(f"{where(op)} cannot be interpreted inside a pk.worker")

    # -- memory ----------------------------------------------------------------------

    def _region(self, w: Worker, op, buf: Buffer, offsets: list[int], tile_shape):
        """The in-bounds part of a tile placed at ``offsets``: (buffer slices, tile slices)."""
        shape = buf.type.get_shape()
        buf_sl, tile_sl = [], []
        for d, (o, n, size) in enumerate(zip(offsets, tile_shape, shape)):
            if not 0 <= o < size:
                raise InterpError(
                    f"{where(op)} on {w.describe()}: offset {o} in dimension {d} is outside "
                    f"{buf.type} (size {size}); a tile may overhang the end of a buffer but must "
                    "start inside it"
                )
            end = min(o + n, size)
            buf_sl.append(slice(o, end))
            tile_sl.append(slice(0, end - o))
        return tuple(buf_sl), tuple(tile_sl)

    def _check_read(self, w: Worker, op, buf: Buffer, rank: int, sl) -> None:
        sh = buf.shadows[rank]
        writers = sh.writer[sl]
        for other in torch.unique(writers).tolist():
            if other < 0 or other == w.wid:
                continue
            latest = int(sh.epoch[sl][writers == other].max())
            if w.clock.get(other, 0) < latest:
                raise InterpError(
                    f"{where(op)} on {w.describe()}: reads data of rank {rank}'s {buf.type} "
                    f"that {self._worker_name(other)} wrote without a signal/wait ordering that "
                    "write before this read (read before the data arrived)"
                )
        reads = sh.reads.setdefault(w.wid, torch.zeros(sh.writer.shape, dtype=torch.int32))
        reads[sl] = w.epoch

    def _check_write(self, w: Worker, op, buf: Buffer, rank: int, sl, add: bool) -> None:
        sh = buf.shadows[rank]
        for reader, epochs in sh.reads.items():
            if reader == w.wid:
                continue
            latest = int(epochs[sl].max()) if epochs[sl].numel() else 0
            if latest > w.clock.get(reader, 0):
                raise InterpError(
                    f"{where(op)} on {w.describe()}: overwrites data of rank {rank}'s {buf.type} "
                    f"that {self._worker_name(reader)} read without a signal/wait ordering that "
                    "read before this write"
                )
        writers = sh.writer[sl]
        for other in torch.unique(writers).tolist():
            if other < 0 or other == w.wid:
                continue
            mask = writers == other
            if add and bool(sh.was_add[sl][mask].all()):
                continue  # atomic adds commute
            if w.clock.get(other, 0) < int(sh.epoch[sl][mask].max()):
                raise InterpError(
                    f"{where(op)} on {w.describe()}: writes data of rank {rank}'s {buf.type} that "
                    f"{self._worker_name(other)} also wrote, with nothing ordering the two writes"
                )
        sh.writer[sl] = w.wid
        sh.epoch[sl] = w.epoch
        sh.was_add[sl] = add
        for epochs in sh.reads.values():
            epochs[sl] = 0

    def _worker_name(self, wid: int) -> str:
        return self._names[wid]

    def _tile_access(self, w, op, env, buffer: SSAValue, indices, tile_type: TileType):
        buf = self.buffers[buffer]
        offsets = [int(env[v]) for v in indices]
        return buf, self._region(w, op, buf, offsets, tile_type.get_shape())

    def _load(self, w: Worker, op: k.LoadOp, env: dict) -> torch.Tensor:
        rank = self._peer_of(w, op, env, op.peer)
        buf, (bsl, tsl) = self._tile_access(w, op, env, op.buffer, op.indices, op.result.type)
        self._check_read(w, op, buf, rank, bsl)
        t = op.result.type
        tile = torch.zeros(t.get_shape(), dtype=torch_dtype(t.element_type))
        tile[tsl] = buf.data[rank][bsl]
        return tile

    def _store(self, w: Worker, op: k.StoreOp, env: dict) -> None:
        buf, (bsl, tsl) = self._tile_access(w, op, env, op.buffer, op.indices, op.tile.type)
        self._check_write(w, op, buf, w.rank, bsl, add=False)
        buf.data[w.rank][bsl] = env[op.tile][tsl]

    def _put(self, w: Worker, op: k.PutOp, env: dict) -> None:
        rank = self._peer_of(w, op, env, op.peer)
        buf, (bsl, tsl) = self._tile_access(w, op, env, op.buffer, op.indices, op.tile.type)
        add = op.add is not None
        self._check_write(w, op, buf, rank, bsl, add=add)
        dst = buf.data[rank]
        tile = env[op.tile][tsl]
        if add:
            ct = compute_dtype(dst.dtype)
            dst[bsl] = (dst[bsl].to(ct) + tile.to(ct)).to(dst.dtype)
        else:
            dst[bsl] = tile

    def _peer_of(self, w: Worker, op, env, value) -> int:
        if value is None:
            return w.rank
        peer = int(env[value])
        if not 0 <= peer < self.world:
            raise InterpError(
                f"{where(op)} on {w.describe()}: peer {peer} is outside the world of "
                f"{self.world} ranks (0..{self.world - 1})"
            )
        return peer

    # -- signals ---------------------------------------------------------------------

    def _slot(self, w: Worker, op, env, sigs: Signals) -> int:
        slot = int(env[op.slot])
        n = len(sigs.counts[0])
        if not 0 <= slot < n:
            raise InterpError(f"{where(op)} on {w.describe()}: signal slot {slot} is outside 0..{n - 1}")
        return slot

    def _signal(self, w: Worker, op: k.SignalOp, env: dict) -> None:
        sigs = self.signals[op.signals]
        slot = self._slot(w, op, env, sigs)
        peer = self._peer_of(w, op, env, op.peer)
        join(sigs.clocks[peer][slot], w.clock)  # release: publish everything done so far
        w.clock[w.wid] += 1
        sigs.counts[peer][slot] += op.increment
        self.version += 1

    def _wait(self, w: Worker, op: k.WaitOp, env: dict) -> Generator:
        sigs = self.signals[op.signals]
        slot = self._slot(w, op, env, sigs)
        expected = int(env[op.expected])
        while sigs.counts[w.rank][slot] < expected:
            w.blocked_on = (op, slot, expected)
            yield Blocked()
        w.blocked_on = None
        join(w.clock, sigs.clocks[w.rank][slot])  # acquire


def _grid_points(grid: list[int]):
    points = [[]]
    for n in grid:
        points = [p + [i] for p in points for i in range(n)]
    return points


def _constant(op: arith.ConstantOp):
    v = op.value
    if isinstance(v, IntegerAttr):
        return v.value.data
    return v.value.data


_ARITH = {
    arith.AddiOp: lambda op, a, b: a + b,
    arith.SubiOp: lambda op, a, b: a - b,
    arith.MuliOp: lambda op, a, b: a * b,
    arith.DivUIOp: lambda op, a, b: a // b,
    arith.DivSIOp: lambda op, a, b: int(a / b),
    arith.RemUIOp: lambda op, a, b: a % b,
    arith.RemSIOp: lambda op, a, b: a - int(a / b) * b,
    arith.FloorDivSIOp: lambda op, a, b: a // b,
    arith.CeilDivUIOp: lambda op, a, b: -(-a // b),
    arith.MinUIOp: lambda op, a, b: min(a, b),
    arith.MaxUIOp: lambda op, a, b: max(a, b),
    arith.MinSIOp: lambda op, a, b: min(a, b),
    arith.MaxSIOp: lambda op, a, b: max(a, b),
    arith.IndexCastOp: lambda op, a: a,
    arith.SelectOp: lambda op, c, a, b: a if c else b,
    arith.CmpiOp: lambda op, a, b: _cmpi(op.predicate.value.data, a, b),
}


def _cmpi(pred: int, a: int, b: int) -> bool:
    # arith.cmpi predicates: eq, ne, slt, sle, sgt, sge, ult, ule, ugt, uge
    return [a == b, a != b, a < b, a <= b, a > b, a >= b, a < b, a <= b, a > b, a >= b][pred]


def run_kernel(op: k.KernelOp, inputs: list[PerRank], world: int, seed: int = 0) -> list[PerRank]:
    """Runs ``op`` on ``world`` ranks; ``inputs[i][r]`` is rank r's i-th operand (a kernel
    with ``group_ranks`` runs in each of its groups). ``seed`` picks the interleaving of the workers. A scheduled kernel (a ``pks.schedule``
    instead of workers) runs on the schedule level's interpreter."""
    from pkc.interp.graph import per_group    # it imports this module

    if op.schedule() is not None:
        from pkc.interp.schedule import run_schedule    # it imports this module

        return per_group(op, inputs, world, lambda o, w: run_schedule(op, o, w, seed))
    # a kernel over sub-groups runs once per group, with ranks numbered inside the group
    return per_group(op, inputs, world, lambda o, w: KernelRun(op, o, w, seed).run())
