// RUN: pkc-opt %s --split-input-file --verify-diagnostics
// group_ranks (sub-group collectives, pkc/dialects/rank_groups.py): every group lists
// `world` ranks, groups are disjoint and cover ranks 0 .. G*world-1.

func.func @overlapping(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'pk.all_reduce' group_ranks rank 1 is listed in groups 0 and group 1; groups must be disjoint}}
  %y = pk.all_reduce %x {reduce = "sum", world = 2 : i64, group_ranks = [[0, 1], [1, 3]]} : tensor<4x8xf32> -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}

// -----

func.func @unequal(%x: tensor<4x8xf32>) -> tensor<8x8xf32> {
  // expected-error @+1 {{'pk.all_gather' group_ranks group 1 [2, 3, 4] has 3 ranks, but the op's world is 2}}
  %y = pk.all_gather %x {dim = 0 : i64, world = 2 : i64, group_ranks = [[0, 1], [2, 3, 4]]} : tensor<4x8xf32> -> tensor<8x8xf32>
  func.return %y : tensor<8x8xf32>
}

// -----

func.func @not_covering(%x: tensor<4x8xf32>) -> tensor<2x8xf32> {
  // expected-error @+1 {{'pk.reduce_scatter' group_ranks the groups must cover ranks 0..3 of the program; rank(s) [2] are missing (listed instead: [5])}}
  %y = pk.reduce_scatter %x {dim = 0 : i64, reduce = "sum", world = 2 : i64, group_ranks = [[0, 1], [3, 5]]} : tensor<4x8xf32> -> tensor<2x8xf32>
  func.return %y : tensor<2x8xf32>
}

// -----

func.func @not_lists(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'pk.all_to_all' group_ranks must be a list of rank lists, got [0 : i64, 1 : i64]}}
  %y = pk.all_to_all %x {split_dim = 0 : i64, concat_dim = 0 : i64, world = 2 : i64, group_ranks = [0, 1]} : tensor<4x8xf32> -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}

// -----

func.func @kernel(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'pk.kernel' group_ranks rank 0 is listed twice in group 0; groups must be disjoint}}
  %y = pk.kernel "k"(%x) {world = 2 : i64, group_ranks = [[0, 0]]} : (tensor<4x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%in: !pk.buffer<4x8xf32>, %out: !pk.buffer<4x8xf32>):
    pk.worker "communicate" {
      pk.yield
    }
    pk.yield
  }
  func.return %y : tensor<4x8xf32>
}
