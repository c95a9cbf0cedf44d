"""Scalar semantics of ``pk.tile_map`` functions on compute-form registers.

Floats run in f32 (f64 for f64 data) like the interpreter; transcendental functions use
the hardware approximations (``ex2.approx``, ``lg2.approx``) with range reduction done in
f32, a few ulp from torch's, within the tolerances that the GPU tests use. f64
transcendentals go through f32 (documented loss of precision). ``maximum``/``minimum``
propagate NaN like torch (``max.NaN``, sm_80+).
"""

from __future__ import annotations

import math

from pkc.codegen.builder import Builder
from pkc.codegen.elements import Val, convert
from pkc.codegen.errors import CodegenError

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453

_CMP = {"eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge"}
# Float comparisons: unordered "ne" is true for NaN (torch: NaN != x is True).
_FCMP = {"eq": "eq", "ne": "neu", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge"}


def apply_fn(b: Builder, fn: str, args: list[Val], result_ctype: str) -> Val:
    """``fn`` of the arguments; the result is in ``result_ctype``'s compute form."""
    if fn == "cast":
        return convert(b, args[0], result_ctype)
    if fn == "where":
        cond, x, y = args
        ct = x.ctype
        y = convert(b, y, ct)
        if ct == "pred":
            sel = b.pand(cond.reg, x.reg)
            other = b.r(_pand_not(b, cond.reg, y.reg))
            return Val(b.por(sel, other), "pred")
        return Val(b.selp(ct, x.reg, y.reg, cond.reg), ct)
    if fn in _CMP:
        x, y = args
        if x.ctype == "pred":
            x, y = convert(b, x, "s32"), convert(b, y, "s32")
        table = _FCMP if x.ctype in ("f32", "f64") else _CMP
        return Val(b.setp(table[fn], x.ctype, x.reg, y.reg), "pred")
    ct = args[0].ctype
    if ct == "pred":
        return _bool_fn(b, fn, args)
    if ct in ("s32", "s64"):
        return _int_fn(b, fn, args, ct)
    if ct == "f64" and fn in _TRANSCENDENTAL:
        narrowed = [convert(b, a, "f32") for a in args]
        return convert(b, _float_fn(b, fn, narrowed, "f32"), "f64")
    return _float_fn(b, fn, args, ct)


def _pand_not(b: Builder, cond, y):
    from pkc.codegen import ptx
    notc = b.un("not", "pred", cond)
    return ptx.PredOp("and", notc, y)


_TRANSCENDENTAL = {"exp", "log", "tanh", "gelu", "gelu_tanh", "silu", "sigmoid", "rsqrt", "pow"}


def _float_fn(b: Builder, fn: str, args: list[Val], t: str) -> Val:
    x = args[0].reg

    def c(v: float):
        return b.imm(v, t)

    def v(r):
        return Val(r, t)

    if fn == "neg":
        return v(b.un("neg", t, x))
    if fn == "abs":
        return v(b.un("abs", t, x))
    if fn == "relu":
        # torch.relu keeps NaN: max.NaN(x, 0).
        if t == "f32":
            return v(b.bin("max.NaN", t, x, c(0.0)))
        return v(_nan_minmax(b, "max", t, x, c(0.0)))
    if fn == "sqrt":
        return v(b.un("sqrt.rn", t, x))
    if fn == "reciprocal":
        return v(b.un("rcp.rn", t, x))
    if fn == "rsqrt":
        return v(b.un("rsqrt.approx", t, x))
    if fn == "exp":
        return v(_exp(b, x))
    if fn == "log":
        return v(b.bin("mul", "f32", b.un("lg2.approx", "f32", x), c(LN2)))
    if fn == "sigmoid":
        return v(_sigmoid(b, x))
    if fn == "silu":
        return v(b.bin("mul", "f32", x, _sigmoid(b, x)))
    if fn == "tanh":
        return v(_tanh(b, x))
    if fn == "gelu_tanh":
        # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        x3 = b.bin("mul", "f32", b.bin("mul", "f32", x, x), x)
        inner = b.fma(x3, c(0.044715), x)
        th = _tanh(b, b.bin("mul", "f32", inner, c(math.sqrt(2.0 / math.pi))))
        return v(b.bin("mul", "f32", b.bin("mul", "f32", x, c(0.5)), b.bin("add", "f32", th, c(1.0))))
    if fn == "gelu":
        # 0.5 x (1 + erf(x / sqrt 2))
        e = _erf(b, b.bin("mul", "f32", x, c(1.0 / math.sqrt(2.0))))
        return v(b.bin("mul", "f32", b.bin("mul", "f32", x, c(0.5)), b.bin("add", "f32", e, c(1.0))))
    y = args[1].reg if len(args) > 1 else None
    if fn == "add":
        return v(b.bin("add", t, x, y))
    if fn == "sub":
        return v(b.bin("sub", t, x, y))
    if fn == "mul":
        return v(b.bin("mul", t, x, y))
    if fn == "div":
        return v(b.bin("div.rn", t, x, y))
    if fn == "maximum":
        return v(b.bin("max.NaN", t, x, y) if t == "f32" else _nan_minmax(b, "max", t, x, y))
    if fn == "minimum":
        return v(b.bin("min.NaN", t, x, y) if t == "f32" else _nan_minmax(b, "min", t, x, y))
    if fn == "pow":
        # x^y = 2^(y log2 x); torch gives NaN for x < 0 with non-integer y, and so do we
        # (lg2 of a negative is NaN); integer y with negative x is not special-cased.
        return v(_exp2(b, b.bin("mul", "f32", y, b.un("lg2.approx", "f32", x))))
    raise CodegenError(f"'pk.tile_map' function \"{fn}\" has no lowering for {t}")


def _nan_minmax(b: Builder, op: str, t: str, x, y):
    """f64 max/min that propagate NaN (max.NaN is f32/f16 only)."""
    r = b.bin(op, t, x, y)
    nan = b.setp("nan", t, x, y)
    return b.selp(t, b.bin("add", t, x, y), r, nan)


def _exp2(b: Builder, x):
    return b.un("ex2.approx.ftz", "f32", x)


def _exp(b: Builder, x):
    return _exp2(b, b.bin("mul", "f32", x, b.imm(LOG2E, "f32")))


def _sigmoid(b: Builder, x):
    # 1 / (1 + exp(-x))
    e = _exp(b, b.un("neg", "f32", x))
    return b.un("rcp.rn", "f32", b.bin("add", "f32", e, b.imm(1.0, "f32")))


def _tanh(b: Builder, x):
    # tanh x = sign(x) (1 - 2 / (exp(2|x|) + 1)): no cancellation for large |x|, and
    # accurate to a few f32 ulp (tanh.approx is only ~2^-11).
    ax = b.un("abs", "f32", x)
    e = _exp(b, b.bin("mul", "f32", ax, b.imm(2.0, "f32")))
    r = b.un("rcp.rn", "f32", b.bin("add", "f32", e, b.imm(1.0, "f32")))
    t = b.fma(r, b.imm(-2.0, "f32"), b.imm(1.0, "f32"))
    # copysign: t has the sign of x (tanh(-0) = -0 too).
    return b.bin("copysign", "f32", x, t)


def _erf(b: Builder, x):
    """erf via Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7)."""
    ax = b.un("abs", "f32", x)
    c = lambda v: b.imm(v, "f32")  # noqa: E731
    t = b.un("rcp.rn", "f32", b.fma(ax, c(0.3275911), c(1.0)))
    poly = c(1.061405429)
    for coef in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
        poly = b.fma(poly, t, c(coef))
    poly = b.bin("mul", "f32", poly, t)
    e = _exp(b, b.un("neg", "f32", b.bin("mul", "f32", ax, ax)))
    y = b.fma(b.un("neg", "f32", poly), e, c(1.0))
    return b.bin("copysign", "f32", x, y)


def _int_fn(b: Builder, fn: str, args: list[Val], t: str) -> Val:
    x = args[0].reg
    y = args[1].reg if len(args) > 1 else None
    ops = {"add": "add", "sub": "sub", "mul": "mul.lo", "maximum": "max", "minimum": "min"}
    if fn in ops:
        return Val(b.bin(ops[fn], t, x, y), t)
    if fn == "neg":
        return Val(b.un("neg", t, x), t)
    if fn == "abs":
        return Val(b.un("abs", t, x), t)
    if fn == "relu":
        return Val(b.bin("max", t, x, b.imm(0, t)), t)
    raise CodegenError(f"'pk.tile_map' function \"{fn}\" has no lowering for integers")


def _bool_fn(b: Builder, fn: str, args: list[Val]) -> Val:
    x = args[0].reg
    if fn in ("abs", "relu"):
        return Val(x, "pred")
    if fn in ("add", "maximum"):
        return Val(b.por(x, args[1].reg), "pred")
    if fn in ("mul", "minimum"):
        return Val(b.pand(x, args[1].reg), "pred")
    raise CodegenError(f"'pk.tile_map' function \"{fn}\" has no lowering for i1")
