// RUN: pkc-opt %s -p collective-views,dce | FileCheck %s

// The matmul of a 3-d linear meets its all_reduce once the reshape moves after it.
// CHECK-LABEL: func.func @linear_then_all_reduce
// CHECK: %[[MM:.*]] = pk.matmul
// CHECK-NEXT: %[[AR:.*]] = pk.all_reduce %[[MM]] {world = 4 : i64, reduce = "sum"} : tensor<6x16xf32> -> tensor<6x16xf32>
// CHECK-NEXT: %{{.*}} = pk.reshape %[[AR]] : tensor<6x16xf32> -> tensor<2x3x16xf32>
func.func @linear_then_all_reduce(%x: tensor<6x16xf32>, %w: tensor<16x16xf32>) -> tensor<2x3x16xf32> {
  %m = pk.matmul %x, %w : (tensor<6x16xf32>, tensor<16x16xf32>) -> tensor<6x16xf32>
  %v = pk.reshape %m : tensor<6x16xf32> -> tensor<2x3x16xf32>
  %y = pk.all_reduce %v {world = 4 : i64, reduce = "sum"} : tensor<2x3x16xf32> -> tensor<2x3x16xf32>
  func.return %y : tensor<2x3x16xf32>
}

// A reduce-scatter over dim 0 moves when both shapes split dim 0 into W equal blocks ...
// CHECK-LABEL: func.func @scatter
// CHECK: pk.reduce_scatter %{{.*}} {world = 2 : i64, dim = 0 : i64, reduce = "sum"} : tensor<8x16xf32> -> tensor<4x16xf32>
// CHECK-NEXT: pk.reshape %{{.*}} : tensor<4x16xf32> -> tensor<2x2x16xf32>
func.func @scatter(%x: tensor<8x16xf32>) -> tensor<2x2x16xf32> {
  %v = pk.reshape %x : tensor<8x16xf32> -> tensor<4x2x16xf32>
  %y = pk.reduce_scatter %v {dim = 0 : i64, world = 2 : i64, reduce = "sum"} : tensor<4x2x16xf32> -> tensor<2x2x16xf32>
  func.return %y : tensor<2x2x16xf32>
}

// ... and stays when they do not (3 rows cannot be split over 2 ranks).
// CHECK-LABEL: func.func @scatter_stays
// CHECK: pk.reshape %{{.*}} : tensor<3x16xf32> -> tensor<2x24xf32>
// CHECK-NEXT: pk.reduce_scatter
func.func @scatter_stays(%x: tensor<3x16xf32>) -> tensor<1x24xf32> {
  %v = pk.reshape %x : tensor<3x16xf32> -> tensor<2x24xf32>
  %y = pk.reduce_scatter %v {dim = 0 : i64, world = 2 : i64, reduce = "sum"} : tensor<2x24xf32> -> tensor<1x24xf32>
  func.return %y : tensor<1x24xf32>
}

// A gather's flattening moves before it, so the gathered operand is what the matmul reads.
// CHECK-LABEL: func.func @gather
// CHECK: %[[V:.*]] = pk.reshape %{{.*}} : tensor<3x2x16xf32> -> tensor<6x16xf32>
// CHECK-NEXT: %[[G:.*]] = pk.all_gather %[[V]] {world = 4 : i64, dim = 0 : i64} : tensor<6x16xf32> -> tensor<24x16xf32>
// CHECK-NEXT: pk.matmul %[[G]]
func.func @gather(%x: tensor<3x2x16xf32>, %w: tensor<16x8xf32>) -> tensor<24x8xf32> {
  %g = pk.all_gather %x {dim = 0 : i64, world = 4 : i64} : tensor<3x2x16xf32> -> tensor<12x2x16xf32>
  %f = pk.reshape %g : tensor<12x2x16xf32> -> tensor<24x16xf32>
  %y = pk.matmul %f, %w : (tensor<24x16xf32>, tensor<16x8xf32>) -> tensor<24x8xf32>
  func.return %y : tensor<24x8xf32>
}
