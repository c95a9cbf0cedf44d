// buffer-elision leaves kernels it did not build alone (here a hand-written one-shot
// all-reduce with a staging buffer), with a remark saying why; IR otherwise unchanged.
// RUN: pkc-opt -p buffer-elision %s | FileCheck %s

// CHECK-LABEL: func.func @main
// CHECK:         pk.kernel "all_reduce_one_shot"(%x) {world = 2 : i64, pk.remarks = ["buffer-elision: left alone: 1 staging buffer(s) but not a kernel of the overlap pass (no pk.fusion), so its protocol is not known to this pass"]}
// CHECK:         %stage = pk.alloc {staging} : !pk.buffer<16x16xf32, symmetric>
// CHECK:         pk.put %mine, %stage[%row, %c0] to %peer
func.func @main(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %y = pk.kernel "all_reduce_one_shot" (%x) {world = 2 : i64} : (tensor<8x16xf32>) -> tensor<8x16xf32> {
  ^bb0(%in: !pk.buffer<8x16xf32>, %out: !pk.buffer<8x16xf32>):
    %stage = pk.alloc {staging} : !pk.buffer<16x16xf32, symmetric>
    %arrived = pk.alloc_signals : !pk.signals<1>
    pk.worker "communicate" {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %rows = arith.constant 8 : index
      %world = arith.constant 2 : index
      %rank = pk.rank
      %mine = pk.load %in[%c0, %c0] : !pk.buffer<8x16xf32> -> !pk.tile<8x16xf32>
      %row = arith.muli %rank, %rows : index
      scf.for %i = %c0 to %world step %c1 {
        %shifted = arith.addi %i, %rank : index
        %peer = arith.remui %shifted, %world : index
        pk.put %mine, %stage[%row, %c0] to %peer : !pk.tile<8x16xf32>, !pk.buffer<16x16xf32, symmetric>
        pk.signal %arrived[%c0] to %peer : !pk.signals<1>
      }
      pk.wait %arrived[%c0] until %world : !pk.signals<1>
      %zero = pk.tile_fill {value = 0.0 : f32} : !pk.tile<8x16xf32>
      %sum = scf.for %src = %c0 to %world step %c1 iter_args(%acc = %zero) -> (!pk.tile<8x16xf32>) {
        %off = arith.muli %src, %rows : index
        %part = pk.load %stage[%off, %c0] : !pk.buffer<16x16xf32, symmetric> -> !pk.tile<8x16xf32>
        %next = pk.tile_map "add" %acc, %part : (!pk.tile<8x16xf32>, !pk.tile<8x16xf32>) -> !pk.tile<8x16xf32>
        scf.yield %next : !pk.tile<8x16xf32>
      }
      pk.store %sum, %out[%c0, %c0] : !pk.tile<8x16xf32>, !pk.buffer<8x16xf32>
      pk.yield
    }
    pk.yield
  }
  func.return %y : tensor<8x16xf32>
}
