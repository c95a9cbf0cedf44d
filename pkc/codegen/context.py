"""State shared by the lowerings of one worker, and the registry of op lowerings.

The execution model (see :mod:`pkc.codegen.lower`): every CTA of a worker runs the
worker's body; all 128 threads of a CTA run every op cooperatively, tiles live in shared
memory, index values are replicated in every thread's registers. ``in_foreach`` says
whether the op runs inside a ``pk.foreach`` iteration (one CTA owns it) or at worker
scope (every CTA of the worker runs it, and side effects are left to the leader CTA).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from xdsl.ir import Operation, SSAValue

from pkc.codegen import ptx
from pkc.codegen.abi import BufferArg, KernelMeta, SiteKind, WaitSite
from pkc.codegen.builder import Builder
from pkc.codegen.elements import Elem, elem
from pkc.codegen.errors import CodegenError
from pkc.codegen.smem import SmemPlan
from pkc.codegen.targets import THREADS, CodegenTarget
from pkc.dialects.kernel import constant_index
from pkc.dialects.types import BufferType, TileType


@dataclass
class BufferRef:
    """A buffer parameter: ``param`` is the data pointer (local) or the pointer array
    (symmetric); ``own`` is this rank's data pointer."""

    arg: BufferArg
    type: BufferType
    param: SSAValue
    own: SSAValue
    written: bool  # some op of the kernel (any rank) may write it: read it through L2

    @property
    def elem(self) -> Elem:
        return elem(self.type.element_type)


@dataclass
class SignalsRef:
    index: int
    name: str
    param: SSAValue  # pointer array
    own: SSAValue    # this rank's counters


@dataclass
class TileRef:
    offset: int
    type: TileType

    @property
    def elem(self) -> Elem:
        return elem(self.type.element_type)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.get_shape()

    @property
    def numel(self) -> int:
        return self.type.numel()


