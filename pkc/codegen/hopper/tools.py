"""ptxas and cuobjdump around the Hopper kernels: assemble, read the resource report, and
check in the SASS that the pipeline we meant survived lowering (HGMMA of the right shape,
one mbarrier per stage and role, TMA loads and stores, no local memory).

Tools are looked up on PATH, then in CUDA's usual places, then in the ``nvidia-cuda-nvcc``
/ ``nvidia-cuda-cuobjdump`` / ``nvidia-cuda-nvdisasm`` wheels (``nvidia/cu13/bin``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from pkc.codegen.hopper.gemm import BK, GemmConfig


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


@dataclass
class Assembled:
    cubin: bytes
    log: str
    registers: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    stack_bytes: int = 0
    warnings: list[str] = field(default_factory=list)


def assemble(ptx: str, arch: str = "sm_90a") -> Assembled:
    ptxas = find_tool("ptxas")
    if ptxas is None:
        raise FileNotFoundError("ptxas not found")
    with tempfile.TemporaryDirectory(prefix="pkc-hopper-") as tmp:
        src, out = Path(tmp) / "k.ptx", Path(tmp) / "k.cubin"
        src.write_text(ptx)
        proc = subprocess.run([ptxas, "-v", f"-arch={arch}", str(src), "-o", str(out)],
                              capture_output=True, text=True)
        log = proc.stdout + proc.stderr
        if proc.returncode != 0:
            raise RuntimeError(f"ptxas -arch={arch} failed:\n{log}")
        res = Assembled(out.read_bytes(), log)
    m = re.search(r"Used (\d+) registers", log)
    res.registers = int(m.group(1)) if m else 0
    m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log)
    if m:
        res.stack_bytes, res.spill_stores, res.spill_loads = map(int, m.groups())
    res.warnings = [l.strip() for l in log.splitlines() if "warning" in l.lower()]
    return res


def sass(cubin: bytes) -> str:
    tool = find_tool("cuobjdump")
    if tool is None:
        raise FileNotFoundError("cuobjdump not found")
    env = dict(os.environ)
    nvd = find_tool("nvdisasm")
    if nvd:
        env["PATH"] = str(Path(nvd).parent) + os.pathsep + env.get("PATH", "")
    with tempfile.TemporaryDirectory(prefix="pkc-hopper-") as tmp:
        p = Path(tmp) / "k.cubin"
        p.write_bytes(cubin)
        proc = subprocess.run([tool, "--dump-sass", str(p)], capture_output=True, text=True,
                              env=env)
        if proc.returncode != 0:
            raise RuntimeError(f"cuobjdump failed:\n{proc.stdout}{proc.stderr}")
        return proc.stdout


def _instrs(text: str) -> list[str]:
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
        ins = _instrs(text)
        return SassSummary(
            hgmma=[i for i in ins if "HGMMA" in i],
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
    """What the SASS of ``cfg`` must show."""
    b_boxes = 1 if cfg.b_layout == "nk" else cfg.bn // 64 // cfg.cluster_m
    stores = (cfg.m_slices * cfg.bn // cfg.epi_width) if cfg.epilogue == "tma" else 0
    return {
        "hgmma_shape": f"HGMMA.64x{cfg.bn}x16.F32{'.BF16' if cfg.dtype == 'bf16' else ''}",
        "hgmma_per_stage": (BK // 16) * cfg.m_slices,
        "mbarrier_inits": 2 * cfg.stages + cfg.extra_bars,
        "tma_loads": 1 + b_boxes,
        "tma_stores": stores,
        "smem_bytes": cfg.stages * cfg.stage_bytes + cfg.epi_bytes
        + 8 * (2 * cfg.stages + cfg.extra_bars) + 1024,
        # the barriers sit right after the stages and the epilogue buffers
        "mbarrier_offsets": [cfg.bar_offset + 8 * i
                             for i in range(2 * cfg.stages + cfg.extra_bars)],
    }


def check_pipeline(cfg: GemmConfig, text: str) -> list[str]:
    """Problems found in the SASS ``text`` of ``cfg``'s kernel (empty: as designed)."""
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
    if s.tma_loads != e["tma_loads"]:
        bad.append(f"{s.tma_loads} TMA loads per k-block, expected {e['tma_loads']}")
    if s.tma_stores != e["tma_stores"]:
        bad.append(f"{s.tma_stores} TMA stores per tile, expected {e['tma_stores']}")
    if s.local_mem:
        bad.append(f"{s.local_mem} local-memory instructions (LDL/STL)")
    if s.setmaxnreg < (2 if cfg.consumers == 2 else 1):
        bad.append(f"{s.setmaxnreg} USETMAXREG (setmaxnreg dropped)")
    return bad
