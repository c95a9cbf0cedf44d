"""Fused GEMM + collective kernels for sm_90a on the hooks of :class:`GemmKernel`.

Both kernels are generated for a world of ``W`` ranks (``W`` is compiled in; the rank is a
kernel parameter) in a symmetric-memory world: every symmetric buffer and every signal pad
exists on every rank, and the kernel receives, per buffer, a device array of the ``W``
base addresses (``torch.distributed._symmetric_memory``'s ``buffer_ptrs_dev`` /
``signal_pad_ptrs_dev``, or W buffers on one GPU in a virtual world; on one GPU with W = 1
every pointer is local). Signals are monotonic ``u32`` counters compared against
``epoch x count`` (the launch's epoch, 1, 2, ..., kept on the device in ``ctl`` and
advanced by the kernel itself, so that a captured CUDA graph replays correctly), so pads
are zeroed once
at allocation and never reset. Every spin-wait is bounded: after ``sig_timeout`` ns it
writes an error record (``ERR_FIELDS``) and stops waiting; the kernel then completes and
the host raises :class:`SignalTimeout` naming kernel, rank and signal.

GEMM + reduce-scatter (:class:`GemmRsKernel`, ``kind="rs"``)
    Each rank holds ``A [W*Mc, K]`` (its K shard) and ``B [N, K]`` (or ``[K, N]``, below)
    and computes the partial ``C = A @ B^T``; rank ``p`` owns output rows ``[p*Mc, (p+1)*Mc)`` summed over all ranks,
    in its accumulator ``acc_p [Mc, N]`` (f32, or the output dtype). The tile space is
    ``W`` chunks x the tiles of one chunk; slot ``s`` of the visiting order is chunk
    ``(rank + s) % W``: every rank starts with its own chunk, then the chunk of rank+1, ...
    (a permutation in every slot, so each link carries one stream at a time).
    Epilogue per tile (consumer warpgroups; the leader thread issues the bulk ops):
    own chunk -> TMA store (``cp.async.bulk.tensor``) into ``acc_rank`` (no zero fill is
    ever needed: the owner's plain stores come first); other chunk ``p`` -> TMA reduce-add
    (``cp.reduce.async.bulk.tensor .add``) into ``acc_p`` through ``p``'s tensor map,
    issued only after ``p`` signalled that its own chunk is stored (waited once per peer).
    Signals are per chunk: when a warpgroup moves to the next chunk (and at its end) it
    waits for its bulk groups (``cp.async.bulk.wait_group 0``), fences the async proxy and
    adds its tile count to ``pad_p[rank]`` (``red.release.sys``; ``.gpu`` when p is itself).
    At the end every consumer warpgroup's leader waits until ``pad_rank[q]`` reaches
    ``epoch x tiles_per_chunk x consumers`` for every other rank q (its own tiles are
    ordered by the kernel's completion); with an f32 accumulator it waits for its own
    slot too, and the warpgroups then convert ``acc_rank`` to the bf16/fp16 output
    (grid-strided, 4-wide). The own accumulator's tensor map is a by-value kernel
    parameter (the GEMM's C slot), the peers' come from a device array (W x 128 bytes):
    the first device run stored own tiles through the device-array map, 1-2% slower.
    Why own-chunk first (not last): a chunk visited last by its owner would have to be
    zeroed before anyone adds into it, an extra pass over the output (+30% at W=1 on the
    small-K shapes); with the owner's stores first, the adds of the others wait only for
    the owner's first slot, and the overlap is the same ((W-1)/W of the tiles travel).

    With ``out=True`` (W = 2, :class:`GemmRsOutKernel`) each rank computes the peer's
    chunk first and stores its partial into the peer's staging, then its own chunk, whose
    epilogue adds the staged partial and writes the sum to a caller's tensor.

GEMM + all-reduce (:class:`GemmArKernel`, ``kind="ar"``)
    The reduce-scatter kernel with every tile sent to every rank's full accumulator (its
    class docstring has the protocol): the all-reduce overlapped with the GEMM. With
    ``out=True`` (W = 2, :class:`GemmArOutKernel`) the result goes to a caller's tensor:
    the peer's chunk is summed in the epilogue (its partial loaded from the accumulator),
    the own chunk copied from the accumulator after the final wait.

GEMM + all-reduce into a fresh output (:class:`GemmArFreshKernel`, ``kind="arf"``, W <= 2)
    Every partial tile to the own output and the peer's staging; reducer CTAs add the
    staged partials into the output row block by row block: no persistent result, no copy
    after the kernel (its class docstring has the protocol).

All-gather + GEMM (:class:`AgGemmKernel`, ``kind="ag"``)
    Each rank holds its shard ``A_rank [Mc, K]``; ``gath [W, Mc, K]`` is symmetric; the
    output is ``C [W*Mc, N]`` (row block q = shard q). With W > 1 the last ``comm_ctas``
    CTAs of the grid are the put side. The shard is cut into G row blocks of one raster
    group each (``group_m x bm`` rows: the consumers' tile order walks a shard one raster
    group after another). One thread per put CTA serves the peers one at a time, in the
    order d = rank-1, rank-2, ... (peer d consumes shard rank in its slot W-k, so each
    peer gets first the shard it needs first, and in every step the ranks' puts form a
    permutation: no two share a destination); for each row block it moves its share in
    ``put_piece``-byte pieces, ``cp.async.bulk`` global -> shared (mbarrier), then
    ``cp.async.bulk`` shared -> d's ``gath[rank]`` (bulk groups), a ``put_ring``-deep ring
    with ``put_lag`` pieces' stores in flight; then waits for its writes, fences, and adds
    1 to ``pad_d[rank*G + block]``. Before its first put it waits for ``pad_rank[W*G + d]
    >= epoch`` for every peer d (d's kernel of this epoch started, so d finished reading
    the previous epoch's gathered rows). The producer thread visits shards in the order
    rank, rank+1, ...: local tiles load A from the local shard's tensor map, remote ones
    from the gathered buffer's 3-D map ``[W, Mc, K]`` (rows past a shard read zeros), after
    waiting once per row block for ``pad_rank[q*G + block] >= epoch x comm_ctas``: the GEMM
    follows the data block by block instead of waiting for whole shards. C is stored
    through a 3-D map ``[W, Mc, N]`` so that a tile never spills into the next shard's
    rows.
    With W = 1 there is no put side and no wait: the kernel is the GEMM with the tile order
    and the A source switch, which is what its W=1 ratio measures.

B: ``b_layout="nk"`` ``[N, K]`` (an nn.Linear weight; C = A @ B^T) or ``"kn"`` ``[K, N]``
(the ``x @ w`` of a pk.matmul; C = A @ B, bn a multiple of 64). The fused kernels reuse
the GEMM's B loads (``emit_load_b``: one box per k-block for nk, bn/64 boxes of 64 columns
for kn) and its wgmma descriptors; only the host's tensor map of B differs.

Requirements: ``cluster_m == 1``, TMA epilogue; every CTA of a rank's grid resident at once
(grid <= the SMs the rank runs on: a waiting CTA must not keep a CTA that it waits for
from starting); all ranks launch the same config with the same epoch.
"""

from __future__ import annotations

import ctypes
import weakref
from dataclasses import dataclass, field, replace

from pkc.codegen.hopper.gemm import (_SWIZZLE_FOR_ROW_BYTES, BK, GemmConfig, GemmKernel,
                                     TileRegs)

from pkc.codegen.hopper.report import ERR_FIELDS, emit_bounded_wait  # noqa: E402
ERR_KINDS = {1: "rs/ar: the owner's own chunk stored (before adding into it)",
             2: "rs/ar: all contributions to this rank's result",
             3: "ag: shard put by its owner",
             4: "ag: peer ready to receive (its kernel of this epoch started)",
             5: "arf: the peer's partial tiles of a row block in this rank's staging",
             6: "arf: this rank's own tiles of a row block in its output",
             7: "arf: peer ready to receive (its kernel of this epoch started)",
             8: "rs out: the peer's partial of this rank's chunk in its staging"}


