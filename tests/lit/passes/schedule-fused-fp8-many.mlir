// Several fp8 scaled matmuls of one all-gather (issue 20), sharing the gathered A and A's
// scale, each with its own B and B scale: ONE sm_90a kernel over every weight's column
// tiles (pkc/passes/gather_many.py), whose tiles pick their B map, C map and B scale by
// the tile's weight: pks.tmap_select for the maps, pks.scale_select for the scale (its
// width bounding the scale's columns), read by the tile's scale prefetch and every
// epilogue piece; in PTX the scale is a selp.b64 of the weights' scale pointers.
// (1) @two: A's row-wise scale gathered with A (B scales [1, 32] and [1, 48]);
// (2) @tensor: three weights, tensor-wise scales ([1] each).
// (The interpreter and the emulator run them: tests/unit/test_fp8_gather_many.py.)
// RUN: pkc-opt -p 'default{force=true},schedule-fused,dce' %s | FileCheck %s
// RUN: pkc-opt -p 'default{force=true},schedule-fused,dce' --emit=ptx %s | FileCheck %s --check-prefix=PTX

func.func @two(%x: tensor<13x64xf8E4M3FN>, %sa: tensor<13x1xf32>, %b0: tensor<64x32xf8E5M2>, %b1: tensor<64x48xf8E5M2>, %sb0: tensor<1x32xf32>, %sb1: tensor<1x48xf32>) -> (tensor<26x32xbf16>, tensor<26x48xbf16>) {
  %g = pk.all_gather %x {dim = 0 : i64, world = 2 : i64} : tensor<13x64xf8E4M3FN> -> tensor<26x64xf8E4M3FN>
  %gs = pk.all_gather %sa {dim = 0 : i64, world = 2 : i64} : tensor<13x1xf32> -> tensor<26x1xf32>
  %y0 = pk.scaled_matmul %g, %b0 scales(%gs, %sb0) : (tensor<26x64xf8E4M3FN>, tensor<64x32xf8E5M2>, tensor<26x1xf32>, tensor<1x32xf32>) -> tensor<26x32xbf16>
  %y1 = pk.scaled_matmul %g, %b1 scales(%gs, %sb1) : (tensor<26x64xf8E4M3FN>, tensor<64x48xf8E5M2>, tensor<26x1xf32>, tensor<1x48xf32>) -> tensor<26x48xbf16>
  func.return %y0, %y1 : tensor<26x32xbf16>, tensor<26x48xbf16>
}
func.func @tensor(%x: tensor<13x64xf8E4M3FN>, %sa: tensor<1xf32>, %b0: tensor<64x32xf8E5M2>, %b1: tensor<64x16xf8E5M2>, %b2: tensor<64x32xf8E5M2>, %sb0: tensor<1xf32>, %sb1: tensor<1xf32>, %sb2: tensor<1xf32>) -> (tensor<26x32xbf16>, tensor<26x16xbf16>, tensor<26x32xbf16>) {
  %g = pk.all_gather %x {dim = 0 : i64, world = 2 : i64} : tensor<13x64xf8E4M3FN> -> tensor<26x64xf8E4M3FN>
  %y0 = pk.scaled_matmul %g, %b0 scales(%sa, %sb0) : (tensor<26x64xf8E4M3FN>, tensor<64x32xf8E5M2>, tensor<1xf32>, tensor<1xf32>) -> tensor<26x32xbf16>
  %y1 = pk.scaled_matmul %g, %b1 scales(%sa, %sb1) : (tensor<26x64xf8E4M3FN>, tensor<64x16xf8E5M2>, tensor<1xf32>, tensor<1xf32>) -> tensor<26x16xbf16>
  %y2 = pk.scaled_matmul %g, %b2 scales(%sa, %sb2) : (tensor<26x64xf8E4M3FN>, tensor<64x32xf8E5M2>, tensor<1xf32>, tensor<1xf32>) -> tensor<26x32xbf16>
  func.return %y0, %y1, %y2 : tensor<26x32xbf16>, tensor<26x16xbf16>, tensor<26x32xbf16>
}

