"""The fused sm_90a kernels (GEMM + reduce-scatter, all-gather + GEMM) and the transfer
microbenchmark kernels, checked without a GPU: every kernel assembles with
``ptxas -arch=sm_90a`` without spills or local memory; the fused kernels' SASS keeps the
GEMM's pipeline (HGMMA of the tile's shape, one full and one empty mbarrier per stage at
the expected offsets, setmaxnreg) and shows their own TMA stores / reductions / loads and
signals; the PTX carries the signal, wait and reduce instructions; the tile order visits
the own chunk first and every chunk once; B as [K, N] ("kn") loads in 64-column boxes.
FusedWorld's host logic runs on CPU stand-ins of the peers, tensor maps and launches.
SASS checks need ``cuobjdump``."""

from __future__ import annotations

import re

import pytest
import torch

from pkc.codegen.hopper import tools
from pkc.codegen.hopper.fused import (FusedConfig, check_fused_pipeline, emit_bulk_copy_loop,
                                      emit_fused_ptx, tile_order)
from pkc.codegen.hopper.gemm import GemmConfig
from pkc.codegen.hopper.transfer import KERNELS, kernel_for, tma_lag, tma_piece, tma_ring
from pkc.runtime.peers import Peers, Symmetric

HAVE_PTXAS = tools.find_tool("ptxas") is not None
HAVE_CUOBJDUMP = HAVE_PTXAS and tools.find_tool("cuobjdump") is not None
needs_ptxas = pytest.mark.skipif(not HAVE_PTXAS, reason="ptxas not found")
needs_sass = pytest.mark.skipif(not HAVE_CUOBJDUMP, reason="cuobjdump not found")

G128 = GemmConfig(bm=128, bn=128, stages=6)
FUSED = {
    "rs_w1_bf16acc": FusedConfig("rs", 1),
    "rs_w1_f32acc": FusedConfig("rs", 1, acc="f32"),
    "rs_w8_bf16acc": FusedConfig("rs", 8),
    "rs_w4_f32acc_f16": FusedConfig("rs", 4, acc="f32", gemm=GemmConfig(dtype="f16")),
    "rs_w2_128x128": FusedConfig("rs", 2, gemm=G128),
    "ar_w2": FusedConfig("ar", 2),
    "arf_w1": FusedConfig("arf", 1),
    "arf_w2": FusedConfig("arf", 2),
    "arf_w2_kn_128x128_f16": FusedConfig("arf", 2, gemm=G128.with_(dtype="f16", b_layout="kn"),
                                         comm_ctas=8),
    "ar_w4_kn_f16": FusedConfig("ar", 4, gemm=GemmConfig(dtype="f16", b_layout="kn")),
    "ar_w2_out": FusedConfig("ar", 2, out=True),
    "rs_w2_out": FusedConfig("rs", 2, out=True),
    "rs_w2_out_kn_128x128_f16": FusedConfig("rs", 2, out=True,
                                            gemm=G128.with_(dtype="f16", b_layout="kn")),
    "ar_w2_out_kn_128x128_f16": FusedConfig("ar", 2, out=True,
                                            gemm=G128.with_(dtype="f16", b_layout="kn")),
    "ag_w1": FusedConfig("ag", 1),
    "ag_w8": FusedConfig("ag", 8),
    "ag_w2_128x128_f16": FusedConfig("ag", 2, gemm=G128.with_(dtype="f16"), comm_ctas=4),
    # B as [K, N] (b_layout "kn"): bn/64 boxes of B per k-block, N-major wgmma operand
    "rs_w1_kn": FusedConfig("rs", 1, gemm=GemmConfig(b_layout="kn")),
    "rs_w2_kn_f32acc": FusedConfig("rs", 2, acc="f32", gemm=GemmConfig(b_layout="kn")),
    "rs_w4_kn_128x128": FusedConfig("rs", 4, gemm=G128.with_(b_layout="kn")),
    "ag_w1_kn": FusedConfig("ag", 1, gemm=GemmConfig(b_layout="kn")),
    "ag_w2_kn": FusedConfig("ag", 2, gemm=GemmConfig(b_layout="kn")),
    "ag_w4_kn_128x128_f16": FusedConfig("ag", 4, gemm=G128.with_(dtype="f16", b_layout="kn"),
                                        comm_ctas=4),
}

_ASM: dict = {}


def _asm(name):
    if name not in _ASM:
        src = emit_fused_ptx(FUSED[name]) if name in FUSED else KERNELS[name].emit()
        _ASM[name] = tools.assemble(src)
    return _ASM[name]


