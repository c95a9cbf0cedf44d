"""Frontend op coverage: small single-rank programs, interp(imported IR) == eager torch."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

from pkc.api import compile as pkc_compile
from pkc.frontend import PkcNotCompiledWarning

pytestmark = pytest.mark.filterwarnings("ignore::pkc.frontend.PkcNotCompiledWarning")

G = torch.Generator().manual_seed(0)


def r(*shape, dtype=torch.float32):
    return torch.randn(*shape, generator=G).to(dtype)


def ln_bf16(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps=1e-5)


def attention_masked(q, k, v):
    s = q @ k.transpose(-1, -2) * 0.5
    mask = torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool).triu(1)
    return torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1) @ v


CASES = {
    # name: (fn, inputs, ops that must NOT be opaque are implied: expected opaque set)
    "softmax_logsoftmax": (lambda x: (torch.softmax(x, -1), F.log_softmax(x, dim=1)), [r(3, 5)], set()),
    "softmax_bf16": (lambda x: torch.softmax(x, -1), [r(4, 8, dtype=torch.bfloat16)], set()),
    "layer_norm_bf16": (ln_bf16, [r(2, 3, 8, dtype=torch.bfloat16), r(8, dtype=torch.bfloat16),
                                  r(8, dtype=torch.bfloat16)], set()),
    "rms_norm": (lambda x, w: F.rms_norm(x, (8,), w, eps=1e-6), [r(2, 3, 8), r(8)], set()),
    "var_mean_std": (lambda x: (*torch.var_mean(x, dim=-1, keepdim=True), x.std(0)), [r(4, 6)], set()),
    "reductions": (lambda x: (x.sum(), x.sum((0, 2), keepdim=True), x.mean(1), x.amax(-1),
                              x.amin((0, 1)), x.max(), x.max(dim=1).values, x.min(-1, keepdim=True)[0]),
                   [r(2, 3, 4)], set()),
    "sum_dtype_int": (lambda x: ((x > 0).sum(-1), x.sum(-1, dtype=torch.float64)), [r(3, 4)], set()),
    "elementwise": (lambda x, y: (x + 2 * y, x - y, torch.add(x, y, alpha=0.5), 3 - x, x * y, x / y,
                                  x / 4, torch.maximum(x, y), torch.minimum(x, y), -x, x.abs(),
                                  x.exp(), torch.tanh(x), torch.sigmoid(x), F.relu(x), F.silu(x),
                                  F.gelu(x), F.gelu(x, approximate="tanh"), x.square(),
                                  torch.rsqrt(x.abs() + 1), torch.sqrt(x.abs()), torch.log(x.abs() + 1),
                                  torch.reciprocal(y), x.pow(3), torch.pow(2.0, x), x ** y.abs(),
                                  x.clamp(-0.5, 0.5), x.clamp(min=0.1), F.hardtanh(x)),
                    [r(3, 4), r(3, 4)], set()),
    "compare_where": (lambda x, y: (x > y, x <= 0.5, x == x, x != y, torch.where(x > 0, x, y),
                                    torch.where(x > 0, x, 0.0), x.masked_fill(x < 0, -1.0),
                                    torch.logical_not(x > 0)),
                      [r(3, 4), r(3, 4)], set()),
    "promotion": (lambda x, i, h: (x + i, i * 2, i / 2, x * h, h + 1.5, (i + i).to(torch.float32)),
                  [r(3, 4), torch.randint(0, 5, (3, 4), generator=G), r(4, dtype=torch.bfloat16)], set()),
    "casts": (lambda x: (x.to(torch.bfloat16), x.half().float(), x.to(torch.float64), x.double().sum(),
                         (x > 0).float(), x.to(torch.int32)), [r(3, 4) * 4], set()),
    "matmuls": (lambda a, b, c, bias: (a @ b, torch.addmm(bias, a, b, beta=0.5, alpha=2.0),
                                       torch.baddbmm(c, c, c.transpose(1, 2)), torch.bmm(c, c),
                                       torch.matmul(c, b[:, :4]), F.linear(a, b.t(), bias)),
                [r(3, 4), r(4, 5), r(2, 4, 4), r(5)], set()),
    "matmul_bf16": (lambda a, b: (a @ b, F.linear(a, b.t())),
                    [r(8, 16, dtype=torch.bfloat16), r(16, 8, dtype=torch.bfloat16)], set()),
    "views": (lambda x: (x.view(6, 4), x.reshape(-1), x.t() if x.dim() == 2 else x.transpose(0, 2),
                         x.permute(2, 0, 1), x.unsqueeze(1).expand(2, 5, 3, 4), x[:, 1], x[..., 1:3],
                         x[:, ::2], x.narrow(2, 1, 2), x.flatten(1), x[None], x[:, -1:].squeeze(1)),
              [r(2, 3, 4)], set()),
    "split_cat_stack": (lambda x: (*x.split(2, dim=-1), *x.split([1, 3], dim=1), *x.chunk(2, 0),
                                   *x.unbind(1), torch.cat([x, x * 2], 1),
                                   torch.stack([x, x + 1], dim=1), torch.cat([x, x.to(torch.bfloat16)], 0)),
                        [r(2, 4, 4)], set()),
    "logical": (lambda x, y: ((x > 0) & (y > 0), torch.logical_or(x > 0, y < 0), (x > 0) ^ (y > 0),
                              torch.logical_and(x, y > 0)), [r(3, 4), r(3, 4)], set()),
    "folded_constants": (lambda x: x + torch.arange(4) * 0.5 + torch.ones(4, 4).tril()[1],
                         [r(3, 4)], set()),
    "constants": (lambda x: (x + torch.ones(3, 4), torch.zeros_like(x) + x, torch.full((3, 4), 2.5) * x,
                             x.new_ones(4) + x), [r(3, 4)], set()),
    "attention_mask": (attention_masked, [r(2, 4, 8), r(2, 4, 8), r(2, 4, 8)], set()),
    "opaque_ops": (lambda x, idx: (torch.sort(x, dim=-1).values, torch.topk(x, 2).indices,
                                   torch.cumsum(x, 0), torch.gather(x, 1, idx),
                                   x.index_select(0, idx[:, 0]), x.max(dim=1).indices,
                                   torch.flip(x, [0])),
                   [r(3, 4), torch.randint(0, 3, (3, 2), generator=G)],
                   {"aten.sort.default", "aten.topk.default", "aten.cumsum.default",
                    "aten.gather.default", "aten.index_select.default", "aten.max.dim",
                    "aten.flip.default"}),
    "embedding": (lambda ids, w: F.embedding(ids, w) * 2, [torch.randint(0, 10, (2, 3), generator=G), r(10, 4)],
                  {"aten.embedding.default"}),
}


def _flat(out):
    from torch.utils._pytree import tree_leaves

    return [x for x in tree_leaves(out) if isinstance(x, torch.Tensor)]


@pytest.mark.parametrize("name", list(CASES))
def test_op_lowering_matches_eager(name: str) -> None:
    fn, inputs, opaque = CASES[name]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prog = pkc_compile(fn, inputs)
    assert set(prog.not_compiled) == opaque, prog.ir()
    notes = {str(w.message) for w in caught if issubclass(w.category, PkcNotCompiledWarning)}
    assert notes == {f"pkc: not compiled, runs through torch: {op}" for op in opaque}
    got = prog.run_simulated([inputs])[0]
    expected = _flat(fn(*inputs))
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g.dtype == e.dtype and g.shape == e.shape, (i, g.dtype, e.dtype, g.shape, e.shape)
        low = e.dtype in (torch.bfloat16, torch.float16)
        torch.testing.assert_close(g, e, atol=2e-2 if low else 1e-5, rtol=2e-2 if low else 1e-5,
                                   equal_nan=True, msg=lambda m: f"{name} output {i}: {m}")
