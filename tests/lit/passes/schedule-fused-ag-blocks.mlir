// schedule-fused: the all-gather + GEMM of a gather along dim 1 with B = 3 sequences
// (pk.fusion.batches = 3, overlap_gather_blocks.py) becomes the scheduled kernel of
// ag_blocks_schedule.py: 3 blocks of 13 rows per shard, each padded to one 128-row tile
// (3 tiles per shard); the own shard is A seen as [3, 13, 24], a remote one G seen as
// [B*W = 6, 13, 24] (outer coordinate b*W + shard), C stored through [6, 13, 40]; the
// signal pad has W x (B x 1 raster group) + W slots; the puts write G in its own layout,
// which the kernel returns as it is (reshaped back to [3, 26, 24]).
// RUN: pkc-opt -p 'default{force=true},schedule-fused,dce' %s | FileCheck %s
// RUN: pkc-opt -p 'default{force=true},schedule-fused,dce' --emit=ptx %s | FileCheck %s --check-prefix=PTX

func.func @sp(%x: tensor<3x13x24xbf16>, %w: tensor<24x40xbf16>) -> (tensor<78x40xbf16>, tensor<3x26x24xbf16>) {
  %g = pk.all_gather %x {dim = 1 : i64, world = 2 : i64} : tensor<3x13x24xbf16> -> tensor<3x26x24xbf16>
  %v = pk.reshape %g : tensor<3x26x24xbf16> -> tensor<78x24xbf16>
  %y = pk.matmul %v, %w : (tensor<78x24xbf16>, tensor<24x40xbf16>) -> tensor<78x40xbf16>
  func.return %y, %g : tensor<78x40xbf16>, tensor<3x26x24xbf16>
}

// CHECK-LABEL: func.func @sp
// CHECK-NEXT:  %x_rows = pk.reshape %x : tensor<3x13x24xbf16> -> tensor<39x24xbf16>
// CHECK-NEXT:  %y, %g_rows = pk.kernel "all_gather_matmul"(%x_rows, %w) {world = 2 : i64, pk.fusion = {{{[^}]*}}batches = 3 : i64}
// CHECK-SAME:    blocks = 3 : i64
// CHECK-SAME:    schedule = "fused", fused_kind = "ag", bm = 128 : i64
// CHECK-SAME:    chunk_rows = 39 : i64, tiles_per_chunk = 3 : i64, row_blocks = 3 : i64
// CHECK-SAME:    gathered_output = true, batches = 3 : i64}
// CHECK-SAME:    gather along a middle dim: each rank's shard is 3 blocks of 13 rows
// CHECK-SAME:    scheduled all-gather + GEMM W=2 78x40x24 bf16: 128x128 s6 kn tma g8, 2 shards of 3 tiles (own shard first), 3 row blocks per shard signalled one by one; 3 blocks of 13 rows per shard (block b of rank r: rows b*26 + r*13 of G and C), each padded to 128 rows of tiles;
// CHECK-SAME:    -> (tensor<78x40xbf16>, tensor<78x24xbf16>)
// CHECK:         pk.alloc {zero} : !pk.buffer<8xi32, symmetric>
// CHECK:         "pks.tmap_view"(%{{.*}}) {dims = [#builtin.int<3>, #builtin.int<13>, #builtin.int<24>]} : (!pk.buffer<39x24xbf16>)
// CHECK-NEXT:    "pks.tmap_view"(%{{.*}}) {dims = [#builtin.int<6>, #builtin.int<13>, #builtin.int<24>]} : (!pk.buffer<78x24xbf16, symmetric>)
// CHECK:         "pks.tmap_view"(%{{.*}}) {dims = [#builtin.int<6>, #builtin.int<13>, #builtin.int<40>]} : (!pk.buffer<78x40xbf16>)
// CHECK:         "pks.chunk_tile_loop"
// CHECK:       %g = pk.reshape %g_rows : tensor<78x24xbf16> -> tensor<3x26x24xbf16>
// CHECK-NEXT:  func.return %y, %g

// PTX: .visible .entry all_gather_matmul(
// PTX: cp.async.bulk.global.shared::cta.bulk_group
