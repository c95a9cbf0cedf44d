// schedule-fused: the fused GEMM + all-reduce at W <= 2 and the W = 2 fresh-output GEMM +
// reduce-scatter become scheduled kernels (pkc/passes/fused_ar_build.py): chunks are
// windows of rows (pks.rows_tmap: M = 137 is not a multiple of W, the chunks are 69 and
// 68 rows); at W = 2 the result goes to a fresh output (the tuning table's choice), the
// summed tiles load the peer's partial into the epilogue buffers (pks.tma_load on load
// barriers), add the accumulator (pks.acc_add_smem) and store the sum; at W = 1 the
// broadcast into the symmetric output.
// RUN: pkc-opt -p 'default{force=true},schedule-fused,dce' %s | FileCheck %s
// RUN: pkc-opt -p 'default{force=true},schedule-fused,dce' --emit=ptx %s | FileCheck %s --check-prefix=PTX
// The three kernels run in the emulator against the interpreter of the input program:
// RUN: %python -m pkc.emu %s -p 'default{force=true},schedule-fused,dce' | FileCheck %s --check-prefix=EMU

func.func @mm_ar2(%x: tensor<137x72xbf16>, %w: tensor<136x72xbf16>) -> tensor<137x136xbf16> {
  %wt = pk.transpose %w {perm = [1, 0]} : tensor<136x72xbf16> -> tensor<72x136xbf16>
  %c = pk.matmul %x, %wt : (tensor<137x72xbf16>, tensor<72x136xbf16>) -> tensor<137x136xbf16>
  %o = pk.all_reduce %c {reduce = "sum", world = 2 : i64} : tensor<137x136xbf16> -> tensor<137x136xbf16>
  func.return %o : tensor<137x136xbf16>
}

func.func @mm_ar1(%x: tensor<137x72xbf16>, %w: tensor<72x136xbf16>) -> tensor<137x136xbf16> {
  %c = pk.matmul %x, %w : (tensor<137x72xbf16>, tensor<72x136xbf16>) -> tensor<137x136xbf16>
  %o = pk.all_reduce %c {reduce = "sum", world = 1 : i64} : tensor<137x136xbf16> -> tensor<137x136xbf16>
  func.return %o : tensor<137x136xbf16>
}

func.func @mm_rs2(%x: tensor<198x72xbf16>, %w: tensor<136x72xbf16>) -> tensor<99x136xbf16> {
  %wt = pk.transpose %w {perm = [1, 0]} : tensor<136x72xbf16> -> tensor<72x136xbf16>
  %c = pk.matmul %x, %wt : (tensor<198x72xbf16>, tensor<72x136xbf16>) -> tensor<198x136xbf16>
  %o = pk.reduce_scatter %c {dim = 0 : i64, reduce = "sum", world = 2 : i64} : tensor<198x136xbf16> -> tensor<99x136xbf16>
  func.return %o : tensor<99x136xbf16>
}

// CHECK-LABEL: func.func @mm_ar2
// CHECK:       pk.kernel "matmul_all_reduce"(%x, %w) {world = 2 : i64
// CHECK-SAME:    schedule = "fused", fused_kind = "ar", bm = 128 : i64, bn = 128 : i64
// CHECK-SAME:    chunk_rows = 69 : i64, tiles_per_chunk = 2 : i64, scheduled_overlap = "intra", comm_ctas = 0 : i64, fresh_output = true
// CHECK-SAME:    scheduled GEMM + all-reduce W=2 137x136x72 bf16
// CHECK-SAME:    2 chunks of 2 tiles (rows 69/68), own chunk first
// CHECK-SAME:    result in a fresh output
// CHECK-SAME:    inter-SM plan (8 communicate SMs) is not followed
// The output is local (fresh); the accumulator a symmetric pk.alloc, never zeroed.
// CHECK-NEXT:  ^bb0(%{{.*}}: !pk.buffer<137x72xbf16>, %{{.*}}: !pk.buffer<136x72xbf16>, %[[OUT:.*]]: !pk.buffer<137x136xbf16>):
// CHECK-NEXT:    %[[PAD:.*]] = pk.alloc {zero} : !pk.buffer<4xi32, symmetric>
// CHECK-NEXT:    %[[CTL:.*]] = pk.alloc {zero} : !pk.buffer<2xi32>
// CHECK-NEXT:    %[[ACC:.*]] = pk.alloc : !pk.buffer<137x136xbf16, symmetric>
// CHECK:         "pks.rows_tmap"(%[[OUT]]) {peer = #builtin.int<-1>, first = #builtin.int<0>, rows = #builtin.int<69>}
// CHECK-NEXT:    "pks.rows_tmap"(%[[OUT]]) {peer = #builtin.int<-1>, first = #builtin.int<69>, rows = #builtin.int<68>}
// CHECK-NEXT:    "pks.rows_tmap"(%[[ACC]]) {peer = #builtin.int<0>, first = #builtin.int<0>, rows = #builtin.int<69>}
// CHECK-NEXT:    "pks.rows_tmap"(%[[ACC]]) {peer = #builtin.int<0>, first = #builtin.int<69>, rows = #builtin.int<68>}
// CHECK-NEXT:    "pks.rows_tmap"(%[[ACC]]) {peer = #builtin.int<1>, first = #builtin.int<0>, rows = #builtin.int<69>}
// CHECK-NEXT:    "pks.rows_tmap"(%[[ACC]]) {peer = #builtin.int<1>, first = #builtin.int<69>, rows = #builtin.int<68>}
// CHECK:         "pks.schedule"()
// CHECK:           %[[LB:.*]] = "pks.mbarrier_alloc"() : () -> !pks.mbarriers<4, 1>
// The consumers: before a tile's main loop, the peer's chunk waits for the owner's stores
// in both accumulators and loads its first piece; after it, the plain epilogue (own chunk
// into both accumulators) or the summed one.
// CHECK:           "pks.chunk_tile_loop"
// CHECK:             "pks.signal_wait"({{.*}}) {site = #builtin.int<1>
// CHECK:             "pks.tma_load"({{.*}}, %[[LB]], {{.*}})
// CHECK:             "pks.mma_async"
// CHECK:             "pks.acc_store_smem"
// CHECK:             "pks.tma_store"
// CHECK-NEXT:        "pks.tma_store"
// CHECK:             "pks.mbarrier_wait"(%[[LB]]
// CHECK-NEXT:        "pks.acc_add_smem"
// CHECK:           "pks.signal_wait"({{.*}}) {site = #builtin.int<2>
// The own chunk (the peer's sums) from the accumulator into the output.
// CHECK:           "pks.ptr"(%[[ACC]])
// CHECK-NEXT:      "pks.ptr"(%[[OUT]])
// CHECK:           "pks.vec_loop"
// CHECK:             "pks.vec_load"
// CHECK:             "pks.vec_store"
// CHECK:           kind = "consumer"
// CHECK:         "pks.epoch_publish"(%[[CTL]], %{{.*}})

