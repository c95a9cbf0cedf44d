"""sm-partition: SM counts of workers from the overlap plan or the cost model, on the
green-context grid, within the target's SMs, with a clear error when they cannot fit."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pkc.dialects import kernel as k
from pkc.ir import PkcDiagnostic, make_context, parse_module, verify_module
from pkc.passes.registry import parse_pipeline
from pkc.passes.remarks import plan_of, remarks_of
from pkc.target import get_target
from pkc.testing import check_transform

KERNEL = """
func.func @main(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {{
  %y = pk.kernel "fused" (%x) {{world = 2 : i64{plan}}} : (tensor<8x8xf32>) -> tensor<8x8xf32> {{
  ^bb0(%in: !pk.buffer<8x8xf32>, %out: !pk.buffer<8x8xf32>):
{workers}
    pk.yield
  }}
  func.return %y : tensor<8x8xf32>
}}
"""
WORKER = '    pk.worker "{role}" {{\n      pk.yield\n    }}'


def kernel_ir(roles=("compute", "communicate"), plan: str = "") -> str:
    workers = "\n".join(WORKER.format(role=r) for r in roles)
    return KERNEL.format(plan=f", pk.plan = {{{plan}}}" if plan else "", workers=workers)


def partition(text: str, target: str = "h200"):
    module = parse_module(text)
    ctx = make_context()
    for p in parse_pipeline(f"sm-partition{{target={target}}}"):
        p.apply(ctx, module)
    verify_module(module)
    kernels = [o for o in module.walk() if isinstance(o, k.KernelOp)]
    return module, kernels[0]


def sms(kernel: k.KernelOp) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for w in kernel.workers():
        out.setdefault(w.role.data, []).append(w.sm_count)
    return out


def test_plan_comm_sms_and_the_rest_for_compute():
    _, kern = partition(kernel_ir(plan='comm_sms = 16 : i64, overlap = "inter"'))
    assert sms(kern) == {"compute": [116], "communicate": [16]}
    assert remarks_of(kern) == ["sm-partition: 16 communicate + 116 compute SMs of 132 (h200); "
                                "communicate SMs from the overlap plan"]
    assert plan_of(kern)["sms_communicate"] == 16 and plan_of(kern)["sms_compute"] == 116
    assert plan_of(kern)["comm_sms"] == 16  # overlap's record is left as it was


def test_plan_off_the_green_context_grid_is_rounded_up():
    _, kern = partition(kernel_ir(plan="comm_sms = 12 : i64"))
    assert sms(kern) == {"compute": [116], "communicate": [16]}
    assert "rounded up from 12 to the green-context grid (multiples of 8, at least 8)" in \
        remarks_of(kern)[0]


def test_without_a_plan_the_link_decides():
    _, kern = partition(kernel_ir())
    assert sms(kern) == {"compute": [124], "communicate": [8]}
    assert remarks_of(kern)[0].endswith("8 TMA SMs saturate the link (370 GB/s)")


def test_b200_needs_more_sms_to_saturate_its_faster_link():
    _, kern = partition(kernel_ir(), target="b200")
    assert sms(kern) == {"compute": [132], "communicate": [16]}


def test_intra_sm_overlap_shares_all_sms():
    _, kern = partition(kernel_ir(plan='comm_sms = 0 : i64, overlap = "intra"'))
    assert sms(kern) == {"compute": [132], "communicate": [132]}
    assert "intra-SM overlap" in remarks_of(kern)[0]


def test_intra_sm_overlap_as_one_compute_worker():
    _, kern = partition(kernel_ir(("compute",), 'comm_sms = 0 : i64, overlap = "intra"'))
    assert sms(kern) == {"compute": [132]}
    assert remarks_of(kern) == ["sm-partition: 132 compute SMs of 132 (h200); intra-SM overlap: "
                                "the compute workers also put their tiles"]


def test_two_compute_workers_split_the_rest():
    _, kern = partition(kernel_ir(("compute", "compute", "communicate"), "comm_sms = 16 : i64"))
    assert sms(kern) == {"compute": [56, 60], "communicate": [16]}


def test_compute_only_kernel_gets_every_sm():
    _, kern = partition(kernel_ir(("compute",)))
    assert sms(kern) == {"compute": [132]}


@pytest.mark.parametrize("plan, message", [
    ("comm_sms = 140 : i64", "kernel @fused plans 140 communicate SMs but h200 has 132"),
    ("comm_sms = 128 : i64",
     r"kernel @fused needs 136 SMs \(1 communicate x 128 \+ 1 compute x >= 8\) but h200 has 132"),
])
def test_impossible_requests_are_errors_naming_the_kernel(plan, message):
    with pytest.raises(PkcDiagnostic, match=message) as err:
        partition(kernel_ir(plan=plan))
    assert err.value.line is not None  # located at the kernel


def test_two_large_communicate_workers_do_not_fit():
    with pytest.raises(PkcDiagnostic, match=r"needs 136 SMs \(2 communicate x 64 \+ 1 compute"):
        partition(kernel_ir(("compute", "communicate", "communicate"), "comm_sms = 64 : i64"))


def test_idempotent():
    module, kern = partition(kernel_ir(plan="comm_sms = 24 : i64"))
    first = sms(kern)
    ctx = make_context()
    parse_pipeline("sm-partition")[0].apply(ctx, module)
    assert sms(kern) == first == {"compute": [108], "communicate": [24]}


@settings(max_examples=40, deadline=None, derandomize=True)
@given(comm=st.integers(1, 140), n_compute=st.integers(0, 3), n_comm=st.integers(1, 2))
def test_partitions_fit_and_sit_on_the_grid(comm, n_compute, n_comm):
    roles = ("compute",) * n_compute + ("communicate",) * n_comm
    h200 = get_target("h200")
    try:
        _, kern = partition(kernel_ir(roles, f"comm_sms = {comm} : i64"))
    except PkcDiagnostic as err:
        assert "@fused" in str(err) and "h200" in str(err)
        aligned = -(-comm // 8) * 8
        assert aligned * n_comm + 8 * n_compute > h200.num_sms
        return
    got = sms(kern)
    assert sum(sum(v) for v in got.values()) <= h200.num_sms
    assert all(n % 8 == 0 and n >= 8 and n >= comm for n in got["communicate"])
    assert all(n >= 8 for n in got.get("compute", []))
    if n_compute:
        assert sum(sum(v) for v in got.values()) == h200.num_sms


# ----------------------------------------------------------------------------------------
# on lowered collectives


def _lowered(pipeline: str, shape=(64, 512), world=8):
    t = f"tensor<{shape[0]}x{shape[1]}xbf16>"
    text = f"""
    func.func @main(%x: {t}) -> {t} {{
      %y = pk.all_reduce %x {{world = {world} : i64, reduce = "sum"}} : {t} -> {t}
      func.return %y : {t}
    }}"""
    module = parse_module(text)
    ctx = make_context()
    for p in parse_pipeline(pipeline):
        p.apply(ctx, module)
    verify_module(module)
    return module, next(o for o in module.walk() if isinstance(o, k.KernelOp))


def test_lowered_collective_gets_what_the_model_says():
    _, kern = _lowered("lower-collectives,sm-partition")
    assert sms(kern) == {"communicate": [8]}
    assert remarks_of(kern)[-1] == ("sm-partition: 8 communicate SMs of 132 (h200); "
                                    "8 TMA SMs saturate the link (370 GB/s)")


def test_few_tiles_need_few_sms_but_the_grid_minimum_holds():
    _, kern = _lowered("lower-collectives,sm-partition", shape=(4, 4), world=2)
    assert sms(kern) == {"communicate": [8]}
    assert "at most 1 tile transfer in flight" in remarks_of(kern)[-1]


def test_one_rank_has_no_peer_traffic():
    _, kern = _lowered("lower-collectives{keep-single-rank=true},sm-partition", world=1)
    assert sms(kern) == {"communicate": [8]}
    assert remarks_of(kern)[-1].endswith("no peer traffic (one rank)")


def test_sm_partition_keeps_meaning():
    check_transform(lambda W: _lowered("lower-collectives{all_reduce=two_shot keep-single-rank=true}",
                                       (6, 10), W)[0],
                    lambda m: parse_pipeline("sm-partition")[0].apply(make_context(), m),
                    (1, 2, 4), exact=True)
