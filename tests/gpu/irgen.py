"""A small text builder for hand-written kernel-level pk IR (the test kernels of codegen).

It only saves typing: fresh SSA names, index constants, and nested regions for
``pk.worker`` / ``pk.foreach`` / ``scf.for``. The IR it writes is ordinary pk text, parsed
and verified like any other.
"""

from __future__ import annotations

import itertools
from contextlib import contextmanager


def tile(shape, dt: str) -> str:
    return f"!pk.tile<{'x'.join(map(str, shape))}x{dt}>"


def buf(shape, dt: str, symmetric: bool = False) -> str:
    return f"!pk.buffer<{'x'.join(map(str, shape))}x{dt}{', symmetric' if symmetric else ''}>"


def tensor(shape, dt: str) -> str:
    return f"tensor<{'x'.join(map(str, shape))}x{dt}>"


def bands(size: int, step: int) -> list[tuple[int, int]]:
    """(count, tile size) groups covering ``size`` with tiles of ``step`` without running
    past the end: the full tiles, then one tail tile if ``step`` does not divide it."""
    out = []
    if size // step:
        out.append((size // step, step))
    if size % step:
        out.append((1, size % step))
    return out


class IR:
    def __init__(self):
        self.lines: list[str] = []
        self.depth = 0
        self._ids = itertools.count()

    def fresh(self, prefix: str = "v") -> str:
        return f"%{prefix}{next(self._ids)}"

    def emit(self, line: str) -> None:
        self.lines.append("  " * self.depth + line)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"

    # -- index math ------------------------------------------------------------------

    def c(self, value: int) -> str:
        name = self.fresh("c")
        self.emit(f"{name} = arith.constant {value} : index")
        return name

    def _bin(self, op: str, a, b) -> str:
        a = self.c(a) if isinstance(a, int) else a
        b = self.c(b) if isinstance(b, int) else b
        name = self.fresh()
        self.emit(f"{name} = arith.{op} {a}, {b} : index")
        return name

    def add(self, a, b):
        return self._bin("addi", a, b)

    def mul(self, a, b):
        return self._bin("muli", a, b)

    def rem(self, a, b):
        return self._bin("remui", a, b)

    def rank(self) -> str:
        name = self.fresh("rank")
        self.emit(f"{name} = pk.rank")
        return name

    # -- tiles -------------------------------------------------------------------------

    def load(self, buffer: str, btype: str, idx, ttype: str, peer: str | None = None) -> str:
        name = self.fresh("t")
        idx = [self.c(i) if isinstance(i, int) else i for i in idx]
        frm = f" from {peer}" if peer else ""
        self.emit(f"{name} = pk.load {buffer}[{', '.join(idx)}]{frm} : {btype} -> {ttype}")
        return name

    def store(self, t: str, ttype: str, buffer: str, btype: str, idx) -> None:
        idx = [self.c(i) if isinstance(i, int) else i for i in idx]
        self.emit(f"pk.store {t}, {buffer}[{', '.join(idx)}] : {ttype}, {btype}")

    def put(self, t: str, ttype: str, buffer: str, btype: str, idx, peer: str, add: bool = False) -> None:
        idx = [self.c(i) if isinstance(i, int) else i for i in idx]
        self.emit(f"pk.put {t}, {buffer}[{', '.join(idx)}] to {peer}{' add' if add else ''} : {ttype}, {btype}")

    def signal(self, sigs: str, stype: str, slot, peer: str, value: int = 1) -> None:
        slot = self.c(slot) if isinstance(slot, int) else slot
        attr = f" {{value = {value} : i64}}" if value != 1 else ""
        self.emit(f"pk.signal {sigs}[{slot}] to {peer}{attr} : {stype}")

    def wait(self, sigs: str, stype: str, slot, expected) -> None:
        slot = self.c(slot) if isinstance(slot, int) else slot
        expected = self.c(expected) if isinstance(expected, int) else expected
        self.emit(f"pk.wait {sigs}[{slot}] until {expected} : {stype}")

    def fill(self, value, ttype: str, dt: str) -> str:
        name = self.fresh("z")
        lit = f"{float(value)!r}" if dt in ("bf16", "f16", "f32", "f64") else str(int(value))
        self.emit(f"{name} = pk.tile_fill {{value = {lit} : {dt}}} : {ttype}")
        return name

    def map(self, fn: str, args: list[str], arg_types: list[str], rtype: str) -> str:
        name = self.fresh("m")
        self.emit(f"{name} = pk.tile_map \"{fn}\" {', '.join(args)} : ({', '.join(arg_types)}) -> {rtype}")
        return name

    def reduce(self, fn: str, t: str, ttype: str, dims: list[int], keepdim: bool, rtype: str) -> str:
        name = self.fresh("r")
        kd = ", keepdim" if keepdim else ""
        self.emit(f"{name} = pk.tile_reduce \"{fn}\" {t} {{dims = [{', '.join(f'{d} : i64' for d in dims)}]{kd}}} : {ttype} -> {rtype}")
        return name

    def mma(self, a: str, at: str, b: str, bt: str, acc: str, ct: str) -> str:
        name = self.fresh("acc")
        self.emit(f"{name} = pk.mma {a}, {b}, {acc} : {at}, {bt}, {ct} -> {ct}")
        return name

    # -- regions -------------------------------------------------------------------------

    @contextmanager
    def worker(self, role: str, sms: int | None = None):
        attrs = f" attributes {{sms = {sms} : i64}}" if sms else ""
        self.emit(f"pk.worker \"{role}\"{attrs} {{")
        self.depth += 1
        yield
        self.emit("pk.yield")
        self.depth -= 1
        self.emit("}")

    @contextmanager
    def foreach(self, bounds: list[int]):
        args = [self.fresh("i") for _ in bounds]
        self.emit(f"pk.foreach attributes {{bounds = [{', '.join(f'{b} : i64' for b in bounds)}]}} {{")
        self.emit(f"^bb{next(self._ids)}({', '.join(f'{a}: index' for a in args)}):")
        self.depth += 1
        yield args
        self.emit("pk.yield")
        self.depth -= 1
        self.emit("}")

    @contextmanager
    def loop(self, lb, ub, step=1):
        lb = self.c(lb) if isinstance(lb, int) else lb
        ub = self.c(ub) if isinstance(ub, int) else ub
        step = self.c(step) if isinstance(step, int) else step
        iv = self.fresh("iv")
        self.emit(f"scf.for {iv} = {lb} to {ub} step {step} {{")
        self.depth += 1
        yield iv
        self.depth -= 1
        self.emit("}")

    def loop_carried(self, lb, ub, step, init: str, ttype: str):
        """Opens ``%res = scf.for ... iter_args(%acc = init)``; returns (iv, acc, res,
        close) where close(yielded) ends the loop."""
        lb = self.c(lb) if isinstance(lb, int) else lb
        ub = self.c(ub) if isinstance(ub, int) else ub
        step = self.c(step) if isinstance(step, int) else step
        iv, acc, res = self.fresh("iv"), self.fresh("acc"), self.fresh("res")
        self.emit(f"{res} = scf.for {iv} = {lb} to {ub} step {step} iter_args({acc} = {init}) -> ({ttype}) {{")
        self.depth += 1

        def close(yielded: str):
            self.emit(f"scf.yield {yielded} : {ttype}")
            self.depth -= 1
            self.emit("}")

        return iv, acc, res, close


def kernel_function(name: str, world: int, inputs: list[tuple[list[int], str]],
                    outputs: list[tuple[list[int], str, bool]], body, func: str = "main") -> str:
    """A ``func.func @main`` holding one ``pk.kernel``. ``body(ir, in_names, out_names)``
    writes the kernel body (allocs, workers)."""
    ir = IR()
    args = [f"%a{i}: {tensor(s, d)}" for i, (s, d) in enumerate(inputs)]
    rtypes = [tensor(s, d) for s, d, _ in outputs]
    ins = [f"%a{i}" for i in range(len(inputs))]
    ir.emit(f"func.func @{func}({', '.join(args)}) -> ({', '.join(rtypes)}) {{")
    ir.depth += 1
    results = [f"%r{i}" for i in range(len(outputs))]
    lhs = ", ".join(results)
    ir.emit(f"{lhs} = pk.kernel \"{name}\" ({', '.join(ins)}) {{world = {world} : i64}} : "
            f"({', '.join(tensor(s, d) for s, d in inputs)}) -> ({', '.join(rtypes)}) {{")
    in_b = [f"%IN{i}" for i in range(len(inputs))]
    out_b = [f"%OUT{i}" for i in range(len(outputs))]
    bargs = [f"{n}: {buf(s, d)}" for n, (s, d) in zip(in_b, inputs)]
    bargs += [f"{n}: {buf(s, d, sym)}" for n, (s, d, sym) in zip(out_b, outputs)]
    ir.emit(f"^bb0({', '.join(bargs)}):")
    ir.depth += 1
    body(ir, in_b, out_b)
    ir.emit("pk.yield")
    ir.depth -= 1
    ir.emit("}")
    ir.emit(f"func.return {lhs} : {', '.join(rtypes)}")
    ir.depth -= 1
    ir.emit("}")
    return ir.text()
