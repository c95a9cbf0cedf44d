"""Graph-level ops in the interpreter agree with torch, per rank and across ranks."""

import pytest
import torch

from pkc.interp import EquivalenceError, InterpError, check_equivalent, interpret, random_inputs
from pkc.ir import parse_module


def run(text: str, world: int, seed: int = 0):
    module = parse_module(text, "test.mlir")
    module.verify()
    inputs = random_inputs(module, world, seed)
    return inputs, interpret(module, inputs, world)


def one(body: str, args: str, results: str) -> str:
    return f"func.func @main({args}) -> ({results}) {{\n{body}\n}}"


def test_matmul_rounds_once_from_f32():
    text = one(
        """  %c = pk.matmul %a, %b : (tensor<3x5x7xbf16>, tensor<3x7x4xbf16>) -> tensor<3x5x4xbf16>
  func.return %c : tensor<3x5x4xbf16>""",
        "%a: tensor<3x5x7xbf16>, %b: tensor<3x7x4xbf16>", "tensor<3x5x4xbf16>")
    (inputs, outputs) = run(text, 2)
    for r in range(2):
        a, b = inputs[r]
        assert torch.equal(outputs[r][0], (a.float() @ b.float()).bfloat16())


@pytest.mark.parametrize("fn,torch_fn", [
    ("gelu", lambda x: torch.nn.functional.gelu(x)),
    ("gelu_tanh", lambda x: torch.nn.functional.gelu(x, approximate="tanh")),
    ("silu", torch.nn.functional.silu),
    ("relu", torch.relu),
    ("tanh", torch.tanh),
    ("exp", torch.exp),
    ("neg", torch.neg),
    ("sigmoid", torch.sigmoid),
])
def test_unary_maps(fn, torch_fn):
    text = one(f"""  %y = pk.map "{fn}" %x : (tensor<4x8xbf16>) -> tensor<4x8xbf16>
  func.return %y : tensor<4x8xbf16>""", "%x: tensor<4x8xbf16>", "tensor<4x8xbf16>")
    inputs, outputs = run(text, 1)
    assert torch.equal(outputs[0][0], torch_fn(inputs[0][0].float()).bfloat16())


def test_broadcasting_binary_map_and_compare_and_where():
    text = one("""  %s = pk.map "mul" %a, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %m = pk.map "gt" %s, %a : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xi1>
  %w = pk.map "where" %m, %s, %a : (tensor<4x8xi1>, tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return %w : tensor<4x8xf32>""", "%a: tensor<4x8xf32>, %b: tensor<8xf32>", "tensor<4x8xf32>")
    inputs, outputs = run(text, 1)
    a, b = inputs[0]
    s = a * b
    assert torch.equal(outputs[0][0], torch.where(s > a, s, a))


def test_softmax_from_primitives():
    text = one("""  %m = pk.reduce "max" %x {dims = [1], keepdim} : tensor<4x8xf32> -> tensor<4x1xf32>
  %d = pk.map "sub" %x, %m : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %e = pk.map "exp" %d : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %s = pk.reduce "sum" %e {dims = [1], keepdim} : tensor<4x8xf32> -> tensor<4x1xf32>
  %y = pk.map "div" %e, %s : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>""", "%x: tensor<4x8xf32>", "tensor<4x8xf32>")
    inputs, outputs = run(text, 1)
    torch.testing.assert_close(outputs[0][0], torch.softmax(inputs[0][0], dim=1))


def test_layout_ops():
    text = one("""  %r = pk.reshape %x : tensor<4x6xf32> -> tensor<2x2x6xf32>
  %t = pk.transpose %r {perm = [2, 0, 1]} : tensor<2x2x6xf32> -> tensor<6x2x2xf32>
  %s = pk.slice %t {dim = 0 : i64, start = 1 : i64, end = 6 : i64, step = 2 : i64} : tensor<6x2x2xf32> -> tensor<3x2x2xf32>
  %b = pk.broadcast %v : tensor<2x1xf32> -> tensor<3x2x2xf32>
  %c = pk.concat %s, %b {dim = 2 : i64} : (tensor<3x2x2xf32>, tensor<3x2x2xf32>) -> tensor<3x2x4xf32>
  %k = pk.constant {value = 2.5 : f32} : tensor<3x2x4xf32>
  %y = pk.map "add" %c, %k : (tensor<3x2x4xf32>, tensor<3x2x4xf32>) -> tensor<3x2x4xf32>
  func.return %y : tensor<3x2x4xf32>""", "%x: tensor<4x6xf32>, %v: tensor<2x1xf32>", "tensor<3x2x4xf32>")
    inputs, outputs = run(text, 1)
    x, v = inputs[0]
    s = x.reshape(2, 2, 6).permute(2, 0, 1)[1:6:2]
    expected = torch.cat([s, v.expand(3, 2, 2)], dim=2) + 2.5
    assert torch.equal(outputs[0][0], expected)


