// overlap without force: the cost model (target h200) decides. A small GEMM+RS stays as it
// is, with the reason on the collective; PK's N = 8192 GEMM+RS (8192 x 8192 x 1024 per rank,
// W = 8) is fused with the predicted times (intra-SM: on H200 the epilogue's puts cost the
// MMA 2%, measured; inter-SM ties); a match that cannot be fused says why.
// RUN: pkc-opt --split-input-file -p overlap %s | FileCheck %s
// RUN: pkc-opt --split-input-file -p 'overlap{target=h100}' %s | FileCheck %s --check-prefix=H100

func.func @small(%a: tensor<64x64xbf16>, %b: tensor<64x64xbf16>) -> tensor<8x64xbf16> {
  %c = pk.matmul %a, %b : (tensor<64x64xbf16>, tensor<64x64xbf16>) -> tensor<64x64xbf16>
  %o = pk.reduce_scatter %c {dim = 0 : i64, reduce = "sum", world = 8 : i64} : tensor<64x64xbf16> -> tensor<8x64xbf16>
  func.return %o : tensor<8x64xbf16>
}
// CHECK-LABEL: func.func @small
// CHECK-NEXT:    %c = pk.matmul %a, %b
// CHECK-NEXT:    %o = pk.reduce_scatter %c {dim = 0 : i64, reduce = "sum", world = 8 : i64, pk.remarks = ["left unfused: predicted fused {{.*}} ms vs unfused {{.*}} ms, {{.*}}(too small for overlap to pay){{.*}}"], pk.plan = {pattern = "mm_reduce_scatter", fuse = false, {{.*}}}}
// CHECK-NOT:     pk.kernel

// -----

func.func @pk_n8192(%a: tensor<8192x1024xbf16>, %b: tensor<1024x8192xbf16>) -> tensor<1024x8192xbf16> {
  %c = pk.matmul %a, %b : (tensor<8192x1024xbf16>, tensor<1024x8192xbf16>) -> tensor<8192x8192xbf16>
  %o = pk.reduce_scatter %c {dim = 0 : i64, reduce = "sum", world = 8 : i64} : tensor<8192x8192xbf16> -> tensor<1024x8192xbf16>
  func.return %o : tensor<1024x8192xbf16>
}
// CHECK-LABEL: func.func @pk_n8192
// CHECK-NEXT:    %o = pk.kernel "matmul_reduce_scatter"(%a, %b) {{.*}}pk.plan = {pattern = "mm_reduce_scatter", fuse = true, overlap = "intra", comm_sms = 0 : i64, {{.*}} forced = false, target = "h200", M = 8192 : i64, N = "8192", K = 1024 : i64, {{.*}}, tile_m = 128 : i64, tile_n = 128 : i64, tile_k = 64 : i64}, pk.remarks = ["fused mm+reduce_scatter: predicted {{[0-9.]+}} ms vs {{[0-9.]+}} ms unfused; intra-SM, communication warp in every SM (vs inter-SM best {{[0-9.]+}} ms with 8 comm SMs)"]}
// CHECK-NEXT:    ^bb0(%A: !pk.buffer<8192x1024xbf16>, %B: !pk.buffer<1024x8192xbf16>, %O: !pk.buffer<1024x8192xbf16>):
// CHECK:           pk.worker "compute"
// CHECK-NOT:       pk.worker "communicate"
// H100-LABEL: func.func @pk_n8192
// H100:         pk.kernel "matmul_reduce_scatter"{{.*}}target = "h100"

// -----

func.func @max(%a: tensor<16x16xf32>, %b: tensor<16x16xf32>) -> tensor<16x16xf32> {
  %c = pk.matmul %a, %b : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  %o = pk.all_reduce %c {reduce = "max", world = 2 : i64} : tensor<16x16xf32> -> tensor<16x16xf32>
  func.return %o : tensor<16x16xf32>
}
// CHECK-LABEL: func.func @max
// CHECK:         pk.all_reduce %c {{.*}}pk.remarks = ["left unfused: mm+all_reduce: reduction \22max\22 (puts can only add)"]
