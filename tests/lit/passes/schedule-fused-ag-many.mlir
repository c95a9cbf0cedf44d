// schedule-fused: an all-gather feeding two matmuls (overlap fused both into one kernel)
// becomes ONE scheduled kernel that gathers once (pkc/passes/gather_many.py): the rows
// gather of the one-weight kernel (put CTAs, a signal per row block, the producer waiting
// once per remote row block) over one tile space that spans both weights' column tiles
// (q: 136 columns -> 2 tiles of 128, k: 40 -> 1 tile, starting at column 256). Per tile
// the producer and the epilogue find the weight (compare with 256), pick its B map
// (producer) and C map (epilogue) with pks.tmap_select and use the column in it.
// RUN: pkc-opt -p 'default{force=true},schedule-fused,dce' %s | FileCheck %s
// RUN: pkc-opt -p 'default{force=true},schedule-fused,dce' --emit=ptx %s | FileCheck %s --check-prefix=PTX

func.func @ag_many(%x: tensor<37x64xbf16>, %wq: tensor<136x64xbf16>, %wk: tensor<40x64xbf16>) -> (tensor<111x136xbf16>, tensor<111x40xbf16>) {
  %g = pk.all_gather %x {dim = 0 : i64, world = 3 : i64} : tensor<37x64xbf16> -> tensor<111x64xbf16>
  %tq = pk.transpose %wq {perm = [1, 0]} : tensor<136x64xbf16> -> tensor<64x136xbf16>
  %q = pk.matmul %g, %tq : (tensor<111x64xbf16>, tensor<64x136xbf16>) -> tensor<111x136xbf16>
  %tk = pk.transpose %wk {perm = [1, 0]} : tensor<40x64xbf16> -> tensor<64x40xbf16>
  %k = pk.matmul %g, %tk : (tensor<111x64xbf16>, tensor<64x40xbf16>) -> tensor<111x40xbf16>
  func.return %q, %k : tensor<111x136xbf16>, tensor<111x40xbf16>
}

// CHECK-LABEL: func.func @ag_many
// CHECK:       %[[Q:.*]], %[[K:.*]], %{{.*}} = pk.kernel "all_gather_matmul"(%x, %wq, %wk) {world = 3 : i64
// CHECK-SAME:    schedule = "fused", fused_kind = "ag", bm = 128 : i64, bn = 128 : i64
// CHECK-SAME:    tiles_per_chunk = 3 : i64
// CHECK-SAME:    weights = 2 : i64
// CHECK-SAME:    scheduled all-gather + 2 GEMMs W=3 111x(136+40)x64 bf16: 128x128 s6
// CHECK-SAME:    one kernel over 2 weights, gathering once
// CHECK-SAME:    -> (tensor<111x136xbf16>, tensor<111x40xbf16>, tensor<111x64xbf16>)
// CHECK-NEXT:  ^bb0(%[[A:.*]]: !pk.buffer<37x64xbf16>, %[[BQ:.*]]: !pk.buffer<136x64xbf16>, %[[BK:.*]]: !pk.buffer<40x64xbf16>, %[[CQ:.*]]: !pk.buffer<111x136xbf16>, %[[CK:.*]]: !pk.buffer<111x40xbf16>, %[[G:.*]]: !pk.buffer<111x64xbf16, symmetric>):
// CHECK:         %[[TBQ:.*]] = "pks.tmap"(%[[BQ]])
// CHECK-NEXT:    %[[TBK:.*]] = "pks.tmap"(%[[BK]])
// CHECK-NEXT:    %[[TCQ:.*]] = "pks.tmap_view"(%[[CQ]]) {dims = [#builtin.int<3>, #builtin.int<37>, #builtin.int<136>]}
// CHECK-NEXT:    %[[TCK:.*]] = "pks.tmap_view"(%[[CK]]) {dims = [#builtin.int<3>, #builtin.int<37>, #builtin.int<40>]}
// the producer: prefetches the second weight's map too; per tile, the weight and its column
// CHECK:         "pks.tma_prefetch"(%[[TBK]])
// CHECK:         "pks.chunk_tile_loop"
// CHECK-NEXT:    ^bb0(%{{[0-9]+}}: i32, %[[N0:[0-9]+]]: i32,
// CHECK:         %[[PAST:.*]] = arith.cmpi uge, %[[N0]], %{{.*}} : i32
// CHECK:         %[[W:.*]] = arith.select %[[PAST]], %{{.*}}, %{{.*}} : i32
// CHECK:         %[[BASE:.*]] = arith.select %[[PAST]], %{{.*}}, %{{.*}} : i32
// CHECK-NEXT:    %[[COL:.*]] = arith.subi %[[N0]], %[[BASE]] : i32
// CHECK-NEXT:    %[[TB:.*]] = "pks.tmap_select"(%[[W]], %[[TBQ]], %[[TBK]])
// CHECK:         "pks.signal_wait"
// CHECK:         %[[BN:[0-9]+]] = arith.addi %{{[0-9]+}}, %[[COL]] : i32
// CHECK:         "pks.tma_load"(%[[TB]], %{{[0-9]+}}, %[[BN]],
// the consumers: the same weight, its C map
// CHECK:         "pks.chunk_tile_loop"
// CHECK-NEXT:    ^bb0(%{{[0-9]+}}: i32, %[[EN0:[0-9]+]]: i32, %[[CHUNK:[0-9]+]]: i32,
// CHECK:         %[[EPAST:.*]] = arith.cmpi uge, %[[EN0]], %{{.*}} : i32
// CHECK:         %[[EW:.*]] = arith.select %[[EPAST]], %{{.*}}, %{{.*}} : i32
// CHECK:         %[[EBASE:.*]] = arith.select %[[EPAST]], %{{.*}}, %{{.*}} : i32
// CHECK-NEXT:    %[[ECOL:.*]] = arith.subi %[[EN0]], %[[EBASE]] : i32
// CHECK-NEXT:    %[[TC:.*]] = "pks.tmap_select"(%[[EW]], %[[TCQ]], %[[TCK]])
// CHECK:         "pks.tma_store"(%{{[0-9]+}}, %{{[0-9]+}}, %[[TC]], %[[ECOL]], %{{[0-9]+}}, %[[CHUNK]])

// PTX:       .visible .entry all_gather_matmul(
// PTX-COUNT-6: .param .align 64 .b8 tmap{{[0-9]}}[128],
// PTX:       cp.async.bulk.global.shared::cta.bulk_group
// PTX:       cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// PTX:       cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// PTX:       cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group
