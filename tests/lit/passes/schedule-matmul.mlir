// schedule-matmul: a 2-D bf16 pk.matmul of x and W.T becomes a scheduled pk.kernel (the
// persistent warp-specialized GEMM at the schedule level); B is read in W's [N, K] layout.
// RUN: pkc-opt -p 'schedule-matmul,dce' %s | FileCheck %s
// RUN: pkc-opt -p 'schedule-matmul,dce' --emit=ptx %s | FileCheck %s --check-prefix=PTX

func.func @mm(%x: tensor<200x72xbf16>, %w: tensor<136x72xbf16>) -> tensor<200x136xbf16> {
  %wt = pk.transpose %w {perm = [1, 0]} : tensor<136x72xbf16> -> tensor<72x136xbf16>
  %y = pk.matmul %x, %wt : (tensor<200x72xbf16>, tensor<72x136xbf16>) -> tensor<200x136xbf16>
  func.return %y : tensor<200x136xbf16>
}

// CHECK-LABEL: func.func @mm
// CHECK-NOT:   pk.transpose
// CHECK:       pk.kernel "matmul"(%x, %w) {{.*}}pk.plan = {pattern = "gemm", bm = 128 : i64, bn = 128 : i64, stages = 6 : i64
// CHECK-SAME:  scheduled GEMM 200x136x72 bf16: 128x128 s6
// CHECK:       "pks.tmap"({{.*}}) : (!pk.buffer<200x72xbf16>) -> !pks.tmap<bf16, 64x128, swizzle 128>
// CHECK:       "pks.schedule"()
// CHECK:       "pks.smem_alloc"() : () -> !pks.smem<6 x 16384>
// CHECK:       "pks.mbarrier_alloc"() : () -> !pks.mbarriers<6, 1>
// CHECK:       "pks.mbarrier_alloc"() : () -> !pks.mbarriers<6, 2>
// CHECK:       "pks.tile_loop"
// CHECK:         "pks.mbarrier_wait"
// CHECK:         "pks.mbarrier_arrive"{{.*}}tx_bytes = #builtin.int<32768>
// CHECK:         "pks.tma_load"
// CHECK:       kind = "producer", first = #builtin.int<0>, warpgroups = #builtin.int<1>, regs = #builtin.int<40>, single_thread
// CHECK:         "pks.mma_async"{{.*}}b_major = "k"
// CHECK-NEXT:    "pks.mma_commit"
// CHECK-NEXT:    "pks.mma_wait"() {pending = #builtin.int<1>}
// CHECK:         "pks.acc_store_smem"
// CHECK:         "pks.tma_store"
// CHECK:       kind = "consumer", first = #builtin.int<1>, warpgroups = #builtin.int<2>, regs = #builtin.int<232>

// PTX:       .extern .shared .align 1024 .b8 pk_smem[];
// PTX:       .param .align 64 .b8 tmap0[128]
// PTX:       setmaxnreg.dec.sync.aligned.u32 40;
// PTX:       prefetch.tensormap
// PTX:       mbarrier.try_wait.parity.shared::cta.b64
// PTX:       cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// PTX:       setmaxnreg.inc.sync.aligned.u32 232;
// PTX:       wgmma.fence.sync.aligned;
// PTX-COUNT-4: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16
// PTX:       wgmma.commit_group.sync.aligned;
// PTX:       wgmma.wait_group.sync.aligned 1;
// PTX:       cvt.rn.bf16x2.f32
// PTX:       cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group
