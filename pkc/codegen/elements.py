"""Element types in memory and in registers, and the conversions between them.

Each pk element type has a memory form (what ld/st move) and a compute form (what maps,
reductions and MMAs work in, as the interpreter does: f32 for bf16/f16/f32, f64 for f64,
s32 for i8/i32, s64 for i64, a predicate for i1). A :class:`Val` is a register with its
compute form. bf16 widens by a shift (``cvt.f32.bf16`` needs sm_90; the shift works on
sm_80) and narrows with ``cvt.rn.bf16.f32`` (sm_80+), rounding once, like the interpreter.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.ir import Attribute, SSAValue

from pkc.codegen.builder import Builder
from pkc.codegen.errors import CodegenError


@dataclass(frozen=True)
class Val:
    reg: SSAValue
    ctype: str  # f32 | f64 | s32 | s64 | pred


@dataclass(frozen=True)
class Elem:
    name: str       # pk name: bf16 ...
    size: int       # bytes
    mem: str        # ld/st type
    ctype: str      # compute form

    @property
    def is_float(self) -> bool:
        return self.ctype in ("f32", "f64")


ELEMS = {
    "bf16": Elem("bf16", 2, "b16", "f32"),
    "f16": Elem("f16", 2, "b16", "f32"),
    "f32": Elem("f32", 4, "f32", "f32"),
    "f64": Elem("f64", 8, "f64", "f64"),
    "i1": Elem("i1", 1, "u8", "pred"),
    "i8": Elem("i8", 1, "s8", "s32"),
    "i32": Elem("i32", 4, "s32", "s32"),
    "i64": Elem("i64", 8, "s64", "s64"),
    # 8-bit floats: moved as bytes, widened to f32 for MMAs and maps (see _fp8_to_f32);
    # nothing narrows to them (no op of a kernel produces fp8 from a wider float).
    "f8E4M3FN": Elem("f8E4M3FN", 1, "u8", "f32"),
    "f8E5M2": Elem("f8E5M2", 1, "u8", "f32"),
}


def elem(t: Attribute | str) -> Elem:
    name = t if isinstance(t, str) else str(t)
    if name not in ELEMS:
        raise CodegenError(f"element type {name} has no lowering")
    return ELEMS[name]


def zero_raw(b: Builder, e: Elem) -> SSAValue:
    """A zero of the memory form (for out-of-bounds loads)."""
    if e.mem == "f32":
        return b.imm(0.0, "f32")
    if e.mem == "f64":
        return b.imm(0.0, "f64")
    return b.imm(0, {1: "b16", 2: "b16", 4: "b32", 8: "b64"}[e.size])


def load_raw(b: Builder, e: Elem, space: str, addr: SSAValue, guard: SSAValue | None = None,
             cache: str | None = None) -> SSAValue:
    """The element at ``addr`` in its memory form; 0 where ``guard`` fails."""
    kw = {"cache": cache} if cache else {}
    if guard is not None:
        kw.update(guard=guard, other=zero_raw(b, e))
    return b.ld(space, e.mem, addr, **kw)


def store_raw(b: Builder, e: Elem, space: str, addr: SSAValue, raw: SSAValue,
              guard: SSAValue | None = None) -> None:
    kw = {"guard": guard} if guard is not None else {}
    b.st(space, e.mem, addr, raw, **kw)


def widen(b: Builder, e: Elem, raw: SSAValue) -> Val:
    """Memory form -> compute form."""
    if e.name == "bf16":
        wide = b.cvt("u32", "u16", raw)
        bits = b.bin("shl", "b32", wide, b.imm(16, "u32"))
        return Val(b.mov(bits, "b32", "f32"), "f32")
    if e.name == "f16":
        return Val(b.cvt("f32", "f16", raw), "f32")
    if e.name in ("f32", "f64", "i32", "i64"):
        return Val(raw, e.ctype)
    if e.name == "i8":
        return Val(b.cvt("s32", "s16", raw), "s32")
    if e.name == "i1":
        return Val(b.setp("ne", "u16", raw, b.imm(0, "u16")), "pred")
    if e.name in ("f8E4M3FN", "f8E5M2"):
        return Val(_fp8_to_f32(b, e.name, raw), "f32")
    raise CodegenError(f"cannot widen {e.name}")


def _fp8_to_f32(b: Builder, name: str, raw: SSAValue) -> SSAValue:
    """An fp8 byte (zero-extended in a 16-bit register) as f32, exactly, by integer ops
    (cvt's fp8 forms convert pairs and need sm_89; this runs on sm_80 too). f8E5M2 is the
    top byte of an f16 (NaN and infinities included). f8E4M3FN (exponent bias 7) shifted
    into an f16's exponent and mantissa bits reads as its value times 2^-8, subnormals
    included, so one multiply by 256 rescales it; its one NaN pattern (S.1111.111) has no
    f16 counterpart there and is made NaN explicitly."""
    x = b.bin("and", "b32", b.cvt("u32", "u16", raw), b.imm(0xFF, "u32"))
    if name == "f8E5M2":
        return b.cvt("f32", "f16", b.cvt("u16", "u32", b.bin("shl", "b32", x, b.imm(8, "u32"))))
    mag = b.bin("and", "b32", x, b.imm(0x7F, "u32"))
    sign = b.bin("shl", "b32", b.bin("and", "b32", x, b.imm(0x80, "u32")), b.imm(8, "u32"))
    bits = b.bin("or", "b32", sign, b.bin("shl", "b32", mag, b.imm(7, "u32")))
    f = b.bin("mul", "f32", b.cvt("f32", "f16", b.cvt("u16", "u32", bits)), b.imm(256.0, "f32"))
    nan = b.setp("eq", "u32", mag, b.imm(0x7F, "u32"))
    return b.selp("f32", b.imm(float("nan"), "f32"), f, nan)


def narrow(b: Builder, e: Elem, v: Val) -> SSAValue:
    """Compute form -> memory form of ``e`` (converting first if the forms differ)."""
    v = convert(b, v, e.ctype)
    if e.name == "bf16":
        return b.cvt("bf16", "f32", v.reg, "rn")
    if e.name == "f16":
        return b.cvt("f16", "f32", v.reg, "rn")
    if e.name in ("f32", "f64", "i32", "i64"):
        return v.reg
    if e.name == "i8":
        return b.cvt("s16", "s32", v.reg)
    if e.name == "i1":
        return b.selp("u16", b.imm(1, "u16"), b.imm(0, "u16"), v.reg)
    raise CodegenError(f"cannot narrow to {e.name}")


def convert(b: Builder, v: Val, ctype: str) -> Val:
    """Between compute forms, with torch's rules: float -> int truncates toward zero,
    anything -> bool is ``!= 0``, bool -> number is 0/1."""
    src = v.ctype
    if src == ctype:
        return v
    if ctype == "pred":
        zero = b.imm(0.0, src) if src in ("f32", "f64") else b.imm(0, src)
        return Val(b.setp("ne", src, v.reg, zero), "pred")
    if src == "pred":
        one = b.imm(1.0, ctype) if ctype in ("f32", "f64") else b.imm(1, ctype)
        zero = b.imm(0.0, ctype) if ctype in ("f32", "f64") else b.imm(0, ctype)
        return Val(b.selp(ctype, one, zero, v.reg), ctype)
    floats = ("f32", "f64")
    if src in floats and ctype in floats:
        return Val(b.cvt(ctype, src, v.reg, "rn" if ctype == "f32" else None), ctype)
    if src in floats:
        return Val(b.cvt(ctype, src, v.reg, "rzi"), ctype)
    if ctype in floats:
        return Val(b.cvt(ctype, src, v.reg, "rn"), ctype)
    return Val(b.cvt(ctype, src, v.reg), ctype)
