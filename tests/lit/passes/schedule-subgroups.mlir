// The schedule level keeps every kernel's sub-groups: a GEMM + all-reduce over TP groups
// of 4 (a 2x4 mesh) becomes the pair GEMM + reduce-scatter then a pull all-gather, both
// compiled for one group (world = 4) and both run in the pair's groups (the runtime gives
// each group its own peers: pkc/runtime/groups.py). The all-gather once lost the groups.
// RUN: pkc-opt -p 'default{force=true},schedule' %s | FileCheck %s

func.func @pair(%a: tensor<148x64xbf16>, %b: tensor<64x72xbf16>) -> tensor<148x72xbf16> {
  %p = pk.matmul %a, %b : (tensor<148x64xbf16>, tensor<64x72xbf16>) -> tensor<148x72xbf16>
  %z = pk.all_reduce %p {reduce = "sum", world = 4 : i64, group_ranks = [[0, 1, 2, 3], [4, 5, 6, 7]]} : tensor<148x72xbf16> -> tensor<148x72xbf16>
  func.return %z : tensor<148x72xbf16>
}

// CHECK-LABEL: func.func @pair
// CHECK:       pk.kernel "matmul_reduce_scatter"
// CHECK-SAME:    world = 4 : i64
// CHECK-SAME:    pattern = "mm_all_reduce"
// CHECK-SAME:    group_ranks = {{\[\[}}0 : i64, 1 : i64, 2 : i64, 3 : i64], [4 : i64, 5 : i64, 6 : i64, 7 : i64]]
// CHECK:       pk.kernel "all_gather_agp"
// CHECK-SAME:    world = 4 : i64
// CHECK-SAME:    group_ranks = {{\[\[}}0 : i64, 1 : i64, 2 : i64, 3 : i64], [4 : i64, 5 : i64, 6 : i64, 7 : i64]]
