// Sub-group collectives (group_ranks) through the passes: every rewrite keeps the group,
// kernels built from a sub-group collective carry it (one group's kernel, launched per
// group) and say so in a remark.
// RUN: pkc-opt -p 'collective-views,dce,overlap{force=true tile=16 tile-k=16},buffer-elision,lower-collectives,sm-partition' %s | FileCheck %s
// RUN: pkc-opt -p 'collective-views' %s | FileCheck %s --check-prefix=VIEWS

// TP inside DP on 4 ranks: a row-parallel matmul reduce-scattered over TP groups
// [[0, 1], [2, 3]], then an all-gather over DP groups [[0, 2], [1, 3]].
func.func @tp_dp(%a: tensor<6x5x32xbf16>, %b: tensor<32x24xbf16>) -> tensor<6x5x24xbf16> {
  %a2 = pk.reshape %a : tensor<6x5x32xbf16> -> tensor<30x32xbf16>
  %c = pk.matmul %a2, %b : (tensor<30x32xbf16>, tensor<32x24xbf16>) -> tensor<30x24xbf16>
  %c3 = pk.reshape %c : tensor<30x24xbf16> -> tensor<6x5x24xbf16>
  %r = pk.reduce_scatter %c3 {dim = 0 : i64, reduce = "sum", world = 2 : i64, group_ranks = [[0, 1], [2, 3]]} : tensor<6x5x24xbf16> -> tensor<3x5x24xbf16>
  %g = pk.all_gather %r {dim = 0 : i64, world = 2 : i64, group_ranks = [[0, 2], [1, 3]]} : tensor<3x5x24xbf16> -> tensor<6x5x24xbf16>
  func.return %g : tensor<6x5x24xbf16>
}

// VIEWS-LABEL: func.func @tp_dp
// VIEWS:       pk.reduce_scatter %c {world = 2 : i64, dim = 0 : i64, reduce = "sum", group_ranks = {{\[\[}}0 : i64, 1 : i64], [2 : i64, 3 : i64]]} : tensor<30x24xbf16> -> tensor<15x24xbf16>

// CHECK-LABEL: func.func @tp_dp
// CHECK-NOT:   pk.matmul
// CHECK:       pk.kernel "matmul_reduce_scatter"
// CHECK-SAME:    stage = "elided"
// CHECK-SAME:    group_ranks = {{\[\[}}0 : i64, 1 : i64], [2 : i64, 3 : i64]]
// CHECK-SAME:    "runs in each of 2 groups of 2 ranks {{\[\[}}0, 1], [2, 3]]: one group's kernel, ranks and peers numbered inside the group"
// CHECK:       pk.kernel "all_gather_{{[a-z]+}}"
// CHECK-SAME:    group_ranks = {{\[\[}}0 : i64, 2 : i64], [1 : i64, 3 : i64]]
// CHECK-SAME:    "runs in each of 2 groups of 2 ranks {{\[\[}}0, 2], [1, 3]]

// MoE dispatch and combine over different groups are not one kernel.
func.func @moe_mixed(%x: tensor<8x16xbf16>, %w: tensor<16x8xbf16>) -> tensor<8x8xbf16> {
  %d = pk.all_to_all %x {split_dim = 0 : i64, concat_dim = 0 : i64, world = 2 : i64, group_ranks = [[0, 1], [2, 3]]} : tensor<8x16xbf16> -> tensor<8x16xbf16>
  %y = pk.matmul %d, %w : (tensor<8x16xbf16>, tensor<16x8xbf16>) -> tensor<8x8xbf16>
  %c = pk.all_to_all %y {split_dim = 0 : i64, concat_dim = 0 : i64, world = 2 : i64, group_ranks = [[0, 2], [1, 3]]} : tensor<8x8xbf16> -> tensor<8x8xbf16>
  func.return %c : tensor<8x8xbf16>
}

// CHECK-LABEL: func.func @moe_mixed
// CHECK-NOT:   all_to_all_matmul_all_to_all
// CHECK:       pk.matmul
