"""Handlers of the asynchronous and waiting instructions: mbarriers, bulk copies
(``cp.async.bulk``), the bounded spin on a signal, and the proxy rules between them.

An mbarrier (PTX ISA 9.7.13.15) lives at a shared address of a CTA: an expected arrival
count, the arrivals still pending in the current phase, a transaction count (bytes), and
the number of completed phases. A phase completes when its pending arrivals and its
transaction count both reach zero; then the next phase starts with the expected count.
A state token (``mbarrier.arrive``'s result) is the phase it was taken in; a wait on it
is satisfied once that phase completed.

Bulk copies complete when issued (their bytes land and ``complete_tx`` is counted at
once); what the hardware leaves in flight is tracked instead, so that code which would
read data before it is there is an error, not a lucky pass:

* bytes an async-proxy copy writes into shared memory are *pending* on its mbarrier until
  a thread of that CTA waits on the mbarrier successfully; a generic access to them
  before is an :class:`~pkc.emu.errors.EmuAsyncProxyError`;
* bytes a thread wrote with generic stores are *dirty* until that thread executes
  ``fence.proxy.async`` (PTX ISA 9.7.13.4, proxy fences); an async-proxy copy that reads or
  overwrites dirty bytes is an error.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pkc.codegen import ptx
from pkc.emu import race
from pkc.emu.errors import EmuAsyncProxyError, EmuError, EmuMemoryError
from pkc.emu.machine import EXPLAIN, check_bad
from pkc.emu.memory import GLOBAL_BASE, ranges
from pkc.emu.ops_memory import active_of, rmw
from pkc.emu.registry import handles
from pkc.emu.values import bf16_to_f32, f32_to_bf16, f32_to_f16


@dataclass
class Mbar:
    expected: int
    pending: int
    tx: int = 0
    phase: int = 0     # completed phases

    def settle(self) -> bool:
        """Completes the phase if it is done; whether it did."""
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = self.expected
            return True
        return False


def mbars(m) -> dict[int, Mbar]:
    return m.state.setdefault("mbarriers", {})


def mbar_keys(m, ins, g, addr: np.ndarray) -> np.ndarray:
    """Flat shared indices of the mbarriers at ``addr`` (8-byte aligned objects)."""
    flat, target, bad = m.smem.flat(g.cta, addr, 8, m.cluster_base_of[g.idx] if m.cluster > 1
                                    else None)
    check_bad(m, ins, g, bad, EmuMemoryError,
              lambda i: f"mbarrier address 0x{int(addr[i]):x} is outside the CTA's "
                        f"{m.smem.declared} bytes of shared memory or not 8-byte aligned")
    return flat


def get_mbar(m, ins, g, key: int, i: int) -> Mbar:
    mb = mbars(m).get(key)
    if mb is None:
        m.fail(EmuError, f"mbarrier at shared 0x{key % m.smem.size:x} used before "
                         "mbarrier.init", g, ins, i)
    return mb


def arrive(m, ins, g, keys: np.ndarray, tx: np.ndarray | None = None, count=None) -> np.ndarray:
    """Each thread of ``g`` arrives once (``count``: arrivals per thread) on its mbarrier,
    after adding ``tx`` bytes to the expected transactions; returns the state tokens."""
    tokens = np.zeros(g.n, dtype=np.uint64)
    uniq, first, inv = np.unique(keys, return_index=True, return_inverse=True)
    for j, key in enumerate(uniq.tolist()):
        sel = inv == j
        mb = get_mbar(m, ins, g, key, int(first[j]))
        tokens[sel] = mb.phase
        if tx is not None:
            mb.tx += int(tx[sel].astype(np.int64).sum())
        n = int(sel.sum()) if count is None else int(np.asarray(count)[sel].sum())
        if n > mb.pending:
            m.fail(EmuError, f"{n} arrivals on an mbarrier with {mb.pending} pending in its "
                             f"phase {mb.phase} (expected count {mb.expected}): more threads "
                             "arrive than it was initialized for", g, ins, int(first[j]))
        mb.pending -= n
        mb.settle()
    return tokens


def complete_tx(m, key: int, nbytes: int) -> None:
    mb = mbars(m).get(key)
    if mb is None:
        raise EmuError(f"kernel @{m.kernel}: a bulk copy completes on shared 0x"
                       f"{key % m.smem.size:x}, which is not an initialized mbarrier")
    mb.tx -= nbytes
    mb.settle()


def observed(m, g, keys: np.ndarray) -> None:
    """A successful wait: the CTA may now read what async copies completed there."""
    S = m.smem.size
    for key in np.unique(keys).tolist():
        c = key // S
        pend = m.smem.pending[c * S:(c + 1) * S]
        pend[pend == (key % S) + 1] = 0
        if m.cluster > 1:   # bytes a pair peer's copy counted here (.cta_group::2 TMA)
            base = c - c % m.cluster
            pend = m.smem.pending[base * S:(base + m.cluster) * S]
            pend[pend == -(key + 1)] = 0


@handles(ptx.MbarrierOp)
def _mbarrier(m, ins, g):
    """``mbarrier.init`` (PTX ISA 9.7.13.15.9), ``mbarrier.expect_tx`` (9.7.13.15.11),
    ``mbarrier.arrive{.expect_tx}`` (9.7.13.15.13)."""
    op = ins.op.op.data
    keys = mbar_keys(m, ins, g, g.get(ins.args[0]))
    b = g.get(ins.args[1]) if len(ins.args) > 1 else None
    if op == "init":
        for key, n in zip(keys.tolist(), b.astype(np.int64).tolist()):
            mbars(m)[key] = Mbar(n, n)
        return
    if op == "expect_tx":
        uniq, inv = np.unique(keys, return_inverse=True)
        for j, key in enumerate(uniq.tolist()):
            get_mbar(m, ins, g, key, int(np.flatnonzero(inv == j)[0])).tx += \
                int(b[inv == j].astype(np.int64).sum())
        return
    if op in ("arrive", "arrive_expect_tx"):
        tokens = arrive(m, ins, g, keys, b if op == "arrive_expect_tx" else None)
        g.set(ins.res[0], tokens)
        return
    raise EmuError(f"mbarrier op '{op}' is not modelled", g.where(ins))


@handles(ptx.MbarrierWaitOp)
def _mbarrier_wait(m, ins, g):
    """The bounded ``mbarrier.try_wait`` loop (PTX ISA 9.7.13.15.16): done once the phase
    of the state token completed; never times out here (a wait nothing can satisfy is a
    deadlock error instead)."""
    keys = mbar_keys(m, ins, g, g.get(ins.args[0]))
    token = g.get(ins.args[1]).astype(np.int64)
    table = mbars(m)
    phase = np.array([table[k].phase if k in table else -1 for k in keys.tolist()])
    if (phase < 0).any():
        get_mbar(m, ins, g, int(keys[np.flatnonzero(phase < 0)[0]]), int(np.flatnonzero(phase < 0)[0]))
    done = phase > token
    g.set(ins.res[0], np.zeros(g.n, dtype=bool))
    if done.any():
        observed(m, g, keys[done])
    return done


def _explain_mbar(m, ins, g):
    key = int(mbar_keys(m, ins, g, g.get(ins.args[0]))[0])
    mb = mbars(m).get(key)
    if mb is None:
        return "mbarrier not initialized"
    return (f"mbarrier at shared 0x{key % m.smem.size:x}: phase {mb.phase}, {mb.pending} of "
            f"{mb.expected} arrivals pending, {mb.tx} transaction bytes outstanding")


EXPLAIN[ptx.MbarrierWaitOp] = _explain_mbar


@handles(ptx.SpinWaitOp)
def _spin_wait(m, ins, g):
    """The bounded spin (``ld.acquire.<scope>.global.u32`` until >= expected, PTX ISA
    9.7.9.8 and 8.8 acquire patterns): done where the counter reached the threshold; the
    acquire joins the signaller's clock (race check). Never times out here."""
    addr = g.get(ins.args[0])
    from pkc.emu.ops_memory import global_offsets
    off = global_offsets(m, ins, g, addr, 4, False)
    seen = m.gmem.load(off, 4)
    expected = g.get(ins.args[1], "u32")
    done = seen >= expected
    g.set(ins.res[0], seen)
    g.set(ins.res[1], np.zeros(g.n, dtype=bool))
    if done.any():
        race.clocks(m).acquire(g.rank[done], off[done])
    return done


