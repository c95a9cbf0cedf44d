// RUN: %python -m pkc.emu %s -p 'default,schedule' | FileCheck %s
// RUN: not %python -m pkc.emu %s --world 2 2>&1 | FileCheck %s --check-prefix=WORLD

// python -m pkc.emu on collectives over the sub-groups of a 2x2 mesh: the program has 4
// ranks (the groups' union), each kernel is compiled for one group of 2 and emulated once
// per group, its members as ranks 0 and 1; every output matches the interpreter's
// per-group semantics.

// CHECK: ok   @all_reduce_ll: 4 rank(s), sm_90a, {{.*}} bitwise
// CHECK: ok   @all_gather_llag: 4 rank(s), sm_90a, {{.*}} bitwise
// CHECK: 2 kernel(s) match the interpreter
// WORLD: written for a world of 4 ranks, --world is 2

func.func @main(%x: tensor<10x24xbf16>) -> (tensor<10x24xbf16>, tensor<20x24xbf16>) {
  %y = pk.all_reduce %x {reduce = "sum", world = 2 : i64, group_ranks = [[0, 1], [2, 3]]} : tensor<10x24xbf16> -> tensor<10x24xbf16>
  %g = pk.all_gather %x {dim = 0 : i64, world = 2 : i64, group_ranks = [[0, 2], [1, 3]]} : tensor<10x24xbf16> -> tensor<20x24xbf16>
  func.return %y, %g : tensor<10x24xbf16>, tensor<20x24xbf16>
}
