"""The GEMM's tuning space and table: what a tile configuration is, which variants exist,
and the rule that picks one for a shape without measuring.

Where the figures come from: the efficiencies of ``AUTO_CANDIDATES`` are the measured
TFLOP/s of each variant relative to 128x256 on one H200 (docs/PERF_NOTES.md, issue 6,
run v3, benchmarks/results/h200_2026-11-29/); the register and shared-memory limits are
sm_90's (CUDA programming guide, compute capability 9.0).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pkc.kinds import Kind

BK = 64                   # elements of K per stage: 128 bytes of 16-bit data = one swizzle row
ROW_BYTES = 128
# 8-bit float operands (pk.scaled_matmul): a stage row is still 128 bytes, i.e. 128
# elements of K (GemmConfig.bk)
FP8_TYPES = ("e4m3", "e5m2")
SMEM_LIMIT = 232448       # max dynamic shared memory per block on sm_90 (227 KiB)
MAX_REGS = 65536          # registers per SM


def _desc_hi(lbo: int, sbo: int) -> int:
    """High bits of a wgmma shared-memory descriptor, 128-byte swizzle (start address added
    per use): bits 16-29 LBO >> 4, 32-45 SBO >> 4, 62-63 = 1 (128B swizzle)."""
    return (1 << 62) | (((sbo >> 4) & 0x3FFF) << 32) | (((lbo >> 4) & 0x3FFF) << 16)


# K-major operand, 128B swizzle: rows of 128 bytes, 8-row core groups 1024 bytes apart (SBO);
# LBO is unused for swizzled K-major layouts (1 by convention).
DESC_HI_KMAJOR = _desc_hi(16, 1024)
# N-major B (b_layout="kn"): 64-column blocks of 64 K-rows x 128 bytes = 8192 bytes apart
# (LBO, the MN repeat); 8-row K groups 1024 bytes apart (SBO).
DESC_HI_NMAJOR = _desc_hi(8192, 1024)

_SWIZZLE_FOR_ROW_BYTES = {128: 3, 64: 2, 32: 1}   # log2(swizzle bytes / 16)


class BLayout(Kind):
    """How a GEMM's B operand is given (``pk.plan.b_layout``)."""

    NK = "nk"    # [N, K]: K contiguous (a transposed weight read in place)
    KN = "kn"    # [K, N]: N contiguous


class Epilogue(Kind):
    """How a GEMM's consumers store C (``pk.plan.epilogue``)."""

    TMA = "tma"          # 64 x w pieces through swizzled shared memory, TMA stores
    GLOBAL = "global"    # straight from the registers to global memory


def gemm_kinds(cfg) -> None:
    """Converts a (frozen) tile configuration's ``b_layout`` and ``epilogue`` to members
    once (a ValueError naming the bad value and the valid ones)."""
    object.__setattr__(cfg, "b_layout", BLayout.parse(cfg.b_layout, "GEMM b_layout"))
    object.__setattr__(cfg, "epilogue", Epilogue.parse(cfg.epilogue, "GEMM epilogue"))


class StageBytes:
    """The operand types and the bytes one pipeline stage holds (a ``bm`` x ``bk`` tile of A,
    ``bn`` x ``bk`` of B), for every GEMM tile configuration (Hopper's and the tensor-memory
    one)."""

    bm: int
    bn: int
    dtype: str
    a_type: str
    b_type: str

    @property
    def fp8(self) -> bool:
        """8-bit float operands (a scaled GEMM: its epilogue applies the scales)."""
        return self.a_type in FP8_TYPES

    @property
    def in_types(self) -> tuple[str, str]:
        """(A's, B's) element types."""
        return (self.a_type or self.dtype, self.b_type or self.a_type or self.dtype)

    @property
    def bk(self) -> int:
        """Elements of K per stage: one 128-byte row (64 of 16 bits, 128 of 8)."""
        return 128 if self.fp8 else BK

    @property
    def a_stage_bytes(self) -> int:
        return self.bm * ROW_BYTES

    @property
    def b_stage_bytes(self) -> int:
        return self.bn * ROW_BYTES

    @property
    def stage_bytes(self) -> int:
        return self.a_stage_bytes + self.b_stage_bytes


