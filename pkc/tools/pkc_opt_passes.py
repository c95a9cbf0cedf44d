"""The 'Passes' section of ``pkc-opt --help``, kept here so that --help imports no pass:
listing them from the registry imports every pass module (most of a second).

Written from the registry by ``python -m pkc.tools.pkc_opt_passes`` (run it after adding
a pass or changing its description or options); tests/unit/test_pkc_opt_startup.py
(``test_help_pass_list_is_current``) fails while it is out of date.
"""

from __future__ import annotations

from pathlib import Path

# --- written by `python -m pkc.tools.pkc_opt_passes`: begin
_LINES: tuple[str, ...] = (
    "Passes (run them with -p 'a,b{option=value other=value}'):",
    '  canonicalize          Apply all canonicalization patterns and fold constants (xDSL).',
    '  cse                   Eliminate common subexpressions (xDSL).',
    '  dce                   Remove operations whose results are unused and that have no side effects (xDSL).',
    '  buffer-elision        Remove staging buffers: producers write straight into symmetric destinations.',
    '  collective-views      Move pk.reshape across collectives so that matmuls meet collectives (exact).',
    '  lower-collectives     Lower graph-level collectives to pk.kernel puts and signals over symmetric buffers.',
    '                          option target: str = h200',
    '                          option all-reduce: str = auto',
    '                          option all-gather: str = auto',
    '                          option reduce-scatter: str = auto',
    '                          option tile-rows: int = 0',
    '                          option tile-cols: int = 0',
    '                          option keep-single-rank: bool = false',
    '  overlap               Fuse GEMMs with reduce-scatter / all-reduce / all-gather / MoE all-to-all into kernels.',
    '                          option target: str = h200',
    '                          option force: bool = false',
    '                          option overlap: str = auto',
    '                          option tile: int = 128',
    '                          option tile-k: int = 64',
    '  schedule-collectives  Rewrite lowered collective kernels into scheduled (pks) collective kernels.',
    '                          option target: str = h200',
    '                          option kind: str = ',
    '                          option groups: int = 0',
    '  schedule-fused        Rewrite fused GEMM + collective kernels into scheduled (pks) kernels.',
    '                          option target: str = h200',
    '                          option variant: str = ',
    '                          option deterministic: bool = false',
    '                          option clc: str = auto',
    '  schedule-matmul       Rewrite 2-D bf16/f16 pk.matmul and fp8 pk.scaled_matmul ops into scheduled GEMM kernels.',
    '                          option target: str = h200',
    '                          option variant: str = ',
    '                          option scale-prefetch: bool = true',
    '                          option pingpong: bool = true',
    '  schedule-moe          Rewrite MoE dispatch + grouped GEMM + combine kernels into scheduled (pks) kernels.',
    '                          option target: str = h200',
    '                          option variant: str = ',
    '  sm-partition          Set the SM count of every worker of every pk.kernel from the cost model.',
    '                          option target: str = h200',
)
# --- written by `python -m pkc.tools.pkc_opt_passes`: end

PASS_LIST = "\n".join(_LINES)

_BEGIN = "# --- written by `python -m pkc.tools.pkc_opt_passes`: begin\n"
_END = "# --- written by `python -m pkc.tools.pkc_opt_passes`: end\n"


def render(text: str) -> str:
    """The Python source of the table for the pass list ``text``."""
    body = "".join(f"    {line!r},\n" for line in text.split("\n"))
    return f"_LINES: tuple[str, ...] = (\n{body})\n"


def write(path: Path = Path(__file__)) -> bool:
    """Rewrite the table in ``path`` from the registry; True if it changed."""
    from pkc.tools.pkc_opt_args import registry_pass_list

    source = path.read_text(encoding="utf-8")
    head, rest = source.split(_BEGIN, 1)
    _, tail = rest.split(_END, 1)
    new = head + _BEGIN + render(registry_pass_list()) + _END + tail
    if new == source:
        return False
    path.write_text(new, encoding="utf-8")
    return True


if __name__ == "__main__":
    print("pkc/tools/pkc_opt_passes.py:", "rewritten" if write() else "already current")