def _explain_spin(m, ins, g):
    addr = int(g.get(ins.args[0])[0])
    seen = int(m.gmem.load(np.array([addr - GLOBAL_BASE]), 4)[0])
    return (f"the u32 at {m.gmem.locate(addr)} is {seen}; it waits until >= "
            f"{int(g.get(ins.args[1], 'u32')[0])} (a signal no one sends)")


EXPLAIN[ptx.SpinWaitOp] = _explain_spin


# ---------------------------------------------------------------------------------------
# Bulk copies.

def global_range(m, ins, g, addr: np.ndarray, nbytes: np.ndarray, what: str) -> np.ndarray:
    """Heap offsets of [addr, addr + nbytes) ranges, each inside one allocation."""
    gm = m.gmem
    off = addr.astype(np.uint64).view(np.int64) - GLOBAL_BASE
    i = np.searchsorted(gm.starts, off, side="right") - 1
    ic = np.maximum(i, 0)
    bad = (i < 0) | (off + nbytes.astype(np.int64) > gm.ends[ic])
    check_bad(m, ins, g, bad, EmuMemoryError,
              lambda j: f"{what} of {int(nbytes[j])} bytes at global 0x{int(addr[j]):x} leaves "
                        f"its allocation ({gm.locate(int(addr[j]))})")
    return off


