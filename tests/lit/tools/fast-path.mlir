// RUN: pkc-opt %s -p 'default{force=true}' --fast-path -o /dev/null 2>&1 | FileCheck %s
// RUN: pkc-opt %s -p 'default{force=true}' --fast-path --target=sm_100a -o /dev/null 2>&1 | FileCheck %s --check-prefix=B200
// RUN: pkc-opt %s --fast-path -o /dev/null 2>&1 | FileCheck %s --check-prefix=NONE

// Which hand-tuned sm_90a kernel the runtime runs each pk.kernel on, at the user's op.
// CHECK: fast-path.mlir:17:3: remark: [fast-path] @matmul_reduce_scatter: fast path: mm_rs W=2 bf16 M=256 N=1024 K=512 (bf16 accumulator)
// CHECK: fast-path.mlir:18:3: remark: [fast-path] @all_gather_matmul: fast path: ag_mm W=2 bf16 Mc=128 K=1024 N=[512] gathered=False
// CHECK: fast-path.mlir:20:3: remark: [fast-path] @all_reduce_one_shot: fast path: ll W=2 bf16 elems=131072
// CHECK: fast-path.mlir:21:3: remark: [fast-path] @all_gather_{{[a-z]+}}: general path (all_gather along a non-leading dim
// B200: remark: [fast-path] @matmul_reduce_scatter: general path (no fast kernels for sm_100a (sm_90a only))
// B200-NOT: fast path:
// NONE: fast-path.mlir: remark: no pk.kernel

func.func @main(%x: tensor<256x512xbf16>, %w: tensor<512x1024xbf16>, %w2: tensor<1024x512xbf16>, %v: tensor<64x32xbf16>)
    -> (tensor<256x512xbf16>, tensor<64x64xbf16>) {
  %h = pk.matmul %x, %w : (tensor<256x512xbf16>, tensor<512x1024xbf16>) -> tensor<256x1024xbf16>
  %r = pk.reduce_scatter %h {dim = 0 : i64, reduce = "sum", world = 2 : i64} : tensor<256x1024xbf16> -> tensor<128x1024xbf16>
  %g = pk.all_gather %r {dim = 0 : i64, world = 2 : i64} : tensor<128x1024xbf16> -> tensor<256x1024xbf16>
  %m = pk.matmul %g, %w2 : (tensor<256x1024xbf16>, tensor<1024x512xbf16>) -> tensor<256x512xbf16>
  %a = pk.all_reduce %m {reduce = "sum", world = 2 : i64} : tensor<256x512xbf16> -> tensor<256x512xbf16>
  %c = pk.all_gather %v {dim = 1 : i64, world = 2 : i64} : tensor<64x32xbf16> -> tensor<64x64xbf16>
  func.return %a, %c : tensor<256x512xbf16>, tensor<64x64xbf16>
}
