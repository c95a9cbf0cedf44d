// A lowered collective (two-shot: symmetric buffers, signals, foreach, scf/arith index
// math, pk.plan / pk.remarks) survives upstream mlir-opt in the generic form and comes back
// to pkc-opt, which can keep compiling it.
// REQUIRES: mlir-opt
// RUN: pkc-opt %s -p 'lower-collectives{all_reduce=two_shot}' --print-op-generic > %t.generic.mlir
// RUN: mlir-opt --allow-unregistered-dialect %t.generic.mlir --mlir-print-op-generic | pkc-opt -p sm-partition | FileCheck %s

// CHECK:      pk.kernel "all_reduce_two_shot"
// CHECK-SAME:   algorithm = "two_shot"
// CHECK-SAME:   "sm-partition: 8 communicate SMs of 132 (h200);
// CHECK:        %{{.*}} = pk.alloc : !pk.buffer<1x8x96xf32, symmetric>
// CHECK:        pk.worker "communicate" attributes {sms = 8 : i64} {
// CHECK:          pk.put
// CHECK:          pk.signal
// CHECK:          pk.wait
func.func @main(%x: tensor<96xf32>) -> tensor<96xf32> {
  %y = pk.all_reduce %x {world = 8 : i64, reduce = "sum"} : tensor<96xf32> -> tensor<96xf32>
  func.return %y : tensor<96xf32>
}
