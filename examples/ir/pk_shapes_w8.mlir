// PK's shapes at W = 8 (ParallelKittens, arXiv 2511.13940): AG+GEMM N x N/8 x N,
// GEMM+RS and GEMM+AR N x N x N/8, N = 2048..32768, bf16. For the decisions:
//   pkc-opt examples/ir/pk_shapes_w8.mlir -p default --remarks -o /dev/null

func.func @ag_gemm_2048(%x: tensor<256x2048xbf16>, %w: tensor<2048x256xbf16>) -> tensor<2048x256xbf16> {
  %g = pk.all_gather %x {dim = 0 : i64, world = 8 : i64} : tensor<256x2048xbf16> -> tensor<2048x2048xbf16>
  %y = pk.matmul %g, %w : (tensor<2048x2048xbf16>, tensor<2048x256xbf16>) -> tensor<2048x256xbf16>
  func.return %y : tensor<2048x256xbf16>
}
func.func @gemm_rs_2048(%a: tensor<2048x256xbf16>, %b: tensor<256x2048xbf16>) -> tensor<256x2048xbf16> {
  %c = pk.matmul %a, %b : (tensor<2048x256xbf16>, tensor<256x2048xbf16>) -> tensor<2048x2048xbf16>
  %y = pk.reduce_scatter %c {dim = 0 : i64, reduce = "sum", world = 8 : i64} : tensor<2048x2048xbf16> -> tensor<256x2048xbf16>
  func.return %y : tensor<256x2048xbf16>
}
func.func @gemm_ar_2048(%a: tensor<2048x256xbf16>, %b: tensor<256x2048xbf16>) -> tensor<2048x2048xbf16> {
  %c = pk.matmul %a, %b : (tensor<2048x256xbf16>, tensor<256x2048xbf16>) -> tensor<2048x2048xbf16>
  %y = pk.all_reduce %c {reduce = "sum", world = 8 : i64} : tensor<2048x2048xbf16> -> tensor<2048x2048xbf16>
  func.return %y : tensor<2048x2048xbf16>
}
func.func @ag_gemm_4096(%x: tensor<512x4096xbf16>, %w: tensor<4096x512xbf16>) -> tensor<4096x512xbf16> {
  %g = pk.all_gather %x {dim = 0 : i64, world = 8 : i64} : tensor<512x4096xbf16> -> tensor<4096x4096xbf16>
  %y = pk.matmul %g, %w : (tensor<4096x4096xbf16>, tensor<4096x512xbf16>) -> tensor<4096x512xbf16>
  func.return %y : tensor<4096x512xbf16>
}
func.func @gemm_rs_4096(%a: tensor<4096x512xbf16>, %b: tensor<512x4096xbf16>) -> tensor<512x4096xbf16> {
  %c = pk.matmul %a, %b : (tensor<4096x512xbf16>, tensor<512x4096xbf16>) -> tensor<4096x4096xbf16>
  %y = pk.reduce_scatter %c {dim = 0 : i64, reduce = "sum", world = 8 : i64} : tensor<4096x4096xbf16> -> tensor<512x4096xbf16>
  func.return %y : tensor<512x4096xbf16>
}
func.func @gemm_ar_4096(%a: tensor<4096x512xbf16>, %b: tensor<512x4096xbf16>) -> tensor<4096x4096xbf16> {
  %c = pk.matmul %a, %b : (tensor<4096x512xbf16>, tensor<512x4096xbf16>) -> tensor<4096x4096xbf16>
  %y = pk.all_reduce %c {reduce = "sum", world = 8 : i64} : tensor<4096x4096xbf16> -> tensor<4096x4096xbf16>
  func.return %y : tensor<4096x4096xbf16>
}
func.func @ag_gemm_8192(%x: tensor<1024x8192xbf16>, %w: tensor<8192x1024xbf16>) -> tensor<8192x1024xbf16> {
  %g = pk.all_gather %x {dim = 0 : i64, world = 8 : i64} : tensor<1024x8192xbf16> -> tensor<8192x8192xbf16>
  %y = pk.matmul %g, %w : (tensor<8192x8192xbf16>, tensor<8192x1024xbf16>) -> tensor<8192x1024xbf16>
  func.return %y : tensor<8192x1024xbf16>
}
func.func @gemm_rs_8192(%a: tensor<8192x1024xbf16>, %b: tensor<1024x8192xbf16>) -> tensor<1024x8192xbf16> {
  %c = pk.matmul %a, %b : (tensor<8192x1024xbf16>, tensor<1024x8192xbf16>) -> tensor<8192x8192xbf16>
  %y = pk.reduce_scatter %c {dim = 0 : i64, reduce = "sum", world = 8 : i64} : tensor<8192x8192xbf16> -> tensor<1024x8192xbf16>
  func.return %y : tensor<1024x8192xbf16>
}
func.func @gemm_ar_8192(%a: tensor<8192x1024xbf16>, %b: tensor<1024x8192xbf16>) -> tensor<8192x8192xbf16> {
  %c = pk.matmul %a, %b : (tensor<8192x1024xbf16>, tensor<1024x8192xbf16>) -> tensor<8192x8192xbf16>
  %y = pk.all_reduce %c {reduce = "sum", world = 8 : i64} : tensor<8192x8192xbf16> -> tensor<8192x8192xbf16>
  func.return %y : tensor<8192x8192xbf16>
}
func.func @ag_gemm_16384(%x: tensor<2048x16384xbf16>, %w: tensor<16384x2048xbf16>) -> tensor<16384x2048xbf16> {
  %g = pk.all_gather %x {dim = 0 : i64, world = 8 : i64} : tensor<2048x16384xbf16> -> tensor<16384x16384xbf16>
  %y = pk.matmul %g, %w : (tensor<16384x16384xbf16>, tensor<16384x2048xbf16>) -> tensor<16384x2048xbf16>
  func.return %y : tensor<16384x2048xbf16>
}
func.func @gemm_rs_16384(%a: tensor<16384x2048xbf16>, %b: tensor<2048x16384xbf16>) -> tensor<2048x16384xbf16> {
  %c = pk.matmul %a, %b : (tensor<16384x2048xbf16>, tensor<2048x16384xbf16>) -> tensor<16384x16384xbf16>
  %y = pk.reduce_scatter %c {dim = 0 : i64, reduce = "sum", world = 8 : i64} : tensor<16384x16384xbf16> -> tensor<2048x16384xbf16>
  func.return %y : tensor<2048x16384xbf16>
}
func.func @gemm_ar_16384(%a: tensor<16384x2048xbf16>, %b: tensor<2048x16384xbf16>) -> tensor<16384x16384xbf16> {
  %c = pk.matmul %a, %b : (tensor<16384x2048xbf16>, tensor<2048x16384xbf16>) -> tensor<16384x16384xbf16>
  %y = pk.all_reduce %c {reduce = "sum", world = 8 : i64} : tensor<16384x16384xbf16> -> tensor<16384x16384xbf16>
  func.return %y : tensor<16384x16384xbf16>
}
func.func @ag_gemm_32768(%x: tensor<4096x32768xbf16>, %w: tensor<32768x4096xbf16>) -> tensor<32768x4096xbf16> {
  %g = pk.all_gather %x {dim = 0 : i64, world = 8 : i64} : tensor<4096x32768xbf16> -> tensor<32768x32768xbf16>
  %y = pk.matmul %g, %w : (tensor<32768x32768xbf16>, tensor<32768x4096xbf16>) -> tensor<32768x4096xbf16>
  func.return %y : tensor<32768x4096xbf16>
}
func.func @gemm_rs_32768(%a: tensor<32768x4096xbf16>, %b: tensor<4096x32768xbf16>) -> tensor<4096x32768xbf16> {
  %c = pk.matmul %a, %b : (tensor<32768x4096xbf16>, tensor<4096x32768xbf16>) -> tensor<32768x32768xbf16>
  %y = pk.reduce_scatter %c {dim = 0 : i64, reduce = "sum", world = 8 : i64} : tensor<32768x32768xbf16> -> tensor<4096x32768xbf16>
  func.return %y : tensor<4096x32768xbf16>
}
func.func @gemm_ar_32768(%a: tensor<32768x4096xbf16>, %b: tensor<4096x32768xbf16>) -> tensor<32768x32768xbf16> {
  %c = pk.matmul %a, %b : (tensor<32768x4096xbf16>, tensor<4096x32768xbf16>) -> tensor<32768x32768xbf16>
  %y = pk.all_reduce %c {reduce = "sum", world = 8 : i64} : tensor<32768x32768xbf16> -> tensor<32768x32768xbf16>
  func.return %y : tensor<32768x32768xbf16>
}
// A shape too small for overlap to pay: left unfused.
func.func @gemm_rs_tiny(%a: tensor<256x32xbf16>, %b: tensor<32x256xbf16>) -> tensor<32x256xbf16> {
  %c = pk.matmul %a, %b : (tensor<256x32xbf16>, tensor<32x256xbf16>) -> tensor<256x256xbf16>
  %y = pk.reduce_scatter %c {dim = 0 : i64, reduce = "sum", world = 8 : i64} : tensor<256x256xbf16> -> tensor<32x256xbf16>
  func.return %y : tensor<32x256xbf16>
}
