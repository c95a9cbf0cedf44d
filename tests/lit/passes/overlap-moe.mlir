// overlap: MoE dispatch (all_to_all) -> grouped matmul -> combine (all_to_all) becomes one
// staged kernel on 2-d row views. W = 2 ranks, E = 2 experts per rank, C = 6 token rows
// per (expert, rank). Dispatch pushes block (q, e) to rank q = (rank - i) mod W; the
// experts first multiply the local tokens (straight from X, no wait), then those of rank
// (rank + i) mod W as they arrive; each result block goes back to its source rank.
// RUN: pkc-opt --split-input-file -p 'overlap{force=true overlap=inter tile=16 tile-k=32}' %s | FileCheck %s
// RUN: pkc-opt --split-input-file -p 'overlap{force=true overlap=intra tile=16 tile-k=32}' %s | FileCheck %s --check-prefix=INTRA

// Form (c): the torch idiom around all_to_all_single (reshape, transpose, bmm).
func.func @moe_torch(%x: tensor<24x32xbf16>, %w: tensor<2x32x16xbf16>) -> tensor<24x16xbf16> {
  %d = pk.all_to_all %x {split_dim = 0 : i64, concat_dim = 0 : i64, world = 2 : i64} : tensor<24x32xbf16> -> tensor<24x32xbf16>
  %d4 = pk.reshape %d : tensor<24x32xbf16> -> tensor<2x2x6x32xbf16>
  %dt = pk.transpose %d4 {perm = [1 : i64, 0 : i64, 2 : i64, 3 : i64]} : tensor<2x2x6x32xbf16> -> tensor<2x2x6x32xbf16>
  %d3 = pk.reshape %dt : tensor<2x2x6x32xbf16> -> tensor<2x12x32xbf16>
  %y = pk.matmul %d3, %w : (tensor<2x12x32xbf16>, tensor<2x32x16xbf16>) -> tensor<2x12x16xbf16>
  %y4 = pk.reshape %y : tensor<2x12x16xbf16> -> tensor<2x2x6x16xbf16>
  %yt = pk.transpose %y4 {perm = [1 : i64, 0 : i64, 2 : i64, 3 : i64]} : tensor<2x2x6x16xbf16> -> tensor<2x2x6x16xbf16>
  %y2 = pk.reshape %yt : tensor<2x2x6x16xbf16> -> tensor<24x16xbf16>
  %o = pk.all_to_all %y2 {split_dim = 0 : i64, concat_dim = 0 : i64, world = 2 : i64} : tensor<24x16xbf16> -> tensor<24x16xbf16>
  func.return %o : tensor<24x16xbf16>
}

// CHECK-LABEL: func.func @moe_torch
// CHECK-NEXT:  %w_rows = pk.reshape %w : tensor<2x32x16xbf16> -> tensor<64x16xbf16>
// CHECK-NEXT:  %o = pk.kernel "all_to_all_matmul_all_to_all"(%x, %w_rows) {world = 2 : i64, pk.fusion = {stage = "staged", pattern = "all_to_all_mm_all_to_all", overlap = "inter", {{.*}} experts = 2 : i64, capacity = 6 : i64
// CHECK-NEXT:  ^bb0(%X: !pk.buffer<24x32xbf16>, %Wt: !pk.buffer<64x16xbf16>, %O: !pk.buffer<24x16xbf16>):
// CHECK-NEXT:    %dstage = pk.alloc {staging} : !pk.buffer<24x32xbf16, symmetric>
// CHECK-NEXT:    %recv = pk.alloc : !pk.buffer<24x32xbf16>
// CHECK-NEXT:    %cstage = pk.alloc {staging} : !pk.buffer<24x16xbf16, symmetric>
// CHECK-NEXT:    %send = pk.alloc : !pk.buffer<24x16xbf16>
// Compute: local expert blocks from X (no wait), then the peer's from recv after `ready`.
// CHECK:         pk.worker "compute" {
// CHECK-NOT:       pk.wait
// CHECK:           %a = pk.load %X[{{.*}}] : !pk.buffer<24x32xbf16> -> !pk.tile<6x32xbf16>
// CHECK-NEXT:      %b = pk.load %Wt[{{.*}}] : !pk.buffer<64x16xbf16> -> !pk.tile<32x16xbf16>
// CHECK:           pk.store %out, %send[{{.*}}] : !pk.tile<6x16xbf16>, !pk.buffer<24x16xbf16>
// CHECK-NEXT:      pk.signal %computed[%{{.*}}] to %rank : !pk.signals<4>
// CHECK:           pk.wait %ready[%{{.*}}] until %c1 : !pk.signals<4>
// CHECK:           %a_1 = pk.load %recv[{{.*}}] : !pk.buffer<24x32xbf16> -> !pk.tile<6x32xbf16>
// CHECK:           pk.wait %combined[%c0] until %c4 : !pk.signals<1>
// CHECK:           pk.load %cstage
// Communicate: dispatch, copy the received tokens out of staging, combine results back.
// CHECK:         pk.worker "communicate" {
// CHECK:             pk.put %tokens, %dstage[{{.*}}] to %{{.*}} : !pk.tile<6x32xbf16>, !pk.buffer<24x32xbf16, symmetric>
// CHECK:             pk.signal %dispatched[%{{.*}}] to
// CHECK:             pk.wait %dispatched[%{{.*}}] until %c1
// CHECK-NEXT:        %tokens_1 = pk.load %dstage
// CHECK-NEXT:        pk.store %tokens_1, %recv
// CHECK-NEXT:        pk.signal %ready[%{{.*}}] to %rank_1
// CHECK:               pk.wait %computed[%{{.*}}] until %c1
// CHECK:               %result = pk.load %send[{{.*}}] : !pk.buffer<24x16xbf16> -> !pk.tile<6x16xbf16>
// CHECK:               pk.put %result, %cstage[{{.*}}] to %[[S:[0-9a-z_]+]] : !pk.tile<6x16xbf16>, !pk.buffer<24x16xbf16, symmetric>
// CHECK-NEXT:          pk.signal %combined[%c0] to %[[S]] : !pk.signals<1>
// CHECK:         func.return %o

