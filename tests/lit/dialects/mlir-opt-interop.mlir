// REQUIRES: mlir-opt
// The generic form of pk IR travels through upstream MLIR (which does not know the pk
// dialect) and comes back unchanged.
// RUN: pkc-opt --print-op-generic %s | mlir-opt --allow-unregistered-dialect --mlir-print-op-generic | pkc-opt | FileCheck %s
// RUN: pkc-opt --print-op-generic %S/kernel-roundtrip.mlir | mlir-opt --allow-unregistered-dialect --mlir-print-op-generic | pkc-opt | FileCheck %S/kernel-roundtrip.mlir
// RUN: pkc-opt --print-op-generic %S/graph-roundtrip.mlir | mlir-opt --allow-unregistered-dialect --mlir-print-op-generic | pkc-opt | FileCheck %S/graph-roundtrip.mlir

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
