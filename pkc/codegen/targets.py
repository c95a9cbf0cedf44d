"""What codegen needs to know about each PTX target: which instructions exist, how much
shared memory one CTA may use, how many SMs a default split assumes.

* ``sm_90a`` (Hopper, H100/H200): ``red.add.noftz.bf16``, bulk copies (``cp.async.bulk``,
  ``cp.reduce.async.bulk``, mbarrier ``complete_tx``) for row-contiguous tile loads/puts.
* ``sm_100a`` (Blackwell, B200): the same instructions here (``tcgen05`` is for the fast
  path, a later issue); checked with ptxas, not run.
* ``sm_80``: the portable path (``mma.sync``, element ld/st, CAS loops for bf16 adds), runs
  on any sm_80+ GPU through the driver's JIT; this is also how the H200 runs it in tests.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pkc.codegen.errors import CodegenError

KB = 1024
THREADS = 128  # threads per CTA: 4 warps (one warpgroup, which a wgmma path will want)


@dataclass(frozen=True)
class CodegenTarget:
    name: str             # the .target string
    sm: int               # compute capability * 10
    smem_limit: int       # dynamic shared memory one CTA may use (bytes)
    num_sms: int          # SMs assumed by the default worker split
    bulk_copies: bool     # use cp.async.bulk for tile loads and puts where rows allow
    red_bf16: bool        # red.global.add.noftz.bf16 exists

    def with_bulk(self, bulk: bool) -> "CodegenTarget":
        if bulk and self.sm < 90:
            raise CodegenError(f"target {self.name} has no cp.async.bulk (needs sm_90+)")
        return replace(self, bulk_copies=bulk)


TARGETS = {
    # 227 KB per block on Hopper and Blackwell (228 KB per SM, 1 KB reserved by the system).
    "sm_90a": CodegenTarget("sm_90a", 90, 227 * KB, 132, bulk_copies=True, red_bf16=True),
    "sm_100a": CodegenTarget("sm_100a", 100, 227 * KB, 148, bulk_copies=True, red_bf16=True),
    # A100: 163 KB per block.
    "sm_80": CodegenTarget("sm_80", 80, 163 * KB, 108, bulk_copies=False, red_bf16=False),
}


def get_codegen_target(target: str | CodegenTarget) -> CodegenTarget:
    if isinstance(target, CodegenTarget):
        return target
    if target not in TARGETS:
        raise CodegenError(f"unknown PTX target '{target}' (known: {', '.join(TARGETS)})")
    return TARGETS[target]
