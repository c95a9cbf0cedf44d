// Forced CTA pairs on the row-chunked fused fp8 kinds (schedule-fused{variant=128x256_s4_cl2},
// issue 20): (1) GEMM + reduce-scatter at W = 3 whose chunks of 72 rows are one row tile
// each, so every pair's second tile lies past its chunk: the chunk counts whole pairs
// (tiles_per_chunk = 2 row tiles x 3 column tiles); (2) all-gather + GEMM at W = 2 with
// the put CTAs a whole number of pairs. The PTX launches clusters of 2, multicasts B, and
// leaves by a cluster barrier. (The interpreter and the emulator run them:
// tests/unit/test_fused_cluster_pairs.py; the GPU: tests/gpu/test_gpu_fused_pingpong.py.)
// RUN: pkc-opt -p 'default{force=true},schedule-fused{variant=128x256_s4_cl2},dce' %s | FileCheck %s
// RUN: pkc-opt -p 'default{force=true},schedule-fused{variant=128x256_s4_cl2},dce' --emit=ptx %s | FileCheck %s --check-prefix=PTX
// RUN: not pkc-opt -p 'default{force=true},schedule-fused{variant=128x128_pp_cl2},dce' %S/schedule-fused-fp8.mlir 2>&1 | FileCheck %s --check-prefix=AR

func.func @rs(%a: tensor<216x128xf8E4M3FN>, %b: tensor<128x528xf8E4M3FN>, %sa: tensor<216x1xf32>, %sb: tensor<1x528xf32>) -> tensor<72x528xbf16> {
  %c = pk.scaled_matmul %a, %b scales(%sa, %sb) : (tensor<216x128xf8E4M3FN>, tensor<128x528xf8E4M3FN>, tensor<216x1xf32>, tensor<1x528xf32>) -> tensor<216x528xbf16>
  %o = pk.reduce_scatter %c {dim = 0 : i64, reduce = "sum", world = 3 : i64} : tensor<216x528xbf16> -> tensor<72x528xbf16>
  func.return %o : tensor<72x528xbf16>
}
func.func @ag(%x: tensor<72x128xf8E4M3FN>, %b: tensor<128x272xf8E5M2>, %sa: tensor<72x1xf32>, %sb: tensor<1x272xf32>) -> (tensor<144x272xbf16>) {
  %g = pk.all_gather %x {dim = 0 : i64, world = 2 : i64} : tensor<72x128xf8E4M3FN> -> tensor<144x128xf8E4M3FN>
  %gs = pk.all_gather %sa {dim = 0 : i64, world = 2 : i64} : tensor<72x1xf32> -> tensor<144x1xf32>
  %y = pk.scaled_matmul %g, %b scales(%gs, %sb) : (tensor<144x128xf8E4M3FN>, tensor<128x272xf8E5M2>, tensor<144x1xf32>, tensor<1x272xf32>) -> tensor<144x272xbf16>
  func.return %y : tensor<144x272xbf16>
}

// CHECK-LABEL: func.func @rs
// CHECK:       pk.kernel "scaled_matmul_reduce_scatter"{{.*}}fused_kind = "rs", bm = 128 : i64, bn = 256 : i64{{.*}}chunk_rows = 72 : i64, tiles_per_chunk = 6 : i64
// CHECK-SAME:  128x256 s4 nk tma e4m3xe4m3 cl2 g8, 3 chunks of 6 tiles, own chunk first
// CHECK:       "pks.chunk_tile_loop"
// CHECK-LABEL: func.func @ag
// CHECK:       pk.kernel "all_gather_scaled_matmul"{{.*}}fused_kind = "ag", bm = 128 : i64, bn = 256 : i64{{.*}}tiles_per_chunk = 4 : i64{{.*}}comm_ctas = 4 : i64
// CHECK-SAME:  cl2 g8, 2 shards of 4 tiles (own shard first)
// CHECK:       "pks.cta_partition"

// PTX:         .reqnctapercluster 2, 1, 1
// PTX:         %cluster_ctarank
// PTX:         %clusterid.x
// PTX:         multicast::cluster
// PTX:         barrier.cluster.arrive.release
// PTX:         .reqnctapercluster 2, 1, 1
// PTX:         multicast::cluster

// AR:          error: 'pk.kernel' op schedule-fused: variant=128x128_pp_cl2: {{.*}}: CTA pairs (cluster_m = 2) are not built for ArOutParts
