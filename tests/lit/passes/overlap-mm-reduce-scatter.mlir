// overlap: pk.matmul -> pk.reduce_scatter becomes one staged pk.kernel. Chunk p of the
// product (rows p*32..) is computed at step i for p = (rank + i) mod W, tile by tile; each
// f32 tile goes to its owner p's staging slot (slot = this rank), and the owner sums its W
// slots in rank order and converts once to bf16.
// RUN: pkc-opt -p 'overlap{force=true tile=16 tile-k=32}' %s | FileCheck %s --check-prefixes=CHECK,INTER
// RUN: pkc-opt -p 'overlap{force=true overlap=intra tile=16 tile-k=32}' %s | FileCheck %s --check-prefixes=CHECK,INTRA

func.func @mm_rs(%a: tensor<64x32xbf16>, %b: tensor<32x32xbf16>) -> tensor<32x32xbf16> {
  %c = pk.matmul %a, %b : (tensor<64x32xbf16>, tensor<32x32xbf16>) -> tensor<64x32xbf16>
  %o = pk.reduce_scatter %c {dim = 0 : i64, reduce = "sum", world = 2 : i64} : tensor<64x32xbf16> -> tensor<32x32xbf16>
  func.return %o : tensor<32x32xbf16>
}

// CHECK-LABEL: func.func @mm_rs
// CHECK-NOT:   pk.matmul
// CHECK:       %o = pk.kernel "matmul_reduce_scatter"(%a, %b) {world = 2 : i64,
// INTER-SAME:    pk.fusion = {stage = "staged", pattern = "mm_reduce_scatter", overlap = "inter"
// INTER-SAME:    pk.plan = {pattern = "mm_reduce_scatter", fuse = false, overlap = "inter", comm_sms = 8 : i64
// INTRA-SAME:    overlap = "intra"
// INTRA-SAME:    comm_sms = 0 : i64
// CHECK-SAME:    pk.remarks = ["fused mm+reduce_scatter (force=true overrides the cost model, which says: left unfused:
// CHECK-NEXT:  ^bb0(%A: !pk.buffer<64x32xbf16>, %B: !pk.buffer<32x32xbf16>, %O: !pk.buffer<32x32xbf16>):
// INTER-NEXT:    %send = pk.alloc : !pk.buffer<64x32xf32>
// CHECK-NEXT:    %recv = pk.alloc {staging} : !pk.buffer<64x32xf32, symmetric>
// INTER-NEXT:    %ready = pk.alloc_signals : !pk.signals<8>
// CHECK-NEXT:    %arrived = pk.alloc_signals : !pk.signals<4>

// The compute worker: chunk (rank + i) mod 2, a pk.foreach over its 2x2 output tiles.
// CHECK:         pk.worker "compute" {
// CHECK-NEXT:      %rank = pk.rank
// CHECK-NEXT:      scf.for %i = %c0 to %c2 step %c1 {
// CHECK-NEXT:        %[[S:[0-9a-z_]+]] = arith.addi %rank, %i : index
// CHECK-NEXT:        %[[P:[0-9a-z_]+]] = arith.remui %[[S]], %c2 : index
// CHECK-NEXT:        pk.foreach attributes {bounds = [2 : i64, 2 : i64]} {
// CHECK:               %acc = pk.mma %{{.*}} : !pk.tile<16x32xbf16>, !pk.tile<32x16xbf16>, !pk.tile<16x16xf32> -> !pk.tile<16x16xf32>
// INTER-NEXT:          pk.store %acc, %send[{{.*}}] : !pk.tile<16x16xf32>, !pk.buffer<64x32xf32>
// INTER:               pk.signal %ready[%{{.*}}] to %rank : !pk.signals<8>
// INTRA:               pk.put %acc, %recv[%{{.*}}] to %[[P]] : !pk.tile<16x16xf32>, !pk.buffer<64x32xf32, symmetric>
// INTRA-NEXT:          pk.signal %arrived[%{{.*}}] to %[[P]] : !pk.signals<4>

// The owner waits for its W partials of each tile, sums the slots, converts once.
// CHECK:             pk.wait %arrived[%{{.*}}] until %c2 : !pk.signals<4>
// CHECK:             scf.for %s = %c0 to %c2 step %c1 iter_args
// CHECK:               %part = pk.load %recv[%{{.*}}] : !pk.buffer<64x32xf32, symmetric> -> !pk.tile<16x16xf32>
// CHECK-NEXT:          %sum = pk.tile_map "add"
// CHECK:             %out = pk.tile_map "cast" %{{.*}} : (!pk.tile<16x16xf32>) -> !pk.tile<16x16xbf16>
// CHECK-NEXT:        pk.store %out, %O[%{{.*}}] : !pk.tile<16x16xbf16>, !pk.buffer<32x32xbf16>

// Inter-SM: the communicate worker forwards each tile as soon as it is ready.
// INTER:         pk.worker "communicate" {
// INTER:             pk.wait %ready[%{{.*}}] until %c1 : !pk.signals<8>
// INTER:             %tile = pk.load %send[{{.*}}] : !pk.buffer<64x32xf32> -> !pk.tile<16x16xf32>
// INTER:             pk.put %tile, %recv[{{.*}}] to %{{.*}} : !pk.tile<16x16xf32>, !pk.buffer<64x32xf32, symmetric>
// INTER-NEXT:        pk.signal %arrived[%{{.*}}] to %{{.*}} : !pk.signals<4>
// INTRA-NOT:     pk.worker "communicate"
// CHECK:         func.return %o : tensor<32x32xbf16>
