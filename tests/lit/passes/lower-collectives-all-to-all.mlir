// lower-collectives on pk.all_to_all: rank r puts chunk p into slot r of peer p's
// symmetric output. Split and concat along one dim: the views are reshapes. Along
// different dims: a transpose brings the chunk axis first, and one after the kernel moves
// the source axis in front of concat_dim (none when concat_dim is 0).
// RUN: pkc-opt -p 'lower-collectives{tile_rows=2}' %s | FileCheck %s

// CHECK-LABEL: func.func @same_dim
// CHECK:       %view = pk.reshape %x : tensor<3x8x5xf32> -> tensor<3x4x10xf32>
// CHECK-NEXT:  %lowered = pk.kernel "all_to_all_direct"(%view)
// CHECK-SAME:    "all_to_all 480 B over 4 ranks: direct {{[0-9.]+}} us"
// CHECK-SAME:    : (tensor<3x4x10xf32>) -> tensor<3x4x10xf32> {
// CHECK-NEXT:  ^bb0(%in: !pk.buffer<3x4x10xf32>, %out: !pk.buffer<3x4x10xf32, symmetric>):
// CHECK-NEXT:    %arrived = pk.alloc_signals : !pk.signals<1>
// CHECK:           scf.for %p = %c0 to %c4 step %c1 {
// CHECK-NEXT:        %0 = arith.addi %rank, %p : index
// CHECK-NEXT:        %peer = arith.remui %0, %c4 : index
// CHECK-NEXT:        pk.foreach attributes {bounds = [2 : i64, 1 : i64]} {
// CHECK-NEXT:        ^bb0(%i: index, %j: index):
// CHECK-NEXT:          %row = arith.muli %i, %c2 : index
// CHECK-NEXT:          %tile = pk.load %in[%row, %peer, %c0] : !pk.buffer<3x4x10xf32> -> !pk.tile<2x1x10xf32>
// CHECK-NEXT:          pk.put %tile, %out[%row, %rank, %c0] to %peer : !pk.tile<2x1x10xf32>, !pk.buffer<3x4x10xf32, symmetric>
// CHECK-NEXT:          pk.yield
// CHECK-NEXT:        }
// CHECK-NEXT:        pk.signal %arrived[%c0] to %peer : !pk.signals<1>
// CHECK-NEXT:      }
// CHECK-NEXT:      pk.wait %arrived[%c0] until %c4 : !pk.signals<1>
// CHECK:       %y = pk.reshape %lowered : tensor<3x4x10xf32> -> tensor<3x8x5xf32>
func.func @same_dim(%x: tensor<3x8x5xf32>) -> tensor<3x8x5xf32> {
  %y = pk.all_to_all %x {world = 4 : i64, split_dim = 1 : i64, concat_dim = 1 : i64} : tensor<3x8x5xf32> -> tensor<3x8x5xf32>
  func.return %y : tensor<3x8x5xf32>
}

// CHECK-LABEL: func.func @split_1_concat_0
// CHECK:       %view = pk.reshape %x : tensor<3x8x5xf32> -> tensor<3x4x2x5xf32>
// CHECK-NEXT:  %view_1 = pk.transpose %view {perm = [1 : i64, 0 : i64, 2 : i64, 3 : i64]} : tensor<3x4x2x5xf32> -> tensor<4x3x2x5xf32>
// CHECK-NEXT:  %view_2 = pk.reshape %view_1 : tensor<4x3x2x5xf32> -> tensor<1x4x30xf32>
// CHECK-NEXT:  %lowered = pk.kernel "all_to_all_direct_1"(%view_2)
// CHECK:       %y = pk.reshape %lowered : tensor<1x4x30xf32> -> tensor<12x2x5xf32>
func.func @split_1_concat_0(%x: tensor<3x8x5xf32>) -> tensor<12x2x5xf32> {
  %y = pk.all_to_all %x {world = 4 : i64, split_dim = 1 : i64, concat_dim = 0 : i64} : tensor<3x8x5xf32> -> tensor<12x2x5xf32>
  func.return %y : tensor<12x2x5xf32>
}

// CHECK-LABEL: func.func @split_0_concat_2
// CHECK:       %view = pk.reshape %x : tensor<8x3x5xf32> -> tensor<1x4x30xf32>
// CHECK-NEXT:  %lowered = pk.kernel "all_to_all_direct_2"(%view)
// CHECK:       %unview = pk.reshape %lowered : tensor<1x4x30xf32> -> tensor<4x2x3x5xf32>
// CHECK-NEXT:  %unview_1 = pk.transpose %unview {perm = [1 : i64, 2 : i64, 0 : i64, 3 : i64]} : tensor<4x2x3x5xf32> -> tensor<2x3x4x5xf32>
// CHECK-NEXT:  %y = pk.reshape %unview_1 : tensor<2x3x4x5xf32> -> tensor<2x3x20xf32>
func.func @split_0_concat_2(%x: tensor<8x3x5xf32>) -> tensor<2x3x20xf32> {
  %y = pk.all_to_all %x {world = 4 : i64, split_dim = 0 : i64, concat_dim = 2 : i64} : tensor<8x3x5xf32> -> tensor<2x3x20xf32>
  func.return %y : tensor<2x3x20xf32>
}
