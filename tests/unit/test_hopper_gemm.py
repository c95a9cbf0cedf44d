"""The sm_90a GEMM generator, checked without a GPU: every variant assembles with
``ptxas -arch=sm_90a`` without spills or local memory, and its SASS shows the pipeline we
meant (HGMMA of the tile's shape, one full and one empty mbarrier per stage placed right
after ``stages x stage bytes`` of shared memory, the TMA loads and stores, setmaxnreg).
The SASS checks need ``cuobjdump`` (CUDA toolkit, or the ``nvidia-cuda-cuobjdump`` and
``nvidia-cuda-nvdisasm`` wheels) and are skipped where it is missing."""

from __future__ import annotations

import re

import pytest

from pkc.codegen.hopper import tools
from pkc.codegen.hopper.gemm import (VARIANTS, GemmConfig, GemmKernel, TileRegs,
                                     emit_gemm_ptx, tile_coords)

HAVE_PTXAS = tools.find_tool("ptxas") is not None
HAVE_CUOBJDUMP = HAVE_PTXAS and tools.find_tool("cuobjdump") is not None
needs_ptxas = pytest.mark.skipif(not HAVE_PTXAS, reason="ptxas not found")
needs_sass = pytest.mark.skipif(not HAVE_CUOBJDUMP, reason="cuobjdump not found")

CONFIGS = dict(VARIANTS)
CONFIGS["128x256_s4_f16"] = GemmConfig(bm=128, bn=256, stages=4, dtype="f16")
CONFIGS["128x128_kn_cl2_global"] = GemmConfig(bm=128, bn=128, stages=5, b_layout="kn",
                                              cluster_m=2, epilogue="global")
CONFIGS["128x96_s6_tma32"] = GemmConfig(bm=128, bn=96, stages=6)     # 32-column C boxes

_ASSEMBLED: dict[str, tools.Assembled] = {}


def _assembled(name: str) -> tools.Assembled:
    if name not in _ASSEMBLED:
        _ASSEMBLED[name] = tools.assemble(emit_gemm_ptx(CONFIGS[name]))
    return _ASSEMBLED[name]


def test_configs_validate_and_fit():
    for name, cfg in CONFIGS.items():
        cfg.validate()
        assert cfg.smem_bytes <= 232448, name
        assert cfg.stages >= 3, f"{name}: the pipeline must be at least 3 deep"


def test_bad_configs_are_rejected():
    with pytest.raises(ValueError, match="shared memory"):
        GemmConfig(bm=128, bn=256, stages=6).validate()
    with pytest.raises(ValueError, match="accumulator"):
        GemmConfig(bm=128, bn=256, consumers=1).validate()
    with pytest.raises(ValueError, match="kn"):
        GemmConfig(bn=160, b_layout="kn").validate()


def test_ptx_structure():
    cfg = CONFIGS["128x256_s4_tma"]
    ptx = emit_gemm_ptx(cfg)
    assert ".target sm_90a" in ptx
    assert f".entry {cfg.kernel_name}(" in ptx
    assert ptx.count(".param .align 64 .b8") == 3
    assert ptx.count("mbarrier.init.shared::cta.b64") == 2 * cfg.stages
    assert "setmaxnreg.dec.sync.aligned.u32 40;" in ptx
    assert "setmaxnreg.inc.sync.aligned.u32 232;" in ptx
    assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n256k16\.f32\.bf16\.bf16", ptx)
    assert "cp.async.bulk.tensor.2d.shared::cluster.global.tile" in ptx
    assert "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group" in ptx
    # the stage ring: expect_tx of one full stage, barriers after the stages
    assert f"expect_tx.release.cta.shared::cta.b64 _, [%pbar_full], {cfg.stage_bytes};" in ptx
    assert f"add.u32 %sbar, %sbase, {cfg.stages * cfg.stage_bytes + cfg.epi_bytes};" in ptx