def shared_range(m, ins, g, addr: np.ndarray, nbytes: np.ndarray, what: str) -> np.ndarray:
    flat, target, bad = m.smem.flat(g.cta, addr, 1, m.cluster_base_of[g.idx] if m.cluster > 1
                                    else None)
    end = (addr.astype(np.int64) & 0xFFFFFF) + nbytes.astype(np.int64)
    bad = bad | (end > m.smem.declared)
    check_bad(m, ins, g, bad, EmuMemoryError,
              lambda j: f"{what} of {int(nbytes[j])} bytes at shared 0x{int(addr[j]):x} ends past "
                        f"the CTA's {m.smem.declared} bytes of shared memory")
    return flat


def check_async_reads_smem(m, ins, g, byt: np.ndarray, owner: np.ndarray, what: str) -> None:
    """An async-proxy access of shared bytes ``byt`` (``owner[k]``: index in the group):
    generic writes there must have been fenced."""
    dirty = m.smem.dirty[byt]
    if dirty.any():
        k = int(np.flatnonzero(dirty)[0])
        m.fail(EmuAsyncProxyError,
               f"{what} accesses shared memory (byte 0x{int(byt[k]) % m.smem.size:x}) that thread "
               f"{int(dirty[k]) - 1} of this CTA wrote with generic stores and did not order with "
               "fence.proxy.async before it", g, ins, int(owner[k]))


def _check_16(m, ins, g, addr, n, what):
    bad = (addr.astype(np.uint64) % np.uint64(16) != 0) | (n.astype(np.int64) % 16 != 0)
    check_bad(m, ins, g, bad, EmuMemoryError,
              lambda j: f"{what}: address 0x{int(addr[j]):x} and size {int(n[j])} must be "
                        "multiples of 16 (PTX ISA 9.7.9.25)")


@handles(ptx.CpAsyncBulkLoadOp)
def _bulk_load(m, ins, g):
    """``cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes`` (PTX ISA
    9.7.9.25.4.1): copies global -> shared and counts the bytes on the mbarrier."""
    act, _ = active_of(m, ins, g)
    if act.n == 0:
        return
    dst, src = act.get(ins.args[0]), act.get(ins.args[1])
    n = act.get(ins.args[2]).astype(np.int64)
    mbar = act.get(ins.args[3])
    _check_16(m, ins, act, dst, n, "cp.async.bulk")
    _check_16(m, ins, act, src, n, "cp.async.bulk")
    goff = global_range(m, ins, act, src, n, "bulk copy source")
    sflat = shared_range(m, ins, act, dst, n, "bulk copy destination")
    keys = mbar_keys(m, ins, act, mbar)
    owner = np.repeat(np.arange(act.n), n)
    sb, gb = ranges(sflat, n), ranges(goff, n)
    check_async_reads_smem(m, ins, act, sb, owner, "cp.async.bulk (async proxy)")
    if m.check_races:
        _race_bytes(m, ins, act, goff, n, write=False)
    m.smem.data[sb] = m.gmem.heap[gb]
    m.smem.pending[sb] = np.repeat((keys % m.smem.size + 1).astype(np.int32), n)
    for key, nb in zip(keys.tolist(), n.tolist()):
        complete_tx(m, key, nb)


def _race_bytes(m, ins, g, off, n, write, atomic=False):
    """Race check of the bytes of variable-length copies."""
    race.check(m, ins, g, ranges(off, n), 1, write, atomic, owner=np.repeat(np.arange(g.n), n))


_REDUCE_T = {"add.f32": "f32", "add.noftz.bf16": "bf16", "add.noftz.f16": "f16",
             "add.bf16": "bf16", "add.f16": "f16", "add.u32": "u32", "add.s32": "s32",
             "add.u64": "u64"}


