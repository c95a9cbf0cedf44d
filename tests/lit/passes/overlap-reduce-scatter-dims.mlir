// overlap: a matmul followed by a reduce-scatter along columns (dim 1 of the 2-d product,
// or the last dim of its 3-d view) or along dim 1 of [B, S, N] (B blocks of rows, each
// scattered: DTensor sequence parallelism) is one staged kernel. Buffers holding one
// chunk are exactly a chunk wide, so a column tile overhanging the chunk is dropped.
// A bias add between the matmul and the scatter goes into the kernel (an input, added to
// every f32 product tile before it travels); an activation there leaves it unfused, with
// a remark.
// RUN: pkc-opt -p 'overlap{force=true tile=16 tile-k=16}' %s | FileCheck %s

func.func @cols(%a: tensor<40x32xbf16>, %b: tensor<32x24xbf16>) -> tensor<40x12xbf16> {
  %c = pk.matmul %a, %b : (tensor<40x32xbf16>, tensor<32x24xbf16>) -> tensor<40x24xbf16>
  %o = pk.reduce_scatter %c {dim = 1 : i64, reduce = "sum", world = 2 : i64} : tensor<40x24xbf16> -> tensor<40x12xbf16>
  func.return %o : tensor<40x12xbf16>
}

// CHECK-LABEL: func.func @cols
// CHECK:       pk.kernel "matmul_reduce_scatter"(%a, %b)
// CHECK-SAME:    gathered = false, scatter_dim = 1 : i64}
// CHECK-SAME:    -> tensor<40x12xbf16>
// CHECK:         %send = pk.alloc : !pk.buffer<80x12xf32>
// CHECK-NEXT:    %recv = pk.alloc {staging} : !pk.buffer<80x12xf32, symmetric>
// chunk p's tile reads B's columns p*12 + n0
// CHECK:         %[[P:[0-9a-z_]+]] = arith.remui
// CHECK:         arith.muli %[[P]], %c12 : index
// CHECK-NOT:   pk.reduce_scatter

func.func @seq(%a: tensor<24x32xbf16>, %b: tensor<32x16xbf16>) -> tensor<2x6x16xbf16> {
  %c = pk.matmul %a, %b : (tensor<24x32xbf16>, tensor<32x16xbf16>) -> tensor<24x16xbf16>
  %v = pk.reshape %c : tensor<24x16xbf16> -> tensor<2x12x16xbf16>
  %o = pk.reduce_scatter %v {dim = 1 : i64, reduce = "sum", world = 2 : i64} : tensor<2x12x16xbf16> -> tensor<2x6x16xbf16>
  func.return %o : tensor<2x6x16xbf16>
}

// CHECK-LABEL: func.func @seq
// CHECK:       %[[K:.*]] = pk.kernel "matmul_reduce_scatter"(%a, %b)
// CHECK-SAME:    gathered = false, batches = 2 : i64}
// CHECK-SAME:    -> tensor<12x16xbf16>
// CHECK:       pk.reshape %[[K]] : tensor<12x16xbf16> -> tensor<2x6x16xbf16>

func.func @bias(%a: tensor<24x32xbf16>, %b: tensor<32x16xbf16>, %bias: tensor<16xbf16>) -> tensor<2x6x16xbf16> {
  %c = pk.matmul %a, %b : (tensor<24x32xbf16>, tensor<32x16xbf16>) -> tensor<24x16xbf16>
  %d = pk.map "add" %c, %bias : (tensor<24x16xbf16>, tensor<16xbf16>) -> tensor<24x16xbf16>
  %v = pk.reshape %d : tensor<24x16xbf16> -> tensor<2x12x16xbf16>
  %o = pk.reduce_scatter %v {dim = 1 : i64, reduce = "sum", world = 2 : i64} : tensor<2x12x16xbf16> -> tensor<2x6x16xbf16>
  func.return %o : tensor<2x6x16xbf16>
}

// CHECK-LABEL: func.func @bias
// CHECK:       %[[BV:[0-9a-z_]+]] = pk.reshape %bias : tensor<16xbf16> -> tensor<1x16xbf16>
// CHECK:       pk.kernel "matmul_reduce_scatter"(%a, %b, %[[BV]])
// CHECK-SAME:    batches = 2 : i64, bias = true}
// CHECK-NEXT:  ^bb0(%A: !pk.buffer<24x32xbf16>, %B: !pk.buffer<32x16xbf16>, %bias{{[_0-9]*}}: !pk.buffer<1x16xbf16>, %O: !pk.buffer<12x16xbf16>):
// CHECK:         %[[T:[0-9a-z_]+]] = pk.load %bias{{[_0-9]*}}[%c0, %c0] : !pk.buffer<1x16xbf16> -> !pk.tile<1x16xbf16>
// CHECK-NEXT:    %[[T32:[0-9a-z_]+]] = pk.tile_map "cast" %[[T]]
// CHECK-NEXT:    %biased = pk.tile_map "add" %{{[0-9a-z_]+}}, %[[T32]] : (!pk.tile<6x16xf32>, !pk.tile<1x16xf32>) -> !pk.tile<6x16xf32>
// CHECK:         pk.store %biased, %send
// CHECK-NOT:   pk.reduce_scatter

func.func @relu(%a: tensor<24x32xbf16>, %b: tensor<32x16xbf16>) -> tensor<2x6x16xbf16> {
  %c = pk.matmul %a, %b : (tensor<24x32xbf16>, tensor<32x16xbf16>) -> tensor<24x16xbf16>
  %d = pk.map "relu" %c : (tensor<24x16xbf16>) -> tensor<24x16xbf16>
  %v = pk.reshape %d : tensor<24x16xbf16> -> tensor<2x12x16xbf16>
  %o = pk.reduce_scatter %v {dim = 1 : i64, reduce = "sum", world = 2 : i64} : tensor<2x12x16xbf16> -> tensor<2x6x16xbf16>
  func.return %o : tensor<2x6x16xbf16>
}

// CHECK-LABEL: func.func @relu
// CHECK:       pk.matmul
// CHECK:       pk.reduce_scatter {{.*}}pk.remarks = ["left unfused: mm+reduce_scatter: the matmul's result goes through \22relu\22 before the reduce_scatter; the fused kernel sends GEMM tiles as they are produced and has no epilogue to apply it
