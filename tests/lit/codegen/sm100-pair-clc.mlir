// The tuning table's two sm_100a GEMM arrangements beyond one CTA and a static tile loop
// (unmeasured; no Blackwell GPU has run them): [N, K] B with many row blocks gets CTA
// pairs (cta_group::2, plan cta_group = 2), [K, N] B past one wave of tiles gets cluster
// launch control (plan scheduler = "clc"); each prints its tcgen05 / clusterlaunchcontrol
// PTX (emulated in tests/unit/test_sm100_pair.py and test_sm100_clc.py).
// RUN: pkc-opt -p 'schedule-matmul{target=b200},dce' --split-input-file %s | FileCheck %s
// RUN: pkc-opt -p 'schedule-matmul,dce' --emit=ptx --target=sm_100a --split-input-file %s | FileCheck %s --check-prefix=PTX

func.func @pair(%x: tensor<2048x128xbf16>, %w: tensor<512x128xbf16>) -> tensor<2048x512xbf16> {
  %wt = pk.transpose %w {perm = [1, 0]} : tensor<512x128xbf16> -> tensor<128x512xbf16>
  %y = pk.matmul %x, %wt : (tensor<2048x128xbf16>, tensor<128x512xbf16>) -> tensor<2048x512xbf16>
  func.return %y : tensor<2048x512xbf16>
}

// CHECK-LABEL: func.func @pair
// CHECK:       pk.kernel "matmul"(%x, %w) {{.*}}cluster = 2 : i64{{.*}}cta_group = 2 : i64
// CHECK-SAME:  CTA pairs (cta_group::2
// CHECK:       kind = "mma"
// CHECK:       {threads = #builtin.int<384>, cluster = #builtin.int<2>,

// PTX:       .reqnctapercluster 2, 1, 1
// PTX:       tcgen05.alloc.cta_group::2.sync.aligned.shared::cta.b32
// PTX:       cp.async.bulk.tensor.2d.cta_group::2.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// PTX:       tcgen05.mma.cta_group::2.kind::f16
// PTX:       tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64
// PTX:       tcgen05.dealloc.cta_group::2.sync.aligned.b32

// -----

func.func @clc(%x: tensor<2048x128xbf16>, %w: tensor<128x4096xbf16>) -> tensor<2048x4096xbf16> {
  %y = pk.matmul %x, %w : (tensor<2048x128xbf16>, tensor<128x4096xbf16>) -> tensor<2048x4096xbf16>
  func.return %y : tensor<2048x4096xbf16>
}

// CHECK-LABEL: func.func @clc
// CHECK:       pk.kernel "matmul"(%x, %w) {{.*}}scheduler = "clc"
// CHECK-SAME:  cluster launch control
// CHECK:       "pks.smem_alloc"() : () -> !pks.smem<2 x 16>
// CHECK:       "pks.clc_tile_loop"
// CHECK:       issuer = #builtin.int<1>} : (i32, i32, !pks.smem<2 x 16>, !pks.mbarriers<2, 1>, !pks.mbarriers<2, 3>
// CHECK:       "pks.clc_tile_loop"
// CHECK:       issuer = #builtin.int<0>}

// PTX:       clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes.b128
// PTX:       clusterlaunchcontrol.query_cancel.is_canceled.pred.b128
// PTX:       tcgen05.mma.cta_group::1.kind::f16
