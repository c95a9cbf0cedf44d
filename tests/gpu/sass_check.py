"""Instruction mix of emitted kernels in SASS (cuobjdump), to see that what codegen meant
survived ptxas: tensor-core MMAs (HMMA), bulk copies (UBLKCP / UBLKRED), system-scope
atomics and acquire loads. Prints one line per kernel; run where cuobjdump exists."""

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from pkc.codegen import compile_module
from pkc.codegen.ptxas import assemble
from pkc.ir import parse_module
from tests.gpu import kernels as K

PATTERNS = {"HMMA": r"\bHMMA\b", "FFMA": r"\bFFMA\b", "UBLKCP": r"\bUBLKCP\b", "UBLKRED": r"\bUBLKRED\b",
            "RED": r"\bRED\b", "ATOM": r"\bATOMG?\b", "LDG": r"\bLDG\b", "STG": r"\bSTG\b",
            "SYNCS": r"\bSYNCS\b", "NANOSLEEP": r"\bNANOSLEEP\b"}


def main() -> int:
    tool = shutil.which("cuobjdump") or "/usr/local/cuda/bin/cuobjdump"
    if not Path(tool).exists():
        print("cuobjdump not found")
        return 0
    cases = [K.gemm_rs(4, 72, 80, 96, "bf16"), K.all_reduce(4, 100, 200, "bf16"), K.put_add(2, 40, 96, "bf16")]
    for case in cases:
        for target in ("sm_90a", "sm_80"):
            arch = "sm_90a" if target == "sm_90a" else "sm_90"
            for name, ck in compile_module(parse_module(case.ir, case.name), target).items():
                with tempfile.TemporaryDirectory() as d:
                    cubin = Path(d) / "k.cubin"
                    assemble(ck.ptx, arch, output=cubin)
                    sass = subprocess.run([tool, "--dump-sass", str(cubin)], capture_output=True, text=True).stdout
                counts = {k: len(re.findall(v, sass)) for k, v in PATTERNS.items()}
                print(f"{case.name:34s} {target:7s} " + " ".join(f"{k}={v}" for k, v in counts.items() if v))
    return 0


if __name__ == "__main__":
    sys.exit(main())