// CHECK-LABEL: func.func @two
// CHECK-NOT:   pk.scaled_matmul
// CHECK:       pk.kernel "all_gather_scaled_matmul"(%x, %{{.*}}, %{{.*}}, %sa, %sb0, %sb1)
// CHECK-SAME:  scheduled all-gather + fp8 GEMMs (e4m3 x e5m2 -> bf16, scales in the epilogue) W=2 26x(32+48)x64
// CHECK-SAME:  one kernel over 2 weights, gathering once {{.*}} B and C maps and B's scale selected per tile
// the producer: the tile's weight's B map
// CHECK:       "pks.tmap_select"(%{{.*}}) : (i32, !pks.tmap<e5m2, 128x128, swizzle 128>, !pks.tmap<e5m2, 128x128, swizzle 128>)
// the consumer: the tile's weight's B scale and width, prefetched before the main loop
// CHECK:       %[[SB:.*]] = "pks.scale_select"(%[[W:.*]], %{{.*}}, %{{.*}}) : (i32, !pk.buffer<1x32xf32>, !pk.buffer<1x48xf32>) -> !pk.buffer<1x48xf32>
// CHECK:       %[[PF:.*]] = "pks.scale_prefetch"(%{{.*}}, %{{.*}}, %[[SB]], {{.*}} : (!pks.acc<64x128>, !pk.buffer<13x1xf32>, !pk.buffer<1x48xf32>
// the epilogue: the weight's C map (the same weight index), every piece scaled by the selected scale
// CHECK:       "pks.tmap_select"(%[[W]], %{{.*}}, %{{.*}}) : (i32, !pks.tmap<bf16
// CHECK:       "pks.acc_scale"(%{{.*}}, %{{.*}}, %[[SB]], {{.*}}, %[[PF]])
// CHECK:       func.return %y0, %y1

// CHECK-LABEL: func.func @tensor
// CHECK:       pk.kernel "all_gather_scaled_matmul"(%x, %{{.*}}, %{{.*}}, %{{.*}}, %sa, %sb0, %sb1, %sb2)
// CHECK-SAME:  one kernel over 3 weights
// CHECK:       %[[SB:.*]] = "pks.scale_select"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) : (i32, !pk.buffer<1xf32>, !pk.buffer<1xf32>, !pk.buffer<1xf32>) -> !pk.buffer<1xf32>
// CHECK:       "pks.scale_prefetch"(%{{.*}}, %{{.*}}, %[[SB]],
// CHECK:       "pks.acc_scale"(%{{.*}}, %{{.*}}, %[[SB]],

// the scale select: a selp of the two B scales' pointers (kernel arguments buf4, buf5),
// then the scale loads bounded by the selected weight's width (32 or 48)
// PTX-LABEL:   .visible .entry all_gather_scaled_matmul(
// PTX:         ld.param.u64 %[[SB0:rd[0-9]+]], [buf4];
// PTX-NEXT:    ld.param.u64 %[[SB1:rd[0-9]+]], [buf5];
// PTX:         selp.b64 %[[S:rd[0-9]+]], %[[SB1]], %[[SB0]], %p{{[0-9]+}};
// PTX-NEXT:    mov.u32 %[[N0:r[0-9]+]], 32;
// PTX:         mov.u32 %[[N1:r[0-9]+]], 48;
// PTX-NEXT:    selp.b32 %[[N:r[0-9]+]], %[[N1]], %[[N0]], %p{{[0-9]+}};
// PTX:         add.s64 %[[A:rd[0-9]+]], %[[S]], %rd{{[0-9]+}};
// PTX-NEXT:    setp.lt.u32 %[[P:p[0-9]+]], %r{{[0-9]+}}, %[[N]];
// PTX:         @%[[P]] ld.global.nc.f32 %f{{[0-9]+}}, [%[[A]]];
// PTX-LABEL:   .visible .entry all_gather_scaled_matmul_1(
