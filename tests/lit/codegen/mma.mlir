// RUN: %python -m pkc.codegen %s --target=sm_90a | FileCheck %s
// RUN: %if ptxas %{ %python -m pkc.codegen %s --target=sm_80 --check 2>&1 >/dev/null | FileCheck %s --check-prefix=PTXAS %}

// pk.mma: bf16 and f16 tiles go to mma.sync m16n8k16 with f32 accumulators (fragments
// loaded from shared memory, zero-padded where 40 and 24 are not multiples of 16 and 8,
// K looped in registers); f32 tiles go to the scalar FMA loop.

// CHECK-LABEL: .visible .entry mmas(
// CHECK: pk.mma !pk.tile<40x32xbf16> x !pk.tile<32x24xbf16> + !pk.tile<40x24xf32>
// CHECK: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f{{[0-9]+}}, %f{{[0-9]+}}, %f{{[0-9]+}}, %f{{[0-9]+}}}, {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}, {%r{{[0-9]+}}, %r{{[0-9]+}}},
// CHECK: pk.mma !pk.tile<40x20xf16> x !pk.tile<20x24xf16> + !pk.tile<40x24xf32>
// The K = 20 tail: guarded 16-bit fragment loads with zero default.
// CHECK: @%p{{[0-9]+}} ld.shared.b16
// CHECK: mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32
// CHECK: pk.mma !pk.tile<40x32xf32> x !pk.tile<32x24xf32> + !pk.tile<40x24xf32>
// CHECK-NOT: mma.sync
// CHECK: fma.rn.f32

// PTXAS: ptxas: mmas [sm_80]: {{[0-9]+}} registers

func.func @main(%a: tensor<40x32xbf16>, %b: tensor<32x24xbf16>, %c: tensor<40x20xf16>, %d: tensor<20x24xf16>,
                %e: tensor<40x32xf32>, %f: tensor<32x24xf32>) -> tensor<40x24xf32> {
  %y = pk.kernel "mmas" (%a, %b, %c, %d, %e, %f) {world = 1 : i64} : (tensor<40x32xbf16>, tensor<32x24xbf16>, tensor<40x20xf16>, tensor<20x24xf16>, tensor<40x32xf32>, tensor<32x24xf32>) -> tensor<40x24xf32> {
  ^bb0(%A: !pk.buffer<40x32xbf16>, %B: !pk.buffer<32x24xbf16>, %C: !pk.buffer<40x20xf16>, %D: !pk.buffer<20x24xf16>, %E: !pk.buffer<40x32xf32>, %F: !pk.buffer<32x24xf32>, %O: !pk.buffer<40x24xf32>):
    pk.worker "compute" {
      %c0 = arith.constant 0 : index
      %ta = pk.load %A[%c0, %c0] : !pk.buffer<40x32xbf16> -> !pk.tile<40x32xbf16>
      %tb = pk.load %B[%c0, %c0] : !pk.buffer<32x24xbf16> -> !pk.tile<32x24xbf16>
      %z = pk.tile_fill {value = 0.0 : f32} : !pk.tile<40x24xf32>
      %x1 = pk.mma %ta, %tb, %z : !pk.tile<40x32xbf16>, !pk.tile<32x24xbf16>, !pk.tile<40x24xf32> -> !pk.tile<40x24xf32>
      %tc = pk.load %C[%c0, %c0] : !pk.buffer<40x20xf16> -> !pk.tile<40x20xf16>
      %td = pk.load %D[%c0, %c0] : !pk.buffer<20x24xf16> -> !pk.tile<20x24xf16>
      %x2 = pk.mma %tc, %td, %x1 : !pk.tile<40x20xf16>, !pk.tile<20x24xf16>, !pk.tile<40x24xf32> -> !pk.tile<40x24xf32>
      %te = pk.load %E[%c0, %c0] : !pk.buffer<40x32xf32> -> !pk.tile<40x32xf32>
      %tf = pk.load %F[%c0, %c0] : !pk.buffer<32x24xf32> -> !pk.tile<32x24xf32>
      %x3 = pk.mma %te, %tf, %x2 : !pk.tile<40x32xf32>, !pk.tile<32x24xf32>, !pk.tile<40x24xf32> -> !pk.tile<40x24xf32>
      pk.store %x3, %O[%c0, %c0] : !pk.tile<40x24xf32>, !pk.buffer<40x24xf32>
      pk.yield
    }
    pk.yield
  }
  func.return %y : tensor<40x24xf32>
}
