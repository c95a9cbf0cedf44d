// schedule-collectives on the all-to-all (equal splits, contiguous chunks) and on an
// all-gather whose input already lies in symmetric memory (the pull all-gather, agp);
// schedule-fused on a GEMM + all-reduce at W > 2: two scheduled kernels, GEMM +
// reduce-scatter then the pull all-gather of its symmetric output.
// RUN: pkc-opt -p 'lower-collectives,schedule-collectives' %s | FileCheck %s
// RUN: pkc-opt -p 'default{force=true},schedule-fused,dce' %s | FileCheck %s --check-prefix=PAIR
// RUN: pkc-opt -p 'lower-collectives,schedule-collectives' --emit=ptx %s | FileCheck %s --check-prefix=PTX

// All-to-all: arrive; chunk d = rank+1, rank+2, ..., rank of the input into slot `rank`
// of rank d's (symmetric) output: a permutation of destinations at every step; leave.
func.func @a2a(%x: tensor<9x40xbf16>) -> tensor<9x40xbf16> {
  %y = pk.all_to_all %x {world = 3 : i64, split_dim = 0 : i64, concat_dim = 0 : i64} : tensor<9x40xbf16> -> tensor<9x40xbf16>
  func.return %y : tensor<9x40xbf16>
}
// CHECK-LABEL: func.func @a2a
// CHECK:       pk.kernel "all_to_all_a2a"(%view) {{.*}}comm_kind = "a2a"{{.*}}vecs = 45 : i64, chunk_vecs = 15 : i64{{.*}}ctas_per_sm = 2 : i64, min_ctas_per_sm = 2 : i64{{.*}}fresh_output = false
// CHECK-SAME:  "scheduled collective a2a W=3 bf16 (720 B: direct puts
// CHECK:       ^bb0(%{{.*}}: !pk.buffer<1x3x120xbf16>, %[[OUT:.*]]: !pk.buffer<1x3x120xbf16, symmetric>):
// CHECK-NOT:     pk.alloc : !pk.buffer<{{.*}}xbf16, symmetric>
// CHECK:         "pks.signal_wait"{{.*}}site = #builtin.int<1>
// The first destination: rank + 1 (mod 3), chosen at run time.
// CHECK:         %[[R1:.*]] = arith.addi %[[RANK:.*]], %{{.*}} : i32
// CHECK:         %[[WRAP:.*]] = arith.cmpi uge, %[[R1]]
// CHECK:         %[[D1:.*]] = arith.select %[[WRAP]]
// CHECK:         "pks.ptr"(%[[OUT]], %[[D1]])
// CHECK-NEXT:    "pks.vec_loop"
// CHECK-COUNT-4:   "pks.vec_load"{{.*}}cache = "nc"
// CHECK-COUNT-4:   "pks.vec_store"
// CHECK-COUNT-2: "pks.vec_loop"
// CHECK:         "pks.signal_wait"{{.*}}site = #builtin.int<2>

// Split and concat along dim 1 of a 2-row tensor: chunks are not contiguous.
func.func @a2a_rows(%x: tensor<2x48xbf16>) -> tensor<2x48xbf16> {
  %y = pk.all_to_all %x {world = 2 : i64, split_dim = 1 : i64, concat_dim = 1 : i64} : tensor<2x48xbf16> -> tensor<2x48xbf16>
  func.return %y : tensor<2x48xbf16>
}
// CHECK-LABEL: func.func @a2a_rows
// CHECK:       collective left unscheduled: all_to_all along a non-leading dim (view [2, 2, 24]): chunks are not contiguous

