"""A ``ptx.entry`` flattened into a list of instructions the emulator steps through.

The structured ops become branches, as the printer (:mod:`pkc.codegen.printer`) turns them
into labels and ``bra``; each SSA register becomes a slot of the register file:

* ``ptx.if``: a ``skip`` instruction (jump past the body where the condition fails), the
  body; with an else body, a ``jump`` past it ends the body;
* ``ptx.for``: ``for.init`` (iv = lb, carried = inits), ``for.head`` (leave where
  iv >= ub), the body, ``for.latch`` (carried = yielded, iv += step, back to the head),
  ``for.exit`` (the results = the carried registers);
* the entry's final ``ptx.yield``: ``ret``.

Every other op is one instruction handled by the function registered for its class
(:mod:`pkc.emu.registry`). An instruction keeps its op, the slots of its operands and
results, and the nearest preceding ``ptx.comment`` (which pk op it implements), so that
errors can name it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from xdsl.ir import Block, Operation, SSAValue

from pkc.codegen import ptx


class Pseudo:
    """Control-flow instructions that have no op of their own."""

    SKIP = "skip"            # ptx.if: args = (cond,), target = end of body (or the else)
    JUMP = "jump"            # end of an if-body that has an else: target = after the else
    FOR_INIT = "for.init"    # args = (lb, *inits), res = (iv, *carried), target = next
    FOR_HEAD = "for.head"    # args = (iv, ub), target = for.exit
    FOR_LATCH = "for.latch"  # args = (iv, step, *yielded), res = (iv, *carried), target = head
    FOR_EXIT = "for.exit"    # args = carried, res = the for's results
    RET = "ret"


@dataclass
class Instr:
    pc: int
    op: Operation | None          # None for pseudo instructions
    kind: str | None              # Pseudo.* for pseudo instructions
    args: list[int]               # operand slots
    res: list[int]                # result slots
    target: int = -1              # branch target (pseudo instructions)
    comment: str = ""             # the nearest preceding ptx.comment
    owner: Operation | None = None  # the structured op of a pseudo instruction
    fn: Callable | None = None    # the handler, bound once the program is built
    cache: dict[str, Any] = field(default_factory=dict)  # a handler's precomputed facts

    @property
    def name(self) -> str:
        if self.op is not None:
            return self.op.name
        return f"{self.owner.name if self.owner else 'ptx'} ({self.kind})"


def kind_of(v: SSAValue) -> str:
    """A register's kind; a register block (``!ptx.frag<n>``, a wgmma accumulator) is
    ``frag:<n>``: n f32 registers per thread."""
    if isinstance(v.type, ptx.RegType):
        return ptx.reg_kind(v)
    size = getattr(v.type, "size", None)
    if size is not None and v.type.name == "ptx.frag":
        return f"frag:{size.data}"
    raise TypeError(f"emulator: value of type {v.type} is not a register")


class Program:
    """The flat code of one entry, its register slots (with their kinds) and params."""

    def __init__(self, entry: ptx.EntryOp):
        self.entry = entry
        self.name = entry.sym_name.data
        self.code: list[Instr] = []
        self.slots: dict[SSAValue, int] = {}
        self.kinds: list[str] = []
        self._comment = ""
        self.params = [self.slot(a) for a in entry.block.args]
        self._block(entry.block, top=True)

    # ---- registers ----------------------------------------------------------------
    def slot(self, v: SSAValue) -> int:
        s = self.slots.get(v)
        if s is None:
            s = self.slots[v] = len(self.kinds)
            self.kinds.append(kind_of(v))
        return s

    # ---- flattening ---------------------------------------------------------------
    def _emit(self, op, kind, args, res, owner=None) -> Instr:
        ins = Instr(len(self.code), op, kind, [self.slot(a) for a in args],
                    [self.slot(r) for r in res], comment=self._comment, owner=owner)
        self.code.append(ins)
        return ins

    def _block(self, block: Block, top: bool = False) -> None:
        for op in block.ops:
            if isinstance(op, ptx.YieldOp):
                if top:
                    self._emit(None, Pseudo.RET, [], [], owner=self.entry)
                return
            if isinstance(op, ptx.CommentOp):
                self._comment = op.text.data
                continue
            if isinstance(op, ptx.IfOp):
                skip = self._emit(None, Pseudo.SKIP, [op.cond], [], owner=op)
                self._block(op.block)
                other = getattr(op, "else_block", None)
                if other is not None:
                    jump = self._emit(None, Pseudo.JUMP, [], [], owner=op)
                    skip.target = len(self.code)
                    self._block(other)
                    jump.target = len(self.code)
                else:
                    skip.target = len(self.code)
            elif isinstance(op, ptx.ForOp):
                iv, *carried = op.block.args
                init = self._emit(None, Pseudo.FOR_INIT, [op.lb, *op.inits], [iv, *carried],
                                  owner=op)
                head = self._emit(None, Pseudo.FOR_HEAD, [iv, op.ub], [], owner=op)
                # a bottom-tested loop (the printer's at_least_once form) enters the body
                # without the test
                init.target = head.pc + 1 if op.at_least_once is not None else head.pc
                self._block(op.block)
                term = op.block.last_op
                latch = self._emit(None, Pseudo.FOR_LATCH, [iv, op.step, *term.values],
                                   [iv, *carried], owner=op)
                latch.target = head.pc
                head.target = len(self.code)
                self._emit(None, Pseudo.FOR_EXIT, list(carried), list(op.res), owner=op)
            else:
                self._emit(op, None, list(op.operands), list(op.results))
        if top:  # an entry without a yield
            self._emit(None, Pseudo.RET, [], [], owner=self.entry)


def render(ins: Instr, prog: Program) -> str:
    """The PTX text of an instruction (registers named by slot: ``%r12`` is slot 12)."""
    if ins.op is None:
        return ins.name
    names = _SlotNames(prog)
    try:
        lines = ins.op.render(names)  # type: ignore[attr-defined]
    except Exception:  # an op without render: its name is enough
        return ins.op.name
    lines = [ln for ln in lines if not ln.startswith("//") and not ln.endswith(":")]
    text = " ".join(lines[:3]) + (" ..." if len(lines) > 3 else "")
    return f"{ins.op.name}: {text}"


class _SlotNames:
    def __init__(self, prog: Program):
        self.prog = prog
        self.n = 0

    def __call__(self, v: SSAValue) -> str:
        s = self.prog.slots.get(v)
        kind = kind_of(v)
        prefix = "acc" if kind.startswith("frag") else ptx.REG_PREFIX[kind]
        return f"%{prefix}{'?' if s is None else s}"

    def frag(self, v: SSAValue) -> str:
        return self(v) + "_"

    def fresh(self, kind: str) -> str:
        self.n += 1
        return f"%t{ptx.REG_PREFIX[kind]}{self.n}"

    def label(self, what: str) -> str:
        return f"$L_{what}"
