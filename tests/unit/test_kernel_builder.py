"""The one builder of kernel-level IR (pkc/passes/kernel_builder.py).

Two kinds of checks: the builder does what its docstring says (constants once per kernel
at kernel level, index arithmetic folded and CSE'd, loops of no / one trip not emitted,
pk.rank once per worker), and both of its users (lower-collectives, overlap) build with it
and leave kernels that follow those conventions, so that a second builder growing in one
of them again fails here."""

import ast
import pathlib

import pytest
from xdsl.dialects import arith, func, scf
from xdsl.dialects.builtin import ModuleOp, TensorType, f32
from xdsl.ir import Block, Operation, Region

from pkc.dialects import kernel as k
from pkc.ir import make_context, parse_module, verify_module
from pkc.passes import collective_kernels, kernel_builder, patterns, patterns_gemm, patterns_moe
from pkc.passes.kernel_builder import Code, KernelBuilder
from pkc.passes.registry import parse_pipeline

PKC = pathlib.Path(kernel_builder.__file__).resolve().parents[1]
INDEX_ARITH = (arith.AddiOp, arith.SubiOp, arith.MuliOp, arith.DivUIOp, arith.RemUIOp)


def kernel_of(body, world: int = 4, attributes=None) -> tuple[ModuleOp, k.KernelOp]:
    """A module @main(x: tensor<8x8xf32>) whose kernel's one communicate worker is `body`."""
    t = TensorType(f32, [8, 8])
    block = Block(arg_types=[t])
    kb = KernelBuilder("t", world, [block.args[0]], [t], False, ["x", "y"])
    kb.worker(k.WorkerRole.COMMUNICATE, lambda c: body(kb, c))
    kop = kb.build(attributes)
    block.add_ops([kop, func.ReturnOp(kop.outputs[0])])
    module = ModuleOp([func.FuncOp("main", ([t], [t]), Region(block))])
    verify_module(module)  # SSA dominance included: reused values dominate their uses
    return module, kop


def ops_of(op: Operation, kind) -> list[Operation]:
    return [o for o in op.walk() if isinstance(o, kind)]


# ----------------------------------------------------------------------------------------
# One builder: both users import it, nothing else builds kernel-level IR


def test_both_passes_build_with_the_one_builder():
    for user in (collective_kernels, patterns, patterns_gemm, patterns_moe):
        assert user.KernelBuilder is KernelBuilder, user.__name__
        assert user.Code is Code, user.__name__
    assert not (PKC / "passes" / "patterns_ir.py").exists()
    assert not hasattr(collective_kernels, "_Builder")


def test_no_other_module_constructs_workers_foreach_or_rank():
    """pk.worker / pk.foreach / pk.rank ops are made by kernel_builder.py alone (a second
    emitter of kernel-level IR would construct them itself)."""
    makers = {"WorkerOp", "ForeachOp", "RankOp"}
    found = set()
    for path in PKC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                fn = node.func
                name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", None)
                if name in makers:
                    found.add(path.relative_to(PKC).as_posix())
    assert found == {"passes/kernel_builder.py"}


# ----------------------------------------------------------------------------------------
# The builder's documented behaviour


def test_index_arithmetic_folds_on_ints_and_around_zero_and_one():
    seen = {}

    def body(kb, c: Code):
        r = c.rank()
        seen.update(add=c.add(2, 3), sub=c.sub(7, 2), mul=c.mul(3, 4), div=c.div(9, 2),
                    rem=c.rem(9, 4), add0=c.add(r, 0), sub0=c.sub(r, 0), mul1=c.mul(1, r),
                    mul0=c.mul(r, 0), div1=c.div(r, 1), rem1=c.rem(r, 1), rank=r)

    _, kop = kernel_of(body)
    r = seen["rank"]
    assert (seen["add"], seen["sub"], seen["mul"], seen["div"], seen["rem"]) == (5, 5, 12, 4, 1)
    assert seen["add0"] is r and seen["sub0"] is r and seen["mul1"] is r and seen["div1"] is r
    assert seen["mul0"] == 0 and seen["rem1"] == 0
    assert not ops_of(kop, INDEX_ARITH)


