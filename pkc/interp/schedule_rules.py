"""The registry of the schedule-level interpreter's op rules (:mod:`pkc.interp.schedule`).

An op type is interpreted by one rule, registered with a decorator:

* :func:`simple`: ``fn(R, a, op, env) -> bool`` runs the op at once on actor ``a`` (one
  warpgroup of one CTA of one rank; ``R`` the :class:`~pkc.interp.schedule.ScheduleRun`)
  and returns True where other actors may now observe something (the scheduler may then
  switch to another actor);
* :func:`blocking`: a generator ``fn(R, a, op, env)`` that yields :data:`BLOCKED` while it
  waits (setting ``a.blocked = (op, "what it waits for")`` so that a deadlock names it) and
  :data:`SWITCH` at points other actors may observe; ops with regions run their blocks
  with ``yield from R.run_block(a, block, env, args)``;
* :func:`kernel_level`: ``fn(R, op, env)`` evaluates an op of the ``pk.kernel`` body
  outside the ``pks.schedule`` (tensor maps), once per run, into ``env``.

Rules live next to the ops they model (:mod:`pkc.interp.schedule_ops` for the GEMM,
:mod:`pkc.interp.schedule_comm` and :mod:`pkc.interp.schedule_fused` for communication);
a module with rules is imported by :mod:`pkc.interp.schedule` (its ``RULE_MODULES``).
An op with no rule is an error naming it, never skipped.
"""

from __future__ import annotations

from collections.abc import Callable


class Blocked:
    """Yielded by an actor whose wait is not satisfied."""


class Switch:
    """Yielded after an op other actors may observe: a point where another actor may run."""


BLOCKED, SWITCH = Blocked(), Switch()

SIMPLE_RULES: dict[type, Callable] = {}
BLOCKING_RULES: dict[type, Callable] = {}
KERNEL_RULES: dict[type, Callable] = {}


def _register(table: dict, types: tuple[type, ...]):
    def deco(fn):
        for t in types:
            for other in (SIMPLE_RULES, BLOCKING_RULES, KERNEL_RULES):
                if t in other and other[t] is not fn:
                    raise ValueError(f"{t.__name__} ({getattr(t, 'name', '?')}) already has an "
                                     f"interpreter rule: {other[t].__qualname__}")
            table[t] = fn
        return fn
    return deco


def simple(*types: type):
    """Registers a rule that never blocks (see the module doc)."""
    return _register(SIMPLE_RULES, types)


def blocking(*types: type):
    """Registers a generator rule: one that may wait or runs regions."""
    return _register(BLOCKING_RULES, types)


def kernel_level(*types: type):
    """Registers a rule for an op of the kernel body outside the schedule."""
    return _register(KERNEL_RULES, types)


__all__ = ["BLOCKED", "SWITCH", "Blocked", "Switch", "simple", "blocking", "kernel_level",
           "SIMPLE_RULES", "BLOCKING_RULES", "KERNEL_RULES"]
