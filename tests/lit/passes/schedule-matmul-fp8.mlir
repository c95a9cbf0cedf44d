// schedule-matmul on an fp8 pk.scaled_matmul (torch._scaled_mm of x and W.T, row-wise
// scales, bias): the same persistent GEMM at the schedule level with 8-bit element types
// (a 128-byte stage row is 128 elements of K), one pks.mma_async per k-block of e4m3 x
// e5m2, and pks.acc_scale in the epilogue, one 64 x 64 piece at a time before its store,
// reading the scales and bias that pks.scale_prefetch loaded into registers before the
// tile's main loop (A's rows: with_rows; B's columns and the bias spread over the warp's
// lanes, fetched by shfl.sync in the epilogue: no global load after the MMAs).
// RUN: pkc-opt -p 'schedule-matmul,dce' %s | FileCheck %s
// RUN: pkc-opt -p 'schedule-matmul,dce' --emit=ptx %s | FileCheck %s --check-prefix=PTX
// RUN: %python -m pkc.emu %s -p 'schedule-matmul,dce' --target sm_90a | FileCheck %s --check-prefix=EMU

func.func @mm(%x: tensor<136x160xf8E4M3FN>, %w: tensor<144x160xf8E5M2>, %sa: tensor<136x1xf32>, %sb: tensor<1x144xf32>, %bias: tensor<144xbf16>) -> tensor<136x144xbf16> {
  %wt = pk.transpose %w {perm = [1, 0]} : tensor<144x160xf8E5M2> -> tensor<160x144xf8E5M2>
  %y = pk.scaled_matmul %x, %wt scales(%sa, %sb) bias %bias : tensor<144xbf16> : (tensor<136x160xf8E4M3FN>, tensor<160x144xf8E5M2>, tensor<136x1xf32>, tensor<1x144xf32>) -> tensor<136x144xbf16>
  func.return %y : tensor<136x144xbf16>
}

// CHECK-LABEL: func.func @mm
// CHECK-NOT:   pk.transpose
// CHECK:       pk.kernel "scaled_matmul"(%x, %w, %sa, %sb, %bias) {{.*}}pk.plan = {pattern = "gemm", bm = 128 : i64, bn = 128 : i64, stages = 6 : i64
// CHECK-SAME:  scheduled fp8 GEMM 136x144x160 e4m3 x e5m2 -> bf16: 128x128 s6
// CHECK-SAME:  row-wise/row-wise scales, bias in the epilogue
// CHECK:       "pks.tmap"({{.*}}) : (!pk.buffer<136x160xf8E4M3FN>) -> !pks.tmap<e4m3, 128x128, swizzle 128>
// CHECK:       "pks.tmap"({{.*}}) : (!pk.buffer<144x160xf8E5M2>) -> !pks.tmap<e5m2, 128x128, swizzle 128>
// CHECK:       "pks.smem_alloc"() : () -> !pks.smem<6 x 16384>
// CHECK:       "pks.tile_loop"
// CHECK:         "pks.mbarrier_arrive"{{.*}}tx_bytes = #builtin.int<32768>
// CHECK:         %[[C128:.*]] = arith.constant 128 : i32
// CHECK-NEXT:    %[[KC:.*]] = arith.muli %{{.*}}, %[[C128]] : i32
// CHECK:         "pks.tma_load"(%{{.*}}, %[[KC]],
// CHECK:       "pks.tile_loop"
// CHECK:         %[[PF:.*]] = "pks.scale_prefetch"(%[[ACC:[0-9]+]], %{{.*}}) <{operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1, 1, 1>}> {with_rows} : (!pks.acc<64x128>, !pk.buffer<136x1xf32>, !pk.buffer<1x144xf32>, !pk.buffer<144xbf16>, i32, i32, i32, i32) -> !pks.scales
// CHECK-NEXT:    scf.for
// CHECK:         "pks.mma_async"{{.*}} {dtype = "e4m3", b_major = "k", b_dtype = "e5m2"}
// CHECK-NEXT:    "pks.mma_commit"
// CHECK:         "pks.acc_scale"(%[[ACC]], {{.*}}, %[[PF]]) <{operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1, 1, 1, 1>}> {piece = array<i64: 0, 0, 64>}
// CHECK-NEXT:    "pks.acc_store_smem"
// CHECK:         "pks.acc_scale"(%[[ACC]], {{.*}}, %[[PF]]) <{{.*}}> {piece = array<i64: 0, 64, 64>}
// CHECK-NEXT:    "pks.acc_store_smem"

// PTX:       .entry scaled_matmul
// PTX:       ld.global.nc.f32
// PTX:       cvt.f32.bf16
// PTX-COUNT-4: wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e5m2 {{.*}}, 1, 1;
// PTX-NOT:   ld.global
// PTX:       shfl.sync.idx.b32
// PTX:       mul.rn.f32
// PTX:       add.rn.f32
// PTX-NOT:   ld.global
// PTX:       cvt.rn.bf16x2.f32

// EMU: ok   @scaled_matmul: 1 rank(s), sm_90a, {{.*}} {{(bitwise|within tolerance)}}
// EMU: 1 kernel(s) match the interpreter
