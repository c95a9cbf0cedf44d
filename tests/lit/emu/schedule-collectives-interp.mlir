// RUN: %python -m pkc.emu %s -p "lower-collectives{all_reduce=one_shot reduce_scatter=direct},schedule-collectives" --exact | FileCheck %s

// The scheduled collectives (schedule level, pks comm ops) run in the schedule-level
// interpreter (W simulated ranks: epochs, signals, LL flags) and, as PTX, in the emulator:
// the two agree bitwise.

// CHECK-DAG: ok   @all_reduce_ll: 2 rank(s), sm_90a, {{.*}} bitwise
// CHECK-DAG: ok   @reduce_scatter_llrs: 2 rank(s), sm_90a, {{.*}} bitwise
// CHECK: 2 kernel(s) match the interpreter

func.func @ar(%x: tensor<1184xbf16>) -> tensor<1184xbf16> {
  %y = pk.all_reduce %x {reduce = "sum", world = 2 : i64} : tensor<1184xbf16> -> tensor<1184xbf16>
  func.return %y : tensor<1184xbf16>
}

func.func @rs(%x: tensor<1x1x592xf32>) -> tensor<1x1x296xf32> {
  %y = pk.reduce_scatter %x {reduce = "sum", world = 2 : i64, dim = 2 : i64} : tensor<1x1x592xf32> -> tensor<1x1x296xf32>
  func.return %y : tensor<1x1x296xf32>
}
