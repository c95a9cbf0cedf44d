"""The kernel ABI: what a compiled pk.kernel takes, in order, and what it reports.

Parameters (all by value; pointers are u64):

1. one per buffer, in order: the kernel's inputs, its outputs, then its ``pk.alloc``s.
   A local buffer is a pointer to the rank's data; a symmetric buffer is a pointer to a
   device array of W u64 pointers, entry p being rank p's copy (peers write there).
2. one per ``pk.alloc_signals``: a pointer to a device array of W u64 pointers to each
   rank's u32 counters (zero before launch).
3. ``rank`` (u32), ``world`` (u32).
4. ``error``: a pointer to this rank's error record (``ERROR_WORDS`` u32, zero before
   launch). A timed-out wait or worker barrier fills it (first one wins) and the CTA exits.
5. ``workspace``: ``workspace_words`` u32 zeroed before launch (one barrier counter per
   worker: a worker spread over several CTAs synchronizes them through it).
6. ``timeout_ns`` (u64): how long a wait spins before it gives up.
7. one u32 per worker: how many CTAs it gets. CTAs are laid out worker after worker
   along ``blockIdx.x``; the grid is their sum, the block ``threads`` wide, with
   ``smem_bytes`` of dynamic shared memory. The runtime picks the counts (from each
   worker's ``sms``, scaled to the SMs it has) so that every CTA is resident at once,
   which the waits need.

``KernelMeta`` carries this layout to the runtime (and into dumps, as JSON).
"""

from __future__ import annotations

import json
import zlib
from dataclasses import asdict, dataclass, field

from pkc.kinds import Kind

ERROR_WORDS = 16
# Fields of the error record (u32 words).
ERR_FLAG, ERR_SITE, ERR_RANK, ERR_WORKER, ERR_CTA, ERR_SLOT, ERR_EXPECTED, ERR_SEEN, ERR_KERNEL = range(9)


class BufferOrigin(Kind):
    """Where a kernel buffer comes from (``BufferArg.origin`` in the JSON metadata)."""

    INPUT = "input"      # one of the kernel's inputs
    OUTPUT = "output"    # one of its outputs
    ALLOC = "alloc"      # a pk.alloc of the kernel


@dataclass
class BufferArg:
    name: str
    origin: BufferOrigin
    index: int           # position among the kernel's inputs / outputs / allocs
    shape: list[int]
    dtype: str           # pk element type: bf16, f16, f32, f64, i1, i8, i32, i64
    symmetric: bool
    zero: bool = False   # allocs only: zero before launch (else poisoned)

    def __post_init__(self):
        self.origin = BufferOrigin.parse(self.origin, f"the origin of buffer '{self.name}'")


@dataclass
class SignalsArg:
    name: str
    count: int


@dataclass
class WorkerInfo:
    role: str
    sms: int             # SMs it asks for (the op's ``sms``, or the default split)
    explicit: bool       # ``sms`` was set in the IR


class SiteKind(Kind):
    """What a timeout site waits on (its value is the ``kind`` of the JSON metadata)."""

    WAIT = "wait"            # a pk.wait on a signal
    BARRIER = "barrier"      # a worker barrier across the worker's CTAs
    MBARRIER = "mbarrier"    # an mbarrier's expected bulk-copy bytes


@dataclass
class WaitSite:
    """A place that can time out: a ``pk.wait`` or a worker barrier."""

    id: int
    kind: SiteKind
    where: str           # "'pk.wait' at file:line:col"
    worker: int
    signals: str | None = None

    def __post_init__(self):
        self.kind = SiteKind.parse(self.kind, f"wait site {self.id}'s kind")


