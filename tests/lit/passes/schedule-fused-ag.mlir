// schedule-fused: the all-gather + GEMM kernel that overlap fused (kernel level, after the
// default pipeline) becomes a scheduled kernel: the GEMM's roles over W shards (own shard
// first) in the main CTAs; the last CTAs put this rank's shard to the peers (bulk copies
// through a ring over the GEMM's stage memory, a signal per row block); the producer
// waits once per remote row block and loads through a selected 3-D map; C through a 3-D
// map. sm-partition sizes the put CTAs from the GEMM's predicted time.
// RUN: pkc-opt -p 'default{force=true},schedule-fused,dce' %s | FileCheck %s
// RUN: pkc-opt -p 'default{force=true},schedule-fused,dce' --emit=ptx %s | FileCheck %s --check-prefix=PTX

func.func @ag_mm(%x: tensor<101x72xbf16>, %w: tensor<136x72xbf16>) -> tensor<303x136xbf16> {
  %g = pk.all_gather %x {dim = 0 : i64, world = 3 : i64} : tensor<101x72xbf16> -> tensor<303x72xbf16>
  %wt = pk.transpose %w {perm = [1, 0]} : tensor<136x72xbf16> -> tensor<72x136xbf16>
  %c = pk.matmul %g, %wt : (tensor<303x72xbf16>, tensor<72x136xbf16>) -> tensor<303x136xbf16>
  func.return %c : tensor<303x136xbf16>
}

// CHECK-LABEL: func.func @ag_mm
// CHECK:       %[[C:.*]], %{{.*}} = pk.kernel "all_gather_matmul"(%x, %w) {world = 3 : i64
// CHECK-SAME:    put_ctas = 4 : i64
// CHECK-SAME:    schedule = "fused", fused_kind = "ag", bm = 128 : i64, bn = 128 : i64
// CHECK-SAME:    chunk_rows = 101 : i64, tiles_per_chunk = 2 : i64, row_blocks = 1 : i64, scheduled_overlap = "inter", comm_ctas = 4 : i64, put_piece = 32768 : i64, put_ring = 4 : i64, put_lag = 2 : i64, gathered_output = false
// CHECK-SAME:    sm-partition: all-gather + GEMM in one grid: 4 put CTAs: the remote rows of A
// CHECK-SAME:    scheduled all-gather + GEMM W=3 303x136x72 bf16: 128x128 s6
// CHECK-SAME:    3 shards of 2 tiles (own shard first)
// CHECK-SAME:    4 put CTAs from sm-partition's plan
// CHECK-SAME:    -> (tensor<303x136xbf16>, tensor<303x72xbf16>)
// CHECK-NEXT:  ^bb0(%[[A:.*]]: !pk.buffer<101x72xbf16>, %{{.*}}: !pk.buffer<136x72xbf16>, %[[CB:.*]]: !pk.buffer<303x136xbf16>, %[[G:.*]]: !pk.buffer<303x72xbf16, symmetric>):
// CHECK-NEXT:    %[[PAD:.*]] = pk.alloc {zero} : !pk.buffer<6xi32, symmetric>
// CHECK-NEXT:    %[[CTL:.*]] = pk.alloc {zero} : !pk.buffer<2xi32>
// CHECK-NEXT:    %[[TA:.*]] = "pks.tmap_view"(%[[A]]) {dims = [#builtin.int<1>, #builtin.int<101>, #builtin.int<72>]} {{.*}} -> !pks.tmap<bf16, 64x128x1, swizzle 128>
// CHECK-NEXT:    %[[TG:.*]] = "pks.tmap_view"(%[[G]]) {dims = [#builtin.int<3>, #builtin.int<101>, #builtin.int<72>]}
// CHECK-NEXT:    "pks.tmap"
// CHECK-NEXT:    "pks.tmap_view"(%[[CB]]) {dims = [#builtin.int<3>, #builtin.int<101>, #builtin.int<136>]} {{.*}} -> !pks.tmap<bf16, 64x64x1, swizzle 128>
// CHECK-NEXT:    "pks.schedule"()
// CHECK:           "pks.launch_param"() {param = "rank"}
// CHECK-NEXT:      "pks.epoch"(%[[CTL]])
// The lowering reads the epoch ahead of the setup barrier: no barrier of its own.
// CHECK-NOT:       "pks.cluster_sync"
// CHECK:           %[[STAGES:.*]] = "pks.smem_alloc"() : () -> !pks.smem<6 x 16384>
// CHECK:           %[[RING:.*]] = "pks.smem_overlay"(%[[STAGES]]) {count = #builtin.int<4>, bytes = #builtin.int<32768>}
// CHECK-NEXT:      %[[RBARS:.*]] = "pks.mbarrier_alloc"() : () -> !pks.mbarriers<4, 1>
// CHECK-NEXT:      "pks.cta_partition"() ({
// The producer: the own shard's tiles need no wait; a remote row block is waited for once.
// CHECK:             "pks.chunk_tile_loop"
// CHECK:               "pks.when"
// CHECK:                 "pks.when"
// CHECK:                   "pks.signal_wait"({{.*}}) {site = #builtin.int<1>
// CHECK-NEXT:              "pks.fence_async_global"()
// CHECK:               "pks.tmap_select"(%{{.*}}, %[[TA]], %[[TG]])
// CHECK:               "pks.tma_load"
// CHECK:             kind = "producer"
// CHECK:             "pks.chunk_tile_loop"
// CHECK:               "pks.tma_store"
// CHECK:             kind = "consumer"
// The put side: announce, wait for the peers' announcements, then per peer and row block
// the ring's bulk loads and stores, a drained bulk group, a fence and the block's signal.
// CHECK:           ^bb{{.*}}(%{{.*}}: i32):
// CHECK:             "pks.signal_add"
// CHECK:             "pks.signal_wait"({{.*}}) {site = #builtin.int<1>
// CHECK:             "pks.ptr"(%[[A]])
// CHECK:             "pks.ptr"(%[[G]], %{{.*}})
// CHECK:                 "pks.bulk_load"({{.*}}, %[[RING]], %{{.*}}, %[[RBARS]], %{{.*}})
// CHECK:                 "pks.bulk_wait"() {pending = #builtin.int<1>, read = #builtin.int<1>}
// CHECK:                 "pks.mbarrier_wait"(%[[RBARS]]
// CHECK:                 "pks.bulk_store"
// CHECK-NEXT:            "pks.bulk_commit"
// CHECK:               "pks.bulk_wait"() {pending = #builtin.int<0>}
// CHECK-NEXT:          "pks.fence_async_global"()
// CHECK:                 "pks.signal_add"({{.*}}) {scope = "sys", sem = "release"}
// CHECK:           }) {side = #builtin.int<4>}
// CHECK-NEXT:      "pks.epoch_publish"(%[[CTL]], %{{.*}})

// PTX: .visible .entry all_gather_matmul(
// PTX:   .param .u64 alloc0_p2,
// PTX:   .param .u64 out3_p0,
// PTX:   .param .u64 out3_p2,
// PTX:   .param .u32 trap
// The put side (the last CTAs) comes first in the entry, then the GEMM's roles.
// PTX:   mbarrier.arrive.expect_tx.release.cta.shared::cta.b64
// PTX:   cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes
// PTX:   cp.async.bulk.global.shared::cta.bulk_group
// PTX:   red.release.sys.global.add.u32
// PTX:   cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// PTX:   cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group
