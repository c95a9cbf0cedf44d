// Capture + import of collectives over the dimensions of a 2-D device mesh: each carries
// its world (the group's size) and every group of its mesh dimension (group_ranks).
// RUN: %python %S/Inputs/mesh2d.py 2 2 | FileCheck %s --check-prefix=W4
// RUN: %python %S/Inputs/mesh2d.py 2 4 | FileCheck %s --check-prefix=W8

// W4:      pk.all_gather %{{.*}} {world = 2 : i64, dim = 0 : i64, group_ranks = {{\[\[}}0 : i64, 1 : i64], [2 : i64, 3 : i64]]} : tensor<3x8xf32> -> tensor<6x8xf32>
// W4:      pk.reduce_scatter %{{.*}} {world = 2 : i64, dim = 0 : i64, reduce = "sum", group_ranks = {{\[\[}}0 : i64, 1 : i64], [2 : i64, 3 : i64]]} : tensor<6x8xf32> -> tensor<3x8xf32>
// W4:      pk.all_reduce %{{.*}} {world = 2 : i64, reduce = "sum", group_ranks = {{\[\[}}0 : i64, 2 : i64], [1 : i64, 3 : i64]]} : tensor<8xf32> -> tensor<8xf32>
// the average divides by the DP group's size, not the world's
// W4-NEXT: pk.constant {value = 2.000000e+00 : f32}
// W4-NEXT: pk.map "div"

// W8:      pk.all_gather %{{.*}} {world = 4 : i64, dim = 0 : i64, group_ranks = {{\[\[}}0 : i64, 1 : i64, 2 : i64, 3 : i64], [4 : i64, 5 : i64, 6 : i64, 7 : i64]]} : tensor<3x8xf32> -> tensor<12x8xf32>
// W8:      pk.reduce_scatter %{{.*}} {{.*}}world = 4 : i64{{.*}} : tensor<12x8xf32> -> tensor<3x8xf32>
// W8:      pk.all_reduce %{{.*}} {world = 2 : i64, reduce = "sum", group_ranks = {{\[\[}}0 : i64, 4 : i64], [1 : i64, 5 : i64], [2 : i64, 6 : i64], [3 : i64, 7 : i64]]} : tensor<8xf32> -> tensor<8xf32>
