"""Handlers of the register-to-register instructions: special registers, moves and
immediates, integer and floating-point arithmetic, comparisons, selects and conversions.

Floating point: f32 ``add``/``sub``/``mul``/``div.rn``/``sqrt.rn`` are numpy's IEEE
single-precision operations (round to nearest even, as the ``.rn`` default); ``fma.rn.f32``
rounds once (:func:`pkc.emu.values.fma_f32`). The ``.approx`` functions (``ex2``, ``lg2``,
``rsqrt``, ``tanh``, ``rcp.approx``) are computed exactly and rounded: the hardware's
approximations differ from them in the last bits (documented in docs/emulator.md).
"""

from __future__ import annotations

import numpy as np

from pkc.codegen import ptx
from pkc.emu.errors import EmuUnsupported
from pkc.emu.registry import BRANCHED, handles
from pkc.emu.values import TYPE_DTYPE, bf16_to_f32, f32_to_bf16, f32_to_f16, fma_f32

_FLOAT = ("f16", "bf16", "f32", "f64")


def _float_in(x: np.ndarray, t: str) -> np.ndarray:
    """Register bits of float type ``t`` as a numpy float array (bf16/f16 widen to f32)."""
    if t == "bf16":
        return bf16_to_f32(x.view(np.uint16))
    if t == "f16":
        return x.view(np.float16).astype(np.float32)
    return x.view(TYPE_DTYPE[t])


def _float_out(x: np.ndarray, t: str) -> np.ndarray:
    if t == "bf16":
        return f32_to_bf16(x.astype(np.float32))
    if t == "f16":
        return f32_to_f16(x.astype(np.float32))
    return x.astype(TYPE_DTYPE[t])


def _ftz(x: np.ndarray, on: bool) -> np.ndarray:
    if not on or x.dtype != np.float32:
        return x
    tiny = np.abs(x) < np.float32(1.1754944e-38)
    return np.where(tiny & (x != 0), np.copysign(np.float32(0), x), x)


# ---------------------------------------------------------------------------------------
# Special registers, immediates, moves.

