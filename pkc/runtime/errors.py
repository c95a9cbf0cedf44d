"""Errors the runtime raises: a CUDA driver call that failed, and a kernel whose bounded
wait timed out (a protocol bug: a signal that never came), decoded from the rank's error
record so that the message names the kernel, the rank, the signal and the op."""

from __future__ import annotations

from pkc.codegen.abi import (
    ERR_CTA,
    ERR_EXPECTED,
    ERR_FLAG,
    ERR_KERNEL,
    ERR_RANK,
    ERR_SEEN,
    ERR_SITE,
    ERR_SLOT,
    ERR_WORKER,
    KernelMeta,
    SiteKind,
)


class RuntimeUnavailable(RuntimeError):
    """No CUDA device, or no cuda-bindings: GPU execution is impossible here."""


class CudaDriverError(RuntimeError):
    def __init__(self, call: str, code: int, name: str):
        super().__init__(f"{call} failed: {name} ({code})")
        self.call, self.code, self.name = call, code, name


class KernelTimeoutError(RuntimeError):
    """A wait (or worker barrier) in a kernel gave up: its signal never reached the
    threshold. Raised on the host after the kernel ended, instead of a hang."""

    def __init__(self, kernel: str, rank: int, message: str, record: list[int]):
        super().__init__(message)
        self.kernel, self.rank, self.record = kernel, rank, record


class PeerTimeoutError(RuntimeError):
    """Peer ranks did not reach a kernel's launch barrier in time (a rank raised, exited or
    never called). The device context is unusable afterwards: CUDA reports the expired
    barrier as a device-side fault."""


def decode_error(meta: KernelMeta, rank: int, record: list[int], timeout_s: float) -> KernelTimeoutError | None:
    """The error described by a rank's error record, or None if the record is clear."""
    if not record[ERR_FLAG]:
        return None
    site_id = record[ERR_SITE]
    site = meta.sites[site_id] if 0 <= site_id < len(meta.sites) else None
    worker = record[ERR_WORKER]
    role = meta.workers[worker].role if 0 <= worker < len(meta.workers) else "?"
    seen, expected, slot = record[ERR_SEEN], record[ERR_EXPECTED], record[ERR_SLOT]
    head = (f"kernel @{meta.name}: rank {record[ERR_RANK]} timed out after {timeout_s:g} s "
            f"(worker {worker} \"{role}\", CTA {record[ERR_CTA]})")
    if site is None:
        body = f"at unknown wait site {site_id}"
    elif site.kind is SiteKind.WAIT:
        body = (f"in {site.where}: signal %{site.signals}[{slot}] is {seen}, it waits until "
                f">= {expected} (a signal that never came: check the producers' pk.signal)")
    elif site.kind is SiteKind.MBARRIER:
        body = (f"in {site.where}: the bulk copies into the tile did not complete "
                f"({expected} bytes expected on the mbarrier)")
    else:
        body = (f"in the worker barrier before/after {site.where}: {seen} of {expected} CTA "
                "arrivals (another CTA of this worker stopped, e.g. on a timed-out wait)")
    if record[ERR_KERNEL] != meta.kernel_id:
        body += f" [record names kernel id {record[ERR_KERNEL]}, expected {meta.kernel_id}]"
    return KernelTimeoutError(meta.name, record[ERR_RANK], f"{head} {body}", list(record))
