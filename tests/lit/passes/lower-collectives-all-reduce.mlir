// lower-collectives on pk.all_reduce: one-shot and two-shot kernels of puts and signals
// over symmetric buffers, and the size-based choice between them (cost model, h200, W=8).
// RUN: pkc-opt -p 'lower-collectives{all_reduce=one_shot tile_cols=64}' %s | FileCheck %s --check-prefix=ONE
// RUN: pkc-opt -p 'lower-collectives{all_reduce=two_shot tile_cols=64}' %s | FileCheck %s --check-prefix=TWO
// RUN: pkc-opt -p 'lower-collectives' %s | FileCheck %s --check-prefix=AUTO

func.func @small(%x: tensor<6x40xbf16>) -> tensor<6x40xbf16> {
  %y = pk.all_reduce %x {world = 8 : i64, reduce = "sum"} : tensor<6x40xbf16> -> tensor<6x40xbf16>
  func.return %y : tensor<6x40xbf16>
}

// The tensor is viewed as rows x slots x cols (a free reshape); 240 columns in tiles of 64
// (the last one overhangs: loads read zeros, stores drop it).
// ONE-LABEL: func.func @small
// ONE:       %view = pk.reshape %x : tensor<6x40xbf16> -> tensor<1x1x240xbf16>
// ONE-NEXT:  %lowered = pk.kernel "all_reduce_one_shot"(%view) {world = 8 : i64, pk.plan = {collective = "all_reduce", algorithm = "one_shot", forced = true
// ONE-SAME:    pk.remarks = ["all_reduce 480 B over 8 ranks: one-shot {{.*}} us, forced (two-shot {{.*}} us)", "tensor<6x40xbf16> as 1x1x240 view; tiles 1x1x64, 1x4 per chunk"]
// ONE-NEXT:  ^bb0(%in: !pk.buffer<1x1x240xbf16>, %out: !pk.buffer<1x1x240xbf16>):
// ONE-NEXT:    %staging = pk.alloc : !pk.buffer<1x8x240xbf16, symmetric>
// ONE-NEXT:    %arrived = pk.alloc_signals : !pk.signals<1>
// The index constants (one per value, shared by every worker) follow the allocations.
// ONE-NEXT:    %c64 = arith.constant 64 : index
// ONE:         pk.worker "communicate" {
// Every tile goes to slot `rank` of every peer's staging buffer, peers in rank-rotated order.
// ONE:           %rank = pk.rank
// ONE-NEXT:      pk.foreach attributes {bounds = [1 : i64, 4 : i64]} {
// ONE-NEXT:      ^bb0(%i: index, %j: index):
// ONE-NEXT:        %col = arith.muli %j, %c64 : index
// ONE-NEXT:        %tile = pk.load %in[%c0, %c0, %col] : !pk.buffer<1x1x240xbf16> -> !pk.tile<1x1x64xbf16>
// ONE-NEXT:        scf.for %p = %c0 to %c8 step %c1 {
// ONE-NEXT:          %0 = arith.addi %rank, %p : index
// ONE-NEXT:          %peer = arith.remui %0, %c8 : index
// ONE-NEXT:          pk.put %tile, %staging[%c0, %rank, %col] to %peer : !pk.tile<1x1x64xbf16>, !pk.buffer<1x8x240xbf16, symmetric>
// ONE-NEXT:        }
// One signal per peer after the puts (release); then wait for all W arrivals (acquire).
// ONE:           pk.signal %arrived[%c0] to %peer_1 : !pk.signals<1>
// ONE:           pk.wait %arrived[%c0] until %c8 : !pk.signals<1>
// Sum the W slots in rank order in f32, round once to bf16, store.
// ONE:           %tile_1 = pk.load %staging[%c0, %c0, %col_1]
// ONE-NEXT:      %[[FIRST:.*]] = pk.tile_map "cast" %tile_1 : (!pk.tile<1x1x64xbf16>) -> !pk.tile<1x1x64xf32>
// ONE-NEXT:      %[[SUM:.*]] = scf.for %src = %c1 to %c8 step %c1 iter_args(%[[ACC:.*]] = %[[FIRST]]) -> (!pk.tile<1x1x64xf32>) {
// ONE-NEXT:        %tile_2 = pk.load %staging[%c0, %src, %col_1]
// ONE-NEXT:        %[[PART:.*]] = pk.tile_map "cast" %tile_2
// ONE-NEXT:        %[[NEXT:.*]] = pk.tile_map "add" %[[ACC]], %[[PART]] : (!pk.tile<1x1x64xf32>, !pk.tile<1x1x64xf32>) -> !pk.tile<1x1x64xf32>
// ONE-NEXT:        scf.yield %[[NEXT]]
// ONE-NEXT:      }
// ONE-NEXT:      %sum = pk.tile_map "cast" %[[SUM]] : (!pk.tile<1x1x64xf32>) -> !pk.tile<1x1x64xbf16>
// ONE-NEXT:      pk.store %sum, %out[%c0, %c0, %col_1]
// ONE:       %y = pk.reshape %lowered : tensor<1x1x240xbf16> -> tensor<6x40xbf16>
// ONE-NEXT:  func.return %y : tensor<6x40xbf16>

