// The fused fp8 gathers scheduled on sm_90a beside the rows gather (issue 20):
// (1) @agk: all_gather along K -> scaled matmul, A's row-wise scale [M, 1] the gathered
//     row's (an input, not gathered): the all-gather-along-K kernel (the producer's K loop
//     walks the shards: own one first from A's map, a peer's from G's after its row
//     block's signal, pks.tmap_select) on the fp8 GEMM, whose plain epilogue scales the f32
//     sum over both shards once (pks.acc_scale with A's [40, 1] and B's [1, 32] scales);
// (2) @blocks: all_gather along dim 1 of [2, 13, 64] (DTensor Shard(1), 2 blocks of rows
//     per shard) -> rows view -> scaled matmul, A's row scale the same gather of the
//     shard's [2, 13, 1] scale: the block gather's kernel whose put side copies the shard's
//     26 scale rows into the peer's symmetric SG (a 128-byte line per shard: 26 -> 32
//     rows; 26 rows are not whole 16-byte vectors, so u32 words), the epilogue scaling own
//     tiles by SX [26, 1] and a peer's by SG [64, 1];
// (3) @blocks_tensor: the same with tensor-wise scales (no SG, no scale words).
// (The interpreter and the emulator run them: tests/unit/test_fp8_gather_kinds.py.)
// RUN: pkc-opt -p 'default{force=true},schedule-fused,dce' %s | FileCheck %s
// RUN: pkc-opt -p 'default{force=true},schedule-fused,dce' --emit=ptx %s | FileCheck %s --check-prefix=PTX

func.func @agk(%x: tensor<40x48xf8E4M3FN>, %b: tensor<96x32xf8E5M2>, %sa: tensor<40x1xf32>, %sb: tensor<1x32xf32>) -> tensor<40x32xbf16> {
  %g = pk.all_gather %x {dim = 1 : i64, world = 2 : i64} : tensor<40x48xf8E4M3FN> -> tensor<40x96xf8E4M3FN>
  %y = pk.scaled_matmul %g, %b scales(%sa, %sb) : (tensor<40x96xf8E4M3FN>, tensor<96x32xf8E5M2>, tensor<40x1xf32>, tensor<1x32xf32>) -> tensor<40x32xbf16>
  func.return %y : tensor<40x32xbf16>
}
func.func @blocks(%x: tensor<2x13x64xf8E4M3FN>, %w: tensor<64x32xf8E5M2>, %s: tensor<2x13x1xf32>, %sb: tensor<1x32xf32>) -> tensor<52x32xbf16> {
  %g = pk.all_gather %x {dim = 1 : i64, world = 2 : i64} : tensor<2x13x64xf8E4M3FN> -> tensor<2x26x64xf8E4M3FN>
  %gs = pk.all_gather %s {dim = 1 : i64, world = 2 : i64} : tensor<2x13x1xf32> -> tensor<2x26x1xf32>
  %v = pk.reshape %g : tensor<2x26x64xf8E4M3FN> -> tensor<52x64xf8E4M3FN>
  %sv = pk.reshape %gs : tensor<2x26x1xf32> -> tensor<52x1xf32>
  %y = pk.scaled_matmul %v, %w scales(%sv, %sb) : (tensor<52x64xf8E4M3FN>, tensor<64x32xf8E5M2>, tensor<52x1xf32>, tensor<1x32xf32>) -> tensor<52x32xbf16>
  func.return %y : tensor<52x32xbf16>
}
func.func @blocks_tensor(%x: tensor<2x13x64xf8E4M3FN>, %w: tensor<64x32xf8E5M2>, %s: tensor<1xf32>, %sb: tensor<1xf32>) -> tensor<52x32xbf16> {
  %g = pk.all_gather %x {dim = 1 : i64, world = 2 : i64} : tensor<2x13x64xf8E4M3FN> -> tensor<2x26x64xf8E4M3FN>
  %v = pk.reshape %g : tensor<2x26x64xf8E4M3FN> -> tensor<52x64xf8E4M3FN>
  %y = pk.scaled_matmul %v, %w scales(%s, %sb) : (tensor<52x64xf8E4M3FN>, tensor<64x32xf8E5M2>, tensor<1xf32>, tensor<1xf32>) -> tensor<52x32xbf16>
  func.return %y : tensor<52x32xbf16>
}

