// RUN: pkc-opt %s -p 'default{force=true}' --kernels -o /dev/null 2>&1 | FileCheck %s
// RUN: pkc-opt %s -p 'default{force=true}' --kernels --target=sm_100a -o /dev/null 2>&1 | FileCheck %s --check-prefix=B200
// RUN: pkc-opt %s --kernels -o /dev/null 2>&1 | FileCheck %s --check-prefix=NONE
// RUN: not pkc-opt %s --fast-path 2>&1 | FileCheck %s --check-prefix=GONE

// --kernels: per pk.kernel of what the GPU runs (after the schedule stage), the scheduled
// kernel it becomes (the deciding pass's remark), or the portable path and why.
// CHECK: kernels.mlir:{{[0-9]+}}:3: remark: [kernels] @matmul_reduce_scatter: scheduled GEMM + reduce-scatter W=2
// CHECK: remark: [kernels] @all_gather_matmul: scheduled
// CHECK: remark: [kernels] @all_reduce_ll: scheduled collective ll
// CHECK: remark: [kernels] @all_gather_{{[a-z_]+}}: portable path (collective left unscheduled: all_gather along a non-leading dim
// sm_100a: the schedule stage runs for the b200 target (tensor-memory GEMMs, the collectives)
// B200: remark: [kernels] @matmul_reduce_scatter: scheduled GEMM + reduce-scatter W=2 {{.*}}sm_100a kernel: tcgen05
// B200: remark: [kernels] @all_reduce_ll: scheduled collective ll W=2
// NONE: kernels.mlir: remark: no pk.kernel
// GONE: error: --fast-path was removed
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