@dataclass(frozen=True)
class FusedConfig:
    """One fused kernel: ``kind`` "rs" (GEMM + reduce-scatter), "ar" (GEMM + all-reduce
    by broadcast), "arf" (GEMM + all-reduce into a fresh output, W <= 2) or "ag"
    (all-gather + GEMM) for ``world`` ranks on top of ``gemm``."""

    kind: str = "rs"
    world: int = 1
    gemm: GemmConfig = field(default_factory=GemmConfig)
    acc: str = ""                  # rs: "f32" or the output dtype ("" = output dtype)
    comm_ctas: int = -1            # ag: put CTAs (-1: 0 at W=1, else 8); arf: reducer
    #                                CTAs (-1: 0 at W=1, else 16)
    put_piece: int = 32768         # ag / arf: bytes per bulk copy of the put / reduce side
    put_ring: int = 4              # ag / arf: pieces in flight per put / reducer CTA
    put_lag: int = 0               # ag: of them, pieces whose stores may be in flight
    #                                (0: put_ring // 2)
    own_map: str = "param"         # rs: own accumulator's tensor map: "param" (by value,
    #                                as the GEMM's C) or "global" (from the device array)
    out: bool = False              # ar / rs (W = 2): the result into a caller's output,
    #                                no persistent result (GemmArOutKernel, GemmRsOutKernel)
    wait_own: bool = False         # rs: end-of-kernel wait also on this rank's own tiles
    #                                (always with an f32 accumulator: the conversion needs
    #                                every CTA's tiles; otherwise kernel completion orders them)

    @property
    def acc_dtype(self) -> str:
        return self.acc or self.gemm.dtype

    @property
    def n_comm(self) -> int:
        if self.kind not in ("ag", "arf") or self.world == 1:
            return 0
        if self.comm_ctas >= 0:
            return self.comm_ctas
        return 8 if self.kind == "ag" else 16

    @property
    def lag(self) -> int:
        return self.put_lag or max(1, self.put_ring // 2)

    @property
    def acc_esize(self) -> int:
        return 4 if self.acc_dtype == "f32" else 2

    @property
    def piece_cols(self) -> int:
        """Columns of one epilogue piece (64 rows): the GEMM's bf16 width, halved for f32
        (same bytes, same swizzle)."""
        return self.gemm.epi_width * 2 // self.acc_esize

    @property
    def kernel_name(self) -> str:
        g = self.gemm
        extra = f"_{self.acc_dtype}acc" if self.kind in ("rs", "ar") else f"_cc{self.n_comm}"
        if self.kind in ("ag", "arf") and (self.put_piece, self.put_ring, self.put_lag) != (32768, 4, 0):
            extra += f"_p{self.put_piece // 1024}k{self.put_ring}l{self.lag}"
        if self.kind in ("rs", "ar"):
            extra += ("_gmap" if self.own_map == "global" else "") + \
                ("_wown" if self.wait_own else "") + ("_out" if self.out else "")
        if g.b_layout != "nk":            # nk names stay those of the measured kernels
            extra += f"_{g.b_layout}"
        return (f"pkc_{self.kind}_w{self.world}{extra}_{g.dtype}_{g.bm}x{g.bn}_s{g.stages}"
                f"_c{g.consumers}_g{g.group_m}")

    def gemm_cfg(self) -> GemmConfig:
        # ar into an output: a load mbarrier per epilogue buffer of each consumer warpgroup
        return self.gemm.with_(name=self.kernel_name,
                               extra_bars=2 * self.gemm.consumers if self.out else 0)

    def tag(self) -> str:
        g = self.gemm
        extra = f" acc={self.acc_dtype}" if self.kind in ("rs", "ar") else f" comm={self.n_comm}"
        extra += " out" if self.out else ""
        return (f"{self.kind} W={self.world}{extra} {g.bm}x{g.bn} s{g.stages} {g.dtype}"
                f" B {g.b_layout}")

    def with_(self, **kw) -> "FusedConfig":
        return replace(self, **kw)

    def validate(self) -> None:
        def need(cond, msg):
            if not cond:
                raise ValueError(f"FusedConfig {self.tag()}: {msg}")
        g = self.gemm
        g.validate()
        need(self.kind in ("rs", "ag", "ar", "arf"), f"kind {self.kind!r} not rs/ag/ar/arf")
        if self.kind == "arf":
            # W = 2: rank 0 and 1 both compute round(own + peer), the same sum; W > 2
            # would add in a rank-dependent order (and send W - 1 copies: RS + AG there)
            need(self.world <= 2, "arf adds one peer's partial: W <= 2")
            need(self.acc_dtype == g.dtype, "arf adds in the output dtype")
        need(not self.out or (self.kind in ("ar", "rs") and self.world == 2),
             "out (the result into a caller's output) is an ar / rs option at W = 2")
        need(not self.out or self.acc_dtype == g.dtype,
             "out sums in the epilogue (no f32 accumulator)")
        need(not self.out or g.epi_bufs == 2, "out loads ahead into the second epilogue buffer")
        if self.kind == "ar":
            need(self.acc_dtype == g.dtype, "ar adds in the output dtype (no f32 accumulator)")
            need(self.world <= 8, "ar keeps W x W signal slots in a 64-slot pad: W <= 8")
            need(self.own_map == "param", "ar stores its own tiles through the by-value map")
        need(1 <= self.world <= 32, "world must be 1..32 (a u32 bitmask of peers)")
        need(g.cluster_m == 1, "fused kernels use cluster_m=1")
        need(g.epilogue == "tma", "fused kernels use the TMA epilogue")
        need(self.acc_dtype in ("f32", g.dtype), f"acc {self.acc_dtype!r}: f32 or {g.dtype}")
        need(self.own_map in ("param", "global"), f"own_map {self.own_map!r}: param or global")
        need(self.piece_cols >= 8 and self.piece_cols % 8 == 0, "epilogue piece too narrow")
        if self.kind in ("ag", "arf") and self.world > 1:
            need(self.n_comm >= 1, f"{self.kind} with W > 1 needs comm_ctas >= 1")
            need(self.put_piece % 16 == 0 and 16 <= self.put_piece, "put_piece: 16-byte multiple")
            need(self.put_ring >= 2 and self.put_ring <= g.stages,
                 "put_ring must be 2..stages (the put ring reuses the full barriers)")
            need(self.put_ring * self.put_piece <= g.stages * g.stage_bytes,
                 "put ring does not fit in the stage buffers")
            need(1 <= self.lag < self.put_ring, "put_lag must be 1..put_ring-1")


class _Coords:
    """A TMA coordinate tuple as a function of a piece's (cn, cm): ``extra`` adds the
    outer coordinates (chunk, parity) of a 3-d map."""

    def __init__(self, *extra: str):
        self.extra, self.dims = extra, 2 + len(extra)

    def __call__(self, cn: str, cm: str) -> str:
        return "{" + ", ".join((cn, cm) + self.extra) + "}"


def _tma_piece(pred: str, tmap: str, crd: _Coords, cn: str, cm: str, buf: str,
               add: bool = False) -> str:
    """A leader's TMA store (or reduce-add) of one epilogue piece at (cn, cm) [+ outer
    coordinates]."""
    d = crd.dims
    op = (f"cp.reduce.async.bulk.tensor.{d}d.global.shared::cta.add.tile.bulk_group" if add
          else f"cp.async.bulk.tensor.{d}d.global.shared::cta.tile.bulk_group")
    return f"@{pred} {op} [{tmap}, {crd(cn, cm)}], [{buf}];"


def _tma_2d(pred: str, tmap: str, cn: str, cm: str, buf: str, add: bool = False) -> str:
    """A leader's 2-d TMA store (or reduce-add) of one epilogue piece at (cn, cm)."""
    return _tma_piece(pred, tmap, _Coords(), cn, cm, buf, add)


@dataclass
class FusedTile(TileRegs):
    """A tile of a fused kernel: ``peer`` is the chunk's owner (rs) or the shard (ag);
    ``m0`` the first row in A's row space, ``m0_local`` the first row inside the chunk."""

    peer: str = ""
    m0_local: str = ""


class _FusedBase(GemmKernel):
    """Parameters, pointer arithmetic and bounded waits shared by the fused kernels."""

    def __init__(self, fcfg: FusedConfig):
        fcfg.validate()
        self.fcfg = fcfg
        super().__init__(fcfg.gemm_cfg())

    # ---- parameters ------------------------------------------------------------------
    PARAMS: tuple[tuple[str, str], ...] = ()

    def extra_params(self) -> list[str]:
        out = []
        for name, ty in self.PARAMS:
            if ty == "map":
                out.append(f".param .align 64 .b8 {self._pname(name)}[128]")
            else:
                out.append(f".param {ty} {self._pname(name)}")
        return out

    def _load_params(self) -> None:
        p = self.p
        for name, ty in self.PARAMS:
            if ty == "map":
                r = p.r64(f"fz_{name}")
                p(f"mov.u64 {r}, {self._pname(name)};")
                p(f"cvta.param.u64 {r}, {r};")
            elif ty == ".u64":
                p(f"ld.param.u64 {p.r64('fz_' + name)}, [{self._pname(name)}];")
            else:
                p(f"ld.param.u32 {p.r32('fz_' + name)}, [{self._pname(name)}];")

    # ---- helpers ---------------------------------------------------------------------
    def _ptr_of(self, dst: str, array: str, idx: str) -> None:
        """dst (u64) = array[idx], array a device array of u64 addresses."""
        p = self.p
        off = p.r64("fz_poff")
        p(f"mul.wide.u32 {off}, {idx}, 8;")
        p(f"add.s64 {off}, {array}, {off};")
        p(f"ld.global.nc.u64 {dst}, [{off}];")

    def _slot_addr(self, dst: str, array: str, peer: str, slot: str) -> None:
        """dst = address of u32 slot ``slot`` of ``peer``'s signal pad."""
        p = self.p
        self._ptr_of(dst, array, peer)
        off = p.r64("fz_soff")
        p(f"mul.wide.u32 {off}, {slot}, 4;")
        p(f"add.s64 {dst}, {dst}, {off};")

    def _mod_world(self, r: str) -> None:
        """r in [0, 2W) -> r mod W."""
        p = self.p
        q = p.pred("fz_pmod")
        p(f"setp.ge.u32 {q}, {r}, {self.fcfg.world};")
        p(f"@{q} sub.u32 {r}, {r}, {self.fcfg.world};")

    def _spin_wait(self, addr: str, want: str, kind: int, peer: str, scope: str = "sys") -> None:
        """One thread: wait until (s32)(ld.acquire [addr] - want) >= 0, at most
        ``sig_timeout`` ns; then record the first timeout in ``err`` and stop waiting
        (this and every later wait of the thread returns at once)."""
        emit_bounded_wait(self.p, addr, want, timeout="%fz_sig_timeout", sleep_ns=64,
                          scope=scope, gave=self.p.r32("fz_gave"), err="%fz_err",
                          mbox="%fz_mbox", trap="%fz_trap", tag="fz",
                          record=[str(kind), "%fz_rank", peer, "%seen", want, "%fz_ctaid",
                                  "%fz_epoch"])

    def emit_prologue(self) -> None:
        """The launch's epoch from the device: ``ctl = [epoch, ctas_done]`` of this rank;
        read by every thread before the CTA's first barrier (see :meth:`emit_exit`)."""
        p = self.p
        ctl, ep = p.r64("fz_ctl"), p.r32("fz_epoch")
        p(f"ld.param.u64 {ctl}, [{self._pname('ctl')}];")
        p(f"ld.global.u32 {ep}, [{ctl}];")
        p(f"add.u32 {ep}, {ep}, 1;")

    def emit_exit(self) -> None:
        """Thread 0 of the last CTA to finish publishes the epoch for the next launch (and
        resets the count). Every thread of every CTA read the epoch before its CTA's first
        barrier, which each thread 0 passed before counting itself done: no thread of this
        launch can see the new value. Kept on the device so that the kernel's parameters
        never change between launches: a CUDA graph that captured it replays correctly."""
        p = self.p
        skip = p.fresh("fz_exit")
        t0, last, old = p.pred("fz_t0"), p.pred("fz_last"), p.r32("fz_done")
        p(f"setp.eq.u32 {t0}, %tidx, 0;")
        p(f"@!{t0} bra {skip};")
        p(f"atom.global.add.u32 {old}, [%fz_ctl+4], 1;")
        p(f"add.u32 {old}, {old}, 1;")
        p(f"setp.eq.u32 {last}, {old}, %fz_nctaid;")
        p(f"@{last} st.global.u32 [%fz_ctl+4], 0;")
        p(f"@{last} st.global.u32 [%fz_ctl], %fz_epoch;")
        p.label(skip)

    def _row_blocks(self) -> str:
        """%fz_G = row blocks of the tile space: raster groups of group_m m-tiles."""
        p, gm = self.p, self.cfg.group_m
        G = p.r32("fz_G")
        p(f"add.u32 {G}, %num_mc, {gm - 1};")
        p(f"div.u32 {G}, {G}, {gm};")
        return G

    def _side_ctas(self, what: str, body) -> None:
        """The last ``n_comm`` CTAs of the grid run ``body`` (and leave) instead of the
        GEMM, whose tile stride shrinks by as many."""
        p = self.p
        p.comment(f"the last comm_ctas CTAs {what}")
        p(f"sub.u32 %tstride, %tstride, {self.fcfg.n_comm};")
        pc = p.pred("fz_pcomm")
        p(f"setp.ge.u32 {pc}, %fz_ctaid, %tstride;")
        p.split_role(pc, body, "compute")

    def _tile_space_common(self) -> None:
        """%fz_tpc = tiles of one chunk; %num_tiles = W chunks of them."""
        p = self.p
        self._load_params()
        p(f"mov.u32 {p.r32('fz_gave')}, 0;")
        p(f"mov.u32 {p.r32('fz_ctaid')}, %ctaid.x;")
        p(f"mov.u32 {p.r32('fz_nctaid')}, %nctaid.x;")
        p(f"mov.u32 {p.r32('fz_tpc')}, %num_tiles;")
        p(f"mul.lo.u32 %num_tiles, %num_tiles, {self.fcfg.world};")

    # the chunk of slot 0 is rank + SLOT_SHIFT (the own chunk first, or the next rank's)
    SLOT_SHIFT = 0

    def emit_tile_coords(self, tile: str, pre: str) -> FusedTile:
        """Slot s = tile / tiles_per_chunk visits chunk (rank + s + SLOT_SHIFT) % W; inside
        a chunk the GEMM's grouped rasterization."""
        p = self.p
        slot, loc, peer = (p.r32(f"{pre}_fz_{x}") for x in ("slot", "loc", "peer"))
        p(f"div.u32 {slot}, {tile}, %fz_tpc;")
        p(f"mul.lo.u32 {loc}, {slot}, %fz_tpc;")
        p(f"sub.u32 {loc}, {tile}, {loc};")
        p(f"add.u32 {peer}, %fz_rank, {slot};")
        if self.SLOT_SHIFT:
            p(f"add.u32 {peer}, {peer}, {self.SLOT_SHIFT};")
        self._mod_world(peer)
        t = self._raster(loc, pre)
        m0g = p.r32(f"{pre}_fz_m0g")
        p(f"mad.lo.u32 {m0g}, {peer}, %M, {t.m0};")
        return FusedTile(t.m_blk, t.n_blk, m0g, t.n0, peer=peer, m0_local=t.m0)

    # ---- the epilogue: pieces of 64 rows through swizzled smem, one bulk op each ------
    def emit_epilogue_setup(self) -> None:
        """Per thread: smem row bases and swizzled column offsets of its two rows."""
        c, p = self.cfg, self.p
        rowb = 2 * c.epi_width                   # bytes per piece row (bf16 width x 2)
        mask = (1 << _SWIZZLE_FOR_ROW_BYTES[rowb]) - 1
        es = self.epi_esize
        eb = p.r32("epi_base")
        p(f"mad.lo.u32 {eb}, %cw, {c.epi_bufs * c.epi_buf_bytes}, %sbase;")
        p(f"add.u32 {eb}, {eb}, {c.stages * c.stage_bytes};")
        p(f"mov.u32 {p.r32('epi_off')}, 0;")
        p(f"add.u32 {p.r32('epi_bar')}, %cw, 1;")
        r0, tmp, lo = p.r32("epi_r0"), p.r32("epi_tmp"), p.r32("epi_lo")
        p(f"shl.b32 {r0}, %warp, 4;")
        p(f"shr.u32 {tmp}, %lane, 2;")
        p(f"add.u32 {r0}, {r0}, {tmp};")
        p(f"and.b32 {lo}, %lane, 3;")
        p(f"mul.lo.u32 {lo}, {lo}, {2 * es};")       # byte offset of the lane's column pair
        for i in range(2):
            ro, y = p.r32(f"epi_row{i}"), p.r32(f"epi_y{i}")
            p(f"add.u32 {ro}, {r0}, {8 * i};")
            p(f"mul.lo.u32 {ro}, {ro}, {rowb};")
            # 128B-family swizzle: 16-byte chunk bits [4,4+B) ^= address bits [7,7+B);
            # the lane's column offset and the n8 block offset occupy disjoint bits, so
            # offset(jj) = row + ((8*es*jj) ^ (lane_off ^ swz))
            p(f"shr.u32 {y}, {ro}, 7;")
            p(f"and.b32 {y}, {y}, {mask};")
            p(f"shl.b32 {y}, {y}, 4;")
            p(f"xor.b32 {y}, {y}, {lo};")

    epi_esize = 2

    def _emit_pieces(self, t: FusedTile, op_lines) -> None:
        """Stage the warpgroup's accumulators piece by piece (64 rows x piece columns) in
        the swizzled epilogue buffers (the GEMM's loop); ``op_lines(buf, cn, cm)`` gives
        the leader's bulk op(s) for one piece (cm: the piece's first row inside the chunk /
        shard). f32 accumulators are stored as they are, 16-bit ones packed."""
        p, es = self.p, self.epi_esize

        def store_pair(mi, q, i, jj, x, a, rb, v):
            p(f"xor.b32 {x}, %epi_y{i}, {8 * es * jj};")
            p(f"add.u32 {a}, {rb}, {x};")
            if es == 4:
                p(f"st.shared.v2.f32 [{a}], {{{self.acc(mi, q)}, {self.acc(mi, q + 1)}}};")
            else:
                self._pack(v, self.acc(mi, q), self.acc(mi, q + 1))
                p(f"st.shared.b32 [{a}], {v};")

        self._emit_epilogue_pieces(t.m0_local, t.n0, self.cfg.epi_width * 2 // es, store_pair,
                                   op_lines)

    def _grid_strided(self, n: str, body, label: str, U: int = 4) -> None:
        """Every consumer thread of the grid walks items [0, n) with all the consumer
        threads' stride, U per trip: ``body(idx, pin)`` with idx[u] = i + u * stride and
        pin[u] = idx[u] < n."""
        p, c = self.p, self.cfg
        i, stride, wk = p.r32("fz_ci"), p.r32("fz_cstride"), p.r32("fz_wk")
        p(f"mad.lo.u32 {wk}, %fz_ctaid, {c.consumers}, %cw;")
        p(f"mad.lo.u32 {i}, {wk}, 128, %ltid;")
        p(f"mov.u32 {stride}, %fz_nctaid;")
        p(f"mul.lo.u32 {stride}, {stride}, {c.consumers * 128};")
        top, done = p.fresh(label), p.fresh(f"{label}_done")
        pin = [p.pred(f"fz_cin{u}") for u in range(U)]
        idx = [p.r32(f"fz_cidx{u}") for u in range(U)]
        p.label(top)
        p(f"setp.ge.u32 {pin[0]}, {i}, {n};")
        p(f"@{pin[0]} bra {done};")
        for u in range(U):
            if u:
                p(f"mad.lo.u32 {idx[u]}, {stride}, {u}, {i};")
            else:
                p(f"mov.u32 {idx[u]}, {i};")
            p(f"setp.lt.u32 {pin[u]}, {idx[u]}, {n};")
        body(idx, pin)
        p(f"mad.lo.u32 {i}, {stride}, {U}, {i};")
        p(f"bra {top};")
        p.label(done)

    def emit(self) -> str:
        text = super().emit()
        return text.replace("// pkc sm_90a GEMM:", f"// pkc fused {self.fcfg.tag()}, on GEMM:", 1)


class GemmRsKernel(_FusedBase):
    """GEMM + reduce-scatter (see the module docstring)."""

    PARAMS = (("rank", ".u32"), ("ctl", ".u64"), ("acc_maps", ".u64"), ("acc_ptrs", ".u64"),
              ("sig_ptrs", ".u64"), ("out", ".u64"), ("err", ".u64"), ("sig_timeout", ".u64"),
              ("mbox", ".u64"), ("trap", ".u32"))

    KIND = "rs"

    def __init__(self, fcfg: FusedConfig):
        if fcfg.kind != self.KIND:
            raise ValueError(f"{type(self).__name__} needs kind={self.KIND!r}")
        super().__init__(fcfg)
        self.epi_esize = fcfg.acc_esize

    def emit_tile_space(self) -> None:
        p = self.p
        self._tile_space_common()
        want = p.r32("fz_want")
        p(f"mul.lo.u32 {want}, %fz_tpc, {self.cfg.consumers};")
        p(f"mul.lo.u32 {want}, {want}, %fz_epoch;")

    def emit_epilogue_setup(self) -> None:
        super().emit_epilogue_setup()
        p = self.p
        p(f"mov.u32 {p.r32('fz_cur')}, %fz_rank;")     # the chunk whose tiles are pending
        p(f"mov.u32 {p.r32('fz_pend')}, 0;")           # tiles issued, not yet signalled
        p(f"mov.u32 {p.r32('fz_ready')}, 0;")          # peers seen with their own chunk stored
        if self.fcfg.own_map == "global":
            tm = p.r64("fz_tmap")
            p(f"mad.wide.u32 {tm}, %fz_rank, 128, %fz_acc_maps;")
            p(f"@%p_lead prefetch.tensormap [{tm}];")
        else:
            p("@%p_lead prefetch.tensormap [%tmC];")

    def _flush(self, cond: str | None) -> None:
        """Leader: if tiles are pending (and ``cond``), wait for their bulk groups, fence,
        and add their count to pad_cur[rank]."""
        p = self.p
        skip = p.fresh("noflush")
        pz = p.pred("fz_pz")
        p(f"@!%p_lead bra {skip};")
        if cond:
            p(f"@!{cond} bra {skip};")
        p(f"setp.eq.u32 {pz}, %fz_pend, 0;")
        p(f"@{pz} bra {skip};")
        p("cp.async.bulk.wait_group 0;")
        p("fence.proxy.async.global;")
        self._signal_pending()
        p("mov.u32 %fz_pend, 0;")
        p.label(skip)

    def _signal_pending(self) -> None:
        """rs: the pending tiles of chunk ``cur`` landed in its owner: pad_cur[rank]."""
        p = self.p
        addr = p.r64("fz_faddr")
        self._slot_addr(addr, "%fz_sig_ptrs", "%fz_cur", "%fz_rank")
        ploc = p.pred("fz_ploc")
        p(f"setp.eq.u32 {ploc}, %fz_cur, %fz_rank;")
        p(f"@{ploc} red.release.gpu.global.add.u32 [{addr}], %fz_pend;")
        p(f"@!{ploc} red.release.sys.global.add.u32 [{addr}], %fz_pend;")

    def _enter_chunk(self, t: FusedTile) -> str:
        """Signal the previous chunk when the tile's chunk differs; then, once per owner
        (a bitmask of owners seen), the leader waits until adding into its chunk is safe
        (:meth:`_wait_owner_ready`). Returns the "own chunk" predicate."""
        p = self.p
        self._change_chunk(t)
        own = p.pred("fz_own")
        p(f"setp.eq.u32 {own}, {t.peer}, %fz_rank;")
        if self.fcfg.world > 1:
            self._wait_owner_once(t, own)
        return own

    def _change_chunk(self, t: FusedTile) -> None:
        """When the tile's chunk is not the current one: signal the current chunk's
        pending tiles (:meth:`_flush`) and make the tile's chunk current."""
        p = self.p
        p.comment(f"---- {self.KIND} epilogue: signal the previous chunk when the chunk changes")
        chg = p.pred("fz_chg")
        p(f"setp.ne.u32 {chg}, {t.peer}, %fz_cur;")
        self._flush(chg)
        p(f"mov.u32 %fz_cur, {t.peer};")

    def _wait_owner_once(self, t: FusedTile, own: str) -> None:
        """Leader, for a tile of another rank's chunk: wait until adding into it is safe
        (:meth:`_wait_owner_ready`), once per owner (a bitmask of owners seen)."""
        p = self.p
        p.comment("adds into a chunk only after its owner stored it (once per owner)")
        skip = p.fresh("noready")
        bit, tmp = p.r32("fz_bit"), p.r32("fz_btmp")
        pk = p.pred("fz_pknown")
        p(f"@!%p_lead bra {skip};")
        p(f"@{own} bra {skip};")
        p(f"shl.b32 {bit}, 1, {t.peer};")
        p(f"and.b32 {tmp}, %fz_ready, {bit};")
        p(f"setp.ne.u32 {pk}, {tmp}, 0;")
        p(f"@{pk} bra {skip};")
        self._wait_owner_ready(t)
        p("fence.proxy.async.global;")
        p(f"or.b32 %fz_ready, %fz_ready, {bit};")
        p.label(skip)

    def _wait_owner_ready(self, t: FusedTile) -> None:
        """rs: the owner's own tiles are in its accumulator (its slot of its own pad)."""
        addr = self.p.r64("fz_waddr")
        self._slot_addr(addr, "%fz_sig_ptrs", t.peer, t.peer)
        self._spin_wait(addr, "%fz_want", 1, t.peer, "sys")

    def emit_epilogue_tile(self, t: FusedTile) -> None:
        p, f = self.p, self.fcfg
        own = self._enter_chunk(t)
        tm = p.r64("fz_tmap")
        p(f"mad.wide.u32 {tm}, {t.peer}, 128, %fz_acc_maps;")
        if f.own_map == "param":
            p(f"@{own} mov.b64 {tm}, %tmC;")      # own tiles: the by-value map, as the GEMM
        pst, pred = p.pred("fz_pst"), p.pred("fz_pred")
        p(f"and.pred {pst}, %p_lead, {own};")
        p(f"not.pred {pred}, {own};")
        p(f"and.pred {pred}, %p_lead, {pred};")

        def ops(buf, cn, cm):
            return [_tma_2d(pst, tm, cn, cm, buf), _tma_2d(pred, tm, cn, cm, buf, add=True)]

        self._emit_pieces(t, ops)
        p("add.u32 %fz_pend, %fz_pend, 1;")

    def emit_epilogue_finish(self) -> None:
        p, f, c = self.p, self.fcfg, self.cfg
        p.comment("---- rs finish: signal the last chunk, wait for every contribution")
        self._flush(None)
        skip = p.fresh("nofinal")
        p(f"@!%p_lead bra {skip};")
        q, addr = p.r32("fz_q"), p.r64("fz_qaddr")
        top = p.fresh("finalq")
        own_too = f.acc_dtype == "f32" or f.wait_own
        p(f"mov.u32 {q}, 0;")
        p.label(top)
        nxt = p.fresh("finalq_next")
        if not own_too:
            # this rank's own tiles: ordered before any later work by kernel completion
            pself = p.pred("fz_pself")
            p(f"setp.eq.u32 {pself}, {q}, %fz_rank;")
            p(f"@{pself} bra {nxt};")
        self._slot_addr(addr, "%fz_sig_ptrs", "%fz_rank", q)
        self._spin_wait(addr, "%fz_want", 2, q, "sys")
        p.label(nxt)
        pq = p.pred("fz_pq")
        p(f"add.u32 {q}, {q}, 1;")
        p(f"setp.lt.u32 {pq}, {q}, {f.world};")
        p(f"@{pq} bra {top};")
        p("fence.proxy.async.global;")
        p.label(skip)
        if f.acc_dtype != "f32":
            return
        p.comment("---- f32 accumulator -> output dtype, grid-strided over the chunk")
        p("bar.sync %epi_bar, 128;")
        accp, outp = p.r64("fz_accl"), p.r64("fz_outl")
        self._ptr_of(accp, "%fz_acc_ptrs", "%fz_rank")
        p(f"mov.u64 {outp}, %fz_out;")
        n4 = p.r32("fz_n4")
        # vec4 items: Mc * N / 4 (N % 8 == 0)
        p(f"mul.lo.u32 {n4}, %M, %N;")
        p(f"shr.u32 {n4}, {n4}, 2;")

        def convert(idx, pin):
            U = len(idx)
            ga, oa = p.r64("fz_cga"), p.r64("fz_coa")
            vals = [[p.reg(f"fz_cv{u}_{k}", ".f32") for k in range(4)] for u in range(U)]
            pk = [p.r32(f"fz_cp{u}_{k}") for u in range(U) for k in range(2)]
            for u in range(U):
                p(f"mul.wide.u32 {ga}, {idx[u]}, 16;")
                p(f"add.s64 {ga}, {accp}, {ga};")
                p(f"@{pin[u]} ld.global.cg.v4.f32 {{{', '.join(vals[u])}}}, [{ga}];")
            dt = c.dtype
            for u in range(U):
                a0, a1 = pk[2 * u], pk[2 * u + 1]
                p(f"cvt.rn.{dt}x2.f32 {a0}, {vals[u][1]}, {vals[u][0]};")
                p(f"cvt.rn.{dt}x2.f32 {a1}, {vals[u][3]}, {vals[u][2]};")
                p(f"mul.wide.u32 {oa}, {idx[u]}, 8;")
                p(f"add.s64 {oa}, {outp}, {oa};")
                p(f"@{pin[u]} st.global.v2.b32 [{oa}], {{{a0}, {a1}}};")
        self._grid_strided(n4, convert, "cvt")


class GemmArKernel(GemmRsKernel):
    """GEMM + all-reduce by broadcast (``kind="ar"``): every rank's partial tile goes to
    every rank's full ``[W*Mc, N]`` accumulator. Chunk p's tiles: its owner stores them
    into all W accumulators (slot 0 of its order), every other rank reduce-adds its
    partial into all W after waiting, once per (p, destination), for p's stores there.
    Each rank sends (W-1) partial products (RS + AG would send 2(W-1)/W), equal at W = 2
    and all of it overlapped with the GEMM, where RS + AG leaves the all-gather after it.

    Signals: pad_d[p * W + q] counts the tiles of chunk p that rank q has landed in rank
    d's accumulator (each consumer warpgroup adds its share when it leaves a chunk). A
    rank waits for pad_d[p * W + p] before adding chunk p into d, and at the end for
    pad_rank[p * W + q] of every (p, q) with q != rank (its own adds are ordered by the
    kernel's completion). The accumulators' maps are 3-d (``[N, Mc, W]``, box depth 1) so
    that a tile never spills into the next chunk."""

    KIND = "ar"

    def _slot(self, dst: str, chunk: str, src: str) -> None:
        p = self.p
        p(f"mad.lo.u32 {dst}, {chunk}, {self.fcfg.world}, {src};")

    def _signal_pending(self) -> None:
        """ar: the pending tiles of chunk ``cur`` landed in every rank: pad_d[cur, rank]."""
        p, W = self.p, self.fcfg.world
        addr, sl = p.r64("fz_faddr"), p.r32("fz_fslot")
        self._slot(sl, "%fz_cur", "%fz_rank")
        for d in range(W):
            self._slot_addr(addr, "%fz_sig_ptrs", str(d), sl)
            p(f"red.release.sys.global.add.u32 [{addr}], %fz_pend;")

    def _wait_owner_ready(self, t: FusedTile) -> None:
        """ar: the owner's tiles are stored in every rank's accumulator (slot (p, p) of
        every rank's pad); the record names the owner, whose stores are late."""
        p, W = self.p, self.fcfg.world
        addr, sl = p.r64("fz_waddr"), p.r32("fz_wslot")
        self._slot(sl, t.peer, t.peer)
        for d in range(W):
            self._slot_addr(addr, "%fz_sig_ptrs", str(d), sl)
            self._spin_wait(addr, "%fz_want", 1, t.peer, "sys")

    def emit_epilogue_tile(self, t: FusedTile) -> None:
        p, W = self.p, self.fcfg.world
        own = self._enter_chunk(t)
        tms = [p.r64(f"fz_tmap{d}") for d in range(W)]
        for d in range(W):
            p(f"add.u64 {tms[d]}, %fz_acc_maps, {128 * d};")
        pst, pred = p.pred("fz_pst"), p.pred("fz_pred")
        p(f"and.pred {pst}, %p_lead, {own};")
        p(f"not.pred {pred}, {own};")
        p(f"and.pred {pred}, %p_lead, {pred};")

        crd = _Coords(t.peer)

        def ops(buf, cn, cm):
            return [op for d in range(W) for op in (
                _tma_piece(pst, tms[d], crd, cn, cm, buf),
                _tma_piece(pred, tms[d], crd, cn, cm, buf, add=True))]

        self._emit_pieces(t, ops)
        p("add.u32 %fz_pend, %fz_pend, 1;")

    def emit_epilogue_finish(self) -> None:
        p, W = self.p, self.fcfg.world
        p.comment("---- ar finish: signal the last chunk, wait for every (chunk, rank) here")
        self._flush(None)
        skip = p.fresh("nofinal")
        p(f"@!%p_lead bra {skip};")
        addr, sl = p.r64("fz_qaddr"), p.r32("fz_qslot")
        for q in range(W):
            nxt = p.fresh("finalq_next")
            pself = p.pred("fz_pself")
            p(f"setp.eq.u32 {pself}, %fz_rank, {q};")
            p(f"@{pself} bra {nxt};")      # this rank's own adds: ordered by kernel completion
            for c in range(W):
                p(f"mov.u32 {sl}, {c * W + q};")
                self._slot_addr(addr, "%fz_sig_ptrs", "%fz_rank", sl)
                self._spin_wait(addr, "%fz_want", 2, str(q), "sys")
            p.label(nxt)
        p("fence.proxy.async.global;")
        p.label(skip)


class _EpilogueSum:
    """For the fused kernels whose epilogue adds a partial that another rank stored in
    this rank's symmetric buffer (:class:`GemmArOutKernel`, :class:`GemmRsOutKernel`):
    each piece of the partial is TMA-loaded into the epilogue buffer (same box and
    swizzle as the stores: the threads find their elements where they would write them),
    the warpgroup adds its f32 accumulators and rounds once, and the piece goes out by
    TMA store. The loads run ahead: a tile's first piece before its main loop (the
    subclass's tile prologue, after its wait for the partial), piece k + 1 into the other
    buffer once piece k's stores are issued; each of the two buffers has its own mbarrier
    (bit b of ``%fo_ph`` is buffer b's phase)."""

    def _sum_setup(self) -> None:
        """The load barriers and phases; the accumulator / staging maps of this rank
        (``%fo_tmine``) and of the other (``%fo_ttheirs``; W = 2)."""
        p, S = self.p, self.cfg.stages
        bar = p.r32("fo_bar")                          # this warpgroup's 2 load barriers
        p(f"mad.lo.u32 {bar}, %cw, 16, %sbar;")
        p(f"add.u32 {bar}, {bar}, {16 * S};")
        p(f"mov.u32 {p.r32('fo_ph')}, 0;")
        mine, theirs, other = p.r64("fo_tmine"), p.r64("fo_ttheirs"), p.r32("fo_other")
        p(f"mad.wide.u32 {mine}, %fz_rank, 128, %fz_acc_maps;")
        p(f"xor.b32 {other}, %fz_rank, 1;")
        p(f"mad.wide.u32 {theirs}, {other}, 128, %fz_acc_maps;")

    def emit_epilogue_setup(self) -> None:
        super().emit_epilogue_setup()
        self._sum_setup()

    # the tiles whose epilogue sums: the own chunk's (rs) or the peer's (ar)
    SUMS_OWN_CHUNK = False
    PROLOGUE_NOTE = ""

    def emit_consumer_tile_prologue(self, t: FusedTile) -> None:
        """Before a summed tile's main loop: signal the chunk left (the other rank waits
        for those signals before it sends what we wait for), wait for the partial, load
        its first piece."""
        p = self.p
        own, skip = p.pred("fo_pown"), p.fresh("fo_pre")
        p(f"setp.eq.u32 {own}, {t.peer}, %fz_rank;")
        p(f"@{'!' if self.SUMS_OWN_CHUNK else ''}{own} bra {skip};")
        p.comment(self.PROLOGUE_NOTE)
        self._change_chunk(t)
        self._await_partial(t, own, skip)
        self._load_first_piece(t, "%fo_tmine", self._partial_coords(t))
        p.label(skip)

    def _await_partial(self, t: FusedTile, own: str, skip: str) -> None:
        """The wait for the partial, leaving only the leader to go on (the others to
        ``skip``)."""
        raise NotImplementedError

    def _partial_coords(self, t: FusedTile) -> _Coords:
        raise NotImplementedError

    def _buffer_bar(self, off: str) -> tuple[str, str]:
        """(the load barrier of the epilogue buffer at offset ``off``, its index 0 / 1)."""
        p = self.p
        pb, bi, bar = p.pred("fo_pb"), p.r32("fo_bi"), p.r32("fo_b")
        p(f"setp.ne.u32 {pb}, {off}, 0;")
        p(f"selp.u32 {bi}, 1, 0, {pb};")
        p(f"mad.lo.u32 {bar}, {bi}, 8, %fo_bar;")
        return bar, bi

    def _load_piece(self, t: FusedTile, k: int, off: str, tmap: str, crd) -> None:
        """Leader: TMA load of piece k of the partial (map ``tmap``, coordinates
        ``crd(cn, cm)``) into the epilogue buffer at ``off``, on that buffer's barrier."""
        p, c = self.p, self.cfg
        mi, ch = self.epilogue_pieces(c.epi_width)[k]
        cn, cm, buf = p.r32("fo_cn"), p.r32("fo_cm"), p.r32("fo_buf")
        p(f"mad.lo.u32 {cm}, %cw, {c.wg_m}, {t.m0_local};")
        p(f"add.u32 {cm}, {cm}, {64 * mi};")
        p(f"add.u32 {cn}, {t.n0}, {ch * c.epi_width};")
        p(f"add.u32 {buf}, %epi_base, {off};")
        bar, _ = self._buffer_bar(off)
        p(f"mbarrier.arrive.expect_tx.shared::cta.b64 _, [{bar}], {c.epi_buf_bytes};")
        p(f"cp.async.bulk.tensor.{crd.dims}d.shared::cluster.global.tile.mbarrier::"
          f"complete_tx::bytes [{buf}], [{tmap}, {crd(cn, cm)}], [{bar}];")

    def _load_first_piece(self, t: FusedTile, tmap: str, crd) -> None:
        """Leader, in the tile prologue: piece 0 into the current buffer, once free."""
        self.p(f"cp.async.bulk.wait_group.read {self.cfg.epi_bufs - 1};")
        self._load_piece(t, 0, "%epi_off", tmap, crd)

    def _emit_summed_pieces(self, t: FusedTile, tmap: str, crd, stores) -> None:
        """The epilogue of a summed tile: per piece, wait for its load, add, then the
        leader's TMA stores ``stores`` ((map, coordinate function), ...), then the next
        piece's load."""
        p = self.p
        n = len(self.epilogue_pieces(self.cfg.epi_width))

        def fill(buf, cn, cm):                  # this piece's load (issued ahead) landed
            bar, bi = self._buffer_bar("%epi_off")
            par, m = p.r32("fo_par"), p.r32("fo_m")
            p(f"shr.b32 {par}, %fo_ph, {bi};")
            p(f"and.b32 {par}, {par}, 1;")
            self._wait(bar, par, "fo_load")
            p(f"shl.b32 {m}, 1, {bi};")
            p(f"xor.b32 %fo_ph, %fo_ph, {m};")

        def add_pair(mi, q, i, jj, x, a, rb, v):
            lo, hi = p.reg("fo_lo", ".f32"), p.reg("fo_hi", ".f32")
            p(f"xor.b32 {x}, %epi_y{i}, {16 * jj};")
            p(f"add.u32 {a}, {rb}, {x};")
            p(f"ld.shared.b32 {v}, [{a}];")
            p.unpack_16x2(self.cfg.dtype, lo, hi, v, "fo_")
            p(f"add.rn.f32 {lo}, {lo}, {self.acc(mi, q)};")
            p(f"add.rn.f32 {hi}, {hi}, {self.acc(mi, q + 1)};")
            self._pack(v, lo, hi)
            p(f"st.shared.b32 [{a}], {v};")

        def after(k):                           # the next piece into the other buffer
            if k + 1 == n:
                return
            nxt, other = p.fresh("fo_next"), p.r32("fo_other_off")
            p(f"@!%p_lead bra {nxt};")
            p("cp.async.bulk.wait_group.read 1;")      # piece k - 1's store read it
            p(f"xor.b32 {other}, %epi_off, {self.cfg.epi_buf_bytes};")
            self._load_piece(t, k + 1, other, tmap, crd)
            p.label(nxt)

        def ops(buf, cn, cm):
            return [_tma_piece("%p_lead", tm, c, cn, cm, buf) for tm, c in stores]

        self._emit_epilogue_pieces(t.m0_local, t.n0, self.cfg.epi_width, add_pair, ops,
                                   fill=fill, after=after)


class GemmArOutKernel(_EpilogueSum, GemmArKernel):
    """GEMM + all-reduce by broadcast into a caller's output (``kind="ar"``, ``out=True``,
    W = 2): the broadcast kernel's protocol and signals, but no persistent result. The own
    chunk's tiles go to both accumulators as before (slot 0). A tile of the peer's chunk p
    (slot 1) is summed in the epilogue (:class:`_EpilogueSum`): p's partial, already in
    this rank's accumulator (p stored it there in its slot 0; waited for, now in the
    tile prologue), plus ours goes by TMA store to this rank's output (``tmC``, a 3-d map
    over the caller's tensor) and, in place of the broadcast's reduce-add, to p's
    accumulator, where it is p's final result. After the final wait every CTA copies its
    share of the own chunk (the sum the peer stored here) from the accumulator into the
    output. So the output is new per call (nothing to copy after the kernel), half of the
    result is never copied, and the link carries stores instead of reduce-adds. Both
    ranks hold the same rounding of P_p + P_r for every element (one rank's sum, the
    other's copy of it)."""

    PROLOGUE_NOTE = ("the peer's chunk: its partial must be here (the own chunk's tiles "
                     "signalled first: the peer waits for them); load the first piece now")

    def _await_partial(self, t: FusedTile, own: str, skip: str) -> None:
        self._wait_owner_once(t, own)
        self.p(f"@!%p_lead bra {skip};")

    def _partial_coords(self, t: FusedTile) -> _Coords:
        return _Coords(t.peer)

    def emit_epilogue_tile(self, t: FusedTile) -> None:
        p = self.p
        own = self._enter_chunk(t)
        crd = _Coords(t.peer)
        summed, done = p.fresh("fo_sum"), p.fresh("fo_tile_done")
        p(f"@!{own} bra {summed};")
        p.comment("own chunk: the partial into both accumulators")
        self._emit_pieces(t, lambda buf, cn, cm: [
            _tma_piece("%p_lead", tm, crd, cn, cm, buf) for tm in ("%fo_tmine", "%fo_ttheirs")])
        p(f"bra {done};")
        p.label(summed)
        p.comment("the peer's chunk: its partial (loaded ahead) + ours, into our output and "
                  "its accumulator")
        self._emit_summed_pieces(t, "%fo_tmine", crd, (("%tmC", crd), ("%fo_ttheirs", crd)))
        p.label(done)
        p("add.u32 %fz_pend, %fz_pend, 1;")

    def emit_epilogue_finish(self) -> None:
        super().emit_epilogue_finish()
        p = self.p
        p.comment("---- ar out: the own chunk (the peer's sums) from the accumulator into the "
                  "output, grid-strided in 16-byte vectors")
        p("bar.sync %epi_bar, 128;")                 # after the leader's final wait
        src, dst, off = p.r64("fo_src"), p.r64("fo_dst"), p.r64("fo_off")
        self._ptr_of(src, "%fz_acc_ptrs", "%fz_rank")
        nv = p.r32("fo_nv")
        p(f"mul.lo.u32 {nv}, %M, %N;")
        p(f"shr.u32 {nv}, {nv}, 3;")                 # vectors of one chunk (N % 8 == 0)
        p(f"mul.wide.u32 {off}, {nv}, 16;")
        chunk = p.r64("fo_chunk")
        p(f"cvt.u64.u32 {chunk}, %fz_rank;")
        p(f"mul.lo.u64 {off}, {off}, {chunk};")      # byte offset of the own chunk
        p(f"add.s64 {src}, {src}, {off};")
        p(f"add.s64 {dst}, %fz_out, {off};")

        def copy(idx, pin):
            a = p.r64("fo_a")
            vals = [[p.r32(f"fo_v{u}_{k}") for k in range(4)] for u in range(len(idx))]
            for u in range(len(idx)):
                p(f"mul.wide.u32 {a}, {idx[u]}, 16;")
                p(f"add.s64 {a}, {src}, {a};")
                p(f"@{pin[u]} ld.global.cg.v4.b32 {{{', '.join(vals[u])}}}, [{a}];")
            for u in range(len(idx)):
                p(f"mul.wide.u32 {a}, {idx[u]}, 16;")
                p(f"add.s64 {a}, {dst}, {a};")
                p(f"@{pin[u]} st.global.v4.b32 [{a}], {{{', '.join(vals[u])}}};")
        self._grid_strided(nv, copy, "fo_copy")


class GemmRsOutKernel(_EpilogueSum, GemmRsKernel):
    """GEMM + reduce-scatter into a caller's output (``kind="rs"``, ``out=True``, W = 2):
    each rank computes the peer's chunk first (slot 0) and stores its partial, by TMA
    store, into the peer's staging (the symmetric buffer, two halves by epoch parity);
    then its own chunk (slot 1), whose epilogue adds the peer's staged partial
    (:class:`_EpilogueSum`) and stores the sum into the output. No reduce-adds, no zero
    fill, nothing persistent returned, no copy after the kernel.

    Signals: as the reduce-scatter's, pad_p[rank] counts the tiles of chunk p this rank
    landed in p (each warpgroup flushes its count when it leaves a chunk: here the peer's
    chunk, in the tile prologue of its first own tile, before it waits). A rank waits
    once, before its first own tile's main loop, for pad_rank[peer] to reach the chunk's
    tiles. Why the parity halves: the peer may finish epoch e (it waits only for our
    stores) while we still read our staging; its stores of epoch e + 1 go to the other
    half, and it reaches e + 2 only after waiting for our stores of e + 1, which follow
    our reads of e."""

    SLOT_SHIFT = 1          # the peer's chunk first, the own last (W = 2)

    SUMS_OWN_CHUNK = True
    PROLOGUE_NOTE = ("the own chunk: signal the peer's chunk first (the peer waits for it), "
                     "then wait once for the peer's partial; load the first piece now")

    def emit_epilogue_setup(self) -> None:
        super().emit_epilogue_setup()
        p = self.p
        p(f"and.b32 {p.r32('fo_half')}, %fz_epoch, 1;")   # this epoch's staging half
        p(f"mov.u32 {p.r32('fo_staged')}, 0;")            # the peer's partial seen here

    def _await_partial(self, t: FusedTile, own: str, skip: str) -> None:
        """Leader, once: pad_rank[peer] counts the peer's tiles of our chunk staged here."""
        p = self.p
        p(f"@!%p_lead bra {skip};")
        seen, ps = p.fresh("fo_seen"), p.pred("fo_pseen")
        p(f"setp.ne.u32 {ps}, %fo_staged, 0;")
        p(f"@{ps} bra {seen};")
        addr = p.r64("fo_waddr")
        self._slot_addr(addr, "%fz_sig_ptrs", "%fz_rank", "%fo_other")
        self._spin_wait(addr, "%fz_want", 8, "%fo_other", "sys")
        p("fence.proxy.async.global;")
        p("mov.u32 %fo_staged, 1;")
        p.label(seen)

    def _partial_coords(self, t: FusedTile) -> _Coords:
        return _Coords("%fo_half")

    def emit_epilogue_tile(self, t: FusedTile) -> None:
        p = self.p
        self._change_chunk(t)
        own = p.pred("fz_own")
        p(f"setp.eq.u32 {own}, {t.peer}, %fz_rank;")
        crd = _Coords("%fo_half")
        summed, done = p.fresh("fo_sum"), p.fresh("fo_tile_done")
        p(f"@{own} bra {summed};")
        p.comment("the peer's chunk: the partial into its staging (this epoch's half)")
        self._emit_pieces(t, lambda buf, cn, cm: [
            _tma_piece("%p_lead", "%fo_ttheirs", crd, cn, cm, buf)])
        p(f"bra {done};")
        p.label(summed)
        p.comment("the own chunk: the peer's partial (loaded ahead) + ours, into the output")
        self._emit_summed_pieces(t, "%fo_tmine", crd, (("%tmC", _Coords()),))
        p.label(done)
        p("add.u32 %fz_pend, %fz_pend, 1;")


class GemmArFreshKernel(_FusedBase):
    """GEMM + all-reduce into a fresh output (``kind="arf"``, W <= 2). Both ranks visit
    the tiles of the full ``[M, N]`` product in the same (grouped raster) order; each
    tile's partial goes by TMA store into this rank's output (a by-value map over the
    caller's tensor, fresh per call) and into the peer's symmetric staging ``stage``. The
    last ``comm_ctas`` CTAs are reducers: row block by row block (one raster group,
    ``group_m x bm`` rows) all their threads add the staged peer partial into the output
    (16-byte vectors, f32 sums), once the block's own tiles are stored and the peer's have
    landed. So nothing persistent is returned and no copy
    follows the kernel (the broadcast kernel's result lives in a symmetric accumulator).

    Signals (own pad; G row blocks): ``[b]`` the peer's tiles of block b landed here (the
    peer's consumer warpgroups add 1 per tile), ``[G + b]`` this rank's own tiles of block
    b stored (local), ``[2G + d]`` rank d's kernel of this epoch started (so it finished
    reading its staging of the last epoch: stores into it may begin). A warpgroup signals
    a tile ``LAG`` tiles late, after ``cp.async.bulk.wait_group`` leaves only the newer
    tiles' groups in flight (no stall on the stores it just issued). Each rank computes
    round(own + peer) (the own partial stored, the peer's added once): the same value on
    both ranks. Not used by the fast path (``fused_tuning.ARF_ENABLED``): on 2 H200s it ran
    slower than the broadcast kernel plus the copy of its result (the reducers add ~12
    GB/s per CTA; docs/PERF_NOTES.md, issue 7 session 4)."""

    PARAMS = GemmRsKernel.PARAMS
    KIND = "arf"
    # tiles whose stores may still be in flight when a warpgroup signals an older one: a
    # wait for the last tile's remote stores stalled the GEMM on the link (N = 16384 on 2
    # H200s: 2.68 ms vs 1.81 for the broadcast kernel that waits only per chunk)
    LAG = 4

    def __init__(self, fcfg: FusedConfig):
        if fcfg.kind != self.KIND:
            raise ValueError(f"{type(self).__name__} needs kind={self.KIND!r}")
        super().__init__(fcfg)

    def emit_tile_space(self) -> None:
        p, f = self.p, self.fcfg
        self._load_params()
        p(f"mov.u32 {p.r32('fz_gave')}, 0;")
        p(f"mov.u32 {p.r32('fz_ctaid')}, %ctaid.x;")
        p(f"mov.u32 {p.r32('fz_nctaid')}, %nctaid.x;")
        self._row_blocks()
        if f.world == 1:
            return
        peer = p.r32("fz_peer")
        p(f"xor.b32 {peer}, %fz_rank, 1;")
        self._side_ctas("add the peer's staged partials into the output", self._emit_reducer)

    def emit_tile_coords(self, tile: str, pre: str) -> FusedTile:
        t = self._raster(tile, pre)
        return FusedTile(t.m_blk, t.n_blk, t.m0, t.n0, peer="", m0_local=t.m0)

    def _block_want(self, dst: str, b: str) -> None:
        """dst = epoch x consumers x tiles of row block b (its m-tiles x num_n)."""
        p, c = self.p, self.cfg
        rows = p.r32("fz_brows")
        p(f"mul.lo.u32 {rows}, {b}, {c.group_m};")
        p(f"sub.u32 {rows}, %num_mc, {rows};")
        p(f"min.u32 {rows}, {rows}, {c.group_m};")
        p(f"mul.lo.u32 {dst}, {rows}, %num_n;")
        p(f"mul.lo.u32 {dst}, {dst}, {c.consumers};")
        p(f"mul.lo.u32 {dst}, {dst}, %fz_epoch;")

    def _emit_reducer(self) -> None:
        """Each reducer CTA (all its threads): CTA 0 announces this epoch to the peer; for
        each row block, thread 0 waits for both halves of it (the peer's partial in the
        staging, the own tiles in the output), then the CTA adds its share of the block's
        16-byte vectors of the staging into the output (f32 sums, one rounding), 4 vectors
        per thread in flight. (A first version issued bulk reduce-adds from one thread per
        CTA: ~12 GB/s per CTA, too slow for the link-bound shapes.)"""
        p, f, c = self.p, self.fcfg, self.cfg
        T, U = c.threads, 4
        j, slot, addr = p.r32("fz_cj"), p.r32("fz_rslot"), p.r64("fz_raddr")
        t0 = p.pred("fz_rt0")
        p(f"setp.eq.u32 {t0}, %tidx, 0;")
        p(f"sub.u32 {j}, %fz_ctaid, %tstride;")
        pj = p.pred("fz_pj0")
        p(f"setp.eq.u32 {pj}, {j}, 0;")
        p(f"and.pred {pj}, {pj}, {t0};")
        p(f"mad.lo.u32 {slot}, %fz_G, 2, %fz_rank;")
        self._slot_addr(addr, "%fz_sig_ptrs", "%fz_peer", slot)
        p(f"@{pj} red.release.sys.global.add.u32 [{addr}], 1;")
        stage = p.r64("fz_stage")
        self._ptr_of(stage, "%fz_acc_ptrs", "%fz_rank")
        # vectors (16 B = 8 elements): the whole product, one row block
        tv, bv, lo, hi = p.r32("fz_tv"), p.r32("fz_bv"), p.r32("fz_vlo"), p.r32("fz_vhi")
        p(f"mul.lo.u32 {tv}, %M, %N;")
        p(f"shr.u32 {tv}, {tv}, 3;")
        p(f"mul.lo.u32 {bv}, %N, {c.bm * c.group_m // 8};")
        step = p.r32("fz_vstep")
        p(f"mov.u32 {step}, {f.n_comm * T * U};")
        b, want, top = p.r32("fz_b"), p.r32("fz_bwant"), p.fresh("red_blk")
        pb = p.pred("fz_pb")
        p(f"mov.u32 {b}, 0;")
        p.label(top)
        nowait = p.fresh("red_nowait")
        p(f"@!{t0} bra {nowait};")
        self._block_want(want, b)
        self._slot_addr(addr, "%fz_sig_ptrs", "%fz_rank", b)
        self._spin_wait(addr, want, 5, "%fz_peer", "sys")
        p(f"add.u32 {slot}, %fz_G, {b};")
        self._slot_addr(addr, "%fz_sig_ptrs", "%fz_rank", slot)
        self._spin_wait(addr, want, 6, "%fz_rank", "gpu")
        p.label(nowait)
        p("bar.sync 0;")                 # the block is ready for every thread of the CTA
        p(f"mul.lo.u32 {lo}, {b}, {bv};")
        p(f"add.u32 {hi}, {lo}, {bv};")
        p(f"min.u32 {hi}, {hi}, {tv};")
        v = p.r32("fz_v")
        p(f"mad.lo.u32 {v}, {j}, {T * U}, {lo};")
        p(f"add.u32 {v}, {v}, %tidx;")
        self._reduce_vectors(v, hi, step, stage, U, T)
        p(f"add.u32 {b}, {b}, 1;")
        p(f"setp.lt.u32 {pb}, {b}, %fz_G;")
        p(f"@{pb} bra {top};")

    def _reduce_vectors(self, v: str, hi: str, step: str, stage: str, U: int, T: int) -> None:
        """out[i] = round(out[i] + stage[i]) for 16-byte vectors i = v + u*T (u < U), then
        v += step, while v < hi: U loads of each in flight before the adds."""
        p, dt = self.p, self.cfg.dtype
        top, done = p.fresh("red_v"), p.fresh("red_v_done")
        pe = p.pred("fz_pve")
        ga, oa = p.r64("fz_rga"), p.r64("fz_roa")
        idx = [p.r32(f"fz_ri{u}") for u in range(U)]
        pin = [p.pred(f"fz_rin{u}") for u in range(U)]
        sv = [[p.r32(f"fz_rs{u}_{k}") for k in range(4)] for u in range(U)]
        ov = [[p.r32(f"fz_ro{u}_{k}") for k in range(4)] for u in range(U)]
        a0, a1, b0, b1 = (p.reg(f"fz_rf{x}", ".f32") for x in ("a0", "a1", "b0", "b1"))
        p.label(top)
        p(f"setp.ge.u32 {pe}, {v}, {hi};")
        p(f"@{pe} bra {done};")
        for u in range(U):
            p(f"add.u32 {idx[u]}, {v}, {u * T};")
            p(f"setp.lt.u32 {pin[u]}, {idx[u]}, {hi};")
            p(f"mul.wide.u32 {ga}, {idx[u]}, 16;")
            p(f"add.s64 {oa}, %Cptr, {ga};")
            p(f"add.s64 {ga}, {stage}, {ga};")
            p(f"@{pin[u]} ld.global.cg.v4.b32 {{{', '.join(sv[u])}}}, [{ga}];")
            p(f"@{pin[u]} ld.global.cg.v4.b32 {{{', '.join(ov[u])}}}, [{oa}];")
        for u in range(U):
            for k in range(4):
                for (flo, fhi), w in (((a0, a1), ov[u][k]), ((b0, b1), sv[u][k])):
                    p.unpack_16x2(dt, flo, fhi, w, "fz_r")
                p(f"add.rn.f32 {a0}, {a0}, {b0};")
                p(f"add.rn.f32 {a1}, {a1}, {b1};")
                p(f"cvt.rn.{dt}x2.f32 {ov[u][k]}, {a1}, {a0};")
            p(f"mul.wide.u32 {oa}, {idx[u]}, 16;")
            p(f"add.s64 {oa}, %Cptr, {oa};")
            p(f"@{pin[u]} st.global.v4.b32 [{oa}], {{{', '.join(ov[u])}}};")
        p(f"add.u32 {v}, {v}, {step};")
        p(f"bra {top};")
        p.label(done)

    def emit_epilogue_setup(self) -> None:
        super().emit_epilogue_setup()
        p = self.p
        for i in range(self.LAG):                      # row blocks of unsignalled tiles
            p(f"mov.u32 {p.r32(f'fz_prev{i}')}, -1;")
        p(f"mov.u32 {p.r32('fz_annok')}, 0;")         # peer's announcement seen
        p("@%p_lead prefetch.tensormap [%tmC];")
        if self.fcfg.world > 1:
            tm = p.r64("fz_tmpeer")
            p(f"mad.wide.u32 {tm}, %fz_peer, 128, %fz_acc_maps;")
            p(f"@%p_lead prefetch.tensormap [{tm}];")

    def _signal_prev(self, i: int) -> None:
        """Leader, after the wait: the tile of row block %fz_prev{i} is stored here and in
        the peer's staging: count it in both pads."""
        p = self.p
        prev = f"%fz_prev{i}"
        skip, pn = p.fresh("nosig"), p.pred("fz_pnone")
        p(f"setp.eq.u32 {pn}, {prev}, -1;")
        p(f"@{pn} bra {skip};")
        addr, slot = p.r64("fz_saddr"), p.r32("fz_sslot")
        self._slot_addr(addr, "%fz_sig_ptrs", "%fz_peer", prev)
        p(f"red.release.sys.global.add.u32 [{addr}], 1;")
        p(f"add.u32 {slot}, %fz_G, {prev};")
        self._slot_addr(addr, "%fz_sig_ptrs", "%fz_rank", slot)
        p(f"red.release.gpu.global.add.u32 [{addr}], 1;")
        p.label(skip)

    def emit_epilogue_tile(self, t: FusedTile) -> None:
        p, f, c = self.p, self.fcfg, self.cfg
        if f.world == 1:
            self._emit_pieces(t, lambda buf, cn, cm: [_tma_2d("%p_lead", "%tmC", cn, cm, buf)])
            return
        p.comment("---- arf: before the first store into the peer's staging, its announcement")
        ok, skip = p.pred("fz_pann"), p.fresh("ann_ok")
        p(f"@!%p_lead bra {skip};")
        p("setp.ne.u32 %fz_pann, %fz_annok, 0;")
        p(f"@{ok} bra {skip};")
        addr, slot = p.r64("fz_aaddr"), p.r32("fz_aslot")
        p(f"mad.lo.u32 {slot}, %fz_G, 2, %fz_peer;")
        self._slot_addr(addr, "%fz_sig_ptrs", "%fz_rank", slot)
        self._spin_wait(addr, "%fz_epoch", 7, "%fz_peer", "sys")
        p("fence.proxy.async.global;")
        p("mov.u32 %fz_annok, 1;")
        p.label(skip)

        def ops(buf, cn, cm):
            return [_tma_2d("%p_lead", tm, cn, cm, buf) for tm in ("%tmC", "%fz_tmpeer")]

        self._emit_pieces(t, ops)
        p.comment(f"---- arf: a tile's stores are complete once only the {self.LAG} newer "
                  "tiles' groups may be in flight: signal the oldest, shift the others")
        skip = p.fresh("nosig_tile")
        p(f"@!%p_lead bra {skip};")
        groups = c.m_slices * (c.bn // c.epi_width)
        p(f"cp.async.bulk.wait_group {groups * self.LAG};")
        p("fence.proxy.async.global;")
        self._signal_prev(self.LAG - 1)
        for i in reversed(range(1, self.LAG)):
            p(f"mov.u32 %fz_prev{i}, %fz_prev{i - 1};")
        p(f"div.u32 %fz_prev0, {t.m_blk}, {c.group_m};")
        p.label(skip)

    def emit_epilogue_finish(self) -> None:
        p = self.p
        p("@%p_lead cp.async.bulk.wait_group 0;")
        if self.fcfg.world == 1:
            return
        skip = p.fresh("nofinal")
        p(f"@!%p_lead bra {skip};")
        p("fence.proxy.async.global;")
        for i in range(self.LAG):
            self._signal_prev(i)
        p.label(skip)


class AgGemmKernel(_FusedBase):
    """All-gather + GEMM (see the module docstring)."""

    PARAMS = (("rank", ".u32"), ("ctl", ".u64"), ("tmAg", "map"), ("gath_ptrs", ".u64"),
              ("sig_ptrs", ".u64"), ("a_local", ".u64"), ("err", ".u64"),
              ("sig_timeout", ".u64"),
              ("mbox", ".u64"), ("trap", ".u32"))

    def __init__(self, fcfg: FusedConfig):
        if fcfg.kind != "ag":
            raise ValueError("AgGemmKernel needs kind='ag'")
        super().__init__(fcfg)

    def emit_tile_space(self) -> None:
        p, f = self.p, self.fcfg
        self._tile_space_common()
        if f.world == 1:
            return
        want = p.r32("fz_want")
        p(f"mul.lo.u32 {want}, %fz_epoch, {f.n_comm};")
        # pad layout: [src * G + block] data of row block `block` of shard src arrived
        # (n_comm signals per epoch), [W * G + d] rank d's kernel of this epoch started
        G, ann = self._row_blocks(), p.r32("fz_ann")
        p(f"mul.lo.u32 {ann}, {G}, {f.world};")
        self._side_ctas("put this rank's shard to every peer", self._emit_put)

    def _emit_put(self) -> None:
        """Thread 0 of each put CTA: announce this epoch, wait for every peer's
        announcement, then for each peer d = rank-1, rank-2, ... (the order in which they
        consume this shard) and each row block of the shard, copy this CTA's pieces of the
        block into d's ``gath[rank]`` and signal ``pad_d[rank*G + block]``."""
        p, f, c = self.p, self.fcfg, self.cfg
        W = f.world
        pnl = p.pred("fz_pnl")
        p(f"setp.ne.u32 {pnl}, %tidx, 0;")
        p(f"@{pnl} bra $L_end;")
        # Announce: this rank's kernel of this epoch runs, so it has finished reading its
        # gathered buffer of the previous epoch; peers may put into it.
        j = p.r32("fz_cj")
        p(f"sub.u32 {j}, %fz_ctaid, %tstride;")
        pj = p.pred("fz_pj0")
        p(f"setp.eq.u32 {pj}, {j}, 0;")
        d, slot, addr = p.r32("fz_d"), p.r32("fz_dslot"), p.r64("fz_daddr")
        for k in range(1, W):
            p(f"add.u32 {d}, %fz_rank, {W - k};")
            self._mod_world(d)
            p(f"add.u32 {slot}, %fz_ann, %fz_rank;")
            self._slot_addr(addr, "%fz_sig_ptrs", d, slot)
            p(f"@{pj} red.release.sys.global.add.u32 [{addr}], 1;")
        # wait until every peer announced this epoch
        for k in range(1, W):
            p(f"add.u32 {d}, %fz_rank, {W - k};")
            self._mod_world(d)
            p(f"add.u32 {slot}, %fz_ann, {d};")
            self._slot_addr(addr, "%fz_sig_ptrs", "%fz_rank", slot)
            self._spin_wait(addr, "%fz_epoch", 4, d, "sys")
        p("fence.proxy.async.global;")
        # the shard is Mc * K * 2 bytes; a block is group_m x bm rows (one raster group)
        total, blk, off, n = p.r64("fz_total"), p.r64("fz_blk"), p.r64("fz_boff"), p.r64("fz_bn")
        src, dst, dbase = p.r64("fz_src"), p.r64("fz_dst"), p.r64("fz_dbase")
        p(f"mul.wide.u32 {total}, %M, %K;")
        p(f"shl.b64 {total}, {total}, 1;")
        p(f"mul.wide.u32 {blk}, %K, {2 * c.bm * c.group_m};")
        ring_s, ring_ph = p.r32("fz_rs"), p.r32("fz_rph")
        p(f"mov.u32 {ring_s}, 0;")
        p(f"mov.u32 {ring_ph}, 0;")
        k, b = p.r32("fz_k"), p.r32("fz_b")
        pk, pb = p.pred("fz_pk"), p.pred("fz_pb")
        peer_top, blk_top = p.fresh("put_peer"), p.fresh("put_blk")
        p(f"mov.u32 {k}, 1;")
        p.label(peer_top)
        p(f"add.u32 {d}, %fz_rank, {W};")
        p(f"sub.u32 {d}, {d}, {k};")
        self._mod_world(d)
        self._ptr_of(dbase, "%fz_gath_ptrs", d)
        p(f"mul.wide.u32 {off}, %fz_rank, 1;")
        p(f"mad.lo.u64 {dbase}, {off}, {total}, {dbase};")
        p(f"mov.u32 {b}, 0;")
        p.label(blk_top)
        p(f"mul.wide.u32 {off}, {b}, 1;")
        p(f"mul.lo.u64 {off}, {off}, {blk};")
        p(f"sub.s64 {n}, {total}, {off};")
        p(f"min.u64 {n}, {n}, {blk};")
        p(f"add.s64 {src}, %fz_a_local, {off};")
        p(f"add.s64 {dst}, {dbase}, {off};")
        emit_bulk_copy_loop(p, src=src, dsts=[dst], total=n, first=j, step=f.n_comm,
                            piece=f.put_piece, ring=f.put_ring, smem="%sbase", bars="%sbar",
                            timeout=c.timeout_ns > 0, lag=f.lag, state=(ring_s, ring_ph))
        p("cp.async.bulk.wait_group 0;")
        p("fence.proxy.async.global;")
        p(f"mad.lo.u32 {slot}, %fz_rank, %fz_G, {b};")
        self._slot_addr(addr, "%fz_sig_ptrs", d, slot)
        p(f"red.release.sys.global.add.u32 [{addr}], 1;")
        p(f"add.u32 {b}, {b}, 1;")
        p(f"setp.lt.u32 {pb}, {b}, %fz_G;")
        p(f"@{pb} bra {blk_top};")
        p(f"add.u32 {k}, {k}, 1;")
        p(f"setp.lt.u32 {pk}, {k}, {W};")
        p(f"@{pk} bra {peer_top};")

    def emit_tile_coords(self, tile: str, pre: str) -> FusedTile:
        t = super().emit_tile_coords(tile, pre)
        t.m0 = t.m0_local                   # rows are addressed per shard (3-D maps)
        return t

    def emit_producer_tile_prologue(self, t: FusedTile) -> None:
        p, f = self.p, self.fcfg
        if f.world == 1:
            return
        p.comment("---- ag: before the first tile of a remote row block, wait for its put")
        skip = p.fresh("block_ok")
        own, pk = p.pred("fz_pown"), p.pred("fz_pk")
        key = p.r32("fz_akey")
        if not getattr(self, "_ready_init", False):
            raise AssertionError("producer prologue before its setup")
        p(f"setp.eq.u32 {own}, {t.peer}, %fz_rank;")
        p(f"@{own} bra {skip};")
        p(f"div.u32 {key}, {t.m_blk}, {self.cfg.group_m};")
        p(f"mad.lo.u32 {key}, {t.peer}, %fz_G, {key};")
        p(f"setp.eq.u32 {pk}, {key}, %fz_alast;")
        p(f"@{pk} bra {skip};")
        addr = p.r64("fz_aaddr")
        self._slot_addr(addr, "%fz_sig_ptrs", "%fz_rank", key)
        self._spin_wait(addr, "%fz_want", 3, t.peer, "sys")
        p("fence.proxy.async.global;")
        p(f"mov.u32 %fz_alast, {key};")
        p.label(skip)

    def _emit_producer(self) -> None:
        self.p(f"mov.u32 {self.p.r32('fz_alast')}, -1;")
        self._ready_init = True
        super()._emit_producer()

    _TMA_LOAD_3D = ("cp.async.bulk.tensor.3d.shared::cluster.global.tile"
                    ".mbarrier::complete_tx::bytes")

    def emit_load_a(self, dst: str, kc: str, t: FusedTile, bar: str) -> None:
        p = self.p
        if self.fcfg.world == 1:
            p(f"{self._TMA_LOAD} [{dst}], [%tmA, {{{kc}, {t.m0_local}}}], [{bar}];")
            return
        own = p.pred("fz_lown")
        p(f"setp.eq.u32 {own}, {t.peer}, %fz_rank;")
        p(f"@{own} {self._TMA_LOAD} [{dst}], [%tmA, {{{kc}, {t.m0_local}}}], [{bar}];")
        p(f"@!{own} {self._TMA_LOAD_3D} [{dst}], [%fz_tmAg, {{{kc}, {t.m0_local}, {t.peer}}}], "
          f"[{bar}];")

    def emit_epilogue_tile(self, t: FusedTile) -> None:
        lead = "%p_lead"

        def ops(buf, cn, cm):
            return [_tma_piece(lead, "%tmC", _Coords(t.peer), cn, cm, buf)]

        self._emit_pieces(t, ops)

    def emit_epilogue_finish(self) -> None:
        self.p("@%p_lead cp.async.bulk.wait_group 0;")


def emit_bulk_copy_loop(p, *, src: str, dsts: list[str], total: str, first: str, step,
                        piece: int | str, ring: int | str, smem: str, bars: str,
                        timeout: bool = False, lag: int = 1, state=None) -> None:
    """One thread copies pieces ``first, first+step, ...`` of ``[src, src+total)`` to each
    address in ``dsts`` (same offsets): ``cp.async.bulk`` global -> shared into a ring of
    ``ring`` slots of ``piece`` bytes at ``smem`` (slot s completes on the mbarrier at
    ``bars + 8 s``, initialized with count 1), then one ``cp.async.bulk`` shared -> global
    per destination, committed as one bulk group per piece. With ``lag`` d (a constant,
    1 <= d < ring), the load of piece i+ring-d goes into the slot of piece i-d once that
    piece's stores have read it (``wait_group.read d-1``): ring-d loads and up to d pieces'
    stores in flight (d = 1 serializes the stores on their smem reads: the first device
    run's transfer table). ``piece`` / ``ring`` / ``step`` may be registers (u32) or
    constants; ``ring`` must be > ``lag`` at run time. The caller waits
    for the writes (``cp.async.bulk.wait_group 0``) after the loop. Uses %globaltimer
    deadline ``%t_deadline`` (trap) on the mbarrier waits when ``timeout``. ``state``: the
    caller's (slot, phase) registers of the ring, carried from one call to the next (the
    mbarriers' phases continue; the caller drains the stores between calls), initialized
    to 0 by the caller; without it the loop starts at slot 0, phase 0."""
    r = p.r32
    npieces, mine, l = r("bc_np"), r("bc_mine"), r("bc_l")
    s, ph = state if state else (r("bc_s"), r("bc_ph"))
    pc, sz, sa, ba = r("bc_pc"), r("bc_sz"), r("bc_sa"), r("bc_ba")
    tmp = r("bc_tmp")
    off, rem, ga = p.r64("bc_off"), p.r64("bc_rem"), p.r64("bc_ga")
    pr, pw, pdone = p.pred("bc_pr"), p.pred("bc_pw"), p.pred("bc_pdone")
    piece_r, ring_r, step_r = r("bc_piece"), r("bc_ring"), r("bc_step")
    p(f"mov.u32 {piece_r}, {piece};")
    p(f"mov.u32 {ring_r}, {ring};")
    p(f"mov.u32 {step_r}, {step};")
    # npieces = ceil(total / piece); mine = pieces of this copier
    p(f"cvt.u64.u32 {off}, {piece_r};")
    p(f"add.s64 {rem}, {total}, {off};")
    p(f"sub.s64 {rem}, {rem}, 1;")
    p(f"div.u64 {rem}, {rem}, {off};")
    p(f"cvt.u32.u64 {npieces}, {rem};")
    p(f"mov.u32 {mine}, 0;")
    p(f"setp.lt.u32 {pr}, {first}, {npieces};")
    p(f"@{pr} sub.u32 {mine}, {npieces}, {first};")
    p(f"@{pr} add.u32 {mine}, {mine}, {step_r};")
    p(f"@{pr} sub.u32 {mine}, {mine}, 1;")
    p(f"@{pr} div.u32 {mine}, {mine}, {step_r};")

    def piece_geom(idx: str) -> None:
        """(ga = src offset of local piece idx, sz = its bytes)."""
        p(f"mad.lo.u32 {pc}, {idx}, {step_r}, {first};")
        p(f"mul.wide.u32 {off}, {pc}, {piece_r};")
        p(f"sub.s64 {rem}, {total}, {off};")
        p(f"cvt.u64.u32 {ga}, {piece_r};")
        p(f"min.u64 {rem}, {rem}, {ga};")
        p(f"cvt.u32.u64 {sz}, {rem};")

    def issue_load(idx: str, slot: str) -> None:
        piece_geom(idx)
        p(f"mad.lo.u32 {sa}, {slot}, {piece_r}, {smem};")
        p(f"mad.lo.u32 {ba}, {slot}, 8, {bars};")
        p(f"add.s64 {ga}, {src}, {off};")
        p(f"mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [{ba}], {sz};")
        p(f"cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes "
          f"[{sa}], [{ga}], {sz}, [{ba}];")

    # prologue: the first ring-1 pieces
    pre_top, pre_done = p.fresh("bc_pre"), p.fresh("bc_pre_done")
    lim = r("bc_lim")
    p(f"sub.u32 {lim}, {ring_r}, {lag};")
    p(f"min.u32 {lim}, {lim}, {mine};")
    p(f"mov.u32 {l}, 0;")
    p.label(pre_top)
    p(f"setp.ge.u32 {pdone}, {l}, {lim};")
    p(f"@{pdone} bra {pre_done};")
    if state:
        p(f"add.u32 {tmp}, {s}, {l};")
        p(f"rem.u32 {tmp}, {tmp}, {ring_r};")
        issue_load(l, tmp)
    else:
        issue_load(l, l)
    p(f"add.u32 {l}, {l}, 1;")
    p(f"bra {pre_top};")
    p.label(pre_done)
    # main loop over local pieces l (slot s, phase ph)
    top, done = p.fresh("bc_top"), p.fresh("bc_done")
    p(f"mov.u32 {l}, 0;")
    if not state:
        p(f"mov.u32 {s}, 0;")
        p(f"mov.u32 {ph}, 0;")
    p.label(top)
    p(f"setp.ge.u32 {pdone}, {l}, {mine};")
    p(f"@{pdone} bra {done};")
    # the next load: piece l + ring - lag into slot (s + ring - lag) % ring (that of piece
    # l - lag), at once while l < lag (a fresh slot), else after that piece's stores read it
    nxt, nslot = r("bc_nxt"), r("bc_nslot")
    p(f"add.u32 {nxt}, {l}, {lim};")
    p(f"setp.lt.u32 {pw}, {nxt}, {mine};")
    skipn = p.fresh("bc_nonext")
    p(f"@!{pw} bra {skipn};")
    p(f"setp.ge.u32 {pr}, {l}, {lag};")
    p(f"@{pr} cp.async.bulk.wait_group.read {lag - 1};")
    p(f"add.u32 {nslot}, {s}, {lim};")
    p(f"rem.u32 {nslot}, {nslot}, {ring_r};")
    issue_load(nxt, nslot)
    p.label(skipn)
    # wait for piece l in slot s
    p(f"mad.lo.u32 {ba}, {s}, 8, {bars};")
    wtop, wok = p.fresh("bc_w"), p.fresh("bc_wok")
    pwt = p.pred("bc_pwt")
    p.label(wtop)
    p(f"mbarrier.try_wait.parity.shared::cta.b64 {pwt}, [{ba}], {ph};")
    p(f"@{pwt} bra {wok};")
    if timeout:
        now, pl = p.r64("bc_now"), p.pred("bc_late")
        p(f"mov.u64 {now}, %globaltimer;")
        p(f"setp.gt.u64 {pl}, {now}, %t_deadline;")
        p(f"@{pl} trap;")
    p(f"bra {wtop};")
    p.label(wok)
    piece_geom(l)
    p(f"mad.lo.u32 {sa}, {s}, {piece_r}, {smem};")
    for dst in dsts:
        p(f"add.s64 {ga}, {dst}, {off};")
        p(f"cp.async.bulk.global.shared::cta.bulk_group [{ga}], [{sa}], {sz};")
    p("cp.async.bulk.commit_group;")
    # advance
    p(f"add.u32 {l}, {l}, 1;")
    p(f"add.u32 {s}, {s}, 1;")
    p(f"setp.eq.u32 {pr}, {s}, {ring_r};")
    p(f"selp.u32 {s}, 0, {s}, {pr};")
    p(f"xor.b32 {tmp}, {ph}, 1;")
    p(f"selp.u32 {ph}, {tmp}, {ph}, {pr};")
    p(f"bra {top};")
    p.label(done)


def tile_order(fcfg: FusedConfig, rank: int, Mc: int, N: int) -> list[tuple[int, int, int]]:
    """(chunk / shard, m_blk, n_blk) of tile indices 0, 1, ... of ``rank``: the arithmetic
    of ``emit_tile_coords`` (kept in step with it; the tests use it)."""
    from pkc.codegen.hopper.gemm import tile_coords

    c = fcfg.gemm_cfg()
    tpc = -(-Mc // c.bm) * -(-N // c.bn)
    out = []
    if fcfg.kind == "arf":       # the full product in raster order, the same on every rank
        M = fcfg.world * Mc
        return [(-1, *tile_coords(c, t, 0, M, N))
                for t in range(-(-M // c.bm) * -(-N // c.bn))]
    for t in range(fcfg.world * tpc):
        slot, loc = divmod(t, tpc)
        mb, nb = tile_coords(c, loc, 0, Mc, N)
        out.append(((rank + slot) % fcfg.world, mb, nb))
    return out


def ag_row_blocks(fcfg: FusedConfig, Mc: int) -> int:
    """G, the row blocks of an all-gather shard that are signalled one by one (a raster
    group of ``group_m x bm`` rows each); the pad holds W x G data slots + W."""
    c = fcfg.gemm_cfg()
    return -(-(-(-Mc // c.bm)) // c.group_m)


def ag_put_schedule(fcfg: FusedConfig, rank: int, Mc: int, K: int) -> list[dict]:
    """The puts of ``rank``'s put CTAs in issue order: (cta, dest, block, pieces as byte
    ranges of the shard, pad slot signalled), the arithmetic of ``_emit_put`` (kept in
    step with it; the tests check coverage, counts and order on it)."""
    c, W, n = fcfg.gemm_cfg(), fcfg.world, fcfg.n_comm
    G, total = ag_row_blocks(fcfg, Mc), Mc * K * 2
    blk = K * 2 * c.bm * c.group_m
    out = []
    for j in range(n):
        for k in range(1, W):
            d = (rank + W - k) % W
            for b in range(G):
                lo, nb = b * blk, min(blk, total - b * blk)
                npieces = -(-nb // fcfg.put_piece)
                pieces = [(lo + i * fcfg.put_piece, lo + min(nb, (i + 1) * fcfg.put_piece))
                          for i in range(j, npieces, n)]
                out.append(dict(cta=j, dest=d, block=b, pieces=pieces, slot=rank * G + b))
    return out


def check_fused_pipeline(fcfg: FusedConfig, sass_text: str) -> list[str]:
    """Problems in the SASS of a fused kernel: the GEMM's checks (HGMMA shape and count,
    one full and one empty mbarrier per stage at the expected offsets, no local memory,
    setmaxnreg), with the fused kernel's own TMA instruction counts, plus its signalling."""
    from pkc.codegen.hopper import tools

    c = fcfg.gemm_cfg()
    ins = tools._instrs(sass_text)
    bad = [b for b in tools.check_pipeline(c, sass_text)
           if not b.startswith(("TMA loads", "TMA stores")) and "TMA loads per" not in b
           and "TMA stores per" not in b]
    reduces = fcfg.kind in ("rs", "ar")
    pieces = c.m_slices * (c.bn // fcfg.piece_cols if reduces else c.bn // c.epi_width)
    loads = tools.expected_pipeline(c)["tma_loads"]       # A + B's boxes (bn/64 for kn)
    if fcfg.kind == "arf":      # each piece to the own output and the peer's staging
        want = {"UTMALDG": loads, "UTMASTG": pieces * fcfg.world}
    elif fcfg.out:              # into an output: the peer's partial loaded per piece, no
        #                         reduce-adds; ar 2 stores per piece on each of its 2 paths,
        #                         rs 1
        per = 4 if fcfg.kind == "ar" else 2
        want = {"UTMALDG": loads + pieces, "UTMASTG": per * pieces, "UTMAREDG": 0}
    elif reduces:
        copies = fcfg.world if fcfg.kind == "ar" else 1    # ar: one per destination rank
        want = {"UTMALDG": loads, "UTMASTG": pieces * copies, "UTMAREDG": pieces * copies}
    else:
        want = {"UTMALDG": loads + (1 if fcfg.world > 1 else 0), "UTMASTG": pieces}
        if fcfg.world > 1:
            want.update({"UBLKCP.S.G": 2, "UBLKCP.G.S": 1})   # ring prologue + loop loads; the put
    for op, n in want.items():
        got = sum(1 for i in ins if i.split()[0].lstrip("@!PU0123456789T ").startswith(op)
                  or (" " + op) in (" " + i))
        if got != n:
            bad.append(f"{got} {op}, expected {n}")
    if not any("STRONG.SYS" in i and ("REDG" in i or "RED" in i.split()[0]) for i in ins) \
            and fcfg.world > 1:
        bad.append("no system-scope signal (REDG ... STRONG.SYS)")
    if reduces and not any("REDG" in i for i in ins):
        bad.append("no signal (REDG)")
    return bad


def emit_fused_ptx(fcfg: FusedConfig) -> str:
    cls = {"rs": GemmRsKernel, "ag": AgGemmKernel, "ar": GemmArKernel,
           "arf": GemmArFreshKernel}[fcfg.kind]
    if fcfg.out:
        cls = GemmArOutKernel if fcfg.kind == "ar" else GemmRsOutKernel
    return cls(fcfg).emit()


# ==== host side ========================================================================
# (torch and cuda.bindings are imported lazily: the emitters above need neither)

class SignalTimeout(RuntimeError):
    """A fused kernel's bounded wait ran out: names kernel, rank and signal."""


_TMAP_DTYPES = {"bf16": "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16", "f16": "CU_TENSOR_MAP_DATA_TYPE_FLOAT16",
                "f32": "CU_TENSOR_MAP_DATA_TYPE_FLOAT32"}
_ESIZE = {"bf16": 2, "f16": 2, "f32": 4}


def encode_tmap(ptr: int, dtype: str, dims: list[int], strides: list[int], box: list[int],
                swizzle_bytes: int) -> bytes:
    """A tiled tensor map (128 bytes) over ``ptr``: ``dims`` innermost first, ``strides``
    in bytes of dims 1.., ``box`` elements per dim. Out-of-bounds loads read zeros, stores
    and reductions are clipped."""
    from cuda.bindings import driver as cu
    from pkc.codegen.hopper.launch import _check, _swizzle

    n = len(dims)
    tm = _check(cu.cuTensorMapEncodeTiled(
        getattr(cu.CUtensorMapDataType, _TMAP_DTYPES[dtype]), n, ptr,
        [cu.cuuint64_t(d) for d in dims], [cu.cuuint64_t(s) for s in strides],
        [cu.cuuint32_t(b) for b in box], [cu.cuuint32_t(1)] * n,
        cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, _swizzle(swizzle_bytes),
        cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
        f"cuTensorMapEncodeTiled({dtype}, dims {dims}, box {box})")
    return ctypes.string_at(tm.getPtr(), 128)


class FusedWorld:
    """The ranks of one fused kernel that this process drives, for one problem size, over
    a :class:`~pkc.runtime.peers.Peers` group (its symmetric allocations are the kernel's
    peer buffers and signal pads).

    ``peers``: a virtual world of ``W`` ranks on one GPU (``VirtualPeers``; rank r
    launches on lane r's stream, a green context of its own when W > 1, so that all
    ranks are resident at once), or under torch.distributed ``DistributedPeers``: this
    process drives its one rank and calls :meth:`run_rank`. The kernel sees only device
    arrays of peer base addresses either way. The caller makes the peers (they are the
    runtime's: pkc/codegen does not import pkc/runtime).

    rs: rank r's ``A_r [W*Mc, K]`` and ``B_r`` -> ``[Mc, N]`` (sum over ranks of the row
    chunk r). ar: the same operands -> ``[W*Mc, N]``, the sum over ranks of A_r @ B_r. ag: ``A_r [Mc, K]`` and ``B_r`` -> ``[W*Mc, N]`` = gather(A) @ B_r. ``B_r`` is
    ``[N, K]`` (``b_layout="nk"``, the product is A @ B^T) or ``[K, N]`` (``"kn"``, A @ B).

    Buffers persist on the peers under a key of kernel, size and ``owner``, so a second
    world of the same kernel, size and owner on the same peers shares them (and the launch
    epoch, which the pads' counters are compared with); outputs are those buffers,
    overwritten by the next launch. Two kernels of one program must not share them (the
    second would overwrite the first's result while it may still be read): the compiled
    path passes a distinct ``owner`` per kernel. The grid fills at most ``sms_per_rank`` SMs and at most the SMs a rank runs on
    (every CTA must be resident: a waiting CTA must not keep one it waits for from starting).
    """

    def __init__(self, fcfg: FusedConfig, Mc: int, N: int, K: int, *, peers,
                 sms_per_rank: int | None = None, sig_timeout_ns: int = 2_000_000_000,
                 owner=None):
        import torch

        from pkc.codegen.hopper.launch import load_kernel

        fcfg.validate()
        if K % 8 or N % 8:
            raise ValueError(f"K ({K}) and N ({N}) must be multiples of 8")
        if peers.world != fcfg.world:
            raise ValueError(f"kernel for {fcfg.world} ranks, peers of {peers.world}")
        self.peers, self.ranks, self.device = peers, list(peers.ranks), peers.device
        self.fcfg, self.cfg = fcfg, fcfg.gemm_cfg()
        self.W, self.Mc, self.N, self.K = fcfg.world, Mc, N, K
        self.tdt = torch.bfloat16 if self.cfg.dtype == "bf16" else torch.float16
        self.ptx = emit_fused_ptx(fcfg)
        # a module of the primary context; its function launches on the lanes' streams
        # too (green contexts included), as the collectives' kernels do
        self.kernel = load_kernel(self.ptx, self.cfg.kernel_name, self.cfg.smem_bytes,
                                  self.device)
        self.sms = self._fit_sms(sms_per_rank)
        c, comm = self.cfg, fcfg.n_comm
        self.tpc = -(-Mc // c.bm) * -(-N // c.bn)
        self.row_blocks = ag_row_blocks(fcfg, Mc)                 # ag: signalled row blocks
        if self.sms <= comm:
            raise ValueError(f"{self.sms} SMs per rank cannot hold {comm} comm CTAs")
        # arf tiles the full [W*Mc, N] product; the others W chunks / shards of tpc tiles
        tiles = -(-(self.W * Mc) // c.bm) * -(-N // c.bn) if fcfg.kind == "arf" else self.W * self.tpc
        self.grid = min(self.sms - comm, tiles) + comm
        self.sig_timeout_ns = int(sig_timeout_ns)
        self.owner = owner
        self._alloc()
        self._args: dict = {}

    # ---- setup -----------------------------------------------------------------------
    def _fit_sms(self, cap: int | None) -> int:
        """SMs one rank's grid may fill: W = 1 runs on torch's stream over the whole GPU,
        W > 1 on the peers' streams, within the smallest share of the driven ranks."""
        P = self.peers
        fit = P.sms if self.W == 1 else min(P.sms_of(r) for r in self.ranks)
        return min(cap, fit) if cap else fit

    def _alloc(self) -> None:
        """Pads (zeroed once, before any rank can signal), accumulators / gathered rows
        (symmetric), outputs and error records (per rank), all persistent on the peers."""
        import torch

        f, P, W, Mc, N, K = self.fcfg, self.peers, self.W, self.Mc, self.N, self.K
        key = ("pkc.fused", self.cfg.kernel_name, Mc, N, K, self.owner)
        self._epoch = _EPOCHS.setdefault(P, {}).setdefault(key, [0])
        # rs: slots < 2W; ar: < W*W + W; ag: W row blocks per shard + W (AgGemmKernel);
        # arf: 2 x the row blocks of the full product + W (GemmArFreshKernel)
        n_pad = {"ag": W * self.row_blocks + W,
                 "arf": 2 * ag_row_blocks(f, W * Mc) + W}.get(f.kind, 0)
        self.pads = P.symmetric(key + ("pads",), (max(64, n_pad),), torch.int32, zero=True)
        self.sig_ptrs_dev = self.pads.ptrs_dev
        self.err = self._by_rank(P.local(key + ("err",), (8,), torch.int32, zero=True))
        self.mbox = {r: P.mailbox.slot(self.cfg.kernel_name, r, ERR_KINDS) for r in self.ranks}
        # [epoch, ctas_done] per rank: the kernel advances the epoch itself (emit_exit)
        self.ctl = self._by_rank(P.local(key + ("ctl",), (2,), torch.int32, zero=True))
        if f.kind == "arf":         # the peer's partial lands in the staging; C is local
            sym = P.symmetric(key + ("stage",), (W * Mc, N), self.tdt)
            self.stage, self.acc_ptrs_dev = self._by_rank(sym.tensors), sym.ptrs_dev
            self.out = self._by_rank(P.local(key + ("out",), (W * Mc, N), self.tdt))
            self.maps_dev = self._acc_maps(sym.ptrs)
        elif f.kind == "ar":        # the full [W*Mc, N] result on every rank
            sym = P.symmetric(key + ("acc",), (W * Mc, N), self.tdt)
            self.acc, self.acc_ptrs_dev = self._by_rank(sym.tensors), sym.ptrs_dev
            # out: the result goes to a caller's tensor (this one if none is given)
            self.out = self._by_rank(P.local(key + ("out",), (W * Mc, N), self.tdt)) \
                if f.out else self.acc
            self.maps_dev = self._acc_maps(sym.ptrs)
        elif f.kind == "rs" and f.out:   # the peer's partial staged, by epoch parity
            sym = P.symmetric(key + ("stage",), (2 * Mc, N), self.tdt)
            self.acc, self.acc_ptrs_dev = self._by_rank(sym.tensors), sym.ptrs_dev
            self.out = self._by_rank(P.local(key + ("out",), (Mc, N), self.tdt))
            self.maps_dev = self._acc_maps(sym.ptrs)
        elif f.kind == "rs":
            acc_t = torch.float32 if f.acc_dtype == "f32" else self.tdt
            sym = P.symmetric(key + ("acc",), (Mc, N), acc_t)
            self.acc, self.acc_ptrs_dev = self._by_rank(sym.tensors), sym.ptrs_dev
            self.acc_sym = sym          # a pull all-gather can read the reduced chunks here
            self.out = self.acc if f.acc_dtype != "f32" else \
                self._by_rank(P.local(key + ("out",), (Mc, N), self.tdt))
            self.maps_dev = self._acc_maps(sym.ptrs)
        else:
            sym = P.symmetric(key + ("gath",), (W, Mc, K), self.tdt)
            self.gath, self.gath_ptrs_dev = self._by_rank(sym.tensors), sym.ptrs_dev
            self.out = self._by_rank(P.local(key + ("out",), (W * Mc, N), self.tdt))

    def _by_rank(self, tensors: dict) -> list:
        """A list indexed by rank (None for the ranks driven elsewhere)."""
        return [tensors.get(r) for r in range(self.W)]

    def _acc_map(self, ptr: int) -> bytes:
        """One accumulator's tensor map: rs ``[N, Mc]``; ar ``[N, Mc, W]`` (chunk-deep
        boxes: a tile never spills into the next chunk); rs out's staging ``[N, Mc, 2]``
        (the epoch parity's half)."""
        f, N, Mc, es = self.fcfg, self.N, self.Mc, self.fcfg.acc_esize
        pc = f.piece_cols
        if f.kind == "rs" and f.out:
            return encode_tmap(ptr, f.acc_dtype, [N, Mc, 2], [N * es, Mc * N * es],
                               [pc, 64, 1], pc * es)
        if f.kind == "ar":
            return encode_tmap(ptr, f.acc_dtype, [N, Mc, self.W], [N * es, Mc * N * es],
                               [pc, 64, 1], pc * es)
        if f.kind == "arf":         # the full product's rows
            return encode_tmap(ptr, f.acc_dtype, [N, self.W * Mc], [N * es], [pc, 64], pc * es)
        return encode_tmap(ptr, f.acc_dtype, [N, Mc], [N * es], [pc, 64], pc * es)

    def _acc_maps(self, ptrs: list[int]):
        """The W accumulators' tensor maps in one 128-byte-aligned device array (rs adds
        into peer p's chunk through map p)."""
        import torch

        maps = b"".join(self._acc_map(ptr) for ptr in ptrs)
        raw = torch.zeros(len(maps) + 128, dtype=torch.uint8, device=self.device)
        off = (-raw.data_ptr()) % 128
        self._maps_raw = raw
        dev = raw[off:off + len(maps)]
        dev.copy_(torch.frombuffer(bytearray(maps), dtype=torch.uint8))
        return dev

    @property
    def epoch(self) -> int:
        """Launches so far (shared by the worlds of this kernel on these peers); the
        device's epoch counter (``ctl``) advances with each launch, by the kernel itself."""
        return self._epoch[0]

    @epoch.setter
    def epoch(self, value: int) -> None:
        """Moves the device epoch of every driven rank too (tests: skipped epochs make
        every wait unsatisfiable, which must end in SignalTimeout, not a hang)."""
        delta = int(value) - self._epoch[0]
        if delta:
            for r in self.ranks:
                self.ctl[r][0] += delta
        self._epoch[0] = int(value)

    # ---- arguments -------------------------------------------------------------------
    def _b_map(self, b) -> bytes:
        """B's tensor map, encoded as HopperGemm.pack does (what ``emit_load_b`` loads):
        nk ``[N, K]``: one box of BK x bn rows per k-block; kn ``[K, N]``: bn/64 boxes of
        64 columns x BK rows (128-byte rows of N, the N-major wgmma operand)."""
        c, N, K = self.cfg, self.N, self.K
        want = (N, K) if c.b_layout == "nk" else (K, N)
        if tuple(b.shape) != want:
            dims = "N, K" if c.b_layout == "nk" else "K, N"
            raise ValueError(f"B must be [{dims}] = {list(want)} for b_layout {c.b_layout!r}, "
                             f"got {list(b.shape)}")
        if c.b_layout == "nk":
            return encode_tmap(b.data_ptr(), c.dtype, [K, N], [K * 2], [BK, c.bn], 128)
        return encode_tmap(b.data_ptr(), c.dtype, [N, K], [N * 2], [64, BK], 128)

    def _bind(self, rank: int, a, b, out=None):
        """(packed arguments, None) of one rank, cached by pointers, shapes and strides (a
        repeated call only launches: the epoch is on the device). ``out`` (ag):
        where C goes instead of the world's own buffer."""
        from pkc.codegen.hopper.launch import KernelArgs

        if out is not None:
            if self.fcfg.kind not in ("ag", "arf") and not self.fcfg.out:
                raise ValueError("only the all-gather, arf and ar / rs (out=True) kernels "
                                 "take a caller's output")
            want = (self.Mc if self.fcfg.kind == "rs" else self.W * self.Mc, self.N)
            if tuple(out.shape) != want or out.dtype != self.tdt or not out.is_contiguous() \
                    or out.data_ptr() % 16:
                raise ValueError(f"out must be a contiguous {self.tdt} tensor of {list(want)}")
        # the packed arguments depend only on addresses, shapes and strides: a tensor that
        # reuses a cached address is bound correctly, so nothing is kept alive (a fresh
        # output per call then reuses the caching allocator's block and hits)
        key = (rank, a.data_ptr(), b.data_ptr(), tuple(a.shape), tuple(b.shape), a.stride(),
               b.stride(), 0 if out is None else out.data_ptr())
        hit = self._args.get(key)
        if hit is not None:
            return hit
        for name, t in (("A", a), ("B", b)):
            if not t.is_contiguous() or t.data_ptr() % 16 or t.dtype != self.tdt \
                    or t.device != self.device:
                raise ValueError(f"{name} must be contiguous, 16-byte aligned, {self.tdt}, "
                                 f"on {self.device}")
        tmb = self._b_map(b)
        ctl = ctypes.c_uint64(self.ctl[rank].data_ptr())
        if self.fcfg.kind == "ag":
            vals = self._ag_args(rank, a, tmb, ctl, out)
        elif self.fcfg.kind == "arf":
            vals = self._arf_args(rank, a, tmb, ctl, out)
        else:
            vals = self._rs_args(rank, a, tmb, ctl, out)
        if len(self._args) >= 64:
            self._args.pop(next(iter(self._args)))
        self._args[key] = (KernelArgs(vals), None)
        return self._args[key]

    def _rs_args(self, rank: int, a, tmb: bytes, ctl, out=None) -> list:
        """rs and ar; ar with ``out``: ``tmC`` / ``out`` are the output's (the caller's
        tensor, else the world's own)."""
        c, W, Mc, N, K = self.cfg, self.W, self.Mc, self.N, self.K
        u32, u64 = ctypes.c_uint32, ctypes.c_uint64
        if tuple(a.shape) != (W * Mc, K):
            raise ValueError(f"A must be [W*Mc, K] = [{W * Mc}, {K}], got {list(a.shape)}")
        tma = encode_tmap(a.data_ptr(), c.dtype, [K, W * Mc], [K * 2], [BK, c.bm], 128)
        out = (self.out[rank] if out is None else out).data_ptr()
        if not self.fcfg.out:
            own = self._acc_map(self.acc[rank].data_ptr())
        elif self.fcfg.kind == "ar":        # the output's map: as the accumulators'
            own = self._acc_map(out)
        else:                               # rs: the [Mc, N] output
            es, pc = self.fcfg.acc_esize, self.fcfg.piece_cols
            own = encode_tmap(out, self.fcfg.acc_dtype, [N, Mc], [N * es], [pc, 64], pc * es)
        return [tma, tmb, own, u64(out), u32(Mc), u32(N), u32(K), u32(rank), ctl,
                u64(self.maps_dev.data_ptr()), u64(self.acc_ptrs_dev.data_ptr()),
                u64(self.sig_ptrs_dev.data_ptr()), u64(out), u64(self.err[rank].data_ptr()),
                u64(self.sig_timeout_ns), u64(self.mbox[rank]), u32(int(self.peers.trap))]

    def _arf_args(self, rank: int, a, tmb: bytes, ctl, out=None) -> list:
        c, W, Mc, N, K = self.cfg, self.W, self.Mc, self.N, self.K
        u32, u64 = ctypes.c_uint32, ctypes.c_uint64
        if tuple(a.shape) != (W * Mc, K):
            raise ValueError(f"A must be [W*Mc, K] = [{W * Mc}, {K}], got {list(a.shape)}")
        tma = encode_tmap(a.data_ptr(), c.dtype, [K, W * Mc], [K * 2], [BK, c.bm], 128)
        out = self.out[rank] if out is None else out
        tmc = self._acc_map(out.data_ptr())
        return [tma, tmb, tmc, u64(out.data_ptr()), u32(W * Mc), u32(N), u32(K), u32(rank), ctl,
                u64(self.maps_dev.data_ptr()), u64(self.acc_ptrs_dev.data_ptr()),
                u64(self.sig_ptrs_dev.data_ptr()), u64(out.data_ptr()),
                u64(self.err[rank].data_ptr()), u64(self.sig_timeout_ns), u64(self.mbox[rank]),
                u32(int(self.peers.trap))]

    def _ag_args(self, rank: int, a, tmb: bytes, ctl, out=None) -> list:
        c, W, Mc, N, K = self.cfg, self.W, self.Mc, self.N, self.K
        u32, u64, dt = ctypes.c_uint32, ctypes.c_uint64, c.dtype
        if tuple(a.shape) != (Mc, K):
            raise ValueError(f"A must be the shard [Mc, K] = [{Mc}, {K}], got {list(a.shape)}")
        tma = encode_tmap(a.data_ptr(), dt, [K, Mc], [K * 2], [BK, c.bm], 128)
        w, g = c.epi_width, self.gath[rank]
        out = self.out[rank] if out is None else out
        tmc = encode_tmap(out.data_ptr(), dt, [N, Mc, W], [N * 2, Mc * N * 2], [w, 64, 1], 2 * w)
        tmag = encode_tmap(g.data_ptr(), dt, [K, Mc, W], [K * 2, Mc * K * 2], [BK, c.bm, 1], 128)
        return [tma, tmb, tmc, u64(out.data_ptr()), u32(Mc), u32(N), u32(K), u32(rank), ctl,
                tmag, u64(self.gath_ptrs_dev.data_ptr()), u64(self.sig_ptrs_dev.data_ptr()),
                u64(a.data_ptr()), u64(self.err[rank].data_ptr()), u64(self.sig_timeout_ns),
                u64(self.mbox[rank]), u32(int(self.peers.trap))]

    # ---- launching -------------------------------------------------------------------
    def run(self, a, b, streams=None, outs=None) -> list:
        """Launches the driven ranks' kernels of the next epoch; returns ``out`` (indexed
        by rank, None for ranks driven elsewhere).

        ``a``, ``b``: per rank, a sequence indexed by rank (length W; entries of ranks
        driven elsewhere are ignored) or a dict by rank. ``streams=None``: W = 1 launches
        on torch's current stream; W > 1 on the peers' streams, ordered after and before
        torch's (peers.begin / end). Else ``streams[r]`` (a torch stream or a CUstream
        int or CUstream), which the caller orders. Every operand is checked before the epoch advances,
        so a rejected call leaves the ranks in step. ``outs`` (ag, arf, ar out; by rank): write C
        there instead of the world's buffer (a fresh tensor per call needs no copy)."""
        import torch

        from pkc.codegen.hopper.launch import launch

        bound = [self._bind(r, _rank_item(a, r, "A", self.W), _rank_item(b, r, "B", self.W),
                            None if outs is None else _rank_item(outs, r, "out", self.W))
                 for r in self.ranks]
        self._epoch[0] += 1          # host count only: the kernel advances its own epoch
        own = streams is None and self.W > 1
        if own:
            self.peers.begin()
        for r, (args, _) in zip(self.ranks, bound):
            if streams is not None:
                st = int(getattr(streams[r], "cuda_stream", streams[r]))
            elif own:
                st = self.peers.stream(r)
            else:
                st = torch.cuda.current_stream(self.device).cuda_stream
            launch(self.kernel, self.grid, self.cfg.threads, args, st)
        if own:
            self.peers.end()
        if outs is not None:
            return [outs[r] if r in self.ranks else None for r in range(self.W)]
        return self.out

    def run_rank(self, a, b):
        """The one driven rank's launch (torch.distributed, or a world of one): its
        operands in, its output out."""
        if len(self.ranks) != 1:
            raise ValueError(f"run_rank drives one rank; this process drives {self.ranks} "
                             f"(use run)")
        r = self.ranks[0]
        return self.run({r: a}, {r: b})[r]

    def check(self) -> None:
        """Raises SignalTimeout if a driven rank recorded a timed-out wait (synchronizes
        with the error records' stream)."""
        import torch

        rec = torch.stack([self.err[r] for r in self.ranks]).cpu().tolist()
        for e in rec:
            if e[0]:
                d = dict(zip(ERR_FIELDS, e))
                raise SignalTimeout(
                    f"{self.cfg.kernel_name}: rank {d['rank']} (CTA {d['cta']}, epoch "
                    f"{d['epoch']}) timed out waiting for {ERR_KINDS.get(d['kind'], d['kind'])}"
                    f": signal of rank {d['peer']} at {d['seen']}, wanted {d['wanted']}")

    def reset_errors(self) -> None:
        for r in self.ranks:
            self.err[r].zero_()


def _rank_item(x, rank: int, name: str, world: int):
    """Rank ``rank``'s entry of a per-rank sequence (length W) or dict."""
    if isinstance(x, dict):
        if rank not in x:
            raise ValueError(f"no {name} for rank {rank} (driven here)")
        return x[rank]
    if len(x) != world:
        raise ValueError(f"need {world} {name} tensors indexed by rank (or a dict by rank), "
                         f"got {len(x)}")
    return x[rank]


# Launch epochs, per peers and buffer key: the pads' counters outlive a FusedWorld.
_EPOCHS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def arf_reducer_ctas(M: int, N: int, K: int, world: int, target: str = "h200") -> int:
    """Reducer CTAs of the hand "arf" kernel (off in the tuning table): the peer's partial
    (M x N, 16-bit) added at 1.25x the rate the kernel delivers it, at ~PUT_CTA_BW each."""
    from pkc.target.cost import gemm_time
    from pkc.target.fused_tuning import side_ctas_for
    from pkc.target.targets import get_target

    nbytes = M * N * 2
    t = max(gemm_time(target, M, N, K), nbytes / get_target(target).nvlink_achievable_bw)
    return side_ctas_for(nbytes / t)
