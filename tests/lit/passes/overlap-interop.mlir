// The fused kernels overlap and buffer-elision produce survive the generic form and a trip
// through upstream mlir-opt (pk as an unregistered dialect): pkc parses and verifies what
// mlir-opt prints, and a second round trip is a fixed point.
// REQUIRES: mlir-opt
// RUN: pkc-opt -p 'overlap{force=true tile=16 tile-k=32},buffer-elision' --print-op-generic %s | mlir-opt --allow-unregistered-dialect > %t.1
// RUN: pkc-opt --print-op-generic %t.1 | mlir-opt --allow-unregistered-dialect > %t.2
// RUN: diff %t.1 %t.2
// RUN: pkc-opt %t.1 | FileCheck %s
// buffer-elision still recognizes a staged kernel that went through mlir-opt:
// RUN: pkc-opt -p 'overlap{force=true tile=16 tile-k=32}' --print-op-generic %s | mlir-opt --allow-unregistered-dialect | pkc-opt -p buffer-elision | FileCheck %s

// CHECK: pk.kernel "all_gather_matmul"
// CHECK-SAME: stage = "elided"
// CHECK-NOT: {staging}
func.func @ag_mm(%x: tensor<20x32xbf16>, %wq: tensor<32x48xbf16>) -> tensor<40x48xbf16> {
  %g = pk.all_gather %x {dim = 0 : i64, world = 2 : i64} : tensor<20x32xbf16> -> tensor<40x32xbf16>
  %q = pk.matmul %g, %wq : (tensor<40x32xbf16>, tensor<32x48xbf16>) -> tensor<40x48xbf16>
  func.return %q : tensor<40x48xbf16>
}
