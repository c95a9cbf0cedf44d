"""Kernel builders shared by the ``overlap`` and ``buffer-elision`` passes.

Not a pass: the two passes import it. It holds (the names are importable from here; the code
lives in the modules named)

* :class:`Fusion`, the parameters of one fused kernel (pattern, overlap style, tile sizes,
  MoE expert count and capacity, whether an all-gather's result is also an output). The
  ``overlap`` pass writes it on the kernel as the ``pk.fusion`` dictionary attribute, and
  ``buffer-elision`` reads it back to recognise the kernels it may rewrite
  (patterns_fusion.py).
* :class:`KernelBuilder` / :class:`Code`, the one builder of kernel-level IR (allocs,
  index constants, workers, ``scf.for`` and ``pk.foreach`` loops, tile ops; index
  arithmetic folded and CSE'd, loops of one trip inlined), which lower-collectives uses
  too (kernel_builder.py); the tiling loops on top of it are in patterns_tiles.py.
* :func:`build_kernel` (here), which dispatches on the pattern to the builders of
  patterns_gemm.py (matmul with reduce_scatter, all_reduce or all_gather) and
  patterns_gather_k.py (an all-gather along the matmul's contraction dim) and
  patterns_moe.py (MoE), which builds the ``pk.kernel`` of a :class:`Fusion` in its
  *staged* form (``elide=False``: produced tiles go through ``pk.alloc {staging}`` buffers
  and are copied out of them, as NCCL does) or its *elided* form (``elide=True``: producers
  write straight into the destination; see buffer_elision.py).

Conventions of every generated kernel (W ranks, ``r`` = ``pk.rank``):

* Chunks are visited rank-rotated: at step i rank r works on chunk ``(r + i) mod W``, and
  pushes its own data to rank ``(r - i) mod W``, which is exactly the rank that needs it
  at step i; so ranks start at different peers and the local chunk comes first.
* Tiles are ``tile_m x tile_n`` (output) with a ``tile_k`` contraction step, capped by the
  shape. Along N and K tiles may overhang the buffer's end (loads read zeros, stores drop).
  Along rows that belong to different chunks (rows of one rank's reduce-scatter output, of
  one all-gather shard, of one MoE (expert, source) block) a tile must not cross into the
  next chunk, so such rows are split into full ``tile_m`` blocks plus one remainder block
  with its own, smaller tile type (as CUTLASS handles residues), never padded.
* MMAs accumulate in f32 tiles; the result is cast once to the output element type.
* Every put is followed by a ``pk.signal`` to the reader, every read of remote data by a
  ``pk.wait``: the interpreter's race detector checks it.
* Inter-SM overlap: a ``"compute"`` worker (GEMM tiles) and a ``"communicate"`` worker
  (puts). The compute worker hands each finished tile to the communicate worker through a
  local buffer (``send``; on a GPU the tile in shared/global memory that the TMA store of
  the communicate SMs reads) and a per-tile ``ready`` signal.
* Intra-SM overlap is ONE ``"compute"`` worker that puts every tile itself right after
  producing it (on a GPU: a producer warp beside the MMA warpgroups of the same SM; puts
  are asynchronous, so program order does not serialize them). ``pk.plan`` says
  ``overlap = "intra"``; there is no communicate worker to give SMs to.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import TensorType
from xdsl.ir import SSAValue

from pkc.dialects import kernel as k
from pkc.passes.kernel_builder import STAGING, Code, KernelBuilder
from pkc.passes.patterns_fusion import FUSION, KERNEL_NAMES, Fusion
from pkc.passes.patterns_gemm import (
    build_all_gather_mm,
    build_mm_all_reduce,
    build_mm_reduce_scatter,
)
from pkc.passes.patterns_gather_k import build_all_gather_k_mm
from pkc.passes.patterns_moe import build_moe
from pkc.passes.patterns_scaled import arg_names as scaled_arg_names
from pkc.target.cost import Pattern

# Importable from here, as before the split (overlap.py, buffer_elision.py, tests).
__all__ = ["FUSION", "KERNEL_NAMES", "STAGING", "Code", "Fusion", "KernelBuilder", "build_kernel"]


def build_kernel(f: Fusion, world: int, inputs: Sequence[SSAValue],
                 output_types: Sequence[TensorType], elide: bool) -> k.KernelOp:
    """The ``pk.kernel`` of fusion ``f`` (staged, or with staging elided), with the
    ``pk.fusion`` attribute that describes it."""
    builder = _BUILDERS[f.pattern]
    names = scaled_arg_names(f, len(inputs), len(output_types)) or _ARG_NAMES[f.pattern](
        len(inputs), len(output_types))
    kb = KernelBuilder(KERNEL_NAMES[f.pattern], world, inputs, output_types,
                       symmetric_outputs=elide, arg_names=names)
    builder(kb, f, world, elide)
    return kb.build({FUSION: f.to_attr("elided" if elide else "staged")})


def _names_mm(n_in: int, n_out: int) -> list[str]:
    return ["A", "B", *(["bias"] if n_in == 3 else []), "O"]


def _names_ag(n_in: int, n_out: int) -> list[str]:
    bs = [f"B{j}" for j in range(n_in - 1)]
    ys = [f"Y{j}" for j in range(n_in - 1)]
    return ["X", *bs, *ys, *(["G"] if n_out > len(ys) else [])]


def _names_moe(n_in: int, n_out: int) -> list[str]:
    return ["X", "Wt", "O"]


_ARG_NAMES = {
    Pattern.MM_REDUCE_SCATTER: _names_mm,
    Pattern.MM_ALL_REDUCE: _names_mm,
    Pattern.ALL_GATHER_MM: _names_ag,
    Pattern.ALL_GATHER_K_MM: _names_ag,
    Pattern.MOE: _names_moe,
}


_BUILDERS = {
    Pattern.MM_REDUCE_SCATTER: build_mm_reduce_scatter,
    Pattern.MM_ALL_REDUCE: build_mm_all_reduce,
    Pattern.ALL_GATHER_MM: build_all_gather_mm,
    Pattern.ALL_GATHER_K_MM: build_all_gather_k_mm,
    Pattern.MOE: build_moe,
}
