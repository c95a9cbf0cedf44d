"""Bounded waits in the hand-written sm_90a kernels, and how an expired one reports itself.

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

from pkc.codegen.abi import ERR_FIELDS, describe_record  # noqa: F401  (the record's layout)


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


def emit_bounded_wait(p, addr: str, want: str, *, timeout: str, sleep_ns: int, scope: str,
                      gave: str, record: list[str], err: str, mbox: str, trap: str,
                      tag: str) -> None:
    """One thread: wait until (s32)(ld.acquire [addr] - want) >= 0, for at most ``timeout``
    ns (a u64 register); on expiry set the sticky ``gave`` register (every later wait of the
    thread returns at once: a missing peer costs one timeout, not one per wait) and write
    the record (``record``: the 7 fields after the flag; ``want`` and the value seen are
    filled in by the caller's list as it likes)."""
    top, done, late = p.fresh("sw"), p.fresh("sw_ok"), p.fresh("sw_late")
    v, d = p.r32(f"{tag}_sv"), p.r32(f"{tag}_sd")
    dl, now = p.r64(f"{tag}_sdl"), p.r64(f"{tag}_snow")
    ok, pl = p.pred(f"{tag}_sok"), p.pred(f"{tag}_slate")
    pg = p.pred(f"{tag}_pgave")
    p(f"setp.ne.u32 {pg}, {gave}, 0;")
    p(f"@{pg} bra {done};")
    p(f"mov.u64 {dl}, %globaltimer;")
    p(f"add.u64 {dl}, {dl}, {timeout};")
    p.label(top)
    p(f"ld.acquire.{scope}.global.u32 {v}, [{addr}];")
    p(f"sub.s32 {d}, {v}, {want};")
    p(f"setp.ge.s32 {ok}, {d}, 0;")
    p(f"@{ok} bra {done};")
    p(f"mov.u64 {now}, %globaltimer;")
    p(f"setp.gt.u64 {pl}, {now}, {dl};")
    p(f"@{pl} bra {late};")
    p(f"nanosleep.u32 {sleep_ns};")
    p(f"bra {top};")
    p.label(late)
    p(f"mov.u32 {gave}, 1;")
    emit_timeout_record(p, err, mbox, trap, [x if x != "%seen" else v for x in record], tag)
    p.label(done)
