"""Launching a compiled kernel in the emulator, with the runtime's own ABI.

:func:`emulate` takes a :class:`~pkc.codegen.emit.CompiledKernel` and per-rank inputs and
does what :class:`pkc.runtime.world.VirtualWorld` does on the GPU, from the same
description (:class:`~pkc.codegen.abi.KernelMeta`): every buffer W times (inputs copied in,
outputs and allocs poisoned or zeroed), a pointer array of the W copies for a symmetric
buffer, W signal pads and their pointer array, an error record and a workspace per rank,
CTAs per worker from :func:`pkc.runtime.launch.fit_ctas` and the parameter list from
:func:`pkc.runtime.launch.params`. After the run, an error record a kernel wrote is
decoded by the runtime's :func:`~pkc.runtime.errors.decode_error`.

:func:`run_entry` runs a bare ``ptx.entry`` (hand-built kernels in tests) on memory the
caller allocated.
"""

from __future__ import annotations

import numpy as np
import torch

from pkc.codegen import ptx
from pkc.codegen.abi import ERROR_WORDS, BufferOrigin
from pkc.emu import control, ops_async, ops_core, ops_memory, ops_mma  # noqa: F401 (handlers)
from pkc.emu.errors import EmuTimeoutRecord
from pkc.emu.machine import DEFAULT_MAX_STEPS, Machine
from pkc.emu.memory import GlobalMemory
from pkc.emu.program import Program

DEFAULT_SMS = 2
_PROGRAMS: dict[int, tuple[ptx.EntryOp, Program]] = {}


def program_of(entry: ptx.EntryOp) -> Program:
    hit = _PROGRAMS.get(id(entry))
    if hit is None or hit[0] is not entry:
        hit = _PROGRAMS[id(entry)] = (entry, Program(entry))
    return hit[1]


def _load_sm90_handlers() -> None:
    """Handlers of the Hopper ops, where pkc.codegen.ptx_sm90 exists."""
    import importlib.util

    for dialect, handlers in (("pkc.codegen.ptx_sm90", "pkc.emu.ops_sm90"),
                              ("pkc.codegen.ptx_comm", "pkc.emu.ops_comm"),
                              ("pkc.codegen.ptx_sm100", "pkc.emu.ops_sm100"),
                              ("pkc.codegen.ptx_sm100_ext", "pkc.emu.ops_sm100_ext"),
                              ("pkc.codegen.ptx_multimem", "pkc.emu.ops_multimem")):
        if importlib.util.find_spec(dialect) is not None:
            importlib.import_module(handlers)


def run_entry(entry: ptx.EntryOp, gmem: GlobalMemory, params: list[list[int]], *,
              world: int = 1, ctas: int = 1, threads: int | None = None,
              smem_bytes: int | None = None, cluster: int | None = None, target: str = "sm_90a",
              check_races: bool = True, max_steps: int = DEFAULT_MAX_STEPS,
              rank_order: list[int] | None = None, resident: int | None = None) -> Machine:
    """Runs ``entry`` with ``params[r]`` (its parameters, in order) for each rank; returns
    the machine (its memory holds the results). ``rank_order``: run the ranks ahead of
    each other in this order (:attr:`Machine.rank_order`), to vary when their writes land.
    ``resident``: clusters per rank that run at once; the others start as those exit, or
    are taken by cluster launch control (None: all at once)."""
    if rank_order is not None and sorted(rank_order) != list(range(world)):
        raise ValueError(f"rank_order {rank_order} is not a permutation of the {world} ranks")
    _load_sm90_handlers()
    if gmem.heap is None:
        gmem.finalize()
    prog = program_of(entry)
    cl = cluster or _cluster_of(entry)
    m = Machine(prog, world=world, ctas=ctas, threads=threads or entry.maxntid.data,
                smem_bytes=entry.smem_bytes.data if smem_bytes is None else smem_bytes,
                gmem=gmem, params=params, cluster=cl, max_steps=max_steps, target=target,
                resident=resident)
    m.check_races = check_races
    m.rank_order = None if rank_order is None else list(rank_order)
    m.run()
    from pkc.emu.registry import AT_EXIT
    for check in AT_EXIT:
        check(m)
    return m


def _cluster_of(entry: ptx.EntryOp) -> int:
    attr = entry.attributes.get("cluster") or entry.attributes.get("cluster_dim")
    if attr is None:
        return 1
    data = getattr(attr, "data", attr)
    if isinstance(data, (list, tuple)):
        n = 1
        for d in data:
            n *= getattr(d, "data", d)
        return n
    return int(data)