@dataclass
class WorkerCtx:
    b: Builder
    target: CodegenTarget
    meta: KernelMeta
    plan: SmemPlan
    worker_index: int
    role: str
    env: dict[SSAValue, object]
    tid: SSAValue
    smem: SSAValue
    rank: SSAValue        # u32
    world: SSAValue       # u32
    error: SSAValue       # u64
    workspace: SSAValue   # u64
    timeout: SSAValue     # u64
    cta: SSAValue         # u32: this CTA's index within the worker
    ncta: SSAValue        # u32: the worker's CTA count
    bid: SSAValue         # u32: blockIdx.x
    in_foreach: int = 0
    wrote: bool = False   # worker-scope (leader-only) writes since the last worker barrier
    read: bool = False    # worker-scope loads (by every CTA) since the last worker barrier
    _cache: dict = field(default_factory=dict)

    # -- values ----------------------------------------------------------------------

    def index(self, v: SSAValue) -> SSAValue:
        """An index value as an s64 register."""
        r = self.env.get(v)
        if r is None:
            raise CodegenError(f"value {v.name_hint or v} has no lowering (defined outside the worker?)")
        return r  # type: ignore[return-value]

    def tile(self, v: SSAValue) -> TileRef:
        t = self.env.get(v)
        if isinstance(t, TileRef):
            return t
        slot = self.plan.slots.get(v)
        if slot is None:
            raise CodegenError(f"tile {v.name_hint or v} has no shared-memory slot")
        ref = TileRef(slot.offset, v.type)
        self.env[v] = ref
        return ref

    def buffer(self, v: SSAValue) -> BufferRef:
        r = self.env[v]
        assert isinstance(r, BufferRef)
        return r

    def signals(self, v: SSAValue) -> SignalsRef:
        r = self.env[v]
        assert isinstance(r, SignalsRef)
        return r

    def const_of(self, v: SSAValue) -> int | None:
        return constant_index(v)

    # -- thread helpers ----------------------------------------------------------------

    @property
    def thread0(self) -> SSAValue:
        if "t0" not in self._cache:
            self._cache["t0"] = self.b.setp("eq", "u32", self.tid, 0)
        return self._cache["t0"]

    @property
    def leader(self) -> SSAValue:
        if "leader" not in self._cache:
            self._cache["leader"] = self.b.setp("eq", "u32", self.cta, 0)
        return self._cache["leader"]

    def warm(self) -> None:
        """Define the cached predicates at worker entry, where they dominate every use."""
        _ = self.thread0, self.leader

    def tile_addr(self, t: TileRef, e: SSAValue | int) -> SSAValue:
        """Shared address of element ``e`` (u32 register or constant) of tile ``t``."""
        b = self.b
        if isinstance(e, int):
            return b.add32(self.smem, t.offset + e * t.elem.size)
        base = b.add32(self.smem, t.offset)
        if t.elem.size == 1:
            return b.add32(base, e)
        return b.r(ptx.FmaOp(e, b.u32(t.elem.size), base, "u32", "mad.lo"))

    @contextmanager
    def for_elements(self, n: int, per_thread_start: SSAValue | None = None) -> Iterator[SSAValue]:
        """Loop over ``0..n`` spread over the CTA's threads (element e goes to thread
        e % THREADS); yields e as a u32 register."""
        start = self.tid if per_thread_start is None else per_thread_start
        with self.b.for_(start, self.b.u32(n), self.b.u32(THREADS), type="s32") as e:
            yield e

    def unravel(self, e: SSAValue, shape: tuple[int, ...]) -> list[SSAValue | int]:
        """Row-major multi-index of linear index ``e`` (u32); 0 for dims of size 1."""
        b = self.b
        idx: list[SSAValue | int] = [0] * len(shape)
        rest = e
        nontrivial = [d for d, s in enumerate(shape) if s > 1]
        for pos, d in enumerate(reversed(nontrivial)):
            if pos == len(nontrivial) - 1:
                idx[d] = rest
            else:
                idx[d] = b.bin("rem", "u32", rest, shape[d])
                rest = b.bin("div", "u32", rest, shape[d])
        return idx

    def ravel(self, idx: list[SSAValue | int], shape: tuple[int, ...]) -> SSAValue | int:
        """Row-major linear index (u32) of a multi-index into ``shape``."""
        b = self.b
        acc: SSAValue | int = 0
        stride = 1
        for d in reversed(range(len(shape))):
            i = idx[d]
            if not (isinstance(i, int) and i == 0):
                term = i * stride if isinstance(i, int) else (i if stride == 1 else b.mul32(i, stride))
                if isinstance(acc, int) and acc == 0:
                    acc = term
                elif isinstance(acc, int) or isinstance(term, int):
                    acc = b.add32(b.u32(acc) if isinstance(acc, int) else acc,
                                  b.u32(term) if isinstance(term, int) else term)
                else:
                    acc = b.add32(acc, term)
            stride *= shape[d]
        return acc

    def site(self, kind: SiteKind, op: Operation, signals: str | None = None) -> int:
        from pkc.ir import op_where as where

        sid = len(self.meta.sites)
        self.meta.sites.append(WaitSite(sid, kind, where(op), self.worker_index, signals))
        return sid


# ----------------------------------------------------------------------------------------
# Registry of op lowerings: one function per pk (or arith/scf) op class.

Lowering = Callable[[WorkerCtx, Operation], None]
LOWERINGS: dict[type, Lowering] = {}
# Target-specific lowerings override the portable one: this is where the Hopper fast path
# (TMA tensor maps + wgmma for pk.mma, warp-specialized) slots in, per op and target.
TARGET_LOWERINGS: dict[tuple[str, type], Lowering] = {}


def lowers(*op_types: type, targets: tuple[str, ...] = ()) -> Callable[[Lowering], Lowering]:
    def register(fn: Lowering) -> Lowering:
        for t in op_types:
            if targets:
                for target in targets:
                    TARGET_LOWERINGS[(target, t)] = fn
            else:
                LOWERINGS[t] = fn
        return fn
    return register


def lowering_for(target: str, op_type: type) -> Lowering | None:
    return TARGET_LOWERINGS.get((target, op_type)) or LOWERINGS.get(op_type)
