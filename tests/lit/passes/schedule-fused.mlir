// schedule-fused: the GEMM + reduce-scatter kernel that overlap fused (kernel level, after
// the default pipeline) becomes a scheduled kernel: the GEMM's roles and ring, a tile loop
// over W chunks (own chunk first), an epilogue that stores the own chunk's tiles and
// reduce-adds the peers' through their tensor maps, per-chunk signals and bounded waits.
// RUN: pkc-opt -p 'default{force=true},schedule-fused,dce' %s | FileCheck %s
// RUN: pkc-opt -p 'default{force=true},schedule-fused,dce' --emit=ptx %s | FileCheck %s --check-prefix=PTX
// RUN: pkc-opt -p 'default{force=true},schedule-fused{variant=128x256_s4_tma},dce' %s | FileCheck %s --check-prefix=VARIANT

func.func @mm_rs(%x: tensor<597x72xbf16>, %w: tensor<136x72xbf16>) -> tensor<199x136xbf16> {
  %wt = pk.transpose %w {perm = [1, 0]} : tensor<136x72xbf16> -> tensor<72x136xbf16>
  %c = pk.matmul %x, %wt : (tensor<597x72xbf16>, tensor<72x136xbf16>) -> tensor<597x136xbf16>
  %o = pk.reduce_scatter %c {dim = 0 : i64, reduce = "sum", world = 3 : i64} : tensor<597x136xbf16> -> tensor<199x136xbf16>
  func.return %o : tensor<199x136xbf16>
}

// CHECK-LABEL: func.func @mm_rs
// CHECK:       pk.kernel "matmul_reduce_scatter"(%x, %w) {world = 3 : i64
// CHECK-SAME:    schedule = "fused", fused_kind = "rs", bm = 128 : i64, bn = 128 : i64, stages = 6 : i64
// CHECK-SAME:    b_layout = "nk", chunk_rows = 199 : i64, tiles_per_chunk = 4 : i64, scheduled_overlap = "intra", comm_ctas = 0 : i64, fresh_output = false
// CHECK-SAME:    scheduled GEMM + reduce-scatter W=3 597x136x72 bf16: 128x128 s6
// CHECK-SAME:    3 chunks of 4 tiles, own chunk first
// CHECK-SAME:    sm-partition's inter-SM plan (8 communicate SMs) is not followed
// CHECK-NEXT:  ^bb0(%{{.*}}: !pk.buffer<597x72xbf16>, %{{.*}}: !pk.buffer<136x72xbf16>, %[[C:.*]]: !pk.buffer<199x136xbf16, symmetric>):
// CHECK-NEXT:    %[[PAD:.*]] = pk.alloc {zero} : !pk.buffer<3xi32, symmetric>
// CHECK-NEXT:    %[[CTL:.*]] = pk.alloc {zero} : !pk.buffer<2xi32>
// CHECK:         "pks.peer_tmap"(%[[C]]) {peer = #builtin.int<0>} : (!pk.buffer<199x136xbf16, symmetric>) -> !pks.tmap<bf16, 64x64, swizzle 128>
// CHECK-NEXT:    "pks.peer_tmap"(%[[C]]) {peer = #builtin.int<1>}
// CHECK-NEXT:    "pks.peer_tmap"(%[[C]]) {peer = #builtin.int<2>}
// CHECK-NEXT:    "pks.schedule"()
// CHECK:           "pks.launch_param"() {param = "rank"}
// CHECK-NEXT:      "pks.epoch"(%[[CTL]])
// The lowering reads the epoch ahead of the setup barrier: no barrier of its own.
// CHECK-NOT:       "pks.cluster_sync"
// CHECK:           "pks.smem_alloc"
// The producer loads A's rows chunk * Mc + m0.
// CHECK:           "pks.chunk_tile_loop"
// CHECK-NEXT:      ^{{.*}}(%{{[0-9]+}}: i32, %{{[0-9]+}}: i32, %[[CH:[0-9]+]]: i32,
// CHECK:             arith.muli %[[CH]], %{{.*}} : i32
// CHECK:             "pks.tma_load"
// CHECK:           chunks = #builtin.int<3>
// CHECK:           kind = "producer"
// The consumers: signal the previous chunk when the chunk changes, wait for the owner on
// entering a peer's chunk,
// store or reduce-add each piece through the owner's map.
// CHECK:           "pks.chunk_tile_loop"
// CHECK:             "pks.mma_async"
// CHECK:             "pks.when"
// CHECK:               "pks.bulk_wait"() {pending = #builtin.int<0>}
// CHECK-NEXT:          "pks.fence_async_global"()
// CHECK-NEXT:          "pks.ptr"(%[[PAD]], %{{.*}})
// The own chunk's count at GPU scope (its stores and pad are this GPU's), a peer's at
// system scope.
// CHECK:               "pks.signal_add"({{.*}}) {scope = "gpu", sem = "release"}
// CHECK:               "pks.signal_add"({{.*}}) {scope = "sys", sem = "release"}
// CHECK:               "pks.signal_wait"({{.*}}) {site = #builtin.int<1>
// CHECK:             "pks.tmap_select"
// CHECK:             "pks.acc_store_smem"
// CHECK:             "pks.tma_store_or_add"
// CHECK:           "pks.signal_wait"({{.*}}) {site = #builtin.int<2>
// CHECK:           kind = "consumer"
// CHECK:         "pks.epoch_publish"(%[[CTL]], %{{.*}})

// PTX: .visible .entry matmul_reduce_scatter(
// PTX:   .param .align 64 .b8 tmap4[128],
// PTX:   .param .u64 alloc0_p2,
// PTX:   .param .u64 alloc0_own,
// PTX:   .param .u32 rank,
// PTX:   .param .u32 trap
// PTX:   cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group
// PTX:   cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group
// PTX:   cp.async.bulk.wait_group 0;
// PTX-NEXT: fence.proxy.async.global;
// PTX:   red.release.gpu.global.add.u32
// PTX:   red.release.sys.global.add.u32
// PTX:   ld.acquire.sys.global.u32

// VARIANT: bm = 128 : i64, bn = 256 : i64, stages = 4 : i64
