"""Signals, bounded waits, worker barriers, and the timeout record.

* ``pk.signal``: after a ``bar.sync`` (every thread's earlier puts are done), thread 0
  does ``red.release.sys.global.add.u32`` on the peer's counter: release, system scope,
  because the waiter is another GPU (or, in the virtual world, another context).
* ``pk.wait``: thread 0 spins with ``ld.acquire.sys.global.u32`` (``ptx.spin_wait``),
  bounded by ``timeout_ns``; then ``bar.sync`` hands the acquire to the CTA's threads.
* A timeout writes (kernel id, rank, site, slot, expected, seen, worker, CTA) into the
  rank's error record (the first writer wins by CAS), raises a flag in shared memory, and
  the whole CTA exits after the next ``bar.sync``: the host raises an error naming kernel,
  rank and signal, and the GPU never hangs.
* Worker barrier: the CTAs of one worker meet through a counter in the workspace
  (``atom.add.release.sys`` then a bounded ``ld.acquire.sys`` spin until every CTA of this
  generation arrived). Skipped at run time when the worker has one CTA.
"""

from __future__ import annotations

from xdsl.ir import Operation, SSAValue

from pkc.codegen import ptx
from pkc.codegen.abi import (
    ERR_CTA,
    ERR_EXPECTED,
    ERR_KERNEL,
    ERR_RANK,
    ERR_SEEN,
    ERR_SITE,
    ERR_SLOT,
    ERR_WORKER,
    SiteKind,
)
from pkc.codegen.context import WorkerCtx, lowers
from pkc.codegen.smem import HDR_BARRIER_GEN, HDR_TIMEOUT_FLAG
from pkc.dialects import kernel as k


def record_timeout(ctx: WorkerCtx, timed_out: SSAValue, site: int, slot: SSAValue,
                   expected: SSAValue, seen: SSAValue) -> None:
    """Thread 0, on timeout: fill the error record (first one wins), raise the CTA flag."""
    b = ctx.b
    with b.if_(timed_out):
        old = b.r(ptx.AtomOp("cas", "b32", ctx.error, b.u32(0), b.u32(1)))
        with b.if_(b.setp("eq", "u32", old, 0)):
            fields = {ERR_SITE: b.u32(site), ERR_RANK: ctx.rank, ERR_WORKER: b.u32(ctx.worker_index),
                      ERR_CTA: ctx.bid, ERR_SLOT: slot, ERR_EXPECTED: expected, ERR_SEEN: seen,
                      ERR_KERNEL: b.u32(ctx.meta.kernel_id)}
            for word, value in fields.items():
                b.st("global", "u32", b.add64(ctx.error, b.s64(4 * word)), value)
            b.fence("acq_rel.sys")
        b.st("shared", "u32", b.add32(ctx.smem, HDR_TIMEOUT_FLAG), b.u32(1))


def exit_if_timed_out(ctx: WorkerCtx) -> None:
    """After the bar.sync that follows a wait: every thread leaves if the CTA timed out."""
    b = ctx.b
    b.bar()
    flag = b.ld("shared", "u32", b.add32(ctx.smem, HDR_TIMEOUT_FLAG))
    with b.if_(b.setp("ne", "u32", flag, 0)):
        b.add(ptx.ExitOp())


def worker_barrier(ctx: WorkerCtx, op: Operation) -> None:
    """Every CTA of the worker reaches this point before any goes on; orders worker-scope
    code and other CTAs' foreach iterations (see :mod:`pkc.codegen.lower`)."""
    b = ctx.b
    ctx.wrote = ctx.read = False
    site = ctx.site(SiteKind.BARRIER, op)
    with b.if_(b.setp("gt", "u32", ctx.ncta, 1)):
        b.comment(f"worker barrier ({op.name})")
        b.bar()
        with b.if_(ctx.thread0):
            gen_addr = b.add32(ctx.smem, HDR_BARRIER_GEN)
            gen = b.add32(b.ld("shared", "u32", gen_addr), 1)
            b.st("shared", "u32", gen_addr, gen)
            counter = b.add64(ctx.workspace, b.s64(4 * ctx.worker_index))
            b.add(ptx.RedOp("add", "u32", counter, b.u32(1), sem="release", scope="sys"))
            target = b.mul32(gen, ctx.ncta)
            wait = b.add(ptx.SpinWaitOp(counter, target, ctx.timeout, "sys"))
            record_timeout(ctx, wait.timed_out, site, b.u32(0xFFFFFFFF), target, wait.seen)
        exit_if_timed_out(ctx)


def _side_effect_scope(ctx: WorkerCtx):
    """At worker scope, side effects run on the leader CTA only; inside a foreach, on the
    CTA that owns the iteration."""
    from contextlib import nullcontext

    if ctx.in_foreach:
        return nullcontext()
    return ctx.b.if_(ctx.leader)


def _u32_of_index(ctx: WorkerCtx, v: SSAValue) -> SSAValue:
    return ctx.b.cvt("u32", "s64", ctx.index(v))


@lowers(k.SignalOp)
def _signal(ctx: WorkerCtx, op: k.SignalOp) -> None:
    from pkc.codegen.lower import peer_pointer

    b = ctx.b
    sig = ctx.signals(op.signals)
    if not ctx.in_foreach and ctx.read:
        worker_barrier(ctx, op)  # other CTAs' reads come before the release
    b.comment(f"pk.signal {sig.name}: red.release.sys on the peer's counter")
    with _side_effect_scope(ctx):
        b.bar()
        with b.if_(ctx.thread0):
            base = peer_pointer(ctx, sig.param, ctx.index(op.peer))
            addr = b.r(ptx.FmaOp(ctx.index(op.slot), b.s64(4), base, "s64", "mad.lo"))
            b.add(ptx.RedOp("add", "u32", addr, b.u32(op.increment), sem="release", scope="sys"))


@lowers(k.WaitOp)
def _wait(ctx: WorkerCtx, op: k.WaitOp) -> None:
    b = ctx.b
    sig = ctx.signals(op.signals)
    site = ctx.site(SiteKind.WAIT, op, sig.name)
    b.comment(f"pk.wait {sig.name}: bounded ld.acquire.sys spin (site {site})")
    with b.if_(ctx.thread0):
        slot = _u32_of_index(ctx, op.slot)
        expected = _u32_of_index(ctx, op.expected)
        addr = b.r(ptx.FmaOp(ctx.index(op.slot), b.s64(4), sig.own, "s64", "mad.lo"))
        wait = b.add(ptx.SpinWaitOp(addr, expected, ctx.timeout, "sys"))
        record_timeout(ctx, wait.timed_out, site, slot, expected, wait.seen)
    exit_if_timed_out(ctx)
