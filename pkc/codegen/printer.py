"""Prints ``ptx`` dialect IR as PTX text: the last step of codegen, and the only one that
deals in strings. It names registers, declares them, lowers the structured ops
(``ptx.for``, ``ptx.if``) to labels and branches (fixed groups such as ``ptx.spin_wait``
render their own, with registers and labels from the printer),
and writes ``.version`` / ``.target`` / ``.address_size`` and the ``.entry`` header."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from xdsl.ir import Block, SSAValue

from pkc.codegen import ptx, ptx_sm90

PTX_VERSION = "8.7"  # sm_100a needs >= 8.6; ptxas 13.0 and the 580 driver accept 8.7
SMEM_SYMBOL = "pk_smem"


class _Names:
    """Register names: one virtual register per SSA value, by kind (``%r12``)."""

    def __init__(self):
        self.counts: dict[str, int] = defaultdict(int)
        self.names: dict[SSAValue, str] = {}
        self.frags: dict[SSAValue, tuple[str, int]] = {}
        self.labels = 0

    def fresh(self, kind: str) -> str:
        self.counts[kind] += 1
        return f"%{ptx.REG_PREFIX[kind]}{self.counts[kind]}"

    def define(self, v: SSAValue, name: str | None = None) -> str:
        if v not in self.names:
            self.names[v] = name or self.fresh(ptx.reg_kind(v))
        return self.names[v]

    def frag(self, v: SSAValue) -> str:
        """The register-block name of a ``!ptx.frag`` value (``%acc0_``; elements append
        their index)."""
        if v not in self.frags:
            self.frags[v] = (f"%acc{len(self.frags)}_", v.type.size.data)
        return self.frags[v][0]

    def __call__(self, v: SSAValue) -> str:
        if v not in self.names:
            raise KeyError(f"PTX printer: value {v} used before it is defined")
        return self.names[v]

    def label(self, what: str) -> str:
        self.labels += 1
        return f"$L_{what}_{self.labels}"


class _Printer:
    def __init__(self):
        self.n = _Names()
        self.lines: list[str] = []
        self.depth = 1

    def emit(self, line: str) -> None:
        indent = "" if line.startswith("$L") else "  " * self.depth
        self.lines.append(indent + line)

    def block(self, block: Block) -> None:
        for op in block.ops:
            if isinstance(op, ptx.YieldOp):
                return
            self.op(op)

    def op(self, op) -> None:
        if isinstance(op, ptx_sm90.FragGetOp):
            self.n.define(op.result, op.result_name(self.n))
            return
        for r in op.results:
            if not isinstance(r.type, ptx_sm90.FragType):
                self.n.define(r)
        if isinstance(op, ptx.ForOp):
            self.for_(op)
        elif isinstance(op, ptx.IfOp):
            self.if_(op)
        elif isinstance(op, ptx.Inst):
            for line in op.render(self.n):
                self.emit(line)
        else:
            raise TypeError(f"PTX printer: cannot print '{op.name}'")

    def for_(self, op: ptx.ForOp) -> None:
        n = self.n
        t = op.type.data
        iv, *carried = op.block.args
        # The loop's results live in the carried registers after the loop.
        for arg, res in zip(carried, op.res):
            n.names[res] = n.define(arg)
        ivn = n.define(iv)
        mov_t = "b64" if ptx.reg_kind(iv) == "b64" else "b32"
        self.emit(f"mov.{mov_t} {ivn}, {n(op.lb)};")
        for arg, init in zip(carried, op.inits):
            self.emit(f"mov.{_mov_type(arg)} {n(arg)}, {n(init)};")
        head, end = n.label("for"), n.label("endfor")
        p = n.fresh("pred")
        bottom = op.at_least_once is not None
        self.emit(f"{head}:")
        if not bottom:
            self.emit(f"setp.ge.{t} {p}, {ivn}, {n(op.ub)};")
            self.emit(f"@{p} bra {end};")
        self.depth += 1
        self.block(op.block)
        term = op.block.last_op
        assert isinstance(term, ptx.YieldOp)
        if op.next_iv is not None:      # the body computed the next iv (a while loop)
            nxt, *vals = term.values
            self.parallel_copy([(ivn, n(nxt), mov_t)]
                               + [(n(arg), n(v), _mov_type(arg)) for arg, v in zip(carried, vals)])
        else:
            self.parallel_copy([(n(arg), n(v), _mov_type(arg))
                                for arg, v in zip(carried, term.values)])
            self.emit(f"add.{t} {ivn}, {ivn}, {n(op.step)};")
        if bottom:
            self.emit(f"setp.lt.{t} {p}, {ivn}, {n(op.ub)};")
            self.emit(f"@{p} bra {head};")
        else:
            self.emit(f"bra {head};")
        self.depth -= 1
        self.emit(f"{end}:")

    def parallel_copy(self, moves: list[tuple[str, str, str]]) -> None:
        """dst_i = src_i for all i at once: moves whose destination no pending move still
        reads go first; a cycle is broken through a temporary. Plain moves (no copies
        through temporaries) keep values that ptxas can prove warp-uniform uniform."""
        pending = [(d, s_, t) for d, s_, t in moves if d != s_]
        while pending:
            sources = {s_ for _, s_, _ in pending}
            ready = [m for m in pending if m[0] not in sources]
            if ready:
                d, s_, t = ready[0]
                self.emit(f"mov.{t} {d}, {s_};")
                pending.remove(ready[0])
                continue
            d, s_, t = pending[0]          # a cycle: save one destination first
            kind = {"pred": "pred", "b16": "b16", "b32": "b32", "b64": "b64", "f32": "f32",
                    "f64": "f64"}[t]
            tmp = self.n.fresh(kind)
            self.emit(f"mov.{t} {tmp}, {d};")
            pending = [(d2, tmp if s2 == d else s2, t2) for d2, s2, t2 in pending]

    def if_(self, op: ptx.IfOp) -> None:
        skip = self.n.label("else" if op.else_block is not None else "endif")
        neg = "" if op.negate is not None else "!"
        self.emit(f"@{neg}{self.n(op.cond)} bra {skip};")
        self.depth += 1
        self.block(op.block)
        self.depth -= 1
        if op.else_block is not None:
            end = self.n.label("endif")
            self.emit(f"bra {end};")
            self.emit(f"{skip}:")
            self.depth += 1
            self.block(op.else_block)
            self.depth -= 1
            skip = end
        self.emit(f"{skip}:")


def _mov_type(v: SSAValue) -> str:
    k = ptx.reg_kind(v)
    return {"pred": "pred", "b16": "b16", "b32": "b32", "b64": "b64", "f32": "f32", "f64": "f64"}[k]


def print_entry(entry: ptx.EntryOp) -> str:
    """The ``.entry`` of one kernel (no module header)."""
    p = _Printer()
    params = entry.params()
    for arg, (pname, _) in zip(entry.block.args, params):
        p.n.define(arg)
    body_start = len(p.lines)
    for arg, (pname, ptype) in zip(entry.block.args, params):
        if ptype == "tmap":   # by-value CUtensorMap: its generic address
            p.emit(f"mov.u64 {p.n(arg)}, {pname};")
            p.emit(f"cvta.param.u64 {p.n(arg)}, {p.n(arg)};")
        else:
            p.emit(f"ld.param.{ptype} {p.n(arg)}, [{pname}];")
    p.block(entry.block)
    p.emit("ret;")
    body = p.lines[body_start:]
    decls = [f"  .reg .{k} %{ptx.REG_PREFIX[k]}<{p.n.counts[k] + 1}>;"
             for k in ptx.REG_KINDS if p.n.counts[k]]
    decls += [f"  .reg .f32 {name}<{size}>;" for name, size in p.n.frags.values()]
    header = [f".visible .entry {entry.sym_name.data}("]
    header += [f"  {_param_decl(name, t)}{',' if i + 1 < len(params) else ''}"
               for i, (name, t) in enumerate(params)]
    header += [")", f".maxntid {entry.maxntid.data}, 1, 1"]
    if entry.minnctapersm is not None:
        header.append(f".minnctapersm {entry.minnctapersm.data}")
    if entry.cluster is not None:
        header.append(f".reqnctapercluster {entry.cluster.data}, 1, 1")
    header.append("{")
    return "\n".join(header + decls + body + ["}"]) + "\n"


def _param_decl(name: str, ptype: str) -> str:
    if ptype == "tmap":
        return f".param .align 64 .b8 {name}[128]"
    return f".param .{ptype} {name}"


def print_module(entries: Sequence[ptx.EntryOp], target: str, comments: Sequence[str] = ()) -> str:
    """A complete PTX module: header, the dynamic shared-memory symbol, the entries."""
    head = [f"// {c}" for c in comments]
    align = max([128] + [e.smem_align.data for e in entries if e.smem_align is not None])
    head += [f".version {PTX_VERSION}", f".target {target}", ".address_size 64", "",
             f".extern .shared .align {align} .b8 {SMEM_SYMBOL}[];", ""]
    return "\n".join(head) + "\n" + "\n".join(print_entry(e) for e in entries)