@dataclass
class KernelMeta:
    name: str
    target: str
    threads: int
    smem_bytes: int
    buffers: list[BufferArg]
    signals: list[SignalsArg]
    workers: list[WorkerInfo]
    sites: list[WaitSite] = field(default_factory=list)
    world: int = 1

    @property
    def kernel_id(self) -> int:
        return kernel_id(self.name)

    @property
    def workspace_words(self) -> int:
        return max(4, len(self.workers))

    def params(self) -> list[tuple[str, str]]:
        """(name, PTX type) of every parameter, in ABI order."""
        ps = [(f"buf{i}_{b.name}", "u64") for i, b in enumerate(self.buffers)]
        ps += [(f"sig{i}_{s.name}", "u64") for i, s in enumerate(self.signals)]
        ps += [("rank", "u32"), ("world", "u32"), ("error", "u64"), ("workspace", "u64"),
               ("timeout_ns", "u64")]
        ps += [(f"ctas_w{i}", "u32") for i in range(len(self.workers))]
        return [(_ident(n), t) for n, t in ps]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @staticmethod
    def from_json(text: str) -> "KernelMeta":
        d = json.loads(text)
        return KernelMeta(
            name=d["name"], target=d["target"], threads=d["threads"], smem_bytes=d["smem_bytes"],
            buffers=[BufferArg(**b) for b in d["buffers"]],
            signals=[SignalsArg(**s) for s in d["signals"]],
            workers=[WorkerInfo(**w) for w in d["workers"]],
            sites=[WaitSite(**s) for s in d["sites"]], world=d.get("world", 1),
        )


def kernel_id(name: str) -> int:
    """The u32 that names a kernel in error records."""
    return zlib.crc32(name.encode()) & 0x7FFFFFFF


def _ident(name: str) -> str:
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return out if not out[0].isdigit() else "_" + out


# ---- scheduled kernels (a pk.kernel whose body is a pks.schedule) ------------------------


@dataclass
class TmapArg:
    """A CUtensorMap the runtime encodes for kernel buffer ``buffer`` (index among the
    kernel's inputs then outputs): element type, box (innermost first), swizzle bytes.
    The map's dimensions and strides are the buffer's (row-major)."""

    buffer: int
    element: str
    box: list[int]
    swizzle: int
    peer: int = -1      # >= 0: over rank ``peer``'s copy of the (symmetric) buffer
    # ``[first, count, cols]``: the map covers rows [first, first + count) of the row-major
    # ``[*, cols]`` buffer (a chunk's rows: a box never spills into the next chunk); empty:
    # the whole buffer with its shape
    rows: list[int] = field(default_factory=list)
    alloc: bool = False  # ``buffer`` indexes the kernel's pk.allocs (FusedLaunch.buffers)
    # the map's dimensions (outermost first) as a row-major view of the buffer (the same
    # elements, e.g. [W, Mc, K] of a [W * Mc, K] buffer: a box never spills into the next
    # shard); empty: the buffer's shape
    dims: list[int] = field(default_factory=list)


@dataclass
class CommBufferArg:
    """A buffer of a scheduled collective that is not a kernel argument (a ``pk.alloc``):
    ``elements`` of ``dtype``, symmetric (its W copies' addresses are passed) or local;
    ``zero``: zeroed once when allocated and kept across launches (signal pads, the epoch
    control word: epochs make them reusable without a reset)."""

    name: str
    elements: int
    dtype: str
    symmetric: bool
    zero: bool


