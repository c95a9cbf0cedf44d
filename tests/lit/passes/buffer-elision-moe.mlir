// buffer-elision on overlap's MoE kernel (inter-SM): the dispatch and combine staging and
// the copies through them go. Tokens are put straight into the peer's symmetric expert
// operand (signalling its compute worker), results straight into the source rank's
// symmetric output. The local hand-off of result tiles to the communicate SMs stays.
// RUN: pkc-opt -p 'overlap{force=true overlap=inter tile=16 tile-k=32},buffer-elision' %s | FileCheck %s

func.func @moe(%x: tensor<4x6x32xbf16>, %w: tensor<2x32x16xbf16>) -> tensor<4x6x16xbf16> {
  %d = pk.all_to_all %x {split_dim = 0 : i64, concat_dim = 1 : i64, world = 2 : i64} : tensor<4x6x32xbf16> -> tensor<2x12x32xbf16>
  %y = pk.matmul %d, %w : (tensor<2x12x32xbf16>, tensor<2x32x16xbf16>) -> tensor<2x12x16xbf16>
  %o = pk.all_to_all %y {split_dim = 1 : i64, concat_dim = 0 : i64, world = 2 : i64} : tensor<2x12x16xbf16> -> tensor<4x6x16xbf16>
  func.return %o : tensor<4x6x16xbf16>
}

// CHECK-LABEL: func.func @moe
// CHECK:         "buffer-elision: removed staging dstage (!pk.buffer<24x32xbf16, symmetric>), cstage (!pk.buffer<24x16xbf16, symmetric>): dispatched tokens land in the expert GEMM's symmetric operand and results in the source rank's symmetric output; outputs in symmetric memory"
// CHECK-NEXT:  ^bb0(%X: !pk.buffer<24x32xbf16>, %Wt: !pk.buffer<64x16xbf16>, %O: !pk.buffer<24x16xbf16, symmetric>):
// CHECK-NEXT:    %recv = pk.alloc : !pk.buffer<24x32xbf16, symmetric>
// CHECK-NEXT:    %send = pk.alloc : !pk.buffer<24x16xbf16>
// CHECK-NEXT:    %ready = pk.alloc_signals : !pk.signals<4>
// CHECK-NEXT:    %computed = pk.alloc_signals : !pk.signals<4>
// CHECK-NEXT:    %combined = pk.alloc_signals : !pk.signals<1>
// CHECK:         pk.worker "compute" {
// CHECK:             pk.wait %ready[%{{.*}}] until %c1 : !pk.signals<4>
// CHECK:             %a_1 = pk.load %recv
// CHECK:           pk.wait %combined[%c0] until %c4 : !pk.signals<1>
// CHECK-NEXT:      pk.yield
// CHECK:         pk.worker "communicate" {
// CHECK:             pk.put %tokens, %recv[%{{.*}}, %c0] to %[[Q:[0-9a-z_]+]] : !pk.tile<6x32xbf16>, !pk.buffer<24x32xbf16, symmetric>
// CHECK:             pk.signal %ready[%{{.*}}] to %[[Q]] : !pk.signals<4>
// CHECK:               pk.wait %computed
// CHECK:               %result = pk.load %send
// CHECK:               pk.put %result, %O[%{{.*}}, %c0] to %[[S:[0-9a-z_]+]] : !pk.tile<6x16xbf16>, !pk.buffer<24x16xbf16, symmetric>
// CHECK-NEXT:          pk.signal %combined[%c0] to %[[S]] : !pk.signals<1>
