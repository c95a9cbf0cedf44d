"""The ``ptx`` dialect's asynchronous and waiting ops (see :mod:`pkc.codegen.ptx`): the
warp-wide ``mma.sync``, bulk copies between shared and global memory and their groups,
mbarriers, and the fixed instruction groups that wait with a bound (``mbarrier`` try-wait,
the signal spin) or loop on a CAS (16-bit atomic add).
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import IntAttr, StringAttr
from xdsl.ir import SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    attr_def,
    irdl_op_definition,
    operand_def,
    opt_attr_def,
    opt_operand_def,
    result_def,
    var_operand_def,
    var_result_def,
)

from pkc.codegen.ptx_core import B32, B64, F32, PRED, Inst, Names, RegType, _guard

# ----------------------------------------------------------------------------------------
# Tensor cores.


@irdl_op_definition
class MmaSyncOp(Inst):
    """``mma.sync.aligned.<shape>.row.col.<d>.<a>.<b>.<c>``: one warp-wide MMA. For
    m16n8k16 bf16/f16: a is 4 b32, b is 2 b32, c and d are 4 f32."""

    name = "ptx.mma_sync"
    shape = attr_def(StringAttr)
    types = attr_def(StringAttr)  # e.g. "f32.bf16.bf16.f32"
    a = var_operand_def(RegType)
    b = var_operand_def(RegType)
    c = var_operand_def(RegType)
    d = var_result_def(RegType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, shape: str, types: str, a: Sequence[SSAValue], b: Sequence[SSAValue],
                 c: Sequence[SSAValue]):
        super().__init__(operands=[list(a), list(b), list(c)], result_types=[[F32] * len(c)],
                         attributes={"shape": StringAttr(shape), "types": StringAttr(types)})

    def render(self, n: Names) -> list[str]:
        def vec(vs):
            return "{" + ", ".join(n(v) for v in vs) + "}"
        return [f"mma.sync.aligned.{self.shape.data}.row.col.{self.types.data} {vec(self.d)}, "
                f"{vec(self.a)}, {vec(self.b)}, {vec(self.c)};"]


# ----------------------------------------------------------------------------------------
# Bulk copies (sm_90+): shared <-> global through the copy engine, and mbarriers.


@irdl_op_definition
class CpAsyncBulkStoreOp(Inst):
    """``cp.async.bulk.global.shared::cta.bulk_group [%g], [%s], %n`` or, with ``reduce``
    (``add.f32``, ``add.noftz.bf16`` ...), ``cp.reduce.async.bulk`` of the same form."""

    name = "ptx.cp_async_bulk_store"
    reduce = opt_attr_def(StringAttr)
    dst = operand_def(RegType)
    src = operand_def(RegType)
    size = operand_def(RegType)
    guard = opt_operand_def(RegType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, dst: SSAValue, src: SSAValue, size: SSAValue, reduce: str | None = None,
                 guard: SSAValue | None = None):
        attrs = {"reduce": StringAttr(reduce)} if reduce else {}
        super().__init__(operands=[dst, src, size, [guard] if guard else []], attributes=attrs)

    def render(self, n: Names) -> list[str]:
        op = "cp.reduce.async.bulk" if self.reduce is not None else "cp.async.bulk"
        tail = f".{self.reduce.data}" if self.reduce is not None else ""
        return [f"{_guard(n, self.guard)}{op}.global.shared::cta.bulk_group{tail} "
                f"[{n(self.dst)}], [{n(self.src)}], {n(self.size)};"]


@irdl_op_definition
class CpAsyncBulkLoadOp(Inst):
    """``cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%s], [%g], %n,
    [%mbar]``: completion is counted in bytes on the mbarrier."""

    name = "ptx.cp_async_bulk_load"
    dst = operand_def(RegType)
    src = operand_def(RegType)
    size = operand_def(RegType)
    mbar = operand_def(RegType)
    guard = opt_operand_def(RegType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, dst: SSAValue, src: SSAValue, size: SSAValue, mbar: SSAValue,
                 guard: SSAValue | None = None):
        super().__init__(operands=[dst, src, size, mbar, [guard] if guard else []])

    def render(self, n: Names) -> list[str]:
        return [f"{_guard(n, self.guard)}cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes "
                f"[{n(self.dst)}], [{n(self.src)}], {n(self.size)}, [{n(self.mbar)}];"]


@irdl_op_definition
class BulkGroupOp(Inst):
    """``cp.async.bulk.commit_group`` (``wait`` absent) or ``cp.async.bulk.wait_group{.read}
    <wait>`` (PTX ISA 9.7.9.25.4): without ``read`` the writes complete, with it only the
    reads of shared memory (the buffer may be reused)."""

    name = "ptx.bulk_group"
    wait = opt_attr_def(IntAttr)
    read = opt_attr_def(IntAttr)
    guard = opt_operand_def(RegType)

    def __init__(self, wait: int | None = None, read: bool = False,
                 guard: SSAValue | None = None):
        attrs = {} if wait is None else {"wait": IntAttr(wait)}
        if read:
            attrs["read"] = IntAttr(1)
        super().__init__(operands=[[guard] if guard else []], attributes=attrs)

    def render(self, n: Names) -> list[str]:
        g = _guard(n, self.guard)
        if self.wait is None:
            return [f"{g}cp.async.bulk.commit_group;"]
        rd = ".read" if self.read is not None else ""
        return [f"{g}cp.async.bulk.wait_group{rd} {self.wait.data};"]


@irdl_op_definition
class MbarrierOp(Inst):
    """Single-instruction mbarrier ops on a shared address: ``init`` (b = count),
    ``expect_tx`` (b = bytes), ``arrive`` (result = state token)."""

    name = "ptx.mbarrier"
    op = attr_def(StringAttr)
    addr = operand_def(RegType)
    b = opt_operand_def(RegType)
    result = var_result_def(RegType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, op: str, addr: SSAValue, b: SSAValue | None = None):
        results = [B64] if op.startswith("arrive") else []
        super().__init__(operands=[addr, [b] if b else []], result_types=[results],
                         attributes={"op": StringAttr(op)})

    def render(self, n: Names) -> list[str]:
        a = n(self.addr)
        op = self.op.data
        if op == "init":
            return [f"mbarrier.init.shared::cta.b64 [{a}], {n(self.b)};"]
        if op == "expect_tx":
            return [f"mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [{a}], {n(self.b)};"]
        if op == "arrive":
            return [f"mbarrier.arrive.shared::cta.b64 {n(self.result[0])}, [{a}];"]
        if op == "arrive_expect_tx":
            return [f"mbarrier.arrive.expect_tx.shared::cta.b64 {n(self.result[0])}, [{a}], {n(self.b)};"]
        raise ValueError(op)


@irdl_op_definition
class MbarrierWaitOp(Inst):
    """Fixed group: ``mbarrier.try_wait`` in a loop until the phase of ``state`` is done,
    or ``timeout_ns`` passed (result: true on timeout), so that a byte count that never
    arrives cannot hang the GPU."""

    name = "ptx.mbarrier_wait"
    addr = operand_def(RegType)
    state = operand_def(RegType)
    timeout_ns = operand_def(RegType)
    timed_out = result_def(RegType)

    def __init__(self, addr: SSAValue, state: SSAValue, timeout_ns: SSAValue):
        super().__init__(operands=[addr, state, timeout_ns], result_types=[PRED])

    def render(self, n) -> list[str]:
        ok, start, now = n.fresh("pred"), n.fresh("b64"), n.fresh("b64")
        to = n(self.timed_out)
        loop, done = n.label("mbar_wait"), n.label("mbar_done")
        return [f"mov.u64 {start}, %globaltimer;",
                f"{loop}:",
                f"mbarrier.try_wait.shared::cta.b64 {ok}, [{n(self.addr)}], {n(self.state)};",
                f"mov.u64 {now}, %globaltimer;",
                f"sub.u64 {now}, {now}, {start};",
                f"setp.gt.u64 {to}, {now}, {n(self.timeout_ns)};",
                f"@{ok} setp.ne.u32 {to}, 0, 0;",
                f"@{ok} bra {done};",
                f"@!{to} bra {loop};",
                f"{done}:"]


@irdl_op_definition
class SpinWaitOp(Inst):
    """Fixed group, the bounded wait on a signal counter::

        start = %globaltimer
        loop: ld.acquire.sys.global.u32 seen, [addr]
              if seen >= expected: done
              if %globaltimer - start > timeout_ns: timed out
              nanosleep; bra loop

    Results: the last value seen and a predicate that is true on timeout. The caller
    records the timeout and ends the CTA, so a protocol bug raises a host error instead of
    hanging the GPU."""

    name = "ptx.spin_wait"
    addr = operand_def(RegType)
    expected = operand_def(RegType)
    timeout_ns = operand_def(RegType)
    scope = attr_def(StringAttr)
    seen = result_def(RegType)
    timed_out = result_def(RegType)

    def __init__(self, addr: SSAValue, expected: SSAValue, timeout_ns: SSAValue, scope: str = "sys"):
        super().__init__(operands=[addr, expected, timeout_ns], result_types=[B32, PRED],
                         attributes={"scope": StringAttr(scope)})

    def render(self, n) -> list[str]:
        start, now, ok = n.fresh("b64"), n.fresh("b64"), n.fresh("pred")
        seen, to = n(self.seen), n(self.timed_out)
        loop, done = n.label("spin"), n.label("spin_done")
        return [
            "// bounded spin: ld.acquire until >= expected, or give up after timeout_ns",
            f"mov.u64 {start}, %globaltimer;",
            f"{loop}:",
            f"ld.acquire.{self.scope.data}.global.u32 {seen}, [{n(self.addr)}];",
            f"setp.ge.u32 {ok}, {seen}, {n(self.expected)};",
            f"mov.u64 {now}, %globaltimer;",
            f"sub.u64 {now}, {now}, {start};",
            f"setp.gt.u64 {to}, {now}, {n(self.timeout_ns)};",
            f"@{ok} setp.ne.u32 {to}, {seen}, {seen};",  # satisfied: not a timeout
            f"@{ok} bra {done};",
            f"@{to} bra {done};",
            "nanosleep.u32 32;",
            f"bra {loop};",
            f"{done}:",
        ]


@irdl_op_definition
class AtomicAddCas16Op(Inst):
    """Fixed group: an atomic add of an f32 value into a bf16/f16 element in global
    memory through a 32-bit CAS loop (for targets without ``red.add.noftz.bf16``)."""

    name = "ptx.atomic_add_cas16"
    type = attr_def(StringAttr)  # bf16 | f16
    scope = attr_def(StringAttr)
    addr = operand_def(RegType)
    value = operand_def(RegType)  # f32
    guard = opt_operand_def(RegType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, type: str, addr: SSAValue, value: SSAValue, scope: str = "sys",
                 guard: SSAValue | None = None):
        super().__init__(operands=[addr, value, [guard] if guard else []],
                         attributes={"type": StringAttr(type), "scope": StringAttr(scope)})

    def render(self, n) -> list[str]:
        f = n.fresh
        word, sh64, sh, old, half, wide, fv, nh, nw, mask, new, prev = (
            f("b64"), f("b64"), f("b32"), f("b32"), f("b16"), f("b32"), f("f32"), f("b16"),
            f("b32"), f("b32"), f("b32"), f("b32"))
        p = f("pred")
        loop, skip = n.label("cas"), n.label("cas_skip")
        a, v, sc = n(self.addr), n(self.value), self.scope.data
        lines = [f"@!{n(self.guard)} bra {skip};"] if self.guard is not None else []
        if self.type.data == "bf16":
            widen = [f"cvt.u32.u16 {wide}, {half};", f"shl.b32 {wide}, {wide}, 16;",
                     f"mov.b32 {fv}, {wide};"]
        else:
            widen = [f"cvt.f32.f16 {fv}, {half};"]
        lines += [
            f"and.b64 {word}, {a}, -4;",
            f"and.b64 {sh64}, {a}, 2;",
            f"cvt.u32.u64 {sh}, {sh64};",
            f"shl.b32 {sh}, {sh}, 3;",
            f"ld.relaxed.{sc}.global.u32 {old}, [{word}];",
            f"{loop}:",
            f"shr.u32 {wide}, {old}, {sh};",
            f"cvt.u16.u32 {half}, {wide};",
            *widen,
            f"add.rn.f32 {fv}, {fv}, {v};",
            f"cvt.rn.{self.type.data}.f32 {nh}, {fv};",
            f"cvt.u32.u16 {nw}, {nh};",
            f"shl.b32 {nw}, {nw}, {sh};",
            f"shl.b32 {mask}, 65535, {sh};",
            f"not.b32 {mask}, {mask};",
            f"and.b32 {new}, {old}, {mask};",
            f"or.b32 {new}, {new}, {nw};",
            f"atom.relaxed.{sc}.global.cas.b32 {prev}, [{word}], {old}, {new};",
            f"setp.ne.u32 {p}, {prev}, {old};",
            f"mov.b32 {old}, {prev};",
            f"@{p} bra {loop};",
        ]
        if self.guard is not None:
            lines.append(f"{skip}:")
        return lines
