"""Sub-group kernels in the runtime and the emulator, on the CPU (2-D meshes 2x2, 2x4).

- :mod:`pkc.runtime.groups`: a group's view of the virtual world's peers (its own
  symmetric buffers with one copy per member, program rank ``members[j]``'s lane for the
  group's rank ``j``, mailbox slots naming the group) and of the portable runner's lanes;
- the Executable launches a sub-group kernel once per group over that group's view
  (fake launchers: no GPU), program ranks mapped to group ranks and back, compiled once;
- under torch.distributed, this rank's group's process group is the device mesh's (fake
  process group), or made; what cannot run is an error naming op and groups; the
  Executable runs this rank's group over a runner of that process group (fake runner);
- the schedule pipeline keeps every kernel's groups (the GEMM + all-reduce pair too), the
  kernels are compiled for one group's size;
- the emulator runs each group's kernel (bitwise equal to the interpreter; the MoE kernel
  too), and programs captured on a 2-D DeviceMesh (a TP-inside-DP MLP and a
  sequence-parallel block, W = 4 and 8, odd rows) run through the scheduled kernels in the
  emulator equal eager torch;
- a 2x2x2 mesh (pp, dp, tp) captured on the fake process group equals eager torch.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import pytest
import torch
import torch.distributed._functional_collectives as funcol

import pkc
from pkc.dialects.kernel import KernelOp
from pkc.dialects.rank_groups import rank_groups
from pkc.emu.check import check_module, world_of
from pkc.frontend import fake_process_group, run_eager
from pkc.interp import InterpError, random_inputs
from pkc.ir import parse_module
from pkc.passes.registry import run_pipeline
from pkc.runtime import groups as G
from pkc.runtime.executable import Executable

pytestmark = [pytest.mark.filterwarnings("ignore::FutureWarning"),
              pytest.mark.filterwarnings("ignore::pkc.frontend.PkcNotCompiledWarning")]


def tp_groups(W: int, tp: int) -> list[list[int]]:
    return [list(range(b, b + tp)) for b in range(0, W, tp)]


def dp_groups(W: int, tp: int) -> list[list[int]]:
    return [list(range(b, W, tp)) for b in range(tp)]


def attr(groups) -> str:
    return "group_ranks = [" + ", ".join("[" + ", ".join(map(str, g)) + "]" for g in groups) + "]"


def collectives_ir(groups, Mc=9, K=64, N=72, t="bf16", fused=True) -> str:
    """all-reduce / reduce-scatter / all-gather over the groups; with ``fused``, the
    fused GEMM + reduce-scatter and the GEMM + all-reduce (a pair of kernels above 2 ranks)."""
    w, a = len(groups[0]), attr(groups)
    M = w * Mc
    x, c, gg = f"tensor<{M}x{N}x{t}>", f"tensor<{Mc}x{N}x{t}>", f"tensor<{M * w}x{N}x{t}>"
    A, B = f"tensor<{M}x{K}x{t}>", f"tensor<{K}x{N}x{t}>"
    mm = f"""
  %p = pk.matmul %a, %b : ({A}, {B}) -> {x}
  %y = pk.reduce_scatter %p {{dim = 0 : i64, reduce = "sum", world = {w} : i64, {a}}} : {x} -> {c}
  %q = pk.matmul %a, %b : ({A}, {B}) -> {x}
  %z = pk.all_reduce %q {{reduce = "sum", world = {w} : i64, {a}}} : {x} -> {x}""" if fused else ""
    res = ("%ar, %rs, %ag, %y, %z", f"{x}, {c}, {gg}, {c}, {x}") if fused else \
        ("%ar, %rs, %ag", f"{x}, {c}, {gg}")
    return f"""func.func @main(%x: {x}, %a: {A}, %b: {B}) -> ({res[1]}) {{
  %ar = pk.all_reduce %x {{reduce = "sum", world = {w} : i64, {a}}} : {x} -> {x}
  %rs = pk.reduce_scatter %x {{dim = 0 : i64, reduce = "sum", world = {w} : i64, {a}}} : {x} -> {c}
  %ag = pk.all_gather %x {{dim = 0 : i64, world = {w} : i64, {a}}} : {x} -> {gg}{mm}
  func.return {res[0]} : {res[1]}
}}"""


def scheduled(ir: str):
    m = parse_module(ir, "groups.mlir")
    run_pipeline("default{force=true},schedule", m)
    return m


# ----------------------------------------------------------------------------------------
# Views of the virtual world (fake parents: no GPU)


class FakeMailbox:
    def __init__(self):
        self.slots = []

    def slot(self, kernel, rank, kinds):
        self.slots.append((kernel, rank))
        return len(self.slots)

    def reports(self, clear=False):
        return []


class FakePeers:
    """A virtual world's peers as the group views use them."""

    trap, sms, device = False, 132, torch.device("cpu")

    def __init__(self, world):
        self.world, self.ranks = world, list(range(world))
        self.mailbox = FakeMailbox()

    def stream(self, rank):
        return 1000 + rank

    def sms_of(self, rank):
        return 10 + rank

    def sync_all(self):
        pass

    def raise_timeouts(self):
        pass