@pytest.mark.parametrize("name", sorted(CONFIGS))
@needs_ptxas
def test_assembles_without_spills(name):
    a = _assembled(name)
    assert a.spill_stores == 0 and a.spill_loads == 0, a.log
    assert a.stack_bytes == 0, a.log
    assert not [w for w in a.warnings if "wgmma" in w.lower() or "setmaxnreg" in w.lower()], a.log
    cfg = CONFIGS[name]
    assert a.registers == cfg.entry_regs, a.log


@pytest.mark.parametrize("name", sorted(CONFIGS))
@needs_sass
def test_sass_pipeline_survived(name):
    cfg = CONFIGS[name]
    text = tools.sass(_assembled(name).cubin)
    assert tools.check_pipeline(cfg, text) == []


@needs_sass
def test_stage_check_catches_a_lost_stage():
    """A kernel that lowered to fewer stages than asked for must fail the check."""
    want = CONFIGS["128x256_s4_tma"]
    got = tools.sass(tools.assemble(emit_gemm_ptx(want.with_(stages=3))).cubin)
    problems = tools.check_pipeline(want, got)
    assert any("mbarrier inits" in p for p in problems)
    assert any("mbarriers at" in p for p in problems)


@needs_sass
def test_sass_details_128x256():
    cfg = CONFIGS["128x256_s4_tma"]
    s = tools.SassSummary.of(tools.sass(_assembled("128x256_s4_tma").cubin))
    assert all(h.startswith("HGMMA.64x256x16.F32.BF16") for h in s.hgmma)
    assert s.mbarrier_offsets[0] == cfg.stages * cfg.stage_bytes + cfg.epi_bytes


def test_hooks_replace_epilogue_and_add_params():
    class Fused(GemmKernel):
        def extra_params(self):
            return [f".param .u64 {self.cfg.kernel_name}_param_signal"]

        def emit_producer_tile_prologue(self, t: TileRegs):
            self.p.comment(f"HOOK producer tile {t.m_blk} {t.n_blk}")

        def emit_epilogue_tile(self, t: TileRegs):
            self.p.comment("HOOK put tile to peer")

    ptx = Fused(GemmConfig(epilogue="global")).emit()
    assert "_param_signal" in ptx
    assert "HOOK producer tile %pr_mblk %pr_nblk" in ptx
    assert "HOOK put tile to peer" in ptx
    assert "st.global" not in ptx


@pytest.mark.parametrize("cfg", [GemmConfig(), GemmConfig(bn=128, group_m=4),
                                 GemmConfig(cluster_m=2, group_m=3)])
@pytest.mark.parametrize("M,N", [(8192, 8192), (1000, 520), (128, 256), (4100, 1280)])
def test_rasterization_covers_every_tile_once(cfg, M, N):
    num_m, num_n = -(-M // cfg.bm), -(-N // cfg.bn)
    num_mc = -(-num_m // cfg.cluster_m)
    seen = set()
    for t in range(num_mc * num_n):
        for rank in range(cfg.cluster_m):
            mb, nb = tile_coords(cfg, t, rank, M, N)
            assert 0 <= nb < num_n
            seen.add((mb, nb))
    want = {(m, n) for m in range(num_mc * cfg.cluster_m) for n in range(num_n)}
    assert seen == want


@pytest.mark.parametrize("row_bytes,bits", [(128, 3), (64, 2), (32, 1)])
def test_epilogue_swizzle_matches_tma(row_bytes, bits):
    """The epilogue's smem address for (row, 16-byte chunk) equals TMA's swizzle
    Swizzle<bits,4,3> applied to the linear offset (what SWIZZLE_{row_bytes}B expects)."""
    def tma(addr):
        return addr ^ (((addr >> 7) & ((1 << bits) - 1)) << 4)

    for row in range(64):
        lin_row = row * row_bytes
        x = ((lin_row >> 7) & ((1 << bits) - 1)) << 4          # as emitted per thread
        for chunk in range(row_bytes // 16):
            for word in range(4):
                ours = lin_row + 4 * word + ((16 * chunk) ^ x)
                assert ours == tma(lin_row + 16 * chunk + 4 * word)
