"""The release of shared-memory stages that tensor-core MMAs read (sm_100a), checked where a
TMA load refills them: the emulator's rule for the empty-barrier protocol of CTA pairs and
of clusters that multicast operands between pairs.

A ``tcgen05.mma`` reads its operands at issue here, but on the GPU it reads them while it
runs, until the ``tcgen05.commit`` that covers it completes (PTX ISA 9.7.16.11.1: the
commit's mbarrier arrival says the MMAs are done with their operands). So a stage is free to
be overwritten only by a thread that has *observed* that: it waited for the phase of an
mbarrier that such a commit arrived on. For a TMA multicast (``.multicast::cluster``), the
issuing thread writes the stage of every receiver, so it must have observed the release of
each receiver's stage (in a cluster of pairs, the commits of both pairs arrive on the
issuer's ``empty[s]``).

Model: every shared-memory byte an MMA reads is *held* by a record of the issuing thread;
the thread's next ``tcgen05.commit`` gives the record its tokens {mbarrier key: the phase
the commit's arrival belongs to}; a TMA load that writes a held byte is an
:class:`~pkc.emu.errors.EmuAsyncProxyError` unless the issuing thread's last successful wait
on one of those mbarriers saw that phase completed (``ops_sm100._seen``). The error names
the receiving CTA and whether the load was a multicast from another CTA.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pkc.emu import ops_sm90
from pkc.emu.errors import EmuAsyncProxyError
from pkc.emu.ops_sm100 import COMMIT_HOOKS, SMEM_READ_HOOKS, _seen


@dataclass
class _Hold:
    thread: int
    tokens: dict = field(default_factory=dict)      # mbarrier key -> phase of the arrival


def _state(m):
    st = m.state.get("smem_holds")
    if st is None:
        st = m.state["smem_holds"] = {
            "ids": np.zeros(m.smem.data.size, dtype=np.int32),   # byte -> record id (0: none)
            "recs": [None],                                      # id -> _Hold
            "open": {},                                          # thread -> [ids] to commit
        }
    return st


def _on_read(m, g, ins, i, flat: np.ndarray, esize: int) -> None:
    st = _state(m)
    t = int(g.idx[i])
    rid = len(st["recs"])
    st["recs"].append(_Hold(t))
    st["open"].setdefault(t, []).append(rid)
    for j in range(esize):
        st["ids"][flat + j] = rid


def _on_commit(m, ins, t: int, keys: list[int]) -> None:
    st = m.state.get("smem_holds")
    if st is None:
        return
    from pkc.emu.ops_async import mbars
    table = mbars(m)
    for rid in st["open"].pop(t, []):
        rec = st["recs"][rid]
        for k in keys:
            rec.tokens.setdefault(k, table[k].phase)


def _on_tma_write(m, ins, g, i, cta: int, byt: np.ndarray) -> None:
    st = m.state.get("smem_holds")
    if st is None:
        return
    ids = st["ids"][byt]
    held = np.unique(ids[ids > 0])
    if held.size == 0:
        return
    t = int(g.idx[i])
    saw = _seen(m).get(t, {})
    src = int(m.cta_of[t])
    where = (f"a multicast from CTA rank {src % m.cluster} refills a stage of CTA rank "
             f"{cta % m.cluster}" if cta != src else "a TMA load refills a stage of its CTA")
    for rid in held.tolist():
        rec = st["recs"][rid]
        if not rec.tokens:
            m.fail(EmuAsyncProxyError, f"{where} that a tcgen05.mma still reads: no "
                   "tcgen05.commit covered the MMA yet (its receiver has not released the "
                   "stage)", g, ins, i)
        if not any(saw.get(k, -1) > ph for k, ph in rec.tokens.items()):
            S = m.smem.size
            bars = ", ".join(f"CTA rank {k // S % m.cluster} shared 0x{k % S:x} phase {ph}"
                             for k, ph in sorted(rec.tokens.items()))
            m.fail(EmuAsyncProxyError, f"{where} that a tcgen05.mma read, before the issuing "
                   "thread waited for the stage's release (a receiver has not released it: "
                   f"the commit covering the MMA arrived on {bars}, and this thread has waited "
                   "for none of those phases)", g, ins, i)
    st["ids"][byt] = 0


def _register() -> None:
    for hooks, fn in ((SMEM_READ_HOOKS, _on_read), (COMMIT_HOOKS, _on_commit),
                      (ops_sm90.TMA_WRITE_CHECKS, _on_tma_write)):
        if fn not in hooks:
            hooks.append(fn)


_register()

__all__: list[str] = []
