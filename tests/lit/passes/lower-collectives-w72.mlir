// lower-collectives and the default pipeline at W = 72 (an NVL72 domain, target nvl72):
// the kernels loop over the 72 peers (no cap below 72), staging and signal counts scale
// with W, and the cost model's choice at 72 is in the remarks (per-peer barrier costs make
// a 9 KiB all-reduce one-shot: two barriers instead of three). h200 and b200 refuse W = 72.
// RUN: pkc-opt -p 'lower-collectives{target=nvl72}' %s | FileCheck %s
// RUN: pkc-opt -p 'default{target=nvl72 force=true}' %s | FileCheck %s --check-prefix=DEFAULT
// RUN: not pkc-opt -p 'lower-collectives' %s 2>&1 | FileCheck %s --check-prefix=H200

func.func @ar(%x: tensor<72x64xbf16>) -> tensor<72x64xbf16> {
  %y = pk.all_reduce %x {reduce = "sum", world = 72 : i64} : tensor<72x64xbf16> -> tensor<72x64xbf16>
  func.return %y : tensor<72x64xbf16>
}
// CHECK-LABEL: func.func @ar
// CHECK: pk.kernel "all_reduce_one_shot"(%view) {world = 72 : i64, pk.plan = {collective = "all_reduce", algorithm = "one_shot", forced = false, target = "nvl72"
// CHECK-SAME: "all_reduce 9 KiB over 72 ranks: one-shot 20.5 us (two-shot 27.8 us)"
// CHECK: %staging = pk.alloc : !pk.buffer<1x72x4608xbf16, symmetric>
// CHECK: scf.for %p = %c0 to %c72 step %c1 {
// CHECK:   %peer = arith.remui %{{.*}}, %c72 : index
// CHECK:   pk.put %tile, %staging[%c0, %rank, %c0] to %peer
// CHECK: pk.wait %arrived[%c0] until %c72 : !pk.signals<1>
// The W slots are summed in rank order in f32 by a loop over the 71 other slots.
// CHECK: scf.for %src = %c1 to %c72 step %c1 iter_args

func.func @rs(%x: tensor<144x64xbf16>) -> tensor<2x64xbf16> {
  %y = pk.reduce_scatter %x {dim = 0 : i64, reduce = "sum", world = 72 : i64} : tensor<144x64xbf16> -> tensor<2x64xbf16>
  func.return %y : tensor<2x64xbf16>
}
// CHECK-LABEL: func.func @rs
// CHECK: pk.kernel "reduce_scatter_direct"{{.*}}world = 72 : i64{{.*}}"reduce_scatter 18 KiB over 72 ranks: direct 19.5 us (ring 118 us)"
// CHECK: %staging = pk.alloc : !pk.buffer<1x72x128xbf16, symmetric>
// CHECK: scf.for %p = %c0 to %c72 step %c1 {
// CHECK: pk.wait %arrived[%c0] until %c72

func.func @ag(%x: tensor<2x64xbf16>) -> tensor<144x64xbf16> {
  %y = pk.all_gather %x {dim = 0 : i64, world = 72 : i64} : tensor<2x64xbf16> -> tensor<144x64xbf16>
  func.return %y : tensor<144x64xbf16>
}
// CHECK-LABEL: func.func @ag
// CHECK: pk.kernel "all_gather_direct"{{.*}}world = 72 : i64
// CHECK: scf.for %p = %c0 to %c72 step %c1 {

func.func @mm_rs(%a: tensor<9216x256xbf16>, %b: tensor<256x256xbf16>) -> tensor<128x256xbf16> {
  %p = pk.matmul %a, %b : (tensor<9216x256xbf16>, tensor<256x256xbf16>) -> tensor<9216x256xbf16>
  %y = pk.reduce_scatter %p {dim = 0 : i64, reduce = "sum", world = 72 : i64} : tensor<9216x256xbf16> -> tensor<128x256xbf16>
  func.return %y : tensor<128x256xbf16>
}
// The graph -> kernel level at W = 72: the fused GEMM + reduce-scatter kernel of 72 ranks.
// DEFAULT-LABEL: func.func @mm_rs
// DEFAULT: pk.kernel "matmul_reduce_scatter"(%a, %b) {world = 72 : i64
// DEFAULT-SAME: target = "nvl72"
// DEFAULT-SAME: "sm-partition: {{.*}} of 148 (nvl72)

// H200: error: 'pk.all_reduce' op lower-collectives: world 72 is outside the NVLink domain of h200 (1..8 GPUs)