// CHECK-LABEL: func.func @agk
// CHECK-NOT:   pk.all_gather
// CHECK:       pk.kernel "all_gather_k_scaled_matmul"(%x, %{{.*}}, %sa, %sb) {{.*}}gather_dim = "K", shard_k = 48
// CHECK-SAME:  scheduled all-gather along K + fp8 GEMM (e4m3 x e5m2 -> bf16, the sum over the shards scaled in the epilogue) W=2 40x32x96
// CHECK:       "pks.tmap_view"(%{{.*}}) {dims = [#builtin.int<1>, #builtin.int<40>, #builtin.int<48>]} : (!pk.buffer<40x48xf8E4M3FN>) -> !pks.tmap<e4m3,
// CHECK:       "pks.tmap_view"(%{{.*}}) {dims = [#builtin.int<2>, #builtin.int<40>, #builtin.int<48>]} : (!pk.buffer<80x48xf8E4M3FN, symmetric>) -> !pks.tmap<e4m3,
// CHECK:       "pks.cta_partition"
// CHECK:       "pks.tile_loop"
// the producer's k-step: a peer's shard after its row block's signal, then its map
// CHECK:       "pks.signal_wait"
// CHECK:       "pks.tmap_select"
// CHECK:       "pks.mma_async"{{.*}}dtype = "e4m3"
// the plain epilogue: every piece of the summed tile scaled by A's [40, 1], B's [1, 32]
// CHECK:       "pks.acc_scale"({{.*}} : (!pks.acc<64x128>, !pk.buffer<40x1xf32>, !pk.buffer<1x32xf32>
// CHECK-NEXT:  "pks.acc_store_smem"
// CHECK:       "pks.bulk_store"
// CHECK:       func.return %y

// CHECK-LABEL: func.func @blocks
// CHECK-NOT:   pk.all_gather
// CHECK:       pk.kernel "all_gather_scaled_matmul"(%x_rows, %{{.*}}, %s_rows, %sb) {{.*}}batches = 2
// CHECK-SAME:  2 blocks of 13 rows per shard (block b of rank r: rows b*26 + r*13 of G and C), each padded to 128 rows of tiles; A's row scales gathered with A by the put side (32 rows per shard in the gathered scale)
// CHECK:       pk.alloc : !pk.buffer<64x1xf32, symmetric>
// CHECK:       "pks.tmap_view"(%{{.*}}) {dims = [#builtin.int<2>, #builtin.int<13>, #builtin.int<64>]} : (!pk.buffer<26x64xf8E4M3FN>)
// CHECK:       "pks.tmap_view"(%{{.*}}) {dims = [#builtin.int<4>, #builtin.int<13>, #builtin.int<64>]} : (!pk.buffer<52x64xf8E4M3FN, symmetric>)
// CHECK:       "pks.chunk_tile_loop"
// CHECK:       "pks.signal_wait"
// CHECK:       "pks.tmap_select"
// own tiles by the shard's scale rows, a peer's by its rows in SG
// CHECK:       "pks.acc_scale"({{.*}} : (!pks.acc<64x128>, !pk.buffer<26x1xf32>, !pk.buffer<1x32xf32>
// CHECK:       "pks.acc_scale"({{.*}} : (!pks.acc<64x128>, !pk.buffer<64x1xf32, symmetric>, !pk.buffer<1x32xf32>
// the put side: 8 scale words loaded, then stored to the peer, before the first signal
// CHECK-COUNT-8: "pks.word_load"
// CHECK-COUNT-8: "pks.word_store"
// CHECK:       "pks.signal_add"
// CHECK:       func.return %y

// CHECK-LABEL: func.func @blocks_tensor
// CHECK:       pk.kernel "all_gather_scaled_matmul"(%x_rows, %{{.*}}, %s, %sb) {{.*}}batches = 2
// CHECK-NOT:   pk.alloc : !pk.buffer<{{.*}}x1xf32, symmetric>
// CHECK:       "pks.acc_scale"({{.*}} : (!pks.acc<64x128>, !pk.buffer<1xf32>, !pk.buffer<1xf32>
// CHECK-NOT:   "pks.word_store"
// CHECK:       func.return %y

// PTX: .visible .entry all_gather_k_scaled_matmul(
// PTX: wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e5m2
// PTX: .visible .entry all_gather_scaled_matmul(
// PTX: ld.global.nc.f32
// PTX: wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e5m2
