// schedule-fused{clc=on} for an sm_100a target puts the fused GEMM + reduce-scatter's
// chunked tile loop under cluster launch control: pks.clc_chunk_tile_loop in every role
// (the producer issues the requests and takes the tickets), the ticket counter a local
// pk.alloc, plan scheduler = "clc" and the remark; --emit=ptx --target=sm_100a prints the
// try_cancel / query_cancel and the ticket atomics (the W = 2 fresh-output kernel, peer's
// chunk first, likewise). clc=auto keeps the static loop for a
// kernel whose work fits the SMs at once and says so.
// (Emulated and assembled in tests/unit/test_sm100_fused_clc.py; no Blackwell GPU ran it.)
// RUN: pkc-opt -p 'default{force=true},schedule-fused{target=b200 clc=on},dce' %s | FileCheck %s
// RUN: pkc-opt -p 'default{force=true},schedule-fused{target=b200},dce' %s | FileCheck %s --check-prefix=AUTO
// RUN: pkc-opt -p 'default{force=true},schedule-fused{clc=on},dce' --emit=ptx --target=sm_100a %s | FileCheck %s --check-prefix=PTX
// RUN: not pkc-opt -p 'default{force=true},schedule-fused{clc=maybe}' %s 2>&1 | FileCheck %s --check-prefix=BAD

func.func @mm_rs(%x: tensor<390x16xbf16>, %w: tensor<16x72xbf16>) -> tensor<130x72xbf16> {
  %c = pk.matmul %x, %w : (tensor<390x16xbf16>, tensor<16x72xbf16>) -> tensor<390x72xbf16>
  %o = pk.reduce_scatter %c {dim = 0 : i64, reduce = "sum", world = 3 : i64} : tensor<390x72xbf16> -> tensor<130x72xbf16>
  func.return %o : tensor<130x72xbf16>
}

// W = 2: the fresh-output reduce-scatter (peer's chunk first) takes it too
func.func @mm_rs2(%x: tensor<260x16xbf16>, %w: tensor<16x72xbf16>) -> tensor<130x72xbf16> {
  %c = pk.matmul %x, %w : (tensor<260x16xbf16>, tensor<16x72xbf16>) -> tensor<260x72xbf16>
  %o = pk.reduce_scatter %c {dim = 0 : i64, reduce = "sum", world = 2 : i64} : tensor<260x72xbf16> -> tensor<130x72xbf16>
  func.return %o : tensor<130x72xbf16>
}

// CHECK:       pk.kernel "matmul_reduce_scatter"(%x, %w) {{.*}}scheduler = "clc"
// CHECK-SAME:  _clc, 3 chunks of 4 tiles
// CHECK-SAME:  cluster launch control (clc=on): one CTA per work index (12)
// CHECK:       pk.alloc {zero} : !pk.buffer<1xi32>
// CHECK:       "pks.smem_alloc"() : () -> !pks.smem<2 x 32>
// (a role's kind prints after its region: each loop comes before its role's kind)
// CHECK:         "pks.clc_chunk_tile_loop"
// CHECK:         chunks = #builtin.int<3>, issuer = #builtin.int<1>} : (i32, i32, i32, i32, !pk.buffer<1xi32>, !pk.buffer<2xi32>, !pks.smem<2 x 32>, !pks.mbarriers<2, 1>, !pks.mbarriers<2, 1>, !pks.mbarriers<2, 2>
// CHECK:       kind = "producer"
// CHECK:         "pks.clc_chunk_tile_loop"
// CHECK:         issuer = #builtin.int<0>}
// CHECK:       kind = "mma"
// CHECK:         "pks.clc_chunk_tile_loop"
// CHECK:         issuer = #builtin.int<0>}
// CHECK:       kind = "epilogue"
// CHECK-NOT:   "pks.chunk_tile_loop"
// CHECK:       pk.kernel "matmul_reduce_scatter"(%x, %w) {world = 2 {{.*}}fresh_output = true{{.*}}scheduler = "clc"
// CHECK-SAME:  the peer's chunk first
// CHECK-SAME:  one CTA per work index (8)
// CHECK:         "pks.clc_chunk_tile_loop"
// CHECK-NOT:   "pks.chunk_tile_loop"

// AUTO:        scheduler = "static"
// AUTO-SAME:   static tile loop: 12 work indices fit the 148 SMs at once
// AUTO:        "pks.chunk_tile_loop"
// AUTO:        scheduler = "static"
// AUTO-SAME:   static tile loop: 8 work indices fit the 148 SMs at once
// AUTO-NOT:    "pks.clc_chunk_tile_loop"

// PTX:         .entry matmul_reduce_scatter
// PTX:         atom.global.add.u32
// PTX:         clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes.b128
// PTX:         clusterlaunchcontrol.query_cancel.is_canceled.pred.b128
// PTX-NOT:     wgmma

// BAD: 'maybe' is not a valid ClcChoice
