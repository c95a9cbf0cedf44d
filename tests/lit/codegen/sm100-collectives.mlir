// The schedule pipeline for an sm_100a target (b200): schedule-collectives builds the
// scheduled collectives (LL, direct; NVLS all-reduce / all-gather above the LL limits, the
// b200 having NVLS), with the B200's 148 SMs in the grid rule, and --emit=ptx
// --target=sm_100a prints them (assembled by ptxas and run by the emulator in
// tests/unit/test_emu_comm_sm100.py and test_multimem.py; no Blackwell GPU has run them).
// The h200 target never chooses NVLS (its machines keep NVLink multicast off).
// RUN: pkc-opt -p 'default{target=b200},schedule{target=b200}' --emit=ptx --target=sm_100a %s | FileCheck %s
// RUN: pkc-opt -p 'default{target=b200},schedule{target=b200}' --remarks %s -o /dev/null 2>&1 | FileCheck %s --check-prefix=REM
// RUN: not pkc-opt -p 'default{target=b200},schedule{target=b200}' --emit=ptx --target=sm_90a %s 2>&1 | FileCheck %s --check-prefix=ERR
// RUN: pkc-opt -p 'default{target=h200},schedule{target=h200}' --emit=ptx --target=sm_90a %s | FileCheck %s --check-prefix=H200

// 768 B at W = 8: the LL all-reduce
func.func @small(%x: tensor<6x64xbf16>) -> tensor<6x64xbf16> {
  %y = pk.all_reduce %x {world = 8 : i64, reduce = "sum"} : tensor<6x64xbf16> -> tensor<6x64xbf16>
  func.return %y : tensor<6x64xbf16>
}
// 2 MiB: the NVLS all-reduce (b200), the two-shot one (h200)
func.func @big(%x: tensor<1024x1024xbf16>) -> tensor<1024x1024xbf16> {
  %y = pk.all_reduce %x {world = 8 : i64, reduce = "sum"} : tensor<1024x1024xbf16> -> tensor<1024x1024xbf16>
  func.return %y : tensor<1024x1024xbf16>
}
func.func @gather(%x: tensor<1024x512xbf16>) -> tensor<8192x512xbf16> {
  %y = pk.all_gather %x {world = 8 : i64, dim = 0 : i64} : tensor<1024x512xbf16> -> tensor<8192x512xbf16>
  func.return %y : tensor<8192x512xbf16>
}
func.func @scatter(%x: tensor<8192x512xbf16>) -> tensor<1024x512xbf16> {
  %y = pk.reduce_scatter %x {world = 8 : i64, dim = 0 : i64, reduce = "sum"} : tensor<8192x512xbf16> -> tensor<1024x512xbf16>
  func.return %y : tensor<1024x512xbf16>
}

// CHECK:       // pk.kernel @all_reduce_ll (sm_100a)
// CHECK:       .target sm_100a
// CHECK:       .visible .entry all_reduce_ll(
// CHECK:       st.volatile.global.v4.b32
// CHECK:       // pk.kernel @all_reduce_armc (sm_100a)
// CHECK:       .target sm_100a
// CHECK:       .param .u64 alloc1_mc
// CHECK:       multimem.red.relaxed.sys.global.add.u32
// CHECK:       multimem.ld_reduce.relaxed.sys.global.add.acc::f32.v4.bf16x2
// CHECK:       multimem.st.relaxed.sys.global.v4.f32
// CHECK:       // pk.kernel @all_gather_agmc (sm_100a)
// CHECK:       multimem.st.relaxed.sys.global.v4.f32
// CHECK:       // pk.kernel @reduce_scatter_rs (sm_100a)
// CHECK-NOT:   wgmma
// CHECK-NOT:   tcgen05
// CHECK-NOT:   multimem

// REM:  scheduled collective ll W=8 bf16 (768 B <= the LL limit 65536 B at W = 8): 48 vectors (48 per chunk), up to 64 per CTA, 1 CTA(s) per SM, into a fresh output
// REM:  scheduled collective armc W=8 bf16 (2097152 B above the LL limit on a target with NVLS
// REM-SAME: predicted {{[0-9.]+}} us on b200 (two-shot {{[0-9.]+}} us)
// REM-SAME: result in symmetric memory, through NVLS (multimem on multicast objects)
// REM:  scheduled collective agmc W=8 bf16 (8388608 B above the LL limit
// REM:  scheduled collective rs W=8 bf16

// H200:      // pk.kernel @all_reduce_ll (sm_90a)
// H200:      // pk.kernel @all_reduce_ar2 (sm_90a)
// H200:      // pk.kernel @all_gather_ag (sm_90a)
// H200-NOT:  multimem

// ERR: kernel @all_reduce_ll: scheduled for 148 CTAs (1 per SM) but sm_90a has 132 SMs
