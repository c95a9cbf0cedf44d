// REQUIRES: mlir-opt
// fp8 element types (MLIR's f8E4M3FN / f8E5M2) and pk.scaled_matmul: the custom form
// prints back as written, and the generic form travels through upstream MLIR unchanged.
// RUN: pkc-opt %s | FileCheck %s
// RUN: pkc-opt --print-op-generic %s | mlir-opt --allow-unregistered-dialect --mlir-print-op-generic | pkc-opt | FileCheck %s
// RUN: pkc-opt --print-op-generic %s | FileCheck %s --check-prefix=GENERIC

// CHECK-LABEL: func.func @ag_scaled
// CHECK: pk.all_gather %{{.*}} {{{.*}}} : tensor<8x32xf8E4M3FN> -> tensor<24x32xf8E4M3FN>
// CHECK: pk.all_gather %{{.*}} {{{.*}}} : tensor<8x1xf32> -> tensor<24x1xf32>
// CHECK: pk.scaled_matmul %{{.*}}, %{{.*}} scales(%{{.*}}, %{{.*}}) : (tensor<24x32xf8E4M3FN>, tensor<32x16xf8E5M2>, tensor<24x1xf32>, tensor<1x16xf32>) -> tensor<24x16xbf16>
// CHECK: pk.scaled_matmul %{{.*}}, %{{.*}} scales(%{{.*}}, %{{.*}}) bias %{{.*}} : tensor<16xf32> {fast_accum} : (tensor<24x32xf8E4M3FN>, tensor<32x16xf8E5M2>, tensor<1xf32>, tensor<1xf32>) -> tensor<24x16xf32>
// CHECK: pk.map "cast" %{{.*}} : (tensor<24x32xf8E4M3FN>) -> tensor<24x32xbf16>
// GENERIC: "pk.scaled_matmul"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) {fast_accum} : (tensor<24x32xf8E4M3FN>, tensor<32x16xf8E5M2>, tensor<1xf32>, tensor<1xf32>, tensor<16xf32>) -> tensor<24x16xf32>
func.func @ag_scaled(%a: tensor<8x32xf8E4M3FN>, %b: tensor<32x16xf8E5M2>, %sa: tensor<8x1xf32>,
                     %sb: tensor<1x16xf32>, %t: tensor<1xf32>, %bias: tensor<16xf32>)
    -> (tensor<24x16xbf16>, tensor<24x16xf32>, tensor<24x32xbf16>) {
  %g = pk.all_gather %a {dim = 0 : i64, world = 3 : i64} : tensor<8x32xf8E4M3FN> -> tensor<24x32xf8E4M3FN>
  %gs = pk.all_gather %sa {dim = 0 : i64, world = 3 : i64} : tensor<8x1xf32> -> tensor<24x1xf32>
  %y = pk.scaled_matmul %g, %b scales(%gs, %sb) : (tensor<24x32xf8E4M3FN>, tensor<32x16xf8E5M2>, tensor<24x1xf32>, tensor<1x16xf32>) -> tensor<24x16xbf16>
  %z = pk.scaled_matmul %g, %b scales(%t, %t) bias %bias : tensor<16xf32> {fast_accum} : (tensor<24x32xf8E4M3FN>, tensor<32x16xf8E5M2>, tensor<1xf32>, tensor<1xf32>) -> tensor<24x16xf32>
  %w = pk.map "cast" %g : (tensor<24x32xf8E4M3FN>) -> tensor<24x32xbf16>
  func.return %y, %z, %w : tensor<24x16xbf16>, tensor<24x16xf32>, tensor<24x32xbf16>
}
