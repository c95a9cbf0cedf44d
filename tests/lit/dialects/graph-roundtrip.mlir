// RUN: pkc-opt %s | pkc-opt | FileCheck %s
// RUN: pkc-opt --print-op-generic %s | pkc-opt | FileCheck %s

// Every graph-level op prints in its custom form and parses back to the same IR.

// CHECK-LABEL: func.func @all_graph_ops
func.func @all_graph_ops(%x: tensor<8x16xbf16>, %w: tensor<16x32xbf16>, %b: tensor<32xbf16>) -> (tensor<8x32xf32>, tensor<32x32xbf16>, tensor<8x32xbf16>, tensor<8x4xbf16>, tensor<16x8xbf16>) {
  // CHECK: %h = pk.matmul %x, %w : (tensor<8x16xbf16>, tensor<16x32xbf16>) -> tensor<8x32xbf16>
  %h = pk.matmul %x, %w : (tensor<8x16xbf16>, tensor<16x32xbf16>) -> tensor<8x32xbf16>
  // CHECK-NEXT: %hb = pk.map "add" %h, %b : (tensor<8x32xbf16>, tensor<32xbf16>) -> tensor<8x32xbf16>
  %hb = pk.map "add" %h, %b : (tensor<8x32xbf16>, tensor<32xbf16>) -> tensor<8x32xbf16>
  // CHECK-NEXT: %g = pk.map "gelu_tanh" %hb : (tensor<8x32xbf16>) -> tensor<8x32xbf16>
  %g = pk.map "gelu_tanh" %hb : (tensor<8x32xbf16>) -> tensor<8x32xbf16>
  // CHECK-NEXT: %f = pk.map "cast" %g : (tensor<8x32xbf16>) -> tensor<8x32xf32>
  %f = pk.map "cast" %g : (tensor<8x32xbf16>) -> tensor<8x32xf32>
  // CHECK-NEXT: %half = pk.constant {value = 5.000000e-01 : f32} : tensor<f32>
  %half = pk.constant {value = 0.5 : f32} : tensor<f32>
  // CHECK-NEXT: %fs = pk.map "mul" %f, %half : (tensor<8x32xf32>, tensor<f32>) -> tensor<8x32xf32>
  %fs = pk.map "mul" %f, %half : (tensor<8x32xf32>, tensor<f32>) -> tensor<8x32xf32>
  // CHECK-NEXT: %m = pk.reduce "max" %fs {dims = [1 : i64], keepdim} : tensor<8x32xf32> -> tensor<8x1xf32>
  %m = pk.reduce "max" %fs {dims = [1], keepdim} : tensor<8x32xf32> -> tensor<8x1xf32>
  // CHECK-NEXT: %sm = pk.map "sub" %fs, %m : (tensor<8x32xf32>, tensor<8x1xf32>) -> tensor<8x32xf32>
  %sm = pk.map "sub" %fs, %m : (tensor<8x32xf32>, tensor<8x1xf32>) -> tensor<8x32xf32>
  // CHECK-NEXT: %r = pk.reshape %g : tensor<8x32xbf16> -> tensor<2x4x32xbf16>
  %r = pk.reshape %g : tensor<8x32xbf16> -> tensor<2x4x32xbf16>
  // CHECK-NEXT: %t = pk.transpose %r {perm = [2 : i64, 0 : i64, 1 : i64]} : tensor<2x4x32xbf16> -> tensor<32x2x4xbf16>
  %t = pk.transpose %r {perm = [2, 0, 1]} : tensor<2x4x32xbf16> -> tensor<32x2x4xbf16>
  // CHECK-NEXT: %e = pk.broadcast %b : tensor<32xbf16> -> tensor<8x32xbf16>
  %e = pk.broadcast %b : tensor<32xbf16> -> tensor<8x32xbf16>
  // CHECK-NEXT: %s = pk.slice %g {dim = 1 : i64, end = 12 : i64, start = 4 : i64, step = 2 : i64} : tensor<8x32xbf16> -> tensor<8x4xbf16>
  %s = pk.slice %g {dim = 1 : i64, end = 12 : i64, start = 4 : i64, step = 2 : i64} : tensor<8x32xbf16> -> tensor<8x4xbf16>
  // CHECK-NEXT: %c = pk.concat %g, %e {dim = 0 : i64} : (tensor<8x32xbf16>, tensor<8x32xbf16>) -> tensor<16x32xbf16>
  %c = pk.concat %g, %e {dim = 0 : i64} : (tensor<8x32xbf16>, tensor<8x32xbf16>) -> tensor<16x32xbf16>
  // CHECK-NEXT: %ar = pk.all_reduce %sm {reduce = "sum", world = 4 : i64} : tensor<8x32xf32> -> tensor<8x32xf32>
  %ar = pk.all_reduce %sm {reduce = "sum", world = 4 : i64} : tensor<8x32xf32> -> tensor<8x32xf32>
  // CHECK-NEXT: %ag = pk.all_gather %g {dim = 0 : i64, world = 4 : i64} : tensor<8x32xbf16> -> tensor<32x32xbf16>
  %ag = pk.all_gather %g {dim = 0 : i64, world = 4 : i64} : tensor<8x32xbf16> -> tensor<32x32xbf16>
  // CHECK-NEXT: %rs = pk.reduce_scatter %c {dim = 0 : i64, reduce = "sum", world = 4 : i64} : tensor<16x32xbf16> -> tensor<4x32xbf16>
  %rs = pk.reduce_scatter %c {dim = 0 : i64, reduce = "sum", world = 4 : i64} : tensor<16x32xbf16> -> tensor<4x32xbf16>
  // CHECK-NEXT: %a2a = pk.all_to_all %c {concat_dim = 1 : i64, split_dim = 0 : i64, world = 4 : i64} : tensor<16x32xbf16> -> tensor<4x128xbf16>
  %a2a = pk.all_to_all %c {concat_dim = 1 : i64, split_dim = 0 : i64, world = 4 : i64} : tensor<16x32xbf16> -> tensor<4x128xbf16>
  // CHECK-NEXT: %cs = pk.opaque "aten::cumsum"(%s) {spec = "{\22args\22: [{\22operand\22: 0}, 1], \22kwargs\22: {}}"} : (tensor<8x4xbf16>) -> tensor<8x4xbf16>
  %cs = pk.opaque "aten::cumsum"(%s) {spec = "{\22args\22: [{\22operand\22: 0}, 1], \22kwargs\22: {}}"} : (tensor<8x4xbf16>) -> tensor<8x4xbf16>
  // CHECK-NEXT: %tt = pk.transpose %c {perm = [1 : i64, 0 : i64]} : tensor<16x32xbf16> -> tensor<32x16xbf16>
  %tt = pk.transpose %c {perm = [1, 0]} : tensor<16x32xbf16> -> tensor<32x16xbf16>
  %tr = pk.slice %tt {dim = 0 : i64, end = 16 : i64, start = 0 : i64, step = 1 : i64} : tensor<32x16xbf16> -> tensor<16x16xbf16>
  %tr8 = pk.slice %tr {dim = 1 : i64, end = 8 : i64, start = 0 : i64, step = 1 : i64} : tensor<16x16xbf16> -> tensor<16x8xbf16>
  func.return %ar, %ag, %g, %cs, %tr8 : tensor<8x32xf32>, tensor<32x32xbf16>, tensor<8x32xbf16>, tensor<8x4xbf16>, tensor<16x8xbf16>
}