def test_group_peers_are_the_members_only() -> None:
    parent = FakePeers(8)
    a, b = G.group_peers(parent, [4, 5, 6, 7]), G.group_peers(parent, [0, 1, 2, 3])
    assert G.group_peers(parent, [4, 5, 6, 7]) is a         # one view per group
    assert (a.world, a.ranks) == (4, [0, 1, 2, 3])
    assert [a.stream(j) for j in a.ranks] == [1004, 1005, 1006, 1007]
    assert [a.sms_of(j) for j in a.ranks] == [14, 15, 16, 17]
    # a symmetric buffer: one copy per member, the pointer array lists the group's copies
    sa, sb = a.symmetric("k", [3], torch.float32), b.symmetric("k", [3], torch.float32, zero=True)
    assert sorted(sa.tensors) == [0, 1, 2, 3] and len(sa.ptrs) == 4
    assert sa.ptrs_dev.tolist() == sa.ptrs
    assert not set(sa.ptrs) & set(sb.ptrs)                   # groups share nothing
    assert all(bool((t == 0).all()) for t in sb.tensors.values())
    assert a.symmetric_holding(2, sa.tensors[2]) is sa and b.symmetric_holding(2, sa.tensors[2]) is None
    # the mailbox slot names the group; the record's rank stays the group's
    a.mailbox.slot("k", 1, {})
    assert parent.mailbox.slots == [("k [group [4, 5, 6, 7], ranks numbered inside it]", 1)]


@dataclass
class FakeLane:
    rank: int
    stream: int


def test_world_view_launches_members_on_their_lanes() -> None:
    class World:
        def __init__(self):
            self.world, self.lanes, self._errors, self._unchecked = 4, [FakeLane(r, 100 + r) for r in range(4)], {"x": 1}, {}

    w = World()
    v = G.world_view(w, [1, 3])
    assert G.world_view(w, [1, 3]) is v and G.world_view(None, [1, 3]) is None
    assert v.world == 2 and [(ln.rank, ln.stream) for ln in v.lanes] == [(0, 101), (1, 103)]
    assert v._errors == {} and w._errors == {"x": 1} and w.world == 4


# ----------------------------------------------------------------------------------------
# The Executable over sub-groups (fake scheduled launchers)


class FakeStep:
    """A scheduled kernel's launcher: the all-reduce's result per group rank (sum of the
    group ranks' inputs); records the peers and the compiled kernel it got."""

    made: list = []

    def __init__(self, op, peers, ck):
        self.op, self.peers, self.ck = op, peers, ck
        self.persistent = [False] * len(op.results)
        FakeStep.made.append(self)

    def run(self, vals):
        assert sorted(vals) == self.peers.ranks          # the group's ranks, 0 .. w-1
        total = sum(v[0] for v in vals.values())
        return {r: [total.clone()] for r in vals}