// INTRA-LABEL: func.func @moe_torch
// INTRA:       pk.worker "compute" {
// INTRA:         pk.put %tokens, %dstage
// INTRA:         pk.put %out, %cstage[{{.*}}] to %rank
// INTRA:         pk.wait %dispatched
// INTRA:         pk.store %tokens_1, %recv
// INTRA:         pk.put %out_1, %cstage
// INTRA:       pk.wait %combined[%c0] until %c4
// INTRA-NOT:   pk.worker "communicate"

// -----

// Form (a): 3-d all_to_alls, [W*E, C, K] -> [E, W*C, K] and back; 2-d views around the kernel.
func.func @moe_3d(%x: tensor<4x6x32xbf16>, %w: tensor<2x32x16xbf16>) -> tensor<4x6x16xbf16> {
  %d = pk.all_to_all %x {split_dim = 0 : i64, concat_dim = 1 : i64, world = 2 : i64} : tensor<4x6x32xbf16> -> tensor<2x12x32xbf16>
  %y = pk.matmul %d, %w : (tensor<2x12x32xbf16>, tensor<2x32x16xbf16>) -> tensor<2x12x16xbf16>
  %o = pk.all_to_all %y {split_dim = 1 : i64, concat_dim = 0 : i64, world = 2 : i64} : tensor<2x12x16xbf16> -> tensor<4x6x16xbf16>
  func.return %o : tensor<4x6x16xbf16>
}

// CHECK-LABEL: func.func @moe_3d
// CHECK-NEXT:  %x_rows = pk.reshape %x : tensor<4x6x32xbf16> -> tensor<24x32xbf16>
// CHECK-NEXT:  %w_rows = pk.reshape %w : tensor<2x32x16xbf16> -> tensor<64x16xbf16>
// CHECK-NEXT:  %o_rows = pk.kernel "all_to_all_matmul_all_to_all"(%x_rows, %w_rows)
// CHECK:       %o = pk.reshape %o_rows : tensor<24x16xbf16> -> tensor<4x6x16xbf16>
// CHECK-NEXT:  func.return %o : tensor<4x6x16xbf16>

// -----

// Form (b): one expert per rank, 2-d all_to_alls (what all_to_all_single imports to).
func.func @moe_2d(%x: tensor<12x32xf32>, %w: tensor<32x16xf32>) -> tensor<12x16xf32> {
  %d = pk.all_to_all %x {split_dim = 0 : i64, concat_dim = 0 : i64, world = 2 : i64} : tensor<12x32xf32> -> tensor<12x32xf32>
  %y = pk.matmul %d, %w : (tensor<12x32xf32>, tensor<32x16xf32>) -> tensor<12x16xf32>
  %o = pk.all_to_all %y {split_dim = 0 : i64, concat_dim = 0 : i64, world = 2 : i64} : tensor<12x16xf32> -> tensor<12x16xf32>
  func.return %o : tensor<12x16xf32>
}

// CHECK-LABEL: func.func @moe_2d
// CHECK-NEXT:  %o = pk.kernel "all_to_all_matmul_all_to_all"(%x, %w) {{.*}} experts = 1 : i64, capacity = 6 : i64
// CHECK-NOT:   pk.all_to_all
// CHECK-NOT:   pk.matmul
// CHECK:       func.return %o : tensor<12x16xf32>
