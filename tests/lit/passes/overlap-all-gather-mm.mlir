// overlap: one pk.all_gather feeding two matmuls (as lhs) and a pk.map becomes one staged
// kernel returning both products and the gathered tensor (the map still needs it). Each
// rank's 20-row shard is moved in row blocks of 16 + 4 (a remainder block with its own tile
// type, so no tile straddles two shards). The consumers start on the local shard, read from
// the input with no wait, then take shard (rank + i) mod 2 once its row block is ready.
// RUN: pkc-opt -p 'overlap{force=true tile=16 tile-k=32}' %s | FileCheck %s

func.func @ag_mm(%x: tensor<20x32xbf16>, %wq: tensor<32x48xbf16>, %wk: tensor<32x16xbf16>) -> (tensor<40x48xbf16>, tensor<40x16xbf16>, tensor<40x32xbf16>) {
  %g = pk.all_gather %x {dim = 0 : i64, world = 2 : i64} : tensor<20x32xbf16> -> tensor<40x32xbf16>
  %q = pk.matmul %g, %wq : (tensor<40x32xbf16>, tensor<32x48xbf16>) -> tensor<40x48xbf16>
  %k = pk.matmul %g, %wk : (tensor<40x32xbf16>, tensor<32x16xbf16>) -> tensor<40x16xbf16>
  %n = pk.map "neg" %g : (tensor<40x32xbf16>) -> tensor<40x32xbf16>
  func.return %q, %k, %n : tensor<40x48xbf16>, tensor<40x16xbf16>, tensor<40x32xbf16>
}

// CHECK-LABEL: func.func @ag_mm
// CHECK-NEXT:  %q, %k, %g = pk.kernel "all_gather_matmul"(%x, %wq, %wk) {world = 2 : i64, pk.fusion = {stage = "staged", pattern = "all_gather_mm", overlap = "inter", {{.*}} gathered = true}
// CHECK-SAME:    -> (tensor<40x48xbf16>, tensor<40x16xbf16>, tensor<40x32xbf16>) {
// CHECK-NEXT:  ^bb0(%X: !pk.buffer<20x32xbf16>, %B0: !pk.buffer<32x48xbf16>, %B1: !pk.buffer<32x16xbf16>, %Y0: !pk.buffer<40x48xbf16>, %Y1: !pk.buffer<40x16xbf16>, %G: !pk.buffer<40x32xbf16>):
// CHECK-NEXT:    %stage = pk.alloc {staging} : !pk.buffer<40x32xbf16, symmetric>
// CHECK-NEXT:    %ready = pk.alloc_signals : !pk.signals<4>
// CHECK-NEXT:    %arrived = pk.alloc_signals : !pk.signals<4>

// Local shard first, straight from the input, full block then the 4-row remainder.
// CHECK:         pk.worker "compute" {
// CHECK-NOT:       pk.wait
// CHECK:           pk.load %X[%c0, %c0] : !pk.buffer<20x32xbf16> -> !pk.tile<16x32xbf16>
// CHECK:           pk.store %{{.*}}, %Y0[%{{.*}}] : !pk.tile<16x16xbf16>, !pk.buffer<40x48xbf16>
// CHECK:           pk.load %X[%c16, %c0] : !pk.buffer<20x32xbf16> -> !pk.tile<4x32xbf16>
// Then the peer's shard, row block by row block, from the GEMM operand G.
// CHECK:           %[[S:[0-9a-z_]+]] = arith.addi %rank, %c1 : index
// CHECK-NEXT:      %[[P:[0-9a-z_]+]] = arith.remui %[[S]], %c2 : index
// CHECK:           pk.wait %ready[%{{.*}}] until %c1 : !pk.signals<4>
// CHECK:           pk.load %G[%{{.*}}, %c0] : !pk.buffer<40x32xbf16> -> !pk.tile<16x32xbf16>
// CHECK:           pk.wait %ready[%{{.*}}] until %c1 : !pk.signals<4>
// CHECK:           pk.load %G[%{{.*}}, %c0] : !pk.buffer<40x32xbf16> -> !pk.tile<4x32xbf16>

// The communicate worker: own shard into G, push to rank (rank - i) mod 2 (staging), and
// copy the arriving shard out of staging into G, signalling the compute worker.
// CHECK:         pk.worker "communicate" {
// CHECK:           pk.store %shard, %G[%{{.*}}, %c0] : !pk.tile<16x32xbf16>, !pk.buffer<40x32xbf16>
// CHECK:           pk.put %{{.*}}, %stage[%{{.*}}, %c0] to %[[Q:[0-9a-z_]+]] : !pk.tile<16x32xbf16>, !pk.buffer<40x32xbf16, symmetric>
// CHECK:           pk.signal %arrived[%{{.*}}] to %[[Q]] : !pk.signals<4>
// CHECK:           pk.wait %arrived[%{{.*}}] until %c1 : !pk.signals<4>
// CHECK-NEXT:      %[[T:[0-9a-z_]+]] = pk.load %stage[%{{.*}}, %c0] : !pk.buffer<40x32xbf16, symmetric> -> !pk.tile<16x32xbf16>
// CHECK-NEXT:      pk.store %[[T]], %G[%{{.*}}, %c0] : !pk.tile<16x32xbf16>, !pk.buffer<40x32xbf16>
// CHECK-NEXT:      pk.signal %ready[%{{.*}}] to %rank_1 : !pk.signals<4>
// CHECK:         %n = pk.map "neg" %g
// CHECK-NEXT:    func.return %q, %k, %n
