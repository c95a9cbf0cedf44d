// schedule-fused on an all-gather along K + GEMM (pkc/passes/ag_k_schedule.py): the
// GEMM's producer reads the own shard from A's map and a peer's from the gathered operand
// (pks.tmap_select per k-step), after a wait on that peer's row-block signal; the put side
// (pks.cta_partition) moves the shard by bulk copies; the plain tile loop. The gathered
// tensor, asked for, is written in its own layout [M, W*Kc] (one row of the shard per put
// piece: 48 bytes here, in 1 KiB ring slots) and returned as it is: A and G are read
// through [M, 1, Kc] and [M, W, Kc] views (the shard is the middle coordinate).
// RUN: pkc-opt -p 'default{force=true},schedule-fused' --remarks %s 2>%t.err | FileCheck %s
// RUN: FileCheck %s --check-prefix=REM < %t.err

func.func @k2d(%x: tensor<40x24xbf16>, %w: tensor<48x16xbf16>) -> (tensor<40x16xbf16>, tensor<40x48xbf16>) {
  %g = pk.all_gather %x {dim = 1 : i64, world = 2 : i64} : tensor<40x24xbf16> -> tensor<40x48xbf16>
  %y = pk.matmul %g, %w : (tensor<40x48xbf16>, tensor<48x16xbf16>) -> tensor<40x16xbf16>
  func.return %y, %g : tensor<40x16xbf16>, tensor<40x48xbf16>
}

// CHECK: %y, %g = pk.kernel "all_gather_k_matmul"(%x, %w) {{.*}}gather_dim = "K", shard_k = 24
// CHECK-SAME: put_piece = 48
// CHECK-SAME: gathered_output = true, gathered_layout = "rows"
// CHECK: "pks.tmap_view"(%{{.*}}) {dims = [#builtin.int<40>, #builtin.int<1>, #builtin.int<24>]} : (!pk.buffer<40x24xbf16>) -> !pks.tmap<bf16, 64x1x128, swizzle 128>
// CHECK: "pks.tmap_view"(%{{.*}}) {dims = [#builtin.int<40>, #builtin.int<2>, #builtin.int<24>]} : (!pk.buffer<40x48xbf16, symmetric>) -> !pks.tmap<bf16, 64x1x128, swizzle 128>
// CHECK: "pks.schedule"
// CHECK: "pks.smem_overlay"{{.*}}bytes = #builtin.int<1024>
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

// REM: schedule-fused-ag-k.mlir:12:3: remark: [pk.kernel] scheduled all-gather along K + GEMM W=2 40x16x48 bf16: {{.*}}K loop over 2 shards of 1 k-steps (own shard first
// REM-SAME: the gathered A is returned in its [M, K] layout (the puts write each row of the shard into its columns: pieces of one row, 48 bytes)
