// REQUIRES: mlir-opt
// The generic form of pk IR travels through upstream MLIR (which does not know the pk
// dialect) and comes back unchanged.
// RUN: pkc-opt --print-op-generic %s | mlir-opt --allow-unregistered-dialect --mlir-print-op-generic | pkc-opt | FileCheck %s
// RUN: pkc-opt --print-op-generic %S/kernel-roundtrip.mlir | mlir-opt --allow-unregistered-dialect --mlir-print-op-generic | pkc-opt | FileCheck %s --check-prefix=KERNEL
// RUN: pkc-opt --print-op-generic %S/graph-roundtrip.mlir | mlir-opt --allow-unregistered-dialect --mlir-print-op-generic | pkc-opt | FileCheck %s --check-prefix=GRAPH

// mlir-opt renames values and sorts attributes, so these checks match loosely.
// KERNEL: pk.kernel "mm_rs"(%{{.*}}, %{{.*}}) {world = 2 : i64} : (tensor<64x32xbf16>, tensor<32x48xbf16>) -> tensor<32x48xbf16> {
// KERNEL-NEXT: ^bb0(%{{.*}}: !pk.buffer<64x32xbf16>, %{{.*}}: !pk.buffer<32x48xbf16>, %{{.*}}: !pk.buffer<32x48xbf16, symmetric>):
// KERNEL-NEXT: pk.alloc {zero} : !pk.buffer<64x48xf32, symmetric>
// KERNEL-NEXT: pk.alloc_signals : !pk.signals<2>
// KERNEL-NEXT: pk.worker "compute" attributes {sms = 120 : i64} {
// KERNEL: pk.foreach attributes {bounds = [2 : i64, 3 : i64]} {
// KERNEL: pk.mma
// KERNEL: pk.put %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}] to %{{.*}} add : !pk.tile<32x16xf32>, !pk.buffer<64x48xf32, symmetric>
// KERNEL-NEXT: pk.signal %{{.*}}[%{{.*}}] to %{{.*}} {value = 2 : i64} : !pk.signals<2>
// KERNEL: pk.worker "communicate" {
// KERNEL: pk.wait %{{.*}}[%{{.*}}] until %{{.*}} : !pk.signals<2>
// KERNEL-NEXT: pk.load %{{.*}}[%{{.*}}, %{{.*}}] from %{{.*}} : !pk.buffer<64x48xf32, symmetric> -> !pk.tile<32x48xf32>

// GRAPH: pk.all_to_all %{{.*}} {concat_dim = 1 : i64, split_dim = 0 : i64, world = 4 : i64} : tensor<16x32xbf16> -> tensor<4x128xbf16>
// GRAPH-NEXT: pk.opaque "aten::cumsum"(%{{.*}}) {spec = "{\22args\22: [{\22operand\22: 0}, 1], \22kwargs\22: {}}"}

// CHECK-LABEL: func.func @tp_mlp
// CHECK: pk.matmul
// CHECK: pk.map "gelu"
// CHECK: pk.all_reduce %{{.*}} {reduce = "sum", world = 4 : i64} : tensor<16x64xbf16> -> tensor<16x64xbf16>
func.func @tp_mlp(%x: tensor<16x64xbf16>, %w1: tensor<64x32xbf16>, %w2: tensor<32x64xbf16>) -> tensor<16x64xbf16> {
  %h = pk.matmul %x, %w1 : (tensor<16x64xbf16>, tensor<64x32xbf16>) -> tensor<16x32xbf16>
  %a = pk.map "gelu" %h : (tensor<16x32xbf16>) -> tensor<16x32xbf16>
  %p = pk.matmul %a, %w2 : (tensor<16x32xbf16>, tensor<32x64xbf16>) -> tensor<16x64xbf16>
  %y = pk.all_reduce %p {reduce = "sum", world = 4 : i64} : tensor<16x64xbf16> -> tensor<16x64xbf16>
  func.return %y : tensor<16x64xbf16>
}