def _host_tensor(t: torch.Tensor) -> torch.Tensor:
    return t.detach().cpu().contiguous()


def emulate(ck, inputs: list[list[torch.Tensor]], *, sms: int = DEFAULT_SMS,
            timeout_s: float = 5.0, check_races: bool = True,
            max_steps: int = DEFAULT_MAX_STEPS, kop=None) -> list[list[torch.Tensor]]:
    """Runs compiled kernel ``ck`` for its world of ranks; ``inputs[r]``: rank r's kernel
    inputs (tensors, in the pk.kernel's operand order). Returns ``outputs[r]``. A
    scheduled kernel (:class:`~pkc.codegen.abi.ScheduledKernelMeta`) also needs its
    ``pk.kernel`` op ``kop`` (the buffers' shapes are not in its metadata)."""
    from pkc.codegen.abi import ScheduledKernelMeta
    from pkc.runtime.launch import fit_ctas, params as abi_params
    from pkc.runtime.world import dtype_of, poison_

    if isinstance(ck.meta, ScheduledKernelMeta):
        return emulate_scheduled(ck, kop, inputs, sms=sms, check_races=check_races,
                                 max_steps=max_steps)
    meta = ck.meta
    W = meta.world
    if len(inputs) != W:
        raise ValueError(f"kernel @{meta.name} runs on {W} ranks, got inputs for {len(inputs)}")
    gm = GlobalMemory()
    tensors: list[tuple[int, torch.Tensor]] = []     # (address, host tensor) to copy in
    pointer_arrays: list[tuple[int, list[int]]] = []
    bufs: list[list[int]] = [[] for _ in range(W)]
    outputs: dict[int, list[tuple[int, list[int], torch.dtype]]] = {}
    for b in meta.buffers:
        dt = dtype_of(b.dtype)
        addrs = []
        for r in range(W):
            if b.origin is BufferOrigin.INPUT:
                t = _host_tensor(inputs[r][b.index]).to(dt)
            else:
                t = torch.empty(b.shape, dtype=dt)
                t.zero_() if b.zero else poison_(t)
            a = gm.alloc(t.numel() * t.element_size(), b.name, r)
            tensors.append((a, t))
            addrs.append(a)
        if b.origin is BufferOrigin.OUTPUT:
            outputs[b.index] = [(a, list(b.shape), dt) for a in addrs]
        if b.symmetric:
            arr = gm.alloc(8 * W, f"{b.name} (peer pointers)")
            pointer_arrays.append((arr, addrs))
            for r in range(W):
                bufs[r].append(arr)
        else:
            for r in range(W):
                bufs[r].append(addrs[r])
    sig_params = []
    for s in meta.signals:
        pads = [gm.alloc(4 * s.count, f"signals {s.name}", r) for r in range(W)]
        arr = gm.alloc(8 * W, f"signals {s.name} (peer pointers)")
        pointer_arrays.append((arr, pads))
        sig_params.append(arr)
    errors = [gm.alloc(4 * ERROR_WORDS, "error record", r) for r in range(W)]
    work = [gm.alloc(4 * meta.workspace_words, "workspace", r) for r in range(W)]
    gm.finalize()
    for a, t in tensors:
        gm.write_tensor(a, t)
    for arr, addrs in pointer_arrays:
        gm.write_words(arr, addrs)
    ctas = fit_ctas(meta, max(sms, len(meta.workers)))
    params = [[v for _, v in abi_params(meta, bufs[r], sig_params, r, W, errors[r], work[r],
                                        timeout_s, ctas)] for r in range(W)]
    run_entry(ck.entry_op, gm, params, world=W, ctas=sum(ctas), threads=meta.threads,
              smem_bytes=meta.smem_bytes, target=ck.target, check_races=check_races,
              max_steps=max_steps)
    _raise_records(meta, gm, errors, timeout_s)
    return [[gm.read_tensor(*outputs[i][r]) for i in sorted(outputs)] for r in range(W)]


def _raise_records(meta, gm: GlobalMemory, errors: list[int], timeout_s: float) -> None:
    from pkc.runtime.errors import decode_error

    for r, a in enumerate(errors):
        rec = [int(x) for x in gm.read_words(a, ERROR_WORDS, np.uint32)]
        e = decode_error(meta, r, rec, timeout_s)
        if e is not None:
            raise EmuTimeoutRecord(f"the kernel recorded a timeout: {e}")