def test_configs_validate():
    for f in FUSED.values():
        f.validate()
        assert f.gemm_cfg().stages >= 3
    with pytest.raises(ValueError, match="cluster_m"):
        FusedConfig("rs", 2, gemm=GemmConfig(cluster_m=2)).validate()
    with pytest.raises(ValueError, match="TMA epilogue"):
        FusedConfig("rs", 2, gemm=GemmConfig(epilogue="global")).validate()
    with pytest.raises(ValueError, match="world"):
        FusedConfig("ag", 0).validate()
    with pytest.raises(ValueError, match="acc"):
        FusedConfig("rs", 2, acc="f16").validate()        # bf16 GEMM: acc f32 or bf16
    assert FusedConfig("ag", 1).n_comm == 0 and FusedConfig("ag", 4).n_comm == 8
    assert FusedConfig("rs", 1, acc="f32").piece_cols == 32


def test_kn_validate_and_names():
    """kn needs bn a multiple of 64 (whole 64-column boxes of B); its kernels get their
    own names (the nk names, those of the measured kernels, stay as they were)."""
    with pytest.raises(ValueError, match="b_layout kn needs bn a multiple of 64"):
        FusedConfig("rs", 2, gemm=GemmConfig(bn=96, stages=6, b_layout="kn")).validate()
    with pytest.raises(ValueError, match="b_layout kn needs bn a multiple of 64"):
        FusedConfig("ag", 4, gemm=GemmConfig(bn=160, stages=5, b_layout="kn")).validate()
    FusedConfig("ag", 4, gemm=GemmConfig(bn=192, b_layout="kn")).validate()
    nk, kn = FusedConfig("rs", 2), FusedConfig("rs", 2, gemm=GemmConfig(b_layout="kn"))
    assert nk.kernel_name == "pkc_rs_w2_bf16acc_bf16_128x256_s4_c2_g8"
    assert kn.kernel_name == "pkc_rs_w2_bf16acc_kn_bf16_128x256_s4_c2_g8"
    assert FusedConfig("ag", 2, gemm=GemmConfig(b_layout="kn")).kernel_name.startswith(
        "pkc_ag_w2_cc8_kn_")


@pytest.mark.parametrize("name", [n for n in sorted(FUSED) if "_kn" in n])
def test_kn_loads_b_in_64_column_boxes(name):
    """The producer's B loads for kn: bn/64 2-D TMA loads of {n, k} per k-block, after
    the one of A (ag W > 1: plus the gathered rows' 3-D load); wgmma with B transposed."""
    f = FUSED[name]
    ptx = emit_fused_ptx(f)
    loads = re.findall(r"cp\.async\.bulk\.tensor\.2d\.shared::cluster\.global\.tile"
                       r"\.mbarrier::complete_tx::bytes \[[^]]+\], \[%tmB, \{%[\w]+, %[\w]+\}\]", ptx)
    assert len(loads) == f.gemm.bn // 64
    assert "[%tmB, {%ldb_n, %" in ptx                     # N innermost: {n, k}
    mmas = [ln for ln in ptx.splitlines() if "wgmma.mma_async" in ln]
    assert mmas and all(ln.endswith(", 1, 1, 0, 1;") for ln in mmas)     # imm-trans-b = 1


