// RUN: not pkc-opt %s -p default --emit=ptx 2>&1 | FileCheck %s
// An fp8 all_gather (bytes only) lowers to a kernel-level gather; the portable lowering
// has no 8-bit floats and says so at the user's op, naming the kernel and the type.

// CHECK: fp8-portable.mlir:8:3: error: codegen (sm_90a): kernel 'all_gather_direct': !pk.buffer<{{.*}}xf8E4M3FN> holds 8-bit floats, which the portable sm_90a lowering does not take
// CHECK-NOT: internal error
func.func @main(%x: tensor<16x64xf8E4M3FN>) -> tensor<64x64xf8E4M3FN> {
  %y = pk.all_gather %x {dim = 0 : i64, world = 4 : i64} : tensor<16x64xf8E4M3FN> -> tensor<64x64xf8E4M3FN>
  func.return %y : tensor<64x64xf8E4M3FN>
}