@pytest.fixture
def fake_step(monkeypatch):
    import pkc.runtime.scheduled_step as ss

    FakeStep.made = []
    monkeypatch.setattr(ss, "scheduled_step",
                        lambda op, peers, target, timeout_s, ck=None: FakeStep(op, peers, ck))
    return FakeStep


def _ar(groups, rows=64) -> str:
    w, a = len(groups[0]), attr(groups)
    t = f"tensor<{rows}x64xbf16>"
    return f"""func.func @main(%x: {t}) -> {t} {{
  %y = pk.all_reduce %x {{reduce = "sum", world = {w} : i64, {a}}} : {t} -> {t}
  func.return %y : {t}
}}"""


@pytest.mark.parametrize("groups", [tp_groups(4, 2), dp_groups(4, 2), tp_groups(8, 4), dp_groups(8, 4)])
def test_executable_launches_each_group_over_its_peers(fake_step, groups) -> None:
    W = sum(map(len, groups))
    module = scheduled(_ar(groups))
    ex = Executable(module, FakePeers(W), None, target="sm_90a")
    made = fake_step.made
    assert [s.peers.members for s in made] == groups
    assert all(s.peers.world == len(groups[0]) for s in made)
    assert made[0].ck is not None and all(s.ck is made[0].ck for s in made)  # compiled once
    assert len(ex.kernel_report) == 1 and f"groups of {len(groups[0])} ranks {groups}" in ex.kernel_report[0]
    xs = {r: [torch.full((64, 64), float(r + 1)).bfloat16()] for r in range(W)}
    out = ex.run(xs)
    for grp in groups:
        want = float(sum(r + 1 for r in grp))
        for r in grp:
            assert out[r][0].float().unique().tolist() == [want], (r, grp)


def test_executable_names_a_world_that_does_not_fit(fake_step) -> None:
    module = scheduled(_ar(tp_groups(4, 2)))
    with pytest.raises(ValueError, match=r"@all_reduce_\w+ runs in 2 groups of 2 ranks "
                                         r"\[\[0, 1\], \[2, 3\]\], but the world has 8 ranks"):
        Executable(module, FakePeers(8), None, target="sm_90a")


# ----------------------------------------------------------------------------------------
# torch.distributed: this rank's group's process group (fake process group)


@pytest.mark.parametrize("rank,dim,want", [(2, "tp", [2, 3]), (1, "dp", [1, 3]), (0, "tp", [0, 1])])
def test_process_group_is_the_mesh_dimensions(rank, dim, want) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    module = parse_module(_ar(tp_groups(4, 2) if dim == "tp" else dp_groups(4, 2)))
    op = next(o for o in module.walk() if o.name == "pk.all_reduce")
    with fake_process_group(4, rank=rank):
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        pg, members = G.process_group_of(op, rank_groups(op))
        assert members == want and pg is mesh.get_group(dim)
        assert dist.get_rank(pg) == want.index(rank)


def test_process_group_made_when_the_program_has_none() -> None:
    import torch.distributed as dist

    module = parse_module(_ar(dp_groups(8, 4)))
    op = next(o for o in module.walk() if o.name == "pk.all_reduce")
    with fake_process_group(8, rank=5):
        pg, members = G.process_group_of(op, rank_groups(op))
        assert members == [1, 5] and dist.get_process_group_ranks(pg) == [1, 5]
        assert dist.get_rank(pg) == 1


def test_unsupported_group_order_is_named() -> None:
    module = parse_module(_ar([[1, 0], [3, 2]]))
    op = next(o for o in module.walk() if o.name == "pk.all_reduce")
    with fake_process_group(4, rank=0):
        with pytest.raises(NotImplementedError, match=r"'pk.all_reduce' runs in sub-group \[1, 0\] "
                                                      r"\(of \[\[1, 0\], \[3, 2\]\]\) whose ranks are not "
                                                      "in increasing order"):
            G.process_group_of(op, rank_groups(op))


