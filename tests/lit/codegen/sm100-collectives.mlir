// The schedule pipeline for an sm_100a target (b200): schedule-collectives builds the same
// scheduled collectives as for sm_90a (LL, two-shot, direct), with the B200's 148 SMs in
// the grid rule, and --emit=ptx --target=sm_100a prints them (assembled by ptxas and run
// by the emulator in tests/unit/test_emu_comm_sm100.py; no Blackwell GPU has run them).
// RUN: pkc-opt -p 'default{target=b200},schedule{target=b200}' --emit=ptx --target=sm_100a %s | FileCheck %s
// RUN: pkc-opt -p 'default{target=b200},schedule{target=b200}' --remarks %s -o /dev/null 2>&1 | FileCheck %s --check-prefix=REM
// RUN: not pkc-opt -p 'default{target=b200},schedule{target=b200}' --emit=ptx --target=sm_90a %s 2>&1 | FileCheck %s --check-prefix=ERR

// 768 B at W = 8: the LL all-reduce
func.func @small(%x: tensor<6x64xbf16>) -> tensor<6x64xbf16> {
  %y = pk.all_reduce %x {world = 8 : i64, reduce = "sum"} : tensor<6x64xbf16> -> tensor<6x64xbf16>
  func.return %y : tensor<6x64xbf16>
}
// 2 MiB: the two-shot all-reduce into a fresh output
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
// CHECK:       // pk.kernel @all_reduce_ar2 (sm_100a)
// CHECK:       .target sm_100a
// CHECK:       ld.global.cg.v4.b32
// CHECK:       red.relaxed.sys.global.add.u32
// CHECK:       // pk.kernel @all_gather_ag (sm_100a)
// CHECK:       // pk.kernel @reduce_scatter_rs (sm_100a)
// CHECK-NOT:   wgmma
// CHECK-NOT:   tcgen05

// REM:  scheduled collective ll W=8 bf16 (768 B <= the LL limit 65536 B at W = 8): 48 vectors (48 per chunk), up to 64 per CTA, 1 CTA(s) per SM, into a fresh output
// REM:  scheduled collective ar2 W=8 bf16 push gather
// REM:  scheduled collective ag W=8 bf16
// REM:  scheduled collective rs W=8 bf16

// ERR: kernel @all_reduce_ll: scheduled for 148 CTAs (1 per SM) but sm_90a has 132 SMs
