"""Handlers of memory instructions: ``ld``, ``st``, ``red``, ``atom``, fences, ``bar.sync``
and the bf16 CAS-loop group; the address checks they share.

Memory is sequentially consistent in the emulator: an instruction's effect is visible to
every later step. What the PTX memory model leaves to synchronization is checked instead
(:mod:`pkc.emu.race` between ranks; the proxy rules in :mod:`pkc.emu.ops_async`)."""

from __future__ import annotations

import numpy as np

from pkc.codegen import ptx
from pkc.emu import race
from pkc.emu.errors import EmuAsyncProxyError, EmuMemoryError, EmuUnsupported
from pkc.emu.machine import check_bad
from pkc.emu.memory import GLOBAL_BASE
from pkc.emu.registry import BRANCHED, handles
from pkc.emu.values import TYPE_DTYPE, bf16_to_f32, f32_to_bf16, f32_to_f16, size_of

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _opt_slot(m, v):
    return None if v is None else m.prog.slots[v]


def _slots(m, ins, *names):
    """Slots of the op's named (optional) operands, computed once per instruction."""
    key = "slots:" + ",".join(names)
    s = ins.cache.get(key)
    if s is None:
        s = ins.cache[key] = [_opt_slot(m, getattr(ins.op, n)) for n in names]
    return s


def active_of(m, ins, g, guard_name: str = "guard"):
    """The sub-group whose guard predicate holds (the group itself without a guard)."""
    (gs,) = _slots(m, ins, guard_name)
    if gs is None:
        return g, None
    p = g.get(gs)
    return (g if p.all() else g.sub(p)), p


# ---------------------------------------------------------------------------------------
# Address checks.

def global_offsets(m, ins, g, addr: np.ndarray, size: int, write: bool) -> np.ndarray:
    """Heap offsets of ``g``'s accesses, or an EmuMemoryError for the first bad one."""
    off, bad = m.gmem.offsets(addr, size)

    def describe(i):
        a = int(addr[i])
        what = "store to" if write else "load from"
        if a % size:
            return f"misaligned {what} global address 0x{a:x} ({size}-byte access)"
        return f"out-of-bounds {what} global address 0x{a:x}: {m.gmem.locate(a)}"
    check_bad(m, ins, g, bad, EmuMemoryError, describe)
    return off


def shared_flat(m, ins, g, addr: np.ndarray, size: int, write: bool, proxy: str = "generic"):
    """Flat shared-memory byte indices of ``g``'s accesses (checked)."""
    flat, target, bad = m.smem.flat(g.cta, addr, size, m.cluster_base_of[g.idx] if m.cluster > 1
                                    else None)

    def describe(i):
        a = int(addr[i])
        return (f"out-of-bounds {'store to' if write else 'load from'} shared address 0x{a:x} "
                f"({size} bytes): the CTA has {m.smem.declared} bytes of dynamic shared memory"
                + (" (misaligned)" if a % size else ""))
    check_bad(m, ins, g, bad, EmuMemoryError, describe)
    if proxy == "generic":
        pend = m.smem.pending[flat]
        if size > 1:
            pend = pend | m.smem.pending[flat + size - 1]
        if pend.any():
            i = int(np.flatnonzero(pend)[0])
            m.fail(EmuAsyncProxyError,
                   f"generic {'store to' if write else 'load from'} shared address "
                   f"0x{int(addr[i]):x} that an async-proxy copy (cp.async.bulk / TMA) writes "
                   f"and whose mbarrier (at shared 0x{int(pend[i]) - 1:x}) this CTA has not "
                   "waited on: wait for the mbarrier phase before touching the data", g, ins, i)
        if write:
            busy = m.smem.reading[flat] | m.smem.reading[flat + size - 1]
            if busy.any():
                i = int(np.flatnonzero(busy)[0])
                m.fail(EmuAsyncProxyError,
                       f"generic store to shared address 0x{int(addr[i]):x} that a bulk / TMA "
                       "store still reads (its bulk group was not waited on with "
                       "cp.async.bulk.wait_group.read)", g, ins, i)
            tid1 = (g.tid + 1).astype(np.int16)
            for k in range(size):
                m.smem.dirty[flat + k] = tid1
    return flat


