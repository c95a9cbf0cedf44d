"""Errors of the emulator. Each names the kernel and, where one thread (or warp) is at
fault, its rank, CTA, warp and the instruction (PTX text, and the pk op it implements from
the nearest ``ptx.comment``). The classes say which misuse it is, so tests and callers can
tell them apart."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Where:
    """A thread (or the first of a group) at an instruction."""

    kernel: str
    rank: int
    cta: int
    warp: int
    lane: int
    instruction: str
    comment: str = ""

    def __str__(self) -> str:
        s = (f"kernel @{self.kernel}, rank {self.rank}, CTA {self.cta}, warp {self.warp} "
             f"(lane {self.lane}), at {self.instruction}")
        if self.comment:
            s += f" [in: {self.comment}]"
        return s


class EmuError(RuntimeError):
    """Base class: the emulated kernel did something the hardware would not do correctly."""

    def __init__(self, message: str, where: Where | None = None):
        super().__init__(f"{where}: {message}" if where else message)
        self.where = where
        self.detail = message


class EmuUnsupported(EmuError):
    """An instruction (or form of one) the emulator does not model."""


class EmuMemoryError(EmuError):
    """An access outside every allocation (global) or the CTA's shared memory, or
    misaligned."""


class EmuDeadlock(EmuError):
    """Every live thread waits and nothing can change what they wait for."""


class EmuStepLimit(EmuError):
    """The kernel ran more steps than the bound (a wait that keeps polling, a loop that
    does not end)."""


class EmuAsyncProxyError(EmuError):
    """Shared memory read or written across the generic / async proxies without the
    fence or mbarrier wait that orders them."""


class EmuRegisterBudgetError(EmuError):
    """``setmaxnreg`` asks for more registers than the CTA has."""


class EmuRaceError(EmuError):
    """Two ranks access the same bytes, at least one writing, with no release / acquire
    ordering them."""


class EmuWarpError(EmuError):
    """A warp-collective instruction (``mma.sync``, ``wgmma``) executed by part of a warp
    (or warpgroup)."""


class EmuTimeoutRecord(EmuError):
    """The kernel wrote a timeout into its error record (it gave up a bounded wait)."""


class EmuTensorMemoryError(EmuError):
    """Tensor memory (sm_100a) misused: not freed when the CTA exits, read before the MMA
    writing it completed or before ``tcgen05.wait::ld``, addressed outside an allocation
    or a warp's lanes, allocated after the permit was given back."""
