// schedule-fused on an all-gather along K + GEMM (pkc/passes/ag_k_schedule.py): the
// GEMM's producer reads the own shard from A's map and a peer's from the gathered operand
// (pks.tmap_select per k-step), after a wait on that peer's row-block signal; the put side
// (pks.cta_partition) moves the shard by bulk copies; the plain tile loop. The gathered
// tensor, asked for: rows of the shard of 8 KiB or more are written in its own layout
// [M, W*Kc] (one row per put piece, a ring of 16; A and G read through [M, 1 | W, Kc]
// views) and returned as is (@rows); shorter rows go as whole row blocks into slots
// [W, M, Kc], and [M, K] comes from them by a graph-level transpose after the kernel (@slots).
// RUN: pkc-opt -p 'default{force=true},schedule-fused' --remarks %s 2>%t.err | FileCheck %s
// RUN: FileCheck %s --check-prefix=REM < %t.err

func.func @rows(%x: tensor<40x4096xbf16>, %w: tensor<8192x16xbf16>) -> (tensor<40x16xbf16>, tensor<40x8192xbf16>) {
  %g = pk.all_gather %x {dim = 1 : i64, world = 2 : i64} : tensor<40x4096xbf16> -> tensor<40x8192xbf16>
  %y = pk.matmul %g, %w : (tensor<40x8192xbf16>, tensor<8192x16xbf16>) -> tensor<40x16xbf16>
  func.return %y, %g : tensor<40x16xbf16>, tensor<40x8192xbf16>
}

// CHECK-LABEL: func.func @rows
// CHECK: %y, %g = pk.kernel "all_gather_k_matmul"(%x, %w) {{.*}}gather_dim = "K", shard_k = 4096
// CHECK-SAME: put_piece = 8192 : i64, put_ring = 16 : i64, put_lag = 8 : i64, gathered_output = true, gathered_layout = "rows"
// CHECK: "pks.tmap_view"(%{{.*}}) {dims = [#builtin.int<40>, #builtin.int<1>, #builtin.int<4096>]} : (!pk.buffer<40x4096xbf16>) -> !pks.tmap<bf16, 64x1x128, swizzle 128>
// CHECK: "pks.tmap_view"(%{{.*}}) {dims = [#builtin.int<40>, #builtin.int<2>, #builtin.int<4096>]} : (!pk.buffer<40x8192xbf16, symmetric>) -> !pks.tmap<bf16, 64x1x128, swizzle 128>
// CHECK: "pks.schedule"
// CHECK: "pks.smem_overlay"{{.*}}count = #builtin.int<16>, bytes = #builtin.int<8192>
// CHECK: "pks.cta_partition"
// CHECK: "pks.tile_loop"
// the producer's k-step: a peer's row block waited for, then the shard's map
// CHECK: "pks.signal_wait"
// CHECK: "pks.tmap_select"
// CHECK: "pks.tma_load"
// CHECK: "pks.tile_loop"
// CHECK: "pks.bulk_store"
// CHECK-NOT: pk.transpose
// CHECK: func.return %y, %g

func.func @slots(%x: tensor<40x24xbf16>, %w: tensor<48x16xbf16>) -> (tensor<40x16xbf16>, tensor<40x48xbf16>) {
  %g = pk.all_gather %x {dim = 1 : i64, world = 2 : i64} : tensor<40x24xbf16> -> tensor<40x48xbf16>
  %y = pk.matmul %g, %w : (tensor<40x48xbf16>, tensor<48x16xbf16>) -> tensor<40x16xbf16>
  func.return %y, %g : tensor<40x16xbf16>, tensor<40x48xbf16>
}

// CHECK-LABEL: func.func @slots
// CHECK: %y, %[[S:.*]] = pk.kernel "all_gather_k_matmul"(%x, %w) {{.*}}gathered_layout = "slots"
// CHECK: "pks.tmap_view"(%{{.*}}) {dims = [#builtin.int<1>, #builtin.int<40>, #builtin.int<24>]} : (!pk.buffer<40x24xbf16>)
// CHECK: "pks.tmap_view"(%{{.*}}) {dims = [#builtin.int<2>, #builtin.int<40>, #builtin.int<24>]} : (!pk.buffer<80x24xbf16, symmetric>)
// CHECK: %[[V:.*]] = pk.reshape %[[S]] : tensor<80x24xbf16> -> tensor<2x40x24xbf16>
// CHECK: %[[T:.*]] = pk.transpose %[[V]] {perm = [1 : i64, 0 : i64, 2 : i64]} : tensor<2x40x24xbf16> -> tensor<40x2x24xbf16>
// CHECK: %g = pk.reshape %[[T]] : tensor<40x2x24xbf16> -> tensor<40x48xbf16>
// CHECK: func.return %y, %g

// REM: schedule-fused-ag-k.mlir:13:3: remark: [pk.kernel] scheduled all-gather along K + GEMM W=2 40x16x8192 bf16: {{.*}}K loop over 2 shards of 64 k-steps (own shard first
// REM-SAME: the gathered A is returned in its [M, K] layout (the puts write each row of the shard into its columns: pieces of one row, 8192 bytes)
// REM: schedule-fused-ag-k.mlir:37:3: remark: [pk.kernel] scheduled all-gather along K + GEMM W=2 40x16x48 bf16:
// REM-SAME: the gathered A is returned ([W, M, Kc] slots, transposed to [M, K] after the kernel: a row of the shard, 48 bytes, is not a put piece of 8192-32768 bytes)
