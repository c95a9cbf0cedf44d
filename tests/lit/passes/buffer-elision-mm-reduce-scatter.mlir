// buffer-elision on overlap's GEMM+RS kernel: the W-slot staging buffer and the owner's
// pass summing it go. bf16 result: partial f32 tiles are put-added into the owner's zeroed
// f32 accumulator; the owner keeps the one f32 -> bf16 conversion. f32 result: the adds
// land in the (symmetric) output itself, zeroed in the kernel and announced to the peers
// by a `zeroed` signal before any add.
// RUN: pkc-opt --split-input-file -p 'overlap{force=true tile=16 tile-k=32},buffer-elision' %s | FileCheck %s
// RUN: pkc-opt --split-input-file -p 'overlap{force=true tile=16 tile-k=32},sm-partition,buffer-elision' %s | FileCheck %s --check-prefix=SMS

func.func @mm_rs(%a: tensor<64x32xbf16>, %b: tensor<32x32xbf16>) -> tensor<32x32xbf16> {
  %c = pk.matmul %a, %b : (tensor<64x32xbf16>, tensor<32x32xbf16>) -> tensor<64x32xbf16>
  %o = pk.reduce_scatter %c {dim = 0 : i64, reduce = "sum", world = 2 : i64} : tensor<64x32xbf16> -> tensor<32x32xbf16>
  func.return %o : tensor<32x32xbf16>
}

// CHECK-LABEL: func.func @mm_rs
// CHECK-NEXT:  %o = pk.kernel "matmul_reduce_scatter"(%a, %b) {world = 2 : i64, pk.fusion = {stage = "elided"
// CHECK-SAME:    "buffer-elision: removed staging recv (!pk.buffer<64x32xf32, symmetric>): partial tiles put-add into the owner's zeroed f32 accumulator; the final f32 -> bf16 conversion stays (correctness first); outputs in symmetric memory"
// CHECK-NEXT:  ^bb0(%A: !pk.buffer<64x32xbf16>, %B: !pk.buffer<32x32xbf16>, %O: !pk.buffer<32x32xbf16, symmetric>):
// CHECK-NEXT:    %send = pk.alloc : !pk.buffer<64x32xf32>
// CHECK-NEXT:    %accum = pk.alloc {zero} : !pk.buffer<32x32xf32, symmetric>
// CHECK-NOT:     staging
// CHECK:         pk.worker "compute" {
// CHECK:             pk.store %acc, %send
// CHECK:           pk.wait %arrived[%{{.*}}] until %c2 : !pk.signals<4>
// CHECK-NEXT:      %total = pk.load %accum[%{{.*}}] : !pk.buffer<32x32xf32, symmetric> -> !pk.tile<16x16xf32>
// CHECK-NEXT:      %out = pk.tile_map "cast" %total : (!pk.tile<16x16xf32>) -> !pk.tile<16x16xbf16>
// CHECK-NEXT:      pk.store %out, %O[%{{.*}}] : !pk.tile<16x16xbf16>, !pk.buffer<32x32xbf16, symmetric>
// CHECK:         pk.worker "communicate" {
// CHECK:               pk.wait %ready
// CHECK:               %tile = pk.load %send
// CHECK:               pk.put %tile, %accum[%{{.*}}] to %[[P:[0-9a-z_]+]] add : !pk.tile<16x16xf32>, !pk.buffer<32x32xf32, symmetric>
// CHECK-NEXT:          pk.signal %arrived[%{{.*}}] to %[[P]] : !pk.signals<4>

// sm-partition may run in between: its SM counts and remarks are kept.
// SMS-LABEL:   func.func @mm_rs
// SMS:         pk.fusion = {stage = "elided"
// SMS-SAME:      pk.remarks = ["fused mm+reduce_scatter {{.*}}", "sm-partition: 8 communicate + 124 compute SMs of 132 (h200){{.*}}", "buffer-elision: removed staging recv
// SMS:         pk.worker "compute" attributes {sms = 124 : i64}
// SMS:         pk.worker "communicate" attributes {sms = 8 : i64}

// -----

func.func @mm_rs_f32(%a: tensor<64x32xf32>, %b: tensor<32x32xf32>) -> tensor<32x32xf32> {
  %c = pk.matmul %a, %b : (tensor<64x32xf32>, tensor<32x32xf32>) -> tensor<64x32xf32>
  %o = pk.reduce_scatter %c {dim = 0 : i64, reduce = "sum", world = 2 : i64} : tensor<64x32xf32> -> tensor<32x32xf32>
  func.return %o : tensor<32x32xf32>
}

// CHECK-LABEL: func.func @mm_rs_f32
// CHECK:         "buffer-elision: removed staging recv (!pk.buffer<64x32xf32, symmetric>): partial tiles put-add straight into the owner's symmetric f32 output, zeroed in the kernel behind a 'zeroed' signal; outputs in symmetric memory"
// CHECK-NEXT:  ^bb0(%A: !pk.buffer<64x32xf32>, %B: !pk.buffer<32x32xf32>, %O: !pk.buffer<32x32xf32, symmetric>):
// CHECK-NEXT:    %send = pk.alloc : !pk.buffer<64x32xf32>
// CHECK-NEXT:    %ready = pk.alloc_signals : !pk.signals<8>
// CHECK-NEXT:    %arrived = pk.alloc_signals : !pk.signals<4>
// CHECK-NEXT:    %zeroed = pk.alloc_signals : !pk.signals<2>
// CHECK:         pk.worker "compute" {
// CHECK:             %zero = pk.tile_fill {value = 0.000000e+00 : f32} : !pk.tile<16x16xf32>
// CHECK:             pk.store %zero, %O
// CHECK:           scf.for %q = %c0 to %c2 step %c1 {
// CHECK-NEXT:        pk.signal %zeroed[%rank] to %q : !pk.signals<2>
// CHECK:           pk.wait %arrived[%{{.*}}] until %c2 : !pk.signals<4>
// CHECK-NEXT:      pk.yield
// CHECK:         pk.worker "communicate" {
// CHECK:             pk.wait %zeroed[%[[P:[0-9a-z_]+]]] until %c1 : !pk.signals<2>
// CHECK:                 pk.put %tile, %O[%{{.*}}] to %[[P]] add : !pk.tile<16x16xf32>, !pk.buffer<32x32xf32, symmetric>
