// schedule-fused on an all-gather along K + GEMM (pkc/passes/ag_k_schedule.py): the
// GEMM's producer reads the own shard from A's map and a peer's from the gathered
// operand's slots [W, M, Kc] (pks.tmap_select per k-step), after a wait on that peer's
// row-block signal; the put side (pks.cta_partition) moves the shard by bulk copies; the
// plain tile loop. The gathered tensor, asked for, comes back from its slots by a
// graph-level reshape / transpose / reshape to [M, K].
// RUN: pkc-opt -p 'default{force=true},schedule-fused' --remarks %s 2>%t.err | FileCheck %s
// RUN: FileCheck %s --check-prefix=REM < %t.err

func.func @k2d(%x: tensor<40x24xbf16>, %w: tensor<48x16xbf16>) -> (tensor<40x16xbf16>, tensor<40x48xbf16>) {
  %g = pk.all_gather %x {dim = 1 : i64, world = 2 : i64} : tensor<40x24xbf16> -> tensor<40x48xbf16>
  %y = pk.matmul %g, %w : (tensor<40x48xbf16>, tensor<48x16xbf16>) -> tensor<40x16xbf16>
  func.return %y, %g : tensor<40x16xbf16>, tensor<40x48xbf16>
}

// CHECK: %y, %[[S:.*]] = pk.kernel "all_gather_k_matmul"(%x, %w) {{.*}}gather_dim = "K", shard_k = 24
// CHECK-SAME: gathered_output = true
// CHECK: "pks.tmap_view"(%{{.*}}) {dims = [#builtin.int<1>, #builtin.int<40>, #builtin.int<24>]} : (!pk.buffer<40x24xbf16>)
// CHECK: "pks.tmap_view"(%{{.*}}) {dims = [#builtin.int<2>, #builtin.int<40>, #builtin.int<24>]} : (!pk.buffer<80x24xbf16, symmetric>)
// CHECK: "pks.schedule"
// CHECK: "pks.cta_partition"
// CHECK: "pks.tile_loop"
// the producer's k-step: a peer's row block waited for, then the shard's map
// CHECK: "pks.signal_wait"
// CHECK: "pks.tmap_select"
// CHECK: "pks.tma_load"
// CHECK: "pks.tile_loop"
// CHECK: "pks.bulk_store"
// CHECK: %[[V:.*]] = pk.reshape %[[S]] : tensor<80x24xbf16> -> tensor<2x40x24xbf16>
// CHECK: %[[T:.*]] = pk.transpose %[[V]] {perm = [1 : i64, 0 : i64, 2 : i64]} : tensor<2x40x24xbf16> -> tensor<40x2x24xbf16>
// CHECK: %g = pk.reshape %[[T]] : tensor<40x2x24xbf16> -> tensor<40x48xbf16>
// CHECK: func.return %y, %g

// REM: schedule-fused-ag-k.mlir:11:3: remark: [pk.kernel] scheduled all-gather along K + GEMM W=2 40x16x48 bf16: {{.*}}K loop over 2 shards of 1 k-steps (own shard first
// REM-SAME: the gathered A is returned ([W, M, Kc] slots, transposed to [M, K] after the kernel)
