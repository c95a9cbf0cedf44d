// overlap: a gather along dim 1 of [B, S/W, H] with B = 2 sequences (DTensor Shard(1)),
// whose [B*S, H] rows view feeds two matmuls and whose [B, S, H] result a pk.map, becomes
// one kernel on the 2-d views (pk.fusion.batches = 2): each rank's 20-row shard is 2
// blocks of 10 rows, and its block b lands at rows b*20 + rank*10 of G (the gathered
// tensor's own layout, returned as it is and reshaped back for the map). Row blocks are
// taken per batch block (no tile spans two blocks); signals count per (shard, block).
// RUN: pkc-opt -p 'overlap{force=true tile=16 tile-k=32}' %s | FileCheck %s
// RUN: pkc-opt -p 'overlap{force=true tile=16 tile-k=32}' --remarks %s 2>&1 >/dev/null | FileCheck %s --check-prefix=REMARK

func.func @sp(%x: tensor<2x10x32xbf16>, %wq: tensor<32x48xbf16>, %wk: tensor<32x16xbf16>) -> (tensor<40x48xbf16>, tensor<40x16xbf16>, tensor<2x20x32xbf16>) {
  %g = pk.all_gather %x {dim = 1 : i64, world = 2 : i64} : tensor<2x10x32xbf16> -> tensor<2x20x32xbf16>
  %v = pk.reshape %g : tensor<2x20x32xbf16> -> tensor<40x32xbf16>
  %q = pk.matmul %v, %wq : (tensor<40x32xbf16>, tensor<32x48xbf16>) -> tensor<40x48xbf16>
  %k = pk.matmul %v, %wk : (tensor<40x32xbf16>, tensor<32x16xbf16>) -> tensor<40x16xbf16>
  %n = pk.map "neg" %g : (tensor<2x20x32xbf16>) -> tensor<2x20x32xbf16>
  func.return %q, %k, %n : tensor<40x48xbf16>, tensor<40x16xbf16>, tensor<2x20x32xbf16>
}

// CHECK-LABEL: func.func @sp
// CHECK-NEXT:  %x_rows = pk.reshape %x : tensor<2x10x32xbf16> -> tensor<20x32xbf16>
// CHECK-NEXT:  %q, %k, %g_rows = pk.kernel "all_gather_matmul"(%x_rows, %wq, %wk) {world = 2 : i64, pk.fusion = {{{[^}]*}}gathered = true, batches = 2 : i64}
// CHECK-SAME:    -> (tensor<40x48xbf16>, tensor<40x16xbf16>, tensor<40x32xbf16>) {
// CHECK-NEXT:  ^bb0(%X: !pk.buffer<20x32xbf16>, %B0: !pk.buffer<32x48xbf16>, %B1: !pk.buffer<32x16xbf16>, %Y0: !pk.buffer<40x48xbf16>, %Y1: !pk.buffer<40x16xbf16>, %G: !pk.buffer<40x32xbf16>):
// CHECK-NEXT:    %stage = pk.alloc {staging} : !pk.buffer<40x32xbf16, symmetric>
// CHECK-NEXT:    %ready = pk.alloc_signals : !pk.signals<4>
// CHECK-NEXT:    %arrived = pk.alloc_signals : !pk.signals<4>
// the local shard first: block b's rows b*10 of X are rows b*20 + rank*10 of the outputs
// CHECK:         pk.worker "compute" {
// CHECK-NEXT:      %rank = pk.rank
// CHECK-NEXT:      scf.for %b = %c0 to %c2 step %c1 {
// CHECK-NEXT:        %[[XR:.*]] = arith.muli %b, %c10 : index
// CHECK-NEXT:        %[[BS:.*]] = arith.muli %b, %c20 : index
// CHECK-NEXT:        %[[RS:.*]] = arith.muli %rank, %c10 : index
// CHECK-NEXT:        %[[OR:.*]] = arith.addi %[[RS]], %[[BS]] : index
// CHECK:             %a = pk.load %X[%[[XR]], %c0] : !pk.buffer<20x32xbf16> -> !pk.tile<10x32xbf16>
// CHECK:             pk.store %out, %Y0[%[[OR]], %{{.*}}] : !pk.tile<10x16xbf16>, !pk.buffer<40x48xbf16>
// then the peer's shard, block by block, once its block has arrived (slot shard*2 + b)
// CHECK:           scf.for %[[B2:.*]] = %c0 to %c2 step %c1 {
// CHECK:             %[[GR:.*]] = arith.addi %{{.*}}, %{{.*}} : index
// CHECK-NEXT:        %[[S:.*]] = arith.muli %{{.*}}, %c2 : index
// CHECK-NEXT:        %[[SLOT:.*]] = arith.addi %[[S]], %[[B2]] : index
// CHECK-NEXT:        pk.wait %ready[%[[SLOT]]] until %c1 : !pk.signals<4>
// CHECK:             %a_2 = pk.load %G[%[[GR]], %c0] : !pk.buffer<40x32xbf16> -> !pk.tile<10x32xbf16>
// the communicate worker puts block b of its shard at rows b*20 + rank*10 of the peer's stage
// CHECK:         pk.worker "communicate" {
// CHECK:             pk.put %shard_1, %stage[%{{.*}}, %c0] to %{{.*}} : !pk.tile<10x32xbf16>, !pk.buffer<40x32xbf16, symmetric>
// CHECK:             pk.signal %arrived[%{{.*}}] to %{{.*}} : !pk.signals<4>
// CHECK:       %g = pk.reshape %g_rows : tensor<40x32xbf16> -> tensor<2x20x32xbf16>
// CHECK-NEXT:  %n = pk.map "neg" %g
// CHECK-NEXT:  func.return %q, %k, %n

// REMARK: overlap-gather-blocks.mlir:11:3: remark: [pk.kernel] fused all_gather+mm (force=true
// REMARK: overlap-gather-blocks.mlir:11:3: remark: [pk.kernel] gather along a middle dim: each rank's shard is 2 blocks of 10 rows (block b of rank r is rows b*20 + r*10 of the operand); each block is tiled on its own (128-row tiles never span two), so the GEMM covers 512 rows for 40
