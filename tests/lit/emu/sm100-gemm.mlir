// RUN: %python -m pkc.emu %s -p 'schedule-matmul{target=b200}' --target sm_100a | FileCheck %s
// RUN: not %python -m pkc.emu %s -p 'schedule-matmul{target=b200}' --target sm_90a 2>&1 | FileCheck %s --check-prefix=SM90

// python -m pkc.emu: the tensor-memory GEMM that schedule-matmul builds for b200, lowered
// to tcgen05 (sm_100a), runs in the emulator and matches the reference interpreter (no
// Blackwell GPU has run it). The same schedule has no sm_90a lowering (its accumulators
// are the CTA's, in tensor memory).

// CHECK: ok   @matmul: 1 rank(s), sm_100a, {{.*}} {{(bitwise|within tolerance)}}
// CHECK: 1 kernel(s) match the interpreter
// SM90: needs sm_100a

func.func @mm(%x: tensor<200x72xbf16>, %w: tensor<136x72xbf16>) -> tensor<200x136xbf16> {
  %wt = pk.transpose %w {perm = [1, 0]} : tensor<136x72xbf16> -> tensor<72x136xbf16>
  %y = pk.matmul %x, %wt : (tensor<200x72xbf16>, tensor<72x136xbf16>) -> tensor<200x136xbf16>
  func.return %y : tensor<200x136xbf16>
}
