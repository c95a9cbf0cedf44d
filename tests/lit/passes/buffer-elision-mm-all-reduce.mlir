// buffer-elision on overlap's GEMM+AR kernel (intra-SM): the W-slot staging of partials
// and the bcast staging (plus the final copy out of it) go. Partials are put-added into the
// owner's zeroed f32 accumulator; the owner converts each reduced tile once and puts it
// straight into every rank's symmetric output; the last wait is the exit barrier.
// RUN: pkc-opt -p 'overlap{force=true overlap=intra tile=16 tile-k=32},buffer-elision' %s | FileCheck %s

func.func @mm_ar(%a: tensor<40x32xbf16>, %b: tensor<32x32xbf16>) -> tensor<40x32xbf16> {
  %c = pk.matmul %a, %b : (tensor<40x32xbf16>, tensor<32x32xbf16>) -> tensor<40x32xbf16>
  %o = pk.all_reduce %c {reduce = "sum", world = 4 : i64} : tensor<40x32xbf16> -> tensor<40x32xbf16>
  func.return %o : tensor<40x32xbf16>
}

// CHECK-LABEL: func.func @mm_ar
// CHECK:         "buffer-elision: removed staging recv (!pk.buffer<192x32xf32, symmetric>), bcast (!pk.buffer<40x32xbf16, symmetric>): partial tiles put-add into the owner's zeroed f32 accumulator; the owner converts each reduced tile once (f32 -> bf16, kept: correctness first) and puts it straight into every rank's symmetric output; outputs in symmetric memory"
// CHECK-NEXT:  ^bb0(%A: !pk.buffer<40x32xbf16>, %B: !pk.buffer<32x32xbf16>, %O: !pk.buffer<40x32xbf16, symmetric>):
// CHECK-NEXT:    %accum = pk.alloc {zero} : !pk.buffer<40x32xf32, symmetric>
// CHECK-NEXT:    %arrived = pk.alloc_signals : !pk.signals<6>
// CHECK-NEXT:    %done = pk.alloc_signals : !pk.signals<1>
// CHECK:         pk.worker "compute" {
// CHECK:               %acc = pk.mma
// CHECK-NEXT:          pk.put %acc, %accum[%{{.*}}] to %[[P:[0-9a-z_]+]] add : !pk.tile<16x16xf32>, !pk.buffer<40x32xf32, symmetric>
// CHECK-NEXT:          pk.signal %arrived[%t] to %[[P]] : !pk.signals<6>
// CHECK:           scf.for %t_1 = %rank to %c6 step %c4 {
// CHECK:             pk.wait %arrived[%t_1] until %c4 : !pk.signals<6>
// CHECK-NEXT:        %total = pk.load %accum
// CHECK-NEXT:        %out = pk.tile_map "cast" %total : (!pk.tile<16x16xf32>) -> !pk.tile<16x16xbf16>
// CHECK-NEXT:        scf.for %j = %c0 to %c4 step %c1 {
// CHECK:               pk.put %out, %O[%{{.*}}] to %[[Q:[0-9a-z_]+]] : !pk.tile<16x16xbf16>, !pk.buffer<40x32xbf16, symmetric>
// CHECK-NEXT:          pk.signal %done[%c0] to %[[Q]] : !pk.signals<1>
// CHECK:           pk.wait %done[%c0] until %c6 : !pk.signals<1>
// CHECK-NEXT:      pk.yield