def emulate_scheduled(ck, kop, inputs: list[list[torch.Tensor]], *, sms: int = DEFAULT_SMS,
                      check_races: bool = True,
                      max_steps: int = DEFAULT_MAX_STEPS,
                      rank_order: list[int] | None = None) -> list[list[torch.Tensor]]:
    """A scheduled kernel (its ABI: :class:`~pkc.codegen.abi.ScheduledKernelMeta`): one
    tensor map per ``tmaps`` entry (the emulator's record, :mod:`pkc.emu.tensormap`), then a
    pointer per kernel buffer; the persistent grid of ``meta.grid(sms)`` CTAs. Every rank
    runs its own copy (no peers)."""
    from pkc.emu.errors import EmuUnsupported
    from pkc.emu.tensormap import RECORD_BYTES, TensorMap
    from pkc.interp.values import torch_dtype

    meta = ck.meta
    if kop is None:
        raise ValueError("emulate: a scheduled kernel needs its pk.kernel op (kop=)")
    W = len(inputs)
    types = [a.type for a in kop.block.args]
    n_in = len(kop.inputs)
    comm = meta.comm
    extra = comm if comm is not None else getattr(meta, "fused", None)
    gm = GlobalMemory()
    addrs = [[0] * len(types) for _ in range(W)]
    host: list[tuple[int, torch.Tensor]] = []
    for r in range(W):
        for i, t in enumerate(types):
            dt = torch_dtype(t.element_type)
            if i < n_in:
                x = _host_tensor(inputs[r][i]).to(dt)
            else:
                x = torch.full(tuple(t.get_shape()), float("nan"), dtype=dt)
            addrs[r][i] = gm.alloc(x.numel() * x.element_size(), f"buf{i}", r)
            host.append((addrs[r][i], x))
    # the maps back to back, as by-value parameters lie (a kernel may index them:
    # pkc.codegen.lower_schedule_fused._tmap_select)
    starts = [gm.alloc(RECORD_BYTES * max(1, len(meta.tmaps)), "tmaps", r) for r in range(W)]
    maps = [[starts[r] + j * RECORD_BYTES for j in range(len(meta.tmaps))] for r in range(W)]
    named: list[dict] = [{} for _ in range(W)]    # comm parameters by ABI name
    if extra is not None:
        _comm_buffers(gm, extra, types, addrs, host, named, W)
    gm.finalize()
    for a, x in host:
        gm.write_tensor(a, x)
    esize = {"bf16": 2, "f16": 2, "f32": 4, "e4m3": 1, "e5m2": 1}
    for r in range(W):
        for j, tm in enumerate(meta.tmaps):
            es = esize[tm.element]
            base, shape = _map_view(tm, types, addrs, named, extra, r, es)
            strides, acc = [], es
            for d in reversed(shape):
                strides.append(acc)
                acc *= d
            rec = TensorMap(base, es, list(reversed(shape)), strides,
                            list(tm.box), tm.swizzle, element=tm.element)
            gm.heap[maps[r][j] - gm_base(): maps[r][j] - gm_base() + RECORD_BYTES] = rec.encode()
    if extra is not None:
        if comm is not None:
            sl, grid, threads = comm.launch(max(1, comm.ctas_per_sm) * sms, meta.threads)
            scalars = dict(vecs=comm.vecs, chunk=comm.chunk_vecs, slice=sl)
        else:
            grid, threads, scalars = meta.grid(max(sms, meta.cluster)), meta.threads, {}
        params = []
        for r in range(W):
            named[r].update(scalars, rank=r, timeout=10**9, mbox=0, trap=0)
            ps = maps[r] + addrs[r]
            for name, _ in extra.params():
                if name not in named[r]:
                    raise EmuUnsupported(f"kernel @{meta.name}: the emulator does not bind "
                                         f"parameter '{name}'")
                ps.append(named[r][name])
            params.append(ps)
        # a fused kernel under cluster launch control: every work index's CTA is launched,
        # sms of them run at a time (the others are cancelled or start as those exit)
        resident = max(1, sms // meta.cluster) if getattr(meta, "clc", False) else None
        run_entry(ck.entry_op, gm, params, world=W, ctas=grid, threads=threads,
                  smem_bytes=meta.smem_bytes, cluster=meta.cluster, target=ck.target,
                  check_races=check_races, max_steps=max_steps, rank_order=rank_order,
                  resident=resident)
        _comm_errors(meta, gm, named, W)
        return _outputs(gm, addrs, types, n_in, W, named, extra)
    grid = meta.grid(max(sms, meta.cluster))
    params = [maps[r] + addrs[r] for r in range(W)]
    # a cluster-launch-control kernel's grid is every tile; sms of them run at a time
    resident = max(1, sms // meta.cluster) if getattr(meta, "clc", False) else None
    run_entry(ck.entry_op, gm, params, world=W, ctas=grid, threads=meta.threads,
              smem_bytes=meta.smem_bytes, cluster=meta.cluster, target=ck.target,
              check_races=check_races, max_steps=max_steps, resident=resident)
    return _outputs(gm, addrs, types, n_in, W, named, None)


def _map_view(tm, types, addrs, named, extra, r: int, es: int) -> tuple[int, list[int]]:
    """(base address, shape) a tensor map of rank ``r`` covers: a kernel buffer's or a
    ``pk.alloc``'s (``tm.alloc``), this rank's or ``tm.peer``'s copy, the whole buffer or
    a window of its rows (``tm.rows`` = [first, count, cols])."""
    owner = r if getattr(tm, "peer", -1) < 0 else tm.peer   # a peer's copy
    if getattr(tm, "alloc", False):
        b = extra.buffers[tm.buffer]
        base = named[r][f"{b.name}_p{owner}"] if b.symmetric else named[r][b.name]
        shape = [b.elements]
    else:
        base, shape = addrs[owner][tm.buffer], list(types[tm.buffer].get_shape())
    dims = getattr(tm, "dims", None)
    if dims:                        # a row-major view of the buffer (pks.tmap_view)
        return base, list(dims)
    rows = getattr(tm, "rows", None)
    if rows:
        first, count, cols = rows
        return base + first * cols * es, [count, cols]
    return base, shape


def _comm_buffers(gm, comm, types, addrs, host, named, W) -> None:
    """A scheduled collective's or fused kernel's own buffers
    (:class:`~pkc.codegen.abi.CommLaunch`, ``FusedLaunch``): each
    symmetric one W times (``<name>_p<d>`` for every rank, ``<name>_own``), each local one
    per rank, zeroed; a symmetric output (``out<i>``) W times; the error record; a
    multicast window (``<name>_mc``, :mod:`pkc.emu.ops_multimem`) per ``multicast`` entry."""
    from pkc.runtime.world import dtype_of

    tdt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32,
           "i32": torch.int32}
    for b in comm.buffers:
        dt = tdt.get(b.dtype) or dtype_of(b.dtype)
        per = []
        for r in range(W):
            x = torch.zeros(b.elements, dtype=dt)
            a = gm.alloc(x.numel() * x.element_size(), b.name, r)
            host.append((a, x))
            per.append(a)
        for r in range(W):
            if b.symmetric:
                for d in range(W):
                    named[r][f"{b.name}_p{d}"] = per[d]
                named[r][f"{b.name}_own"] = per[r]
            else:
                named[r][b.name] = per[r]
    for i in comm.sym_outputs:
        for r in range(W):
            for d in range(W):
                named[r][f"out{i}_p{d}"] = addrs[d][i]
    for r in range(W):
        named[r]["err"] = gm.alloc(32, "error record", r)
    if getattr(comm, "multicast", None):        # NVLS kernels: multicast windows
        from pkc.emu.ops_multimem import bind_multicast
        bind_multicast(gm, comm, named, W)


def _comm_errors(meta, gm, named, W) -> None:
    from pkc.emu.errors import EmuTimeoutRecord

    for r in range(W):
        rec = gm.read_words(named[r]["err"], 8, np.uint32).tolist()
        if rec[0]:
            raise EmuTimeoutRecord(f"kernel @{meta.name}: rank {r} recorded an expired wait "
                                   f"{rec}")


def _outputs(gm, addrs, types, n_in, W, named, comm) -> list[list[torch.Tensor]]:
    from pkc.interp.values import torch_dtype

    return [[gm.read_tensor(addrs[r][i], list(types[i].get_shape()),
                            torch_dtype(types[i].element_type))
             for i in range(n_in, len(types))] for r in range(W)]


def gm_base() -> int:
    from pkc.emu.memory import GLOBAL_BASE
    return GLOBAL_BASE
