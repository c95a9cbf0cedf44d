// collective-views: a gather along dim 1 of [1, S/W, H] (DTensor Shard(1) with one
// sequence) moves contiguous shards, as a dim-0 gather does: the 2-d view moves before
// it, and overlap fuses the gather with the matmul. With B > 1 blocks the shard is B
// separate row blocks: collective-views leaves it as it is, overlap fuses it with
// pk.fusion.batches = B (overlap_gather_blocks.py; lit overlap-gather-blocks.mlir).
// RUN: pkc-opt -p 'collective-views,dce' %s | FileCheck %s
// RUN: pkc-opt -p 'collective-views,dce,overlap{force=true}' %s | FileCheck %s --check-prefix=FUSED

func.func @one_seq(%x: tensor<1x20x24xbf16>, %w: tensor<24x16xbf16>) -> tensor<40x16xbf16> {
  %g = pk.all_gather %x {dim = 1 : i64, world = 2 : i64} : tensor<1x20x24xbf16> -> tensor<1x40x24xbf16>
  %v = pk.reshape %g : tensor<1x40x24xbf16> -> tensor<40x24xbf16>
  %y = pk.matmul %v, %w : (tensor<40x24xbf16>, tensor<24x16xbf16>) -> tensor<40x16xbf16>
  func.return %y : tensor<40x16xbf16>
}

// CHECK-LABEL: func.func @one_seq
// CHECK-NEXT:    %[[S:[0-9a-z_]+]] = pk.reshape %x : tensor<1x20x24xbf16> -> tensor<20x24xbf16>
// CHECK-NEXT:    %[[G:[0-9a-z_]+]] = pk.all_gather %[[S]] {world = 2 : i64, dim = 0 : i64} : tensor<20x24xbf16> -> tensor<40x24xbf16>
// CHECK-NEXT:    pk.matmul %[[G]], %w
// FUSED-LABEL: func.func @one_seq
// FUSED:         pk.kernel "all_gather_matmul"

func.func @two_seqs(%x: tensor<2x10x24xbf16>, %w: tensor<24x16xbf16>) -> tensor<40x16xbf16> {
  %g = pk.all_gather %x {dim = 1 : i64, world = 2 : i64} : tensor<2x10x24xbf16> -> tensor<2x20x24xbf16>
  %v = pk.reshape %g : tensor<2x20x24xbf16> -> tensor<40x24xbf16>
  %y = pk.matmul %v, %w : (tensor<40x24xbf16>, tensor<24x16xbf16>) -> tensor<40x16xbf16>
  func.return %y : tensor<40x16xbf16>
}

// CHECK-LABEL: func.func @two_seqs
// CHECK-NEXT:    pk.all_gather %x {dim = 1 : i64, world = 2 : i64}
// FUSED-LABEL: func.func @two_seqs
// FUSED:         pk.kernel "all_gather_matmul"{{.*}}batches = 2 : i64
