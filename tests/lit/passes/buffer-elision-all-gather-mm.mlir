// buffer-elision on overlap's AG+GEMM kernel: the staging buffer and the copy out of it go.
// Peers put their shard straight into the GEMM operand, which here is the kernel's gathered
// output (the pk.map needs it) and so becomes symmetric, and signal the consumer directly.
// RUN: pkc-opt -p 'overlap{force=true overlap=intra tile=16 tile-k=32},buffer-elision' %s | FileCheck %s

func.func @ag_mm(%x: tensor<20x32xbf16>, %wq: tensor<32x48xbf16>, %wk: tensor<32x16xbf16>) -> (tensor<40x48xbf16>, tensor<40x16xbf16>, tensor<40x32xbf16>) {
  %g = pk.all_gather %x {dim = 0 : i64, world = 2 : i64} : tensor<20x32xbf16> -> tensor<40x32xbf16>
  %q = pk.matmul %g, %wq : (tensor<40x32xbf16>, tensor<32x48xbf16>) -> tensor<40x48xbf16>
  %k = pk.matmul %g, %wk : (tensor<40x32xbf16>, tensor<32x16xbf16>) -> tensor<40x16xbf16>
  %n = pk.map "neg" %g : (tensor<40x32xbf16>) -> tensor<40x32xbf16>
  func.return %q, %k, %n : tensor<40x48xbf16>, tensor<40x16xbf16>, tensor<40x32xbf16>
}

// CHECK-LABEL: func.func @ag_mm
// CHECK:         "buffer-elision: removed staging stage (!pk.buffer<40x32xbf16, symmetric>): peers put their shards straight into the GEMM operand (symmetric), which the MMAs read as row blocks arrive, with no copy; that operand is the kernel's gathered output; outputs in symmetric memory"
// CHECK-NEXT:  ^bb0(%X: !pk.buffer<20x32xbf16>, %B0: !pk.buffer<32x48xbf16>, %B1: !pk.buffer<32x16xbf16>, %Y0: !pk.buffer<40x48xbf16, symmetric>, %Y1: !pk.buffer<40x16xbf16, symmetric>, %G: !pk.buffer<40x32xbf16, symmetric>):
// CHECK-NEXT:    %ready = pk.alloc_signals : !pk.signals<4>
// CHECK-NOT:     pk.alloc
// CHECK:         pk.worker "compute" {
// The own shard is stored into the gathered output once; remote shards are put by peers.
// CHECK:           pk.store %shard, %G[%{{.*}}, %c0] : !pk.tile<16x32xbf16>, !pk.buffer<40x32xbf16, symmetric>
// CHECK:           pk.put %shard_2, %G[%{{.*}}, %c0] to %[[Q:[0-9a-z_]+]] : !pk.tile<16x32xbf16>, !pk.buffer<40x32xbf16, symmetric>
// CHECK:           pk.signal %ready[%{{.*}}] to %[[Q]] : !pk.signals<4>
// CHECK:           pk.wait %ready[%{{.*}}] until %c1 : !pk.signals<4>
// CHECK:             %a_4 = pk.load %G[%{{.*}}, %c0] : !pk.buffer<40x32xbf16, symmetric> -> !pk.tile<16x32xbf16>
// CHECK-NOT:     pk.load %stage
// CHECK:         %n = pk.map "neg" %g
