// Graph level: one rank's view of a tensor-parallel MLP over 4 ranks.
func.func @main(%x: tensor<16x64xbf16>, %w1: tensor<64x32xbf16>, %w2: tensor<32x64xbf16>) -> tensor<16x64xbf16> {
  %h = pk.matmul %x, %w1 : (tensor<16x64xbf16>, tensor<64x32xbf16>) -> tensor<16x32xbf16>
  %a = pk.map "gelu" %h : (tensor<16x32xbf16>) -> tensor<16x32xbf16>
  %p = pk.matmul %a, %w2 : (tensor<16x32xbf16>, tensor<32x64xbf16>) -> tensor<16x64xbf16>
  %y = pk.all_reduce %p {reduce = "sum", world = 4 : i64} : tensor<16x64xbf16> -> tensor<16x64xbf16>
  func.return %y : tensor<16x64xbf16>
}
