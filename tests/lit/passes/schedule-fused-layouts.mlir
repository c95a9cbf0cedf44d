// schedule-fused: a GEMM + reduce-scatter along columns (dim 1 of the 2-d product, or the
// last dim of a 3-d view) or along dim 1 of [B, S, N] (B blocks of rows) becomes the
// scheduled kernel with another tile ownership (pkc/passes/fused_rs_layouts.py):
// columns: W chunks of [R, Nc] tiles, the producer loads B's columns chunk*Nc + n0 and the
// epilogue stores / reduce-adds at the chunk's own n0 through the owner's [R, Nc] map;
// row blocks: the producer's row is (m0 / Sc) * W*Sc + chunk*Sc + m0 % Sc (64-row tiles
// where 128 do not divide Sc); where no tile divides Sc, each block is padded to whole
// tiles and the owner's output is seen as [B, Sc, N] by 3-D peer maps, which clip a tile
// at its block's end (the tile's block is the third coordinate of each store / add). A bias between the matmul and the
// scatter: the kernel takes it ([N]) and the scale 1.0 (a graph-level constant), and each
// tile's accumulator gets pks.acc_scale before its pieces are stored / reduce-added.
// RUN: pkc-opt -p 'default{force=true},schedule-fused,dce' %s | FileCheck %s
// RUN: pkc-opt -p 'default{force=true},schedule-fused,dce' --remarks %s 2>&1 >/dev/null | FileCheck %s --check-prefix=REM

func.func @cols(%a: tensor<150x24xbf16>, %w: tensor<24x272xbf16>) -> tensor<150x136xbf16> {
  %c = pk.matmul %a, %w : (tensor<150x24xbf16>, tensor<24x272xbf16>) -> tensor<150x272xbf16>
  %o = pk.reduce_scatter %c {dim = 1 : i64, reduce = "sum", world = 2 : i64} : tensor<150x272xbf16> -> tensor<150x136xbf16>
  func.return %o : tensor<150x136xbf16>
}

// CHECK-LABEL: func.func @cols
// CHECK:       pk.kernel "matmul_reduce_scatter"(%a, %w)
// CHECK-SAME:    scatter_dim = 1 : i64
// CHECK-NEXT:  ^bb0(%{{.*}}: !pk.buffer<150x24xbf16>, %{{.*}}: !pk.buffer<24x272xbf16>, %[[C:[0-9a-z_]+]]: !pk.buffer<150x136xbf16, symmetric>):
// CHECK:         "pks.peer_tmap"(%[[C]]) {peer = #builtin.int<0>}
// CHECK-NEXT:    "pks.peer_tmap"(%[[C]]) {peer = #builtin.int<1>}
// the producer: W chunks of [150, 136] tiles; B's column is chunk * 136 + n0
// CHECK:         %[[R:[0-9a-z_]+]] = arith.constant 150 : i32
// CHECK-NEXT:    %[[NC:[0-9a-z_]+]] = arith.constant 136 : i32
// CHECK:         "pks.chunk_tile_loop"(%[[R]], %[[NC]],
// CHECK-NEXT:    ^bb0(%[[M0:[0-9a-z_]+]]: i32, %[[N0:[0-9a-z_]+]]: i32, %[[CH:[0-9a-z_]+]]: i32,
// CHECK-NEXT:      %[[W:[0-9a-z_]+]] = arith.constant 136 : i32
// CHECK-NEXT:      %[[OFF:[0-9a-z_]+]] = arith.muli %[[CH]], %[[W]] : i32
// CHECK-NEXT:      %[[BCOL:[0-9a-z_]+]] = arith.addi %[[OFF]], %[[N0]] : i32
// CHECK:           arith.addi %{{.*}}, %[[BCOL]] : i32
// CHECK:           "pks.tma_load"(%{{[0-9]+}}, %{{[0-9]+}}, %[[M0]],
// the consumers store at the chunk's own column n0 (the first piece)
// CHECK:         "pks.chunk_tile_loop"
// CHECK-NEXT:    ^bb0(%{{[0-9]+}}: i32, %[[CN0:[0-9a-z_]+]]: i32, %{{[0-9]+}}: i32,
// CHECK:           "pks.tma_store_or_add"(%{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %[[CN0]],

func.func @seq(%a: tensor<256x24xbf16>, %w: tensor<24x16xbf16>) -> tensor<2x64x16xbf16> {
  %c = pk.matmul %a, %w : (tensor<256x24xbf16>, tensor<24x16xbf16>) -> tensor<256x16xbf16>
  %v = pk.reshape %c : tensor<256x16xbf16> -> tensor<2x128x16xbf16>
  %o = pk.reduce_scatter %v {dim = 1 : i64, reduce = "sum", world = 2 : i64} : tensor<2x128x16xbf16> -> tensor<2x64x16xbf16>
  func.return %o : tensor<2x64x16xbf16>
}

// CHECK-LABEL: func.func @seq
// CHECK:       %[[K:[0-9a-z_]+]] = pk.kernel "matmul_reduce_scatter"(%a, %w)
// CHECK-SAME:    batches = 2 : i64
// CHECK-SAME:    bm = 64 : i64
// CHECK-SAME:    chunk_rows = 128 : i64
// CHECK:         "pks.chunk_tile_loop"
// CHECK-NEXT:    ^bb0(%[[M0:[0-9a-z_]+]]: i32, %{{[0-9]+}}: i32, %[[CH:[0-9a-z_]+]]: i32,
// CHECK:           %[[B:[0-9a-z_]+]] = arith.divui %[[M0]], %{{.*}} : i32
// CHECK:           %[[I:[0-9a-z_]+]] = arith.remui %[[M0]], %{{.*}} : i32
// CHECK:           arith.muli %[[B]],
// CHECK:           arith.addi %{{.*}}, %[[CH]] : i32
// CHECK:       pk.reshape %[[K]] : tensor<128x16xbf16> -> tensor<2x64x16xbf16>