@pytest.mark.parametrize("name", sorted(FUSED))
def test_ptx_has_the_protocol(name):
    f = FUSED[name]
    ptx = emit_fused_ptx(f)
    assert f".entry {f.kernel_name}(" in ptx
    assert ptx.count("mbarrier.init.shared::cta.b64") == 2 * f.gemm.stages + f.gemm_cfg().extra_bars
    assert re.search(rf"wgmma\.mma_async\.sync\.aligned\.m64n{f.gemm.bn}k16\.f32", ptx)
    if f.kind == "rs" and f.out:
        # the peer's chunk first, its partial stored into the peer's staging (3-d map,
        # this epoch's half); the own chunk last: the peer's partial loaded per piece,
        # added, the sum stored into the output (2-d map); no reduce-adds
        pieces = f.gemm.m_slices * (f.gemm.bn // f.gemm.epi_width)
        assert ptx.count("cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group") == pieces
        assert ptx.count("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group") == pieces
        assert ptx.count("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier") == pieces
        assert "cp.reduce.async.bulk.tensor" not in ptx
        assert "add.u32 %cr_fz_peer, %cr_fz_peer, 1;" in ptx          # slot s: rank + s + 1
        assert "and.b32 %fo_half, %fz_epoch, 1;" in ptx
        assert "[%tmC, {%epi_cn, %epi_cm}]" in ptx
        # the own tile's prologue signals the peer's chunk before it waits for the peer
        pro = ptx[ptx.index("the own chunk: signal the peer's chunk first"):
                  ptx.index("mov.u32 %fo_staged, 1;")]
        assert pro.index("red.release.sys.global.add.u32") < pro.index("ld.acquire.sys")
        assert ptx.count("red.release.sys.global.add.u32") == 3            # 3 flush sites
    elif f.kind == "rs":
        # own chunk: TMA store; other chunks: TMA reduce-add; per-chunk release signals
        assert "cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group" in ptx
        assert "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group" in ptx
        assert "red.release.sys.global.add.u32" in ptx
        assert "red.release.gpu.global.add.u32" in ptx          # to itself: gpu scope
        assert "cp.async.bulk.wait_group 0;" in ptx
        assert "fence.proxy.async.global;" in ptx
        assert "ld.acquire.sys.global.u32" in ptx                # final wait (bounded)
        if f.acc_dtype == "f32":
            assert "st.shared.v2.f32" in ptx and "ld.global.cg.v4.f32" in ptx
    elif f.kind == "arf":
        # each piece to the own output and (W = 2) the peer's staging; no tensor adds: the
        # reducer CTAs add the staged partials with vector loads and f32 sums; per-tile
        # signals, one tile late, to the peer (sys) and to itself (gpu)
        W, dt = f.world, f.gemm.dtype
        stores = ptx.count("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group")
        pieces = f.gemm.m_slices * (f.gemm.bn // f.gemm.epi_width)
        assert stores == (1 if W == 1 else 2) * pieces
        assert "cp.reduce.async.bulk.tensor" not in ptx
        if W == 1:
            assert "ld.acquire" not in ptx and "red.release" not in ptx
            assert "add.rn.f32" not in ptx
        else:
            assert ptx.count("ld.global.cg.v4.b32") == 2 * 4          # staging + output, x4
            assert ptx.count("add.rn.f32") == 2 * 4 * 4 and f"cvt.rn.{dt}x2.f32" in ptx
            from pkc.codegen.hopper.fused import GemmArFreshKernel
            lag = GemmArFreshKernel.LAG
            assert f"cp.async.bulk.wait_group {pieces * lag};" in ptx
            # a signal site per tile, LAG at the end, the announcement
            assert ptx.count("red.release.sys.global.add.u32") == 1 + lag + 1
            assert ptx.count("red.release.gpu.global.add.u32") == 1 + lag
            assert f"div.u32 %fz_prev0, %cr_mblk, {f.gemm.group_m};" in ptx
            assert "ld.acquire.gpu.global.u32" in ptx and "ld.acquire.sys.global.u32" in ptx
    elif f.kind == "ar" and f.out:
        # own chunk: each piece to both accumulators; the peer's chunk: each piece of its
        # partial loaded (TMA, one mbarrier per warpgroup), our f32 sums added, the sum
        # stored to our output and the peer's accumulator; no reduce-adds; the own chunk
        # copied from the accumulator at the end
        pieces = f.gemm.m_slices * (f.gemm.bn // f.gemm.epi_width)
        stores = ptx.count("cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group")
        loads = ptx.count("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier")
        assert stores == 4 * pieces and loads == pieces
        assert "cp.reduce.async.bulk.tensor" not in ptx
        assert ptx.count("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%fo_b]") == pieces
        # loads run ahead: the first before the main loop, then the next piece's once a
        # piece's stores are issued (the other buffer, after its older store read it)
        assert ptx.count("cp.async.bulk.wait_group.read 1;") >= pieces - 1
        first_load = ptx.index("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier")
        assert first_load < ptx.index("wgmma.mma_async")
        assert ptx.count("add.rn.f32") == 2 * pieces * f.gemm.epi_width // 8 * 2
        assert "[%tmC, {" in ptx and ptx.count("ld.global.cg.v4.b32") == 4
        # the other rank's accumulator: both paths send there (never the own one twice)
        assert "xor.b32 %fo_other, %fz_rank, 1;" in ptx
        assert "mad.wide.u32 %fo_ttheirs, %fo_other, 128, %fz_acc_maps;" in ptx
        # flush sites: the chunk change in the tile prologue (before the owner wait moved
        # there: the peer waits for these signals) and in the epilogue, and the end
        assert ptx.count("red.release.sys.global.add.u32") == 3 * f.world
    elif f.kind == "ar":
        # every piece to every rank: W stores (own chunk) and W reduce-adds (others) per
        # piece, through the W accumulators' 3-d maps; W signals per flush
        W = f.world
        stores = ptx.count("cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group")
        adds = ptx.count("cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group")
        assert stores == adds and stores % W == 0 and stores >= W
        assert ptx.count("red.release.sys.global.add.u32") == 2 * W     # two flush sites
        assert "ld.acquire.sys.global.u32" in ptx
    else:
        assert "cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group" in ptx
        if f.world > 1:
            assert "cp.async.bulk.global.shared::cta.bulk_group" in ptx        # the puts
            assert "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes" in ptx
            assert "cp.async.bulk.tensor.3d.shared::cluster.global.tile" in ptx
            assert "red.release.sys.global.add.u32" in ptx
            # row-block slots as ag_put_schedule / test_ag_row_block_protocol model them:
            # the put signals rank*G + block, a tile waits on shard*G + m_blk / group_m
            assert "mad.lo.u32 %fz_dslot, %fz_rank, %fz_G, %fz_b;" in ptx
            assert re.search(rf"div\.u32 %fz_akey, %\w+, {f.gemm.group_m};", ptx)
            assert re.search(r"mad\.lo\.u32 %fz_akey, %\w+, %fz_G, %fz_akey;", ptx)
            assert f"div.u32 %fz_G, %fz_G, {f.gemm.group_m};" in ptx
            assert "ld.acquire.sys.global.u32" in ptx
        else:
            assert "ld.acquire" not in ptx and "red.release" not in ptx
    if "ld.acquire" in ptx:
        # a timeout is copied to the host-mapped mailbox, then (if asked) traps
        assert "st.volatile.global.u32 [%fz_mbox], 1;" in ptx and "trap;" in ptx
        # every spin-wait is bounded by %globaltimer and records an error
        waits = ptx.count("ld.acquire.sys.global.u32") + ptx.count("ld.acquire.gpu.global.u32")
        assert ptx.count("atom.global.cas.b32") == waits
        assert ptx.count("add.u64 %fz_sdl, %fz_sdl, %fz_sig_timeout;") == waits


@pytest.mark.parametrize("name", sorted(FUSED))
@needs_ptxas
def test_fused_assembles_without_spills(name):
    a = _asm(name)
    assert a.spill_stores == 0 and a.spill_loads == 0 and a.stack_bytes == 0, a.log
    assert not a.warnings, a.log
    assert a.registers == FUSED[name].gemm_cfg().entry_regs, a.log


@pytest.mark.parametrize("name", sorted(FUSED))
@needs_sass
def test_fused_sass_keeps_the_pipeline(name):
    f = FUSED[name]
    text = tools.sass(_asm(name).cubin)
    assert check_fused_pipeline(f, text) == []
    s = tools.SassSummary.of(text)
    assert s.hgmma and s.mbarrier_inits == 2 * f.gemm.stages + f.gemm_cfg().extra_bars


@needs_sass
def test_fused_stage_check_catches_a_lost_stage():
    want = FUSED["rs_w8_bf16acc"]
    got = tools.sass(tools.assemble(emit_fused_ptx(
        want.with_(gemm=want.gemm.with_(stages=3)))).cubin)
    assert any("mbarrier" in p for p in check_fused_pipeline(want, got))


@pytest.mark.parametrize("name", sorted(KERNELS))
@needs_ptxas
def test_transfer_kernels_assemble(name):
    a = _asm(name)
    assert a.spill_stores == 0 and a.spill_loads == 0 and a.stack_bytes == 0, a.log
    if HAVE_CUOBJDUMP:
        ins = tools._instrs(tools.sass(a.cubin))
        if name.startswith("tma"):
            assert any(i.startswith("UBLKCP.S.G") for i in ins)
            assert any(i.startswith("UBLKCP.G.S") for i in ins)
        else:
            u = KERNELS[name].unroll
            assert sum(1 for i in ins if "LDG.E.128" in i) == u
            assert sum(1 for i in ins if "STG.E.128" in i) == u


def test_transfer_ring_fits():
    for msg in [2 << 10 << i for i in range(10)]:
        piece, ring = tma_piece(msg), tma_ring(tma_piece(msg))
        assert piece * ring <= 192 * 1024 and ring >= 2 and piece % 16 == 0
        assert 1 <= tma_lag(ring) < ring
        assert kernel_for("tma", msg).lag == tma_lag(ring)
        assert f"wait_group.read {tma_lag(ring) - 1};" in kernel_for("tma", msg).emit()


@pytest.mark.parametrize("kind", ["rs", "ag"])
@pytest.mark.parametrize("W", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("Mc,N", [(1000, 1000), (256, 512), (4096, 520)])
def test_tile_order_own_chunk_first_every_tile_once(kind, W, Mc, N):
    f = FusedConfig(kind, W)
    c = f.gemm_cfg()
    tpc = -(-Mc // c.bm) * -(-N // c.bn)
    orders = {r: tile_order(f, r, Mc, N) for r in range(W)}
    for r, order in orders.items():
        assert len(order) == W * tpc and len(set(order)) == W * tpc
        assert {o[0] for o in order[:tpc]} == {r}                       # own chunk first
        assert [o[0] for o in order[::tpc]] == [(r + s) % W for s in range(W)]
    for slot in range(W):        # in every slot the ranks' targets form a permutation
        assert sorted(orders[r][slot * tpc][0] for r in range(W)) == list(range(W))


def test_bulk_copy_loop_emits_one_wait_per_piece():
    from pkc.codegen.hopper.gemm import _Ptx
    p = _Ptx()
    p.reg("t_deadline", ".b64")
    emit_bulk_copy_loop(p, src="%s", dsts=["%d0", "%d1"], total="%t", first="%f", step=4,
                        piece=32768, ring=4, smem="%sm", bars="%sb", timeout=True)
    body = "\n".join(p.lines)
    assert body.count("cp.async.bulk.global.shared::cta.bulk_group") == 2   # per destination
    assert body.count("cp.async.bulk.commit_group") == 1
    assert body.count("mbarrier.try_wait.parity") == 1 and "trap;" in body


@pytest.mark.parametrize("acc", ["", "f32"])
@pytest.mark.parametrize("bn", [256, 96])
def test_fused_epilogue_swizzle_matches_tma(acc, bn):
    """The smem byte address each thread writes for (row, column pair) of a piece, as the
    fused epilogue computes it, equals TMA's 128B-family swizzle of the piece's row-major
    offset (what the piece's tensor map with SWIZZLE_<row bytes>B expects), for 2- and
    4-byte elements."""
    f = FusedConfig("rs", 2, gemm=GemmConfig(bn=bn, stages=4 if bn == 256 else 6), acc=acc)
    c = f.gemm_cfg()
    es, w = f.acc_esize, f.piece_cols
    rowb = 2 * c.epi_width
    assert w * es == rowb
    bits = {128: 3, 64: 2, 32: 1}[rowb]

    def tma(addr):
        return addr ^ (((addr >> 7) & ((1 << bits) - 1)) << 4)

    for warp in range(4):
        for lane in range(32):
            r0 = 16 * warp + lane // 4
            lo = (lane & 3) * 2 * es
            for i in range(2):
                row = r0 + 8 * i
                y = ((((row * rowb) >> 7) & ((1 << bits) - 1)) << 4) ^ lo      # epi_y{i}
                for jj in range(w // 8):
                    ours = row * rowb + ((8 * es * jj) ^ y)
                    col = 8 * jj + 2 * (lane & 3)
                    assert ours == tma(row * rowb + col * es)


# ---- FusedWorld's host side on CPU stand-ins (no GPU: tensor maps and launches recorded)
class _FakePeers(Peers):
    """A CPU stand-in for pkc.runtime.peers.Peers: ``ranks`` driven of ``world``; records
    barriers and stream ordering (Peers' allocation logic is the real one)."""

    def __init__(self, world, ranks):
        from types import SimpleNamespace

        self.world, self.ranks, self.device = world, list(ranks), torch.device("cpu")
        self._sym, self._local, self.sms, self.log = {}, {}, 132, []
        slots = []   # a mailbox without the driver: slot addresses only
        self.mailbox = SimpleNamespace(slot=lambda k, r, kinds: slots.append(k) or 64 * len(slots))

    def _make_symmetric(self, shape, dtype):
        ts = {r: torch.full(shape, 7, dtype=dtype) for r in self.ranks}
        ptrs = [ts[r].data_ptr() if r in ts else 4096 * (r + 1) for r in range(self.world)]
        return Symmetric(ts, ptrs, torch.tensor(ptrs))

    def stream(self, rank):
        return 100 + rank

    def sms_of(self, rank):
        return 64

    def begin(self):
        self.log.append("begin")

    def end(self):
        self.log.append("end")

    def sync_all(self):
        self.log.append("sync")


@pytest.fixture
def fake_launch(monkeypatch):
    """Records encode_tmap's (dims, box) and every launch's (grid, stream, epoch)."""
    from types import SimpleNamespace

    import pkc.codegen.hopper.fused as fz
    import pkc.codegen.hopper.launch as hl

    rec = SimpleNamespace(maps=[], launches=[])
    monkeypatch.setattr(fz, "encode_tmap", lambda ptr, dt, dims, strides, box, sw:
                        rec.maps.append((dt, list(dims), list(box), sw)) or bytes(128))
    monkeypatch.setattr(hl, "load_kernel", lambda ptx, name, smem, dev: SimpleNamespace(name=name))
    monkeypatch.setattr(hl, "launch", lambda k, grid, block, args, st:
                        rec.launches.append((grid, st)))
    return rec


def _operands(kind, W, Mc, N, K, kn):
    rows = W * Mc if kind == "rs" else Mc
    a = [torch.randn(rows, K).to(torch.bfloat16) for _ in range(W)]
    b = [torch.randn(*((K, N) if kn else (N, K))).to(torch.bfloat16) for _ in range(W)]
    return a, b


@pytest.mark.parametrize("kind", ["rs", "ag"])
@pytest.mark.parametrize("layout", ["nk", "kn"])
def test_world_virtual_run(fake_launch, kind, layout):
    """All ranks driven: pads zeroed (then a barrier) before anything else, one launch per
    rank on its lane between begin and end, epochs advance, B's tensor map per layout
    (kn: [N, K] dims, 64-column boxes, as HopperGemm.pack), wrong B shapes rejected
    without advancing the epoch."""
    from pkc.codegen.hopper.fused import FusedWorld

    W, Mc, N, K = 2, 256, 512, 128
    peers = _FakePeers(W, range(W))
    f = FusedConfig(kind, W, gemm=GemmConfig(b_layout=layout))
    w = FusedWorld(f, Mc, N, K, peers=peers)
    assert peers.log == ["sync"]
    assert all(int(t.abs().sum()) == 0 for t in w.pads.tensors.values())
    assert w.grid == min(64 - f.n_comm, W * w.tpc) + f.n_comm
    a, b = _operands(kind, W, Mc, N, K, layout == "kn")
    outs = w.run(a, b)
    assert outs is w.out and all(o is not None for o in outs)
    assert fake_launch.launches == [(w.grid, 100), (w.grid, 101)] and w.epoch == 1
    assert peers.log == ["sync", "begin", "end"]
    want = ([N, K], [64, 64]) if layout == "kn" else ([K, N], [64, 256])   # dims, box
    assert (f.gemm.dtype, *want, 128) in fake_launch.maps, fake_launch.maps
    w.run({0: a[0], 1: a[1]}, {0: b[0], 1: b[1]}, streams=[7, 8])    # dicts, own streams
    assert fake_launch.launches[-2:] == [(w.grid, 7), (w.grid, 8)] and w.epoch == 2
    wrong = [t.t().contiguous() for t in b]
    with pytest.raises(ValueError, match="B must be"):
        w.run(a, wrong)
    with pytest.raises(ValueError, match="need 2 A"):
        w.run(a[:1], b)
    assert w.epoch == 2 and len(fake_launch.launches) == 4


def test_world_one_rank_of_many(fake_launch):
    """One driven rank (torch.distributed): run_rank launches it alone on its stream,
    buffers of other ranks are None, check reads its record only; a second world of the
    same kernel and size on the same peers shares the buffers and the epoch."""
    from pkc.codegen.hopper.fused import FusedWorld, SignalTimeout

    W, Mc, N, K = 4, 128, 256, 64
    peers = _FakePeers(W, [2])
    f = FusedConfig("rs", W, gemm=GemmConfig(b_layout="kn"), acc="f32")
    w = FusedWorld(f, Mc, N, K, peers=peers)
    assert w.acc[2] is not None and w.acc[0] is None and w.out[3] is None
    a, b = _operands("rs", W, Mc, N, K, True)
    o = w.run_rank(a[2], b[2])
    assert o is w.out[2] and fake_launch.launches == [(w.grid, 102)] and w.epoch == 1
    w2 = FusedWorld(f, Mc, N, K, peers=peers)
    assert w2.pads is w.pads and w2.acc[2] is w.acc[2] and peers.log.count("sync") == 1
    other = FusedWorld(f, Mc, N, K, peers=peers, owner="second kernel of the program")
    assert other.pads is not w.pads and other.acc[2] is not w.acc[2]   # no sharing across owners
    w2.run_rank(a[2], b[2])
    assert w.epoch == 2
    w.check()
    w.err[2][:8] = w.err[2].new_tensor([1, 2, 2, 0, 3, 8, 5, 2])
    with pytest.raises(SignalTimeout, match="rank 2 .*all contributions.*rank 0 at 3, wanted 8"):
        w2.check()
    w.reset_errors()
    w.check()
    with pytest.raises(ValueError, match="no A for rank 2"):
        w.run({0: a[0]}, {2: b[2]})
    with pytest.raises(ValueError, match="peers of 4"):
        FusedWorld(FusedConfig("rs", 2), Mc, N, K, peers=peers)


@pytest.mark.parametrize("kind", ["rs", "ag"])
def test_epoch_lives_on_the_device(kind):
    """The epoch is read from ``ctl`` by every thread before the CTA's first barrier and
    published by the last CTA at exit: no launch parameter changes between launches, so a
    captured CUDA graph replays with fresh epochs."""
    ptx = emit_fused_ptx(FusedConfig(kind, 2))
    read = ptx.index("ld.global.u32 %fz_epoch, [%fz_ctl];")
    assert read < ptx.index("bar.sync 0;")
    assert "atom.global.add.u32 %fz_done, [%fz_ctl+4], 1;" in ptx
    assert "st.global.u32 [%fz_ctl], %fz_epoch;" in ptx
    assert ".param .u64 pkc_" in ptx and "_param_epoch" not in ptx


@pytest.mark.parametrize("W", [2, 3, 4, 8])
@pytest.mark.parametrize("Mc,K,comm", [(1000, 1000, 4), (3000, 1024, 8), (4096, 2048, 16),
                                       (128, 72, 3)])
def test_ag_row_block_protocol(W, Mc, K, comm):
    """The put side (ag_put_schedule, the arithmetic of _emit_put) against the consumer
    (tile_order + the row-block key of emit_producer_tile_prologue): every byte of every
    shard reaches every peer once; each (shard, block) slot gets comm signals per epoch;
    a consumer's tile waits on the block that holds its rows; peers are served in the
    order they consume, and in each step the destinations form a permutation."""
    from pkc.codegen.hopper.fused import ag_put_schedule, ag_row_blocks

    f = FusedConfig("ag", W, comm_ctas=comm)
    c = f.gemm_cfg()
    G, total, blk_rows = ag_row_blocks(f, Mc), Mc * K * 2, c.bm * c.group_m
    signals = {}
    for r in range(W):
        sched = ag_put_schedule(f, r, Mc, K)
        for d in range(W):
            if d == r:
                continue
            got = sorted(p for e in sched if e["dest"] == d for p in e["pieces"])
            assert got[0][0] == 0 and got[-1][1] == total
            assert all(a[1] == b[0] for a, b in zip(got, got[1:]))      # no gap, no overlap
        for e in sched:
            signals[(e["dest"], e["slot"])] = signals.get((e["dest"], e["slot"]), 0) + 1
            lo, hi = e["block"] * blk_rows * K * 2, (e["block"] + 1) * blk_rows * K * 2
            assert all(lo <= a and b <= hi for a, b in e["pieces"])    # pieces in their block
        for j in range(comm):       # per CTA: peers rank-1, rank-2, ... (their consuming order)
            dests = [e["dest"] for e in sched if e["cta"] == j]
            order = list(dict.fromkeys(dests))
            assert order == [(r - k) % W for k in range(1, W)]
    assert set(signals.values()) == {comm}
    assert len(signals) == W * (W - 1) * G
    for k in range(1, W):           # step k: rank r serves r-k, a permutation of ranks
        assert sorted((r - k) % W for r in range(W)) == list(range(W))
    for r in range(W):              # each remote tile waits on a slot that is signalled
        for q, m_blk, _ in tile_order(f, r, Mc, 1):
            if q != r:
                key = q * G + m_blk // c.group_m
                assert (r, key) in signals
                assert m_blk * c.bm < min(Mc, (m_blk // c.group_m + 1) * blk_rows)


def test_arf_validates_world_and_counts_every_tile_in_its_row_block():
    """arf: W <= 2 (a third rank would add in a rank-dependent order); both ranks visit the
    full product in the same raster order, every tile once; the reducers' wait for row
    block b (consumers x its m-tiles x num_n, per epoch) is exactly the number of tile
    signals that block's tiles send (one per consumer warpgroup per tile)."""
    with pytest.raises(ValueError, match="W <= 2"):
        FusedConfig("arf", 4).validate()
    with pytest.raises(ValueError, match="output dtype"):
        FusedConfig("arf", 2, acc="f32").validate()
    assert FusedConfig("arf", 1).n_comm == 0 and FusedConfig("arf", 2).n_comm == 16
    for Mc, N in ((1000, 1000), (4096, 520), (64, 8192)):
        f = FusedConfig("arf", 2)
        c = f.gemm_cfg()
        orders = [tile_order(f, r, Mc, N) for r in range(2)]
        assert orders[0] == orders[1]
        num_m, num_n = -(-2 * Mc // c.bm), -(-N // c.bn)
        assert sorted((m, n) for _, m, n in orders[0]) == [(m, n) for m in range(num_m)
                                                          for n in range(num_n)]
        G = -(-num_m // c.group_m)
        for b in range(G):
            sent = sum(c.consumers for _, m, _ in orders[0] if m // c.group_m == b)
            want = c.consumers * min(c.group_m, num_m - b * c.group_m) * num_n
            assert sent == want, (Mc, N, b)


def test_arf_world_takes_a_fresh_output(fake_launch):
    """arf's world: a symmetric staging of the full product, pads for 2G + W slots, the
    grid over the full product's tiles plus the reducers, C into the caller's tensor."""
    from pkc.codegen.hopper.fused import FusedWorld, ag_row_blocks

    W, Mc, N, K = 2, 256, 512, 128
    peers = _FakePeers(W, range(W))
    f = FusedConfig("arf", W, comm_ctas=8)
    w = FusedWorld(f, Mc, N, K, peers=peers)
    c = f.gemm_cfg()
    tiles = -(-W * Mc // c.bm) * -(-N // c.bn)
    assert w.grid == min(64 - 8, tiles) + 8
    assert w.pads.tensors[0].numel() >= 2 * ag_row_blocks(f, W * Mc) + W
    assert tuple(w.stage[0].shape) == (W * Mc, N)
    a = [torch.randn(W * Mc, K).to(torch.bfloat16) for _ in range(W)]
    b = [torch.randn(N, K).to(torch.bfloat16) for _ in range(W)]
    fresh = {r: torch.empty(W * Mc, N, dtype=torch.bfloat16) for r in range(W)}
    outs = w.run(a, b, outs=fresh)
    assert outs[0] is fresh[0] and outs[1] is fresh[1] and w.epoch == 1
    assert ("bf16", [N, W * Mc], [c.epi_width, 64], 2 * c.epi_width) in fake_launch.maps
    with pytest.raises(ValueError, match="out must be"):
        w.run(a, b, outs={r: torch.empty(Mc, N, dtype=torch.bfloat16) for r in range(W)})
    with pytest.raises(ValueError, match="only the all-gather, arf"):
        FusedWorld(FusedConfig("rs", W), Mc, N, K, peers=peers).run(
            a, b, outs=fresh)


def test_ar_out_validates_and_binds_the_callers_output(fake_launch):
    """ar with out=True: W = 2 only; its world's default output is a local buffer apart
    from the accumulator; a caller's output gets its own 3-d map (tmC) and pointer."""
    from pkc.codegen.hopper.fused import FusedWorld

    for bad in (FusedConfig("ar", 4, out=True), FusedConfig("ar", 1, out=True),
                FusedConfig("ag", 2, out=True)):
        with pytest.raises(ValueError, match="out .* is an ar / rs option at W = 2"):
            bad.validate()
    W, Mc, N, K = 2, 256, 512, 128
    f = FusedConfig("ar", W, out=True)
    assert f.gemm_cfg().extra_bars == 2 * f.gemm.consumers and f.kernel_name.endswith(
        "_out" + f.kernel_name.split("_out")[1])
    w = FusedWorld(f, Mc, N, K, peers=_FakePeers(W, range(W)))
    assert w.out[0].data_ptr() != w.acc[0].data_ptr() and tuple(w.out[0].shape) == (W * Mc, N)
    a = [torch.randn(W * Mc, K).to(torch.bfloat16) for _ in range(W)]
    b = [torch.randn(N, K).to(torch.bfloat16) for _ in range(W)]
    fresh = {r: torch.empty(W * Mc, N, dtype=torch.bfloat16) for r in range(W)}
    outs = w.run(a, b, outs=fresh)
    assert outs[0] is fresh[0] and outs[1] is fresh[1]
    c = f.gemm_cfg()
    # the output's map: [N, Mc, W] in pieces of 64 rows, as the accumulators'
    assert ("bf16", [N, Mc, W], [c.epi_width, 64, 1], 2 * c.epi_width) in fake_launch.maps
    with pytest.raises(ValueError, match="out must be"):
        w.run(a, b, outs={r: torch.empty(Mc, N, dtype=torch.bfloat16) for r in range(W)})


def test_rs_out_world_stages_by_parity_and_binds_the_output(fake_launch):
    """rs with out=True: a symmetric staging of two [Mc, N] halves (epoch parity) with 3-d
    maps, a local [Mc, N] output; a caller's output gets a 2-d map; f32 accumulators and
    W != 2 are refused."""
    from pkc.codegen.hopper.fused import FusedWorld

    for bad in (FusedConfig("rs", 4, out=True), FusedConfig("rs", 2, out=True, acc="f32")):
        with pytest.raises(ValueError, match="out"):
            bad.validate()
    W, Mc, N, K = 2, 256, 512, 128
    f = FusedConfig("rs", W, out=True)
    w = FusedWorld(f, Mc, N, K, peers=_FakePeers(W, range(W)))
    c = f.gemm_cfg()
    assert tuple(w.acc[0].shape) == (2 * Mc, N) and tuple(w.out[0].shape) == (Mc, N)
    assert ("bf16", [N, Mc, 2], [c.epi_width, 64, 1], 2 * c.epi_width) in fake_launch.maps
    a = [torch.randn(W * Mc, K).to(torch.bfloat16) for _ in range(W)]
    b = [torch.randn(N, K).to(torch.bfloat16) for _ in range(W)]
    fresh = {r: torch.empty(Mc, N, dtype=torch.bfloat16) for r in range(W)}
    outs = w.run(a, b, outs=fresh)
    assert outs[0] is fresh[0] and outs[1] is fresh[1]
    assert ("bf16", [N, Mc], [c.epi_width, 64], 2 * c.epi_width) in fake_launch.maps
    with pytest.raises(ValueError, match="out must be"):
        w.run(a, b, outs={r: torch.empty(W * Mc, N, dtype=torch.bfloat16) for r in range(W)})
