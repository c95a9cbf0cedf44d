// RUN: not %python -m pkc.codegen %s --target=sm_90a 2>&1 | FileCheck %s
// RUN: not %python -m pkc.codegen %s --target=sm_80 2>&1 | FileCheck %s --check-prefix=A100

// Tiles live in shared memory: a kernel whose live tiles need more than a CTA may have
// is rejected with the numbers, not miscompiled.

// CHECK: error: kernel @too_big needs 262272 bytes of shared memory per CTA (worker 0 'compute': 262144 bytes of tiles (1 tile values)), more than target sm_90a allows (232448); use smaller tiles
// A100: more than target sm_80 allows (166912)

func.func @main(%x: tensor<256x256xf32>) -> tensor<256x256xf32> {
  %y = pk.kernel "too_big" (%x) {world = 1 : i64} : (tensor<256x256xf32>) -> tensor<256x256xf32> {
  ^bb0(%in: !pk.buffer<256x256xf32>, %out: !pk.buffer<256x256xf32>):
    pk.worker "compute" {
      %c0 = arith.constant 0 : index
      %t = pk.load %in[%c0, %c0] : !pk.buffer<256x256xf32> -> !pk.tile<256x256xf32>
      pk.store %t, %out[%c0, %c0] : !pk.tile<256x256xf32>, !pk.buffer<256x256xf32>
      pk.yield
    }
    pk.yield
  }
  func.return %y : tensor<256x256xf32>
}