// A kernel-level pull all-gather whose input is a producer kernel's symmetric output:
// scheduled as agp: arrive, pull every rank's chunk (own first) into a fresh output, leave.
func.func @pull(%x: tensor<1x1x360xbf16>) -> tensor<1x3x360xbf16> {
  %c = pk.kernel "produce"(%x) {world = 3 : i64} : (tensor<1x1x360xbf16>) -> tensor<1x1x360xbf16> {
  ^bb0(%in: !pk.buffer<1x1x360xbf16>, %mine: !pk.buffer<1x1x360xbf16, symmetric>):
    pk.worker "compute" {
      %c0 = arith.constant 0 : index
      %t = pk.load %in[%c0, %c0, %c0] : !pk.buffer<1x1x360xbf16> -> !pk.tile<1x1x360xbf16>
      pk.store %t, %mine[%c0, %c0, %c0] : !pk.tile<1x1x360xbf16>, !pk.buffer<1x1x360xbf16, symmetric>
      pk.yield
    }
    pk.yield
  }
  %y = pk.kernel "all_gather_pull"(%c) {world = 3 : i64, pk.plan = {collective = "all_gather", algorithm = "direct"}} : (tensor<1x1x360xbf16>) -> tensor<1x3x360xbf16> {
  ^bb0(%src: !pk.buffer<1x1x360xbf16, symmetric>, %out: !pk.buffer<1x3x360xbf16>):
    pk.worker "communicate" {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c3 = arith.constant 3 : index
      scf.for %p = %c0 to %c3 step %c1 {
        %t = pk.load %src[%c0, %c0, %c0] from %p : !pk.buffer<1x1x360xbf16, symmetric> -> !pk.tile<1x1x360xbf16>
        pk.store %t, %out[%c0, %p, %c0] : !pk.tile<1x1x360xbf16>, !pk.buffer<1x3x360xbf16>
      }
      pk.yield
    }
    pk.yield
  }
  func.return %y : tensor<1x3x360xbf16>
}
// CHECK-LABEL: func.func @pull
// CHECK:       pk.kernel "all_gather_agp"(%c) {{.*}}comm_kind = "agp"{{.*}}vecs = 45 : i64, chunk_vecs = 45 : i64{{.*}}fresh_output = true
// CHECK-SAME:  into a fresh output, pulled from every rank's symmetric input
// CHECK:       ^bb0(%[[SRC:.*]]: !pk.buffer<1x1x360xbf16, symmetric>, %{{.*}}: !pk.buffer<1x3x360xbf16>):
// CHECK:         "pks.signal_wait"{{.*}}site = #builtin.int<1>
// CHECK:         "pks.ptr"(%[[SRC]], %{{.*}})
// CHECK-NEXT:    arith.muli
// CHECK-NEXT:    "pks.vec_loop"
// CHECK-COUNT-4:   "pks.vec_load"{{.*}}cache = "cg"
// CHECK-COUNT-2: "pks.ptr"(%[[SRC]], %{{.*}})
// CHECK:         "pks.signal_wait"{{.*}}site = #builtin.int<2>

// GEMM + all-reduce at W = 3 (odd M = 3 x 33): the fused GEMM + reduce-scatter, then the
// pull all-gather of its symmetric output into a fresh [M, N]; the remark says why.
func.func @mm_ar(%x: tensor<99x72xbf16>, %w: tensor<72x40xbf16>) -> tensor<99x40xbf16> {
  %c = pk.matmul %x, %w : (tensor<99x72xbf16>, tensor<72x40xbf16>) -> tensor<99x40xbf16>
  %o = pk.all_reduce %c {world = 3 : i64, reduce = "sum"} : tensor<99x40xbf16> -> tensor<99x40xbf16>
  func.return %o : tensor<99x40xbf16>
}
// PAIR-LABEL: func.func @mm_ar
// PAIR:       %[[CH:.*]] = pk.kernel "matmul_reduce_scatter"(%x, %w) {{.*}}fused_kind = "rs"{{.*}}pair = "mm_all_reduce", pair_role = "reduce_scatter"
// PAIR-SAME:  mm_all_reduce W=3 99x40 as GEMM + reduce-scatter then a pull all-gather: each rank sends 1.33x its product (2(W-1)/W) where the one-kernel broadcast sends 2x (W-1)
// PAIR-SAME:  (tensor<99x72xbf16>, tensor<72x40xbf16>) -> tensor<33x40xbf16>
// PAIR:       ^bb0(%{{.*}}: !pk.buffer<99x72xbf16>, %{{.*}}: !pk.buffer<72x40xbf16>, %{{.*}}: !pk.buffer<33x40xbf16, symmetric>):
// PAIR:       %[[Y:.*]] = pk.kernel "all_gather_agp"(%[[CH]]) {{.*}}comm_kind = "agp"{{.*}}fresh_output = true, pair = "mm_all_reduce", pair_role = "all_gather", fused_kind = "agp"
// PAIR-SAME:  (tensor<33x40xbf16>) -> tensor<99x40xbf16>
// PAIR:       ^bb0(%{{.*}}: !pk.buffer<33x40xbf16, symmetric>, %{{.*}}: !pk.buffer<99x40xbf16>):
// PAIR:       func.return %[[Y]] : tensor<99x40xbf16>

// PTX-LABEL: .visible .entry all_to_all_a2a(
// PTX:       .param .u64 out1_p2,
// PTX:       ld.global.nc.v4.b32
// PTX-LABEL: .visible .entry all_gather_agp(
// PTX:       .param .u64 out0_p0,
// PTX:       .maxntid 512, 1, 1
// PTX-NEXT:  .minnctapersm 2
// PTX:       ld.global.cg.v4.b32
