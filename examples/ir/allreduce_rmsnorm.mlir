// all_reduce + residual add + RMSNorm, as pkc imports rms_norm(all_reduce(x) + res, w).
// Run: pkc-opt --load-pass-plugin examples/passes/fuse_allreduce_rmsnorm.py -p fuse-allreduce-rmsnorm
func.func @main(%x: tensor<16x64xbf16>, %res: tensor<16x64xbf16>, %w: tensor<64xbf16>) -> (tensor<16x64xbf16>, tensor<16x64xbf16>) {
  %ar = pk.all_reduce %x {world = 4 : i64, reduce = "sum"} : tensor<16x64xbf16> -> tensor<16x64xbf16>
  %r = pk.map "add" %ar, %res : (tensor<16x64xbf16>, tensor<16x64xbf16>) -> tensor<16x64xbf16>
  %rf = pk.map "cast" %r : (tensor<16x64xbf16>) -> tensor<16x64xf32>
  %two = pk.constant {value = 2.000000e+00 : f32} : tensor<1x1xf32>
  %sq = pk.map "pow" %rf, %two : (tensor<16x64xf32>, tensor<1x1xf32>) -> tensor<16x64xf32>
  %ms = pk.reduce "mean" %sq {dims = [1 : i64], keepdim} : tensor<16x64xf32> -> tensor<16x1xf32>
  %eps = pk.constant {value = 1.000000e-06 : f32} : tensor<1x1xf32>
  %me = pk.map "add" %ms, %eps : (tensor<16x1xf32>, tensor<1x1xf32>) -> tensor<16x1xf32>
  %inv = pk.map "rsqrt" %me : (tensor<16x1xf32>) -> tensor<16x1xf32>
  %n = pk.map "mul" %rf, %inv : (tensor<16x64xf32>, tensor<16x1xf32>) -> tensor<16x64xf32>
  %wf = pk.map "cast" %w : (tensor<64xbf16>) -> tensor<64xf32>
  %nw = pk.map "mul" %n, %wf : (tensor<16x64xf32>, tensor<64xf32>) -> tensor<16x64xf32>
  %y = pk.map "cast" %nw : (tensor<16x64xf32>) -> tensor<16x64xbf16>
  func.return %y, %r : tensor<16x64xbf16>, tensor<16x64xbf16>
}
