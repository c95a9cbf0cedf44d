// RUN: pkc-opt %s -p default --remarks -o /dev/null 2>&1 | FileCheck %s
// RUN: pkc-opt %s -p default | FileCheck %s --check-prefix=IR

// What the passes did not do says why (issue 19).

// An activation between the expert matmul and the combining all_to_all: MoE left unfused
// (the remark moves to the kernel that lower-collectives makes of that all_to_all).
// CHECK: remarks-not-done.mlir:[[# @LINE + 5]]:3: remark: [pk.kernel] left unfused: all_to_all+grouped_mm+all_to_all: the expert matmul's output goes through "gelu" before the combining all_to_all
func.func @moe_act(%x: tensor<12x32xf32>, %w: tensor<32x16xf32>) -> tensor<12x16xf32> {
  %d = pk.all_to_all %x {split_dim = 0 : i64, concat_dim = 0 : i64, world = 2 : i64} : tensor<12x32xf32> -> tensor<12x32xf32>
  %y = pk.matmul %d, %w : (tensor<12x32xf32>, tensor<32x16xf32>) -> tensor<12x16xf32>
  %a = pk.map "gelu" %y : (tensor<12x16xf32>) -> tensor<12x16xf32>
  %o = pk.all_to_all %a {split_dim = 0 : i64, concat_dim = 0 : i64, world = 2 : i64} : tensor<12x16xf32> -> tensor<12x16xf32>
  func.return %o : tensor<12x16xf32>
}

// Over one rank an all_reduce is the identity: removed, no kernel; the remark sits on the
// matmul and names the all_reduce's line.
// CHECK: remarks-not-done.mlir:[[# @LINE + 4]]:3: remark: [pk.matmul] removed pk.all_reduce at {{.*}}remarks-not-done.mlir:[[# @LINE + 5]]:3: over 1 rank it is the identity (no kernel launched)
// IR-LABEL: func.func @one_rank
// IR-NOT: pk.kernel
func.func @one_rank(%x: tensor<16x64xbf16>, %w: tensor<64x64xbf16>) -> tensor<16x64xbf16> {
  %p = pk.matmul %x, %w : (tensor<16x64xbf16>, tensor<64x64xbf16>) -> tensor<16x64xbf16>
  %y = pk.all_reduce %p {reduce = "sum", world = 1 : i64} : tensor<16x64xbf16> -> tensor<16x64xbf16>
  func.return %y : tensor<16x64xbf16>
}
// IR: func.return %p : tensor<16x64xbf16>
