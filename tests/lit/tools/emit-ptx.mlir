// RUN: pkc-opt %s -p lower-collectives --emit=ptx | FileCheck %s
// RUN: pkc-opt %s -p lower-collectives --emit=ptx --target=sm_100a | FileCheck %s --check-prefix=SM100
// RUN: not pkc-opt %s --emit=ptx 2>&1 | FileCheck %s --check-prefix=NOKERNEL
// RUN: not pkc-opt %s -p lower-collectives --emit=ptx --target=sm_75 2>&1 | FileCheck %s --check-prefix=BADTARGET

// --emit=ptx prints what the GPU runs: on sm_90a the kernels taken to the schedule level
// (the `schedule` pipeline): this small all-reduce is the LL (flag-in-data) kernel.
// CHECK: // pk.kernel @all_reduce_ll (sm_90a)
// CHECK: .target sm_90a
// CHECK: .visible .entry all_reduce_ll(
// CHECK: ld.volatile.global.v4.b32
// CHECK: st.global.v4.b32
// SM100: .target sm_100a
// NOKERNEL: error: --emit=ptx: the module has no pk.kernel
// BADTARGET: error: codegen (sm_75):
func.func @main(%x: tensor<16x64xbf16>) -> tensor<16x64xbf16> {
  %y = pk.all_reduce %x {reduce = "sum", world = 4 : i64} : tensor<16x64xbf16> -> tensor<16x64xbf16>
  func.return %y : tensor<16x64xbf16>
}
