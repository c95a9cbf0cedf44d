"""Transfer microbenchmark kernels for sm_90a (benchmark-only code, used by
benchmarks/transfer.py; not part of the compiler): how many bytes per second one SM moves.

Two copy kernels, one CTA per SM (the dynamic shared memory request leaves room for one),
CTA ``c`` copying bytes ``[c*B, (c+1)*B)`` of ``src`` to ``dst``:

* ``tma``: one thread per CTA issues bulk copies: ``cp.async.bulk`` global -> shared
  (completion on an mbarrier), then ``cp.async.bulk`` shared -> global (bulk groups),
  ``piece`` bytes at a time through a ring of ``ring`` slots (both kernel parameters),
  with up to ``lag`` pieces' stores in flight (compiled in: ``wait_group.read`` takes a
  constant): the loop of the put side of a fused all-gather + GEMM. ``lag=1`` (one store
  at a time) was the first device run's loop.
* ``ldst``: all 1024 threads (32 warps) copy with 16-byte ``ld.global`` / ``st.global``;
  messages of ``msg`` bytes are dealt to the warps round-robin, each lane moving ``unroll``
  16-byte vectors per step (``unroll`` loads in flight before the stores).

On one GPU both read and write HBM (device to device): what they measure is the rate one
SM can drive, the figure that bounds a put over NVLink from that SM, not NVLink itself.
The PTX is written as text here (moved from the retired pkc/codegen/hopper/transfer.py);
the kernels are loaded and launched with pkc.runtime.tma_launch.
"""

from __future__ import annotations

from dataclasses import dataclass

SMEM_BYTES = 200 * 1024          # one CTA per SM; the TMA ring uses up to RING_BYTES
RING_BYTES = 192 * 1024
MAX_RING = 64
MAX_PIECE = 64 * 1024


