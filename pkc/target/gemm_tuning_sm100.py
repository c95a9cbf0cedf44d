"""The GEMM's tile configuration for a CTA-shared (tensor-memory) accumulator, as on
Blackwell (sm_100a): what it is and the rule that picks one for a shape.

Nothing here was measured: no Blackwell GPU has run these kernels. The rule is the
structure the sm_100 GEMMs of CUTLASS, DeepGEMM and ThunderKittens use (one 128-row MMA
tile per CTA, N up to 256, two accumulators in tensor memory so the epilogue of one tile
overlaps the MMAs of the next, as many operand stages as shared memory holds), with the
tile width chosen by waves of tiles over the SMs (fewer partial waves first, then the wider
tile, which reads A fewer times).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pkc.kinds import Kind
from pkc.target.gemm_tuning import (BK, FP8_TYPES, ROW_BYTES, SMEM_LIMIT, BLayout, Epilogue,
                                    StageBytes, gemm_kinds)

TMEM_COLUMNS = 512
MAX_STAGES = 8


class PairCluster(Kind):
    """The cluster of a CTA-pair GEMM (``pk.plan.cluster_shape``), in 128-row blocks x
    column blocks: one pair, or two pairs whose tiles share an operand that the pairs'
    CTAs load in halves and TMA-multicast to each other (``pk.plan.multicast``)."""

    X2 = "2x1"       # one pair: a 256 x bn tile, nothing multicast
    A2X2 = "2x2"     # two pairs side by side along N: the same 256 rows of A, multicast
    B4X1 = "4x1"     # two pairs one above the other along M: the same bn rows of B, multicast

    @property
    def size(self) -> int:
        return 2 if self is PairCluster.X2 else 4

    @property
    def cluster_n(self) -> int:
        """Column blocks of the cluster (the pairs side by side)."""
        return 2 if self is PairCluster.A2X2 else 1

    @property
    def operand(self) -> str:
        """The multicast operand: "a", "b" or "" (none)."""
        return {PairCluster.A2X2: "a", PairCluster.B4X1: "b"}.get(self, "")


@dataclass(frozen=True)
class TmemGemmConfig(StageBytes):
    """One variant: ``bm`` = 128 rows (tensor-memory lanes) x ``bn`` columns (a multiple of
    16 up to 256; of 64 for ``b_layout="kn"``), ``stages`` operand stages, ``acc_bufs``
    accumulators of ``bn`` columns each in tensor memory. Warpgroups: 0 the TMA producer
    (one thread), 1 the MMA issuer (one thread), 2 the epilogue."""

    bn: int = 256
    stages: int = 4
    dtype: str = "bf16"
    b_layout: BLayout = BLayout.NK
    group_m: int = 8
    acc_bufs: int = 2
    epilogue: Epilogue = Epilogue.TMA
    epi_bufs: int = 2              # staging buffers of the TMA epilogue
    producer_regs: int = 40
    timeout_ns: int = 20_000_000_000
    bm: int = 128
    # a CTA pair (cta_group::2): a cluster of 2 CTAs works a 256 x bn tile, each holding
    # 128 rows of A and bn / 2 rows of B; one MMA thread of the even CTA issues M = 256
    # MMAs reading both CTAs' shared memory into both tensor memories
    pair: bool = False
    # cluster launch control: one CTA per tile is launched and the running ones take the
    # tiles of CTAs not started yet (a dynamic persistent scheduler), instead of the
    # static tile += grid loop
    clc: bool = False
    # a pair's cluster: one pair, or two pairs multicasting the operand their tiles share
    pair_cluster: PairCluster = PairCluster.X2

    # fp8 operands (a scaled GEMM, tcgen05 kind::f8f6f4): A's and B's types, "e4m3" /
    # "e5m2"; dtype is then the output's. A stage row is still 128 bytes (bk = 128)
    a_type: str = ""
    b_type: str = ""

    threads = 384

    def __post_init__(self):
        gemm_kinds(self)
        object.__setattr__(self, "pair_cluster",
                           PairCluster.parse(self.pair_cluster, "GEMM pair_cluster"))

    @property
    def epi_width(self) -> int:
        """Columns per TMA-store box: one swizzle span (64, 32 or 16 of 16-bit data)."""
        for w in (64, 32, 16):
            if self.bn % w == 0:
                return w
        return 0

    @property
    def epi_bytes(self) -> int:
        return self.epi_bufs * 64 * self.epi_width * 2 if self.epilogue is Epilogue.TMA else 0

    @property
    def tmem_columns(self) -> int:
        return self.acc_bufs * self.bn

    def with_(self, **kw) -> "TmemGemmConfig":
        return replace(self, **kw)

    @property
    def b_stage_bytes(self) -> int:
        """B rows of a stage: bn, or bn / 2 in each CTA of a pair."""
        return (self.bn // 2 if self.pair else self.bn) * ROW_BYTES

    @property
    def cluster(self) -> int:
        return self.pair_cluster.size if self.pair else 1

    @property
    def multicast(self) -> str:
        """The operand the pairs of the cluster multicast ("" for none)."""
        return self.pair_cluster.operand if self.pair else ""

    def tag(self) -> str:
        epi = ("" if self.epilogue is Epilogue.TMA else "_global") + ("_clc" if self.clc else "")
        epi += f"_{self.a_type}x{self.b_type}" if self.fp8 else ""
        if self.pair:
            mc = (f"_c{self.pair_cluster.value}{self.multicast}"
                  if self.pair_cluster is not PairCluster.X2 else "")
            return f"{2 * self.bm}x{self.bn}_pair{mc}_s{self.stages}_tmem{self.acc_bufs}{epi}"
        return f"{self.bm}x{self.bn}_s{self.stages}_tmem{self.acc_bufs}{epi}"

    def validate(self) -> None:
        if (self.a_type or self.b_type) and not (self.a_type in FP8_TYPES
                                                 and self.b_type in FP8_TYPES
                                                 and self.b_layout is BLayout.NK):
            raise ValueError(f"tmem GEMM {self.tag()}: operand types {self.a_type!r} x "
                             f"{self.b_type!r}: both e4m3 / e5m2 (fp8), B read as [N, K] "
                             "(tcgen05 kind::f8f6f4 operands are built K-major)")
        if self.pair and (self.b_layout is not BLayout.NK or self.bn % 32):
            raise ValueError(f"tmem GEMM {self.tag()}: a CTA pair reads B as [N, K] with bn a "
                             "multiple of 32 (bn / 2 rows of B in each CTA)")
        if self.pair_cluster is not PairCluster.X2 and not self.pair:
            raise ValueError(f"tmem GEMM {self.tag()}: cluster {self.pair_cluster.value} is a "
                             "cluster of CTA pairs (pair = True)")
        step = 64 if self.b_layout is BLayout.KN else 16
        if self.bm != 128 or self.bn % step or not step <= self.bn <= 256:
            raise ValueError(f"tmem GEMM {self.tag()}: bm = 128 and bn a multiple of {step} "
                             f"up to 256 ({self.b_layout} B)")
        if self.tmem_columns > TMEM_COLUMNS:
            raise ValueError(f"tmem GEMM {self.tag()}: {self.tmem_columns} tensor-memory columns "
                             f"(at most {TMEM_COLUMNS})")
        need = (self.stages * self.stage_bytes + self.epi_bytes + 1024 + 16
                + 8 * (2 * self.stages + 2 * self.acc_bufs))
        if need > SMEM_LIMIT:
            raise ValueError(f"tmem GEMM {self.tag()}: {need} bytes of shared memory "
                             f"(limit {SMEM_LIMIT})")


def stages_for(bn: int, epi_bytes: int = 0, pair: bool = False) -> int:
    """As many stages as fit beside the epilogue's buffers (barriers and alignment slack
    aside); a pair's CTA holds half of B's rows."""
    per = (128 + (bn // 2 if pair else bn)) * ROW_BYTES
    return max(2, min(MAX_STAGES, (SMEM_LIMIT - 2048 - epi_bytes) // per))


def choose_tmem_config(M: int, N: int, K: int, dtype: str, b_layout: BLayout | str,
                       num_sms: int, in_types: tuple[str, str] = ("", "")) -> TmemGemmConfig:
    """The tile for ``M x N x K`` on ``num_sms`` SMs: fewest waves of tiles, then the widest
    tile (BK = 64 elements of K per stage). ``in_types``: fp8 operand types (a scaled GEMM:
    the same choice, a stage's 128-byte rows then hold 128 elements of K)."""
    del K  # every K works: the last stage's box is zero-filled by TMA
    b_layout = BLayout.parse(b_layout, "choose_tmem_config's b_layout")
    step = 64 if b_layout is BLayout.KN else 16
    best = None
    for bn in (256, 128, 64):
        if bn % step:
            continue
        tiles = -(-M // 128) * -(-N // bn)
        waves = -(-tiles // num_sms)
        key = (waves * bn, -bn)       # work per SM in column units, then wider
        if best is None or key < best[0]:
            best = (key, bn)
    bn = best[1]
    num_m, num_n = -(-M // 128), -(-N // bn)
    # a CTA pair halves the B bytes each CTA loads for the same tile: taken (unmeasured)
    # for [N, K] B with at least PAIR_MIN_ROW_BLOCKS row blocks (so that the odd CTA's
    # rows are rarely past M) when the pairs' waves are no more than single CTAs' waves
    pair = (b_layout is BLayout.NK and bn % 32 == 0 and num_m >= PAIR_MIN_ROW_BLOCKS
            and -(-(-(-num_m // 2) * num_n) // max(1, num_sms // 2))
            <= -(-(num_m * num_n) // num_sms))
    # more (cluster) tiles than fit at once: the tiles a CTA (pair) takes after its first
    # come from cluster launch control, so one that starts late or an SM another kernel
    # holds does not leave a fixed share of the tiles to the end (unmeasured)
    clc = (-(-num_m // 2) * num_n > num_sms // 2) if pair else num_m * num_n > num_sms
    # two pairs multicasting a shared operand: taken for 16-bit operands; fp8 stays on one
    # pair by this rule (its two-pair kernel is built and checked when a config forces it,
    # tests/unit/test_sm100_fp8.py; neither choice is measured)
    pc = (choose_pair_cluster(num_m, num_n, bn, num_sms) if pair and not in_types[0]
          else PairCluster.X2)
    if pc is not PairCluster.X2:
        clc = -(-num_m // (pc.size // pc.cluster_n)) * -(-num_n // pc.cluster_n) \
            > num_sms // pc.size
    cfg = TmemGemmConfig(bn=bn, dtype=dtype, b_layout=b_layout, pair=pair, clc=clc,
                         pair_cluster=pc, a_type=in_types[0], b_type=in_types[1])
    cfg = cfg.with_(stages=stages_for(bn, cfg.epi_bytes, pair))
    cfg.validate()
    return cfg


PAIR_MIN_ROW_BLOCKS = 8
# a cluster of two pairs is taken when it leaves at most this share of its CTAs' tiles
# past the output (a block of 2x2 / 4x1 tiles that the grid does not fill) ...
MULTICAST_MAX_WASTE = 1 / 8
# ... and there is at least a full wave of such clusters (a GEMM that is operand-bandwidth
# bound, not one that has too few tiles to keep the SMs busy)
MULTICAST_MIN_WAVES = 1


def choose_pair_cluster(num_m: int, num_n: int, bn: int, num_sms: int) -> PairCluster:
    """The cluster of a pair GEMM with ``num_m`` 128-row blocks and ``num_n`` column blocks
    (unmeasured). Two pairs that share an operand load it once between them: each CTA's
    bytes per k-block fall from ``(128 + bn / 2)`` rows to ``(64 + bn / 2)`` with A multicast
    (2x2) or ``(128 + bn / 4)`` with B multicast (4x1), so the L2-to-SM traffic of the
    shared operand per SM halves. 2x2 saves more (64 rows against bn / 4 <= 64) and is
    preferred; either is taken only if the cluster blocks waste little and fill a wave."""
    best, best_key = PairCluster.X2, None
    for pc in (PairCluster.A2X2, PairCluster.B4X1):
        rows, cols = pc.size // pc.cluster_n, pc.cluster_n
        blocks = -(-num_m // rows) * -(-num_n // cols)
        waste = 1 - num_m * num_n / (blocks * pc.size)
        if waste > MULTICAST_MAX_WASTE or blocks * pc.size < MULTICAST_MIN_WAVES * num_sms:
            continue
        saved = 64 if pc is PairCluster.A2X2 else bn // 4
        key = (-saved, waste)
        if best_key is None or key < best_key:
            best, best_key = pc, key
    return best


def multicast_remark(cfg: TmemGemmConfig, M: int, N: int) -> str:
    """Why the cluster of two pairs (the remark's clause)."""
    pc = cfg.pair_cluster
    before = 128 + cfg.bn // 2
    after = 64 + cfg.bn // 2 if pc is PairCluster.A2X2 else 128 + cfg.bn // 4
    op = "A" if pc is PairCluster.A2X2 else "B"
    share = "rows of A" if pc is PairCluster.A2X2 else "columns of B"
    return (f"clusters of two pairs ({pc.value}, {op} multicast: the pairs share their "
            f"{share}, each CTA loads half of its share and TMA-multicasts it, so {op}'s "
            f"L2-to-SM traffic per SM halves: {before} -> {after} operand rows per CTA per "
            f"k-block; unmeasured), ")


__all__ = ["TmemGemmConfig", "choose_tmem_config", "stages_for", "BK", "PAIR_MIN_ROW_BLOCKS",
           "PairCluster", "choose_pair_cluster", "multicast_remark"]