# ----------------------------------------------------------------------------------------
# The schedule level and the emulator, per group


@pytest.mark.parametrize("W,tp", [(4, 2), (8, 4)])
def test_scheduled_kernels_keep_their_groups(W, tp) -> None:
    m = scheduled(collectives_ir(tp_groups(W, tp)))
    kernels = [o for o in m.walk() if isinstance(o, KernelOp)]
    names = [k.kernel_name.data for k in kernels]
    assert names.count("matmul_reduce_scatter") == (1 if tp == 2 else 2), names   # + the pair's
    assert ("all_gather_agp" in names) == (tp > 2), names
    for kop in kernels:
        assert kop.schedule() is not None, kop.kernel_name.data
        assert kop.world_size == tp and rank_groups(kop) == tp_groups(W, tp), kop.kernel_name.data
    assert world_of(m) == W
    from pkc.passes.pipelines import kernel_lines

    lines = kernel_lines(m)     # what pkc-opt --kernels / CompiledProgram.kernels() print
    assert len(lines) == len(kernels)
    assert all(f"runs in {W // tp} groups of {tp} ranks {tp_groups(W, tp)}" in ln for ln in lines), lines


@pytest.mark.parametrize("W,tp,dim,fused", [(4, 2, "tp", False), (4, 2, "dp", False),
                                            (8, 4, "tp", False)])
def test_emulator_runs_each_group(W, tp, dim, fused) -> None:
    """Bitwise equal to the interpreter for the collectives, then the emulated program's
    results equal torch per group. (The fused kernels run in the programs captured on a
    mesh below; fused=True here adds the GEMM + reduce-scatter, whose TMA reduce-adds of
    bf16 partials in arrival order are within a few bf16 steps above 2 ranks, as over a
    whole world: docs/emulator.md; ~10 s more.)"""
    groups = tp_groups(W, tp) if dim == "tp" else dp_groups(W, tp)
    m = scheduled(collectives_ir(groups, Mc=5, K=32, N=24, fused=fused))
    xs = random_inputs(m, W, seed=W)
    res = check_module(m, xs, W, forward_emulated=True,
                       tolerance={torch.bfloat16: (2e-2, 0.5)})
    assert res.ok, str(res.difference)
    exact = {k.kernel: k.exact for k in res.kernels}
    assert all(exact[n] for n in ("all_reduce_ll", "reduce_scatter_llrs", "all_gather_llag")), exact
    w = len(groups[0])
    for grp in groups:
        x = sum(xs[r][0].double() for r in grp)
        p = sum(xs[r][1].double() @ xs[r][2].double() for r in grp)
        for j, r in enumerate(grp):
            ar, rs, ag = res.outputs[r][:3]
            assert torch.equal(ag, torch.cat([xs[q][0] for q in grp]))
            torch.testing.assert_close(ar.double(), x, rtol=1e-2, atol=0.1)
            torch.testing.assert_close(rs.double(), x.chunk(w)[j], rtol=1e-2, atol=0.1)
            if fused:
                y, z = res.outputs[r][3:]
                torch.testing.assert_close(y.double(), p.chunk(w)[j], rtol=2e-2, atol=0.5)
                torch.testing.assert_close(z.double(), p, rtol=2e-2, atol=0.5)


def test_emulator_names_a_world_that_does_not_fit() -> None:
    m = scheduled(collectives_ir(tp_groups(4, 2), Mc=5, K=32, N=24))
    xs = random_inputs(m, 6, seed=0)
    with pytest.raises(InterpError, match=r"runs in 2 groups of 2 ranks"):
        check_module(m, xs, 6)


# ----------------------------------------------------------------------------------------
# Programs captured on a 2-D DeviceMesh, through the scheduled kernels in the emulator


