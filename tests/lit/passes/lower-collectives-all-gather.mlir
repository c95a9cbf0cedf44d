// lower-collectives on pk.all_gather: direct (every rank puts its shard into slot `rank`
// of every peer's symmetric output) and ring (W-1 forwarding steps, a signal per step).
// RUN: pkc-opt -p 'lower-collectives{all_gather=direct tile_rows=2}' %s | FileCheck %s --check-prefix=DIRECT
// RUN: pkc-opt -p 'lower-collectives{all_gather=ring tile_rows=2}' %s | FileCheck %s --check-prefix=RING
// RUN: pkc-opt -p 'lower-collectives' %s | FileCheck %s --check-prefix=AUTO

// Gathering along dim 1 of 5x3x4: rows = 5, a shard is 3x4 = 12 columns, the output is the
// 5 x W x 12 view of tensor<5x12x4xf32> (a reshape, no copy). 5 rows in tiles of 2.
func.func @main(%x: tensor<5x3x4xf32>) -> tensor<5x12x4xf32> {
  %y = pk.all_gather %x {world = 4 : i64, dim = 1 : i64} : tensor<5x3x4xf32> -> tensor<5x12x4xf32>
  func.return %y : tensor<5x12x4xf32>
}

// DIRECT:      %view = pk.reshape %x : tensor<5x3x4xf32> -> tensor<5x1x12xf32>
// DIRECT-NEXT: %lowered = pk.kernel "all_gather_direct"(%view)
// DIRECT-SAME:   "tensor<5x3x4xf32> as 5x1x12 view; tiles 2x1x12, 3x1 per chunk"
// DIRECT-SAME:   : (tensor<5x1x12xf32>) -> tensor<5x4x12xf32> {
// DIRECT-NEXT: ^bb0(%in: !pk.buffer<5x1x12xf32>, %out: !pk.buffer<5x4x12xf32, symmetric>):
// DIRECT-NEXT:   %arrived = pk.alloc_signals : !pk.signals<1>
// DIRECT-NEXT:   %c2 = arith.constant 2 : index
// DIRECT:        pk.worker "communicate" {
// DIRECT:          %rank = pk.rank
// DIRECT-NEXT:     pk.foreach attributes {bounds = [3 : i64, 1 : i64]} {
// DIRECT-NEXT:     ^bb0(%i: index, %j: index):
// DIRECT-NEXT:       %row = arith.muli %i, %c2 : index
// DIRECT-NEXT:       %tile = pk.load %in[%row, %c0, %c0] : !pk.buffer<5x1x12xf32> -> !pk.tile<2x1x12xf32>
// DIRECT-NEXT:       scf.for %p = %c0 to %c4 step %c1 {
// DIRECT-NEXT:         %0 = arith.addi %rank, %p : index
// DIRECT-NEXT:         %peer = arith.remui %0, %c4 : index
// DIRECT-NEXT:         pk.put %tile, %out[%row, %rank, %c0] to %peer : !pk.tile<2x1x12xf32>, !pk.buffer<5x4x12xf32, symmetric>
// DIRECT-NEXT:       }
// DIRECT-NEXT:       pk.yield
// DIRECT-NEXT:     }
// DIRECT-NEXT:     scf.for %p_1 = %c0 to %c4 step %c1 {
// DIRECT:            pk.signal %arrived[%c0] to %peer_1 : !pk.signals<1>
// DIRECT-NEXT:     }
// DIRECT-NEXT:     pk.wait %arrived[%c0] until %c4 : !pk.signals<1>
// DIRECT-NEXT:     pk.yield
// DIRECT:      %y = pk.reshape %lowered : tensor<5x4x12xf32> -> tensor<5x12x4xf32>
// DIRECT-NEXT: func.return %y : tensor<5x12x4xf32>

// Ring: step 0 stores the own shard and forwards it to rank+1; step s waits for the s-th
// arrival from rank-1, then forwards shard (rank - s) mod W, computed as (rank + (W - s)) mod W
// (remui is unsigned); a final wait for W-1 arrivals.
// RING:      %lowered = pk.kernel "all_gather_ring"(%view)
// RING:        %next = arith.remui %{{.*}}, %c4 : index
// RING-NEXT:   pk.foreach attributes {bounds = [3 : i64, 1 : i64]} {
// RING:          %tile = pk.load %in[%row, %c0, %c0]
// RING-NEXT:     pk.store %tile, %out[%row, %rank, %c0]
// RING-NEXT:     pk.put %tile, %out[%row, %rank, %c0] to %next
// RING:        pk.signal %arrived[%c0] to %next : !pk.signals<1>
// RING-NEXT:   scf.for %s = %c1 to %c3 step %c1 {
// RING-NEXT:     pk.wait %arrived[%c0] until %s : !pk.signals<1>
// RING-NEXT:     %[[D:.*]] = arith.subi %c4, %s : index
// RING-NEXT:     %[[S:.*]] = arith.addi %rank, %[[D]] : index
// RING-NEXT:     %shard = arith.remui %[[S]], %c4 : index
// RING-NEXT:     pk.foreach attributes {bounds = [3 : i64, 1 : i64]} {
// RING:            %tile_1 = pk.load %out[%row_1, %shard, %c0]
// RING-NEXT:       pk.put %tile_1, %out[%row_1, %shard, %c0] to %next
// RING:          pk.signal %arrived[%c0] to %next : !pk.signals<1>
// RING-NEXT:   }
// RING-NEXT:   pk.wait %arrived[%c0] until %c3 : !pk.signals<1>

// AUTO: pk.kernel "all_gather_direct"
// AUTO-SAME: "all_gather 960 B over 4 ranks: direct {{[0-9.]+}} us (ring {{[0-9.]+}} us)"
