// overlap on fp8 scaled matmuls: an all_gather of A and one of its row-wise scale feeding
// pk.scaled_matmul become ONE kernel that gathers both (each rank puts its scale rows next
// to its row block, before the signal that says the block arrived) and scales every f32
// product tile by its row and column scales before the cast; a scaled matmul feeding a
// reduce_scatter becomes one kernel that scales each product tile before it travels.
// The remark names the fusion.
// RUN: pkc-opt -p 'overlap{force=true tile=16 tile-k=32 overlap=intra}' --remarks %s 2>&1 | FileCheck %s

// CHECK: overlap-fp8.mlir:{{[0-9]+}}:3: remark: [pk.kernel] fp8 scaled matmul (20x64xf8E4M3FN A, row-wise A scale, row-wise B scale): A's row-wise scale is gathered with A by the same kernel
// CHECK: overlap-fp8.mlir:{{[0-9]+}}:3: remark: [pk.kernel] fp8 scaled matmul (40x64xf8E4M3FN A, tensor-wise A scale, tensor-wise B scale): each f32 product tile is scaled before it travels

// CHECK-LABEL: func.func @ag_scaled
// CHECK-NOT:   pk.all_gather
// CHECK:       pk.kernel "all_gather_matmul"(%x, %sa, %b, %sb) {{.*}}scaled = true
// CHECK-NEXT:  ^bb0(%X: !pk.buffer<20x64xf8E4M3FN>, %SX: !pk.buffer<20x1xf32>, %B0: !pk.buffer<64x48xf8E4M3FN>, %SB0: !pk.buffer<1x48xf32>, %Y0: !pk.buffer<40x48xbf16>):
// CHECK:       %gathered_scale = pk.alloc : !pk.buffer<40x1xf32, symmetric>
// CHECK:       pk.put %shard, %stage[{{.*}}] to %{{.*}} : !pk.tile<16x32xf8E4M3FN>
// CHECK:       %scale = pk.load %SX[%c0, %c0] : !pk.buffer<20x1xf32> -> !pk.tile<16x1xf32>
// CHECK-NEXT:  pk.put %scale, %gathered_scale[{{.*}}] to %{{.*}} : !pk.tile<16x1xf32>, !pk.buffer<40x1xf32, symmetric>
// CHECK-NEXT:  {{.*}} = arith.muli
// CHECK-NEXT:  pk.signal %arrived
// CHECK:       pk.mma %{{.*}} : !pk.tile<16x32xf8E4M3FN>, !pk.tile<32x16xf8E4M3FN>, !pk.tile<16x16xf32> -> !pk.tile<16x16xf32>
// CHECK:       pk.tile_map "mul" %{{.*}} : (!pk.tile<16x16xf32>, !pk.tile<16x1xf32>) -> !pk.tile<16x16xf32>
// CHECK:       pk.tile_map "mul" %{{.*}} : (!pk.tile<16x16xf32>, !pk.tile<1x16xf32>) -> !pk.tile<16x16xf32>
// CHECK-NEXT:  pk.tile_map "cast" %{{.*}} : (!pk.tile<16x16xf32>) -> !pk.tile<16x16xbf16>
// The peer's rows are scaled by the gathered scale, read after the wait.
// CHECK:       pk.wait %arrived
// CHECK:       pk.load %gathered_scale[{{.*}}] : !pk.buffer<40x1xf32, symmetric> -> !pk.tile<16x1xf32>

// CHECK-LABEL: func.func @scaled_rs
// CHECK:       pk.kernel "matmul_reduce_scatter"(%a, %b, %sa, %sb) {{.*}}scaled = true
// CHECK-NEXT:  ^bb0(%A: !pk.buffer<40x64xf8E4M3FN>, %B: !pk.buffer<64x48xf8E5M2>, %SA: !pk.buffer<1xf32>, %SB: !pk.buffer<1xf32>, %O: !pk.buffer<20x48xbf16>):
// CHECK:       pk.mma %{{.*}} : !pk.tile<16x32xf8E4M3FN>, !pk.tile<32x16xf8E5M2>, !pk.tile<16x16xf32> -> !pk.tile<16x16xf32>
// CHECK:       pk.load %SA[%c0] : !pk.buffer<1xf32> -> !pk.tile<1xf32>
// CHECK-NEXT:  pk.tile_map "mul" %{{.*}} : (!pk.tile<16x16xf32>, !pk.tile<1xf32>) -> !pk.tile<16x16xf32>
// CHECK:       pk.put %{{.*}}, %recv[{{.*}}] to %{{.*}} : !pk.tile<16x16xf32>
// CHECK-NOT:   pk.reduce_scatter

func.func @ag_scaled(%x: tensor<20x64xf8E4M3FN>, %b: tensor<64x48xf8E4M3FN>, %sa: tensor<20x1xf32>, %sb: tensor<1x48xf32>) -> tensor<40x48xbf16> {
  %g = pk.all_gather %x {dim = 0 : i64, world = 2 : i64} : tensor<20x64xf8E4M3FN> -> tensor<40x64xf8E4M3FN>
  %gs = pk.all_gather %sa {dim = 0 : i64, world = 2 : i64} : tensor<20x1xf32> -> tensor<40x1xf32>
  %y = pk.scaled_matmul %g, %b scales(%gs, %sb) : (tensor<40x64xf8E4M3FN>, tensor<64x48xf8E4M3FN>, tensor<40x1xf32>, tensor<1x48xf32>) -> tensor<40x48xbf16>
  func.return %y : tensor<40x48xbf16>
}

func.func @scaled_rs(%a: tensor<40x64xf8E4M3FN>, %b: tensor<64x48xf8E5M2>, %sa: tensor<1xf32>, %sb: tensor<1xf32>) -> tensor<20x48xbf16> {
  %c = pk.scaled_matmul %a, %b scales(%sa, %sb) : (tensor<40x64xf8E4M3FN>, tensor<64x48xf8E5M2>, tensor<1xf32>, tensor<1xf32>) -> tensor<40x48xbf16>
  %o = pk.reduce_scatter %c {dim = 0 : i64, reduce = "sum", world = 2 : i64} : tensor<40x48xbf16> -> tensor<20x48xbf16>
  func.return %o : tensor<20x48xbf16>
}
