// RUN: %python -m pkc.emu %s -p default | FileCheck %s
// RUN: not %python -m pkc.emu %s --world 4 2>&1 | FileCheck %s --check-prefix=WORLD

// python -m pkc.emu: the pipeline's kernels run in the emulator and match the interpreter.

// CHECK: ok   @all_reduce_one_shot: 2 rank(s), sm_90a, {{.*}} bitwise
// CHECK: 1 kernel(s) match the interpreter
// WORLD: written for a world of 2 ranks, --world is 4

func.func @main(%x: tensor<16x32xf32>) -> tensor<16x32xf32> {
  %y = pk.all_reduce %x {reduce = "sum", world = 2 : i64} : tensor<16x32xf32> -> tensor<16x32xf32>
  func.return %y : tensor<16x32xf32>
}