def test_identical_index_arithmetic_is_emitted_once_in_a_block_and_its_loops():
    def body(kb, c: Code):
        a = c.rotate(1, 4)
        assert c.rotate(1, 4) is a  # same block: reused

        def inner(c: Code, i):
            assert c.rotate(1, 4) is a  # enclosing block: reused
            assert c.add(i, 2) is c.add(i, 2)

        c.loop(0, 4, 1, inner)

    _, kop = kernel_of(body)
    # rank + 1, its remui, and i + 2 in the loop: three ops
    assert [type(o) for o in ops_of(kop, INDEX_ARITH)] == [arith.AddiOp, arith.RemUIOp,
                                                           arith.AddiOp]


def test_sibling_loops_do_not_share_values():
    """A value computed in one loop's body does not dominate the next loop: each computes
    its own (the module verifies, dominance included)."""
    def copy_row(kb, c: Code, i):
        c.store(c.load(kb.args[0], [c.add(c.rank(), 1), 0], [1, 8]), kb.args[1], [i, 0])

    def body(kb, c: Code):
        c.loop(0, 4, 1, lambda c, i: copy_row(kb, c, i))
        c.loop(0, 4, 1, lambda c, i: copy_row(kb, c, i))

    _, kop = kernel_of(body)
    assert len(ops_of(kop, arith.AddiOp)) == 2
    (worker,) = kop.workers()
    assert isinstance(worker.body.block.first_op, k.RankOp)  # first asked for in a loop


def test_constants_once_per_kernel_at_kernel_level_in_first_asked_order():
    def body(kb, c: Code):
        kb.alloc("buf", [8, 8], f32, symmetric=True)
        c.signal(kb.signals("s", 2), 1, c.rank())
        c.wait(kb.signals("t", 1), 0, 4)
        c.loop(0, 4, 1, lambda c, i: c.signal(kb.signals("u", 4), i, 1))

    _, kop = kernel_of(body)
    top = [type(o) for o in kop.block.ops]
    consts = [o for o in kop.block.ops if isinstance(o, arith.ConstantOp)]
    assert [constant(o.result) for o in consts] == [1, 0, 4]
    assert top == [k.AllocOp, k.AllocSignalsOp, k.AllocSignalsOp, k.AllocSignalsOp,
                   *[arith.ConstantOp] * 3, k.WorkerOp, k.YieldOp]
    (worker,) = kop.workers()
    assert not ops_of(worker, arith.ConstantOp)


def test_loops_of_no_or_one_trip_are_not_emitted():
    calls = {}

    def record(key):
        def body(c: Code, *ivs):
            calls.setdefault(key, []).append(ivs)
            return list(ivs[len(ivs) - 1:]) if key in ("none", "one") else None
        return body

    def body(kb, c: Code):
        acc = c.fill([1, 8], f32)
        assert c.loop(0, 0, 1, record("none"), [acc]) == [acc]  # no trip: init back
        (one,) = c.loop(2, 3, 1, record("one"), [acc])
        assert one is acc  # inlined: the body's result, no loop result
        c.loop(0, 5, 4, record("two"))  # 0 and 4: a real loop
        c.foreach([1, 1], record("point"), ["i", "j"])
        c.foreach([2, 1], record("grid"), ["i", "j"])

    _, kop = kernel_of(body)
    assert "none" not in calls
    assert calls["one"][0][0] == 2 and calls["point"] == [(0, 0)]
    (two,) = calls["two"]
    assert not isinstance(two[0], int)  # the iv of an emitted loop
    (loop,) = ops_of(kop, scf.ForOp)
    assert two[0] is loop.body.block.args[0]
    assert [o.grid() for o in ops_of(kop, k.ForeachOp)] == [[2, 1]]


def test_rank_once_per_worker():
    t = TensorType(f32, [8, 8])
    block = Block(arg_types=[t])
    kb = KernelBuilder("t", 2, [block.args[0]], [t], False)
    ranks = []
    for role in (k.WorkerRole.COMPUTE, k.WorkerRole.COMMUNICATE):
        kb.worker(role, lambda c: ranks.extend([c.rank(), c.rank(),
                                                c.child(Block()).rank()]))
    kop = kb.build()
    assert ranks[0] is ranks[1] is ranks[2] and ranks[3] is ranks[4] is ranks[5]
    assert ranks[0] is not ranks[3]
    assert len(ops_of(kop, k.RankOp)) == 2


