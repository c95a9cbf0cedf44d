// RUN: %python -m pkc.emu %s -p 'schedule-matmul{target=b200}' --target sm_100a --sms 4 | FileCheck %s
// RUN: pkc-opt -p 'schedule-matmul{target=b200}' %s | FileCheck %s --check-prefix=PLAN

// python -m pkc.emu: with 8 row blocks of [N, K] B the tuning table picks CTA pairs
// (cta_group::2, 256 x 64 tiles; unmeasured); the pair kernel (odd M = 1000 and N = 72:
// the last pair's odd CTA and the last column tile are partly past the matrix) runs in the
// emulator on 2 resident pairs and matches the reference interpreter. No Blackwell GPU has
// run it.

// CHECK: ok   @matmul: 1 rank(s), sm_100a, {{.*}} {{(bitwise|within tolerance)}}
// CHECK: 1 kernel(s) match the interpreter
// PLAN:  cluster = 2 : i64{{.*}}cta_group = 2 : i64
// PLAN-SAME: 256x64_pair

func.func @mm(%x: tensor<1000x64xbf16>, %w: tensor<72x64xbf16>) -> tensor<1000x72xbf16> {
  %wt = pk.transpose %w {perm = [1, 0]} : tensor<72x64xbf16> -> tensor<64x72xbf16>
  %y = pk.matmul %x, %wt : (tensor<1000x64xbf16>, tensor<64x72xbf16>) -> tensor<1000x72xbf16>
  func.return %y : tensor<1000x72xbf16>
}