def _mlp(dp, tp):
    """TP MLP inside each DP group: column-parallel, gelu, row-parallel + all-reduce over
    TP; a DP all-reduce (sum) of the output's column sums."""
    def make(rank):
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))

        def mlp(x, w1, w2):
            y = funcol.all_reduce(torch.nn.functional.gelu(x @ w1) @ w2, "sum", mesh["tp"])
            return y, funcol.all_reduce(y.sum(0), "sum", mesh["dp"])
        return mlp
    return make


def _sp_block(dp, tp):
    """Sequence parallel on the TP dimension: gather the sequence, MLP, scatter it back,
    a residual add."""
    def make(rank):
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))

        def block(x, w1, w2):
            h = funcol.all_gather_tensor(x, 0, mesh["tp"])
            y = torch.relu(h @ w1) @ w2
            return x + funcol.reduce_scatter_tensor(y, "sum", 0, mesh["tp"])
        return block
    return make


@pytest.mark.parametrize("make,dp,tp,rows", [(_mlp, 2, 2, 7), (_sp_block, 2, 4, 3)])
def test_mesh_program_in_the_emulator_equals_eager(make, dp, tp, rows) -> None:
    W = dp * tp
    K, F, N = 32, 24, 32
    gen = torch.Generator().manual_seed(W + rows)
    R = rows * tp if make is _mlp else rows
    ins = [tuple((torch.randn(s, generator=gen) / 2).bfloat16() for s in ((R, K), (K, F), (F, N)))
           for _ in range(W)]
    if make is _sp_block:   # the residual add needs N == K
        ins = [(x, w1, w2[:, :K].contiguous()) for x, w1, w2 in ins]
    with fake_process_group(W), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = pkc.compile(make(dp, tp)(0), ins[0], pipeline="default{force=true}", target="h200")
    module = prog.kernel_module
    kernels = [o for o in module.walk() if isinstance(o, KernelOp)]
    assert any(rank_groups(k) == tp_groups(W, tp) and k.schedule() is not None for k in kernels)
    res = check_module(module, prog.arguments(ins), W, forward_emulated=True,
                       tolerance={torch.bfloat16: (2e-2, 0.25)})
    assert res.ok, str(res.difference)
    got = prog._user_outputs(res.outputs)
    expected = run_eager(make(dp, tp), ins, world_size=W)
    for r in range(W):
        for a, b in zip(got[r], expected[r]):
            torch.testing.assert_close(a.float(), b.float(), rtol=3e-2, atol=0.25,
                                       msg=lambda m: f"rank {r}: {m}")
    # the reference differs between TP groups (a program run over the wrong group would not)
    assert not torch.allclose(expected[0][0].float(), expected[tp][0].float(), atol=0.5)


def test_mesh3d_pkc_equals_eager() -> None:
    """A 2x2x2 mesh (pp, dp, tp): TP all-gather / reduce-scatter around an MLP, a DP
    all-reduce over the middle dimension (groups [0, 2], [1, 3], [4, 6], [5, 7]) and a PP
    all-reduce over the outer one; each collective's kernel runs in its dimension's groups
    and pkc (interpreter) equals eager torch on 8 simulated ranks."""
    def make(rank):
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh("cpu", (2, 2, 2), mesh_dim_names=("pp", "dp", "tp"))

        def block(x, w1, w2):
            h = funcol.all_gather_tensor(x, 0, mesh["tp"])
            y = funcol.reduce_scatter_tensor(torch.relu(h @ w1) @ w2, "sum", 0, mesh["tp"])
            return y, funcol.all_reduce(y.sum(0), "sum", mesh["dp"]), funcol.all_reduce(y, "max", mesh["pp"])
        return block

    W = 8
    gen = torch.Generator().manual_seed(3)
    ins = [tuple(torch.randn(s, generator=gen) for s in ((3, 16), (16, 12), (12, 8))) for _ in range(W)]
    with fake_process_group(W), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = pkc.compile(make(0), ins[0], pipeline="default{force=true tile=16 tile-k=16}")
    found = {str(rank_groups(o)) for o in prog.module.walk() if isinstance(o, KernelOp)}
    assert found == {str(g) for g in ([[0, 1], [2, 3], [4, 5], [6, 7]], [[0, 2], [1, 3], [4, 6], [5, 7]],
                                      [[0, 4], [1, 5], [2, 6], [3, 7]])}, found
    got = prog.run_simulated(ins)
    expected = run_eager(make, ins, world_size=W)
    for r in range(W):
        for a, b in zip(got[r], expected[r]):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4, msg=lambda m: f"rank {r}: {m}")
    assert not torch.allclose(expected[0][1], expected[1][1])        # DP groups differ