@dataclass(frozen=True)
class GemmConfig(StageBytes):
    """One GEMM kernel variant. ``bm = consumers x (64 or 128)``; ``bn`` a multiple of 8
    up to 256 (of 64 for ``b_layout="kn"``)."""

    bm: int = 128
    bn: int = 256
    stages: int = 4
    consumers: int = 2
    dtype: str = "bf16"            # "bf16" | "f16" (inputs and output; fp8: the output)
    a_type: str = ""               # A's elements where they differ from dtype: "e4m3" | "e5m2"
    b_type: str = ""               # B's (fp8: both set, both 8-bit; B read as [N, K])
    b_layout: BLayout = BLayout.NK
    epilogue: Epilogue = Epilogue.TMA
    group_m: int = 8               # row-blocks per rasterization group
    cluster_m: int = 1             # 1, or 2: CTA pairs share (multicast) the B tile
    epi_w: int = 0                 # columns per TMA-store box (0: 64, 32 or 16 from bn)
    epi_bufs: int = 2              # staging buffers per consumer for the TMA store
    extra_bars: int = 0            # mbarriers (count 1) after the stages' for fused epilogues
    timeout_ns: int = 20_000_000_000   # bounded mbarrier waits: trap after this (0: never)
    producer_regs: int = 40
    consumer_regs: int = 0         # 0: as many as fit
    name: str = ""
    # fp8: each tile's epilogue scales loaded into registers before its main loop
    # (pks.scale_prefetch) instead of from global memory per epilogue piece
    scale_prefetch: bool = True
    # the two consumer warpgroups take alternate tiles of bm x bn each (ping-pong: one's
    # epilogue runs while the other's MMAs do) instead of sharing one tile's rows
    pingpong: bool = False

    # the first warpgroup of the epilogue's role (the consumers; warpgroup 0 produces)
    epilogue_wg = 1

    def __post_init__(self):
        gemm_kinds(self)

    # ---- derived -------------------------------------------------------------------
    @property
    def wg_m(self) -> int:
        return self.bm if self.pingpong else self.bm // self.consumers

    @property
    def m_slices(self) -> int:
        return self.wg_m // 64

    @property
    def threads(self) -> int:
        return 128 * (1 + self.consumers)

    @property
    def epi_width(self) -> int:
        if self.epi_w:
            return self.epi_w
        for w in (64, 32, 16):
            if self.bn % w == 0:
                return w
        return 0

    @property
    def epi_buf_bytes(self) -> int:
        return 64 * self.epi_width * 2

    @property
    def epi_bytes(self) -> int:
        if self.epilogue is not Epilogue.TMA:
            return 0
        return self.consumers * self.epi_bufs * self.epi_buf_bytes

    @property
    def bar_offset(self) -> int:
        return self.stages * self.stage_bytes + self.epi_bytes

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory the launch must ask for (1024 of slack for alignment)."""
        order = 2 if self.pingpong else 0      # the ping-pong pair's order barriers
        return self.bar_offset + (2 * self.stages + self.extra_bars + order) * 8 + 1024

    @property
    def entry_regs(self) -> int:
        return min(255, (MAX_REGS // self.threads) // 8 * 8)

    @property
    def consumer_reg_target(self) -> int:
        if self.consumer_regs:
            return self.consumer_regs
        budget = (MAX_REGS - 128 * self.producer_regs) // (128 * self.consumers)
        return min(256, budget // 8 * 8)

    @property
    def acc_regs(self) -> int:
        return self.m_slices * self.bn // 2

    @property
    def kernel_name(self) -> str:
        if self.name:
            return self.name
        types = f"{self.a_type}{self.b_type}_" if self.fp8 else ""
        return (f"pkc_gemm_sm90a_{types}{self.dtype}_{self.bm}x{self.bn}x{self.bk}_s{self.stages}"
                f"_c{self.consumers}_{self.b_layout}_{self.epilogue}_g{self.group_m}"
                f"_cl{self.cluster_m}{'_pp' if self.pingpong else ''}")

    def tag(self) -> str:
        """Short human label."""
        return (f"{self.bm}x{self.bn} s{self.stages} {self.b_layout} {self.epilogue}"
                f"{' ' + self.a_type + 'x' + self.b_type if self.fp8 else ''}"
                f"{' cl2' if self.cluster_m == 2 else ''} g{self.group_m}"
                f"{' pingpong' if self.pingpong else ''}")

    def with_(self, **kw) -> "GemmConfig":
        return replace(self, **kw)

    def validate(self) -> None:
        def need(cond: bool, msg: str) -> None:
            if not cond:
                raise ValueError(f"GemmConfig {self.tag()}: {msg}")
        need(self.dtype in ("bf16", "f16"), f"dtype {self.dtype!r} not bf16/f16")
        if self.a_type or self.b_type:
            need(self.a_type in FP8_TYPES and self.b_type in FP8_TYPES,
                 f"operand types {self.a_type!r} x {self.b_type!r}: both e4m3 / e5m2 (fp8)")
            need(self.b_layout is BLayout.NK,
                 "fp8 needs B as [N, K] (wgmma's 8-bit operands are K-major)")
        need(self.consumers in (1, 2), "consumers must be 1 or 2")
        need(self.bm % self.consumers == 0 and self.wg_m in (64, 128),
             "bm / consumers must be 64 or 128")
        need(self.bn % 8 == 0 and 8 <= self.bn <= 256, "bn must be a multiple of 8 in 8..256")
        need(self.acc_regs <= 128, f"{self.acc_regs} accumulator registers per thread (> 128)")
        need(self.stages >= 2, "stages >= 2")
        need(self.cluster_m in (1, 2), "cluster_m must be 1 or 2")
        if self.b_layout is BLayout.KN:
            need(self.bn % (64 * self.cluster_m) == 0,
                 "b_layout kn needs bn a multiple of 64 (128 with cluster_m=2)")
        if self.cluster_m == 2 and self.b_layout is BLayout.NK:
            need((self.bn // 2) % 8 == 0, "cluster_m=2 needs bn/2 a multiple of 8")
        if self.epilogue is Epilogue.TMA:
            need(self.epi_width in (16, 32, 64) and self.bn % self.epi_width == 0,
                 "tma epilogue needs bn a multiple of 16 and epi_w in 16/32/64")
            need(self.epi_bufs in (1, 2), "epi_bufs must be 1 or 2")
        need(self.group_m >= 1, "group_m >= 1")
        if self.pingpong:
            pieces = self.m_slices * (self.bn // max(self.epi_width, 1))
            need(self.consumers == 2 and self.epilogue is Epilogue.TMA
                 and (self.epi_bufs == 1 or pieces % 2 == 0),
                 "pingpong needs 2 consumers and the TMA epilogue with an even number of "
                 "pieces per tile (each warpgroup's staging buffers end a tile as they began)")
        need(self.smem_bytes <= SMEM_LIMIT,
             f"needs {self.smem_bytes} bytes of shared memory (> {SMEM_LIMIT})")
        if self.consumers == 2:
            need(self.consumer_reg_target >= self.entry_regs,
                 "consumer register target below the entry allocation")


# A few named variants: the candidates that the launcher picks from and the tests check.
VARIANTS: dict[str, GemmConfig] = {
    "128x256_s4_tma": GemmConfig(bm=128, bn=256, stages=4, epilogue=Epilogue.TMA),
    "128x256_s3_global": GemmConfig(bm=128, bn=256, stages=3, epilogue=Epilogue.GLOBAL),
    "128x256_s4_global": GemmConfig(bm=128, bn=256, stages=4, epilogue=Epilogue.GLOBAL),
    "128x256_s4_cl2": GemmConfig(bm=128, bn=256, stages=4, epilogue=Epilogue.TMA, cluster_m=2),
    "128x128_s6_tma": GemmConfig(bm=128, bn=128, stages=6, epilogue=Epilogue.TMA),
    "256x128_s4_tma": GemmConfig(bm=256, bn=128, stages=4, epilogue=Epilogue.TMA),
    "128x192_s4_tma": GemmConfig(bm=128, bn=192, stages=4, epilogue=Epilogue.TMA),
    "128x160_s5_tma": GemmConfig(bm=128, bn=160, stages=5, epilogue=Epilogue.TMA),
    # 224 columns: a whole number of tiles in 3584 (Llama-3 70B's gate / up per rank at
    # TP = 8), where 128 x 160 leaves a partial last wave (docs/PERF_NOTES.md (t), (u))
    "128x224_s4_tma": GemmConfig(bm=128, bn=224, stages=4, epilogue=Epilogue.TMA),
    "128x256_s4_kn": GemmConfig(bm=128, bn=256, stages=4, epilogue=Epilogue.TMA,
                                b_layout=BLayout.KN),
    "64x256_c1_s5": GemmConfig(bm=64, bn=256, stages=5, consumers=1, epilogue=Epilogue.TMA),
    "128x256_s4_g16": GemmConfig(bm=128, bn=256, stages=4, epilogue=Epilogue.TMA, group_m=16),
    "128x192_s4_cl2": GemmConfig(bm=128, bn=192, stages=4, epilogue=Epilogue.TMA, cluster_m=2),
    "128x128_s6_cl2": GemmConfig(bm=128, bn=128, stages=6, epilogue=Epilogue.TMA, cluster_m=2),
    "128x160_s5_cl2": GemmConfig(bm=128, bn=160, stages=5, epilogue=Epilogue.TMA, cluster_m=2),
    "256x128_s4_cl2": GemmConfig(bm=256, bn=128, stages=4, epilogue=Epilogue.TMA, cluster_m=2),
    # ping-pong: each consumer warpgroup a whole bm x bn tile, alternating
    "128x128_pp_s6": GemmConfig(bm=128, bn=128, stages=6, pingpong=True),
    "128x128_pp_cl2": GemmConfig(bm=128, bn=128, stages=6, pingpong=True, cluster_m=2),
    "64x256_pp_s4": GemmConfig(bm=64, bn=256, stages=4, pingpong=True),
}


# Candidates of choose_config and their rate on a big square problem relative to 128x256
# (measured on the H200, docs/PERF_NOTES.md v1; 128 x 224: 2026-12-02 (u), 8192^3 within
# 1% of 128 x 256): a tile's cost is its area over this.
AUTO_CANDIDATES: list[tuple[GemmConfig, float]] = [
    (GemmConfig(bm=128, bn=256, stages=4), 1.00),
    (GemmConfig(bm=128, bn=192, stages=4), 0.99),
    (GemmConfig(bm=256, bn=128, stages=4), 0.99),
    (GemmConfig(bm=128, bn=160, stages=5), 0.96),
    (GemmConfig(bm=128, bn=128, stages=6), 0.94),
    (GemmConfig(bm=64, bn=256, stages=5, consumers=1), 0.92),
    # last: the earlier tiles keep the model's near-ties (8192x1280x8192: 160 columns
    # measured 1-3% faster than 224, journal (u))
    (GemmConfig(bm=128, bn=224, stages=4), 1.00),
]


# fp8 (schedule-matmul's plain scaled GEMM), two rules before the table's pick:
# * the cooperative 128 x 256 tile with CTA pairs sharing B by multicast where every CTA has
#   MULTICAST_MIN_TILES of its tiles or more: of the tiles measured it moves the fewest
#   operand bytes per FLOP (16 KB per 128^3 MMA step against 24 KB without the pair and
#   32 KB for 128 x 128), which is what sets the speed when the board runs at its power
#   limit, as it does under a long fp8 GEMM (docs/PERF_NOTES.md 2026-12-02 (r): 690 W,
#   throttle reason "SW power cap"; 0.98-1.01x cuBLASLt's time back to back at 8192^3,
#   16384x8192x4096, 4096x28672x8192 (15-31 tiles a CTA), where ping-pong 128 x 128 was
#   1.04-1.07x);
# * else the ping-pong 128 x 128 tile where every CTA has at least PINGPONG_MIN_KBLOCKS
#   k-blocks of work (its tiles x K / 128): 8192x1280x8192 (2.4 tiles of 128 x 256 a CTA,
#   320 k-blocks): 1.00x cuBLASLt back to back and in bursts (journal (p), (r)); 4096^3
#   (256 k-blocks) and one-tile shapes stay with the table (journal (p)).
# The fused fp8 GEMM + reduce-scatter and all-gather + GEMM along rows take the same CTA
# pairs (pkc.passes.fused_schedule.fp8_fused_config, journal (s)), with ping-pong consumers
# on them (PINGPONG_PAIRS_FP8) where a tile's main loop is at most
# PAIRS_PINGPONG_MAX_KBLOCKS k-blocks: there the cooperative tile's exposed epilogue, with
# the collective's stores in it, is the largest share of a tile's time, and ping-pong
# hides it under the other warpgroup's MMAs (faster and steadier at K = 4096, level at
# K = 8192: journal 2026-12-02 (t)). The other fused kinds keep the table's tile.
MULTICAST_FP8 = GemmConfig(bm=128, bn=256, stages=4, cluster_m=2)
MULTICAST_MIN_TILES = 8
PINGPONG_FP8 = GemmConfig(bm=128, bn=128, stages=6, pingpong=True)
PINGPONG_MIN_KBLOCKS = 300
PINGPONG_PAIRS_FP8 = GemmConfig(bm=128, bn=128, stages=6, pingpong=True, cluster_m=2)
PAIRS_PINGPONG_MAX_KBLOCKS = 32


def multicast_tiles(M: int, N: int, num_sms: int = 132) -> int:
    """Tiles of :data:`MULTICAST_FP8` the busiest CTA works through."""
    c = MULTICAST_FP8
    return -(-(-(-M // c.bm) * -(-N // c.bn)) // num_sms)


def pingpong_kblocks(M: int, N: int, K: int, num_sms: int = 132) -> int:
    """k-blocks of the ping-pong fp8 tile a CTA works through (the busiest CTA's)."""
    c = PINGPONG_FP8
    tiles = -(-M // c.bm) * -(-N // c.bn)
    return -(-tiles // num_sms) * -(-K // 128)


def choose_config(M: int, N: int, K: int, dtype: str = "bf16",
                  b_layout: BLayout | str = BLayout.NK, num_sms: int = 132,
                  in_types: tuple[str, str] = ("", ""), pingpong: bool = False) -> GemmConfig:
    """A tile shape for (M, N, K) without measuring: the persistent kernel's time is about
    (waves of tiles) x (time of one tile), one tile's time about its area over the tile
    shape's efficiency; the biggest tile wins ties (within 2%). ``in_types``: fp8 operand
    types (a scaled GEMM); its tiles come from the same table: a stage holds the same 128
    bytes per row of A and B as a 16-bit one (twice the K), so the shared-memory and
    register budgets are the same; the efficiencies are the bf16 measurements (issue 6):
    on the H200 the fp8 pick at 8192^3 (128 x 256) was within 1.3% of the best of the five
    tiles measured in fp8 (docs/PERF_NOTES.md 2026-12-02 (e)). ``pingpong`` (fp8 only, the
    plain GEMM's caller): the plain fp8 GEMM's own rules first (above
    :data:`MULTICAST_FP8`): CTA pairs where every CTA has many tiles, else the ping-pong
    tile where one warpgroup's epilogue can hide under the other's MMAs."""
    b_layout = BLayout.parse(b_layout, "choose_config's b_layout")
    if pingpong and in_types[0] in FP8_TYPES and b_layout is BLayout.NK:
        types = {"dtype": dtype, "a_type": in_types[0], "b_type": in_types[1]}
        if multicast_tiles(M, N, num_sms) >= MULTICAST_MIN_TILES:
            return MULTICAST_FP8.with_(**types)
        if pingpong_kblocks(M, N, K, num_sms) >= PINGPONG_MIN_KBLOCKS:
            return PINGPONG_FP8.with_(**types)
    best, best_cost = None, None
    for c, eff in AUTO_CANDIDATES:
        if b_layout is BLayout.KN and c.bn % 64:
            continue
        tiles = -(-M // c.bm) * -(-N // c.bn)
        waves = -(-tiles // num_sms)
        cost = waves * c.bm * c.bn / eff
        if best_cost is None or cost < best_cost * 0.98:
            best, best_cost = c, cost
    return best.with_(dtype=dtype, b_layout=b_layout, a_type=in_types[0], b_type=in_types[1])


def check_variant(owner: str, variant: str) -> None:
    """``variant`` is empty (let the tuning table choose) or a name of :data:`VARIANTS`;
    otherwise a ValueError naming ``owner`` (the pass) and the known names."""
    if variant and variant not in VARIANTS:
        raise ValueError(f"{owner}: unknown variant {variant!r}; known: {', '.join(VARIANTS)}")
