// RUN: %python -m pkc.codegen %s --target=sm_80 | FileCheck %s

// Two workers own consecutive ranges of blockIdx.x (sizes are kernel parameters); a
// foreach deals iterations round-robin to the worker's CTAs; tile loads and stores that
// overhang the buffer (100 x 70 in 64 x 64 tiles) are guarded: zeros in, nothing out.

// CHECK: .param .u32 ctas_w0,
// CHECK-NEXT: .param .u32 ctas_w1
// CHECK: mov.u32 [[BID:%r[0-9]+]], %ctaid.x;
// CHECK: worker 0 "compute"
// CHECK: pk.foreach [2, 2]: iterations round-robin over the worker's CTAs
// CHECK: pk.load in[...] (own) -> !pk.tile<64x64xf16>
// CHECK: mov.b16 [[ZERO:%h[0-9]+]], 0;
// CHECK: mov.b16 [[V:%h[0-9]+]], [[ZERO]];
// CHECK-NEXT: @%p{{[0-9]+}} ld.global.b16 [[V]], [%rd{{[0-9]+}}];
// CHECK: pk.store !pk.tile<64x64xf16> -> out[...]
// CHECK: @%p{{[0-9]+}} st.global.b16
// After the foreach: a worker barrier (skipped at run time with one CTA).
// CHECK: worker barrier (pk.foreach)
// CHECK: red.release.sys.global.add.u32
// CHECK: ld.acquire.sys.global.u32
// CHECK: worker 1 "communicate"

func.func @main(%x: tensor<100x70xf16>) -> tensor<100x70xf16> {
  %y = pk.kernel "two_workers" (%x) {world = 1 : i64} : (tensor<100x70xf16>) -> tensor<100x70xf16> {
  ^bb0(%in: !pk.buffer<100x70xf16>, %out: !pk.buffer<100x70xf16>):
    pk.worker "compute" attributes {sms = 4 : i64} {
      %c64 = arith.constant 64 : index
      pk.foreach attributes {bounds = [2 : i64, 2 : i64]} {
      ^bb0(%i: index, %j: index):
        %r = arith.muli %i, %c64 : index
        %c = arith.muli %j, %c64 : index
        %t = pk.load %in[%r, %c] : !pk.buffer<100x70xf16> -> !pk.tile<64x64xf16>
        %n = pk.tile_map "neg" %t : (!pk.tile<64x64xf16>) -> !pk.tile<64x64xf16>
        pk.store %n, %out[%r, %c] : !pk.tile<64x64xf16>, !pk.buffer<100x70xf16>
        pk.yield
      }
      pk.yield
    }
    pk.worker "communicate" {
      pk.yield
    }
    pk.yield
  }
  func.return %y : tensor<100x70xf16>
}
