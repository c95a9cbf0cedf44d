// fp8 on sm_100a (issue 20): schedule-matmul for a b200 target turns pk.scaled_matmul
// (torch's _scaled_mm) into the tensor-memory GEMM on 8-bit operands: 128-element
// k-blocks of e4m3 / e5m2 tensor maps, pks.mma_async {dtype, b_dtype}, pks.acc_scale on
// each epilogue piece; --emit=ptx --target=sm_100a prints tcgen05.mma kind::f8f6f4 and
// the scales applied after tcgen05.ld (assembled and emulated in
// tests/unit/test_sm100_fp8.py; no Blackwell GPU has run it). The h200 pipeline of the
// same function builds the wgmma kernel instead.
// RUN: pkc-opt -p 'schedule-matmul{target=b200},dce' %s | FileCheck %s
// RUN: pkc-opt -p 'schedule-matmul,dce' --emit=ptx --target=sm_100a %s | FileCheck %s --check-prefix=PTX
// RUN: pkc-opt -p 'schedule-matmul{target=h200},dce' --emit=ptx --target=sm_90a %s | FileCheck %s --check-prefix=SM90

func.func @smm(%a: tensor<200x160xf8E4M3FN>, %b: tensor<96x160xf8E5M2>, %sa: tensor<200x1xf32>, %sb: tensor<1x96xf32>, %bias: tensor<96xbf16>) -> tensor<200x96xbf16> {
  %bt = pk.transpose %b {perm = [1, 0]} : tensor<96x160xf8E5M2> -> tensor<160x96xf8E5M2>
  %y = pk.scaled_matmul %a, %bt scales(%sa, %sb) bias %bias : tensor<96xbf16> : (tensor<200x160xf8E4M3FN>, tensor<160x96xf8E5M2>, tensor<200x1xf32>, tensor<1x96xf32>) -> tensor<200x96xbf16>
  func.return %y : tensor<200x96xbf16>
}

// CHECK:       pk.kernel "scaled_matmul"(%a, %b, %sa, %sb, %bias) {{.*}}acc = "tmem"
// CHECK-SAME:  scheduled fp8 GEMM 200x96x160 e4m3 x e5m2 -> bf16: 128x64_s{{[0-9]+}}_tmem2_e4m3xe5m2
// CHECK-SAME:  tcgen05.mma kind::f8f6f4 into tensor memory, row-wise/row-wise scales, bias applied after tcgen05.ld
// CHECK:       "pks.tmap"(%{{.*}}) : (!pk.buffer<200x160xf8E4M3FN>) -> !pks.tmap<e4m3, 128x128, swizzle 128>
// CHECK-NEXT:  "pks.tmap"(%{{.*}}) : (!pk.buffer<96x160xf8E5M2>) -> !pks.tmap<e5m2, 128x64, swizzle 128>
// CHECK:       "pks.acc_alloc"() : () -> !pks.acc<128x64>
// CHECK:       kind = "producer"
// CHECK:         "pks.mma_async"{{.*}}{dtype = "e4m3", b_major = "k", b_dtype = "e5m2"}
// CHECK-NEXT:    "pks.mma_commit_arrive"
// CHECK:       kind = "mma", first = #builtin.int<1>, warpgroups = #builtin.int<1>, regs = #builtin.int<80>, single_thread
// CHECK:         "pks.acc_scale"({{.*}}) {{.*}} {piece = array<i64: 0, 0, 64>}
// CHECK-NEXT:    "pks.acc_store_smem"
// CHECK:         "pks.acc_scale"({{.*}}) {{.*}} {piece = array<i64: 1, 0, 64>}
// CHECK-NEXT:    "pks.acc_store_smem"
// CHECK:       kind = "epilogue", first = #builtin.int<2>, warpgroups = #builtin.int<1>, regs = #builtin.int<232>

// PTX:       // pk.kernel @scaled_matmul (sm_100a)
// PTX:       .target sm_100a
// PTX:       tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32
// PTX-COUNT-4: tcgen05.mma.cta_group::1.kind::f8f6f4 [%r{{[0-9]+}}], %rd{{[0-9]+}}, %rd{{[0-9]+}}, %r{{[0-9]+}}, %p{{[0-9]+}};
// PTX:       tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64
// PTX:       setmaxnreg.inc.sync.aligned.u32 232;
// PTX:       tcgen05.ld.sync.aligned.32x32b.x32.b32
// PTX-NEXT:  tcgen05.wait::ld.sync.aligned;
// PTX:       ld.global.nc.v4.b32
// PTX:       mul.rn.f32
// PTX:       add.rn.f32
// PTX:       cvt.rn.bf16x2.f32
// PTX:       tcgen05.dealloc.cta_group::1.sync.aligned.b32
// PTX-NOT:   wgmma
// PTX-NOT:   kind::f16

// SM90:      .target sm_90a
// SM90-NOT:  tcgen05
// SM90:      wgmma.mma_async.sync.aligned.m64n{{[0-9]+}}k32.f32.e4m3.e5m2
// SM90-NOT:  tcgen05
