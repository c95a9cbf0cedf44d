"""The layouts torch's async TP (Inductor's micro-pipeline TP and the symmetric-memory fused
ops) fuses, written as a user writes them (functional collectives, ``_scaled_mm``, DTensor,
a 2-D mesh), captured by ``pkc.compile`` and run on W simulated ranks against eager torch.

Each case names the fused kernel(s) it must produce: the pattern, and for gathers and
scatters the layout (batches, scatter dim, fp8). A case that stops fusing, or fuses into
something that computes another answer, fails here. Issue 20 measured 7 of 20 of these
fused; ``test_every_layout_fuses`` is the table, the cases below run it at W = 2 and 3 (odd
shapes: 3 and 5 rows per rank, widths that are not powers of two).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

import pkc
from pkc.dialects import graph as g
from pkc.dialects import kernel as k
from pkc.frontend import fake_process_group, run_eager
from pkc.passes.patterns import FUSION, Fusion
from pkc.target.cost_basics import Pattern

pytestmark = [pytest.mark.filterwarnings("ignore::FutureWarning"),
              pytest.mark.filterwarnings("ignore::UserWarning"),
              pytest.mark.filterwarnings("ignore::pkc.frontend.PkcNotCompiledWarning")]

E4 = torch.float8_e4m3fn
AG, RS, AR, AGK = (Pattern.ALL_GATHER_MM, Pattern.MM_REDUCE_SCATTER, Pattern.MM_ALL_REDUCE,
                   Pattern.ALL_GATHER_K_MM)


def _world():
    return dist.group.WORLD


@dataclass(frozen=True)
class Expect:
    """One fused kernel the case must contain (None: that field is not checked)."""

    pattern: Pattern
    scaled: bool = False
    batches: int | None = None
    scatter_dim: int | None = None
    weights: int | None = None      # AG: how many matmuls the one kernel feeds


@dataclass(frozen=True)
class Case:
    make: Callable[[int], Callable[..., object]]   # rank -> the rank's program
    inputs: Callable[[int, torch.Generator], tuple]  # (W, gen) -> one rank's inputs
    expect: tuple[Expect, ...]
    tolerance: float = 1e-4


def _r(gen, *shape):
    return torch.randn(*shape, generator=gen)


def _f8(gen, *shape):
    return (torch.randn(*shape, generator=gen) * 2).to(E4)


def _pos(gen, *shape):
    return torch.rand(*shape, generator=gen) + 0.5


# ---- all-gather + matmul --------------------------------------------------------------

def ag_2d(rank):
    return lambda a, b: funcol.all_gather_tensor(a, 0, _world()) @ b


def ag_3d_dim0_returned(rank):
    def f(a, b):
        ag = funcol.all_gather_tensor(a, 0, _world())
        return ag, (ag.reshape(-1, ag.shape[-1]) @ b).reshape(*ag.shape[:-1], -1)
    return f


def ag_3d_dim1(rank):  # DTensor Shard(1) sequence parallelism, B = 2 blocks per shard
    def f(a, b):
        ag = funcol.all_gather_tensor(a, 1, _world())
        return (ag.reshape(-1, ag.shape[-1]) @ b).reshape(*ag.shape[:-1], -1)
    return f


def ag_3d_dim2_k(rank):  # the gather along the contraction dim
    def f(a, b):
        ag = funcol.all_gather_tensor(a, 2, _world())
        return (ag.reshape(-1, ag.shape[-1]) @ b).reshape(*ag.shape[:-1], -1)
    return f


def ag_three_matmuls(rank):  # q, k, v of one gathered 3-d activation: gathered once
    def f(a, wq, wk, wv):
        ag = funcol.all_gather_tensor(a, 0, _world())
        rows = lambda: ag.reshape(-1, ag.shape[-1])  # noqa: E731 - a view per user, as torch
        return rows() @ wq, rows() @ wk, rows() @ wv
    return f


def ag_weight_after_first_matmul(rank):  # the second weight is computed late: hoisted
    def f(a, b0, b1):
        ag = funcol.all_gather_tensor(a, 0, _world())
        y0 = ag @ b0
        return y0, ag @ (b1 * 2.0)
    return f


def ag_scaled_tensorwise(rank):
    def f(a, b, sa, sb):
        ag = funcol.all_gather_tensor(a, 0, _world())
        return torch._scaled_mm(ag, b.t(), sa, sb, out_dtype=torch.bfloat16)
    return f


def ag_scaled_rowwise(rank):  # A's row-wise scale gathered with A
    def f(a, b, sa, sb):
        ag = funcol.all_gather_tensor(a, 0, _world())
        sg = funcol.all_gather_tensor(sa, 0, _world())
        return torch._scaled_mm(ag, b.t(), sg, sb, out_dtype=torch.bfloat16)
    return f


def ag_scaled_two_matmuls(rank):  # one gathered fp8 A (and its row scale), two weights
    def f(a, sa, b0, sb0, b1, sb1):
        ag = funcol.all_gather_tensor(a, 0, _world())
        sg = funcol.all_gather_tensor(sa, 0, _world())
        return (torch._scaled_mm(ag, b0.t(), sg, sb0, out_dtype=torch.bfloat16),
                torch._scaled_mm(ag, b1.t(), sg, sb1, out_dtype=torch.bfloat16))
    return f


def ag_scaled_uint8_view(rank):  # torch's fp8 all-gather: bytes gathered, viewed back
    def f(a, b, sa, sb):
        ag = funcol.all_gather_tensor(a.view(torch.uint8), 0, _world()).view(E4)
        return torch._scaled_mm(ag, b.t(), sa, sb, out_dtype=torch.bfloat16)
    return f


def ag_scaled_k_rowwise(rank):  # the gather along K into an fp8 matmul: A's scale is the row's
    def f(a, b, sa, sb):
        ag = funcol.all_gather_tensor(a, 1, _world())
        return torch._scaled_mm(ag, b.t(), sa, sb, out_dtype=torch.bfloat16)
    return f


def ag_scaled_dim1_rowwise(rank):  # Shard(1) blocks into an fp8 matmul, scales gathered alike
    def f(a, b, sa, sb):
        ag = funcol.all_gather_tensor(a, 1, _world())
        sg = funcol.all_gather_tensor(sa, 1, _world())
        return torch._scaled_mm(ag.reshape(-1, ag.shape[-1]), b.t(), sg.reshape(-1, 1), sb,
                                out_dtype=torch.bfloat16)
    return f


# ---- matmul + reduce-scatter / all-reduce ---------------------------------------------

def rs_2d(dim):
    def make(rank):
        return lambda a, b: funcol.reduce_scatter_tensor(a @ b, "sum", dim, _world())
    return make


def rs_3d(dim):
    def make(rank):
        def f(a, b):
            y = (a.reshape(-1, a.shape[-1]) @ b).reshape(*a.shape[:-1], -1)
            return funcol.reduce_scatter_tensor(y, "sum", dim, _world())
        return f
    return make


def rs_scaled(row: bool, dim: int = 0):
    def make(rank):
        def f(a, b, sa, sb):
            y = torch._scaled_mm(a, b.t(), sa, sb, out_dtype=torch.float32)
            return funcol.reduce_scatter_tensor(y, "sum", dim, _world())
        return f
    return make


def ar_2d(rank):
    return lambda a, b: funcol.all_reduce(a @ b, "sum", _world())


def mesh_2d_tp(rank):  # TP (2 ranks) inside the DP groups of a W/2 x 2 mesh
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (dist.get_world_size() // 2, 2), mesh_dim_names=("dp", "tp"))

    def f(x, w1, w2):
        h = funcol.all_gather_tensor(x, 0, mesh["tp"])
        return funcol.reduce_scatter_tensor(torch.relu(h @ w1) @ w2, "sum", 0, mesh["tp"])
    return f


def _scaled_inputs(W, gen, Ms, K, N, row, M_full=None):
    M = M_full if M_full is not None else Ms
    sa = _pos(gen, M, 1) if row else _pos(gen, ())
    sb = _pos(gen, 1, N) if row else _pos(gen, ())
    return (_f8(gen, Ms, K), _f8(gen, N, K), sa, sb)


CASES: dict[str, Case] = {
    "ag-2d": Case(ag_2d, lambda W, gn: (_r(gn, 5, 24), _r(gn, 24, 12)), (Expect(AG, batches=1),)),
    "ag-3d-dim0-returned": Case(ag_3d_dim0_returned, lambda W, gn: (_r(gn, 2, 3, 24), _r(gn, 24, 12)),
                                (Expect(AG),)),
    "ag-3d-dim1": Case(ag_3d_dim1, lambda W, gn: (_r(gn, 2, 3, 24), _r(gn, 24, 12)),
                       (Expect(AG, batches=2),)),
    "ag-3d-dim2-k": Case(ag_3d_dim2_k, lambda W, gn: (_r(gn, 2, 3, 16), _r(gn, 16 * W, 12)),
                         (Expect(AGK),)),
    "ag-three-matmuls": Case(ag_three_matmuls, lambda W, gn: (_r(gn, 2, 3, 24), _r(gn, 24, 12),
                                                               _r(gn, 24, 8), _r(gn, 24, 8)),
                             (Expect(AG, weights=3),)),
    "ag-weight-computed-late": Case(ag_weight_after_first_matmul,
                                    lambda W, gn: (_r(gn, 5, 24), _r(gn, 24, 12), _r(gn, 24, 12)),
                                    (Expect(AG, weights=2),)),
    "ag-fp8-tensorwise": Case(ag_scaled_tensorwise,
                              lambda W, gn: _scaled_inputs(W, gn, 16, 32, 16, False),
                              (Expect(AG, scaled=True),), 2e-2),
    "ag-fp8-rowwise": Case(ag_scaled_rowwise,
                           lambda W, gn: _scaled_inputs(W, gn, 16, 32, 16, True),
                           (Expect(AG, scaled=True),), 2e-2),
    "ag-fp8-two-matmuls": Case(ag_scaled_two_matmuls,
                               lambda W, gn: (_f8(gn, 16, 32), _pos(gn, 16, 1), _f8(gn, 32, 32),
                                              _pos(gn, 1, 32), _f8(gn, 16, 32), _pos(gn, 1, 16)),
                               (Expect(AG, scaled=True, weights=2),), 2e-2),
    "ag-fp8-uint8-view": Case(ag_scaled_uint8_view,
                              lambda W, gn: _scaled_inputs(W, gn, 16, 32, 16, False),
                              (Expect(AG, scaled=True),), 2e-2),
    "ag-fp8-k-rowwise": Case(ag_scaled_k_rowwise,
                             lambda W, gn: (_f8(gn, 16, 32), _f8(gn, 16, 32 * W), _pos(gn, 16, 1),
                                            _pos(gn, 1, 16)),
                             (Expect(AGK, scaled=True),), 2e-2),
    "ag-fp8-dim1-rowwise": Case(ag_scaled_dim1_rowwise,
                                lambda W, gn: (_f8(gn, 2, 8, 32), _f8(gn, 16, 32), _pos(gn, 2, 8, 1),
                                               _pos(gn, 1, 16)),
                                (Expect(AG, scaled=True, batches=2),), 2e-2),
    "rs-2d-rows": Case(rs_2d(0), lambda W, gn: (_r(gn, 5 * W, 24), _r(gn, 24, 12)),
                       (Expect(RS, scatter_dim=0, batches=1),)),
    "rs-2d-cols": Case(rs_2d(1), lambda W, gn: (_r(gn, 5, 24), _r(gn, 24, 8 * W)),
                       (Expect(RS, scatter_dim=1),)),
    "rs-3d-dim0": Case(rs_3d(0), lambda W, gn: (_r(gn, 2 * W, 3, 24), _r(gn, 24, 12)),
                       (Expect(RS, scatter_dim=0),)),
    "rs-3d-dim1": Case(rs_3d(1), lambda W, gn: (_r(gn, 2, 3 * W, 24), _r(gn, 24, 12)),
                       (Expect(RS, scatter_dim=0, batches=2),)),
    "rs-3d-dim2": Case(rs_3d(2), lambda W, gn: (_r(gn, 2, 3, 24), _r(gn, 24, 8 * W)),
                       (Expect(RS, scatter_dim=1),)),
    "rs-fp8-tensorwise": Case(rs_scaled(False),
                              lambda W, gn: _scaled_inputs(W, gn, 16 * W, 32, 16, False),
                              (Expect(RS, scaled=True),), 2e-2),
    "rs-fp8-rowwise": Case(rs_scaled(True),
                           lambda W, gn: _scaled_inputs(W, gn, 16 * W, 32, 16, True),
                           (Expect(RS, scaled=True),), 2e-2),
    "rs-fp8-rowwise-cols": Case(rs_scaled(True, 1),
                                lambda W, gn: _scaled_inputs(W, gn, 16, 32, 16 * W, True),
                                (Expect(RS, scaled=True, scatter_dim=1),), 2e-2),
    "ar-2d": Case(ar_2d, lambda W, gn: (_r(gn, 5, 24), _r(gn, 24, 12)), (Expect(AR),)),
    "mesh-2d-tp": Case(mesh_2d_tp, lambda W, gn: (_r(gn, 3, 24), _r(gn, 24, 12), _r(gn, 12, 20)),
                       (Expect(AG), Expect(RS))),
}


def _fusions(module) -> list[tuple[k.KernelOp, Fusion]]:
    out = []
    for op in module.walk():
        if isinstance(op, k.KernelOp) and FUSION in op.attributes:
            parsed = Fusion.from_attr(op.attributes[FUSION])
            if parsed is not None:
                out.append((op, parsed[0]))
    return out


def _matches(kop: k.KernelOp, f: Fusion, e: Expect) -> bool:
    return (f.pattern is e.pattern and f.scaled == e.scaled
            and (e.batches is None or f.batches == e.batches)
            and (e.scatter_dim is None or f.scatter_dim == e.scatter_dim)
            and (e.weights is None or e.weights == (  # [x, B0, ..] / [x, sx, B0, .., SB0, ..]
                (len(kop.inputs) - 2) // 2 if f.scaled else len(kop.inputs) - 1)))


def fused_and_equal(name: str, W: int) -> None:
    """Compile case ``name`` at W ranks; assert the expected kernels and no collective or
    matmul left beside them; run it on W simulated ranks against eager torch."""
    case = CASES[name]
    gen = torch.Generator().manual_seed(W * 31 + len(name))
    ins = [case.inputs(W, gen) for _ in range(W)]
    with fake_process_group(W), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = pkc.compile(case.make(0), ins[0], pipeline="default{force=true tile=16 tile-k=16}")
    remarks = "\n".join(prog.remarks())
    fusions = _fusions(prog.module)
    for e in case.expect:
        assert any(_matches(kop, f, e) for kop, f in fusions), (
            f"{name} W={W}: no fused kernel {e}; kernels: "
            f"{[(kop.kernel_name.data, f) for kop, f in fusions]}\nremarks:\n{remarks}")
    fused_away = (g.AllGatherOp, g.ReduceScatterOp, g.AllReduceOp, g.MatmulOp)
    left = [o.name for o in prog.module.walk() if isinstance(o, fused_away)]
    assert not left, f"{name} W={W}: left beside the kernels: {left}\nremarks:\n{remarks}"
    expected = run_eager(case.make, ins, world_size=W)
    got = prog.run_simulated(ins)
    for r in range(W):
        assert len(got[r]) == len(expected[r])
        for a, b in zip(got[r], expected[r]):
            torch.testing.assert_close(a.float(), b.float(), rtol=case.tolerance, atol=case.tolerance,
                                       msg=lambda m: f"{name} W={W} rank {r}: {m}")


@pytest.mark.parametrize("name", list(CASES))
def test_every_layout_fuses(name: str) -> None:
    fused_and_equal(name, 2)


@pytest.mark.parametrize("name", ["ag-3d-dim1", "ag-3d-dim2-k", "ag-three-matmuls", "ag-fp8-k-rowwise",
                                  "rs-3d-dim1", "rs-fp8-rowwise", "ag-fp8-rowwise",
                                  "ag-fp8-two-matmuls"])
def test_odd_world(name: str) -> None:
    fused_and_equal(name, 3)


def test_mesh_2d_at_w4() -> None:
    fused_and_equal("mesh-2d-tp", 4)
