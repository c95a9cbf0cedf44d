"""lower-collectives: every collective, every algorithm, W in {1, 2, 3, 4, 8}, computes what
the graph-level op computes (pkc.interp), on hypothesis-drawn shapes, dims and dtypes, with
tiles that do not divide the shapes. Plus the size-based choice, the records it leaves in
the IR, and its errors."""

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType, bf16, f16, f32
from xdsl.ir import Block, Region

from pkc.dialects import graph as g
from pkc.dialects import kernel as k
from pkc.ir import PkcDiagnostic, make_context, verify_module
from pkc.passes.lower_collectives import TILE_ELEMENTS, LowerCollectives, layout_of
from pkc.passes.registry import PipelineError, parse_pipeline
from pkc.passes.remarks import plan_of, remarks_of
from pkc.testing import check_transform

WORLDS = (1, 2, 3, 4, 8)
DTYPES = {"f32": f32, "bf16": bf16, "f16": f16}
SETTINGS = settings(max_examples=10, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


# ----------------------------------------------------------------------------------------
# helpers


def module_of(build, shape, element):
    """@main(x: tensor<shape>) { return build(x) } as a module."""
    block = Block(arg_types=[TensorType(element, list(shape))])
    op = build(block.args[0])
    block.add_ops([op, func.ReturnOp(op.result)])
    fn = func.FuncOp("main", ([TensorType(element, list(shape))], [op.result.type]), Region(block))
    return ModuleOp([fn])


def run(pipeline: str, module: ModuleOp) -> ModuleOp:
    """Runs a pipeline string (through the registry, as pkc-opt does) and verifies."""
    ctx = make_context()
    for p in parse_pipeline(pipeline):
        p.apply(ctx, module)
    verify_module(module)
    return module


def lowering(options: str, tiles: tuple[int, int]):
    """A transform for check_transform: lower with `options`; `tiles` = (a, b) asks for
    at most a x b tiles per chunk (tile = ceil(rows / a) x ceil(cols / b)), 0 = default."""
    def transform(module: ModuleOp) -> None:
        opts = [options] if options else []
        opts.append("keep-single-rank=true")  # W = 1 lowers too (the default removes it)
        if tiles != (0, 0):
            op = next(o for o in module.walk() if isinstance(o, g.COLLECTIVE_OPS))
            lay = layout_of(op)
            opts += [f"tile_rows={math.ceil(lay.rows / tiles[0])}",
                     f"tile_cols={math.ceil(lay.cols / tiles[1])}"]
        run(f"lower-collectives{{{' '.join(opts)}}}", module)
        assert not any(isinstance(o, g.COLLECTIVE_OPS) for o in module.walk())
        assert sum(isinstance(o, k.KernelOp) for o in module.walk()) == 1
    return transform


shapes = st.lists(st.integers(1, 96), min_size=1, max_size=3).filter(
    lambda s: math.prod(s) <= 1536)
dtypes = st.sampled_from(sorted(DTYPES))
tilings = st.sampled_from([(0, 0), (1, 2), (2, 1), (2, 3), (3, 2)])


# ----------------------------------------------------------------------------------------
# equivalence over random shapes: one test per collective and algorithm


@pytest.mark.parametrize("algo", ["one_shot", "two_shot"])
@SETTINGS
@given(shape=shapes, dtype=dtypes, reduce=st.sampled_from(["sum", "sum", "max", "min"]),
       tiles=tilings)
def test_all_reduce(algo, shape, dtype, reduce, tiles):
    # Slots summed in rank order in f32, rounded once: bitwise equal to the graph op.
    def make(W):
        return module_of(lambda x: g.AllReduceOp(x, W, reduce), shape, DTYPES[dtype])

    check_transform(make, lowering(f"all_reduce={algo}", tiles), WORLDS, exact=True)


@pytest.mark.parametrize("algo", ["direct", "ring"])
@SETTINGS
@given(shape=shapes, dtype=dtypes, data=st.data(), tiles=tilings)
def test_all_gather(algo, shape, dtype, data, tiles):
    dim = data.draw(st.integers(0, len(shape) - 1), label="dim")
    check_transform(lambda W: module_of(lambda x: g.AllGatherOp(x, dim, W), shape, DTYPES[dtype]),
                    lowering(f"all_gather={algo}", tiles), WORLDS, exact=True)


def _split(shape, dim, W):
    """`shape` with dimension `dim` made W times larger, so that it splits into W chunks."""
    return [d * W if i == dim else d for i, d in enumerate(shape)]


@pytest.mark.parametrize("algo", ["direct", "ring"])
@SETTINGS
@given(shape=shapes, dtype=dtypes, data=st.data(), tiles=tilings)
def test_reduce_scatter(algo, shape, dtype, data, tiles):
    dim = data.draw(st.integers(0, len(shape) - 1), label="dim")
    reduce = data.draw(st.sampled_from(["sum", "max"]), label="reduce")

    def make(W):
        return module_of(lambda x: g.ReduceScatterOp(x, dim, W, reduce),
                         _split(shape, dim, W), DTYPES[dtype])

    # direct: slots in rank order, exact. ring: sums in ring order (c+1, ..., c) in f32,
    # rounded once: within the f32-reassociation tolerance of the rank-order sum.
    check_transform(make, lowering(f"reduce_scatter={algo}", tiles), WORLDS,
                    exact=(algo == "direct"))


@SETTINGS
@given(shape=shapes, dtype=dtypes, data=st.data(), tiles=tilings)
def test_all_to_all(shape, dtype, data, tiles):
    split_dim = data.draw(st.integers(0, len(shape) - 1), label="split_dim")
    concat_dim = data.draw(st.integers(0, len(shape) - 1), label="concat_dim")

    def make(W):
        return module_of(lambda x: g.AllToAllOp(x, split_dim, concat_dim, W),
                         _split(shape, split_dim, W), DTYPES[dtype])

    check_transform(make, lowering("", tiles), WORLDS, exact=True)


# Fixed cases always covered: tiles that divide neither rows nor columns, a row wider
# than the default tile, several schedule seeds.


@pytest.mark.parametrize("algo", ["one_shot", "two_shot"])
def test_all_reduce_wider_than_a_tile_and_uneven_tiles(algo):
    for shape, tiles in [((3, TILE_ELEMENTS + 5), "tile_rows=2"),
                         ((7, 11), "tile_rows=3 tile_cols=5"),
                         ((2, 3, 5), "tile_rows=4 tile_cols=4")]:
        def lower(m, tiles=tiles):
            run(f"lower-collectives{{all_reduce={algo} {tiles}}}", m)
        check_transform(lambda W: module_of(lambda x: g.AllReduceOp(x, W), shape, bf16), lower,
                        (1, 3, 4), seeds=(0, 1), exact=True)


def test_ring_interleavings():
    """The ring protocols under several worker interleavings (schedule seeds)."""
    for opts, build, shape in [
        ("all_gather=ring tile_cols=3", lambda W: (lambda x: g.AllGatherOp(x, 1, W)),
         lambda W: (2, 7)),
        ("reduce_scatter=ring tile_cols=3", lambda W: (lambda x: g.ReduceScatterOp(x, 1, W)),
         lambda W: (2, 5 * W)),
    ]:
        def lower(m, opts=opts):
            run(f"lower-collectives{{{opts}}}", m)
        check_transform(lambda W: module_of(build(W), shape(W), f32), lower, (3, 4),
                        seeds=(0, 1, 2, 3, 4))


# ----------------------------------------------------------------------------------------
# the size-based choice and what the pass records


def _lowered_kernel(build, shape, element=bf16, options="") -> k.KernelOp:
    module = run(f"lower-collectives{{{options}}}", module_of(build, shape, element))
    return next(o for o in module.walk() if isinstance(o, k.KernelOp))


def test_small_all_reduce_is_one_shot_large_is_two_shot_on_h200():
    small = _lowered_kernel(lambda x: g.AllReduceOp(x, 8), (16, 1024))        # 32 KiB
    large = _lowered_kernel(lambda x: g.AllReduceOp(x, 8), (8192, 8192))      # 128 MiB
    assert plan_of(small)["algorithm"] == "one_shot"
    assert plan_of(large)["algorithm"] == "two_shot"
    p = plan_of(large)
    assert p["predicted_time"] == p["time_two_shot"] < p["time_one_shot"]
    assert p["forced"] is False and p["message_bytes"] == 8192 * 8192 * 2
    assert small.kernel_name.data == "all_reduce_one_shot"
    assert remarks_of(large)[0].startswith("all_reduce 128 MiB over 8 ranks: two-shot ")
    assert "(one-shot " in remarks_of(large)[0]


def test_forced_algorithm_is_recorded():
    kern = _lowered_kernel(lambda x: g.AllReduceOp(x, 8), (16, 1024), options="all_reduce=two_shot")
    assert plan_of(kern)["algorithm"] == "two_shot" and plan_of(kern)["forced"] is True
    assert ", forced (one-shot " in remarks_of(kern)[0]


def test_tiles_default_to_128_rows_or_8192_elements():
    kern = _lowered_kernel(lambda x: g.AllGatherOp(x, 1, 8), (1000, 64))
    p = plan_of(kern)
    assert (p["tile_rows"], p["tile_cols"], p["tiles"]) == (128, 64, 8)
    kern = _lowered_kernel(lambda x: g.AllReduceOp(x, 8), (4, 20000))
    p = plan_of(kern)
    assert (p["tile_rows"], p["tile_cols"]) == (1, TILE_ELEMENTS)
    assert "tiles 1x1x8192, 4x3 per chunk" in remarks_of(kern)[1]


def test_gather_and_scatter_choices_come_from_the_cost_model():
    from pkc.target import choose_all_gather, choose_reduce_scatter

    ag = _lowered_kernel(lambda x: g.AllGatherOp(x, 0, 8), (512, 1024))
    assert plan_of(ag)["algorithm"] == choose_all_gather("h200", 8 * 512 * 1024 * 2, 8).kind
    rs = _lowered_kernel(lambda x: g.ReduceScatterOp(x, 0, 8), (512, 1024))
    assert plan_of(rs)["algorithm"] == choose_reduce_scatter("h200", 512 * 1024 * 2, 8).kind


def test_buffers_peers_put_into_are_symmetric():
    for build, algo in [(lambda x: g.AllReduceOp(x, 4), "all_reduce=two_shot"),
                        (lambda x: g.AllGatherOp(x, 0, 4), "all_gather=direct"),
                        (lambda x: g.AllToAllOp(x, 0, 0, 4), "")]:
        kern = _lowered_kernel(build, (8, 8), options=algo)
        assert kern.block.args[1].type.symmetric
        (worker,) = kern.workers()
        assert worker.role.data == "communicate" and worker.sm_count is None


def test_several_collectives_get_distinct_kernels():
    block = Block(arg_types=[TensorType(f32, [4, 4])])
    a = g.AllReduceOp(block.args[0], 2)
    b = g.AllReduceOp(a.result, 2)
    block.add_ops([a, b, func.ReturnOp(b.result)])
    fn = func.FuncOp("main", ([TensorType(f32, [4, 4])], [TensorType(f32, [4, 4])]), Region(block))
    module = run("lower-collectives", ModuleOp([fn]))
    names = [o.kernel_name.data for o in module.walk() if isinstance(o, k.KernelOp)]
    assert names == ["all_reduce_one_shot", "all_reduce_one_shot_1"]


def test_world_larger_than_the_nvlink_domain_is_an_error():
    with pytest.raises(PkcDiagnostic, match="world 16 is outside the NVLink domain of h200"):
        run("lower-collectives", module_of(lambda x: g.AllReduceOp(x, 16), (4, 4), f32))


@pytest.mark.parametrize("bad", ["all_reduce=ring", "all_gather=tree", "target=tpu",
                                 "tile_rows=-1"])
def test_bad_options_are_pipeline_errors(bad):
    with pytest.raises(PipelineError, match="bad options for pass 'lower-collectives'"):
        parse_pipeline(f"lower-collectives{{{bad}}}")


def test_options_accept_dashes():
    (p,) = parse_pipeline("lower-collectives{all-reduce=two-shot}")
    assert isinstance(p, LowerCollectives) and p.forced("all_reduce") == "two_shot"
