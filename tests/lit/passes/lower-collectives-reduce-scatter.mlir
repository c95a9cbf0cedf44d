// lower-collectives on pk.reduce_scatter: direct (chunk p into slot `rank` of peer p's
// staging buffer, then a local sum of the W slots in rank order, in f32, rounded once) and
// ring (W-1 steps forwarding f32 partial sums to rank+1, one slot per step).
// RUN: pkc-opt -p 'lower-collectives{reduce_scatter=direct tile_rows=5}' %s | FileCheck %s --check-prefix=DIRECT
// RUN: pkc-opt -p 'lower-collectives{reduce_scatter=ring tile_rows=5}' %s | FileCheck %s --check-prefix=RING

// Scattering dim 2 of 4x3x20: rows = 12, chunks of 20/4 = 5 columns; 12 rows in tiles of 5.
func.func @main(%x: tensor<4x3x20xf16>) -> tensor<4x3x5xf16> {
  %y = pk.reduce_scatter %x {world = 4 : i64, dim = 2 : i64, reduce = "sum"} : tensor<4x3x20xf16> -> tensor<4x3x5xf16>
  func.return %y : tensor<4x3x5xf16>
}

// DIRECT:      %view = pk.reshape %x : tensor<4x3x20xf16> -> tensor<12x4x5xf16>
// DIRECT-NEXT: %lowered = pk.kernel "reduce_scatter_direct"(%view)
// DIRECT-SAME:   "reduce_scatter 480 B over 4 ranks: direct {{[0-9.]+}} us, forced (ring {{[0-9.]+}} us)"
// DIRECT-SAME:   : (tensor<12x4x5xf16>) -> tensor<12x1x5xf16> {
// DIRECT-NEXT: ^bb0(%in: !pk.buffer<12x4x5xf16>, %out: !pk.buffer<12x1x5xf16>):
// DIRECT-NEXT:   %staging = pk.alloc : !pk.buffer<12x4x5xf16, symmetric>
// DIRECT-NEXT:   %arrived = pk.alloc_signals : !pk.signals<1>
// DIRECT:          scf.for %p = %c0 to %c4 step %c1 {
// DIRECT-NEXT:       %0 = arith.addi %rank, %p : index
// DIRECT-NEXT:       %peer = arith.remui %0, %c4 : index
// DIRECT-NEXT:       pk.foreach attributes {bounds = [3 : i64, 1 : i64]} {
// DIRECT-NEXT:       ^bb0(%i: index, %j: index):
// DIRECT-NEXT:         %row = arith.muli %i, %c5 : index
// DIRECT-NEXT:         %tile = pk.load %in[%row, %peer, %c0] : !pk.buffer<12x4x5xf16> -> !pk.tile<5x1x5xf16>
// DIRECT-NEXT:         pk.put %tile, %staging[%row, %rank, %c0] to %peer : !pk.tile<5x1x5xf16>, !pk.buffer<12x4x5xf16, symmetric>
// DIRECT-NEXT:         pk.yield
// DIRECT-NEXT:       }
// DIRECT-NEXT:       pk.signal %arrived[%c0] to %peer : !pk.signals<1>
// DIRECT-NEXT:     }
// DIRECT-NEXT:     pk.wait %arrived[%c0] until %c4 : !pk.signals<1>
// DIRECT:          scf.for %src = %c1 to %c4 step %c1 iter_args
// DIRECT:          %sum = pk.tile_map "cast" %{{.*}} : (!pk.tile<5x1x5xf32>) -> !pk.tile<5x1x5xf16>
// DIRECT-NEXT:     pk.store %sum, %out[%row_1, %c0, %c0] : !pk.tile<5x1x5xf16>, !pk.buffer<12x1x5xf16>
// DIRECT:      %y = pk.reshape %lowered : tensor<12x1x5xf16> -> tensor<4x3x5xf16>

// RING:      %lowered = pk.kernel "reduce_scatter_ring"(%view)
// RING:      ^bb0(%in: !pk.buffer<12x4x5xf16>, %out: !pk.buffer<12x1x5xf16>):
// RING-NEXT:   %partials = pk.alloc : !pk.buffer<12x3x5xf32, symmetric>
// Step 0: the own part of chunk rank-1, widened to f32, to rank+1's slot 0.
// RING:        %chunk = arith.remui %{{.*}}, %c4 : index
// RING-NEXT:   pk.foreach
// RING:          %tile = pk.load %in[%row, %chunk, %c0]
// RING-NEXT:     %[[W:.*]] = pk.tile_map "cast" %tile : (!pk.tile<5x1x5xf16>) -> !pk.tile<5x1x5xf32>
// RING-NEXT:     pk.put %[[W]], %partials[%row, %c0, %c0] to %next
// RING:        pk.signal %arrived[%c0] to %next
// Steps 1..W-2: received partial (slot s-1) + own part of chunk rank-s-1, to slot s.
// RING-NEXT:   scf.for %s = %c1 to %c3 step %c1 {
// RING-NEXT:     pk.wait %arrived[%c0] until %s : !pk.signals<1>
// RING-NEXT:     %prev = arith.subi %s, %c1 : index
// RING:          %chunk_1 = arith.remui
// RING:            %tile_1 = pk.load %partials[%row_1, %prev, %c0]
// RING-NEXT:       %tile_2 = pk.load %in[%row_1, %chunk_1, %c0]
// RING-NEXT:       %[[OWN:.*]] = pk.tile_map "cast" %tile_2
// RING-NEXT:       %[[ACC:.*]] = pk.tile_map "add" %tile_1, %[[OWN]]
// RING-NEXT:       pk.put %[[ACC]], %partials[%row_1, %s, %c0] to %next
// Last: after W-1 arrivals, received partial + own chunk, rounded once.
// RING:        pk.wait %arrived[%c0] until %c3 : !pk.signals<1>
// RING:          %tile_3 = pk.load %partials[%row_2, %c2, %c0]
// RING-NEXT:     %tile_4 = pk.load %in[%row_2, %rank, %c0]
// RING:          %[[R:.*]] = pk.tile_map "cast" %{{.*}} : (!pk.tile<5x1x5xf32>) -> !pk.tile<5x1x5xf16>
// RING-NEXT:     pk.store %[[R]], %out[%row_2, %c0, %c0]
