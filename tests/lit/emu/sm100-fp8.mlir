// RUN: %python -m pkc.emu %s -p 'schedule-matmul{target=b200}' --target sm_100a | FileCheck %s

// python -m pkc.emu: the fp8 GEMM (pk.scaled_matmul, e4m3 x e5m2, row-wise scales, bf16
// bias) that schedule-matmul builds for b200, lowered to tcgen05.mma kind::f8f6f4 with the
// scales applied after tcgen05.ld, runs in the emulator and matches the reference
// interpreter (no Blackwell GPU has run it).

// CHECK: ok   @scaled_matmul: 1 rank(s), sm_100a, {{.*}} {{(bitwise|within tolerance)}}
// CHECK: 1 kernel(s) match the interpreter

func.func @smm(%a: tensor<200x160xf8E4M3FN>, %b: tensor<96x160xf8E5M2>, %sa: tensor<200x1xf32>, %sb: tensor<1x96xf32>, %bias: tensor<96xbf16>) -> tensor<200x96xbf16> {
  %bt = pk.transpose %b {perm = [1, 0]} : tensor<96x160xf8E5M2> -> tensor<160x96xf8E5M2>
  %y = pk.scaled_matmul %a, %bt scales(%sa, %sb) bias %bias : tensor<96xbf16> : (tensor<200x160xf8E4M3FN>, tensor<160x96xf8E5M2>, tensor<200x1xf32>, tensor<1x96xf32>) -> tensor<200x96xbf16>
  func.return %y : tensor<200x96xbf16>
}
