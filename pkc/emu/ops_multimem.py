"""Multicast objects and the NVLS instructions (:mod:`pkc.codegen.ptx_multimem`, PTX ISA
9.7.9.16 "multimem").

A multicast address stands for every rank's copy of a symmetric buffer. Here it lies in a
window of its own (:data:`MC_BASE` and up, outside the heap: a plain ``ld`` / ``st`` of it
is an out-of-bounds access, as it is undefined on the GPU), and :func:`bind_multicast`
maps each window onto the W copies when a launch binds ``<name>_mc`` parameters
(:class:`~pkc.codegen.abi.CommLaunch`.multicast). A multimem instruction on an address of
no window is an :class:`~pkc.emu.errors.EmuMemoryError`.

* ``multimem.ld_reduce ... add``: the 16 bytes of every rank's copy, widened to f32, summed
  in rank order 0..W-1 and rounded once (round to nearest even) to the element type. The
  switch's order of addition is not documented; rank order is the reference's (so the
  emulator equals the interpreter bitwise), a real NVSwitch may differ in the last bit.
* ``multimem.st``: the 16 bytes into every rank's copy (a relaxed strong store: checked
  for races as a plain store, the data must be ordered by the kernel's barriers).
* ``multimem.red ... add.u32``: an atomic add on every rank's copy (a relaxed write: after
  a ``fence.acq_rel`` it publishes the thread's clock at each copy, as ``red`` does).

Never run on a GPU here: the lent machines keep NVLink multicast off.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pkc.codegen import ptx_multimem as pm
from pkc.emu import race
from pkc.emu.errors import EmuMemoryError
from pkc.emu.memory import GLOBAL_BASE
from pkc.emu.machine import check_bad
from pkc.emu.ops_memory import active_of, global_offsets, rmw
from pkc.emu.registry import handles
from pkc.emu.values import bf16_to_f32, f32_to_bf16, f32_to_f16

MC_BASE = 1 << 46          # multicast windows start here, far above the heap
MC_ALIGN = 1 << 21         # each window 2 MiB aligned (the granularity of CUDA's objects)


@dataclass
class McObject:
    """One multicast object: ``size`` bytes at ``base``, bound to ``copies[q]`` (rank q)."""

    name: str
    base: int
    size: int
    copies: list[int]


def objects(gm) -> list[McObject]:
    return gm.__dict__.setdefault("multicast", [])


def bind_multicast(gm, comm, named: list[dict], world: int) -> None:
    """A multicast window per entry of ``comm.multicast`` over the W copies already bound
    as ``<name>_p<d>``; every rank's ``<name>_mc`` is the window's address."""
    objs = objects(gm)
    for name in getattr(comm, "multicast", ()):
        copies = [named[0][f"{name}_p{d}"] for d in range(world)]
        size = _alloc_size(gm, copies[0])
        top = max((o.base + o.size for o in objs), default=MC_BASE)
        base = -(-top // MC_ALIGN) * MC_ALIGN
        objs.append(McObject(name, base, size, copies))
        for r in range(world):
            named[r][f"{name}_mc"] = base


def _alloc_size(gm, addr: int) -> int:
    for a in gm.allocs:
        if GLOBAL_BASE + a.offset == addr:
            return a.size
    raise EmuMemoryError(f"multicast object over 0x{addr:x}: no allocation starts there")


def _copies(m, ins, g, size: int, write: bool) -> list[np.ndarray]:
    """Per rank q, the heap offsets in q's copy of ``g``'s ``size``-byte accesses at the
    multicast address operand (checked: inside a window, inside the copy, aligned)."""
    addr = g.get(ins.args[0]).astype(np.uint64).astype(np.int64)
    if getattr(ins.op, "offset", None) is not None:
        addr = addr + int(ins.op.offset.data)
    objs = objects(m.gmem)
    which = np.full(g.n, -1, dtype=np.int64)
    for i, o in enumerate(objs):
        which[(addr >= o.base) & (addr + size <= o.base + o.size)] = i

    def describe(i):
        return (f"{ins.op.name} at 0x{int(addr[i]):x}, which is no multicast address (a "
                "multimem instruction needs the address of a multicast object: pks.mc_ptr)")
    check_bad(m, ins, g, which < 0, EmuMemoryError, describe)
    if len({len(o.copies) for o in objs}) > 1:
        raise EmuMemoryError("multicast objects over different numbers of ranks")
    ranks = len(objs[0].copies)
    out = []
    for q in range(ranks):
        base = np.array([objs[int(w)].copies[q] - objs[int(w)].base for w in which], dtype=np.int64)
        out.append(global_offsets(m, ins, g, (addr + base).astype(np.uint64), size, write))
    return out


def _words(m, off: np.ndarray) -> np.ndarray:
    v = m.gmem.heap.view(np.uint32)
    return np.stack([v[off // 4 + k] for k in range(4)], axis=1)


def _widen(words: np.ndarray, dtype: str) -> np.ndarray:
    """[n, 4] u32 -> [n, 4 * per-word] f32 (the elements in memory order)."""
    if dtype == "f32":
        return words.view(np.float32)
    halves = words.view(np.uint16)          # little endian: element 2k, then 2k + 1
    if dtype == "bf16":
        return bf16_to_f32(halves)
    return halves.view(np.float16).astype(np.float32)


def _narrow(x: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "f32":
        return np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    bits = f32_to_bf16(x) if dtype == "bf16" else f32_to_f16(x)
    return np.ascontiguousarray(bits).view(np.uint32)


@handles(pm.MultimemLdReduceOp)
def _ld_reduce(m, ins, g):
    """Sum over the ranks' copies in rank order, in f32, rounded once (see the module doc)."""
    act, _ = active_of(m, ins, g)
    if act.n == 0:
        return
    dtype = ins.op.dtype.data
    acc = None
    for off in _copies(m, ins, act, 16, False):
        race.check(m, ins, act, off, 16, False)
        x = _widen(_words(m, off), dtype)
        acc = x.copy() if acc is None else (acc + x).astype(np.float32)
    w = _narrow(acc, dtype).reshape(act.n, 4)
    for k, r in enumerate(m.prog.slots[x] for x in ins.op.res):
        act.set(r, w[:, k])


@handles(pm.MultimemStOp)
def _st(m, ins, g):
    """The 16 bytes into every rank's copy."""
    act, _ = active_of(m, ins, g)
    if act.n == 0:
        return
    vals = [act.get(m.prog.slots[x]).view(np.uint32) for x in ins.op.values]
    heap = m.gmem.heap.view(np.uint32)
    for off in _copies(m, ins, act, 16, True):
        race.check(m, ins, act, off, 16, True)
        for k, v in enumerate(vals):
            heap[off // 4 + k] = v


@handles(pm.MultimemRedOp)
def _red(m, ins, g):
    """``add.u32`` on every rank's copy, serialized per address."""
    act, _ = active_of(m, ins, g)
    if act.n == 0:
        return
    add = act.get(ins.args[1]).astype(np.uint32)
    cl = race.clocks(m)
    for keys in _copies(m, ins, act, 4, True):
        race.check(m, ins, act, keys, 4, True, atomic=True)
        rmw(lambda k: m.gmem.load(k, 4), lambda k, v: m.gmem.store(k, 4, v), keys,
            lambda old, sel: (old.view(np.uint32) + add[sel]).astype(np.uint32))
        cl.relaxed_write(act.idx, act.rank, keys)
