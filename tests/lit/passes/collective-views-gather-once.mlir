// collective-views: equal 2-d views of one 3-d all-gather (a sequence-parallel activation
// feeding the q, k and v projections) become ONE gather of the reshaped shard, so overlap
// fuses all three matmuls into one kernel that gathers once.
// RUN: pkc-opt -p 'collective-views,dce' %s | FileCheck %s --check-prefix=VIEWS
// RUN: pkc-opt -p 'collective-views,dce,overlap{force=true}' %s | FileCheck %s --check-prefix=FUSED

func.func @qkv(%x: tensor<2x3x16xf32>, %wq: tensor<16x8xf32>, %wk: tensor<16x8xf32>, %wv: tensor<16x8xf32>) -> (tensor<12x8xf32>, tensor<12x8xf32>, tensor<12x8xf32>) {
  %g = pk.all_gather %x {dim = 0 : i64, world = 2 : i64} : tensor<2x3x16xf32> -> tensor<4x3x16xf32>
  %a = pk.reshape %g : tensor<4x3x16xf32> -> tensor<12x16xf32>
  %q = pk.matmul %a, %wq : (tensor<12x16xf32>, tensor<16x8xf32>) -> tensor<12x8xf32>
  %b = pk.reshape %g : tensor<4x3x16xf32> -> tensor<12x16xf32>
  %k = pk.matmul %b, %wk : (tensor<12x16xf32>, tensor<16x8xf32>) -> tensor<12x8xf32>
  %c = pk.reshape %g : tensor<4x3x16xf32> -> tensor<12x16xf32>
  %v = pk.matmul %c, %wv : (tensor<12x16xf32>, tensor<16x8xf32>) -> tensor<12x8xf32>
  func.return %q, %k, %v : tensor<12x8xf32>, tensor<12x8xf32>, tensor<12x8xf32>
}

// VIEWS:      %[[S:.*]] = pk.reshape %x : tensor<2x3x16xf32> -> tensor<6x16xf32>
// VIEWS-NEXT: %[[G:.*]] = pk.all_gather %[[S]] {world = 2 : i64, dim = 0 : i64} : tensor<6x16xf32> -> tensor<12x16xf32>
// VIEWS-NOT:  pk.all_gather
// VIEWS:      pk.matmul %[[G]], %wq
// VIEWS-NEXT: pk.matmul %[[G]], %wk
// VIEWS-NEXT: pk.matmul %[[G]], %wv

// FUSED:      %q, %k, %v = pk.kernel "all_gather_matmul"(%{{.*}}, %wq, %wk, %wv)
// FUSED-NOT:  pk.all_gather
// FUSED-NOT:  pk.matmul