_SREG = {
    "%tid.x": lambda m, g: g.tid, "%ntid.x": lambda m, g: np.full(g.n, m.threads),
    "%ctaid.x": lambda m, g: m.ctaid_of[g.idx], "%nctaid.x": lambda m, g: np.full(g.n, m.ctas),
    "%laneid": lambda m, g: g.lane, "%warpid": lambda m, g: g.tid // 32,
    "%nwarpid": lambda m, g: np.full(g.n, (m.threads + 31) // 32),
    "%smid": lambda m, g: g.cta % 1024,
    "%cluster_ctarank": lambda m, g: m.ctaid_of[g.idx] % m.cluster,
    "%cluster_nctarank": lambda m, g: np.full(g.n, m.cluster),
    "%cluster_ctaid.x": lambda m, g: m.ctaid_of[g.idx] % m.cluster,
    "%cluster_nctaid.x": lambda m, g: np.full(g.n, m.cluster),
    "%clusterid.x": lambda m, g: m.ctaid_of[g.idx] // m.cluster,
    "%nclusterid.x": lambda m, g: np.full(g.n, m.ctas // m.cluster),
    "%dynamic_smem_size": lambda m, g: np.full(g.n, m.smem.declared),
    "%total_smem_size": lambda m, g: np.full(g.n, m.smem.declared),
    # a clock that only moves forward: the emulator's step count, in ns
    "%globaltimer": lambda m, g: np.full(g.n, m.steps * 10),
    "%clock64": lambda m, g: np.full(g.n, m.steps),
    "%clock": lambda m, g: np.full(g.n, m.steps & 0xFFFFFFFF),
}
for _d in "yz":
    _SREG[f"%tid.{_d}"] = _SREG[f"%ctaid.{_d}"] = lambda m, g: np.zeros(g.n)
    _SREG[f"%ntid.{_d}"] = _SREG[f"%nctaid.{_d}"] = lambda m, g: np.ones(g.n)
    _SREG[f"%cluster_ctaid.{_d}"] = _SREG[f"%clusterid.{_d}"] = lambda m, g: np.zeros(g.n)
    _SREG[f"%cluster_nctaid.{_d}"] = _SREG[f"%nclusterid.{_d}"] = lambda m, g: np.ones(g.n)


@handles(ptx.SregOp)
def _sreg(m, ins, g):
    """``mov`` from a special register (PTX ISA 10, Special Registers)."""
    reg = ins.op.reg.data
    fn = _SREG.get(reg)
    if fn is None:
        raise EmuUnsupported(f"special register {reg}", g.where(ins))
    kind = m.prog.kinds[ins.res[0]]
    g.set(ins.res[0], np.asarray(fn(m, g)).astype(np.uint64 if kind == "b64" else np.uint32))


@handles(ptx.SmemBaseOp)
def _smem_base(m, ins, g):
    """``mov.u32 %r, pk_smem``: the dynamic shared memory starts at shared address 0
    (PTX ISA 5.1.5, the .shared state space)."""
    g.set(ins.res[0], np.zeros(g.n, dtype=np.uint32))


def parse_imm(value: str, t: str):
    """A PTX literal (``42``, ``-1``, ``0x1F``, ``0f3F800000``, ``0d...``) as a numpy
    scalar of ``t``'s register bits (PTX ISA 4.5, Constants)."""
    if value.startswith(("0f", "0F")):
        return np.uint32(int(value[2:], 16))
    if value.startswith(("0d", "0D")):
        return np.uint64(int(value[2:], 16))
    if t in ("f32", "f64"):
        return np.array(float(value), dtype=TYPE_DTYPE[t])
    bits = TYPE_DTYPE.get(t, np.dtype(np.uint64)).itemsize * 8
    bits = max(bits, 16)
    return np.array(int(value, 0) & ((1 << bits) - 1), dtype={16: np.uint16, 32: np.uint32,
                                                              64: np.uint64}[bits])


@handles(ptx.ImmOp)
def _imm(m, ins, g):
    """``mov.<type> %r, <literal>`` (PTX ISA 9.7.9.10, mov)."""
    v = ins.cache.get("v")
    if v is None:
        v = ins.cache["v"] = parse_imm(ins.op.value.data, ins.op.type.data)
    g.set(ins.res[0], np.broadcast_to(np.asarray(v), (g.n,)))


@handles(ptx.MovOp)
def _mov(m, ins, g):
    """``mov.<type>`` (PTX ISA 9.7.9.10): the bits move unchanged, also between the kinds
    of one width (b32 <-> f32)."""
    g.set(ins.res[0], g.get(ins.args[0]))


@handles(ptx.PackOp)
def _pack(m, ins, g):
    """``mov.b32 %r, {%lo, %hi}`` / ``mov.b64 %rd, {%lo, %hi}`` (PTX ISA 9.7.9.10, mov with
    vector source)."""
    if ins.op.wide is not None:
        lo = g.get(ins.args[0]).astype(np.uint64) & np.uint64(0xFFFFFFFF)
        hi = g.get(ins.args[1]).astype(np.uint64) & np.uint64(0xFFFFFFFF)
        g.set(ins.res[0], lo | (hi << np.uint64(32)))
        return
    lo = g.get(ins.args[0]).astype(np.uint32)
    hi = g.get(ins.args[1]).astype(np.uint32)
    g.set(ins.res[0], (lo & np.uint32(0xFFFF)) | (hi << np.uint32(16)))


@handles(ptx.CommentOp)
def _comment(m, ins, g):
    return None


@handles(ptx.ExitOp)
def _exit(m, ins, g):
    """``exit`` (PTX ISA 9.7.13.8): the threads end; barriers stop waiting for them."""
    m.exit_threads(g.idx)
    return BRANCHED


# ---------------------------------------------------------------------------------------
# Arithmetic.

def _int_div(a, b, signed: bool, rem: bool):
    zero = b == 0
    bb = np.where(zero, 1, b).astype(a.dtype)
    with np.errstate(all="ignore"):
        if signed:
            q = np.abs(a.astype(np.int64)) // np.abs(bb.astype(np.int64))
            q = np.where((a < 0) != (bb < 0), -q, q).astype(a.dtype)
            if a.dtype == np.int64:  # |INT64_MIN| overflows in the line above
                q = np.where((a == np.iinfo(np.int64).min) & (bb == -1), a, q)
        else:
            q = a // bb
        out = a - q * bb if rem else q
    # integer division by zero is unspecified in PTX; the hardware gives all ones
    return np.where(zero, a if rem else np.array(-1).astype(a.dtype), out).astype(a.dtype)


def _shift(a, s, left: bool, t: str):
    bits = a.dtype.itemsize * 8
    s = s.astype(np.uint64)
    big = s >= bits
    sc = np.where(big, 0, s).astype(a.dtype)
    with np.errstate(all="ignore"):
        r = (a << sc) if left else (a >> sc)
    if left or not t.startswith("s"):
        return np.where(big, 0, r).astype(a.dtype)
    return np.where(big, np.where(a < 0, -1, 0), r).astype(a.dtype)


def _mul_hi(a, b, t):
    bits = a.dtype.itemsize * 8
    if bits == 64:
        return np.array([((int(x) * int(y)) >> 64) for x, y in zip(a, b)],
                        dtype=object).astype(np.uint64 if t[0] != "s" else np.int64)
    wide = np.int64 if t[0] == "s" else np.uint64
    return ((a.astype(wide) * b.astype(wide)) >> bits).astype(a.dtype)


@handles(ptx.BinaryOp)
def _binary(m, ins, g):
    """Two-operand arithmetic (PTX ISA 9.7.1 integer, 9.7.3 floating point, 9.7.8 logic
    and shift): add, sub, mul{.lo,.hi,.wide}, div{.rn,.approx,.full}, rem, min, max{.NaN},
    and, or, xor, shl, shr."""
    op, t = ins.op.opcode.data, ins.op.type.data
    base, *mods = op.split(".")
    if t in _FLOAT:
        a = _float_in(g.get(ins.args[0]), t)
        b = _float_in(g.get(ins.args[1]), t)
        ftz = "ftz" in mods
        a, b = _ftz(a, ftz), _ftz(b, ftz)
        with np.errstate(all="ignore"):
            if base == "add":
                r = a + b
            elif base == "sub":
                r = a - b
            elif base == "mul":
                r = a * b
            elif base == "div":
                r = a / b
            elif base in ("min", "max"):
                f = (np.minimum if base == "min" else np.maximum) if "NaN" in mods else \
                    (np.fmin if base == "min" else np.fmax)
                r = f(a, b)
            else:
                raise EmuUnsupported(f"{op}.{t}", g.where(ins))
        g.set(ins.res[0], _float_out(_ftz(r, ftz), t))
        return
    if base == "mul" and "wide" in mods:
        wt = ("s" if t[0] == "s" else "u") + str(2 * int(t[1:]))
        a = g.get(ins.args[0], t).astype(TYPE_DTYPE[wt])
        b = g.get(ins.args[1], t).astype(TYPE_DTYPE[wt])
        g.set(ins.res[0], a * b)
        return
    a = g.get(ins.args[0], t)
    bt = "u32" if base in ("shl", "shr") else t
    b = g.get(ins.args[1], bt)
    with np.errstate(all="ignore"):
        if base == "add":
            r = a + b
        elif base == "sub":
            r = a - b
        elif base == "mul":
            r = _mul_hi(a, b, t) if "hi" in mods else a * b
        elif base in ("div", "rem"):
            r = _int_div(a, b, t[0] == "s", base == "rem")
        elif base == "min":
            r = np.minimum(a, b)
        elif base == "max":
            r = np.maximum(a, b)
        elif base == "and":
            r = a & b
        elif base == "or":
            r = a | b
        elif base == "xor":
            r = a ^ b
        elif base in ("shl", "shr"):
            r = _shift(a, b, base == "shl", t)
        else:
            raise EmuUnsupported(f"{op}.{t}", g.where(ins))
    g.set(ins.res[0], r.astype(a.dtype))


@handles(ptx.UnaryOp)
def _unary(m, ins, g):
    """One-operand arithmetic (PTX ISA 9.7.1, 9.7.3, 9.7.4 special functions): neg, abs,
    not, sqrt, rcp, rsqrt, ex2, lg2, tanh, sin, cos, popc, clz, brev."""
    op, t = ins.op.opcode.data, ins.op.type.data
    base, *mods = op.split(".")
    if t == "pred":
        if base != "not":
            raise EmuUnsupported(f"{op}.pred", g.where(ins))
        g.set(ins.res[0], ~g.get(ins.args[0]))
        return
    if t in _FLOAT:
        x = _ftz(_float_in(g.get(ins.args[0]), t), "ftz" in mods)
        x64 = x.astype(np.float64)
        with np.errstate(all="ignore"):
            fns = {"neg": lambda: -x, "abs": lambda: np.abs(x),
                   "sqrt": lambda: np.sqrt(x) if "rn" in mods else np.sqrt(x64),
                   "rcp": lambda: (np.float32(1) / x if x.dtype == np.float32 else 1 / x)
                   if "rn" in mods else 1.0 / x64,
                   "rsqrt": lambda: 1.0 / np.sqrt(x64), "ex2": lambda: np.exp2(x64),
                   "lg2": lambda: np.log2(x64), "tanh": lambda: np.tanh(x64),
                   "sin": lambda: np.sin(x64), "cos": lambda: np.cos(x64)}
            if base not in fns:
                raise EmuUnsupported(f"{op}.{t}", g.where(ins))
            r = fns[base]()
        g.set(ins.res[0], _float_out(_ftz(np.asarray(r).astype(x.dtype), "ftz" in mods), t))
        return
    x = g.get(ins.args[0], t)
    if base == "neg":
        r = -x
    elif base == "abs":
        r = np.abs(x)
    elif base in ("not", "cnot"):
        r = ~x if base == "not" else (x == 0).astype(x.dtype)
    elif base == "popc":
        r = np.array([bin(int(v)).count("1") for v in x.view(np.uint64 if x.itemsize == 8
                                                              else np.uint32)], dtype=np.uint32)
    elif base == "clz":
        bits = x.dtype.itemsize * 8
        r = np.array([bits - int(v).bit_length() for v in x.astype(np.uint64)], dtype=np.uint32)
    else:
        raise EmuUnsupported(f"{op}.{t}", g.where(ins))
    g.set(ins.res[0], r)


@handles(ptx.FmaOp)
def _fma(m, ins, g):
    """``fma.rn.f32`` / ``fma.rn.f64`` (PTX ISA 9.7.3.6: one rounding) and integer
    ``mad.lo`` / ``mad.wide`` (9.7.1.4)."""
    op, t = ins.op.opcode.data, ins.op.type.data
    if t in _FLOAT:
        a, b, c = (_float_in(g.get(s), t) for s in ins.args)
        if t == "f64":
            r = a * b + c  # f64 operands: single rounding is not modelled (not emitted)
        else:
            r = fma_f32(a, b, c)
        g.set(ins.res[0], _float_out(r, t))
        return
    if "wide" in op:
        wt = ("s" if t[0] == "s" else "u") + str(2 * int(t[1:]))
        a = g.get(ins.args[0], t).astype(TYPE_DTYPE[wt])
        b = g.get(ins.args[1], t).astype(TYPE_DTYPE[wt])
        c = g.get(ins.args[2], wt)
    else:
        a, b, c = g.get(ins.args[0], t), g.get(ins.args[1], t), g.get(ins.args[2], t)
    with np.errstate(all="ignore"):
        g.set(ins.res[0], (a * b + c).astype(c.dtype))


_ORDERED = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
            "gt": np.greater, "ge": np.greater_equal}
_UNSIGNED = {"lo": "lt", "ls": "le", "hi": "gt", "hs": "ge"}


def compare(cmp: str, t: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``setp`` comparison (PTX ISA 9.7.7.1): ordered float compares are false on NaN, the
    ``u`` forms true; ``lo ls hi hs`` compare unsigned."""
    if t in _FLOAT:
        a, b = _float_in(a, t), _float_in(b, t)
        nan = np.isnan(a) | np.isnan(b)
        if cmp == "num":
            return ~nan
        if cmp == "nan":
            return nan
        if cmp.endswith("u") and cmp[:-1] in _ORDERED:
            return _ORDERED[cmp[:-1]](a, b) | nan
        r = _ORDERED[cmp](a, b)
        return r & ~nan if cmp == "ne" else r
    if cmp in _UNSIGNED:
        u = "u" + t[1:]
        return _ORDERED[_UNSIGNED[cmp]](a.view(TYPE_DTYPE[u]), b.view(TYPE_DTYPE[u]))
    return _ORDERED[cmp](a, b)


@handles(ptx.SetpOp)
def _setp(m, ins, g):
    """``setp.<cmp>.<type>`` (PTX ISA 9.7.7.1)."""
    t = ins.op.type.data
    rt = "u" + t[1:] if t.startswith("b") else t
    a = g.get(ins.args[0]) if t in _FLOAT else g.get(ins.args[0], rt)
    b = g.get(ins.args[1]) if t in _FLOAT else g.get(ins.args[1], rt)
    g.set(ins.res[0], compare(ins.op.cmp.data, t, a, b))


@handles(ptx.PredOp)
def _pred(m, ins, g):
    """``and.pred`` / ``or.pred`` / ``xor.pred`` (PTX ISA 9.7.8.1-3)."""
    a, b = g.get(ins.args[0]), g.get(ins.args[1])
    fn = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}[ins.op.opcode.data]
    g.set(ins.res[0], fn(a, b))


@handles(ptx.SelpOp)
def _selp(m, ins, g):
    """``selp.<type> d, a, b, p`` (PTX ISA 9.7.7.3)."""
    a, b, p = g.get(ins.args[0]), g.get(ins.args[1]), g.get(ins.args[2])
    g.set(ins.res[0], np.where(p, a, b))


_INT_RND = {"rzi": np.trunc, "rni": np.rint, "rmi": np.floor, "rpi": np.ceil}


@handles(ptx.CvtOp)
def _cvt(m, ins, g):
    """``cvt{.rnd}.<dst>.<src>`` (PTX ISA 9.7.9.21): integer widening (sign- or
    zero-extension by the source type) and narrowing (truncation), float <-> float with
    rounding, float -> integer saturating (NaN -> 0), integer -> float."""
    dst, src = ins.op.dst_type.data, ins.op.src_type.data
    rnd = ins.op.rnd.data if ins.op.rnd is not None else None
    x = g.get(ins.args[0])
    if src in _FLOAT:
        v = _float_in(x, src)
        if dst in _FLOAT:
            r = _float_out(v.astype(np.float64) if dst == "f64" else v, dst)
        else:
            f = _INT_RND.get(rnd or "rzi", np.trunc)
            info = np.iinfo(TYPE_DTYPE[dst])
            with np.errstate(invalid="ignore"):
                w = np.clip(f(v.astype(np.float64)), info.min, info.max)
            r = np.where(np.isnan(w), 0, w).astype(TYPE_DTYPE[dst])
    else:
        v = _as_int(x, src)
        if dst in _FLOAT:
            r = _float_out(v.astype(np.float64).astype(np.float32) if dst != "f64"
                           else v.astype(np.float64), dst)
        else:
            r = v.astype(TYPE_DTYPE[dst])
    g.set(ins.res[0], r)


def _as_int(x: np.ndarray, t: str) -> np.ndarray:
    dt = TYPE_DTYPE[t]
    if dt.itemsize == 1:
        return (x.astype(np.uint16) & 0xFF).astype(np.uint8).view(dt)
    if x.dtype.itemsize == dt.itemsize:
        return x.view(dt)
    return x.astype(dt)