// CHECK-LABEL: func.func @mm_ar1
// CHECK:       pk.kernel "matmul_all_reduce"(%x, %w) {world = 1 : i64
// CHECK-SAME:    fused_kind = "ar"
// CHECK-SAME:    b_layout = "kn", chunk_rows = 137 : i64
// CHECK-SAME:    fresh_output = false
// CHECK-SAME:    result in the symmetric output (persistent
// CHECK-NEXT:  ^bb0(%{{.*}}: !pk.buffer<137x72xbf16>, %{{.*}}: !pk.buffer<72x136xbf16>, %[[C1:.*]]: !pk.buffer<137x136xbf16, symmetric>):
// CHECK-NEXT:    pk.alloc {zero} : !pk.buffer<1xi32, symmetric>
// CHECK:         "pks.rows_tmap"(%[[C1]]) {peer = #builtin.int<0>, first = #builtin.int<0>, rows = #builtin.int<137>}
// At W = 1 no peer reads a signal: no epoch read, no counts, no publication (the plain
// GEMM's prologue and end).
// CHECK-NOT:     "pks.rows_tmap"
// CHECK-NOT:     "pks.epoch"
// CHECK:           "pks.tma_store_or_add"
// CHECK-NOT:       "pks.acc_add_smem"
// CHECK-NOT:       "pks.signal_add"
// CHECK-NOT:       "pks.epoch_publish"

// CHECK-LABEL: func.func @mm_rs2
// CHECK:       pk.kernel "matmul_reduce_scatter"(%x, %w) {world = 2 : i64
// CHECK-SAME:    fused_kind = "rs"
// CHECK-SAME:    chunk_rows = 99 : i64, tiles_per_chunk = 2 : i64
// CHECK-SAME:    fresh_output = true
// CHECK-SAME:    the peer's chunk first (its partial stored into the peer's staging
// CHECK-NEXT:  ^bb0(%{{.*}}: !pk.buffer<198x72xbf16>, %{{.*}}: !pk.buffer<136x72xbf16>, %[[Y:.*]]: !pk.buffer<99x136xbf16>):
// CHECK-NEXT:    pk.alloc {zero} : !pk.buffer<2xi32, symmetric>
// CHECK-NEXT:    pk.alloc {zero} : !pk.buffer<2xi32>
// CHECK-NEXT:    %[[ST:.*]] = pk.alloc : !pk.buffer<198x136xbf16, symmetric>
// CHECK:         "pks.rows_tmap"(%[[ST]]) {peer = #builtin.int<0>, first = #builtin.int<0>, rows = #builtin.int<99>}
// CHECK-NEXT:    "pks.rows_tmap"(%[[ST]]) {peer = #builtin.int<0>, first = #builtin.int<99>, rows = #builtin.int<99>}
// CHECK-NEXT:    "pks.rows_tmap"(%[[ST]]) {peer = #builtin.int<1>, first = #builtin.int<0>, rows = #builtin.int<99>}
// CHECK-NEXT:    "pks.rows_tmap"(%[[ST]]) {peer = #builtin.int<1>, first = #builtin.int<99>, rows = #builtin.int<99>}
// CHECK-NEXT:    "pks.tmap"(%[[Y]])
// CHECK:           "pks.acc_add_smem"
// CHECK:         "pks.epoch_publish"

// PTX: .visible .entry matmul_all_reduce(
// PTX:   .param .align 64 .b8 tmap7[128],
// PTX:   .param .u64 alloc2_p1,
// PTX:   ld.shared.b32
// PTX:   add.rn.f32
// PTX:   cvt.rn.bf16x2.f32
// PTX:   st.shared.b32
// PTX:   ld.global.cg.v4.b32
// PTX: .visible .entry matmul_all_reduce_1(
// PTX:   cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group
// PTX: .visible .entry matmul_reduce_scatter(
// PTX:   cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// PTX-NOT: cp.reduce.async
// PTX:   ret;

// EMU: ok   @matmul_all_reduce: 2 rank(s), sm_90a
// EMU: ok   @matmul_all_reduce: 1 rank(s), sm_90a
// EMU: ok   @matmul_reduce_scatter: 2 rank(s), sm_90a
// EMU: 3 kernel(s) match the interpreter
