"""``torch.ops.pkc.kernel``: one pkc kernel as an op inside a torch program that Inductor
compiles (see :mod:`pkc.runtime.inductor`).

The op takes the kernel's operands and an integer key; the key names an entry of a
per-process registry that holds the kernel's result types and how to run it here:

* ``GPU``: the kernel the compiler scheduled (:mod:`pkc.runtime.scheduled_step`), else
  the portable codegen path, for this process's rank(s) (a 1-rank virtual world, or one rank of a
  torch.distributed group with symmetric memory);
* ``INTERP``: one rank on the CPU through the reference interpreter;
* ``SIMULATED``: W ranks as W threads of one process, each running the same compiled
  program; the op is a rendezvous: the last rank to arrive runs the interpreter on all
  W ranks' operands and hands each rank its results. This is how the compiled program of
  a multi-rank graph is checked on a CPU-only machine.

The key is derived from the kernel's IR text (and how it runs), so the same layer compiled
in another process yields the same torch program, and Inductor's own cache recognizes it.
Results are fresh tensors: a scheduled kernel whose result lives in a persistent buffer (which
its next call overwrites) is copied here, since Inductor may keep an op's result alive
across the next call.
"""

from __future__ import annotations

import enum
import hashlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

__all__ = ["RunKind", "KernelEntry", "register", "entry", "simulated_rank", "SimulatedWorld"]


class RunKind(enum.Enum):
    """Where the kernels of a compiled torch program run."""

    GPU = "gpu"              # pkc's kernels on this process's GPU (1 rank or torch.distributed)
    INTERP = "interp"        # one rank on the CPU, the reference interpreter
    SIMULATED = "simulated"  # W ranks as threads of one process, the interpreter at a rendezvous