COLLECTIVES = one("""  %ar = pk.all_reduce %x {reduce = "sum", world = W : i64} : tensor<8x6xf32> -> tensor<8x6xf32>
  %ag = pk.all_gather %x {dim = 1 : i64, world = W : i64} : tensor<8x6xf32> -> tensor<8xGxf32>
  %mx = pk.all_reduce %x {reduce = "max", world = W : i64} : tensor<8x6xf32> -> tensor<8x6xf32>
  %big = pk.all_gather %x {dim = 0 : i64, world = W : i64} : tensor<8x6xf32> -> tensor<Rx6xf32>
  %rs = pk.reduce_scatter %big {dim = 0 : i64, reduce = "sum", world = W : i64} : tensor<Rx6xf32> -> tensor<8x6xf32>
  %a2a = pk.all_to_all %big {split_dim = 0 : i64, concat_dim = 1 : i64, world = W : i64} : tensor<Rx6xf32> -> tensor<8xGxf32>
  func.return %ar, %ag, %mx, %rs, %a2a : tensor<8x6xf32>, tensor<8xGxf32>, tensor<8x6xf32>, tensor<8x6xf32>, tensor<8xGxf32>""",
    "%x: tensor<8x6xf32>", "tensor<8x6xf32>, tensor<8xGxf32>, tensor<8x6xf32>, tensor<8x6xf32>, tensor<8xGxf32>")


@pytest.mark.parametrize("world", [1, 2, 3, 4, 8])
def test_collectives_match_their_definitions(world):
    text = COLLECTIVES.replace("W :", f"{world} :").replace("xGx", f"x{6 * world}x").replace("Rx6", f"{8 * world}x6")
    inputs, outputs = run(text, world)
    xs = [i[0] for i in inputs]
    total = torch.stack([x.double() for x in xs]).sum(0).float()
    gathered0 = torch.cat(xs, 0)
    for r in range(world):
        ar, ag, mx, rs, a2a = outputs[r]
        torch.testing.assert_close(ar, total)
        assert torch.equal(ag, torch.cat(xs, 1))
        assert torch.equal(mx, torch.stack(xs).amax(0))
        # every rank contributes the same gathered tensor, so the sum is W times it
        torch.testing.assert_close(rs, (gathered0 * world).chunk(world, 0)[r])
        # rank r receives chunk r of every rank's gathered tensor (the same everywhere)
        assert torch.equal(a2a, torch.cat([gathered0.chunk(world, 0)[r]] * world, 1))


def test_collective_world_mismatch_is_an_error():
    text = COLLECTIVES.replace("W :", "4 :").replace("xGx", "x24x").replace("Rx6", "32x6")
    module = parse_module(text, "c.mlir")
    with pytest.raises(InterpError, match=r"'pk.all_reduce' at c.mlir:2:\d+ is written for a world of 4 ranks"):
        interpret(module, random_inputs(module, 2, 0), 2)


def test_equivalence_checker_accepts_equal_and_rejects_different_programs():
    base = one("""  %y = pk.map "mul" %x, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>""", "%x: tensor<4x8xf32>", "tensor<4x8xf32>")
    same = base.replace('"mul" %x, %x', '"pow" %x, %two').replace(
        "  %y", "  %two = pk.constant {value = 2.0 : f32} : tensor<4x8xf32>\n  %y").replace(
        "(tensor<4x8xf32>, tensor<4x8xf32>)", "(tensor<4x8xf32>, tensor<4x8xf32>)")
    different = base.replace('"mul"', '"add"')
    a, b, c = (parse_module(t, "m.mlir") for t in (base, same, different))
    check_equivalent(a, b, world_size=2)
    with pytest.raises(EquivalenceError, match=r"W=2 seed=0 rank 0 output 0: \d+ of 32 elements outside"):
        check_equivalent(a, c, world_size=2)
    with pytest.raises(EquivalenceError, match="elements differ \\(exact comparison\\)"):
        check_equivalent(a, c, world_size=1, exact=True)