def tma_ring(piece: int) -> int:
    """Ring depth for a piece size: as many slots as fit in RING_BYTES, 2..MAX_RING."""
    return max(2, min(MAX_RING, RING_BYTES // piece))


def tma_lag(ring: int) -> int:
    """Stores in flight: half the ring, a power of two up to 32 (1 for rings of 2-3)."""
    lag = 1
    while lag * 2 <= min(32, ring // 2):
        lag *= 2
    return lag


def tma_piece(msg: int) -> int:
    """Bytes per bulk copy for a message: the message, up to MAX_PIECE (a message larger
    than that moves as several pieces)."""
    return min(msg, MAX_PIECE)


class _Ptx:
    """A PTX function body under construction: registers declared on first use."""

    def __init__(self) -> None:
        self.regs: dict[str, str] = {}
        self.lines: list[str] = []
        self._labels = 0

    def reg(self, name: str, ty: str) -> str:
        old = self.regs.setdefault(name, ty)
        if old != ty:
            raise ValueError(f"register %{name} declared as {old} and {ty}")
        return f"%{name}"

    def r32(self, name: str) -> str:
        return self.reg(name, ".b32")

    def r64(self, name: str) -> str:
        return self.reg(name, ".b64")

    def pred(self, name: str) -> str:
        return self.reg(name, ".pred")

    def __call__(self, text: str) -> None:
        self.lines.append("\t" + text)

    def label(self, name: str) -> None:
        self.lines.append(f"{name}:")

    def fresh(self, prefix: str) -> str:
        self._labels += 1
        return f"$L_{prefix}_{self._labels}"

    def declarations(self) -> list[str]:
        return [f"\t.reg {ty} %{name};" for name, ty in self.regs.items()]


def emit_bulk_copy_loop(p: _Ptx, *, src: str, dst: str, total: str, piece: str, ring: str,
                        smem: str, bars: str, lag: int) -> None:
    """One thread copies ``[src, src+total)`` to ``dst`` piece by piece: ``cp.async.bulk``
    global -> shared into a ring of ``ring`` slots of ``piece`` bytes at ``smem`` (slot s
    completes on the mbarrier at ``bars + 8 s``, initialized with count 1), then one
    ``cp.async.bulk`` shared -> global, committed as one bulk group per piece. With ``lag``
    d (a constant, 1 <= d < ring), the load of piece i+ring-d goes into the slot of piece
    i-d once that piece's store has read it (``wait_group.read d-1``): ring-d loads and up
    to d pieces' stores in flight. The caller waits for the writes
    (``cp.async.bulk.wait_group 0``) after the loop. The mbarrier waits trap after the
    %globaltimer deadline ``%t_deadline``."""
    r = p.r32
    npieces, l, s, ph = r("bc_np"), r("bc_l"), r("bc_s"), r("bc_ph")
    sz, sa, ba, tmp = r("bc_sz"), r("bc_sa"), r("bc_ba"), r("bc_tmp")
    off, rem, ga = p.r64("bc_off"), p.r64("bc_rem"), p.r64("bc_ga")
    pr, pw, pdone = p.pred("bc_pr"), p.pred("bc_pw"), p.pred("bc_pdone")
    # npieces = ceil(total / piece)
    p(f"cvt.u64.u32 {off}, {piece};")
    p(f"add.s64 {rem}, {total}, {off};")
    p(f"sub.s64 {rem}, {rem}, 1;")
    p(f"div.u64 {rem}, {rem}, {off};")
    p(f"cvt.u32.u64 {npieces}, {rem};")

    def piece_geom(idx: str) -> None:
        """(off = src offset of piece idx, sz = its bytes)."""
        p(f"mul.wide.u32 {off}, {idx}, {piece};")
        p(f"sub.s64 {rem}, {total}, {off};")
        p(f"cvt.u64.u32 {ga}, {piece};")
        p(f"min.u64 {rem}, {rem}, {ga};")
        p(f"cvt.u32.u64 {sz}, {rem};")

    def issue_load(idx: str, slot: str) -> None:
        piece_geom(idx)
        p(f"mad.lo.u32 {sa}, {slot}, {piece}, {smem};")
        p(f"mad.lo.u32 {ba}, {slot}, 8, {bars};")
        p(f"add.s64 {ga}, {src}, {off};")
        p(f"mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [{ba}], {sz};")
        p(f"cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes "
          f"[{sa}], [{ga}], {sz}, [{ba}];")

    # prologue: the first ring - lag pieces
    pre_top, pre_done = p.fresh("bc_pre"), p.fresh("bc_pre_done")
    lim = r("bc_lim")
    p(f"sub.u32 {lim}, {ring}, {lag};")
    p(f"min.u32 {lim}, {lim}, {npieces};")
    p(f"mov.u32 {l}, 0;")
    p.label(pre_top)
    p(f"setp.ge.u32 {pdone}, {l}, {lim};")
    p(f"@{pdone} bra {pre_done};")
    issue_load(l, l)
    p(f"add.u32 {l}, {l}, 1;")
    p(f"bra {pre_top};")
    p.label(pre_done)
    # main loop over pieces l (slot s, phase ph)
    top, done = p.fresh("bc_top"), p.fresh("bc_done")
    p(f"mov.u32 {l}, 0;")
    p(f"mov.u32 {s}, 0;")
    p(f"mov.u32 {ph}, 0;")
    p.label(top)
    p(f"setp.ge.u32 {pdone}, {l}, {npieces};")
    p(f"@{pdone} bra {done};")
    # the next load: piece l + ring - lag into the slot of piece l - lag, at once while
    # l < lag (a fresh slot), else after that piece's store has read it
    nxt, nslot = r("bc_nxt"), r("bc_nslot")
    p(f"add.u32 {nxt}, {l}, {lim};")
    p(f"setp.lt.u32 {pw}, {nxt}, {npieces};")
    skipn = p.fresh("bc_nonext")
    p(f"@!{pw} bra {skipn};")
    p(f"setp.ge.u32 {pr}, {l}, {lag};")
    p(f"@{pr} cp.async.bulk.wait_group.read {lag - 1};")
    p(f"add.u32 {nslot}, {s}, {lim};")
    p(f"rem.u32 {nslot}, {nslot}, {ring};")
    issue_load(nxt, nslot)
    p.label(skipn)
    # wait for piece l in slot s
    p(f"mad.lo.u32 {ba}, {s}, 8, {bars};")
    wtop, wok = p.fresh("bc_w"), p.fresh("bc_wok")
    pwt, now, late = p.pred("bc_pwt"), p.r64("bc_now"), p.pred("bc_late")
    p.label(wtop)
    p(f"mbarrier.try_wait.parity.shared::cta.b64 {pwt}, [{ba}], {ph};")
    p(f"@{pwt} bra {wok};")
    p(f"mov.u64 {now}, %globaltimer;")
    p(f"setp.gt.u64 {late}, {now}, %t_deadline;")
    p(f"@{late} trap;")
    p(f"bra {wtop};")
    p.label(wok)
    piece_geom(l)
    p(f"mad.lo.u32 {sa}, {s}, {piece}, {smem};")
    p(f"add.s64 {ga}, {dst}, {off};")
    p(f"cp.async.bulk.global.shared::cta.bulk_group [{ga}], [{sa}], {sz};")
    p("cp.async.bulk.commit_group;")
    # advance
    p(f"add.u32 {l}, {l}, 1;")
    p(f"add.u32 {s}, {s}, 1;")
    p(f"setp.eq.u32 {pr}, {s}, {ring};")
    p(f"selp.u32 {s}, 0, {s}, {pr};")
    p(f"xor.b32 {tmp}, {ph}, 1;")
    p(f"selp.u32 {ph}, {tmp}, {ph}, {pr};")
    p(f"bra {top};")
    p.label(done)


@dataclass(frozen=True)
class TransferKernel:
    kind: str                  # "tma" | "ldst"
    unroll: int = 4            # ldst: 16-byte vectors in flight per lane
    lag: int = 1               # tma: pieces' stores in flight

    @property
    def name(self) -> str:
        return f"pkc_xfer_{self.kind}" + (f"_u{self.unroll}" if self.kind == "ldst"
                                          else f"_l{self.lag}")

    @property
    def threads(self) -> int:
        return 32 if self.kind == "tma" else 1024

    def emit(self) -> str:
        return _emit_tma(self) if self.kind == "tma" else _emit_ldst(self)


def _head(k: TransferKernel, params: list[str], body: _Ptx) -> str:
    lines = [f"// pkc transfer microbenchmark: {k.kind}", ".version 8.5", ".target sm_90a",
             ".address_size 64", "",
             ".extern .shared .align 1024 .b8 pkc_smem[];", "",
             f".visible .entry {k.name}(",
             ",\n".join(f"\t.param {ty} {k.name}_param_{n}" for n, ty in params), ")",
             f".maxntid {k.threads}, 1, 1", "{"]
    return "\n".join(lines + body.declarations() + [""] + body.lines + ["}", ""])


_PARAMS = [("src", ".u64"), ("dst", ".u64"), ("bytes", ".u64"), ("piece", ".u32"),
           ("ring", ".u32")]


def _emit_tma(k: TransferKernel) -> str:
    p = _Ptx()
    src, dst, nb = p.r64("src"), p.r64("dst"), p.r64("nbytes")
    piece, ring = p.r32("piece"), p.r32("ring")
    for reg, (n, ty) in zip((src, dst, nb, piece, ring), _PARAMS):
        p(f"ld.param{ty} {reg}, [{k.name}_param_{n}];")
    tid, cta = p.r32("xtid"), p.r32("xcta")
    p(f"mov.u32 {tid}, %tid.x;")
    p(f"mov.u32 {cta}, %ctaid.x;")
    pn = p.pred("pn")
    p(f"setp.ne.u32 {pn}, {tid}, 0;")
    p(f"@{pn} bra $L_exit;")
    p.reg("t_deadline", ".b64")
    p("mov.u64 %t_deadline, %globaltimer;")
    p("add.u64 %t_deadline, %t_deadline, 10000000000;")
    sbase, sbar = p.r32("sbase"), p.r32("sbar")
    p(f"mov.u32 {sbase}, pkc_smem;")
    p(f"add.u32 {sbase}, {sbase}, 1023;")
    p(f"and.b32 {sbase}, {sbase}, 0xFFFFFC00;")
    p(f"add.u32 {sbar}, {sbase}, {RING_BYTES};")
    i, a = p.r32("i"), p.r32("ia")
    pi = p.pred("pi")
    p(f"mov.u32 {i}, 0;")
    p.label("$L_init")
    p(f"mad.lo.u32 {a}, {i}, 8, {sbar};")
    p(f"mbarrier.init.shared::cta.b64 [{a}], 1;")
    p(f"add.u32 {i}, {i}, 1;")
    p(f"setp.lt.u32 {pi}, {i}, {ring};")
    p(f"@{pi} bra $L_init;")
    p("fence.mbarrier_init.release.cluster;")
    p("fence.proxy.async.shared::cta;")
    off = p.r64("ctaoff")
    p(f"cvt.u64.u32 {off}, {cta};")
    p(f"mul.lo.u64 {off}, {off}, {nb};")
    p(f"add.s64 {src}, {src}, {off};")
    p(f"add.s64 {dst}, {dst}, {off};")
    emit_bulk_copy_loop(p, src=src, dst=dst, total=nb, piece=piece, ring=ring, smem=sbase,
                        bars=sbar, lag=k.lag)
    p("cp.async.bulk.wait_group 0;")
    p.label("$L_exit")
    p("exit;")
    return _head(k, _PARAMS, p)


def _emit_ldst(k: TransferKernel) -> str:
    U = k.unroll
    p = _Ptx()
    src, dst, nb = p.r64("src"), p.r64("dst"), p.r64("nbytes")
    msg, unused = p.r32("msg"), p.r32("unused")
    for reg, (n, ty) in zip((src, dst, nb, msg, unused), _PARAMS):
        p(f"ld.param{ty} {reg}, [{k.name}_param_{n}];")
    tid, cta, warp, lane = p.r32("xtid"), p.r32("xcta"), p.r32("warp"), p.r32("lane")
    p(f"mov.u32 {tid}, %tid.x;")
    p(f"mov.u32 {cta}, %ctaid.x;")
    p(f"shr.u32 {warp}, {tid}, 5;")
    p(f"and.b32 {lane}, {tid}, 31;")
    off = p.r64("ctaoff")
    p(f"cvt.u64.u32 {off}, {cta};")
    p(f"mul.lo.u64 {off}, {off}, {nb};")
    p(f"add.s64 {src}, {src}, {off};")
    p(f"add.s64 {dst}, {dst}, {off};")
    nmsg, m, o = p.r32("nmsg"), p.r32("m"), p.r32("o")
    m64, base, ga, gd = p.r64("m64"), p.r64("mbase"), p.r64("ga"), p.r64("gd")
    tmp64 = p.r64("t64")
    p(f"cvt.u64.u32 {tmp64}, {msg};")
    p(f"div.u64 {tmp64}, {nb}, {tmp64};")
    p(f"cvt.u32.u64 {nmsg}, {tmp64};")
    pm, po = p.pred("pm"), p.pred("po")
    pu = [p.pred(f"pu{u}") for u in range(U)]
    ou = [p.r32(f"ou{u}") for u in range(U)]
    v = [[p.r32(f"v{u}_{j}") for j in range(4)] for u in range(U)]
    step = 32 * 16 * U
    p(f"mov.u32 {m}, {warp};")
    p.label("$L_msg")
    p(f"setp.ge.u32 {pm}, {m}, {nmsg};")
    p(f"@{pm} bra $L_exit;")
    p(f"mul.wide.u32 {base}, {m}, {msg};")
    p(f"shl.b32 {o}, {lane}, 4;")
    p.label("$L_step")
    p(f"setp.ge.u32 {po}, {o}, {msg};")
    p(f"@{po} bra $L_next;")
    for u in range(U):
        p(f"add.u32 {ou[u]}, {o}, {512 * u};")
        p(f"setp.lt.u32 {pu[u]}, {ou[u]}, {msg};")
    for u in range(U):
        p(f"cvt.u64.u32 {m64}, {ou[u]};")
        p(f"add.s64 {m64}, {m64}, {base};")
        p(f"add.s64 {ga}, {src}, {m64};")
        p(f"@{pu[u]} ld.global.v4.u32 {{{', '.join(v[u])}}}, [{ga}];")
    for u in range(U):
        p(f"cvt.u64.u32 {m64}, {ou[u]};")
        p(f"add.s64 {m64}, {m64}, {base};")
        p(f"add.s64 {gd}, {dst}, {m64};")
        p(f"@{pu[u]} st.global.v4.u32 [{gd}], {{{', '.join(v[u])}}};")
    p(f"add.u32 {o}, {o}, {step};")
    p("bra $L_step;")
    p.label("$L_next")
    p(f"add.u32 {m}, {m}, 32;")
    p("bra $L_msg;")
    p.label("$L_exit")
    p("exit;")
    return _head(k, _PARAMS, p)


def ldst_unroll(msg: int) -> int:
    """16-byte vectors per lane per step: a 2 KB message is one step of a warp at 4."""
    return 8 if msg >= 4096 else 4


KERNELS = {f"tma_l{lag}": TransferKernel("tma", lag=lag) for lag in (1, 2, 4, 8, 16, 32)}
KERNELS.update({"ldst_u4": TransferKernel("ldst", 4), "ldst_u8": TransferKernel("ldst", 8)})


def kernel_for(kind: str, msg: int) -> TransferKernel:
    """kind "tma" (lag = tma_lag(ring)), "tma_l1" (one store in flight) or "ldst"."""
    if kind == "tma":
        return KERNELS[f"tma_l{tma_lag(tma_ring(tma_piece(msg)))}"]
    if kind == "tma_l1":
        return KERNELS["tma_l1"]
    return KERNELS[f"ldst_u{ldst_unroll(msg)}"]


_PTX: dict = {}


def launch_copy(kind: str, src, dst, n_sms: int, bytes_per_cta: int, msg: int, stream=None):
    """Launch one copy over ``n_sms`` CTAs (torch uint8 tensors ``src``/``dst`` of at least
    ``n_sms * bytes_per_cta`` bytes; ``bytes_per_cta`` a multiple of ``msg``, 16-aligned)."""
    import ctypes

    from pkc.runtime.tma_launch import KernelArgs, launch, load_kernel

    k = kernel_for(kind, msg)
    if k not in _PTX:
        _PTX[k] = k.emit()
    kern = load_kernel(_PTX[k], k.name, SMEM_BYTES, src.device)
    if kind.startswith("tma"):
        piece = tma_piece(msg)
        extra = [ctypes.c_uint32(piece), ctypes.c_uint32(tma_ring(piece))]
    else:
        extra = [ctypes.c_uint32(msg), ctypes.c_uint32(0)]
    args = KernelArgs([ctypes.c_uint64(src.data_ptr()), ctypes.c_uint64(dst.data_ptr()),
                       ctypes.c_uint64(bytes_per_cta)] + extra)
    launch(kern, n_sms, k.threads, args, stream)
    return args
