// RUN: pkc-opt %s | pkc-opt | FileCheck %s
// RUN: pkc-opt --print-op-generic %s | pkc-opt | FileCheck %s

// Kernel-level ops: a fused matmul + reduce-scatter written by hand, with a compute and a
// communicate worker, a foreach over output tiles, puts with add, signals and waits.

// CHECK-LABEL: func.func @mm_rs
func.func @mm_rs(%a: tensor<64x32xbf16>, %b: tensor<32x48xbf16>) -> tensor<32x48xbf16> {
  // CHECK: %o = pk.kernel "mm_rs"(%a, %b) {world = 2 : i64} : (tensor<64x32xbf16>, tensor<32x48xbf16>) -> tensor<32x48xbf16> {
  // CHECK-NEXT: ^bb0(%A: !pk.buffer<64x32xbf16>, %B: !pk.buffer<32x48xbf16>, %O: !pk.buffer<32x48xbf16, symmetric>):
  %o = pk.kernel "mm_rs" (%a, %b) {world = 2 : i64} : (tensor<64x32xbf16>, tensor<32x48xbf16>) -> tensor<32x48xbf16> {
  ^bb0(%A: !pk.buffer<64x32xbf16>, %B: !pk.buffer<32x48xbf16>, %O: !pk.buffer<32x48xbf16, symmetric>):
    // CHECK-NEXT: %scratch = pk.alloc {zero} : !pk.buffer<64x48xf32, symmetric>
    %scratch = pk.alloc {zero} : !pk.buffer<64x48xf32, symmetric>
    // CHECK-NEXT: %done = pk.alloc_signals : !pk.signals<2>
    %done = pk.alloc_signals : !pk.signals<2>
    // CHECK-NEXT: pk.worker "compute" attributes {sms = 120 : i64} {
    pk.worker "compute" attributes {sms = 120 : i64} {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c16 = arith.constant 16 : index
      %c32 = arith.constant 32 : index
      // CHECK: pk.foreach attributes {bounds = [2 : i64, 3 : i64]} {
      // CHECK-NEXT: ^bb{{[0-9]+}}(%i: index, %j: index):
      pk.foreach attributes {bounds = [2 : i64, 3 : i64]} {
      ^bb1(%i: index, %j: index):
        %row = arith.muli %i, %c32 : index
        %col = arith.muli %j, %c16 : index
        // CHECK: %ta = pk.load %A[%row, %c0] : !pk.buffer<64x32xbf16> -> !pk.tile<32x32xbf16>
        %ta = pk.load %A[%row, %c0] : !pk.buffer<64x32xbf16> -> !pk.tile<32x32xbf16>
        %tb = pk.load %B[%c0, %col] : !pk.buffer<32x48xbf16> -> !pk.tile<32x16xbf16>
        // CHECK: %z = pk.tile_fill {value = 0.000000e+00 : f32} : !pk.tile<32x16xf32>
        %z = pk.tile_fill {value = 0.0 : f32} : !pk.tile<32x16xf32>
        // CHECK-NEXT: %acc = pk.mma %ta, %tb, %z : !pk.tile<32x32xbf16>, !pk.tile<32x16xbf16>, !pk.tile<32x16xf32> -> !pk.tile<32x16xf32>
        %acc = pk.mma %ta, %tb, %z : !pk.tile<32x32xbf16>, !pk.tile<32x16xbf16>, !pk.tile<32x16xf32> -> !pk.tile<32x16xf32>
        // CHECK-NEXT: %m = pk.tile_reduce "max" %acc {dims = [1 : i64], keepdim} : !pk.tile<32x16xf32> -> !pk.tile<32x1xf32>
        %m = pk.tile_reduce "max" %acc {dims = [1 : i64], keepdim} : !pk.tile<32x16xf32> -> !pk.tile<32x1xf32>
        // CHECK-NEXT: %v = pk.tile_map "sub" %acc, %m : (!pk.tile<32x16xf32>, !pk.tile<32x1xf32>) -> !pk.tile<32x16xf32>
        %v = pk.tile_map "sub" %acc, %m : (!pk.tile<32x16xf32>, !pk.tile<32x1xf32>) -> !pk.tile<32x16xf32>
        // CHECK-NEXT: pk.put %v, %scratch[%row, %col] to %i add : !pk.tile<32x16xf32>, !pk.buffer<64x48xf32, symmetric>
        pk.put %v, %scratch[%row, %col] to %i add : !pk.tile<32x16xf32>, !pk.buffer<64x48xf32, symmetric>
        // CHECK-NEXT: pk.signal %done[%i] to %i {value = 2 : i64} : !pk.signals<2>
        pk.signal %done[%i] to %i {value = 2 : i64} : !pk.signals<2>
        pk.yield
      }
      pk.yield
    }
    // CHECK: pk.worker "communicate" {
    pk.worker "communicate" {
      %c0 = arith.constant 0 : index
      %c12 = arith.constant 12 : index
      // CHECK: %me = pk.rank
      %me = pk.rank
      // CHECK-NEXT: pk.wait %done[%me] until %c12 : !pk.signals<2>
      pk.wait %done[%me] until %c12 : !pk.signals<2>
      // CHECK-NEXT: %t = pk.load %scratch[%[[Z:c0.*]], %[[Z]]] from %me : !pk.buffer<64x48xf32, symmetric> -> !pk.tile<32x48xf32>
      %t = pk.load %scratch[%c0, %c0] from %me : !pk.buffer<64x48xf32, symmetric> -> !pk.tile<32x48xf32>
      %out_tile = pk.tile_map "cast" %t : (!pk.tile<32x48xf32>) -> !pk.tile<32x48xbf16>
      // CHECK: pk.store %out_tile, %O[%[[Z]], %[[Z]]] : !pk.tile<32x48xbf16>, !pk.buffer<32x48xbf16, symmetric>
      pk.store %out_tile, %O[%c0, %c0] : !pk.tile<32x48xbf16>, !pk.buffer<32x48xbf16, symmetric>
      pk.yield
    }
    pk.yield
  }
  func.return %o : tensor<32x48xbf16>
}