func.func @seq_odd(%a: tensor<200x24xbf16>, %w: tensor<24x16xbf16>) -> tensor<2x50x16xbf16> {
  %c = pk.matmul %a, %w : (tensor<200x24xbf16>, tensor<24x16xbf16>) -> tensor<200x16xbf16>
  %v = pk.reshape %c : tensor<200x16xbf16> -> tensor<2x100x16xbf16>
  %o = pk.reduce_scatter %v {dim = 1 : i64, reduce = "sum", world = 2 : i64} : tensor<2x100x16xbf16> -> tensor<2x50x16xbf16>
  func.return %o : tensor<2x50x16xbf16>
}

// CHECK-LABEL: func.func @seq_odd
// CHECK:       pk.kernel "matmul_reduce_scatter"(%a, %w)
// CHECK-NEXT:  ^bb0(%{{[0-9]+}}: !pk.buffer<200x24xbf16>, %{{[0-9]+}}: !pk.buffer<24x16xbf16>, %[[C:[0-9]+]]: !pk.buffer<100x16xbf16, symmetric>):
// CHECK:         "pks.peer_tmap"(%[[C]]) {peer = #builtin.int<0>, dims = [#builtin.int<2>, #builtin.int<50>, #builtin.int<16>]} : (!pk.buffer<100x16xbf16, symmetric>) -> !pks.tmap<bf16, 64x64x1, swizzle 128>
// the tile space pads each block to 128 rows: the tile's block and row inside it
// CHECK:         "pks.chunk_tile_loop"
// CHECK-NEXT:    ^bb0(%[[M0:[0-9]+]]: i32,
// CHECK-NEXT:      %[[P:[0-9]+]] = arith.constant 128 : i32
// CHECK-NEXT:      %[[B:[0-9]+]] = arith.divui %[[M0]], %[[P]] : i32
// CHECK:         "pks.tma_store_or_add"(%{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}) {{.*}} : (!pks.smem<{{.*}}>, i32, !pks.tmap<bf16, 64x64x1, swizzle 128>, i32, i32, i32, i1) -> ()

// REM: schedule-fused-layouts.mlir:17:3: remark: {{.*}}scheduled GEMM + reduce-scatter of column blocks (scatter_dim 1) W=2 150x272x24 bf16: {{.*}}rank p owns columns [p*136, (p+1)*136) of the 150x272 product; 2 chunks of 4 tiles
// REM: schedule-fused-layouts.mlir:45:3: remark: {{.*}}scheduled GEMM + reduce-scatter of row blocks of 2 batch blocks (3-D dim 1, Shard(1)) W=2 256x16x24 bf16: 64x128{{.*}}rank p owns rows [p*64, (p+1)*64) of each of the 2 blocks of 128 rows
// REM: schedule-fused-layouts.mlir:65:3: remark: {{.*}}scheduled GEMM + reduce-scatter of row blocks of 2 batch blocks (3-D dim 1, Shard(1)) W=2 200x16x24 bf16: {{.*}}rank p owns rows [p*50, (p+1)*50) of each of the 2 blocks of 100 rows (each block padded to 128 rows of tiles; the owner's output seen as [2, 50, 16] clips a tile at its block's end)

func.func @bias_rows(%a: tensor<74x24xbf16>, %w: tensor<24x40xbf16>, %bias: tensor<40xbf16>) -> tensor<37x40xbf16> {
  %c = pk.matmul %a, %w : (tensor<74x24xbf16>, tensor<24x40xbf16>) -> tensor<74x40xbf16>
  %d = pk.map "add" %c, %bias : (tensor<74x40xbf16>, tensor<40xbf16>) -> tensor<74x40xbf16>
  %o = pk.reduce_scatter %d {dim = 0 : i64, reduce = "sum", world = 2 : i64} : tensor<74x40xbf16> -> tensor<37x40xbf16>
  func.return %o : tensor<37x40xbf16>
}

// CHECK-LABEL: func.func @bias_rows
// CHECK:       %[[ONE:[0-9a-z_]+]] = pk.constant {value = 1.000000e+00 : f32} : tensor<1xf32>
// CHECK-NEXT:  pk.kernel "matmul_reduce_scatter"(%a, %w, %bias, %[[ONE]])
// CHECK-SAME:    bias = true
// CHECK-NEXT:  ^bb0(%{{[0-9]+}}: !pk.buffer<74x24xbf16>, %{{[0-9]+}}: !pk.buffer<24x40xbf16>, %[[BV:[0-9]+]]: !pk.buffer<40xbf16>, %[[S:[0-9]+]]: !pk.buffer<1xf32>, %{{[0-9]+}}: !pk.buffer<37x40xbf16, symmetric>):
// CHECK:         "pks.acc_scale"(%[[ACC:[0-9]+]], %[[S]], %[[S]], %[[BV]],
// CHECK:         "pks.acc_store_smem"(%[[ACC]],
// CHECK:         "pks.tma_store_or_add"
// REM: schedule-fused-layouts.mlir:87:3: remark: {{.*}}scheduled GEMM + reduce-scatter of row chunks with a bias W=2 74x40x24 bf16: {{.*}}every rank adds its bias to each f32 product tile before it travels
