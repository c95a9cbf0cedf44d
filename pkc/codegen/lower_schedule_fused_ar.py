"""sm_90a lowering of the schedule-level ops that the fused GEMM + all-reduce and the
fresh-output GEMM + reduce-scatter add (:mod:`pkc.passes.fused_ar_schedule`), registered
with the scheduled GEMM's lowering (:mod:`pkc.codegen.lower_schedule`) as the other fused
ops are (:mod:`pkc.codegen.lower_schedule_fused`).

* ``pks.rows_tmap``: a by-value tensor map parameter over a chunk's rows
  (:class:`~pkc.codegen.abi.TmapArg` with ``rows`` = [first, count, cols]; ``alloc`` when
  the buffer is one of the kernel's ``pk.alloc``s, whose addresses the runtime owns).
* ``pks.acc_add_smem``: per 32-bit word of the thread's elements of the swizzled piece
  (the addresses ``pks.acc_store_smem`` writes), ``ld.shared``, widen the two 16-bit
  halves to f32, ``add.rn.f32`` the accumulator's pair, ``cvt.rn`` pack, ``st.shared``.
"""

from __future__ import annotations

from pkc.codegen import ptx_sm90
from pkc.codegen.abi import TmapArg
from pkc.codegen.errors import CodegenError
from pkc.codegen.lower_schedule import EXTRA_LOWERINGS, TMAP_ARGS, Lowering
from pkc.codegen.lower_schedule_comm import _widen
from pkc.dialects import schedule_fused as f
from pkc.dialects.kernel import AllocOp


def _rows_tmap_arg(op: f.RowsTmapOp, args) -> TmapArg:
    t = op.result.type
    buf = op.buffer
    cols = buf.type.get_shape()[1]
    if any(buf is a for a in args):
        index, alloc = [i for i, a in enumerate(args) if a is buf][0], False
    else:
        owner = buf.owner
        if not isinstance(owner, AllocOp):
            raise CodegenError(f"'{op.name}': its buffer is neither a kernel argument nor a "
                               "pk.alloc of the kernel")
        allocs = [o for o in owner.parent_block().ops if isinstance(o, AllocOp)]
        index, alloc = allocs.index(owner), True
    return TmapArg(index, t.element.data, t.box_dims, t.swizzle.data, peer=op.peer.data,
                   rows=[op.first.data, op.rows.data, cols], alloc=alloc)


def _acc_add_smem(L: Lowering, op: f.AccAddSmemOp) -> None:
    b = L.b
    w, dt = op.width.data, op.dtype.data
    if f"xor{w}_0" not in L.geo:
        raise CodegenError(f"'{op.name}' of width {w}: its role has no pks.acc_store_smem of "
                           "that width (the epilogue geometry is computed for those)")
    frag = L.v(op.acc)
    base = op.slice.data * (op.acc.type.cols.data // 2)
    buf = L.slot_addr(op.dst, op.slot)
    for i in range(2):
        xo = L.geo[f"xor{w}_{i}"]
        row_addr = b.add32(buf, L.geo[f"off{w}_{i}"])
        for jj in range(w // 8):
            q = base + 4 * (op.col.data // 8 + jj) + 2 * i
            addr = b.add32(row_addr, b.bin("xor", "b32", xo, 16 * jj) if jj else xo)
            lo, hi = _widen(L, b.ld("shared", "b32", addr), dt)
            s0 = b.bin("add.rn", "f32", lo, b.r(ptx_sm90.FragGetOp(frag, q)))
            s1 = b.bin("add.rn", "f32", hi, b.r(ptx_sm90.FragGetOp(frag, q + 1)))
            b.st("shared", "b32", addr, b.r(ptx_sm90.CvtPackOp(dt, s0, s1)))


TMAP_ARGS[f.RowsTmapOp] = _rows_tmap_arg
EXTRA_LOWERINGS.update({
    f.RowsTmapOp: lambda L, op: None,      # a parameter (bound with the tensor maps)
    f.AccAddSmemOp: _acc_add_smem,
})
