"""Transfer microbenchmark kernels for sm_90a: how many bytes per second one SM moves.

Two copy kernels, one CTA per SM (the dynamic shared memory request leaves room for one),
CTA ``c`` copying bytes ``[c*B, (c+1)*B)`` of ``src`` to ``dst``:

* ``tma``: one thread per CTA issues bulk copies: ``cp.async.bulk`` global -> shared
  (completion on an mbarrier), then ``cp.async.bulk`` shared -> global (bulk groups),
  ``piece`` bytes at a time through a ring of ``ring`` slots (both kernel parameters),
  with up to ``lag`` pieces' stores in flight (compiled in: ``wait_group.read`` takes a
  constant); the same loop (:func:`fused.emit_bulk_copy_loop`) as the put side of the
  fused AG+GEMM. ``lag=1`` (one store at a time) was the first device run's loop.
* ``ldst``: all 1024 threads (32 warps) copy with 16-byte ``ld.global`` / ``st.global``;
  messages of ``msg`` bytes are dealt to the warps round-robin, each lane moving ``unroll``
  16-byte vectors per step (``unroll`` loads in flight before the stores).

On one GPU both read and write HBM (device to device): what they measure is the rate one
SM can drive, the figure that bounds a put over NVLink from that SM, not NVLink itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from pkc.codegen.hopper.fused import emit_bulk_copy_loop
from pkc.codegen.hopper.gemm import _Ptx

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
    zero = p.r32("zero")
    p(f"mov.u32 {zero}, 0;")
    emit_bulk_copy_loop(p, src=src, dsts=[dst], total=nb, first=zero, step=1, piece=piece,
                        ring=ring, smem=sbase, bars=sbar, timeout=True, lag=k.lag)
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

    from pkc.codegen.hopper.launch import KernelArgs, launch, load_kernel

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
