"""How a timed-out wait in a hand-written sm_90a kernel reports itself.

Every bounded wait that expires writes, once per launch and rank (the first thread to win
a compare-and-swap on the device error record), the record ``(flag, kind, rank, peer, seen,
wanted, cta, epoch)`` (:data:`ERR_FIELDS`). With a mailbox (a host-mapped pinned slot,
kernel parameter ``mbox``) the record is copied there too, so the host can read it with no
CUDA call at all, even after the context is lost; with ``trap`` set the kernel then traps:
the launch fails and the next synchronization raises, instead of the caller reading
outputs that peers never wrote. Under torch.distributed pkc traps (a peer that never
arrived is a failed job, as with NCCL's watchdog); in the one-GPU virtual world it does not
(tests read the records and keep the context).
"""

from __future__ import annotations

ERR_FIELDS = ("flag", "kind", "rank", "peer", "seen", "wanted", "cta", "epoch")


def emit_timeout_record(p, err: str, mbox: str, trap: str, values: list[str], tag: str) -> None:
    """PTX for the expired-wait path: ``values`` are the 7 fields after ``flag`` (registers
    or immediates); ``err``/``mbox`` u64 registers (mbox may be 0), ``trap`` a u32 register.
    ``tag`` keeps register names apart from the caller's."""
    old, first = p.r32(f"{tag}_eold"), p.pred(f"{tag}_efirst")
    done = p.fresh(f"{tag}_rec")
    p(f"atom.global.cas.b32 {old}, [{err}], 0, 1;")
    p(f"setp.eq.u32 {first}, {old}, 0;")
    p(f"@!{first} bra {done};")
    for i, val in enumerate(values, 1):
        p(f"st.global.u32 [{err}+{4 * i}], {val};")
    nomb = p.pred(f"{tag}_nomb")
    p(f"setp.eq.u64 {nomb}, {mbox}, 0;")
    post = p.fresh(f"{tag}_mbox")
    p(f"@{nomb} bra {post};")
    for i, val in enumerate(values, 1):
        p(f"st.volatile.global.u32 [{mbox}+{4 * i}], {val};")
    p("membar.sys;")
    p(f"st.volatile.global.u32 [{mbox}], 1;")         # the flag last: the record is whole
    p("membar.sys;")
    p.label(post)
    notrap = p.pred(f"{tag}_notrap")
    p(f"setp.eq.u32 {notrap}, {trap}, 0;")
    p(f"@!{notrap} trap;")
    p.label(done)
