"""A persistent, warp-specialized TMA + wgmma GEMM for sm_90a, written as PTX by Python.

    C[M, N] = A[M, K] @ B            (bf16 or fp16 in, f32 accumulate, bf16 / fp16 out)

Layouts the caller passes (all contiguous, base addresses 16-byte aligned):

* ``A``: ``[M, K]`` row-major (K contiguous).
* ``B``: ``b_layout="nk"`` (default, fastest to set up): ``[N, K]`` row-major, i.e. B
  transposed, which is how ``nn.Linear`` stores its weight (``y = x @ W.T``: pass ``W``).
  ``b_layout="kn"``: ``[K, N]`` row-major, the layout of a plain ``torch.mm(A, B)``; the
  B tile then lands N-major in shared memory and wgmma reads it transposed (imm-trans-b).
* ``C``: ``[M, N]`` row-major, same dtype as A and B.
* ``K % 8 == 0`` and ``N % 8 == 0`` (TMA needs 16-byte row strides); M is free. M, N, K need
  not be multiples of the tile: TMA fills out-of-bounds loads with zeros and clips
  out-of-bounds stores (the ``global`` epilogue predicates its stores instead).

Kernel structure (one CTA per SM, ``grid = min(#SMs, #tiles)``, 128 x (1 + consumers)
threads):

* warpgroup 0 is the producer. It gives registers away (``setmaxnreg.dec`` to 40) and one
  thread walks the tile sequence, issuing per k-block one TMA load of the A tile
  (``BM x 64``) and one of the B tile (``BN x 64``; ``BN/64`` boxes for ``kn``) into stage
  ``s`` of a ``stages``-deep ring, after waiting on ``empty[s]`` and arming ``full[s]`` with
  the stage's byte count (``mbarrier.arrive.expect_tx``).
* warpgroups 1..consumers are consumers (``setmaxnreg.inc`` to 232 with two). Each owns
  ``BM / consumers`` rows (64 or 128) of the tile and all ``BN`` columns: per k-block it
  waits on ``full[s]``, issues ``4 x (rows/64)`` ``wgmma.mma_async.m64nBNk16`` from
  shared-memory descriptors (128-byte swizzle), commits, waits until at most one group is
  in flight, and releases the previous stage on ``empty``.
* tiles are visited persistently (tile = cta, cta + #ctas, ...) in grouped order:
  ``group_m`` row-blocks share a column sweep so that concurrent CTAs reuse A and B in L2.
* ``cluster_m=2``: CTA pairs of a (2,1,1) cluster compute vertically adjacent tiles with the
  same B tile; each loads half of B and multicasts it to both (halving B's L2 traffic);
  consumers release a stage on the ``empty`` barriers of both CTAs.

Shared memory (dynamic, base rounded up to 1024 B, the swizzle atom):
``[A stage 0..S-1 | B stage 0..S-1 | epilogue buffers | full[S] | empty[S]]``. A and B
stages are rows of 128 bytes (64 elements of K, or 64 of N for ``kn``), TMA SWIZZLE_128B.
The ``tma`` epilogue stages each consumer's 64-row x ``epi_w``-column pieces of C in
``epi_bufs`` swizzled buffers and stores them with ``cp.async.bulk.tensor`` (bulk groups);
the ``global`` epilogue writes straight from registers with predicated ``st.global``.

Hooks for fused kernels (subclass :class:`GemmKernel`): ``extra_params`` adds kernel
parameters, ``emit_producer_tile_prologue`` runs in the producer thread before a tile's
loads (AG+GEMM waits on a peer's signal there, or swaps the A tensor map),
``emit_epilogue_tile`` replaces "store the C tile" (GEMM+RS puts the tile to a peer and
signals), ``emit_epilogue_finish`` runs once per consumer warpgroup at the end,
``emit_tile_space`` / ``emit_tile_coords`` widen the tile space and map a tile index to
its coordinates (fused kernels visit several ranks' chunks; see ``fused.py``).

Kernel parameters (in order): ``tmA, tmB, tmC`` (CUtensorMap, 128 bytes, align 64, passed
by value), ``C`` (u64 pointer), ``M, N, K`` (u32), then ``extra_params``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pkc.target.gemm_tuning import (BK, MAX_REGS, ROW_BYTES, SMEM_LIMIT,  # noqa: F401
    _SWIZZLE_FOR_ROW_BYTES, DESC_HI_KMAJOR, DESC_HI_NMAJOR, VARIANTS, GemmConfig, _desc_hi)


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

    def comment(self, text: str) -> None:
        self.lines.append("\t// " + text)

    def label(self, name: str) -> None:
        self.lines.append(f"{name}:")

    def fresh(self, prefix: str) -> str:
        self._labels += 1
        return f"$L_{prefix}_{self._labels}"

    def split_role(self, pred: str, body, others: str) -> None:
        """Threads where ``pred`` holds run ``body()`` and leave for ``$L_end``; the
        others continue after it (at a fresh label named after ``others``)."""
        rest = self.fresh(others)
        self(f"@!{pred} bra {rest};")
        body()
        self("bra $L_end;")
        self.label(rest)

    def unpack_16x2(self, dtype: str, lo: str, hi: str, word: str, tag: str) -> None:
        """lo, hi (f32) = the low and high 16-bit halves (bf16 / f16) of the b32 ``word``."""
        if dtype == "bf16":
            t = self.r32(f"{tag}bits")
            self(f"shl.b32 {t}, {word}, 16;")
            self(f"mov.b32 {lo}, {t};")
            self(f"and.b32 {t}, {word}, 0xFFFF0000;")
            self(f"mov.b32 {hi}, {t};")
        else:
            h0, h1 = self.reg(f"{tag}h0", ".b16"), self.reg(f"{tag}h1", ".b16")
            self(f"mov.b32 {{{h0}, {h1}}}, {word};")
            self(f"cvt.f32.f16 {lo}, {h0};")
            self(f"cvt.f32.f16 {hi}, {h1};")

    def declarations(self) -> list[str]:
        out = []
        for name, ty in self.regs.items():
            out.append(f"\t.reg {ty} %{name};")
        return out


@dataclass
class TileRegs:
    """Registers that describe the current tile (valid inside a role's tile loop)."""

    m_blk: str
    n_blk: str
    m0: str      # first row of the tile
    n0: str      # first column of the tile


class GemmKernel:
    """Emits the PTX of one :class:`GemmConfig`. Subclass and override the hooks to fuse."""

    def __init__(self, cfg: GemmConfig):
        cfg.validate()
        self.cfg = cfg
        self.p = _Ptx()

    # ---- hooks ---------------------------------------------------------------------
    def extra_params(self) -> list[str]:
        """Extra ``.param`` declarations (without the trailing comma), after M, N, K."""
        return []

    def emit_producer_tile_prologue(self, t: TileRegs) -> None:
        """Producer thread, before the first load of a tile."""

    def emit_consumer_tile_prologue(self, t: TileRegs) -> None:
        """Consumer warpgroup, before the first wgmma of a tile (its coordinates known)."""

    def emit_prologue(self) -> None:
        """Hook: every thread, before the CTA's first barrier."""

    def emit_exit(self) -> None:
        """Hook: every thread, at the end (producer and consumers alike)."""

    def emit_tile_space(self) -> None:
        """All threads, after the geometry (``%num_m``, ``%num_n``, ``%num_tiles``,
        ``%tile0``, ``%tstride``) and before the roles split: a fused kernel may widen the
        tile space (``%num_tiles`` over several ranks' chunks) or take CTAs aside."""

    def emit_tile_coords(self, tile: str, pre: str) -> TileRegs:
        """Tile index -> the tile's registers, in the producer (``pre="pr"``) and the
        consumers (``"cr"``); both must agree. Default: grouped rasterization."""
        return self._raster(tile, pre)

    def emit_epilogue_setup(self) -> None:
        """Consumer warpgroup, once before its tile loop."""
        if self.cfg.epilogue == "tma":
            self._tma_epilogue_setup()
        else:
            self._global_epilogue_setup()

    def emit_epilogue_tile(self, t: TileRegs) -> None:
        """Consumer warpgroup, after the last wgmma of a tile completed: the accumulators
        (``self.acc(mi, q)``) hold this warpgroup's rows of the tile."""
        if self.cfg.epilogue == "tma":
            self._tma_epilogue_tile(t)
        else:
            self._global_epilogue_tile(t)

    def emit_epilogue_finish(self) -> None:
        """Consumer warpgroup, after its last tile."""
        if self.cfg.epilogue == "tma":
            p = self.p
            p(f"@{p.pred('p_lead')} cp.async.bulk.wait_group 0;")

    # ---- helpers -------------------------------------------------------------------
    def acc(self, mi: int, q: int) -> str:
        """Accumulator register q (0..bn/2-1) of m-slice mi, in wgmma's fragment order:
        for n8 block j, q = 4j + 2i + c holds row (lane/4 + 8i + 16*warp) and column
        (8j + 2*(lane%4) + c) of the 64-row slice."""
        return f"%acc{mi * (self.cfg.bn // 2) + q}"

    def _pname(self, s: str) -> str:
        return f"{self.cfg.kernel_name}_param_{s}"

    def _advance(self, s: str, ph: str) -> None:
        p, S = self.p, self.cfg.stages
        pw = p.pred("p_adv")
        tmp = p.r32("adv_tmp")
        p(f"add.u32 {s}, {s}, 1;")
        p(f"setp.eq.u32 {pw}, {s}, {S};")
        p(f"selp.u32 {s}, 0, {s}, {pw};")
        p(f"xor.b32 {tmp}, {ph}, 1;")
        p(f"selp.u32 {ph}, {tmp}, {ph}, {pw};")

    def _wait(self, bar: str, parity: str, what: str) -> None:
        """Spin on an mbarrier phase; trap once the kernel's deadline passed."""
        p = self.p
        top, done = p.fresh(f"wait_{what}"), p.fresh(f"{what}_ok")
        pw = p.pred("p_wait")
        p.label(top)
        p(f"mbarrier.try_wait.parity.shared::cta.b64 {pw}, [{bar}], {parity};")
        p(f"@{pw} bra {done};")
        if self.cfg.timeout_ns:
            now, pt = p.r64("t_now"), p.pred("p_late")
            p(f"mov.u64 {now}, %globaltimer;")
            p(f"setp.gt.u64 {pt}, {now}, {p.r64('t_deadline')};")
            p(f"@{pt} trap;")
        p(f"bra {top};")
        p.label(done)

    def _raster(self, tile: str, pre: str) -> TileRegs:
        """Tile index -> (m_blk, n_blk) with grouped rasterization over cluster rows."""
        p, c = self.p, self.cfg
        g, first, gsz, r, mloc = (p.r32(f"{pre}_{x}") for x in ("g", "first", "gsz", "r", "mloc"))
        mb, nb, m0, n0 = (p.r32(f"{pre}_{x}") for x in ("mblk", "nblk", "m0", "n0"))
        p(f"div.u32 {g}, {tile}, %group_sz;")
        p(f"mul.lo.u32 {first}, {g}, {c.group_m};")
        p(f"sub.u32 {gsz}, %num_mc, {first};")
        p(f"min.u32 {gsz}, {gsz}, {c.group_m};")
        p(f"mul.lo.u32 {r}, {g}, %group_sz;")
        p(f"sub.u32 {r}, {tile}, {r};")
        p(f"rem.u32 {mloc}, {r}, {gsz};")
        p(f"div.u32 {nb}, {r}, {gsz};")
        p(f"add.u32 {mb}, {first}, {mloc};")
        if c.cluster_m > 1:
            p(f"mad.lo.u32 {mb}, {mb}, {c.cluster_m}, %cta_rank;")
        p(f"mul.lo.u32 {m0}, {mb}, {c.bm};")
        p(f"mul.lo.u32 {n0}, {nb}, {c.bn};")
        return TileRegs(mb, nb, m0, n0)

    # ---- the kernel ----------------------------------------------------------------
    def emit(self) -> str:
        c, p = self.cfg, self.p
        for name, ty in (("tidx", ".b32"), ("M", ".b32"), ("N", ".b32"), ("K", ".b32"),
                         ("sbase", ".b32"), ("sbar", ".b32"), ("num_m", ".b32"),
                         ("num_mc", ".b32"), ("num_n", ".b32"), ("num_kb", ".b32"),
                         ("num_tiles", ".b32"), ("group_sz", ".b32"), ("tile0", ".b32"),
                         ("tstride", ".b32"), ("cta_rank", ".b32"), ("wg", ".b32"),
                         ("tmA", ".b64"), ("tmB", ".b64"), ("tmC", ".b64"), ("Cptr", ".b64")):
            p.reg(name, ty)
        p.reg("t_deadline", ".b64")
        S = c.stages

        p.comment("---- setup (all threads)")
        p("mov.u32 %tidx, %tid.x;")
        p(f"ld.param.u32 %M, [{self._pname('M')}];")
        p(f"ld.param.u32 %N, [{self._pname('N')}];")
        p(f"ld.param.u32 %K, [{self._pname('K')}];")
        p(f"ld.param.u64 %Cptr, [{self._pname('C')}];")
        for t in ("A", "B", "C"):
            p(f"mov.u64 %tm{t}, {self._pname('tm' + t)};")
            p(f"cvta.param.u64 %tm{t}, %tm{t};")
        p("mov.u32 %sbase, pkc_smem;")
        p("add.u32 %sbase, %sbase, 1023;")
        p("and.b32 %sbase, %sbase, 0xFFFFFC00;")
        p(f"add.u32 %sbar, %sbase, {c.bar_offset};")
        if c.timeout_ns:
            p("mov.u64 %t_deadline, %globaltimer;")
            p(f"add.u64 %t_deadline, %t_deadline, {c.timeout_ns};")
        else:
            p("mov.u64 %t_deadline, 0;")
        self.emit_prologue()
        p0 = p.pred("p_t0")
        p(f"setp.eq.u32 {p0}, %tidx, 0;")
        init_done = p.fresh("init_done")
        p(f"@!{p0} bra {init_done};")
        for s in range(S):
            p(f"mbarrier.init.shared::cta.b64 [%sbar+{8 * s}], 1;")
        for s in range(S):
            p(f"mbarrier.init.shared::cta.b64 [%sbar+{8 * (S + s)}], {c.consumers * c.cluster_m};")
        for i in range(c.extra_bars):
            p(f"mbarrier.init.shared::cta.b64 [%sbar+{8 * (2 * S + i)}], 1;")
        p("fence.mbarrier_init.release.cluster;")
        p("fence.proxy.async.shared::cta;")
        p.label(init_done)
        if c.cluster_m > 1:
            # every CTA's barriers are initialized before any peer arrives or multicasts
            p("barrier.cluster.arrive.release;")
            p("barrier.cluster.wait.acquire;")
        else:
            p("bar.sync 0;")

        p.comment("---- problem geometry and the tile sequence of this CTA")
        p(f"add.u32 %num_m, %M, {c.bm - 1};")
        p(f"div.u32 %num_m, %num_m, {c.bm};")
        p(f"add.u32 %num_n, %N, {c.bn - 1};")
        p(f"div.u32 %num_n, %num_n, {c.bn};")
        p(f"add.u32 %num_kb, %K, {BK - 1};")
        p("shr.u32 %num_kb, %num_kb, 6;")
        if c.cluster_m > 1:
            p(f"add.u32 %num_mc, %num_m, {c.cluster_m - 1};")
            p(f"div.u32 %num_mc, %num_mc, {c.cluster_m};")
            p("mov.u32 %tile0, %clusterid.x;")
            p("mov.u32 %tstride, %nclusterid.x;")
            p("mov.u32 %cta_rank, %cluster_ctarank;")
        else:
            p("mov.u32 %num_mc, %num_m;")
            p("mov.u32 %tile0, %ctaid.x;")
            p("mov.u32 %tstride, %nctaid.x;")
            p("mov.u32 %cta_rank, 0;")
        p("mul.lo.u32 %num_tiles, %num_mc, %num_n;")
        p(f"mul.lo.u32 %group_sz, %num_n, {c.group_m};")
        self.emit_tile_space()
        p("shr.u32 %wg, %tidx, 7;")
        pp = p.pred("p_prod")
        p(f"setp.eq.u32 {pp}, %wg, 0;")
        p.split_role(pp, self._emit_producer, "consumer")
        self._emit_consumer()
        p.label("$L_end")
        if c.cluster_m > 1:
            # peers may still arrive on our barriers / multicast into our smem until both
            # CTAs are done: leave together.
            p("barrier.cluster.arrive.release;")
            p("barrier.cluster.wait.acquire;")
        self.emit_exit()
        p("exit;")
        return self._assemble()

    def _emit_producer(self) -> None:
        c, p = self.cfg, self.p
        p.comment("==== producer warpgroup: one thread issues TMA loads")
        p(f"setmaxnreg.dec.sync.aligned.u32 {c.producer_regs};")
        pn = p.pred("p_notleader")
        p(f"setp.ne.u32 {pn}, %tidx, 0;")
        p(f"@{pn} bra $L_end;")
        p("prefetch.tensormap [%tmA];")
        p("prefetch.tensormap [%tmB];")
        if c.cluster_m > 1:
            p(f"mov.u16 {p.reg('mc_mask', '.b16')}, {(1 << c.cluster_m) - 1};")
        s, ph, tile, kb, kc = (p.r32(x) for x in ("ps", "pph", "ptile", "pkb", "pkc"))
        bf, be, sa, sb = (p.r32(x) for x in ("pbar_full", "pbar_empty", "psA", "psB"))
        par = p.r32("ppar")
        p(f"mov.u32 {s}, 0;")
        p(f"mov.u32 {ph}, 0;")
        p(f"mov.u32 {tile}, %tile0;")
        top, done = p.fresh("ptile"), p.fresh("pdone")
        p.label(top)
        pt = p.pred("p_ptile_end")
        p(f"setp.ge.u32 {pt}, {tile}, %num_tiles;")
        p(f"@{pt} bra {done};")
        t = self.emit_tile_coords(tile, "pr")
        self.emit_producer_tile_prologue(t)
        p(f"mov.u32 {kb}, 0;")
        p(f"mov.u32 {kc}, 0;")
        ktop = p.fresh("pk")
        p.label(ktop)
        p(f"mad.lo.u32 {bf}, {s}, 8, %sbar;")
        p(f"add.u32 {be}, {bf}, {8 * c.stages};")
        p(f"xor.b32 {par}, {ph}, 1;")
        self._wait(be, par, "empty")
        p(f"mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [{bf}], {c.stage_bytes};")
        p(f"mad.lo.u32 {sa}, {s}, {c.a_stage_bytes}, %sbase;")
        p(f"mad.lo.u32 {sb}, {s}, {c.b_stage_bytes}, %sbase;")
        p(f"add.u32 {sb}, {sb}, {c.stages * c.a_stage_bytes};")
        self.emit_load_a(sa, kc, t, bf)
        self.emit_load_b(sb, kc, t, bf)
        self._advance(s, ph)
        p(f"add.u32 {kc}, {kc}, {BK};")
        p(f"add.u32 {kb}, {kb}, 1;")
        pk = p.pred("p_pk")
        p(f"setp.lt.u32 {pk}, {kb}, %num_kb;")
        p(f"@{pk} bra {ktop};")
        p(f"add.u32 {tile}, {tile}, %tstride;")
        p(f"bra {top};")
        p.label(done)

    _TMA_LOAD = ("cp.async.bulk.tensor.2d.shared::cluster.global.tile"
                 ".mbarrier::complete_tx::bytes")

    def emit_load_a(self, dst: str, kc: str, t: TileRegs, bar: str) -> None:
        """TMA load of the A tile (rows m0.., k-columns kc..) into ``dst``."""
        self.p(f"{self._TMA_LOAD} [{dst}], [%tmA, {{{kc}, {t.m0}}}], [{bar}];")

    def emit_load_b(self, dst: str, kc: str, t: TileRegs, bar: str) -> None:
        c, p = self.cfg, self.p
        mc = ".multicast::cluster" if c.cluster_m > 1 else ""
        tail = ", %mc_mask" if c.cluster_m > 1 else ""
        if c.b_layout == "nk":
            rows = c.bn // c.cluster_m          # rows of B this CTA loads
            d, n = p.r32("ldb_dst"), p.r32("ldb_n")
            if c.cluster_m > 1:
                p(f"mad.lo.u32 {d}, %cta_rank, {rows * ROW_BYTES}, {dst};")
                p(f"mad.lo.u32 {n}, %cta_rank, {rows}, {t.n0};")
            else:
                p(f"mov.u32 {d}, {dst};")
                p(f"mov.u32 {n}, {t.n0};")
            p(f"{self._TMA_LOAD}{mc} [{d}], [%tmB, {{{kc}, {n}}}], [{bar}]{tail};")
        else:
            blocks = c.bn // 64 // c.cluster_m     # 64-column boxes this CTA loads
            d, n = p.r32("ldb_dst"), p.r32("ldb_n")
            if c.cluster_m > 1:
                p(f"mad.lo.u32 {d}, %cta_rank, {blocks * 64 * ROW_BYTES}, {dst};")
                p(f"mad.lo.u32 {n}, %cta_rank, {blocks * 64}, {t.n0};")
            else:
                p(f"mov.u32 {d}, {dst};")
                p(f"mov.u32 {n}, {t.n0};")
            for j in range(blocks):
                if j:
                    p(f"add.u32 {d}, {d}, {64 * ROW_BYTES};")
                    p(f"add.u32 {n}, {n}, 64;")
                p(f"{self._TMA_LOAD}{mc} [{d}], [%tmB, {{{n}, {kc}}}], [{bar}]{tail};")

    def _emit_consumer(self) -> None:
        c, p = self.cfg, self.p
        p.comment("==== consumer warpgroups: wgmma on the stages, then the epilogue")
        if c.consumers == 2:
            p(f"setmaxnreg.inc.sync.aligned.u32 {c.consumer_reg_target};")
        p.reg(f"acc<{c.acc_regs}>", ".f32")
        cw, ltid, warp, lane = (p.r32(x) for x in ("cw", "ltid", "warp", "lane"))
        lead = p.pred("p_lead")
        p("sub.u32 %cw, %wg, 1;")
        p("and.b32 %ltid, %tidx, 127;")
        p("shr.u32 %warp, %ltid, 5;")
        p("and.b32 %lane, %tidx, 31;")
        p(f"setp.eq.u32 {lead}, %ltid, 0;")
        sa_cw, sb0 = p.r32("csA_cw"), p.r32("csB0")
        p(f"mad.lo.u32 {sa_cw}, %cw, {c.wg_m * ROW_BYTES}, %sbase;")
        p(f"add.u32 {sb0}, %sbase, {c.stages * c.a_stage_bytes};")
        self.emit_epilogue_setup()
        s, ph, tile, kb, prev = (p.r32(x) for x in ("cs", "cph", "ctile", "ckb", "cprev"))
        bf, sa, sb = p.r32("cbar_full"), p.r32("csA"), p.r32("csB")
        da, db = p.r64("descA"), p.r64("descB")
        dak, dbk = p.r64("descAk"), p.r64("descBk")
        pacc, prel = p.pred("p_acc"), p.pred("p_rel")
        p(f"mov.u32 {s}, 0;")
        p(f"mov.u32 {ph}, 0;")
        p(f"mov.u32 {tile}, %tile0;")
        top, done = p.fresh("ctile"), p.fresh("cdone")
        p.label(top)
        pt = p.pred("p_ctile_end")
        p(f"setp.ge.u32 {pt}, {tile}, %num_tiles;")
        p(f"@{pt} bra {done};")
        t = self.emit_tile_coords(tile, "cr")
        self.emit_consumer_tile_prologue(t)
        p(f"mov.u32 {kb}, 0;")
        ktop = p.fresh("ck")
        p.label(ktop)
        p(f"mad.lo.u32 {bf}, {s}, 8, %sbar;")
        self._wait(bf, ph, "full")
        p(f"mad.lo.u32 {sa}, {s}, {c.a_stage_bytes}, {sa_cw};")
        p(f"mad.lo.u32 {sb}, {s}, {c.b_stage_bytes}, {sb0};")
        p(f"cvt.u64.u32 {da}, {sa};")
        p(f"shr.u64 {da}, {da}, 4;")
        p(f"or.b64 {da}, {da}, {DESC_HI_KMAJOR:#x};")
        p(f"cvt.u64.u32 {db}, {sb};")
        p(f"shr.u64 {db}, {db}, 4;")
        hib = DESC_HI_KMAJOR if c.b_layout == "nk" else DESC_HI_NMAJOR
        p(f"or.b64 {db}, {db}, {hib:#x};")
        p(f"setp.ne.u32 {pacc}, {kb}, 0;")
        p("wgmma.fence.sync.aligned;")
        dt = c.dtype
        trans_b = 0 if c.b_layout == "nk" else 1
        for k in range(BK // 16):
            boff = (k * 32) if c.b_layout == "nk" else (k * 16 * ROW_BYTES)
            if boff:
                p(f"add.s64 {dbk}, {db}, {boff >> 4};")
            else:
                p(f"mov.b64 {dbk}, {db};")
            for mi in range(c.m_slices):
                aoff = mi * 64 * ROW_BYTES + k * 32
                if aoff:
                    p(f"add.s64 {dak}, {da}, {aoff >> 4};")
                else:
                    p(f"mov.b64 {dak}, {da};")
                accs = ", ".join(self.acc(mi, q) for q in range(c.bn // 2))
                scale = pacc if k == 0 else "1"
                p(f"wgmma.mma_async.sync.aligned.m64n{c.bn}k16.f32.{dt}.{dt} "
                  f"{{{accs}}}, {dak}, {dbk}, {scale}, 1, 1, 0, {trans_b};")
        p("wgmma.commit_group.sync.aligned;")
        p("wgmma.wait_group.sync.aligned 1;")
        # the group of the previous k-block is complete: release its stage
        p(f"setp.ne.and.u32 {prel}, {kb}, 0, {lead};")
        self._release(prev, prel)
        p(f"mov.u32 {prev}, {s};")
        self._advance(s, ph)
        p(f"add.u32 {kb}, {kb}, 1;")
        pk = p.pred("p_ck")
        p(f"setp.lt.u32 {pk}, {kb}, %num_kb;")
        p(f"@{pk} bra {ktop};")
        p("wgmma.wait_group.sync.aligned 0;")
        self._release(prev, lead)
        self.emit_epilogue_tile(t)
        p(f"add.u32 {tile}, {tile}, %tstride;")
        p(f"bra {top};")
        p.label(done)
        self.emit_epilogue_finish()

    def _release(self, stage: str, pred: str) -> None:
        """Arrive on empty[stage] (of every CTA of the cluster) from one thread."""
        c, p = self.cfg, self.p
        be = p.r32("cbar_empty")
        p(f"mad.lo.u32 {be}, {stage}, 8, %sbar;")
        p(f"add.u32 {be}, {be}, {8 * c.stages};")
        if c.cluster_m == 1:
            p(f"@{pred} mbarrier.arrive.release.cta.shared::cta.b64 _, [{be}];")
            return
        # The stage's smem was last read by wgmma (complete: wait_group), and is next
        # written by the peer's TMA (async proxy, ordered by the barrier itself), so the
        # default .release.cta arrive suffices; .release.cluster would put a GPU-wide
        # MEMBAR in front of every arrive (seen in the SASS: 0.6x the speed).
        rbe = p.r32("cbar_empty_remote")
        for r in range(c.cluster_m):
            p(f"mapa.shared::cluster.u32 {rbe}, {be}, {r};")
            p(f"@{pred} mbarrier.arrive.shared::cluster.b64 _, [{rbe}];")

    # ---- epilogue: TMA store through swizzled shared memory -------------------------
    def _tma_epilogue_setup(self) -> None:
        c, p = self.cfg, self.p
        w = c.epi_width
        rowb = 2 * w
        mask = (1 << _SWIZZLE_FOR_ROW_BYTES[rowb]) - 1
        eb, boff = p.r32("epi_base"), p.r32("epi_off")
        p(f"mad.lo.u32 {eb}, %cw, {c.epi_bufs * c.epi_buf_bytes}, %sbase;")
        p(f"add.u32 {eb}, {eb}, {c.stages * c.stage_bytes};")
        p(f"mov.u32 {boff}, 0;")
        r0 = p.r32("epi_r0")
        tmp = p.r32("epi_tmp")
        p(f"shl.b32 {r0}, %warp, 4;")
        p(f"shr.u32 {tmp}, %lane, 2;")
        p(f"add.u32 {r0}, {r0}, {tmp};")
        for i in range(2):
            ro, xo = p.r32(f"epi_row{i}"), p.r32(f"epi_x{i}")
            # linear byte offset of (row r0 + 8i, column pair lane%4) in a 64 x w tile
            p(f"add.u32 {ro}, {r0}, {8 * i};")
            p(f"mul.lo.u32 {ro}, {ro}, {rowb};")
            # 128B-family swizzle: 16-byte chunk bits [4,4+B) ^= address bits [7,7+B)
            p(f"shr.u32 {xo}, {ro}, 7;")
            p(f"and.b32 {xo}, {xo}, {mask};")
            p(f"shl.b32 {xo}, {xo}, 4;")
            p(f"and.b32 {tmp}, %lane, 3;")
            p(f"shl.b32 {tmp}, {tmp}, 2;")
            p(f"add.u32 {ro}, {ro}, {tmp};")

    def _pack(self, dst: str, lo: str, hi: str) -> None:
        # cvt.rn.{bf16x2,f16x2}.f32 d, a, b puts a in the upper half, b in the lower
        self.p(f"cvt.rn.{self.cfg.dtype}x2.f32 {dst}, {hi}, {lo};")

    def _tma_epilogue_tile(self, t: TileRegs) -> None:
        p = self.p
        p.r32("epi_bar")
        p("add.u32 %epi_bar, %cw, 1;")

        def store_pair(mi, q, i, jj, x, a, rb, v):
            self._pack(v, self.acc(mi, q), self.acc(mi, q + 1))
            p(f"xor.b32 {x}, %epi_x{i}, {16 * jj};")
            p(f"add.u32 {a}, {rb}, {x};")
            p(f"st.shared.b32 [{a}], {v};")

        def store_c(buf, cn, cm):
            return [f"@%p_lead cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group "
                    f"[%tmC, {{{cn}, {cm}}}], [{buf}];"]

        self._emit_epilogue_pieces(t.m0, t.n0, self.cfg.epi_width, store_pair, store_c, "C piece")

    def epilogue_pieces(self, w: int) -> list[tuple[int, int]]:
        """(m slice, column block) of the warpgroup's epilogue pieces, in order."""
        return [(mi, ch) for mi in range(self.cfg.m_slices) for ch in range(self.cfg.bn // w)]

    def _emit_epilogue_pieces(self, m_first: str, n_first: str, w: int, store_pair, op_lines,
                              label: str = "piece", fill=None, after=None) -> None:
        """The TMA epilogue's loop, shared with the fused kernels: the warpgroup's
        accumulators go piece by piece (64 rows x ``w`` columns) through the swizzled
        epilogue buffers; ``store_pair(mi, q, i, jj, x, a, rb, v)`` writes accumulators q,
        q+1 of row i into shared memory; ``op_lines(buf, cn, cm)`` gives the leader's bulk
        op(s) for the piece (``cn``, ``cm``: its first column and row, from ``n_first``,
        ``m_first``). ``fill(buf, cn, cm)``, if given, emits what fills the buffer before
        the pairs are written (a TMA load the pairs then add to); ``after(k)`` what follows
        piece k's bulk ops, before the next buffer is taken."""
        c, p = self.cfg, self.p
        bar_id = "%epi_bar"
        lead = p.pred("p_lead")
        buf, a, x, v = p.r32("epi_buf"), p.r32("epi_addr"), p.r32("epi_xa"), p.r32("epi_v")
        rb = [p.r32(f"epi_rb{i}") for i in range(2)]
        cn, cm = p.r32("epi_cn"), p.r32("epi_cm")
        for k, (mi, ch) in enumerate(self.epilogue_pieces(w)):
            if ch == 0:
                p(f"mad.lo.u32 {cm}, %cw, {c.wg_m}, {m_first};")
                if mi:
                    p(f"add.u32 {cm}, {cm}, {64 * mi};")
            p.comment(f"{label}: rows +{64 * mi}, columns +{ch * w}")
            p(f"@{lead} cp.async.bulk.wait_group.read {c.epi_bufs - 1};")
            p(f"bar.sync {bar_id}, 128;")
            p(f"add.u32 {buf}, %epi_base, %epi_off;")
            for i in range(2):
                p(f"add.u32 {rb[i]}, {buf}, %epi_row{i};")
            p(f"add.u32 {cn}, {n_first}, {ch * w};")
            if fill:
                fill(buf, cn, cm)
            for jj in range(w // 8):
                j = ch * (w // 8) + jj
                for i in range(2):
                    store_pair(mi, 4 * j + 2 * i, i, jj, x, a, rb[i], v)
            p("fence.proxy.async.shared::cta;")
            p(f"bar.sync {bar_id}, 128;")
            for line in op_lines(buf, cn, cm):
                p(line)
            p(f"@{lead} cp.async.bulk.commit_group;")
            if after:
                after(k)
            if c.epi_bufs == 2:
                p(f"xor.b32 %epi_off, %epi_off, {c.epi_buf_bytes};")

    # ---- epilogue: predicated st.global from registers ----------------------------
    def _global_epilogue_setup(self) -> None:
        p = self.p
        r, cb, tmp = p.r32("ge_r"), p.r32("ge_c"), p.r32("ge_tmp")
        p(f"mul.lo.u32 {r}, %cw, {self.cfg.wg_m};")
        p(f"shl.b32 {tmp}, %warp, 4;")
        p(f"add.u32 {r}, {r}, {tmp};")
        p(f"shr.u32 {tmp}, %lane, 2;")
        p(f"add.u32 {r}, {r}, {tmp};")
        p(f"and.b32 {cb}, %lane, 3;")
        p(f"shl.b32 {cb}, {cb}, 1;")

    def _global_epilogue_tile(self, t: TileRegs) -> None:
        c, p = self.cfg, self.p
        row, col, crem = p.r32("ge_row"), p.r32("ge_col"), p.r32("ge_crem")
        off, addr = p.r64("ge_off"), p.r64("ge_addr")
        prow, pst = p.pred("p_ge_row"), p.pred("p_ge_st")
        v = p.r32("ge_v")
        p(f"add.u32 {col}, {t.n0}, %ge_c;")
        p(f"sub.s32 {crem}, %N, {col};")
        for mi in range(c.m_slices):
            for i in range(2):
                p(f"add.u32 {row}, {t.m0}, %ge_r;")
                p(f"add.u32 {row}, {row}, {64 * mi + 8 * i};")
                p(f"setp.lt.u32 {prow}, {row}, %M;")
                p(f"mul.wide.u32 {off}, {row}, %N;")
                p(f"cvt.u64.u32 {addr}, {col};")
                p(f"add.s64 {off}, {off}, {addr};")
                p(f"shl.b64 {off}, {off}, 1;")
                p(f"add.s64 {addr}, %Cptr, {off};")
                for j in range(c.bn // 8):
                    q = 4 * j + 2 * i
                    self._pack(v, self.acc(mi, q), self.acc(mi, q + 1))
                    p(f"setp.gt.and.s32 {pst}, {crem}, {8 * j}, {prow};")
                    p(f"@{pst} st.global.b32 [{addr}+{16 * j}], {v};")

    # ---- text ----------------------------------------------------------------------
    def _assemble(self) -> str:
        c = self.cfg
        params = [f"\t.param .align 64 .b8 {self._pname('tmA')}[128]",
                  f"\t.param .align 64 .b8 {self._pname('tmB')}[128]",
                  f"\t.param .align 64 .b8 {self._pname('tmC')}[128]",
                  f"\t.param .u64 {self._pname('C')}",
                  f"\t.param .u32 {self._pname('M')}",
                  f"\t.param .u32 {self._pname('N')}",
                  f"\t.param .u32 {self._pname('K')}"]
        params += ["\t" + x for x in self.extra_params()]
        head = [
            f"// pkc sm_90a GEMM: {c.tag()} ({c.dtype}), {c.threads} threads,",
            f"// {c.stages} stages x {c.stage_bytes} B, epilogue {c.epilogue} "
            f"({c.epi_bytes} B), dynamic smem {c.smem_bytes} B",
            ".version 8.5",
            ".target sm_90a",
            ".address_size 64",
            "",
            ".extern .shared .align 1024 .b8 pkc_smem[];",
            "",
            f".visible .entry {c.kernel_name}(",
            ",\n".join(params),
            ")",
            f".maxntid {c.threads}, 1, 1",
            ".minnctapersm 1",
        ]
        if c.cluster_m > 1:
            head.append(f".reqnctapercluster {c.cluster_m}, 1, 1")
        body = ["{"] + self.p.declarations() + [""] + self.p.lines + ["}", ""]
        return "\n".join(head + body)


def tile_coords(cfg: GemmConfig, tile: int, rank: int, M: int, N: int) -> tuple[int, int]:
    """(m_blk, n_blk) of ``tile`` (cluster tile index) for CTA ``rank`` of its cluster: the
    same arithmetic as the emitted ``_raster`` (kept in step with it; tests use it)."""
    num_m = -(-M // cfg.bm)
    num_n = -(-N // cfg.bn)
    num_mc = -(-num_m // cfg.cluster_m)
    group_sz = cfg.group_m * num_n
    g = tile // group_sz
    first = g * cfg.group_m
    gsz = min(num_mc - first, cfg.group_m)
    r = tile - g * group_sz
    return (first + r % gsz) * cfg.cluster_m + rank, r // gsz


def emit_gemm_ptx(cfg: GemmConfig) -> str:
    """The PTX text of one GEMM kernel (entry name ``cfg.kernel_name``)."""
    return GemmKernel(cfg).emit()