@dataclass
class CommLaunch:
    """What a scheduled collective takes beyond its buffers (``ScheduledKernelMeta.comm``).

    Parameters after the kernel buffers: W peer pointers (ranks 0..W-1) per symmetric
    entry of ``buffers`` then per symmetric kernel output (``sym_outputs``: indices among
    the kernel's buffers); the own pointer of each symmetric entry of ``buffers``; one
    pointer per local entry (after the multicast addresses ``<name>_mc`` of the entries in
    ``multicast``, NVLS kernels); then ``vecs`` and ``chunk`` (u32: 16-byte vectors of the
    tensor and of a chunk), ``slice`` (u32: vectors of a chunk per CTA), ``rank``
    (u32), ``err`` (u64: 8 u32, zeroed once: flag, kind, rank, peer, seen, wanted, cta,
    epoch), ``timeout`` (u64 ns), ``mbox`` (u64: a host-mapped copy of the record, or 0),
    ``trap`` (u32: trap after recording a timeout).

    Grid (:meth:`launch`): every CTA of every rank must be resident at once, so at most
    ``ctas_per_sm`` per SM of the rank's SMs; each CTA takes at most ``cta_vecs`` vectors
    of a ``chunk_vecs``-vector chunk (its slice rounded up to ``slice_align``), and no CTA
    gets an empty slice; ``shrink_threads``: launch only the threads the slice needs (in
    whole warps), as the LL kernels do; ``max_ctas``: the grid the pads have slots for."""

    world: int
    buffers: list[CommBufferArg]
    sym_outputs: list[int]
    chunk_vecs: int
    cta_vecs: int
    slice_align: int
    ctas_per_sm: int
    shrink_threads: bool
    max_ctas: int = 0       # CTAs the pads were sized for (0: no bound)
    vecs: int = 0           # 16-byte vectors of the whole tensor (the kernel's input)
    # symmetric entries (names as in the parameters: ``alloc<i>``, ``out<i>``) that also
    # get a multicast address ``<name>_mc`` (NVLS kernels; a CUDA multicast object bound
    # to every rank's copy: never made on the lent machines)
    multicast: list[str] = field(default_factory=list)

    def params(self) -> list[tuple[str, str]]:
        W = self.world
        syms = [b.name for b in self.buffers if b.symmetric] + [f"out{i}" for i in self.sym_outputs]
        ps = [(f"{name}_p{d}", "u64") for name in syms for d in range(W)]
        ps += [(f"{b.name}_own", "u64") for b in self.buffers if b.symmetric]
        ps += [(f"{name}_mc", "u64") for name in self.multicast]
        ps += [(b.name, "u64") for b in self.buffers if not b.symmetric]
        ps += [("vecs", "u32"), ("chunk", "u32"), ("slice", "u32"), ("rank", "u32"), ("err", "u64"),
               ("timeout", "u64"), ("mbox", "u64"), ("trap", "u32")]
        return ps

    def launch(self, max_ctas: int, threads: int) -> tuple[int, int, int]:
        """(slice, grid, threads) for at most ``max_ctas`` CTAs per rank."""
        cv = self.chunk_vecs
        if self.max_ctas:
            max_ctas = min(max_ctas, self.max_ctas)
        grid = max(1, min(max_ctas, -(-cv // self.cta_vecs)))
        per = -(-cv // grid)
        per = -(-per // self.slice_align) * self.slice_align
        grid = max(1, -(-cv // per))
        if self.shrink_threads:
            threads = min(threads, -(-per // 32) * 32)
        return per, grid, threads


class FusedLaunchKind(Kind):
    """Which launcher runs a fused kernel (``FusedLaunch.kind`` in the JSON metadata)."""

    RS = "rs"      # GEMM + reduce-scatter or all-reduce (runtime: ScheduledFused)
    AG = "ag"      # all-gather + GEMM (ScheduledAgGemm)
    MOE = "moe"    # MoE dispatch + grouped GEMM + combine (ScheduledMoe)


@dataclass
class FusedLaunch:
    """What a fused GEMM + collective takes beyond its tensor maps and buffers
    (``ScheduledKernelMeta.fused``; the GEMM's grid rule: ``tiles`` counts every chunk's).

    Parameters after the kernel buffers: W peer pointers (ranks 0..W-1) per symmetric
    entry of ``buffers`` (its ``pk.alloc``s: the signal pad) then per ``peer_outputs`` entry
    (``out<i>_p<d>``: a symmetric output peers write into), the own pointer of each alloc, one
    pointer per local entry (the epoch control word); then ``rank`` (u32), ``err`` (u64: 8
    u32, zeroed once: flag, kind, rank, peer, seen, wanted, cta, epoch), ``timeout`` (u64
    ns), ``mbox`` (u64: a host-mapped copy of the record, or 0), ``trap`` (u32). Its tensor
    maps with ``peer >= 0`` are over that rank's copy of a symmetric kernel output
    (``sym_outputs``: indices among the kernel's buffers; persistent, made by the runtime,
    the result stays there until the next launch)."""

    world: int
    buffers: list[CommBufferArg]
    sym_outputs: list[int]
    shapes: list[list[int]]     # every kernel buffer's shape (inputs, then outputs)
    dtype: str                  # their element type
    kind: FusedLaunchKind = FusedLaunchKind.RS
    inputs: int = -1            # kernel inputs (-1: every buffer not a symmetric output);
    #                             outputs that are not symmetric are fresh per launch
    side_ctas: int = 0          # the grid's last CTAs that run a side role (the grid rule)
    peer_outputs: list[int] = field(default_factory=list)   # symmetric outputs whose W
    #                             peer pointers are passed (``out<i>_p<d>``, after the allocs')
    dtypes: list[str] = field(default_factory=list)     # each buffer's element type where
    #                             they differ (a bias-fused kernel's f32 scale); empty: dtype

    def params(self) -> list[tuple[str, str]]:
        W = self.world
        ps = [(f"{b.name}_p{d}", "u64") for b in self.buffers if b.symmetric for d in range(W)]
        ps += [(f"out{i}_p{d}", "u64") for i in self.peer_outputs for d in range(W)]
        ps += [(f"{b.name}_own", "u64") for b in self.buffers if b.symmetric]
        ps += [(b.name, "u64") for b in self.buffers if not b.symmetric]
        ps += [("rank", "u32"), ("err", "u64"), ("timeout", "u64"), ("mbox", "u64"),
               ("trap", "u32")]
        return ps

    def __post_init__(self):
        self.kind = FusedLaunchKind.parse(self.kind, "the fused launch's kind")


@dataclass
class ScheduledKernelMeta:
    """The launch of a scheduled kernel. Parameters: one by-value CUtensorMap per entry of
    ``tmaps``, then one u64 pointer per kernel buffer. Grid: persistent, ``min(SMs,
    tiles)`` CTAs rounded down to whole clusters of ``cluster``; ``threads`` per CTA;
    ``smem_bytes`` of dynamic shared memory. No signals, no error record: a wait past its
    deadline traps (a launch error the host raises)."""

    name: str
    target: str
    threads: int
    cluster: int
    smem_bytes: int
    buffers: list[str]
    tmaps: list[TmapArg]
    tiles: int
    comm: CommLaunch | None = None     # a scheduled collective's extra parameters and grid
    fused: FusedLaunch | None = None   # a fused GEMM + collective's extra parameters
    # cluster launch control (sm_100a): one cluster per tile is launched; the running
    # ones take the work of clusters not started yet (clusterlaunchcontrol.try_cancel)
    clc: bool = False

    def params(self) -> list[tuple[str, str]]:
        ps = [(f"tmap{i}", "tmap") for i in range(len(self.tmaps))]
        ps += [(name, "u64") for name in self.buffers]
        if self.comm is not None:
            ps += self.comm.params()
        if self.fused is not None:
            ps += self.fused.params()
        return [(_ident(n), t) for n, t in ps]

    def grid(self, num_sms: int) -> int:
        side = self.fused.side_ctas if self.fused is not None else 0
        if side:        # the GEMM's CTAs on the SMs the side CTAs leave, then the side's
            # (whole clusters: the side CTAs are a whole number of them)
            main = min(num_sms - side, self.tiles) // self.cluster * self.cluster
            return max(self.cluster, main) + side
        if self.clc:    # every tile's cluster; those beyond the SMs are cancelled or wait
            return -(-self.tiles // self.cluster) * self.cluster
        ctas = min(num_sms, -(-self.tiles // self.cluster) * self.cluster)
        return max(self.cluster, ctas // self.cluster * self.cluster)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @staticmethod
    def from_json(text: str) -> "ScheduledKernelMeta":
        d = json.loads(text)
        d["tmaps"] = [TmapArg(**t) for t in d["tmaps"]]
        if d.get("comm") is not None:
            c = dict(d["comm"])
            c["buffers"] = [CommBufferArg(**b) for b in c["buffers"]]
            d["comm"] = CommLaunch(**c)
        if d.get("fused") is not None:
            f = dict(d["fused"])
            f["buffers"] = [CommBufferArg(**b) for b in f["buffers"]]
            d["fused"] = FusedLaunch(**f)
        return ScheduledKernelMeta(**d)


# The error record a bounded wait writes when it expires (every scheduled kernel with
# waits, and the hand kernels): 8 u32 words, zeroed once.
ERR_FIELDS = ("flag", "kind", "rank", "peer", "seen", "wanted", "cta", "epoch")


def describe_record(kernel: str, record, kinds: dict) -> str:
    """The line for one error record (``kinds``: what each ``kind`` value waited for)."""
    d = dict(zip(ERR_FIELDS, record))
    return (f"kernel {kernel}: rank {d['rank']} (CTA {d['cta']}, epoch {d['epoch']}) timed out "
            f"waiting for rank {d['peer']}: {kinds.get(d['kind'], d['kind'])}; its signal was "
            f"{d['seen']}, wanted {d['wanted']}")
