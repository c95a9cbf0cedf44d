"""The check that the pipeline we meant survived ptxas: read the SASS of an assembled kernel
(``cuobjdump --dump-sass``) and compare it with what its tile configuration implies (HGMMA of
the right shape and count, one full and one empty mbarrier per stage at the expected
offsets, the TMA loads and stores per k-block and tile, setmaxnreg kept, no local memory),
and for the fused kernels their signalling too. For sm_100a: the tcgen05 GEMM
(:func:`check_sm100_gemm`: UTCHMMA, .2CTA where cta_group::2 is used, UTMALDG, LDTM, no
LDL / STL) and the scheduled collectives of either target (:func:`check_collective`).

Tools are looked up as ``PKC_<NAME>``, on PATH, in CUDA's usual places, then in the
``nvidia-cuda-*`` wheels (``nvidia/cu13/bin``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pkc.target.gemm_tuning import BK, BLayout, Epilogue, GemmConfig


def _wheel_bins() -> list[Path]:
    out = []
    try:
        import nvidia  # type: ignore
        for root in nvidia.__path__:
            for sub in ("cu13/bin", "cu12/bin", "cuda_nvcc/bin", "cuda_cuobjdump/bin",
                        "cuda_nvdisasm/bin"):
                p = Path(root) / sub
                if p.is_dir():
                    out.append(p)
    except ImportError:
        pass
    return out


def find_tool(name: str) -> str | None:
    """``cuobjdump``, ``nvdisasm``, ... or None when not installed."""
    env = os.environ.get(f"PKC_{name.upper()}")
    if env and Path(env).exists():
        return env
    found = shutil.which(name)
    if found:
        return found
    for d in [Path("/usr/local/cuda/bin"), *sorted(Path("/usr/local").glob("cuda-*/bin")),
              *_wheel_bins()]:
        p = d / name
        if p.exists():
            return str(p)
    return None


def sass(cubin: bytes) -> str:
    """The SASS text of a cubin (raises FileNotFoundError without cuobjdump)."""
    tool = find_tool("cuobjdump")
    if tool is None:
        raise FileNotFoundError("cuobjdump not found")
    env = dict(os.environ)
    nvd = find_tool("nvdisasm")
    if nvd:
        env["PATH"] = str(Path(nvd).parent) + os.pathsep + env.get("PATH", "")
    with tempfile.TemporaryDirectory(prefix="pkc-sass-") as tmp:
        p = Path(tmp) / "k.cubin"
        p.write_bytes(cubin)
        proc = subprocess.run([tool, "--dump-sass", str(p)], capture_output=True, text=True,
                              env=env)
        if proc.returncode != 0:
            raise RuntimeError(f"cuobjdump failed:\n{proc.stdout}{proc.stderr}")
        return proc.stdout


def instructions(text: str) -> list[str]:
    """The instructions of a SASS listing, one string each (predicate included)."""
    out = []
    for line in text.splitlines():
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;", line)
        if m:
            out.append(m.group(1))
    return out


@dataclass
class SassSummary:
    hgmma: list[str]
    mbarrier_inits: int
    tma_loads: int
    tma_stores: int
    local_mem: int
    setmaxnreg: int
    mbarrier_offsets: list[int]

    @staticmethod
    def of(text: str) -> "SassSummary":
        ins = instructions(text)
        return SassSummary(
            # wgmma: HGMMA of 16-bit operands, QGMMA of fp8 ones
            hgmma=[i for i in ins if "HGMMA" in i or "QGMMA" in i],
            mbarrier_inits=sum(1 for i in ins if "SYNCS.EXCH.64" in i),
            tma_loads=sum(1 for i in ins if "UTMALDG" in i),
            tma_stores=sum(1 for i in ins if "UTMASTG" in i),
            local_mem=sum(1 for i in ins if re.search(r"\b(LDL|STL)\b", i)),
            setmaxnreg=sum(1 for i in ins if "USETMAXREG" in i),
            mbarrier_offsets=sorted(
                int(m.group(1), 16) if m.group(1) else 0
                for i in ins if "SYNCS.EXCH.64" in i
                for m in [re.search(r"\[UR\d+(?:\+(0x[0-9a-f]+))?\]", i)] if m),
        )


def expected_pipeline(cfg: GemmConfig) -> dict:
    """What the SASS of the GEMM of ``cfg`` must show."""
    b_boxes = 1 if cfg.b_layout is BLayout.NK else cfg.bn // 64 // cfg.cluster_m
    stores = (cfg.m_slices * cfg.bn // cfg.epi_width) if cfg.epilogue is Epilogue.TMA else 0
    # the ping-pong consumers' two order barriers follow the stages' (gemm_schedule_pingpong)
    bars = 2 * cfg.stages + cfg.extra_bars + (2 if cfg.pingpong else 0)
    return {
        "hgmma_shape": (f"QGMMA.64x{cfg.bn}x32.F32.{cfg.in_types[0].upper()}."
                        f"{cfg.in_types[1].upper()}" if cfg.fp8 else
                        f"HGMMA.64x{cfg.bn}x16.F32{'.BF16' if cfg.dtype == 'bf16' else ''}"),
        "hgmma_per_stage": (BK // 16) * cfg.m_slices,
        "mbarrier_inits": bars,
        "tma_loads": 1 + b_boxes,
        "tma_stores": stores,
        # the barriers sit right after the stages and the epilogue buffers
        "mbarrier_offsets": [cfg.bar_offset + 8 * i
                             for i in range(bars)],
    }


def check_pipeline(cfg: GemmConfig, text: str, tma: bool = True) -> list[str]:
    """Problems found in the SASS ``text`` of ``cfg``'s GEMM (empty: as designed); with
    ``tma=False`` the TMA instruction counts are left to the caller (a fused kernel)."""
    s = SassSummary.of(text)
    e = expected_pipeline(cfg)
    bad = []
    shapes = {h.split()[0] for h in s.hgmma}
    if shapes != {e["hgmma_shape"]}:
        bad.append(f"HGMMA shapes {sorted(shapes)}, expected {e['hgmma_shape']}")
    if len(s.hgmma) != e["hgmma_per_stage"]:
        bad.append(f"{len(s.hgmma)} HGMMA in the main loop, expected {e['hgmma_per_stage']}")
    if s.mbarrier_inits != e["mbarrier_inits"]:
        bad.append(f"{s.mbarrier_inits} mbarrier inits, expected {e['mbarrier_inits']} "
                   f"(full + empty for {cfg.stages} stages"
                   + (f", {cfg.extra_bars} of the epilogue)" if cfg.extra_bars else ")"))
    if s.mbarrier_offsets != e["mbarrier_offsets"]:
        bad.append(f"mbarriers at {[hex(o) for o in s.mbarrier_offsets]}, expected "
                   f"{[hex(o) for o in e['mbarrier_offsets']]} ({cfg.stages} stages x "
                   f"{cfg.stage_bytes} B + {cfg.epi_bytes} B of epilogue buffers before them)")
    if tma and s.tma_loads != e["tma_loads"]:
        bad.append(f"{s.tma_loads} TMA loads per k-block, expected {e['tma_loads']}")
    if tma and s.tma_stores != e["tma_stores"]:
        bad.append(f"{s.tma_stores} TMA stores per tile, expected {e['tma_stores']}")
    if s.local_mem:
        bad.append(f"{s.local_mem} local-memory instructions (LDL/STL)")
    if s.setmaxnreg < (2 if cfg.consumers == 2 else 1):
        bad.append(f"{s.setmaxnreg} USETMAXREG (setmaxnreg dropped)")
    return bad


def check_reduce_scatter_pipeline(cfg: GemmConfig, world: int, fresh: bool, text: str) -> list[str]:
    """Problems in the SASS of a GEMM + reduce-scatter kernel on the tile ``cfg``: the
    GEMM's checks, then its own TMA counts (each epilogue piece stored into the own chunk
    and reduce-added into a peer's; ``fresh``, W = 2: the peer's partial loaded per piece and
    summed in registers, no reduce-adds) and a system-scope signal."""
    if fresh:
        cfg = cfg.with_(extra_bars=2 * cfg.consumers)   # a load mbarrier per epilogue buffer
    ins = instructions(text)
    bad = check_pipeline(cfg, text, tma=False)
    pieces = cfg.m_slices * (cfg.bn // cfg.epi_width)
    loads = expected_pipeline(cfg)["tma_loads"]
    want = ({"UTMALDG": loads + pieces, "UTMASTG": 2 * pieces, "UTMAREDG": 0} if fresh else
            {"UTMALDG": loads, "UTMASTG": pieces, "UTMAREDG": pieces})
    for op, n in want.items():
        got = sum(1 for i in ins if i.split()[0].lstrip("@!PU0123456789T ").startswith(op)
                  or (" " + op) in (" " + i))
        if got != n:
            bad.append(f"{got} {op}, expected {n}")
    if world > 1 and not any("STRONG.SYS" in i and ("REDG" in i or "RED" in i.split()[0])
                             for i in ins):
        bad.append("no system-scope signal (REDG ... STRONG.SYS)")
    if not any("REDG" in i for i in ins):
        bad.append("no signal (REDG)")
    return bad


# ---- sm_100a ------------------------------------------------------------------------------


def opcodes(text: str) -> list[str]:
    """The opcode of each instruction (predicate dropped, modifiers kept: ``UTCHMMA.2CTA``)."""
    out = []
    for i in instructions(text):
        m = re.match(r"(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", i)
        if m:
            out.append(m.group(1))
    return out


def check_sm100_gemm(text: str, *, mmas_per_kblock: int = BK // 16, cta_pair: bool = False,
                     tma_store: bool = True, fp8: bool = False,
                     multicast: bool = False) -> list[str]:
    """Problems in the SASS of an sm_100a (tcgen05) GEMM kernel: the k-block's MMAs are
    tensor-memory MMAs (``UTCHMMA``, or ``UTCQMMA`` for ``fp8``: ``.kind::f8f6f4``;
    ``.2CTA`` where the PTX has ``cta_group::2``, ``cta_pair``), issued once in the code
    (4 per k-block: K = 16 of 16-bit or K = 32 of 8-bit data, 32 bytes of a row each); A
    and B come by TMA (``UTMALDG``); the epilogue reads tensor memory (``LDTM``) after a
    commit to an mbarrier (``UTCBAR``); the TMA store epilogue stores by TMA
    (``UTMASTG``); no wgmma (``HGMMA`` / ``QGMMA``), no MMA of the other kind, and no local
    memory (``LDL`` / ``STL``: spills). ``multicast`` (a cluster of two pairs): a TMA load
    multicast between the pairs (``UTMALDG...MULTICAST.2CTA``) and the stage release
    committed to several CTAs (``UTCBAR...MULTICAST``)."""
    ops = opcodes(text)
    bad = []
    want, other = ("UTCQMMA", "UTCHMMA") if fp8 else ("UTCHMMA", "UTCQMMA")
    mma = [o for o in ops if o.startswith(want)]
    pair = [o for o in mma if ".2CTA" in o]
    if len(mma) != mmas_per_kblock:
        bad.append(f"{len(mma)} {want}, expected {mmas_per_kblock} (one per 32 bytes of K of a "
                   "k-block)")
    if any(o.startswith(other) for o in ops):
        bad.append(f"{other} in a{'n fp8' if fp8 else ' 16-bit'} GEMM")
    if cta_pair and len(pair) != len(mma):
        bad.append(f"{len(mma) - len(pair)} {want} without .2CTA in a CTA-pair kernel")
    if not cta_pair and pair:
        bad.append(f"{len(pair)} {want}.2CTA in a single-CTA kernel")
    base = [o.split(".")[0] for o in ops]
    if base.count("UTMALDG") < 2:
        bad.append(f"{base.count('UTMALDG')} UTMALDG, expected >= 2 (A and B)")
    for op, why in (("LDTM", "the epilogue's tcgen05.ld"), ("UTCBAR", "tcgen05.commit")):
        if op not in base:
            bad.append(f"no {op} ({why})")
    if multicast:
        if not any(o.startswith("UTMALDG") and "MULTICAST" in o and "2CTA" in o for o in ops):
            bad.append("no multicast 2-CTA TMA load (UTMALDG...MULTICAST.2CTA) in a cluster of "
                       "pairs")
        if not any(o.startswith("UTCBAR") and "MULTICAST" in o for o in ops):
            bad.append("no multicast commit (UTCBAR...MULTICAST)")
    if tma_store and "UTMASTG" not in base:
        bad.append("no UTMASTG (the TMA-store epilogue)")
    if any(o in ("HGMMA", "QGMMA") for o in base):
        bad.append("HGMMA / QGMMA (wgmma) in an sm_100a kernel")
    bad += _local_memory(base)
    return bad


def check_collective(text: str, *, multicast_reduce: bool = False,
                     signals: bool = True) -> list[str]:
    """Problems in the SASS of a scheduled collective (sm_90a or sm_100a): no MMA at all,
    with ``signals`` (every kind but LL, whose flags travel in the data) a system-scope
    signal (``REDG ... STRONG.SYS``: ``red.relaxed.sys``, or the ``multimem.red`` of an
    NVLS barrier), with ``multicast_reduce`` the switch's reduction (``LDGMC``:
    ``multimem.ld_reduce``), no local memory."""
    ins = instructions(text)
    base = [o.split(".")[0] for o in opcodes(text)]
    bad = []
    mma = sorted({o for o in base if "MMA" in o})
    if mma:
        bad.append(f"MMA instructions {mma} in a collective")
    if signals and not any("REDG" in i and "STRONG.SYS" in i for i in ins):
        bad.append("no system-scope signal (REDG ... STRONG.SYS)")
    if multicast_reduce and "LDGMC" not in base:
        bad.append("no LDGMC (multimem.ld_reduce)")
    if not multicast_reduce and "LDGMC" in base:
        bad.append("LDGMC in a kernel without multimem.ld_reduce")
    bad += _local_memory(base)
    return bad


def _local_memory(base: list[str]) -> list[str]:
    n = sum(1 for o in base if o in ("LDL", "STL"))
    return [f"{n} local-memory instructions (LDL/STL)"] if n else []
