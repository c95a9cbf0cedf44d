// Clusters of two CTA pairs with TMA multicast (sm_100a; unmeasured, no Blackwell GPU has
// run them): the tuning table takes a 2x2 cluster (two pairs side by side, A multicast)
// for a large [N, K] GEMM and a 4x1 cluster (two pairs one above the other, B multicast)
// for a tall one of one column block. The schedule says so: a pks.schedule of 4 CTAs,
// tile loops with cluster_n, one pks.tma_load with pair_multicast (the shared operand's
// half, to the CTA at the same place of both pairs) and the stage release committed to
// both pairs (pks.mma_commit_arrive pair_multicast = 0b11, empty of 2 arrivals); the PTX
// has the multicast .cta_group::2 TMA load and commit (emulated in
// tests/unit/test_sm100_multicast.py).
// RUN: pkc-opt -p 'schedule-matmul{target=b200},dce' --split-input-file %s | FileCheck %s
// RUN: pkc-opt -p 'schedule-matmul,dce' --emit=ptx --target=sm_100a --split-input-file %s | FileCheck %s --check-prefix=PTX

func.func @a2x2(%x: tensor<4096x512xbf16>, %w: tensor<4096x512xbf16>) -> tensor<4096x4096xbf16> {
  %wt = pk.transpose %w {perm = [1, 0]} : tensor<4096x512xbf16> -> tensor<512x4096xbf16>
  %y = pk.matmul %x, %wt : (tensor<4096x512xbf16>, tensor<512x4096xbf16>) -> tensor<4096x4096xbf16>
  func.return %y : tensor<4096x4096xbf16>
}

// CHECK-LABEL: func.func @a2x2
// CHECK:       pk.kernel "matmul"(%x, %w) {{.*}}cluster = 4 : i64{{.*}}cta_group = 2 : i64{{.*}}cluster_shape = "2x2", multicast = "a"
// CHECK-SAME:  clusters of two pairs (2x2, A multicast
// CHECK-SAME:  L2-to-SM traffic per SM halves: 192 -> 128 operand rows per CTA per k-block
// CHECK:       "pks.mbarrier_alloc"() : () -> !pks.mbarriers<8, 2>
// CHECK:       "pks.tma_load"{{.*}}{pair_multicast = #builtin.int<3>} : (!pks.tmap<bf16, 64x64, swizzle 128>
// CHECK:       cluster_n = #builtin.int<2>}
// CHECK:       "pks.mma_commit_arrive"{{.*}}{pair_multicast = #builtin.int<3>} : (!pks.mbarriers<8, 2>, i32)
// CHECK:       {threads = #builtin.int<384>, cluster = #builtin.int<4>,

// PTX:       .reqnctapercluster 4, 1, 1
// PTX:       tcgen05.alloc.cta_group::2.sync.aligned.shared::cta.b32
// PTX:       cp.async.bulk.tensor.2d.cta_group::2.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster
// PTX:       tcgen05.mma.cta_group::2.kind::f16
// PTX:       tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64

// -----

func.func @b4x1(%x: tensor<65536x512xbf16>, %w: tensor<64x512xbf16>) -> tensor<65536x64xbf16> {
  %wt = pk.transpose %w {perm = [1, 0]} : tensor<64x512xbf16> -> tensor<512x64xbf16>
  %y = pk.matmul %x, %wt : (tensor<65536x512xbf16>, tensor<512x64xbf16>) -> tensor<65536x64xbf16>
  func.return %y : tensor<65536x64xbf16>
}

// CHECK-LABEL: func.func @b4x1
// CHECK:       pk.kernel "matmul"(%x, %w) {{.*}}cluster_shape = "4x1", multicast = "b"
// CHECK-SAME:  clusters of two pairs (4x1, B multicast
// CHECK:       "pks.tma_load"{{.*}} : (!pks.tmap<bf16, 64x128, swizzle 128>
// CHECK:       "pks.tma_load"{{.*}}{pair_multicast = #builtin.int<3>} : (!pks.tmap<bf16, 64x16, swizzle 128>
// CHECK-NOT:   cluster_n
// CHECK:       {threads = #builtin.int<384>, cluster = #builtin.int<4>,

// PTX:       .reqnctapercluster 4, 1, 1
// PTX:       clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes.multicast::cluster::all.b128
// PTX:       cp.async.bulk.tensor.2d.cta_group::2.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster
