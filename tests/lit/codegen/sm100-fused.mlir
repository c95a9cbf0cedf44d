// schedule-fused for an sm_100a target (b200) builds the fused GEMM + reduce-scatter on the
// tensor-memory GEMM (producer, single-thread MMA role, epilogue role reading the two CTA
// accumulators) with the sm_90a kernel's communication: per tile TMA stores / reduce-adds
// into the chunk owner's output, epoch-counted signals. --emit=ptx --target=sm_100a prints
// tcgen05 (assembled and emulated in tests/unit/test_sm100_fused.py; no Blackwell GPU has
// run it).
// RUN: pkc-opt -p 'default{force=true},schedule-fused{target=b200},dce' %s | FileCheck %s
// RUN: pkc-opt -p 'default{force=true},schedule-fused,dce' --emit=ptx --target=sm_100a %s | FileCheck %s --check-prefix=PTX

func.func @mm_rs(%x: tensor<90x24xbf16>, %w: tensor<40x24xbf16>) -> tensor<30x40xbf16> {
  %wt = pk.transpose %w {perm = [1, 0]} : tensor<40x24xbf16> -> tensor<24x40xbf16>
  %c = pk.matmul %x, %wt : (tensor<90x24xbf16>, tensor<24x40xbf16>) -> tensor<90x40xbf16>
  %o = pk.reduce_scatter %c {dim = 0 : i64, reduce = "sum", world = 3 : i64} : tensor<90x40xbf16> -> tensor<30x40xbf16>
  func.return %o : tensor<30x40xbf16>
}

// CHECK:       pk.kernel "matmul_reduce_scatter"(%x, %w) {{.*}}acc = "tmem", acc_bufs = 2 : i64
// CHECK-SAME:  sm_100a kernel: tcgen05 MMAs from one thread into 2 tensor-memory accumulators
// CHECK:       "pks.epoch"
// CHECK:       %[[A0:.*]] = "pks.acc_alloc"() : () -> !pks.acc<128x[[N:[0-9]+]]>
// CHECK-NEXT:  %[[A1:.*]] = "pks.acc_alloc"() : () -> !pks.acc<128x[[N]]>
// CHECK:       "pks.chunk_tile_loop"
// CHECK:       kind = "producer"
// CHECK:         "pks.chunk_tile_loop"
// CHECK:           "pks.acc_select"({{.*}}, %[[A0]], %[[A1]])
// CHECK:             "pks.mma_async"
// CHECK-NEXT:        "pks.mma_commit_arrive"
// CHECK:           "pks.mma_commit_arrive"
// CHECK:       kind = "mma", first = #builtin.int<1>
// CHECK:         "pks.chunk_tile_loop"
// CHECK:           "pks.acc_select"({{.*}}, %[[A0]], %[[A1]])
// CHECK:           "pks.signal_add"
// CHECK:           "pks.signal_wait"
// CHECK:           "pks.acc_store_smem"
// CHECK:           "pks.tma_store_or_add"
// CHECK:           "pks.mbarrier_arrive"
// CHECK:       kind = "epilogue", first = #builtin.int<2>
// CHECK:       "pks.epoch_publish"

// PTX:       // pk.kernel @matmul_reduce_scatter (sm_100a)
// PTX:       .target sm_100a
// PTX:       tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32
// PTX:       tcgen05.mma.cta_group::1.kind::f16
// PTX:       tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64
// PTX:       red.release.sys.global.add.u32
// PTX:       tcgen05.ld.sync.aligned.32x32b.x32.b32
// PTX-NEXT:  tcgen05.wait::ld.sync.aligned;
// PTX:       cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group
// PTX:       tcgen05.dealloc.cta_group::1.sync.aligned.b32
// PTX-NOT:   wgmma
