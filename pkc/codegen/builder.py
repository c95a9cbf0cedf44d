"""A small builder over the ``ptx`` dialect: appends ops to the current block and returns
their results, so that lowering code reads like the instructions it emits.

Helpers take SSA registers or Python ints (turned into ``ptx.imm`` once per block and
value), and know the common idioms (64-bit address arithmetic, guarded loads, loops over
the elements a thread owns, if-blocks)."""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from xdsl.ir import Block, Operation, SSAValue

from pkc.codegen import ptx

Reg = SSAValue
IntOrReg = int | SSAValue


def f32_literal(x: float) -> str:
    return "0f" + struct.pack(">f", x).hex().upper()


def f64_literal(x: float) -> str:
    return "0d" + struct.pack(">d", x).hex().upper()


class Builder:
    def __init__(self, block: Block):
        self.block = block
        self._imm_cache: dict[tuple[str, str], Reg] = {}

    # -- plumbing ---------------------------------------------------------------------

    def add(self, op: Operation) -> Operation:
        self.block.add_op(op)
        return op

    def r(self, op: Operation) -> Reg:
        self.add(op)
        return op.results[0]

    def comment(self, text: str) -> None:
        self.add(ptx.CommentOp(text))

    @contextmanager
    def at(self, block: Block) -> Iterator[None]:
        saved, cache = self.block, self._imm_cache
        self.block, self._imm_cache = block, dict(cache)
        try:
            yield
        finally:
            self.block, self._imm_cache = saved, cache

    # -- constants and moves -----------------------------------------------------------

    def imm(self, value: int | float, type: str) -> Reg:
        """An immediate in a register (ints: u32/s32/u64/s64/b16; floats: f32/f64)."""
        if type == "f32":
            lit = f32_literal(float(value))
        elif type == "f64":
            lit = f64_literal(float(value))
        else:
            lit = str(int(value))
        key = (lit, type)  # the cache is per block scope (see at())
        if key not in self._imm_cache:
            self._imm_cache[key] = self.r(ptx.ImmOp(lit, type))
        return self._imm_cache[key]

    def u32(self, v: IntOrReg) -> Reg:
        return self.imm(v, "u32") if isinstance(v, int) else v

    def u64(self, v: IntOrReg) -> Reg:
        return self.imm(v, "u64") if isinstance(v, int) else v

    def s64(self, v: IntOrReg) -> Reg:
        return self.imm(v, "s64") if isinstance(v, int) else v

    def mov(self, v: Reg, type: str, result_kind: str | None = None) -> Reg:
        return self.r(ptx.MovOp(v, type, result_kind))

    def sreg(self, name: str) -> Reg:
        return self.r(ptx.SregOp(name))

    # -- arithmetic -----------------------------------------------------------------

    def bin(self, opcode: str, type: str, a: IntOrReg, b: IntOrReg, result_kind: str | None = None) -> Reg:
        a = self.imm(a, type) if isinstance(a, int) else a
        b = self.imm(b, type) if isinstance(b, int) else b
        return self.r(ptx.BinaryOp(opcode, type, a, b, result_kind))

    def add32(self, a: IntOrReg, b: IntOrReg) -> Reg:
        return self.bin("add", "u32", a, b)

    def mul32(self, a: IntOrReg, b: IntOrReg) -> Reg:
        return self.bin("mul.lo", "u32", a, b)

    def add64(self, a: IntOrReg, b: IntOrReg) -> Reg:
        return self.bin("add", "s64", a, b)

    def mul64(self, a: IntOrReg, b: IntOrReg) -> Reg:
        return self.bin("mul.lo", "s64", a, b)

    def un(self, opcode: str, type: str, a: Reg) -> Reg:
        return self.r(ptx.UnaryOp(opcode, type, a))

    def fma(self, a: Reg, b: Reg, c: Reg, type: str = "f32") -> Reg:
        return self.r(ptx.FmaOp(a, b, c, type))

    def setp(self, cmp: str, type: str, a: IntOrReg, b: IntOrReg) -> Reg:
        a = self.imm(a, type) if isinstance(a, int) else a
        b = self.imm(b, type) if isinstance(b, int) else b
        return self.r(ptx.SetpOp(cmp, type, a, b))

    def pand(self, a: Reg, b: Reg) -> Reg:
        return self.r(ptx.PredOp("and", a, b))

    def por(self, a: Reg, b: Reg) -> Reg:
        return self.r(ptx.PredOp("or", a, b))

    def selp(self, type: str, a: Reg, b: Reg, cond: Reg) -> Reg:
        return self.r(ptx.SelpOp(type, a, b, cond))

    def cvt(self, dst: str, src: str, v: Reg, rnd: str | None = None) -> Reg:
        return self.r(ptx.CvtOp(dst, src, v, rnd))

    def u32_to_u64(self, v: Reg) -> Reg:
        return self.cvt("u64", "u32", v)

    def u64_to_u32(self, v: Reg) -> Reg:
        return self.cvt("u32", "u64", v)

    # -- memory --------------------------------------------------------------------------

    def ld(self, space: str, type: str, addr: Reg, **kw) -> Reg:
        return self.r(ptx.LdOp(space, type, addr, **kw))

    def st(self, space: str, type: str, addr: Reg, value: Reg, **kw) -> None:
        self.add(ptx.StOp(space, type, addr, value, **kw))

    def bar(self) -> None:
        self.add(ptx.BarSyncOp(0))

    def fence(self, kind: str) -> None:
        self.add(ptx.FenceOp(kind))

    # -- structure ---------------------------------------------------------------------

    @contextmanager
    def if_(self, cond: Reg, negate: bool = False) -> Iterator[None]:
        op = ptx.IfOp(cond, negate)
        self.add(op)
        with self.at(op.block):
            yield
            self.add(ptx.YieldOp())

    def if_else(self, cond: Reg) -> tuple[Block, Block]:
        """An if with an else: the caller fills both blocks under ``with b.at(block)`` and
        ends each with a ``ptx.YieldOp``."""
        op = ptx.IfOp(cond, with_else=True)
        self.add(op)
        return op.block, op.else_block

    @contextmanager
    def for_(self, lb: IntOrReg, ub: IntOrReg, step: IntOrReg, type: str = "s64") -> Iterator[Reg]:
        """A loop without carried values; yields the induction variable."""
        conv = self.s64 if type == "s64" else self.u32
        op = ptx.ForOp(conv(lb), conv(ub), conv(step), [], type)
        self.add(op)
        with self.at(op.block):
            yield op.block.args[0]
            self.add(ptx.YieldOp())

    def for_carried(self, lb: IntOrReg, ub: IntOrReg, step: IntOrReg, inits: Sequence[Reg],
                    type: str = "s64", at_least_once: bool = False,
                    next_iv: bool = False) -> tuple[ptx.ForOp, Block]:
        """A loop with carried values: the caller fills ``block`` (args: iv, carried...)
        under ``with b.at(block)`` and ends it with a ``ptx.YieldOp``. ``at_least_once``:
        the caller knows lb < ub, so the test sits at the bottom (one branch per trip)."""
        conv = self.s64 if type == "s64" else self.u32
        op = ptx.ForOp(conv(lb), conv(ub), conv(step), list(inits), type, at_least_once, next_iv)
        self.add(op)
        return op, op.block
