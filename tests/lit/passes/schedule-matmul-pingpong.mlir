// schedule-matmul with a ping-pong tile variant (GemmConfig.pingpong): the two consumer
// warpgroups take alternate tiles (a one-trip scf.for where the tile count's parity is
// the warpgroup's), each its own 128 x 128 accumulator; a stage is released by one
// warpgroup (empty: one arrival), two order mbarriers let a warpgroup start its tile's
// waits only after the other passed its own (warpgroup 1 arrives once for tile 0), and
// the stage waits are in turns (the other's phases skipped). The scale prefetch is the
// tile's. The emulator runs it equal to the interpreter on 2 SMs (5 and 4 tiles a CTA, so
// both warpgroups alternate and the ring wraps).
// RUN: pkc-opt -p 'schedule-matmul{variant=128x128_pp_s6},dce' %s | FileCheck %s
// RUN: pkc-opt -p 'schedule-matmul{variant=128x128_pp_s6},dce' --emit=ptx %s | FileCheck %s --check-prefix=PTX
// RUN: %python -m pkc.emu %s -p 'schedule-matmul{variant=128x128_pp_s6},dce' --target sm_90a --sms 2 | FileCheck %s --check-prefix=EMU

func.func @mm(%x: tensor<300x160xf8E4M3FN>, %w: tensor<272x160xf8E4M3FN>, %sa: tensor<300x1xf32>, %sb: tensor<1x272xf32>) -> tensor<300x272xbf16> {
  %wt = pk.transpose %w {perm = [1, 0]} : tensor<272x160xf8E4M3FN> -> tensor<160x272xf8E4M3FN>
  %y = pk.scaled_matmul %x, %wt scales(%sa, %sb) : (tensor<300x160xf8E4M3FN>, tensor<160x272xf8E4M3FN>, tensor<300x1xf32>, tensor<1x272xf32>) -> tensor<300x272xbf16>
  func.return %y : tensor<300x272xbf16>
}

// CHECK:       pk.kernel "scaled_matmul"{{.*}}pk.plan = {pattern = "gemm", bm = 128 : i64, bn = 128 : i64, stages = 6 : i64{{.*}}pingpong = true
// CHECK-SAME:  128x128 s6 nk tma e4m3xe4m3 g8 pingpong
// CHECK:       %[[FULL:.*]] = "pks.mbarrier_alloc"() : () -> !pks.mbarriers<6, 1>
// CHECK-NEXT:  %[[EMPTY:.*]] = "pks.mbarrier_alloc"() : () -> !pks.mbarriers<6, 1>
// CHECK-NEXT:  %[[ORDER:.*]] = "pks.mbarrier_alloc"() : () -> !pks.mbarriers<2, 1>
// CHECK:       "pks.role"
// CHECK:       "pks.role"
// CHECK:       %[[ACC:.*]] = "pks.acc_alloc"() : () -> !pks.acc<128x128>
// CHECK:       "pks.mbarrier_arrive"(%[[ORDER]], %{{.*}}, %{{.*}}) <{operandSegmentSizes = array<i32: 1, 1, 1>}>
// CHECK:       "pks.tile_loop"
// CHECK:         arith.select
// CHECK-NEXT:    scf.for
// CHECK:           "pks.mbarrier_wait"(%[[ORDER]],
// CHECK-NEXT:      "pks.scale_prefetch"(%[[ACC]],
// CHECK-NEXT:      scf.for
// CHECK-NEXT:        "pks.mbarrier_wait"(%[[FULL]], %{{.*}}, %{{.*}}) {turns}
// CHECK:             "pks.mma_async"(%[[ACC]]
// CHECK:             "pks.mbarrier_arrive"(%[[EMPTY]]
// CHECK:           "pks.mbarrier_arrive"(%[[ORDER]],
// CHECK-NEXT:      "pks.mma_wait"
// CHECK:           "pks.acc_scale"(%[[ACC]]
// CHECK:         arith.remui

// PTX:       .entry scaled_matmul
// PTX-COUNT-14: mbarrier.init.shared::cta.b64
// PTX:       wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3
// PTX:       wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3
// PTX:       shfl.sync.idx.b32

// EMU: ok   @scaled_matmul: 1 rank(s), sm_90a, {{.*}} {{(bitwise|within tolerance)}}
// EMU: 1 kernel(s) match the interpreter
