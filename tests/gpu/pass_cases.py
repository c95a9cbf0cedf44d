"""Kernels produced by pkc's passes (when they exist), for codegen and GPU tests.

Each case is graph-level IR (a collective, or a GEMM with its collective) run through
``overlap{force=true}``, ``lower-collectives``, ``buffer-elision`` and ``sm-partition``
(those that are registered; pkc.passes is imported lazily). A case whose pipeline produces
no ``pk.kernel`` is skipped by the tests, not failed: the pass for it is not there yet.
"""

from __future__ import annotations

from dataclasses import dataclass

PIPELINE = ["overlap{force=true}", "lower-collectives", "buffer-elision", "sm-partition"]


@dataclass
class GraphCase:
    name: str
    world: int
    ir: str
    gemm: bool


def _t(shape, dt):
    return f"tensor<{'x'.join(map(str, shape))}x{dt}>"


def graph_cases(W: int, dt: str) -> list[GraphCase]:
    """The seven patterns, at shapes that 128-wide tiles do not divide."""
    R, C = 8 * 13, 200          # per-rank rows/cols of the collectives
    M, K, N = 8 * 12, 80, 136   # GEMMs (M divisible by every W in 2, 4, 8)
    x, full = _t([R, C], dt), _t([W * R, C], dt)
    cases = [
        GraphCase("all_reduce", W, f"""
func.func @main(%x: {x}) -> {x} {{
  %y = pk.all_reduce %x {{reduce = "sum", world = {W} : i64}} : {x} -> {x}
  func.return %y : {x}
}}""", False),
        GraphCase("all_gather", W, f"""
func.func @main(%x: {x}) -> {full} {{
  %y = pk.all_gather %x {{dim = 0 : i64, world = {W} : i64}} : {x} -> {full}
  func.return %y : {full}
}}""", False),
        GraphCase("reduce_scatter", W, f"""
func.func @main(%x: {full}) -> {x} {{
  %y = pk.reduce_scatter %x {{dim = 0 : i64, reduce = "sum", world = {W} : i64}} : {full} -> {x}
  func.return %y : {x}
}}""", False),
        GraphCase("all_to_all", W, f"""
func.func @main(%x: {full}) -> {full} {{
  %y = pk.all_to_all %x {{split_dim = 0 : i64, concat_dim = 0 : i64, world = {W} : i64}} : {full} -> {full}
  func.return %y : {full}
}}""", False),
    ]
    a, b = _t([M // W, K], dt), _t([K, N], dt)
    ag = _t([M, K], dt)
    mn, mnc = _t([M, N], dt), _t([M // W, N], dt)
    cases += [
        GraphCase("ag_gemm", W, f"""
func.func @main(%a: {a}, %b: {b}) -> {mn} {{
  %g = pk.all_gather %a {{dim = 0 : i64, world = {W} : i64}} : {a} -> {ag}
  %y = pk.matmul %g, %b : ({ag}, {b}) -> {mn}
  func.return %y : {mn}
}}""", True),
        GraphCase("gemm_rs", W, f"""
func.func @main(%a: {ag}, %b: {b}) -> {mnc} {{
  %p = pk.matmul %a, %b : ({ag}, {b}) -> {mn}
  %y = pk.reduce_scatter %p {{dim = 0 : i64, reduce = "sum", world = {W} : i64}} : {mn} -> {mnc}
  func.return %y : {mnc}
}}""", True),
        GraphCase("gemm_ar", W, f"""
func.func @main(%a: {ag}, %b: {b}) -> {mn} {{
  %p = pk.matmul %a, %b : ({ag}, {b}) -> {mn}
  %y = pk.all_reduce %p {{reduce = "sum", world = {W} : i64}} : {mn} -> {mn}
  func.return %y : {mn}
}}""", True),
    ]
    for c in cases:
        c.name = f"pass_{c.name}_W{W}_{dt}"
    return cases


def lower(case: GraphCase):
    """Parses the case and runs the available passes of :data:`PIPELINE`. Returns
    (module, names of the passes run, kernels produced), or raises ImportError when the
    pass registry itself is missing."""
    from pkc.ir import make_context, parse_module, verify_module
    from pkc.passes import available_passes, parse_pipeline
    from pkc.dialects.kernel import KernelOp

    have = available_passes()
    steps = [p for p in PIPELINE if p.split("{")[0] in have]
    module = parse_module(case.ir, case.name)
    verify_module(module)
    ctx = make_context()
    for step in steps:
        for p in parse_pipeline(step):
            p.apply(ctx, module)
    verify_module(module)
    kernels = [op for op in module.walk() if isinstance(op, KernelOp)]
    return module, steps, kernels
