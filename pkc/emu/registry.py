"""The instruction registry: one handler per ptx op class.

A handler is ``fn(m, ins, g)``: ``m`` the :class:`~pkc.emu.machine.Machine`, ``ins`` the
:class:`~pkc.emu.program.Instr` (its op, operand and result slots), ``g`` the
:class:`~pkc.emu.machine.Group` of threads that execute it now (all at this instruction,
vectorized). It reads operands with ``g.get(slot, type)`` and writes results with
``g.set(slot, values)``. It returns:

* ``None``: every thread of the group is done with the instruction (goes to the next);
* a boolean array over the group: the threads that are done; the others wait at this
  instruction and are polled again when nothing else can run (``mbarrier.try_wait``, a
  spin on a signal). A wait that no thread can ever satisfy is then a deadlock error;
* :data:`BRANCHED`: the handler set the threads' program counters itself.

Adding an instruction is one function::

    @handles(ptx_sm90.ElectOp)
    def _elect(m, ins, g):
        \"\"\"elect.sync (PTX ISA 9.7.13.11): the lowest active lane of each warp.\"\"\"
        ...
"""

from __future__ import annotations

from typing import Callable

HANDLERS: dict[type, Callable] = {}
BRANCHED = object()
# Like BRANCHED, for handlers that only move program counters (the threads stay runnable).
JUMPED = object()


# Checks run when a launch ended (every thread exited): fn(m), raising an EmuError for
# state a kernel must not leave behind (pkc.emu.ops_sm100: tensor memory not freed).
AT_EXIT: list[Callable] = []


def handles(*op_types: type):
    def register(fn):
        for t in op_types:
            HANDLERS[t] = fn
        return fn
    return register


def handler_for(op_type: type) -> Callable | None:
    return HANDLERS.get(op_type)