def _load_shared(m, flat: np.ndarray, size: int) -> np.ndarray:
    if size == 1:
        return m.smem.data[flat]
    return m.smem.data.view(_UINT[size])[flat // size]


def _store_shared(m, flat: np.ndarray, size: int, bits: np.ndarray) -> None:
    if size == 1:
        m.smem.data[flat] = bits.astype(np.uint8)
    else:
        m.smem.data.view(_UINT[size])[flat // size] = bits


def _bits(x: np.ndarray, size: int) -> np.ndarray:
    """The low ``size`` bytes of register values, as unsigned ints."""
    u = x.view(_UINT[x.dtype.itemsize]) if x.dtype.kind != "b" else x.astype(np.uint8)
    return u.astype(_UINT[size]) if u.dtype.itemsize != size else u


# ---------------------------------------------------------------------------------------
# ld / st.

def _strong(op) -> bool:
    return op.sem is not None and op.sem.data != "weak"


@handles(ptx.LdOp)
def _ld(m, ins, g):
    """``ld{.sem}{.scope}.<space>.<type>`` (PTX ISA 9.7.9.8); a guarded load keeps
    ``other`` where the guard fails (the printer's ``mov`` + ``@p ld``). ``.acquire``
    is an acquire for the race check (PTX ISA 8.8)."""
    op = ins.op
    t, space = op.type.data, op.space.data
    size = size_of(t)
    (os_,) = _slots(m, ins, "other")
    act, p = active_of(m, ins, g)
    if p is not None:
        g.set(ins.res[0], g.get(os_))
    if act.n == 0:
        return
    addr = act.get(ins.args[0])
    if space.startswith("shared"):
        flat = shared_flat(m, ins, act, addr, size, False)
        bits = _load_shared(m, flat, size)
    elif space == "global":
        off = global_offsets(m, ins, act, addr, size, False)
        sem = op.sem.data if op.sem is not None else None
        if sem is None or sem == "weak":
            race.check(m, ins, act, off, size, False)
        elif sem == "acquire":
            race.clocks(m).acquire(act.rank, off)
        elif sem == "relaxed":
            race.clocks(m).relaxed_read(act.idx, off)
        bits = m.gmem.load(off, size)
    else:
        raise EmuUnsupported(f"ld.{space}", g.where(ins))
    act.set(ins.res[0], bits.view(TYPE_DTYPE[t]))


@handles(ptx.StOp)
def _st(m, ins, g):
    """``st{.sem}{.scope}.<space>.<type>`` (PTX ISA 9.7.9.10); ``.release`` publishes the
    rank's clock (race check)."""
    op = ins.op
    t, space = op.type.data, op.space.data
    size = size_of(t)
    act, _ = active_of(m, ins, g)
    if act.n == 0:
        return
    addr = act.get(ins.args[0])
    bits = _bits(act.get(ins.args[1]), size)
    if space.startswith("shared"):
        flat = shared_flat(m, ins, act, addr, size, True)
        _store_shared(m, flat, size, bits)
    elif space == "global":
        off = global_offsets(m, ins, act, addr, size, True)
        sem = op.sem.data if op.sem is not None else None
        if sem in ("release", "relaxed"):
            c = race.clocks(m)
            race.check(m, ins, act, off, size, True, atomic=True)
            if sem == "release":
                c.release(act.rank, off)
            else:
                c.relaxed_write(act.idx, act.rank, off)
        else:
            race.check(m, ins, act, off, size, True)
        m.gmem.store(off, size, bits)
    else:
        raise EmuUnsupported(f"st.{space}", g.where(ins))


# ---------------------------------------------------------------------------------------
# Atomics.

def _num(bits: np.ndarray, t: str) -> np.ndarray:
    if t == "bf16":
        return bf16_to_f32(bits)
    if t == "f16":
        return bits.view(np.float16).astype(np.float32)
    return bits.view(TYPE_DTYPE[t])


def _unnum(x: np.ndarray, t: str, size: int) -> np.ndarray:
    if t == "bf16":
        return f32_to_bf16(x)
    if t == "f16":
        return f32_to_f16(x)
    return np.asarray(x).astype(TYPE_DTYPE[t]).view(_UINT[size])


def _combine(opname: str, t: str, old, b, c=None):
    base = opname.split(".")[0]
    with np.errstate(all="ignore"):
        if base == "add":
            return old + b
        if base == "min":
            return np.minimum(old, b)
        if base == "max":
            return np.maximum(old, b)
        if base == "and":
            return old & b
        if base == "or":
            return old | b
        if base == "xor":
            return old ^ b
        if base == "exch":
            return b
        if base == "cas":
            return np.where(old == b, c, old)
        if base == "inc":
            return np.where(old >= b, 0, old + 1).astype(old.dtype)
        if base == "dec":
            return np.where((old == 0) | (old > b), b, old - 1).astype(old.dtype)
    raise KeyError(base)


def rmw(load, store, keys: np.ndarray, update) -> np.ndarray:
    """Read-modify-write at ``keys`` (duplicates allowed), one thread after another where
    keys repeat (atomics are serialized per address): rounds of the first occurrence of
    each remaining key. ``update(old, sel)`` -> new for the threads ``sel``. Returns the
    old value each thread saw."""
    n = keys.size
    olds = None
    left = np.arange(n)
    while left.size:
        _, first = np.unique(keys[left], return_index=True)
        sel = left[np.sort(first)]
        old = load(keys[sel])
        if olds is None:
            olds = np.zeros(n, dtype=old.dtype)
        olds[sel] = old
        store(keys[sel], update(old, sel))
        keep = np.ones(left.size, dtype=bool)
        keep[np.sort(first)] = False
        left = left[keep]
    return olds if olds is not None else np.zeros(0)


def _atomic(m, ins, g, has_result: bool):
    op = ins.op
    t, space, opname = op.type.data, op.space.data, op.op.data
    size = size_of(t)
    if has_result:
        act, p = g, None
    else:
        act, p = active_of(m, ins, g)
    if act.n == 0:
        return
    addr = act.get(ins.args[0])
    b = _num(_bits(act.get(ins.args[1]), size), t)
    c = _num(_bits(act.get(ins.args[2]), size), t) if opname == "cas" else None
    if space.startswith("shared"):
        keys = shared_flat(m, ins, act, addr, size, True)
        load = lambda k: _load_shared(m, k, size)  # noqa: E731
        store = lambda k, v: _store_shared(m, k, size, v)  # noqa: E731
    elif space == "global":
        keys = global_offsets(m, ins, act, addr, size, True)
        race.check(m, ins, act, keys, size, True, atomic=True)
        sem = op.sem.data if op.sem is not None else None
        cl = race.clocks(m)
        if sem in ("acquire", "acq_rel"):
            cl.acquire(act.rank, keys)
        load = lambda k: m.gmem.load(k, size)  # noqa: E731
        store = lambda k, v: m.gmem.store(k, size, v)  # noqa: E731
    else:
        raise EmuUnsupported(f"{op.name} .{space}", g.where(ins))

    def update(old_bits, sel):
        old = _num(old_bits, t)
        return _unnum(_combine(opname, t, old, b[sel], None if c is None else c[sel]), t, size)
    olds = rmw(load, store, keys, update)
    if space == "global":
        sem = op.sem.data if op.sem is not None else None
        if sem in ("release", "acq_rel"):
            cl.release(act.rank, keys)
        elif sem in (None, "relaxed"):
            cl.relaxed_write(act.idx, act.rank, keys)
    if has_result:
        act.set(ins.res[0], olds.view(TYPE_DTYPE[t]) if t not in ("bf16",) else olds)


@handles(ptx.RedOp)
def _red(m, ins, g):
    """``red{.sem}{.scope}.<space>.<op>.<type>`` (PTX ISA 9.7.13.6): an atomic update,
    serialized per address; bf16/f16 ``add.noftz`` round to the element type after each
    add."""
    _atomic(m, ins, g, has_result=False)


@handles(ptx.AtomOp)
def _atom(m, ins, g):
    """``atom{.sem}{.scope}.<space>.<op>.<type>`` (PTX ISA 9.7.13.5): returns the old
    value; ``cas`` stores c where the old value equals b."""
    _atomic(m, ins, g, has_result=True)


@handles(ptx.AtomicAddCas16Op)
def _add_cas16(m, ins, g):
    """The CAS loop that adds an f32 into a bf16/f16 element (its PTX is ``atom.cas.b32``
    on the containing word, PTX ISA 9.7.13.5): emulated as the atomic it implements,
    widen, ``add.rn.f32``, round once to the element type."""
    t = ins.op.type.data
    act, _ = active_of(m, ins, g)
    if act.n == 0:
        return
    addr = act.get(ins.args[0])
    v = act.get(ins.args[1]).view(np.float32)
    keys = global_offsets(m, ins, act, addr, 2, True)
    race.check(m, ins, act, keys, 2, True, atomic=True)

    def update(old_bits, sel):
        with np.errstate(all="ignore"):
            return _unnum(_num(old_bits, t) + v[sel], t, 2)
    rmw(lambda k: m.gmem.load(k, 2), lambda k, x: m.gmem.store(k, 2, x), keys, update)


# ---------------------------------------------------------------------------------------
# Fences and barriers.

@handles(ptx.FenceOp)
def _fence(m, ins, g):
    """``fence.*`` / ``membar.*`` (PTX ISA 9.7.13.4). ``fence.proxy.async`` orders this
    thread's earlier generic shared-memory writes before later async-proxy accesses
    (clears them for the proxy check); ``fence.acq_rel`` / ``fence.sc`` / ``membar``
    make relaxed accesses around them a release / acquire (race check)."""
    kind = ins.op.kind.data
    if kind.startswith("proxy.async") and "global" not in kind:
        _clear_dirty(m, g)
    elif kind.startswith(("acq_rel", "sc", "membar")):
        race.clocks(m).fence(g.idx, g.rank)


def _clear_dirty(m, g) -> None:
    S = m.smem.size
    T = m.threads
    for c in np.unique(g.cta).tolist():
        fenced = np.zeros(T + 1, dtype=bool)
        fenced[g.tid[g.cta == c] + 1] = True
        d = m.smem.dirty[c * S:(c + 1) * S]
        d[fenced[d]] = 0


@handles(ptx.BarSyncOp)
def _bar_sync(m, ins, g):
    """``bar.sync a{, b}`` (PTX ISA 9.7.13.1): the threads wait until every live thread of
    the CTA (or ``b`` threads) arrived at barrier ``a``."""
    b = ins.op.barrier.data
    count = getattr(ins.op, "count", None)
    m.at_bar[g.idx] = b
    if count is not None:
        n = count.data if hasattr(count, "data") else int(count)
        for c in np.unique(g.cta).tolist():
            m.bar_count[(c, b)] = n
    m.release_barriers(np.unique(g.cta))
    return BRANCHED
