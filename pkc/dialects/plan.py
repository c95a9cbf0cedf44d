"""What a scheduling pass writes into a ``pk.kernel``'s ``pk.plan`` that the lowering and
the interpreter read back: which scheduled kernel it is (``pk.plan.schedule``)."""

from __future__ import annotations

from xdsl.dialects.builtin import DictionaryAttr, StringAttr

from pkc.kinds import Kind


class ScheduleKind(Kind):
    """Which scheduled kernel a ``pk.kernel`` with a ``pks.schedule`` is."""

    COLLECTIVE = "collective"    # schedule-collectives
    FUSED = "fused"              # schedule-fused: a GEMM + collective (or all-gather + GEMM)
    MOE = "moe"                  # schedule-moe


def schedule_kind(op) -> ScheduleKind | None:
    """The ``pk.plan.schedule`` of ``pk.kernel`` ``op`` (None: not written); a ValueError
    naming the kernel, the bad value and the valid ones."""
    plan = op.attributes.get("pk.plan")
    value = plan.data.get("schedule") if isinstance(plan, DictionaryAttr) else None
    if value is None:
        return None
    text = value.data if isinstance(value, StringAttr) else value
    return ScheduleKind.parse(text, f"kernel @{op.kernel_name.data}: pk.plan.schedule")
