// schedule-fused at W = 72 (an NVL72 domain, issue 17): the GEMM + reduce-scatter is
// scheduled (no cap below 72): 72 peer tensor maps, a tile loop over 72 chunks, and the
// wait for a chunk's owner when the loop enters a peer's chunk (no per-owner mask). In the
// PTX the owner's map is the first map's address plus 128 bytes per chunk (the maps are
// consecutive parameters), not a 72-way selp chain.
// RUN: pkc-opt -p 'default{target=nvl72 force=true},schedule-fused,dce' %s | FileCheck %s
// RUN: pkc-opt -p 'default{target=nvl72 force=true},schedule-fused,dce' --emit=ptx %s | FileCheck %s --check-prefix=PTX

func.func @mm_rs(%a: tensor<216x64xbf16>, %b: tensor<64x64xbf16>) -> tensor<3x64xbf16> {
  %p = pk.matmul %a, %b : (tensor<216x64xbf16>, tensor<64x64xbf16>) -> tensor<216x64xbf16>
  %y = pk.reduce_scatter %p {dim = 0 : i64, reduce = "sum", world = 72 : i64} : tensor<216x64xbf16> -> tensor<3x64xbf16>
  func.return %y : tensor<3x64xbf16>
}

// CHECK-LABEL: func.func @mm_rs
// CHECK:       pk.kernel "matmul_reduce_scatter"{{.*}}world = 72 : i64
// CHECK-SAME:    schedule = "fused", fused_kind = "rs"
// CHECK-SAME:    scheduled GEMM + reduce-scatter W=72
// CHECK-SAME:    72 chunks of 1 tiles, own chunk first
// CHECK:         pk.alloc {zero} : !pk.buffer<72xi32, symmetric>
// CHECK:         "pks.peer_tmap"(%{{.*}}) {peer = #builtin.int<0>}
// CHECK:         "pks.peer_tmap"(%{{.*}}) {peer = #builtin.int<71>}
// CHECK-NEXT:    "pks.schedule"()
// CHECK:           chunks = #builtin.int<72>
// CHECK:           kind = "producer"
// The consumers carry (chunk, tiles pending) only; entering a peer's chunk (the chunk
// changed, and it is not the own one) the leader waits for the owner's slot.
// CHECK:           "pks.chunk_tile_loop"
// CHECK-NEXT:      ^{{.*}}(%{{[0-9]+}}: i32, %{{[0-9]+}}: i32, %{{[0-9]+}}: i32, %{{[0-9]+}}: i32, %{{[0-9]+}}: i32, %{{[0-9]+}}: i32, %{{[0-9]+}}: i32, %{{[0-9]+}}: i32):
// CHECK-NOT:         arith.shli
// CHECK:             "pks.signal_wait"({{.*}}) {site = #builtin.int<1>
// CHECK:             "pks.tmap_select"
// CHECK:             "pks.tma_store_or_add"
// CHECK:           chunks = #builtin.int<72>
// CHECK:           kind = "consumer"

// PTX: .visible .entry matmul_reduce_scatter(
// PTX:   .param .align 64 .b8 tmap73[128],
// PTX:   .param .u64 alloc0_p71,
// PTX:   mov.u64 [[PEER0:%rd[0-9]+]], tmap2;
// PTX:   add.s64 [[TM:%rd[0-9]+]], %rd{{[0-9]+}}, [[PEER0]];
// PTX:   cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group {{\[}}[[TM]],
