"""An example user pass: all_reduce + residual add + RMSNorm -> one pk.kernel.

Matches the graph pkc imports for ``rms_norm(all_reduce(x) + res, w)`` (cast to f32, pow 2,
mean, + eps, rsqrt, two muls, cast back) and replaces it with one kernel in which each
rank puts its partial rows to every peer, waits for all W contributions, and then, per row
tile, sums them, adds the residual and normalizes, without writing the sum to memory.
The kernel is written as pk IR text (allreduce_rmsnorm_kernel.mlir.in), instantiated for the
shapes, and spliced in.

    pkc-opt --load-pass-plugin examples/passes/fuse_allreduce_rmsnorm.py \
            -p fuse-allreduce-rmsnorm examples/ir/allreduce_rmsnorm.mlir
"""

from dataclasses import dataclass
from pathlib import Path

from xdsl.dialects import func
from xdsl.passes import ModulePass

from pkc.dialects import graph as g
from pkc.ir import parse_module
from pkc.passes.registry import register_pass
from pkc.passes.remarks import add_remark

KERNEL = (Path(__file__).parent / "allreduce_rmsnorm_kernel.mlir.in").read_text()


def _user(value, name, fn=None):
    """The only user of ``value`` if it is a ``name`` op (with function ``fn``)."""
    users = [u.operation for u in value.uses]
    ok = len(users) == 1 and users[0].name == name and (fn is None or users[0].fn.data == fn)
    return users[0] if ok else None


def _match(ar: g.AllReduceOp):
    """Returns (residual add, final cast, weight, eps) or None."""
    add = _user(ar.result, "pk.map", "add")
    casts = [u.operation for u in add.result.uses if u.operation.name == "pk.map"] if add else []
    for c in (c for c in casts if c.fn.data == "cast"):
        users = {u.operation.fn.data: u.operation for u in c.result.uses if u.operation.name == "pk.map"}
        pow_, mul1 = users.get("pow"), users.get("mul")
        mean = pow_ and _user(pow_.result, "pk.reduce", "mean")
        plus = mean and _user(mean.result, "pk.map", "add")
        rsq = plus and _user(plus.result, "pk.map", "rsqrt")
        mul2 = rsq and mul1 and _user(mul1.result, "pk.map", "mul")
        out = mul2 and _user(mul2.result, "pk.map", "cast")
        w = mul2 and mul2.inputs[1].owner
        if out and isinstance(w, g.MapOp) and isinstance(plus.inputs[1].owner, g.ConstantOp):
            return add, out, w.inputs[0], plus.inputs[1].owner.value.value.data
    return None


@register_pass
@dataclass(frozen=True)
class FuseAllReduceRmsNorm(ModulePass):
    """Fuse all_reduce + residual add + RMSNorm into one kernel (example pass)."""

    name = "fuse-allreduce-rmsnorm"
    tile_rows: int = 16

    def apply(self, ctx, op) -> None:
        for ar in [o for o in op.walk() if isinstance(o, g.AllReduceOp)]:
            m = _match(ar)
            if m is None or len(ar.input.type.get_shape()) != 2:
                add_remark(ar, "fuse-allreduce-rmsnorm: no residual add + RMSNorm after it")
                continue
            add, out, weight, eps = m
            self._rewrite(ar, add, out, weight, eps)

    def _rewrite(self, ar, add, out, weight, eps) -> None:
        t = ar.input.type
        (n, h), e = t.get_shape(), t.element_type
        tr = min(self.tile_rows, n)
        tiles = -(-n // tr)  # each rank's staging slot is padded to whole tiles
        text = KERNEL.format(T=t, H=h, E=e, N=n, NP=tiles * tr, W=ar.world_size,
                             WN=ar.world_size * tiles * tr, TR=tr, TILES=tiles, EPS=float(eps))
        template = next(o for o in parse_module(text, "<fuse-allreduce-rmsnorm>").walk()
                        if isinstance(o, func.FuncOp))
        kernel = template.body.blocks[0].first_op
        residual = add.inputs[1] if add.inputs[0] is ar.result else add.inputs[0]
        mapping = dict(zip(template.body.blocks[0].args, [ar.input, residual, weight]))
        fused = kernel.clone(value_mapper=mapping)
        fused.location = ar.location
        out.parent.insert_op_before(fused, out)
        out.result.replace_all_uses_with(fused.outputs[0])
        add.result.replace_all_uses_with(fused.outputs[1])
        for dead in reversed(list(out.parent.ops)):  # the unfused chain, now unused
            if dead is not fused and dead.name.startswith("pk.") and not any(r.uses for r in dead.results):
                dead.detach()
                dead.erase()
        add_remark(fused, "fuse-allreduce-rmsnorm: all_reduce + residual add + RMSNorm in "
                          f"one kernel, {tr}-row tiles; the sum never goes to memory")
