// sm-partition reports a kernel whose workers cannot fit in the target's SMs, at the kernel.
// RUN: pkc-opt --split-input-file --verify-diagnostics %s -p sm-partition

func.func @too_many(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  // expected-error @+1 {{'pk.kernel' op sm-partition: kernel @huge plans 140 communicate SMs but h200 has 132}}
  %y = pk.kernel "huge" (%x) {world = 2 : i64, pk.plan = {comm_sms = 140 : i64}} : (tensor<8x8xf32>) -> tensor<8x8xf32> {
  ^bb0(%in: !pk.buffer<8x8xf32>, %out: !pk.buffer<8x8xf32>):
    pk.worker "communicate" {
      pk.yield
    }
    pk.yield
  }
  func.return %y : tensor<8x8xf32>
}

// -----

func.func @no_room_for_compute(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  // expected-error @+1 {{'pk.kernel' op sm-partition: kernel @greedy needs 136 SMs (1 communicate x 128 + 1 compute x >= 8) but h200 has 132}}
  %y = pk.kernel "greedy" (%x) {world = 2 : i64, pk.plan = {comm_sms = 128 : i64}} : (tensor<8x8xf32>) -> tensor<8x8xf32> {
  ^bb0(%in: !pk.buffer<8x8xf32>, %out: !pk.buffer<8x8xf32>):
    pk.worker "compute" {
      pk.yield
    }
    pk.worker "communicate" {
      pk.yield
    }
    pk.yield
  }
  func.return %y : tensor<8x8xf32>
}
