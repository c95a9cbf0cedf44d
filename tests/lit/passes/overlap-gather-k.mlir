// overlap: an all-gather along the matmul's contraction dim K (the last dim of the lhs,
// directly or through the [rows, K] view a linear layer makes) fuses into one
// all_gather_k_matmul kernel (pattern all_gather_k_mm): a K loop over the W shards, the
// own one first, a peer's once its row block arrived. When the gathered tensor has other
// users the kernel returns it too ([rows, K], viewed back to its shape). A weight computed
// after the gathered tensor's first use stays unfused, and the remark says why.
// RUN: pkc-opt -p 'overlap{force=true}' --remarks %s 2>%t.err | FileCheck %s
// RUN: FileCheck %s --check-prefix=REM < %t.err

func.func @k2d(%x: tensor<40x24xbf16>, %w: tensor<48x16xbf16>) -> tensor<40x16xbf16> {
  %g = pk.all_gather %x {dim = 1 : i64, world = 2 : i64} : tensor<40x24xbf16> -> tensor<40x48xbf16>
  %y = pk.matmul %g, %w : (tensor<40x48xbf16>, tensor<48x16xbf16>) -> tensor<40x16xbf16>
  func.return %y : tensor<40x16xbf16>
}

// CHECK-LABEL: func.func @k2d
// CHECK: %y = pk.kernel "all_gather_k_matmul"(%x, %w) {{.*}}pattern = "all_gather_k_mm"{{.*}}gathered = false
// CHECK: ^bb0(%X: !pk.buffer<40x24xbf16>, %B0: !pk.buffer<48x16xbf16>, %Y0: !pk.buffer<40x16xbf16>):
// CHECK: pk.worker "compute"
// the own shard's product first (X, B's rows rank*24 ..), no wait
// CHECK: pk.load %X
// CHECK: pk.mma
// then the peer's shard: its row block's signal, its columns of the gathered operand
// CHECK: pk.wait %ready
// CHECK: pk.load %gathered
// CHECK: pk.mma
// CHECK: pk.worker "communicate"
// CHECK: pk.put {{.*}} %stage
// CHECK-NOT: pk.all_gather
// CHECK-NOT: pk.matmul
// CHECK: func.return %y

func.func @k3d(%x: tensor<2x5x24xbf16>, %w: tensor<72x16xbf16>) -> (tensor<10x16xbf16>, tensor<2x5x72xbf16>) {
  %g = pk.all_gather %x {dim = 2 : i64, world = 3 : i64} : tensor<2x5x24xbf16> -> tensor<2x5x72xbf16>
  %v = pk.reshape %g : tensor<2x5x72xbf16> -> tensor<10x72xbf16>
  %y = pk.matmul %v, %w : (tensor<10x72xbf16>, tensor<72x16xbf16>) -> tensor<10x16xbf16>
  func.return %y, %g : tensor<10x16xbf16>, tensor<2x5x72xbf16>
}

// CHECK-LABEL: func.func @k3d
// CHECK: %x_rows = pk.reshape %x : tensor<2x5x24xbf16> -> tensor<10x24xbf16>
// CHECK: %y, %g_rows = pk.kernel "all_gather_k_matmul"(%x_rows, %w) {{.*}}gathered = true
// CHECK: %g = pk.reshape %g_rows : tensor<10x72xbf16> -> tensor<2x5x72xbf16>
// CHECK: func.return %y, %g

func.func @late(%x: tensor<40x24xbf16>, %w0: tensor<16x48xbf16>) -> tensor<40x16xbf16> {
  %g = pk.all_gather %x {dim = 1 : i64, world = 2 : i64} : tensor<40x24xbf16> -> tensor<40x48xbf16>
  %n = pk.map "neg" %g : (tensor<40x48xbf16>) -> tensor<40x48xbf16>
  %w = pk.transpose %w0 {perm = [1, 0]} : tensor<16x48xbf16> -> tensor<48x16xbf16>
  %z = pk.matmul %g, %w : (tensor<40x48xbf16>, tensor<48x16xbf16>) -> tensor<40x16xbf16>
  func.return %z : tensor<40x16xbf16>
}

// The weight's transpose sits after the gathered tensor's first use (%n): overlap_hoist
// moves it before, and the matmul fuses (G returned for %n).
// CHECK-LABEL: func.func @late
// CHECK-NEXT: %w = pk.transpose %w0
// CHECK-NEXT: %z, %g = pk.kernel "all_gather_k_matmul"(%x, %w) {{.*}}gathered = true

// A weight that comes out of a collective issued after the first use does not move (each
// rank keeps its collectives' order): the gather stays unfused, with the reason.
func.func @late_collective(%x: tensor<40x24xbf16>, %w0: tensor<48x16xbf16>) -> tensor<40x16xbf16> {
  %g = pk.all_gather %x {dim = 1 : i64, world = 2 : i64} : tensor<40x24xbf16> -> tensor<40x48xbf16>
  %n = pk.map "neg" %g : (tensor<40x48xbf16>) -> tensor<40x48xbf16>
  %w = pk.all_reduce %w0 {reduce = "sum", world = 2 : i64} : tensor<48x16xbf16> -> tensor<48x16xbf16>
  %z = pk.matmul %g, %w : (tensor<40x48xbf16>, tensor<48x16xbf16>) -> tensor<40x16xbf16>
  func.return %z : tensor<40x16xbf16>
}

// CHECK-LABEL: func.func @late_collective
// CHECK: pk.all_gather
// CHECK: pk.matmul

// REM: overlap-gather-k.mlir:11:3: remark: [pk.kernel] fused all_gather(K)+mm (force=true overrides the cost model
// REM: overlap-gather-k.mlir:34:3: remark: [pk.kernel] fused all_gather(K)+mm
// REM: overlap-gather-k.mlir:47:3: remark: [pk.kernel] moved 1 op(s) computing a later matmul's operands before the gathered tensor's first use, so that matmul fuses too
// REM: overlap-gather-k.mlir:63:3: remark: [pk.all_gather] left unfused: all_gather(K)+mm: the weight is computed after the gathered tensor's first use (the fused kernel runs there)
