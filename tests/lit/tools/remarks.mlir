// RUN: pkc-opt %s -p lower-collectives,sm-partition --remarks -o /dev/null 2>&1 | FileCheck %s
// RUN: pkc-opt %s --remarks -o /dev/null 2>&1 | FileCheck %s --check-prefix=NONE

// Decisions are printed at the user's op (line 10), with the numbers behind them.
// CHECK: remarks.mlir:10:3: remark: [pk.kernel] all_reduce 2 KiB over 4 ranks: one-shot {{[0-9.]+}} us (two-shot {{[0-9.]+}} us)
// CHECK: remarks.mlir:10:3: remark: [pk.kernel] sm-partition: 8 communicate SMs of 132 (h200)
// NONE: remarks.mlir: remark: no decisions recorded
func.func @main(%x: tensor<16x64xbf16>, %w: tensor<64x64xbf16>) -> tensor<16x64xbf16> {
  %p = pk.matmul %x, %w : (tensor<16x64xbf16>, tensor<64x64xbf16>) -> tensor<16x64xbf16>
  %y = pk.all_reduce %p {reduce = "sum", world = 4 : i64} : tensor<16x64xbf16> -> tensor<16x64xbf16>
  func.return %y : tensor<16x64xbf16>
}