# ----------------------------------------------------------------------------------------
# Both users' kernels follow the builder's conventions


def conventions(kop: k.KernelOp) -> None:
    """What every kernel of the builder shows: constants only at kernel level, one per
    value; no identical index op where an earlier one (same block or enclosing) dominates;
    no pk.foreach over one point; no scf.for with constant bounds of fewer than two trips."""
    values = [constant(o.result) for o in kop.block.ops if isinstance(o, arith.ConstantOp)]
    assert len(values) == len(set(values)), values
    for w in kop.workers():
        assert not ops_of(w, arith.ConstantOp)

    def walk(block: Block, seen: set) -> None:
        seen = set(seen)
        for op in block.ops:
            if isinstance(op, INDEX_ARITH):
                key = (op.name, *op.operands)
                assert key not in seen, f"{op.name} emitted twice in {kop.kernel_name.data}"
                seen.add(key)
            for region in op.regions:
                for b in region.blocks:
                    walk(b, seen)

    walk(kop.block, set())
    for fe in ops_of(kop, k.ForeachOp):
        assert any(b > 1 for b in fe.grid()), fe.grid()
    for loop in ops_of(kop, scf.ForOp):
        ends = [constant(v) for v in (loop.lb, loop.ub, loop.step)]
        if None not in ends:
            lb, ub, step = ends
            assert ub - lb > step, (lb, ub, step)


def constant(v) -> int | None:
    return v.owner.value.value.data if isinstance(v.owner, arith.ConstantOp) else None


def run(pipeline: str, text: str) -> list[k.KernelOp]:
    ctx = make_context()
    module = parse_module(text, ctx=ctx)
    for p in parse_pipeline(pipeline):
        p.apply(ctx, module)
    verify_module(module)
    return ops_of(module, k.KernelOp)


def collective_ir(op: str, W: int, shape=(6, 40), attrs: str = "") -> str:
    t = "x".join(map(str, shape))
    out = {"all_gather": (shape[0] * W, *shape[1:]),
           "reduce_scatter": (shape[0] // W, *shape[1:])}.get(op, shape)
    o = "x".join(map(str, out))
    return f"""
func.func @main(%x: tensor<{t}xf32>) -> tensor<{o}xf32> {{
  %y = pk.{op} %x {{world = {W} : i64{attrs}}} : tensor<{t}xf32> -> tensor<{o}xf32>
  func.return %y : tensor<{o}xf32>
}}"""


@pytest.mark.parametrize("W", [2, 3, 8])
@pytest.mark.parametrize("op,options,attrs", [
    ("all_reduce", "all_reduce=one_shot", ', reduce = "sum"'),
    ("all_reduce", "all_reduce=two_shot", ', reduce = "max"'),
    ("all_gather", "all_gather=ring", ", dim = 0 : i64"),
    ("reduce_scatter", "reduce_scatter=ring", ', dim = 0 : i64, reduce = "sum"'),
    ("all_to_all", "", ", split_dim = 0 : i64, concat_dim = 0 : i64"),
])
def test_lower_collectives_kernels_follow_the_builder_conventions(W, op, options, attrs):
    shape = (6 * W, 40)
    opts = " ".join(o for o in (options, "tile_rows=4", "tile_cols=16") if o)
    (kop,) = run(f"lower-collectives{{{opts}}}", collective_ir(op, W, shape, attrs))
    conventions(kop)


def test_overlap_kernels_follow_the_builder_conventions():
    text = """
func.func @main(%a: tensor<64x32xf32>, %b: tensor<32x48xf32>) -> tensor<16x48xf32> {
  %c = pk.matmul %a, %b : (tensor<64x32xf32>, tensor<32x48xf32>) -> tensor<64x48xf32>
  %o = pk.reduce_scatter %c {dim = 0 : i64, reduce = "sum", world = 4 : i64} : tensor<64x48xf32> -> tensor<16x48xf32>
  func.return %o : tensor<16x48xf32>
}"""
    for style in ("inter", "intra"):
        (kop,) = run(f"overlap{{force=true overlap={style} tile=16 tile-k=16}}", text)
        conventions(kop)
