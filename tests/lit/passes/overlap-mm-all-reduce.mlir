// overlap: pk.matmul -> pk.all_reduce becomes one staged pk.kernel. Output tile t (6 of
// them: 40 rows in 16-row tiles, the last one overhanging, times 2 column tiles) belongs to
// rank t mod 4. Phase 1: at step i every rank computes the tiles of owner (rank + i) mod 4
// and sends its f32 partial into the owner's staging slot. Phase 2: the owner waits for
// 4 partials, sums them in rank order, converts once and puts the tile into every rank's
// bcast staging buffer; each rank copies bcast into its output at the end.
// RUN: pkc-opt -p 'overlap{force=true tile=16 tile-k=32}' %s | FileCheck %s
// RUN: pkc-opt -p 'overlap{force=true overlap=intra tile=16 tile-k=32}' %s | FileCheck %s --check-prefix=INTRA

func.func @mm_ar(%a: tensor<40x32xbf16>, %b: tensor<32x32xbf16>) -> tensor<40x32xbf16> {
  %c = pk.matmul %a, %b : (tensor<40x32xbf16>, tensor<32x32xbf16>) -> tensor<40x32xbf16>
  %o = pk.all_reduce %c {reduce = "sum", world = 4 : i64} : tensor<40x32xbf16> -> tensor<40x32xbf16>
  func.return %o : tensor<40x32xbf16>
}

// CHECK-LABEL: func.func @mm_ar
// CHECK:       %o = pk.kernel "matmul_all_reduce"(%a, %b) {world = 4 : i64, pk.fusion = {stage = "staged", pattern = "mm_all_reduce", overlap = "inter"
// CHECK-NEXT:  ^bb0(%A: !pk.buffer<40x32xbf16>, %B: !pk.buffer<32x32xbf16>, %O: !pk.buffer<40x32xbf16>):
// CHECK-NEXT:    %send = pk.alloc : !pk.buffer<40x32xf32>
// CHECK-NEXT:    %recv = pk.alloc {staging} : !pk.buffer<192x32xf32, symmetric>
// CHECK-NEXT:    %bcast = pk.alloc {staging} : !pk.buffer<40x32xbf16, symmetric>
// CHECK-NEXT:    %ready = pk.alloc_signals : !pk.signals<6>
// CHECK-NEXT:    %arrived = pk.alloc_signals : !pk.signals<6>
// CHECK-NEXT:    %done = pk.alloc_signals : !pk.signals<1>
// CHECK:         pk.worker "compute" {
// CHECK:           scf.for %i = %c0 to %c4 step %c1 {
// CHECK-NEXT:        %[[S:[0-9a-z_]+]] = arith.addi %rank, %i : index
// CHECK-NEXT:        %[[P:[0-9a-z_]+]] = arith.remui %[[S]], %c4 : index
// CHECK-NEXT:        scf.for %t = %[[P]] to %c6 step %c4 {
// CHECK:               %acc = pk.mma
// CHECK-NEXT:          pk.store %acc, %send[{{.*}}] : !pk.tile<16x16xf32>, !pk.buffer<40x32xf32>
// CHECK-NEXT:          pk.signal %ready[%t] to %rank : !pk.signals<6>
// CHECK:           pk.wait %done[%c0] until %c6 : !pk.signals<1>
// CHECK:           %[[T:[0-9a-z_]+]] = pk.load %bcast[{{.*}}] : !pk.buffer<40x32xbf16, symmetric> -> !pk.tile<16x16xbf16>
// CHECK-NEXT:      pk.store %[[T]], %O[{{.*}}] : !pk.tile<16x16xbf16>, !pk.buffer<40x32xbf16>
// CHECK:         pk.worker "communicate" {
// CHECK:             pk.wait %ready[%t_1] until %c1 : !pk.signals<6>
// CHECK:             pk.put %tile_1, %recv[{{.*}}] to %{{.*}} : !pk.tile<16x16xf32>, !pk.buffer<192x32xf32, symmetric>
// CHECK-NEXT:        pk.signal %arrived[%t_1] to %{{.*}} : !pk.signals<6>
// CHECK:           scf.for %t_2 = %rank_1 to %c6 step %c4 {
// CHECK:             pk.wait %arrived[%t_2] until %c4 : !pk.signals<6>
// CHECK:             %part = pk.load %recv
// CHECK:             %out = pk.tile_map "cast"
// CHECK-NEXT:        scf.for %j = %c0 to %c4 step %c1 {
// CHECK:               pk.put %out, %bcast[{{.*}}] to %[[Q:[0-9a-z_]+]] : !pk.tile<16x16xbf16>, !pk.buffer<40x32xbf16, symmetric>
// CHECK-NEXT:          pk.signal %done[%c0] to %[[Q]] : !pk.signals<1>

// Intra-SM: one worker computes, sends, reduces its own tiles and broadcasts them.
// INTRA:       pk.kernel "matmul_all_reduce"
// INTRA-NOT:   %send
// INTRA:       pk.worker "compute" {
// INTRA:           pk.put %acc, %recv[{{.*}}] to %{{.*}} : !pk.tile<16x16xf32>, !pk.buffer<192x32xf32, symmetric>
// INTRA:         scf.for %t_1 = %rank to %c6 step %c4 {
// INTRA:           pk.wait %arrived[%t_1] until %c4
// INTRA:           pk.put %out, %bcast
// INTRA:         pk.wait %done[%c0] until %c6
// INTRA-NOT:   pk.worker "communicate"
