// schedule-matmul for an sm_100a target (b200) builds the tensor-memory GEMM (producer,
// single-thread MMA and epilogue roles over two CTA accumulators); --emit=ptx
// --target=sm_100a prints it as tcgen05 (assembled by ptxas in tests/unit/test_sm100_gemm.py;
// no Blackwell GPU has run it).
// RUN: pkc-opt -p 'schedule-matmul{target=b200},dce' %s | FileCheck %s
// RUN: pkc-opt -p 'schedule-matmul,dce' --emit=ptx --target=sm_100a %s | FileCheck %s --check-prefix=PTX
// RUN: not pkc-opt -p 'schedule-matmul{target=b200},dce' --emit=ptx --target=sm_90a %s 2>&1 | FileCheck %s --check-prefix=ERR

func.func @mm(%x: tensor<200x72xbf16>, %w: tensor<136x72xbf16>) -> tensor<200x136xbf16> {
  %wt = pk.transpose %w {perm = [1, 0]} : tensor<136x72xbf16> -> tensor<72x136xbf16>
  %y = pk.matmul %x, %wt : (tensor<200x72xbf16>, tensor<72x136xbf16>) -> tensor<200x136xbf16>
  func.return %y : tensor<200x136xbf16>
}

// CHECK:       pk.kernel "matmul"(%x, %w) {{.*}}acc = "tmem", acc_bufs = 2 : i64
// CHECK-SAME:  accumulators in tensor memory
// CHECK:       "pks.schedule"()
// CHECK:       %[[A0:.*]] = "pks.acc_alloc"() : () -> !pks.acc<128x[[N:[0-9]+]]>
// CHECK-NEXT:  %[[A1:.*]] = "pks.acc_alloc"() : () -> !pks.acc<128x[[N]]>
// CHECK:       kind = "producer"
// CHECK:         "pks.acc_select"({{.*}}, %[[A0]], %[[A1]])
// CHECK:           "pks.mma_async"
// CHECK-NEXT:      "pks.mma_commit_arrive"
// CHECK:         "pks.mma_commit_arrive"
// CHECK:       kind = "mma", first = #builtin.int<1>, warpgroups = #builtin.int<1>, regs = #builtin.int<0>, single_thread
// CHECK:         "pks.acc_store_smem"
// CHECK-NEXT:    "pks.fence_async_shared"
// CHECK-NEXT:    "pks.warpgroup_barrier"
// CHECK:         "pks.tma_store"
// CHECK:         "pks.mbarrier_arrive"
// CHECK:       "pks.bulk_wait"() {pending = #builtin.int<0>}
// CHECK:       kind = "epilogue", first = #builtin.int<2>

// PTX:       // pk.kernel @matmul (sm_100a)
// PTX:       .target sm_100a
// PTX:       .maxntid 384, 1, 1
// PTX:       tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r{{[0-9]+}}], {{[0-9]+}};
// PTX-NEXT:  tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;
// PTX:       cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// PTX:       tcgen05.mma.cta_group::1.kind::f16 [%r{{[0-9]+}}], %rd{{[0-9]+}}, %rd{{[0-9]+}}, %r{{[0-9]+}}, %p{{[0-9]+}};
// PTX-COUNT-3: tcgen05.mma.cta_group::1.kind::f16
// PTX:       tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64
// PTX:       tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64
// PTX:       tcgen05.ld.sync.aligned.32x32b.x{{16|32}}.b32
// PTX-NEXT:  tcgen05.wait::ld.sync.aligned;
// PTX:       st.shared.b32
// PTX:       cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group
// PTX:       tcgen05.dealloc.cta_group::1.sync.aligned.b32
// PTX-NOT:   wgmma

// ERR: codegen (sm_90a): {{.*}}a CTA accumulator {{.*}} needs sm_100a