@dataclass
class KernelEntry:
    """A registered kernel: its op (a ``pk.kernel`` or a graph-level collective), its
    results' shapes and dtypes, and how it runs."""

    op: object
    world: int
    shapes: list[tuple[int, ...]]
    dtypes: list[torch.dtype]
    kind: RunKind
    target: str = "sm_90a"
    _runner: Callable[[list[torch.Tensor]], list[torch.Tensor]] | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def run(self, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        if self._runner is None:
            with self._lock:
                if self._runner is None:
                    self._runner = _make_runner(self)
        return self._runner(inputs)


_REGISTRY: dict[int, KernelEntry] = {}


def register(op, world: int, kind: RunKind, target: str = "sm_90a") -> int:
    """Registers ``op`` (once per IR text, world and run kind) and returns its key."""
    from pkc.interp.values import torch_dtype

    text = str(op)
    digest = hashlib.sha256(f"{kind.value}\0{world}\0{target}\0{text}".encode()).digest()
    key = int.from_bytes(digest[:7], "little")     # < 2**56: fits the op's int argument
    if key not in _REGISTRY:
        types = [r.type for r in op.results]
        _REGISTRY[key] = KernelEntry(op, world, [tuple(t.get_shape()) for t in types],
                                     [torch_dtype(t.element_type) for t in types], kind, target)
    return key


def entry(key: int) -> KernelEntry:
    try:
        return _REGISTRY[key]
    except KeyError:
        raise RuntimeError(f"pkc: kernel key {key} is not registered in this process (a torch "
                           "program compiled by pkc was loaded without compiling its graph)") from None


@torch.library.custom_op("pkc::kernel", mutates_args=())
def kernel(inputs: list[torch.Tensor], key: int) -> list[torch.Tensor]:
    """Runs registered kernel ``key`` on this rank's ``inputs``; returns its results."""
    return entry(key).run(list(inputs))


@kernel.register_fake
def _(inputs: list[torch.Tensor], key: int) -> list[torch.Tensor]:
    e = entry(key)
    dev = inputs[0].device if inputs else torch.device("cpu")
    return [torch.empty(s, dtype=d, device=dev) for s, d in zip(e.shapes, e.dtypes)]


# ---------------------------------------------------------------------- runners


def _make_runner(e: KernelEntry) -> Callable[[list[torch.Tensor]], list[torch.Tensor]]:
    if e.kind is RunKind.SIMULATED:
        return _simulated_runner(e)
    if e.kind is RunKind.INTERP:
        return _interp_runner(e)
    return _gpu_runner(e)


def _run_all_ranks(op, per_rank: Sequence[Sequence[torch.Tensor]], world: int) -> list[list[torch.Tensor]]:
    """The interpreter on every rank's operands: ``per_rank[r]`` -> ``results[r]``."""
    from pkc.dialects import graph as g
    from pkc.dialects.kernel import KernelOp
    from pkc.interp.graph import WORLD_RULES
    from pkc.interp.kernel import run_kernel

    if isinstance(op, KernelOp):
        operands = [[per_rank[r][i] for r in range(world)] for i in range(len(op.inputs))]
        outs = run_kernel(op, operands, world)
        return [[outs[i][r] for i in range(len(outs))] for r in range(world)]
    assert isinstance(op, g.COLLECTIVE_OPS)
    res = WORLD_RULES[type(op)](op, [per_rank[r][0] for r in range(world)], world)
    return [[res[r]] for r in range(world)]


def _interp_runner(e: KernelEntry):
    def run(inputs):
        return _run_all_ranks(e.op, [inputs], 1)[0]
    return run


def _gpu_runner(e: KernelEntry):
    """This process's rank(s) of the kernel, prepared once: the scheduled kernel as its
    launch metadata says, else the portable codegen path (nothing is chosen here)."""
    import torch.distributed as dist

    from pkc.dialects.rank_groups import rank_groups
    from pkc.runtime.world import DEFAULT_TIMEOUT_S

    groups = rank_groups(e.op)
    if groups is not None:
        # a sub-group kernel (device mesh): this rank's group's runner and peers, the
        # kernel's rank being this rank's position in the group (pkc.runtime.groups)
        from pkc.runtime.groups import distributed_group

        if not (dist.is_initialized() and dist.get_world_size() == e.world):
            raise RuntimeError(f"pkc: '{e.op.name}' runs in groups {groups} of "
                               f"a {e.world}-rank program; it needs a torch.distributed world "
                               f"of {e.world} ranks in this process")
        general, _, rank = distributed_group(e.op, groups,
                                             torch.device("cuda", torch.cuda.current_device()))
        peers = general.peers
    elif e.world == 1:
        from pkc.runtime.peers import VirtualPeers
        from pkc.runtime.world import VirtualWorld

        general = VirtualWorld(1, None, False)
        peers = VirtualPeers(1, general.device, False)
        rank = 0
    else:
        if not (dist.is_initialized() and dist.get_world_size() == e.world):
            raise RuntimeError(f"pkc: kernel of {e.world} ranks needs a torch.distributed group of "
                               f"{e.world} ranks in this process")
        general = _distributed_runner()
        peers, rank = general.peers, general.rank
    if getattr(e.op, "schedule", None) is not None and e.op.schedule() is not None:
        from pkc.runtime.scheduled_step import scheduled_step

        sstep = scheduled_step(e.op, peers, e.target, DEFAULT_TIMEOUT_S)

        def run_scheduled(inputs):
            outs = sstep.run({rank: inputs})[rank]
            return [o.clone() if keep else o for o, keep in zip(outs, sstep.persistent)]
        return run_scheduled
    from pkc.runtime.execute import compiled

    ck = compiled(e.op, e.target)
    if e.world == 1:
        return lambda inputs: general.run(ck, [inputs], DEFAULT_TIMEOUT_S)[0]
    return lambda inputs: general.run(ck, inputs, DEFAULT_TIMEOUT_S)


_DIST_RUNNER: list = []


def _distributed_runner():
    if not _DIST_RUNNER:
        from pkc.runtime.symm import DistributedRunner

        _DIST_RUNNER.append(DistributedRunner())
    return _DIST_RUNNER[0]


# ---------------------------------------------------------------------- simulated ranks

_SIM = threading.local()


def simulated_rank() -> int:
    rank = getattr(_SIM, "rank", None)
    if rank is None:
        raise RuntimeError("pkc: a simulated multi-rank kernel ran outside SimulatedWorld.run")
    return rank


class _Rendezvous:
    """W threads meet; the last to arrive runs the op on all ranks' operands."""

    def __init__(self, e: KernelEntry, world: int, timeout_s: float) -> None:
        self.e, self.world, self.timeout_s = e, world, timeout_s
        self.barrier = threading.Barrier(world, timeout=timeout_s)
        self.inputs: list = [None] * world
        self.outputs: list | None = None
        self.error: BaseException | None = None

    def __call__(self, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        rank = simulated_rank()
        self.inputs[rank] = inputs
        try:
            if self.barrier.wait() == 0:     # exactly one thread computes
                try:
                    self.outputs, self.error = _run_all_ranks(self.e.op, self.inputs, self.world), None
                except BaseException as err:  # noqa: BLE001 - re-raised on every rank
                    self.outputs, self.error = None, err
            self.barrier.wait()
        except threading.BrokenBarrierError:
            raise RuntimeError(
                f"pkc: simulated rank {rank} waited {self.timeout_s} s at '{self.e.op.name}' for "
                f"the other {self.world - 1} ranks (a rank failed or took another path)") from None
        if self.error is not None:
            raise self.error
        assert self.outputs is not None
        return self.outputs[rank]


def _simulated_runner(e: KernelEntry):
    return _Rendezvous(e, e.world, SimulatedWorld.timeout_s)


class SimulatedWorld:
    """Runs a compiled per-rank program for W ranks as W threads (``fn(rank, args)``)."""

    timeout_s = 60.0

    def __init__(self, world: int) -> None:
        self.world = world

    def run(self, fn: Callable[[list[torch.Tensor]], Sequence[torch.Tensor]],
            per_rank_args: Sequence[list[torch.Tensor]]) -> list[list[torch.Tensor]]:
        results: list = [None] * self.world
        errors: list = [None] * self.world

        def body(rank: int) -> None:
            _SIM.rank = rank
            try:
                results[rank] = list(fn(list(per_rank_args[rank])))
            except BaseException as err:  # noqa: BLE001 - reported below
                errors[rank] = err
            finally:
                _SIM.rank = None

        threads = [threading.Thread(target=body, args=(r,), name=f"pkc-rank{r}") for r in range(self.world)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for r, err in enumerate(errors):
            if err is not None:
                raise RuntimeError(f"pkc: simulated rank {r} failed: {err}") from err
        return results
