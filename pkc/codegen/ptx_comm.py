"""The ``ptx`` dialect's communication instructions: 16-byte vector loads and stores, the
bounded signal wait and the LL packet poll (fixed groups with their own labels), the
16-bit pair unpack.

They print like every op of :mod:`pkc.codegen.ptx` (``render`` gives the lines); the
lowering of the schedule level's communication ops
(:mod:`pkc.codegen.lower_schedule_comm`) builds them.

An expired wait writes the rank's error record once (the first thread to win a
compare-and-swap on word 0): ``(flag, kind, rank, peer, seen, wanted, cta, epoch)``
(:data:`ERR_FIELDS`), copies it to the host-mapped mailbox when there is one (``mbox`` != 0,
flag written last) and traps when ``trap`` != 0 (under torch.distributed a missing peer is
a failed job); then the thread stops waiting.
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
from xdsl.utils.exceptions import VerifyException

from pkc.codegen.ptx import B16, B32, Inst, Names, RegType, _guard

from pkc.codegen.abi import ERR_FIELDS  # noqa: E402,F401  (the record's layout)
LL_HALF = 512       # bytes between an LL line's two halves (pkc.dialects.schedule_comm)


def _vec(n: Names, regs: Sequence[SSAValue]) -> str:
    return "{" + ", ".join(n(r) for r in regs) + "}"


@irdl_op_definition
class LdV4Op(Inst):
    """``{@g} ld.global{.cache}.v4.b32 {a, b, c, d}, [addr]``; with ``other``
    (4 registers) the results hold them where the guard fails, with a guard and no
    ``other`` zeros. A guarded load always defines its registers: left undefined, ptxas keeps
    them live from the kernel's entry and, under a register cap, sinks unrolled loads between
    the stores (docs/PERF_NOTES.md, 2026-12-02)."""

    name = "ptx.ld_v4"
    addr = operand_def(RegType)
    guard = opt_operand_def(RegType)
    other = var_operand_def(RegType)
    cache = opt_attr_def(StringAttr)
    res = var_result_def(RegType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, addr: SSAValue, *, guard: SSAValue | None = None,
                 other: Sequence[SSAValue] = (), cache: str | None = None):
        attrs = {"cache": StringAttr(cache)} if cache else {}
        super().__init__(operands=[addr, [guard] if guard else [], list(other)],
                         result_types=[[B32] * 4], attributes=attrs)

    def verify_(self) -> None:
        if len(self.other) not in (0, 4):
            raise VerifyException(f"'ptx.ld_v4' other takes 4 registers, got {len(self.other)}")

    def render(self, n: Names) -> list[str]:
        if self.other:
            lines = [f"mov.b32 {n(r)}, {n(o)};" for r, o in zip(self.res, self.other)]
        else:
            lines = [f"mov.b32 {n(r)}, 0;" for r in self.res] if self.guard is not None else []
        cache = f".{self.cache.data}" if self.cache is not None else ""
        return lines + [f"{_guard(n, self.guard)}ld.global{cache}.v4.b32 {_vec(n, self.res)}, "
                        f"[{n(self.addr)}];"]


@irdl_op_definition
class StV4Op(Inst):
    """``{@g} st{.volatile}.global.v4.b32 [addr+offset], {a, b, c, d}``."""

    name = "ptx.st_v4"
    addr = operand_def(RegType)
    values = var_operand_def(RegType)
    guard = opt_operand_def(RegType)
    offset = attr_def(IntAttr)
    volatile = opt_attr_def(IntAttr)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, addr: SSAValue, values: Sequence[SSAValue], *, guard: SSAValue | None = None,
                 offset: int = 0, volatile: bool = False):
        attrs = {"offset": IntAttr(offset)}
        if volatile:
            attrs["volatile"] = IntAttr(1)
        super().__init__(operands=[addr, list(values), [guard] if guard else []], attributes=attrs)

    def verify_(self) -> None:
        if len(self.values) != 4:
            raise VerifyException(f"'ptx.st_v4' stores 4 registers, got {len(self.values)}")

    def render(self, n: Names) -> list[str]:
        vol = ".volatile" if self.volatile is not None else ""
        off = f"+{self.offset.data}" if self.offset.data else ""
        return [f"{_guard(n, self.guard)}st{vol}.global.v4.b32 [{n(self.addr)}{off}], "
                f"{_vec(n, self.values)};"]


@irdl_op_definition
class Unpack16x2Op(Inst):
    """``mov.b32 {lo, hi}, w``: the two 16-bit halves of a 32-bit register."""

    name = "ptx.unpack16x2"
    src = operand_def(RegType)
    lo = result_def(RegType)
    hi = result_def(RegType)

    def __init__(self, src: SSAValue):
        super().__init__(operands=[src], result_types=[B16, B16])

    def render(self, n: Names) -> list[str]:
        return [f"mov.b32 {{{n(self.lo)}, {n(self.hi)}}}, {n(self.src)};"]


def _record(n: Names, err: str, mbox: str, trap: str, values: list[str]) -> list[str]:
    """The expired-wait path: the record (7 fields after the flag), once per rank."""
    old, first, nomb, notrap = n.fresh("b32"), n.fresh("pred"), n.fresh("pred"), n.fresh("pred")
    done, post = n.label("rec_done"), n.label("rec_mbox")
    lines = [f"atom.global.cas.b32 {old}, [{err}], 0, 1;",
             f"setp.eq.u32 {first}, {old}, 0;",
             f"@!{first} bra {done};"]
    lines += [f"st.global.u32 [{err}+{4 * i}], {v};" for i, v in enumerate(values, 1)]
    lines += [f"setp.eq.u64 {nomb}, {mbox}, 0;", f"@{nomb} bra {post};"]
    lines += [f"st.volatile.global.u32 [{mbox}+{4 * i}], {v};" for i, v in enumerate(values, 1)]
    lines += ["membar.sys;", f"st.volatile.global.u32 [{mbox}], 1;", "membar.sys;", f"{post}:",
              f"setp.eq.u32 {notrap}, {trap}, 0;", f"@!{notrap} trap;", f"{done}:"]
    return lines


@irdl_op_definition
class EpochWaitOp(Inst):
    """Fixed group: one thread spins (``ld.acquire.<scope>``, ``nanosleep`` between polls)
    until ``(s32)([addr] - want) >= 0``, for at most ``timeout`` ns; on expiry it writes
    the record ``(site, rank, peer, seen, want, cta, epoch)`` and stops waiting."""

    name = "ptx.epoch_wait"
    addr = operand_def(RegType)
    want = operand_def(RegType)
    timeout = operand_def(RegType)
    err = operand_def(RegType)
    mbox = operand_def(RegType)
    trap = operand_def(RegType)
    rank = operand_def(RegType)
    peer = operand_def(RegType)
    cta = operand_def(RegType)
    site = attr_def(IntAttr)
    scope = attr_def(StringAttr)
    sleep_ns = attr_def(IntAttr)

    def __init__(self, addr, want, timeout, err, mbox, trap, rank, peer, cta, *, site: int,
                 scope: str = "sys", sleep_ns: int = 32):
        super().__init__(operands=[addr, want, timeout, err, mbox, trap, rank, peer, cta],
                         attributes={"site": IntAttr(site), "scope": StringAttr(scope),
                                     "sleep_ns": IntAttr(sleep_ns)})

    def render(self, n: Names) -> list[str]:
        v, d, dl, now = n.fresh("b32"), n.fresh("b32"), n.fresh("b64"), n.fresh("b64")
        ok, late = n.fresh("pred"), n.fresh("pred")
        top, done, expired = n.label("sw"), n.label("sw_ok"), n.label("sw_late")
        w = n(self.want)
        lines = [f"mov.u64 {dl}, %globaltimer;",
                 f"add.u64 {dl}, {dl}, {n(self.timeout)};",
                 f"{top}:",
                 f"ld.acquire.{self.scope.data}.global.u32 {v}, [{n(self.addr)}];",
                 f"sub.s32 {d}, {v}, {w};",
                 f"setp.ge.s32 {ok}, {d}, 0;",
                 f"@{ok} bra {done};",
                 f"mov.u64 {now}, %globaltimer;",
                 f"setp.gt.u64 {late}, {now}, {dl};",
                 f"@{late} bra {expired};",
                 f"nanosleep.u32 {self.sleep_ns.data};",
                 f"bra {top};",
                 f"{expired}:"]
        rec = [str(self.site.data), n(self.rank), n(self.peer), v, w, n(self.cta), w]
        return lines + _record(n, n(self.err), n(self.mbox), n(self.trap), rec) + [f"{done}:"]


@irdl_op_definition
class LlPollOp(Inst):
    """Fixed group: poll W LL lines (two 16-byte halves each, ``LL_HALF`` bytes apart) at
    ``addrs`` until every word's flag equals ``epoch``: all W slots' loads are issued
    before any flag is checked. ``own`` (4 registers) with ``selfs`` (W predicates): slot q
    is ``own`` where ``selfs[q]`` holds (not loaded). Bounded: the clock starts at the
    first miss; on expiry the record names the first slot still short (site 1) and the
    words are whatever arrived. Results: the W slots' 4 words, slot after slot."""

    name = "ptx.ll_poll"
    addrs = var_operand_def(RegType)
    epoch = operand_def(RegType)
    own = var_operand_def(RegType)
    selfs = var_operand_def(RegType)
    timeout = operand_def(RegType)
    err = operand_def(RegType)
    mbox = operand_def(RegType)
    trap = operand_def(RegType)
    rank = operand_def(RegType)
    cta = operand_def(RegType)
    words = var_result_def(RegType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, addrs, epoch, own, selfs, timeout, err, mbox, trap, rank, cta):
        super().__init__(operands=[list(addrs), epoch, list(own), list(selfs), timeout, err, mbox,
                                   trap, rank, cta],
                         result_types=[[B32] * (4 * len(addrs))])

    def verify_(self) -> None:
        W = len(self.addrs)
        if len(self.own) not in (0, 4) or len(self.selfs) not in (0, W) or \
                (len(self.own) == 0) != (len(self.selfs) == 0):
            raise VerifyException(f"'ptx.ll_poll' own takes 4 registers and selfs {W} predicates, "
                                  "both or neither")

    def render(self, n: Names) -> list[str]:
        W, ep = len(self.addrs), n(self.epoch)
        words = [[n(self.words[4 * q + k]) for k in range(4)] for q in range(W)]
        flags = [[n.fresh("b32") for _ in range(4)] for _ in range(W)]
        oq = [n.fresh("pred") for _ in range(W)]
        ok, tmp, late = n.fresh("pred"), n.fresh("pred"), n.fresh("pred")
        dl, now, short, seen = n.fresh("b64"), n.fresh("b64"), n.fresh("b32"), n.fresh("b32")
        top, done, expired = n.label("llw"), n.label("llw_ok"), n.label("llw_late")
        own = [n(r) for r in self.own]
        selfs = [n(p) for p in self.selfs]
        lines = [f"mov.u64 {dl}, 0;"]
        if own:
            lines += [f"@{selfs[q]} mov.b32 {words[q][k]}, {own[k]};"
                      for q in range(W) for k in range(4)]
        lines.append(f"{top}:")
        for q in range(W):
            g = f"@!{selfs[q]} " if own else ""
            w, f, a = words[q], flags[q], n(self.addrs[q])
            lines += [f"{g}ld.volatile.global.v4.b32 {{{w[0]}, {f[0]}, {w[1]}, {f[1]}}}, [{a}];",
                      f"{g}ld.volatile.global.v4.b32 {{{w[2]}, {f[2]}, {w[3]}, {f[3]}}}, "
                      f"[{a}+{LL_HALF}];"]
        for q in range(W):
            lines.append(f"setp.eq.u32 {oq[q]}, {flags[q][0]}, {ep};")
            lines += [f"setp.eq.and.u32 {oq[q]}, {flags[q][k]}, {ep}, {oq[q]};" for k in range(1, 4)]
            if own:
                lines.append(f"or.pred {oq[q]}, {oq[q]}, {selfs[q]};")
        lines.append(f"mov.pred {ok}, {oq[0]};")
        lines += [f"and.pred {ok}, {ok}, {oq[q]};" for q in range(1, W)]
        lines += [f"@{ok} bra {done};",
                  f"mov.u64 {now}, %globaltimer;",
                  f"setp.eq.u64 {tmp}, {dl}, 0;",             # first miss: start the clock
                  f"@{tmp} add.u64 {dl}, {now}, {n(self.timeout)};",
                  f"setp.gt.u64 {late}, {now}, {dl};",
                  f"@{late} bra {expired};",
                  f"bra {top};",
                  f"{expired}:",
                  f"mov.u32 {short}, 0;"]
        lines += [f"@!{oq[q]} mov.u32 {short}, {q};" for q in reversed(range(W))]
        lines.append(f"mov.u32 {seen}, {flags[0][0]};")
        for q in range(1, W):
            lines += [f"setp.eq.u32 {tmp}, {short}, {q};", f"@{tmp} mov.u32 {seen}, {flags[q][0]};"]
        rec = ["1", n(self.rank), short, seen, ep, n(self.cta), ep]
        return lines + _record(n, n(self.err), n(self.mbox), n(self.trap), rec) + [f"{done}:"]


COMM_PTX_OPS = [LdV4Op, StV4Op, Unpack16x2Op, EpochWaitOp, LlPollOp]
