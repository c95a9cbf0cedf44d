// overlap does not fuse an fp8 scaled matmul with its collective where the target has no
// scheduled fp8 kernel of its kind and form (unscheduled_fp8; here an f32 result):
// the cost model predicts a fused win (it does for the same shapes in bf16, @ag_bf16) but
// assumes a fast kernel, and the fp8 one would run on the portable path (scalar FMAs). The
// remark says why at the user's line; force=true still fuses it (tests, the emulator).
// RUN: pkc-opt -p default --remarks %s 2>&1 | FileCheck %s
// RUN: pkc-opt -p 'default{force=true}' %s | FileCheck %s --check-prefix=FORCE

// CHECK: overlap-fp8-unscheduled.mlir:21:3: remark: [pk.kernel] left unfused: all_gather+mm: no scheduled fp8 kernel for this all_gather_mm on sm_90a: result f32: the scheduled fp8 GEMM stores bf16 or f16
// CHECK: overlap-fp8-unscheduled.mlir:26:3: remark: [pk.kernel] fused all_gather+mm: predicted
// CHECK-LABEL: func.func @ag_fp8
// CHECK:       pk.kernel "all_gather_direct"
// CHECK:       pk.scaled_matmul
// CHECK-LABEL: func.func @ag_bf16
// CHECK:       pk.kernel "all_gather_matmul"

// FORCE-LABEL: func.func @ag_fp8
// FORCE-NOT:   pk.scaled_matmul
// FORCE:       pk.kernel "all_gather_matmul"{{.*}}scaled = true
func.func @ag_fp8(%x: tensor<1024x8192xf8E4M3FN>, %b: tensor<8192x8192xf8E4M3FN>, %sa: tensor<1xf32>, %sb: tensor<1xf32>) -> tensor<8192x8192xf32> {
  %g = pk.all_gather %x {dim = 0 : i64, world = 8 : i64} : tensor<1024x8192xf8E4M3FN> -> tensor<8192x8192xf8E4M3FN>
  %y = pk.scaled_matmul %g, %b scales(%sa, %sb) : (tensor<8192x8192xf8E4M3FN>, tensor<8192x8192xf8E4M3FN>, tensor<1xf32>, tensor<1xf32>) -> tensor<8192x8192xf32>
  func.return %y : tensor<8192x8192xf32>
}
func.func @ag_bf16(%x: tensor<1024x8192xbf16>, %b: tensor<8192x8192xbf16>) -> tensor<8192x8192xbf16> {
  %g = pk.all_gather %x {dim = 0 : i64, world = 8 : i64} : tensor<1024x8192xbf16> -> tensor<8192x8192xbf16>
  %y = pk.matmul %g, %b : (tensor<8192x8192xbf16>, tensor<8192x8192xbf16>) -> tensor<8192x8192xbf16>
  func.return %y : tensor<8192x8192xbf16>
}