def test_moe_kernel_per_group_in_the_emulator() -> None:
    """The scheduled MoE kernel (dispatch + grouped GEMM + combine) over TP groups of a
    2x2 mesh: one group's kernel, emulated per group, bitwise equal to the interpreter."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from moe_ir import module_text

    ir = module_text(2, 2, 5, 24, 32).replace("world = 2 : i64}", f"world = 2 : i64, {attr(tp_groups(4, 2))}}}")
    m = scheduled(ir)
    (kop,) = [o for o in m.walk() if isinstance(o, KernelOp)]
    assert kop.schedule() is not None and rank_groups(kop) == tp_groups(4, 2)
    res = check_module(m, random_inputs(m, 4, 0, func="moe"), 4, func_name="moe")
    assert res.ok and res.kernels[0].exact, (str(res.difference), res.kernels)


class FakeRunner:
    """Stands for :class:`pkc.runtime.symm.DistributedRunner` over a process group (no GPU):
    its rank is this process's rank in the group, its peers that group's."""

    made: list = []

    def __init__(self, group=None, device_index=None):
        import torch.distributed as dist

        self.group, self.rank, self.world = group, dist.get_rank(group), dist.get_world_size(group)
        self.peers = type("GroupDistPeers", (), {"world": self.world, "ranks": [self.rank],
                                                 "device": torch.device("cpu"), "group": group})()
        FakeRunner.made.append(self)


def test_executable_under_torch_distributed_runs_this_ranks_group(fake_step, monkeypatch) -> None:
    """Rank 3 of a 2x2 mesh under torch.distributed (fake PG; fake runner and launcher): the
    kernel runs over a runner of the mesh's TP group [2, 3] as its rank 1; the result comes
    back under program rank 3; a second kernel of the same groups shares that runner."""
    from torch.distributed.device_mesh import init_device_mesh

    import pkc.runtime.symm as symm

    FakeRunner.made = []
    monkeypatch.setattr(symm, "DistributedRunner", FakeRunner)
    monkeypatch.setattr(G, "_DIST", {})
    a, t = attr(tp_groups(4, 2)), "tensor<64x64xbf16>"
    two = f"""func.func @main(%x: {t}) -> {t} {{
  %y = pk.all_reduce %x {{reduce = "sum", world = 2 : i64, {a}}} : {t} -> {t}
  %z = pk.all_reduce %y {{reduce = "sum", world = 2 : i64, {a}}} : {t} -> {t}
  func.return %z : {t}
}}"""
    with fake_process_group(4, rank=3):
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        world = type("WorldPeers", (), {"world": 4, "ranks": [3], "device": torch.device("cpu"),
                                        "raise_timeouts": lambda self: None})()
        ex = Executable(scheduled(two), world, None, target="sm_90a", distributed=True)
        assert len(FakeRunner.made) == 1 and FakeRunner.made[0].group is mesh.get_group("tp")
        assert [s.peers.ranks for s in fake_step.made] == [[1], [1]]
        assert all(s.peers.group is mesh.get_group("tp") for s in fake_step.made)
        out = ex.run({3: [torch.full((64, 64), 2.0).bfloat16()]})
        assert list(out) == [3] and out[3][0].float().unique().tolist() == [2.0]
