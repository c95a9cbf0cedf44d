// The fused fp8 kinds scheduled on sm_90a beside the GEMM + reduce-scatter (issue 20):
// (1) scaled matmul -> all_reduce at W = 2: the bf16 fresh-output broadcast kernel on the
//     fp8 GEMM, every partial piece scaled (pks.acc_scale) before it is stored or summed
//     with the peer's (pks.acc_add_smem);
// (2) all_gather -> scaled matmul with A's ROW-WISE scale gathered with A: the put side
//     copies the shard's scale words into the peers' symmetric SG once, before its first
//     signal (8 pks.word_load in flight, then their pks.word_store to every peer; 13 rows
//     are not whole 16-byte vectors, so words; a 128-byte line per shard: 13 rows -> 32),
//     the epilogue scales own-shard tiles with SX and peer tiles with SG.
// (The emulator runs both: tests/unit/test_fp8_fused_ar_ag.py.)
// RUN: pkc-opt -p 'default{force=true},schedule-fused,dce' %s | FileCheck %s
// RUN: pkc-opt -p 'default{force=true},schedule-fused,dce' --emit=ptx %s | FileCheck %s --check-prefix=PTX

func.func @ar(%a: tensor<26x64xf8E4M3FN>, %b: tensor<64x48xf8E4M3FN>, %sa: tensor<26x1xf32>, %sb: tensor<1x48xf32>) -> tensor<26x48xbf16> {
  %c = pk.scaled_matmul %a, %b scales(%sa, %sb) : (tensor<26x64xf8E4M3FN>, tensor<64x48xf8E4M3FN>, tensor<26x1xf32>, tensor<1x48xf32>) -> tensor<26x48xbf16>
  %o = pk.all_reduce %c {reduce = "sum", world = 2 : i64} : tensor<26x48xbf16> -> tensor<26x48xbf16>
  func.return %o : tensor<26x48xbf16>
}
func.func @ag(%x: tensor<13x64xf8E4M3FN>, %b: tensor<64x32xf8E5M2>, %s: tensor<13x1xf32>, %sb: tensor<1x32xf32>) -> tensor<26x32xbf16> {
  %g = pk.all_gather %x {dim = 0 : i64, world = 2 : i64} : tensor<13x64xf8E4M3FN> -> tensor<26x64xf8E4M3FN>
  %gs = pk.all_gather %s {dim = 0 : i64, world = 2 : i64} : tensor<13x1xf32> -> tensor<26x1xf32>
  %y = pk.scaled_matmul %g, %b scales(%gs, %sb) : (tensor<26x64xf8E4M3FN>, tensor<64x32xf8E5M2>, tensor<26x1xf32>, tensor<1x32xf32>) -> tensor<26x32xbf16>
  func.return %y : tensor<26x32xbf16>
}

// CHECK-LABEL: func.func @ar
// CHECK:       pk.kernel "scaled_matmul_all_reduce"(%a, %{{.*}}, %sa, %sb)
// CHECK-SAME:  scheduled fp8 GEMM (e4m3 x e4m3 -> bf16, scales in the epilogue) + all-reduce W=2 26x48x64
// CHECK-SAME:  2 chunks of 1 tiles (rows 13/13), own chunk first, every tile to every rank
// CHECK:       pk.alloc : !pk.buffer<26x48xbf16, symmetric>
// CHECK:       %[[PF:.*]] = "pks.scale_prefetch"({{.*}} {with_rows} : (!pks.acc<64x128>, !pk.buffer<26x1xf32>, !pk.buffer<1x48xf32>
// CHECK:       "pks.mma_async"{{.*}}dtype = "e4m3"
// CHECK:       "pks.acc_scale"({{.*}}, %[[PF]]) {{.*}} : (!pks.acc<64x128>, !pk.buffer<26x1xf32>, !pk.buffer<1x48xf32>, i32, i32, i32, i32, !pks.scales)
// CHECK-NEXT:  "pks.acc_store_smem"
// CHECK:       "pks.mbarrier_wait"
// CHECK-NEXT:  "pks.acc_scale"({{.*}}, %[[PF]]) {{.*}} : (!pks.acc<64x128>, !pk.buffer<26x1xf32>, !pk.buffer<1x48xf32>
// CHECK-NEXT:  "pks.acc_add_smem"

// CHECK-LABEL: func.func @ag
// CHECK-NOT:   pk.all_gather
// CHECK:       pk.kernel "all_gather_scaled_matmul"(%x, %{{.*}}, %s, %sb)
// CHECK-SAME:  scheduled all-gather + fp8 GEMM (e4m3 x e5m2 -> bf16, scales in the epilogue) W=2 26x32x64
// CHECK:       pk.alloc : !pk.buffer<64x1xf32, symmetric>
// CHECK:       "pks.cta_partition"
// (B's column scales prefetched; A's row scales not: the shard's rows are read in the
// epilogue, after the gathered scale rows have arrived)
// CHECK:       %[[PF:.*]] = "pks.scale_prefetch"({{.*}}) <{{.*}}> : (!pks.acc<64x128>, !pk.buffer<13x1xf32>, !pk.buffer<1x32xf32>
// CHECK:       "pks.acc_scale"({{.*}}, %[[PF]]) {{.*}} : (!pks.acc<64x128>, !pk.buffer<13x1xf32>, !pk.buffer<1x32xf32>
// CHECK:       "pks.acc_scale"({{.*}}, %[[PF]]) {{.*}} : (!pks.acc<64x128>, !pk.buffer<64x1xf32, symmetric>, !pk.buffer<1x32xf32>
// CHECK-COUNT-8: "pks.word_load"
// CHECK-COUNT-8: arith.addi
// CHECK-COUNT-8: "pks.word_store"

// PTX:         .entry scaled_matmul_all_reduce
// PTX:         ld.global.nc.f32
// PTX:         wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3
// PTX:         shfl.sync.idx.b32
// PTX:         .entry all_gather_scaled_matmul
// PTX:         ld.relaxed.gpu.global.u32
// PTX:         st.global.u32
// PTX:         ld.global.nc.f32
// PTX:         wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e5m2
// PTX:         shfl.sync.idx.b32
// PTX:         ld.global.nc.f32
