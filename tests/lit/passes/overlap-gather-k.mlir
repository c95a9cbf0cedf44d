// overlap: an all-gather along the matmul's contraction dim K (the last dim of the lhs,
// directly or through a 3-d view) is left unfused, and the remark at the user's line says
// why: every output tile needs every rank's shard, the fused kernel gathers rows.
// RUN: pkc-opt -p 'overlap{force=true}' --remarks %s 2>&1 >/dev/null | FileCheck %s

func.func @k2d(%x: tensor<40x24xbf16>, %w: tensor<48x16xbf16>) -> tensor<40x16xbf16> {
  %g = pk.all_gather %x {dim = 1 : i64, world = 2 : i64} : tensor<40x24xbf16> -> tensor<40x48xbf16>
  %y = pk.matmul %g, %w : (tensor<40x48xbf16>, tensor<48x16xbf16>) -> tensor<40x16xbf16>
  func.return %y : tensor<40x16xbf16>
}

// CHECK: overlap-gather-k.mlir:7:3: remark: [pk.all_gather] left unfused: all_gather+mm: gather along dim 1 of [40, 24], the matmul's contraction dim K: every output tile needs every rank's shard

func.func @k3d(%x: tensor<2x5x24xbf16>, %w: tensor<72x16xbf16>) -> tensor<10x16xbf16> {
  %g = pk.all_gather %x {dim = 2 : i64, world = 3 : i64} : tensor<2x5x24xbf16> -> tensor<2x5x72xbf16>
  %v = pk.reshape %g : tensor<2x5x72xbf16> -> tensor<10x72xbf16>
  %y = pk.matmul %v, %w : (tensor<10x72xbf16>, tensor<72x16xbf16>) -> tensor<10x16xbf16>
  func.return %y : tensor<10x16xbf16>
}

// CHECK: overlap-gather-k.mlir:15:3: remark: [pk.all_gather] left unfused: all_gather+mm: gather along dim 2 of [2, 5, 24], the matmul's contraction dim K