// Two-shot: tile t of the T = 4 belongs to rank c when c*T/W <= t < (c+1)*T/W. Each rank
// puts a peer's tiles into that peer's staging; the owner sums them and puts the result
// into every peer's (symmetric) output.
// TWO-LABEL: func.func @small
// TWO:       pk.kernel "all_reduce_two_shot"
// TWO:       ^bb0(%in: !pk.buffer<1x1x240xbf16>, %out: !pk.buffer<1x1x240xbf16, symmetric>):
// TWO-NEXT:    %staging = pk.alloc : !pk.buffer<1x8x240xbf16, symmetric>
// TWO-NEXT:    %arrived = pk.alloc_signals : !pk.signals<2>
// TWO:         scf.for %p = %c0 to %c8 step %c1 {
// TWO:           %peer = arith.remui
// TWO-NEXT:      %[[LO:.*]] = arith.muli %peer, %c4 : index
// TWO-NEXT:      %first = arith.divui %[[LO]], %c8 : index
// TWO:           %end = arith.divui
// TWO-NEXT:      scf.for %t = %first to %end step %c1 {
// TWO-NEXT:        %col = arith.muli %t, %c64 : index
// TWO-NEXT:        %tile = pk.load %in[%c0, %c0, %col]
// TWO-NEXT:        pk.put %tile, %staging[%c0, %rank, %col] to %peer
// TWO-NEXT:      }
// TWO-NEXT:      pk.signal %arrived[%c0] to %peer : !pk.signals<2>
// TWO-NEXT:    }
// TWO-NEXT:    pk.wait %arrived[%c0] until %c8 : !pk.signals<2>
// TWO:         scf.for %t_1 = %first_1 to %end_1 step %c1 {
// TWO:           %sum = pk.tile_map "cast"
// TWO-NEXT:      scf.for %p_1 = %c0 to %c8 step %c1 {
// TWO:             pk.put %sum, %out[%c0, %c0, %col_1] to %peer_1
// TWO:         pk.signal %arrived[%c1] to %peer_2 : !pk.signals<2>
// TWO:         pk.wait %arrived[%c1] until %c8 : !pk.signals<2>

func.func @large(%x: tensor<4096x4096xbf16>) -> tensor<4096x4096xbf16> {
  %y = pk.all_reduce %x {world = 8 : i64, reduce = "sum"} : tensor<4096x4096xbf16> -> tensor<4096x4096xbf16>
  func.return %y : tensor<4096x4096xbf16>
}

// The cost model picks one-shot for 480 bytes and two-shot for 32 MiB.
// AUTO-LABEL: func.func @small
// AUTO:       pk.kernel "all_reduce_one_shot"
// AUTO-SAME:    forced = false
// AUTO-SAME:    "all_reduce 480 B over 8 ranks: one-shot {{[0-9.]+}} us (two-shot {{[0-9.]+}} us)"
// AUTO-LABEL: func.func @large
// AUTO:       %view = pk.reshape %x : tensor<4096x4096xbf16> -> tensor<4096x1x4096xbf16>
// AUTO:       pk.kernel "all_reduce_two_shot"
// AUTO-SAME:    "all_reduce 32 MiB over 8 ranks: two-shot {{[0-9.]+}} us (one-shot {{[0-9.]+}} us)", "tensor<4096x4096xbf16> as 4096x1x4096 view; tiles 2x1x4096, 2048x1 per chunk"