def reduce_add(m, keys_bytes: np.ndarray, vals_bits: np.ndarray, t: str) -> None:
    """Element-wise atomic add of ``vals_bits`` (element bits) into the heap at byte offsets
    ``keys_bytes`` (element starts), rounding to ``t`` after each add."""
    size = {"f32": 4, "bf16": 2, "f16": 2, "u32": 4, "s32": 4, "u64": 8}[t]
    u = {2: np.uint16, 4: np.uint32, 8: np.uint64}[size]

    def num(b):
        if t == "bf16":
            return bf16_to_f32(b)
        if t == "f16":
            return b.view(np.float16).astype(np.float32)
        return b.view({"f32": np.float32, "u32": np.uint32, "s32": np.int32, "u64": np.uint64}[t])

    def back(x):
        if t == "bf16":
            return f32_to_bf16(x)
        if t == "f16":
            return f32_to_f16(x)
        return x.astype(num(np.zeros(1, dtype=u)).dtype).view(u)

    v = num(vals_bits.view(u))

    def update(old, sel):
        with np.errstate(all="ignore"):
            return back(num(old) + v[sel])
    rmw(lambda k: m.gmem.load(k, size), lambda k, x: m.gmem.store(k, size, x), keys_bytes, update)


@handles(ptx.CpAsyncBulkStoreOp)
def _bulk_store(m, ins, g):
    """``cp.async.bulk.global.shared::cta.bulk_group`` (PTX ISA 9.7.9.25.4.1) and
    ``cp.reduce.async.bulk ... .add`` (9.7.9.25.4.2, element-wise atomic add)."""
    act, _ = active_of(m, ins, g)
    if act.n == 0:
        return
    dst, src = act.get(ins.args[0]), act.get(ins.args[1])
    n = act.get(ins.args[2]).astype(np.int64)
    red = ins.op.reduce.data if ins.op.reduce is not None else None
    _check_16(m, ins, act, dst, n, "cp.async.bulk")
    _check_16(m, ins, act, src, n, "cp.async.bulk")
    goff = global_range(m, ins, act, dst, n, "bulk copy destination")
    sflat = shared_range(m, ins, act, src, n, "bulk copy source")
    owner = np.repeat(np.arange(act.n), n)
    sb, gb = ranges(sflat, n), ranges(goff, n)
    check_async_reads_smem(m, ins, act, sb, owner, "cp.async.bulk store (async proxy)")
    for i, t in enumerate(act.idx.tolist()):
        start_async_read(m, t, sb[owner == i])
    if m.check_races:
        _race_bytes(m, ins, act, goff, n, write=True, atomic=red is not None)
    if red is None:
        m.gmem.heap[gb] = m.smem.data[sb]
        return
    t = _REDUCE_T.get(red)
    if t is None:
        m.fail(EmuError, f"cp.reduce.async.bulk .{red} is not modelled", act, ins)
    size = 4 if t in ("f32", "u32", "s32") else (8 if t == "u64" else 2)
    starts = gb[::size]
    vals = m.smem.data[sb].view({2: np.uint16, 4: np.uint32, 8: np.uint64}[size])
    reduce_add(m, starts, vals, t)


def bulk_groups(m) -> dict:
    """{thread: [byte arrays of each committed group ..., the open group]} of the bulk /
    TMA stores a thread issued whose shared-memory reads no wait_group retired."""
    return m.state.setdefault("bulk_groups", {})


def start_async_read(m, thread: int, byt: np.ndarray) -> None:
    """A bulk / TMA store by ``thread`` reads shared bytes ``byt`` until its group is
    waited on."""
    m.smem.reading[byt] = thread + 1
    bulk_groups(m).setdefault(thread, [[]])[-1].append(byt)


@handles(ptx.BulkGroupOp)
def _bulk_group(m, ins, g):
    """``cp.async.bulk.commit_group`` / ``wait_group{.read} N`` (PTX ISA 9.7.9.25.6.1-2):
    the copies are complete when issued; a wait retires all but the N most recent
    committed groups of the thread, after which their shared memory may be written."""
    act, _ = active_of(m, ins, g)
    table = bulk_groups(m)
    for t in act.idx.tolist():
        groups = table.get(t)
        if groups is None:
            continue
        if ins.op.wait is None:
            groups.append([])
            continue
        keep = ins.op.wait.data
        committed = groups[:-1]
        done = committed[:len(committed) - keep] if keep else committed
        for grp in done:
            for byt in grp:
                r = m.smem.reading[byt]
                m.smem.reading[byt] = np.where(r == t + 1, 0, r)
        table[t] = (committed[len(committed) - keep:] if keep else []) + [groups[-1]]
